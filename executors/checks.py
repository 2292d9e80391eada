"""The run-time halves of the rules that refuse a call before anything runs, and the errors they raise.

A pass states each rule and puts its check into the trace; the check, an operator of the PyTorch executor
(``inplace_ex``), runs on every call and raises where the call breaks the rule:

- ``check_aliased_arguments``, ``check_arguments_apart_from_state``: in the prologue, arguments that share storage
  as thunder cannot represent, or with a tensor the function reaches another way where either is written
  (``transforms/aliased_arguments.py``; ``AliasedArgumentsError``);
- ``check_written_arguments_need_no_grad``: in the prologue, an argument that requires grad written in place
  (``transforms/grad_argument_writes.py``; eager's ``RuntimeError`` for a leaf, ``ArgumentWriteGradientError``);
- ``check_argument_containers``: in the prologue, the call's lists, tuples and dicts are the traced call's
  (``transforms/argument_containers.py``); a ``ValueError`` here is a cache miss, not the user's error;
- ``check_dense_argument``: first in the computation, an argument an nvFuser region writes is dense
  (``transforms/regions/nvfuser.py``, rule 7; ``NonDenseWriteError``).

Kept apart from the ops that compute (``executors/torch_inplace.py``); as there, this module imports no pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from thunder.core import prims
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import Symbol

from thunder_ext.executors.torch_inplace import inplace_ex


def _check_operator(check: Callable[..., None]) -> Symbol:
    """``check`` (``_check_<name>``) as the operator ``check_<name>``: traced as nothing (its meta returns None, with
    ``check``'s signature), run at each call, never removed as dead code."""
    meta = functools.wraps(check)(lambda *args, **kwargs: None)
    return inplace_ex.register_operator(check.__name__.lstrip("_"), meta=meta, fn=check, tags=(prims.OpTags.DONT_DCE,))


class AliasedArgumentsError(RuntimeError):
    """Two arguments share storage in a way thunder cannot represent; nothing was run or written."""


def _layout(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, stride {t.stride()}, offset {t.storage_offset()}"


def _representable(first: torch.Tensor, other: torch.Tensor) -> bool:
    if first.numel() != other.numel():
        return True  # traced as itself, not as a reshape of ``first``
    if (first.shape, first.stride(), first.storage_offset()) == (other.shape, other.stride(), other.storage_offset()):
        return True
    return first.is_contiguous() and other.is_contiguous() and first.storage_offset() == other.storage_offset()


def _check_aliased_arguments(args, kwargs, computation_args, groups: str) -> None:
    """The rule of ``transforms/aliased_arguments.py``, on one call's arguments."""
    flat, _ = tree_flatten((args, kwargs))
    for group in groups.split("-"):
        first, *others = positions = [int(i) for i in group.split(",")]
        members = {id(flat[i]) for i in positions}
        applied = [i for i in positions if i < len(computation_args)]
        holding = {j for j, a in enumerate(computation_args) if id(a) in members}
        misplaced = any(id(computation_args[i]) not in members for i in applied)  # a stranger made an alias
        unseen = len(holding) > 1 and not holding <= set(applied)  # aliases traced as unrelated tensors
        if misplaced or unseen:
            raise AliasedArgumentsError(
                f"thunder_ext.jit: arguments {', '.join(map(str, positions))} (flattened positions) share storage, "
                "and thunder 0.2.6 would apply that aliasing to the wrong arguments because the function does "
                "not use every argument, so nothing was run. Pass the tensor once."
            )
        for i in others:
            if not _representable(flat[first], flat[i]):
                raise AliasedArgumentsError(
                    f"thunder_ext.jit: arguments {first} and {i} (flattened positions) share storage as different "
                    f"views ({_layout(flat[first])}; {_layout(flat[i])}). thunder would compute with one as a "
                    "reshape of the other and give wrong values, so nothing was run. Pass the base tensor and "
                    "take the view inside the function."
                )


check_aliased_arguments = _check_operator(_check_aliased_arguments)


def _storage(t: object) -> int | None:
    """Where a plain strided tensor's storage lies (None for anything else, or an empty storage: all lie at 0)."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout is not torch.strided:  # a subclass may hold none
        return None
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


def _check_arguments_apart_from_state(computation_args, own: tuple[int, ...], state: tuple[int, ...],
                                      writes: dict[int, str]) -> None:  # fmt: skip
    """The second rule of ``transforms/aliased_arguments.py``, on one call: the computation's arguments at ``own``
    come from the call's, those at ``state`` from elsewhere; ``writes`` describes, by position, the first write
    into each one's storage."""
    mine: dict[int, int] = {}
    for i in own:
        if (where := _storage(computation_args[i])) is not None and (where not in mine or i in writes):
            mine[where] = i
    if not mine:
        return
    for i in state:
        j = mine.get(_storage(computation_args[i]))
        if j is not None and (what := writes.get(i) or writes.get(j)):
            raise AliasedArgumentsError(
                f"thunder_ext.jit: an argument ({_layout(computation_args[j])}) shares storage with a tensor the "
                f"function takes from elsewhere (a module's parameter or buffer, a global, a closure's cell), and "
                f"{what}, so nothing was run: the compiled program orders that write against readers of the same "
                "tensor only. Pass a copy (`.clone()`), or reach the tensor one way only."
            )


check_arguments_apart_from_state = _check_operator(_check_arguments_apart_from_state)


Containers = tuple  # (type's name, length or keys, ((key, Containers) of each element that is a container, ...))


def _key(k: object) -> object:
    """A dict's key as ``containers`` keeps it: a plain value, or else its object's identity (a tuple, as no plain
    key is): equal only in this process, for the same object."""
    return k if type(k) in (str, int, float, bool, type(None)) else ("id", id(k))


def containers(tree: object) -> Containers | None:
    """The list, tuple or dict ``tree`` and those nested in it, each with its type, its length (a dict: its keys, in
    order) and where in it the nested ones are; None for anything else."""
    if isinstance(tree, dict):
        size, items = tuple(map(_key, tree)), [(_key(k), v) for k, v in tree.items()]
    elif isinstance(tree, (list, tuple)):
        size, items = len(tree), enumerate(tree)
    else:
        return None
    return (type(tree).__qualname__, size, tuple((k, c) for k, v in items if (c := containers(v)) is not None))


def _held(tree: object, traced: Containers) -> bool:
    """Whether ``tree`` is a container as ``traced`` describes it, with its nested ones: only these are walked, so a
    list of tensors costs its length's comparison (each tensor the trace read is checked by thunder's prologue)."""
    name, size, nested = traced
    if type(tree).__qualname__ != name:
        return False
    if isinstance(tree, dict):
        keys = {_key(k): k for k in tree}
        return tuple(keys) == size and all(_held(tree[keys[k]], c) for k, c in nested)
    return len(tree) == size and all(_held(tree[k], c) for k, c in nested)


def _check_argument_containers(args, kwargs, traced: Containers) -> None:
    """The rule of ``transforms/argument_containers.py``, on one call."""
    if not _held((args, kwargs), traced):
        # a prologue that raises is a miss: thunder tries its next entry, or compiles this call
        raise ValueError(f"the arguments' lists, tuples and dicts are not the traced call's: {traced}")


check_argument_containers = _check_operator(_check_argument_containers)


class NonDenseWriteError(RuntimeError):
    """An nvFuser region would write an argument whose elements are not laid out densely (rule 7 of
    ``transforms/regions/nvfuser.py``); raised before anything runs."""


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill a block of its storage, one each, in some order of its axes."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _check_dense_argument(t: torch.Tensor, whole: bool, name: str, where: str) -> None:
    """``t``, the argument the trace names ``name``, is laid out as the nvFuser region that writes it (at ``where``) needs: dense
    (``whole``: the region writes all of it) or contiguous (it writes a slice of it); else ``NonDenseWriteError``."""
    if t.is_contiguous() or (whole and _dense(t)):
        return
    raise NonDenseWriteError(
        f"thunder_ext.jit: {where} writes the argument `{name}` ({_layout(t)}) in an nvFuser region, which writes "
        f"{'a tensor' if whole else 'a slice of a tensor'} right only where it is {'dense' if whole else 'contiguous'}, "
        "so nothing was run. Pass a contiguous tensor, or the base tensor and take the view inside the function."
    )


check_dense_argument = _check_operator(_check_dense_argument)

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."


class ArgumentWriteGradientError(RuntimeError):
    """A differentiated write into an argument that requires grad and is no leaf, whose gradient thunder 0.2.6 would
    lose; nothing was run or written."""


def _check_written_arguments_need_no_grad(computation_args, positions: tuple[int, ...], writes: tuple[str, ...]):
    """The rule of ``transforms/grad_argument_writes.py``, on one call's arguments."""
    for i, what in zip(positions, writes):
        if not computation_args[i].requires_grad:  # thunder's prologue checks it too; the rule does not lean on that
            continue
        if computation_args[i].is_leaf:
            raise RuntimeError(
                f"thunder_ext.jit: {what}, which is a leaf that requires grad, so nothing was run: {LEAF_ERROR}"
            )
        raise ArgumentWriteGradientError(
            f"thunder_ext.jit: {what}, which requires grad: eager makes the write part of its autograd history, but "
            "thunder 0.2.6 would give its value before the write no gradient, so nothing was run. Write into a "
            "clone taken inside the function, or call it under torch.no_grad() where no gradient is wanted."
        )


check_written_arguments_need_no_grad = _check_operator(_check_written_arguments_need_no_grad)
