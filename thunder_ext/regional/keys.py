"""What a repeated block's call must share with a recorded one to be replayed from it (``replay``).

A call is replayed only where it would trace the same bound symbols as the recorded call, with its own tensors:

1. **The module subtree has the same structure**: for each submodule its relative name, class (so the same
   ``forward``), ``training`` flag, parameter and buffer names with their metadata, child names and the names of
   its other attributes; and no hooks, no instance-level ``forward``, no ``torch.compile``.
2. **Its other attribute values are equal, or never read** by the recorded call: plain immutable values compared
   by type and value, a float with its sign (``0.0 == -0.0``, but ``1 / x`` tells them apart), anything else by
   identity (litgpt's ``block_idx`` differs per layer and is never read in ``forward``;
   ``apply_sliding_window_attention`` differs on some layers and is read, so those layers have a record of their
   own). An int the record used only to index a list from outside (HF's ``past_key_values.layers[self.layer_idx]``,
   ``module_calls.Selection``) may differ: the replay indexes the list with its own and compares what it selects as
   the record's reads (a tensor by its metadata, a plain value by value, the item by its class).
3. **Its arguments have the same tree, tensor metadata, Python values and aliasing.**
4. **What the recorded call read outside the subtree is unchanged** (attributes of a shared config, globals, items
   of existing containers), as thunder's interpreter sees them now, a tensor by identity; and grad and autocast are
   as they were. What a C function read unseen is not known: such a record is not replayed (``replay``).

How a module's tensors are found again on another module: the provenance of each, a chain of constant attribute
loads and subscripts from the module (``thunder026/module_calls.py``'s ``path_of``), which replay runs again through
the interpreter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.pytree import tree_flatten

from thunder_ext.thunder026.module_calls import NotReplayable, is_plain

# what every nn.Module holds in its __dict__ (hooks, member dicts, training), compared structurally
_MODULE_KEYS = frozenset(torch.nn.Module().__dict__)
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def exactly(v: Any) -> Any:
    """A plain value as a replay compares it: equal only where the traced code cannot tell them apart, so each
    member with its type (``(1,) == (True,)``) and each float with its sign (``0.0 == -0.0``)."""
    if isinstance(v, float):
        return (v, math.copysign(1.0, v))
    if isinstance(v, complex):
        return (exactly(v.real), exactly(v.imag))
    if type(v) in (tuple, frozenset):
        return type(v)((type(x), exactly(x)) for x in v)
    return v


def snapshot(v: Any) -> tuple:
    """What of ``v`` a replay relies on: a plain value by value (``exactly``); anything else, a tensor too, by
    identity (a replay keeps the record's proxy of a tensor read from outside the module, so another tensor there,
    such as one the model assigns between its layers, is another call)."""
    return ("plain", type(v), exactly(v)) if is_plain(v) else ("object", id(v))


def _tensor_meta(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (type(t), tuple(t.shape), t.dtype, t.device, t.requires_grad, t.layout)


@dataclass(frozen=True)
class ModuleKey:
    """A module subtree's structure (rule 1, equal or no replay) and its other attribute values (rule 2)."""

    structure: tuple
    values: dict[tuple[str, str], tuple]  # (relative path, attribute) -> its value, as compared
    paths: dict[int, str]  # id of each submodule -> its relative path


def module_key(module: torch.nn.Module) -> ModuleKey:
    """``module``'s key; raises ``NotReplayable`` where it has what a replay cannot reproduce (hooks...)."""
    structure, values, paths = [], {}, {}
    for path, m in module.named_modules(remove_duplicate=False):
        if any(getattr(m, k, None) for k in _HOOKS):
            raise NotReplayable("module hooks")
        if "forward" in m.__dict__ or "__call__" in m.__dict__:
            raise NotReplayable("a forward of the instance's own")
        if getattr(m, "_compiled_call_impl", None) is not None:
            raise NotReplayable("a torch.compile'd module")
        paths.setdefault(id(m), path)
        extra = tuple(k for k in m.__dict__ if k not in _MODULE_KEYS)
        structure.append((
            path, type(m), m.training,
            tuple((k, _tensor_meta(p)) for k, p in m._parameters.items()),
            tuple((k, _tensor_meta(b), k in m._non_persistent_buffers_set) for k, b in m._buffers.items()),
            tuple(m._modules), extra,
        ))  # fmt: skip
        for k in extra:
            v = m.__dict__[k]
            values[(path, k)] = ("tensor", _tensor_meta(v)) if isinstance(v, torch.Tensor) else snapshot(v)
    return ModuleKey(tuple(structure), values, paths)


def leaf_key(x: Any) -> tuple:
    """An argument's leaf as the replay key compares it (a tensor by its metadata)."""
    if isinstance(x, TensorProxy):
        return ("T", tuple(x.shape), x.dtype, x.device, x.requires_grad)
    if isinstance(x, NumberProxy):
        return ("N", type(x), exactly(x.value))
    if isinstance(x, Proxy):
        raise NotReplayable(f"an argument of type {type(x).__name__}")
    if isinstance(x, torch.Tensor):
        raise NotReplayable("a tensor argument thunder did not proxy")
    return ("P", type(x), exactly(x)) if is_plain(x) else ("O", id(x))


def arguments_key(args: tuple, kwargs: dict) -> tuple[tuple, list]:
    """The key of a call's (unwrapped) arguments (rule 3), and their leaves."""
    leaves, spec = tree_flatten((args, kwargs))
    first: dict[int, int] = {}
    aliasing = tuple(first.setdefault(id(x), i) for i, x in enumerate(leaves) if isinstance(x, Proxy))
    return (spec, tuple(leaf_key(x) for x in leaves), aliasing), leaves
