"""The extension's log, ``logging.getLogger("thunder_ext")``: what it compiles, at INFO.

A compilation takes seconds (about 12 s for the demo's 4-layer model on a CPU), so it is never silent: until
the program configures logging (a handler on the root logger), the records go to stderr. Silence them with
``logging.getLogger("thunder_ext").setLevel(logging.WARNING)``.

And one line of torch's that the package's import hides (``cuda_home_hidden``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator


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


class HideCudaHome(logging.Filter):
    """torch's "No CUDA runtime is found, using CUDA_HOME=..." (``torch.utils.cpp_extension``, logged when first
    imported where it finds a CUDA toolkit, or ``CUDA_HOME`` is set, and no GPU): the extension builds no C++
    extension, so it tells nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found, using CUDA_HOME=")


@contextlib.contextmanager
def cuda_home_hidden() -> Iterator[None]:
    """Within the block, ``torch.utils.cpp_extension``'s logger drops that line, and that line only."""
    log, hide = logging.getLogger("torch.utils.cpp_extension"), HideCudaHome()
    log.addFilter(hide)
    try:
        yield
    finally:
        log.removeFilter(hide)
