"""The extension's integrations with libraries around thunder, each plugged into the core through
``thunder_ext.hooks`` (the core never names them):

- ``optim``: ``thunder_ext.jit(optimizer.step)`` jits the functional update of SGD, Adam and AdamW;
- ``tensor_scatter``: ONNX TensorScatter-24 as one in-place write, ``thunder_ext.tensor_scatter_``;
- ``growing_cache`` (litgpt; ``buckets`` beside it): ``thunder_ext.set_kv_cache``, a KV cache that grows in
  buckets with what it holds;
- ``litgpt_moe``: litgpt's mixture of experts traced with static shapes (thunder 0.2.6 cannot trace litgpt's);
- ``hf_moe``: HF transformers' sparse mixture-of-experts blocks (Mixtral, Qwen3-MoE) the same way;
- ``hf_transformers``: ``thunder_ext.GrowingStaticCache`` and ``HFTransformersRecipe``; imported once the
  program has imported transformers, as are its hooks.

Importing this package registers the hooks; ``thunder_ext`` does on import.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from thunder.core.recipe import Lookaside

from thunder_ext.hooks import HOOKS
from thunder_ext.integrations import hf_moe, litgpt_moe
from thunder_ext.integrations.optim import JittedOptimizerStep, is_optimizer_step
from thunder_ext.integrations.tensor_scatter import tensor_scatter_, tensor_scatter_symbol
from thunder_ext.thunder026 import divert


def _optimizer_step(fn: Callable, jit: Callable[..., Callable], options: dict[str, Any]) -> Callable | None:
    return JittedOptimizerStep(fn.__self__, jit, **options) if is_optimizer_step(fn) else None


def _hf_transformers():
    """The HF integration where the program has imported transformers (no HF model exists without it), else None."""
    if "transformers" not in sys.modules:
        return None
    from thunder_ext.integrations import hf_transformers

    return hf_transformers


def _warn_that_generate_runs_uncompiled(fn: Callable, jitted: Callable) -> None:
    # patches ``jitted.generate`` (the object thunder_ext.jit returns), never the user's model
    if (hf := _hf_transformers()) is not None:
        hf.warn_that_generate_runs_uncompiled(fn, jitted)


def _use_growing_cache_by_default(fn: Callable) -> None:
    # patches the HF model whose forward ``fn`` is: its generate() then defaults to GrowingStaticCache (and logs so)
    if (hf := _hf_transformers()) is not None:
        hf.use_growing_cache_by_default(getattr(fn, "__self__", None))


def _dynamic_cache_lookasides() -> list[Lookaside]:
    hf = _hf_transformers()
    return [] if hf is None else [hf.dynamic_cache_lookaside()]


def _seeded_in_hf(obj: object) -> tuple[str, ...]:
    hf = _hf_transformers()
    return () if hf is None else hf.seeded_per_process(obj)


HOOKS.adaptations.append(lambda: divert(tensor_scatter_, tensor_scatter_symbol))
HOOKS.adaptations_once_imported.append(("litgpt.model", litgpt_moe.substitute_in))
HOOKS.adaptations_once_imported += [(module, hf_moe.substitute_in) for module in hf_moe.BLOCKS]
HOOKS.jit_replacements.append(_optimizer_step)
HOOKS.after_jit.append(_warn_that_generate_runs_uncompiled)
HOOKS.after_thunderfx.append(_use_growing_cache_by_default)
HOOKS.plugin_lookasides.append(_dynamic_cache_lookasides)
HOOKS.state_seeded.append(_seeded_in_hf)
