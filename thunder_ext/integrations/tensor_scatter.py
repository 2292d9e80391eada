"""``tensor_scatter_``: ONNX TensorScatter-24 (and its packed form) as one in-place indexed write.

``update[b, ..., s, ...]`` goes to ``cache[b, ..., write_indices[b] + s, ...]`` (modulo the cache length S
in circular mode); in the packed form, token t of sequence b (``cu_seqlens[b] <= t < cu_seqlens[b + 1]``)
goes to position ``write_indices[b] + t - cu_seqlens[b]`` of sequence b.

The write is one ``cache.index_put_`` with an index tensor for every axis up to ``axis``: the sequence
of each token on axis 0, ``arange`` on the axes between, the position on ``axis``. Under the jit the call
is one thunder symbol, ``tensor_scatter_``, which decomposes into that ``index_put`` and a ``copy_``: the
extension runs it in place. Shapes, dtypes and the axis are checked before anything runs (while tracing,
under the jit); what only the data reveals (a position past S, ``cu_seqlens`` that do not add up) is
checked by ``token_positions``, an op of its own that runs before the write: the write uses its result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import thunder.torch as ltorch
import torch
from thunder.core import dtypes
from thunder.core.langctxs import Languages, langctx
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.executors.torchex import ex as torch_ex

from thunder_ext.thunder026.tables import copy_into

MODES = ("linear", "circular")


def _fail(error: type[Exception], argument: str, text: str) -> Exception:
    return error(f"tensor_scatter_: `{argument}` {text}")


def _check_integer_vector(t, argument: str, length: int) -> None:
    dtype = dtypes.to_dtype(t.dtype)
    if not dtypes.is_exact_dtype(dtype) or dtypes.is_boolean_dtype(dtype):
        raise _fail(TypeError, argument, f"must be an integer tensor, got {t.dtype}")
    if tuple(t.shape) != (length,):
        raise _fail(ValueError, argument, f"must have shape ({length},), got {tuple(t.shape)}")


def _check_update(cache, update, axis: int, packed: bool) -> None:
    if update.dtype != cache.dtype or update.device != cache.device:
        like, got = f"{cache.dtype} on {cache.device}", f"{update.dtype} on {update.device}"
        raise _fail(TypeError, "update", f"must be {like} like `cache`, got {got}")
    shape, size = list(cache.shape), cache.shape[axis]
    rest = shape[1:axis] + shape[axis + 1:]
    if packed:
        expected = f"({', '.join(map(str, ['T', *rest]))})"
        ok = list(update.shape[1:]) == rest and update.ndim == cache.ndim - 1
    else:
        expected = f"({', '.join(str(d) if i != axis else 'n' for i, d in enumerate(shape))}) with n <= {size}"
        ok = update.ndim == cache.ndim and update.shape[axis] <= size
        ok = ok and [d for i, d in enumerate(update.shape) if i != axis] == shape[:axis] + shape[axis + 1:]
    if not ok:
        got = f"for a cache of shape {tuple(shape)}, got {tuple(update.shape)}"
        raise _fail(ValueError, "update", f"must have shape {expected} {got}")


def _checked_axis(cache, axis: int) -> int:
    if cache.ndim < 2:
        raise _fail(ValueError, "cache", f"must have a batch axis and a sequence axis, got shape {tuple(cache.shape)}")
    if not -cache.ndim <= axis < cache.ndim or axis % cache.ndim == 0:
        text = f"must name a sequence axis of the {cache.ndim}-D cache other than the batch axis 0, got {axis}"
        raise _fail(ValueError, "axis", text)
    return axis % cache.ndim


def _validate(cache, update, write_indices, axis: int, mode: str, cu_seqlens) -> int:
    """``axis`` made non-negative, after checking everything the shapes and dtypes decide."""
    if mode not in MODES:
        raise _fail(ValueError, "mode", f"must be one of {MODES}, got {mode!r}")
    axis = _checked_axis(cache, axis)
    batch = cache.shape[0]
    if write_indices is not None:
        _check_integer_vector(write_indices, "write_indices", batch)
    if cu_seqlens is not None:
        _check_integer_vector(cu_seqlens, "cu_seqlens", batch + 1)
    _check_update(cache, update, axis, packed=cu_seqlens is not None)
    return axis


def token_positions(
    write_indices: torch.Tensor, cu_seqlens: torch.Tensor | None, tokens: int, size: int, circular: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequence and the position of each update token: (B, ``tokens``) each, or (``tokens``,) in the
    packed form. Raises, naming the argument, where the data breaks the op's rules (thunder's trace runs
    this function as one op)."""
    write_indices = write_indices.long()  # an int8 start plus an offset must not wrap
    batch = write_indices.shape[0]
    if cu_seqlens is None:
        seq = torch.arange(batch, device=write_indices.device)[:, None].expand(batch, tokens)
        offset = torch.arange(tokens, device=write_indices.device).expand(batch, tokens)
        lengths = torch.full_like(write_indices, tokens)
    else:
        seq, offset, lengths = _packed_tokens(cu_seqlens.long(), tokens, size)
    pos = write_indices[seq] + offset
    if circular:
        return seq, pos % size
    past = (write_indices < 0) | (write_indices + lengths > size)
    if bool(past.any()):  # one read back when all is well
        b = int(past.nonzero()[0, 0])
        raise _fail(IndexError, f"write_indices[{b}]", f"= {int(write_indices[b])} with {int(lengths[b])} tokens "
                    f"writes outside the {size} positions of the cache in linear mode")  # fmt: skip
    return seq, pos


def _packed_tokens(cu_seqlens: torch.Tensor, tokens: int, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sequence of each token, its offset in its sequence, and the length of each sequence."""
    lengths = cu_seqlens.diff()
    rises = (cu_seqlens[0] == 0) & (cu_seqlens[-1] == tokens) & (lengths >= 0).all()
    fits = (lengths <= size).all()
    if not bool(rises & fits):  # one read back when all is well
        if not bool(rises):
            text = f"must rise from 0 to the {tokens} tokens of `update`, got {cu_seqlens.tolist()}"
        else:
            text = f"gives a sequence more tokens than the cache's {size} positions: {lengths.tolist()}"
        raise _fail(ValueError, "cu_seqlens", text)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=cu_seqlens.device), lengths, output_size=tokens)
    return seq, torch.arange(tokens, device=cu_seqlens.device) - cu_seqlens[seq], lengths


def _token_positions_meta(write_indices, cu_seqlens, tokens, size, circular):
    shape = (write_indices.shape[0], tokens) if cu_seqlens is None else (tokens,)
    return tuple(TensorProxy(like=write_indices, shape=shape, dtype=dtypes.int64) for _ in range(2))


# An op of thunder's PyTorch executor: always among the executors, so stock ``thunder.jit`` runs it too.
_token_positions_op = torch_ex.register_operator(
    "tensor_scatter_token_positions", meta=_token_positions_meta, fn=token_positions
)


@dataclass(frozen=True)
class _Ops:
    """The few operations the write is built from: PyTorch's in eager, thunder's while tracing."""

    arange: Callable
    zeros: Callable
    positions: Callable
    write: Callable  # (cache, indices, update) -> the written cache


_EAGER = _Ops(torch.arange, torch.zeros, token_positions, lambda cache, i, update: cache.index_put_(i, update))
# thunder writes every in-place op as its functional op and a final copy_: the extension's passes take
# that copy for the write (``copy_into``: thunder's ``_copy_`` as ``adapt_thunder`` leaves it).
_TRACED = _Ops(
    ltorch.arange,
    ltorch.zeros,
    _token_positions_op,
    lambda cache, i, update: copy_into(cache, ltorch.index_put(cache, i, update)),
)


def _indices(ops: _Ops, cache, seq, pos, axis: int) -> tuple:
    """One index tensor per axis up to ``axis``, broadcasting to the token grid of ``update``: (B, ...,
    n) or, packed, (T, ...). The token axes take seq and pos; each axis between takes its ``arange``."""
    grid = axis + seq.ndim - 1
    middle = [
        ops.arange(cache.shape[i], device=cache.device).view([1] * i + [cache.shape[i]] + [1] * (grid - 1 - i))
        for i in range(1, axis)
    ]
    if seq.ndim == 2:  # (B, n): the batch opens the grid, the n positions close it
        batch, n = pos.shape
        return (seq[:, 0].view([batch] + [1] * axis), *middle, pos.view([batch] + [1] * (axis - 1) + [n]))
    return (seq.view([-1] + [1] * (axis - 1)), *middle, pos.view([-1] + [1] * (axis - 1)))


def _scatter(ops: _Ops, cache, update, write_indices, axis: int, mode: str, cu_seqlens):
    axis = _validate(cache, update, write_indices, axis, mode, cu_seqlens)
    if write_indices is None:
        write_indices = ops.zeros(cache.shape[0], dtype=torch.int64, device=cache.device)
    tokens = update.shape[0] if cu_seqlens is not None else update.shape[axis]
    seq, pos = ops.positions(write_indices, cu_seqlens, tokens, cache.shape[axis], mode == "circular")
    return ops.write(cache, _indices(ops, cache, seq, pos, axis), update)


def tensor_scatter_(
    cache: torch.Tensor,
    update: torch.Tensor,
    write_indices: torch.Tensor | None = None,
    *,
    axis: int = -2,
    mode: str = "linear",
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Write ``update`` into ``cache`` in place at per-sequence positions, as ONNX TensorScatter-24 does.

    ``cache``: (B, ..., S, ...), ``axis`` pointing at S (never 0). ``update``: ``cache``'s shape with
    n <= S along ``axis``, or, with ``cu_seqlens`` (B + 1,), (T, *rest): the tokens of all sequences packed,
    ``rest`` being ``cache``'s shape without axes 0 and ``axis``. ``write_indices`` (B,): where each sequence
    starts writing (zeros if None). ``mode="linear"``: every write must fit in S; ``"circular"``: positions
    wrap modulo S. Bad input raises before anything is written. Returns ``cache``.
    """
    return _scatter(_EAGER, cache, update, write_indices, axis, mode, cu_seqlens)


def _tensor_scatter_meta(cache, update, write_indices=None, *, axis=-2, mode="linear", cu_seqlens=None):
    return _scatter(_TRACED, cache, update, write_indices, axis, mode, cu_seqlens)


# Under the jit, one in-place symbol of thunder's: thunder's interpreter traces a call of
# ``tensor_scatter_`` as this symbol (``adapt_thunder`` diverts it), whose
# decomposition ends in the ``copy_`` that the functionalizer makes one ``copy_to_out_``.
tensor_scatter_symbol = Symbol(
    name="tensor_scatter_",
    meta=langctx(Languages.TORCH)(_tensor_scatter_meta),
    id="thunder_ext.tensor_scatter_",
    is_prim=False,
    tags=(OpTags.IN_PLACE,),
)
