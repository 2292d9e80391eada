"""The extension's log, ``logging.getLogger("thunder_ext")``: what it compiles, at INFO.

A compilation takes seconds (about 12 s for the demo's 4-layer model on a CPU), so it is never silent: until
the program configures logging (a handler on the root logger), the records go to stderr. Silence them with
``logging.getLogger("thunder_ext").setLevel(logging.WARNING)``.
"""

from __future__ import annotations

import logging
import sys


class _UntilConfigured(logging.StreamHandler):
    """stderr, while the root logger has no handler: once it has one, records reach it by propagation."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


logger = logging.getLogger("thunder_ext")
if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)
if not any(isinstance(h, _UntilConfigured) for h in logger.handlers):
    handler = _UntilConfigured(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
