"""Arguments that share storage at different sizes (``f(x, x[0])``) where the function writes in place.

thunder 0.2.6's ``insert_alias_updates`` traces every argument of an alias group as the group's first,
reshaped, which fails ("Attempting to reshape"). thunder's main branch fixed this (pull request #2760,
"inputs that view each other with different numel") by keeping an argument of another size as itself
and seeding thunder's view groups with its alias group; ``insert_alias_updates`` here is that idea over
thunder 0.2.6's pass, for the extension's compilations only (``adapt_thunder`` installs it in thunder's
place). Stock ``thunder.jit`` keeps thunder's: with its torch.compile executor the fix would compute
wrong values (torch.compile miscompiles a write of an input that another input aliases; the extension
keeps such a write out of its regions: ``executors/torch_compile_inplace.py``, rule 5).

The trace assumes no layout of such an argument, so a later call with other views of the same shapes,
which hits the same cache entry, computes right too.
"""

import thunder.core.update_aliases as update_aliases
from thunder.core import prims
from thunder.core.proxies import TensorProxy, VariableInterface, unvariableify, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.executors.torch_inplace import share_storage
from thunder_ext.thunder026.scope import compiling_with_extension


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


_thunders = update_aliases.insert_alias_updates  # bound before adapt_thunder installs ours in its place


def insert_alias_updates(computation_trace: TraceCtx, alias_tensor_indices: list[list[int]]) -> TraceCtx:
    """thunder's, but ``_keep_apart`` where the extension compiles a call with arguments sharing storage at
    different sizes."""
    reshaped, apart = _split_alias_groups(computation_trace, alias_tensor_indices)
    if not apart or not compiling_with_extension():
        return _thunders(computation_trace, alias_tensor_indices)
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
