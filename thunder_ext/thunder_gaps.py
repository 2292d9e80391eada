"""What in-place workloads need and thunder 0.2.6 lacks: operators, registered through thunder's own tables,
and aliased arguments of other sizes.

The one place where the extension adds to thunder's globals; importing ``thunder_ext`` applies it, so
stock ``thunder.jit`` gains it too. Each entry is registered only where thunder has none.

- ``tensor % n``: thunder 0.2.6 defines ``TensorProxy.__mod__`` but registers no ``"mod"`` method, so
  the operator fails with ``TypeError: 'NoneType' object is not callable``. litgpt's sliding-window
  cache writes at ``input_pos % max_cache_len`` (a circular cache); Python's ``%`` on tensors is
  ``torch.remainder``.
- ``Tensor.fill_``: not defined at all.
- What ``torch.optim``'s updates need (``thunder_ext.optim``): the ``torch._foreach_*`` ops of SGD and
  Adam with ``foreach=True``, each traced as its op on every tensor of the list; ``Tensor.is_sparse``
  (False: thunder traces dense tensors); and ``torch.autograd.profiler.record_function``, the profiler's
  range around every ``Optimizer.step``, which does nothing under the jit (thunder cannot trace the op
  it calls).
- ``Tensor.copy_`` from a source that broadcasts to the target: thunder's ``_copy_`` converts the
  dtype but not the shape, and ``prims.copy_`` then refuses ("Shapes were expected to be the same"),
  where PyTorch broadcasts. ``_copy_`` is replaced by one that expands the source first.

One entry changes what thunder does, and only for the extension's compilations:

- Arguments that share storage at different sizes (``f(x, x[0])``) where the function writes in
  place: thunder's ``insert_alias_updates`` traces every argument of an alias group as the group's
  first, reshaped, which fails ("Attempting to reshape"). Where the compilation carries the
  extension's ``InplaceTransform``, it is replaced by one that keeps such an argument as itself and
  keeps the group in sync with ``update_aliases``, as thunder's main branch does since pull request
  #2760 ("inputs that view each other with different numel"). Stock ``thunder.jit`` keeps thunder's:
  with its torch.compile executor the fix would compute wrong values (torch.compile miscompiles a
  write of an input that another input aliases; the extension keeps such a write out of its regions:
  ``fusion_regions.torch_compile_write_blocker``, rule 5).
"""

import thunder
import thunder.core.update_aliases as update_aliases
import thunder.torch as ltorch
import torch
from thunder.core import prims
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import wrap_const
from thunder.core.jit_ext import (
    _general_jit_lookaside_map,
    ensure_recursive_proxies,
    interpreter_needs_wrap,
    record_source_loc_in_symbol_header,
    register_general_jit_lookaside,
)
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy, VariableInterface, unvariableify, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.torch.langctx import _method_name_to_fn_map, register_method

from thunder_ext.executors.torch_inplace import share_storage
from thunder_ext.transforms.transform import InplaceTransform

if "mod" not in _method_name_to_fn_map:
    register_method("mod", ltorch.remainder)


def divert(torch_fn, thunder_fn) -> None:
    """Trace calls of ``torch_fn`` as ``thunder_fn``, unless thunder has an entry for it: thunder's interpreter
    diverts torch functions through a lookaside table filled, once, from its function map when it loads,
    so a function registered later needs its entry made as thunder makes them."""
    if torch_fn not in _general_jit_lookaside_map:
        _general_jit_lookaside_map[torch_fn] = ensure_recursive_proxies(
            interpreter_needs_wrap(record_source_loc_in_symbol_header(thunder_fn))
        )


# ``Tensor.fill_`` is missing ("Unknown attribute fill_"): it is ``zero_`` with another value, and
# is written as thunder writes ``zero_``, with thunder's own ``_copy_``, so every pass sees a write.
if torch.fill_ not in ltorch._torch_to_thunder_function_map:

    @ltorch.torchsymbol(torch.fill_, is_method=True, tags=(OpTags.IN_PLACE,), out_of_place=ltorch.full_like)
    def fill_(a, value, /):
        return ltorch._copy_(a, ltorch.full_like(a, value))

    divert(torch.fill_, fill_)  # ``torch.fill_(t, v)``, the function, as well as the method


# Optimizers check ``p.grad.is_sparse`` before a step; thunder traces dense tensors only (as ``is_nested``).
if torch.Tensor.is_sparse not in ltorch._torch_to_thunder_function_map:

    @ltorch.torchsymbol(torch.Tensor.is_sparse, is_property=True, id="torch.is_sparse")
    def is_sparse(a, /):
        return False


# ``torch.optim.Optimizer.step`` runs inside ``torch.autograd.profiler.record_function``, whose ``__enter__``
# calls ``torch.ops.profiler._record_function_enter_new``, which thunder cannot trace ("is not registered").
# It only names a range for the profiler: under the jit, entering and leaving it does nothing.
@register_general_jit_lookaside(torch.autograd.profiler.record_function.__enter__)
def _record_function_enter(record_function):
    return record_function


@register_general_jit_lookaside(torch.autograd.profiler.record_function.__exit__)
def _record_function_exit(record_function, exc_type, exc_value, traceback):
    return wrap_const(None)


# ``torch._foreach_<op>(tensors, *operands)``, which optimizers run with ``foreach=True``: thunder 0.2.6 has none.
# Each is traced as its op on every tensor of the list, so every write is a write of its own that the
# passes see (a symbol of all of them would look like one write). An operand that is a list goes element by
# element; so does the ``scalars`` tensor of ``addcmul``/``addcdiv`` (one value per tensor, as optimizers
# stack their step sizes); any other tensor or number goes to every tensor.
def _foreach(op, scalars_position: int | None = None):
    def each(*args, **kwargs):
        n = len(next(a for a in args if isinstance(a, (list, tuple))))

        def at(a, position: int, i: int):
            if isinstance(a, (list, tuple)) or (position == scalars_position and isinstance(a, TensorProxy)):
                return a[i]
            return a

        results = [op(*(at(a, k, i) for k, a in enumerate(args)), **kwargs) for i in range(n)]
        return None if op.__name__.endswith("_") else results

    return each


def _addc(op, inplace: bool):
    """``t + value * op(t1, t2)``, where ``value`` may be a tensor (one of the stacked scalars)."""

    def addc(t, t1, t2, value=1):
        result = ltorch.add(t, ltorch.mul(op(t1, t2), value))
        return ltorch._copy_(t, result) if inplace else result

    addc.__name__ = f"addc{op.__name__}" + ("_" if inplace else "")
    return addc


def _maximum_(a, b):
    return ltorch._copy_(a, ltorch.maximum(a, b))


# torch function -> (its op on one tensor, the position of a ``scalars`` tensor that goes element by element)
_FOREACH = {
    **{f"_foreach_{name}": (getattr(ltorch, name), None) for name in (
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "lerp", "lerp_", "sqrt", "sqrt_",
        "neg", "neg_", "reciprocal", "reciprocal_", "pow", "maximum")},
    "_foreach_maximum_": (_maximum_, None),
    **{f"_foreach_addc{op.__name__}{suffix}": (_addc(op, inplace=bool(suffix)), 3)
       for op in (ltorch.mul, ltorch.div) for suffix in ("", "_")},
}  # fmt: skip
for _name, (_op, _scalars_position) in _FOREACH.items():
    divert(getattr(torch, _name), _foreach(_op, _scalars_position))


# ``ltorch.copy_`` (and ``zero_``, ``fill_``...) call the module's ``_copy_`` at trace time, so replacing it
# reaches every caller. A source that does not broadcast still fails, in ``expand``, naming both shapes.
_copy_same_shape = ltorch._copy_


def _copy_(a, b, /):
    if isinstance(b, TensorProxy) and b.shape != a.shape:
        b = ltorch.expand(b, a.shape)
    return _copy_same_shape(a, b)


ltorch._copy_ = _copy_


# Aliased arguments of different sizes: thunder's main branch fixed this (pull request #2760) by keeping an
# argument of another size as itself and seeding thunder's view groups with its alias group; this is
# that idea over thunder 0.2.6's pass. The trace assumes no layout of such an argument, so a later call
# with other views of the same shapes, which hits the same cache entry, computes right too.


def _split_alias_groups(
    trace: TraceCtx, alias_tensor_indices: list[list[int]]
) -> tuple[list[list[int]], list[set[VariableInterface]]]:
    """The positions of each alias group that thunder may trace as the group's first reshaped (those of
    its size, and positions past the computation's arguments, which thunder skips), and the arguments of
    each group that holds one of another size."""
    flat_args, _ = tree_flatten((trace.args, trace.kwargs))
    tensors = {i: a for i, a in enumerate(flat_args) if isinstance(a, TensorProxy)}
    reshaped, apart = [], []
    for group in alias_tensor_indices:
        members = [i for i in group if i in tensors]
        other_size = {i for i in members if tensors[i].numel != tensors[members[0]].numel}
        reshaped.append([i for i in group if i not in other_size])
        if other_size:
            apart.append({variableify(tensors[i]) for i in members})
    return reshaped, apart


_thunder_insert_alias_updates = update_aliases.insert_alias_updates


def insert_alias_updates(computation_trace: TraceCtx, alias_tensor_indices: list[list[int]]) -> TraceCtx:
    """thunder's, but ``_keep_apart`` where the extension compiles a call with arguments sharing storage at
    different sizes."""
    reshaped, apart = _split_alias_groups(computation_trace, alias_tensor_indices)
    cd = get_compile_data()
    if not apart or cd is None or not any(isinstance(t, InplaceTransform) for t in cd.transforms):
        return _thunder_insert_alias_updates(computation_trace, alias_tensor_indices)
    return _keep_apart(computation_trace, reshaped, apart)


def _keep_apart(
    computation_trace: TraceCtx, reshaped: list[list[int]], apart: list[set[VariableInterface]]
) -> TraceCtx:
    """thunder 0.2.6's ``insert_alias_updates``, each argument of another size than its group's first traced as itself.

    Rule: tensors that may share storage form a view group: a group of ``apart`` (an argument of the
    first's size stands there as thunder's reshape of the first), a view with its base. The arguments
    of a group of ``apart`` are renamed once, before their first use, by ``share_storage``, which tells
    the extension's passes that they share storage. Where a group holds a tensor written in place, every
    in-place op on a member, every view of one and every other op that reads one is preceded by
    ``update_aliases`` of the members met so far (the arguments count as met from the start), whose
    results stand for those members from then on: no reader of a member can run before a write through
    another, nor a write before it.
    """
    if not any(map(update_aliases._is_inplace_op, computation_trace.bound_symbols)):
        return computation_trace
    computation_trace, stand_ins = update_aliases.replace_args_with_alias_map(computation_trace, reshaped)
    groups = [{variableify(stand_ins[v]) if v in stand_ins else v for v in group} for group in apart]
    encountered = {v for group in apart for v in group if v not in stand_ins}

    written = set()
    for bsym in computation_trace.bound_symbols:
        inplace = update_aliases._is_inplace_op(bsym)
        if inplace or update_aliases._is_view_creation_op(bsym):
            base = variableify(bsym.flat_proxy_args[0])
            views = set() if inplace else {variableify(t) for t in bsym.flat_proxy_outs if isinstance(t, TensorProxy)}
            if inplace:
                written.add(base)
            group = next((g for g in groups if base in g), None)
            if group is None:
                groups.append({base, *views})
            else:
                group.update(views)
    groups = [g for g in groups if g & written]
    viewed = set().union(*groups)

    swap_map: dict[VariableInterface, TensorProxy] = {}
    bsyms = []
    unstated = [[v for v in group if v not in stand_ins] for group in apart]
    # thunder's autograd knows no share_storage; the extension leaves a trace that needs it to thunder
    needs_autograd = any(isinstance(a, TensorProxy) and a.requires_grad for a in computation_trace.args)
    rename = prims.update_aliases if needs_autograd else share_storage
    for bsym in computation_trace.bound_symbols:
        used = {variableify(p) for p in bsym.flat_proxy_args}
        for arguments in [a for a in unstated if used.intersection(a)]:  # first, one rename stating the sharing
            unstated.remove(arguments)
            renamed = update_aliases._get_new_aliases(arguments, computation_trace)
            bsyms.append(rename.bind(tuple(map(unvariableify, arguments)), output=renamed))
            swap_map.update(zip(arguments, renamed))
        inplace = update_aliases._is_inplace_op(bsym)
        if not (
            inplace or update_aliases._is_view_creation_op(bsym) or update_aliases._involves_viewed_args(bsym, viewed)
        ):
            bsyms.append(bsym.from_bsym_swap_proxies(swap_map))
            continue
        ins = [variableify(t) for t in bsym.flat_proxy_args if isinstance(t, TensorProxy)]
        ins = set(ins[:1] if inplace else ins)  # an in-place op writes its first argument only
        outs = {variableify(t) for t in bsym.flat_proxy_outs if isinstance(t, TensorProxy)}
        encountered |= ins
        met = set().union(*(g for g in groups if g & ins)) & encountered
        if not met:
            bsyms.append(bsym.from_bsym_swap_proxies(swap_map, skip_output=True))
            continue
        update, swap_map = update_aliases._get_update_bsym(
            met, swap_map, update_aliases._get_new_aliases(met, computation_trace)
        )
        if has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            update.tags.add(BoundSymbolTag.BACKWARD)
        bsyms += [update, bsym.from_bsym_swap_proxies(swap_map)]
        encountered |= outs
        if inplace and len(ins) == len(outs) == 1:  # the op's result stands for its target from now on
            swap_map = update_aliases._update_swap_map(swap_map, ins.pop(), unvariableify(outs.pop()))

    updated = from_trace(computation_trace)
    updated.bound_symbols = bsyms
    updated.set_provenance(TraceProvenance("Update aliases for in-place ops"))
    return updated


# thunder calls it by the name it imported; its autograd lookasides import it from the module
thunder.insert_alias_updates = update_aliases.insert_alias_updates = insert_alias_updates
