"""Every change the extension makes to thunder's globals, made by one call: ``adapt_thunder()``.

Written for lightning-thunder 0.2.6 (``WRITTEN_FOR``); ``adapt_thunder`` refuses another version, whose
tables these changes may no longer fit. Importing ``thunder_ext`` changes nothing: the extension's
``InplaceTransform`` calls ``adapt_thunder`` when it is made (so ``thunder_ext.jit``, the plugin and the
backend do), and so does the pytest option ``--thunder-ext``. What importing does adds names of the
extension's own to thunder's registries and changes nothing thunder did: the plugin ``"inplace"`` for
``thunder.compile`` (``thunder_ext.plugin``), the executor ``inplace_ex``, and ``copy_to_out_`` among the
ops thunder's fusion executors take (``executors/``), which only a trace of the extension holds.

Two kinds of change:

**Eight changes hold in the extension's compilations only** (those that carry an ``ExtensionTransform``, as
``InplaceTransform`` is: ``thunder026/scope.py``); stock ``thunder.jit`` in the same process does and says what it
did before.

- Errors of in-place ops name the op, the tensors and the user's line (``thunder_ext.inplace_errors``),
  and a number where the op takes a tensor only is a ``TypeError``, as in eager (thunder: ``ValueError``).
- Arguments that share storage at different sizes (``f(x, x[0])``): thunder's ``insert_alias_updates``
  fails on them ("Attempting to reshape"); the extension traces each as itself
  (``thunder_ext.thunder026.alias_updates``). Not for stock thunder: with its torch.compile executor the fix would
  compute wrong values, which the extension's region rules prevent (rule 5).
- An ``assert`` on a tensor's value (``assert pos + n <= max_len``), where thunder raises "casting a
  TensorProxy to a Python boolean is not supported", is a check that runs before any write and raises
  eager's ``AssertionError`` (``thunder_ext.thunder026.tensor_asserts``): the interpreter's handlers of conditional
  jumps are wrapped. Any other branch on a tensor's value fails as before, naming the user's line and
  ``thunder_ext.thunderfx``, which runs it.
- The gradient of a 0-d tensor the function computes, where it broadcasts (``a * y.sum()``,
  ``x.diagonal().div_(y[0] + 1)``), is summed to its shape (``thunder_ext.thunder026.zero_dim_gradients``): thunder
  sums it for 0-d inputs only, and its backward failed (``expand(torch.FloatTensor{[1, 3]}, size=[1])``).
- The lists, tuples and dicts of the call thunder traces are kept (``thunder_ext.thunder026.traced_call``), for the
  prologue check that a later call holds the same (``transforms/argument_containers.py``): thunder's checks only
  ``args`` and ``kwargs`` themselves.
- thunder's rematerialization (``thunder_ext.thunder026.rematerialization``): a region that it makes recompute an op
  of several outputs (the extension's renames of several aliases at once) and receive one of them defined that
  name twice, and the fusion pass failed ("that name is already used"); such a region takes none of them. And a
  value that the producer returns for a later region joined no cut, so a region recomputed it from the producer's
  inputs, the ops the extension pins (a write among them) included; such a value joins the cut.
- Attributes a call assigns on an object from outside it: thunder wrote back only the first it assigned on each
  object, and none on an object the prologue has no handle on (the compiled module itself), silently; each is
  written back, or the compilation raises ``DroppedAttributeWriteError`` (``thunder_ext.thunder026.attribute_writes``).
- A string inside a collection in a program text (a write's source line in a prologue check, a string the Python
  guards compare): thunder prints it quoted twice where it holds a double quote, and the program did not compile
  (``SyntaxError``); it is printed as Python reads it back (``thunder_ext.thunder026.printing``).

**What thunder 0.2.6 lacks is added for every compilation**, each entry only where thunder has none: a
fix, since stock thunder raises where eager computes. From the first ``adapt_thunder`` on, stock
``thunder.jit`` traces these too.

- ``tensor % n``: thunder defines ``TensorProxy.__mod__`` but registers no ``"mod"`` method
  (``TypeError: 'NoneType' object is not callable``). litgpt's sliding-window cache writes at
  ``input_pos % max_cache_len``; Python's ``%`` on tensors is ``torch.remainder``.
- ``Tensor.fill_`` (and ``torch.fill_``): not defined at all.
- ``Tensor.copy_`` from a source that broadcasts to the target: thunder's ``_copy_`` converts the dtype
  but not the shape, and ``prims.copy_`` then refuses ("Shapes were expected to be the same"), where
  PyTorch broadcasts. ``_copy_`` expands the source first.
- What ``torch.optim``'s updates need (``thunder_ext.integrations.optim``): the ``torch._foreach_*`` ops of SGD
  and Adam with ``foreach=True`` (``thunder026/foreach.py``), each traced as its op on every tensor of the list,
  by the jit and by thunder.dynamo's splitter (which, finding no entry, ran the builtin itself on proxies and sent
  every one to Inductor), so ``torch.compile(opt.step, backend=...)`` keeps a foreach step in thunder; ``Tensor.is_sparse``
  (False: thunder traces dense tensors); and ``torch.autograd.profiler.record_function``, the profiler's
  range around every ``Optimizer.step``, which does nothing under the jit (thunder cannot trace the op
  it calls).
- nvFuser's descriptor of an input's layout, where nvFuser has only its direct bindings (``nvfuser_direct``,
  version 0.2.34 on; the only builds for torch 2.10 and later): thunder 0.2.6 takes them, yet its
  ``compute_contiguity`` imports ``compute_tensor_descriptor`` from the legacy module ``nvfuser``, which those builds
  do not ship, so every nvFuser region failed at its first call (``ModuleNotFoundError: No module named
  'nvfuser'``, seen on an H100 with nvFuser 0.2.36: docs/gpu_results.md). The direct bindings export the same
  function.
- What the integrations register (``thunder_ext.hooks.HOOKS.adaptations``): ``thunder_ext.tensor_scatter_``,
  traced as one in-place symbol. And, once the program has imported the package it is for
  (``HOOKS.adaptations_once_imported``, checked at every ``adapt_thunder``): litgpt's mixture of experts traced
  with static shapes, in the extension's compilations only (``thunder_ext/integrations/litgpt_moe.py``, through
  ``thunder026/substitutes.py``; stock ``thunder.jit`` fails on it as before).

**Seven change what thunder costs, not what it traces or checks**: the lookaside that hands each module call to the
compilation's transform, which traces a repeated block once where asked (``module_calls``, for
``thunder_ext/regional/``), and interprets every call as thunder does elsewhere; the interpreter's prologue checks,
kept in the same list but found without comparing each new one with all before it, and named after the prologue's
outputs through a dict, those of tensors' metadata and numbers made after thunder's others (``constraints``); each code
object's instructions, decoded once, not at every call interpreted (``interpreted_code``); a tuple or list unpacked,
and a call's tuple of ``*args``, from its items' wrappers, not by interpreted iterators and subscripts, in the
extension's compilations (``sequence_unpacking``); an operator on two plain numbers of one type called directly, not
through thunder's emulation of Python's choice of method, in the extension's compilations (``plain_arithmetic``);
a global read by one call of the dict lookaside thunder's reading ends in, not by two interpreted frames, in the
extension's compilations (``global_loads``); and a bound symbol's imports and objects gathered in one pass over its printables, not two (``gathered_contexts``).
"""

from __future__ import annotations

import functools
import sys

import thunder
import thunder.core.interpreter as interpreter
import thunder.core.update_aliases as update_aliases
import thunder.torch as ltorch
import torch
from thunder.core.interpreter import wrap_const
from thunder.core.jit_ext import (
    _general_jit_lookaside_map,
    ensure_recursive_proxies,
    interpreter_needs_wrap,
    record_source_loc_in_symbol_header,
    register_general_jit_lookaside,
)
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.torch.langctx import _method_name_to_fn_map, register_method

from thunder_ext.hooks import HOOKS
from thunder_ext.inplace_errors import naming_errors
from thunder_ext.thunder026 import (
    alias_updates,
    attribute_writes,
    constraints,
    gathered_contexts,
    global_loads,
    interpreted_code,
    module_calls,
    plain_arithmetic,
    printing,
    python_guards,
    rematerialization,
    sequence_unpacking,
    traced_call,
    zero_dim_gradients,
)
from thunder_ext.thunder026.foreach import FOREACH
from thunder_ext.thunder026.scope import compiling_with_extension
from thunder_ext.thunder026.tensor_asserts import JUMPS, checking_tensor_asserts

WRITTEN_FOR = "0.2.6"


def adapt_thunder() -> None:
    """Make the changes above, once per process; raises ``RuntimeError`` where thunder is not ``WRITTEN_FOR``."""
    if thunder.__version__ != WRITTEN_FOR:
        raise RuntimeError(
            f"thunder_ext adapts lightning-thunder {WRITTEN_FOR}'s tables (thunder_ext/thunder026/adapt.py), "
            f"and this is lightning-thunder {thunder.__version__}: install lightning-thunder=={WRITTEN_FOR}"
        )
    _adapt_once()
    _adapt_to_imported()


_ADAPTED_TO: set[int] = set()  # the hooks of HOOKS.adaptations_once_imported that have run


def _adapt_to_imported() -> None:
    # each time: an entry point may be called before the program imports the package a hook is for
    for k, (name, adapt) in enumerate(HOOKS.adaptations_once_imported):
        if k not in _ADAPTED_TO and (module := sys.modules.get(name)) is not None:
            _ADAPTED_TO.add(k)
            adapt(module)


@functools.cache
def _adapt_once() -> None:
    # For every compilation: what thunder lacks. First, since ``fill_`` is an in-place op whose errors are
    # then named like the others'.
    _add_missing_ops()
    ltorch._copy_ = _broadcasting_copy_
    # For the extension's compilations only. thunder calls ``insert_alias_updates`` by the name it imported;
    # its autograd lookasides import it from the module.
    _name_inplace_errors()
    _check_tensor_asserts()
    thunder.insert_alias_updates = update_aliases.insert_alias_updates = alias_updates.insert_alias_updates
    attribute_writes.install()  # every attribute a call assigns written back, or refused; before replay wraps it
    module_calls.install()  # acts in the extension's compilations only
    rematerialization.install()  # no pinned op recomputed; a region recomputing an op receives none of its outputs
    constraints.install()  # the same prologue checks, found without a quadratic scan
    interpreted_code.install()  # a code object's instructions decoded once; the files of a compilation's code
    sequence_unpacking.install()  # a tuple or list unpacked from its items, in the extension's compilations only
    plain_arithmetic.install()  # two plain numbers' operator called directly, in the extension's compilations only
    global_loads.install()  # a global read by the dict lookaside directly, in the extension's compilations only
    gathered_contexts.install()  # a bound symbol's printables made once for its contexts, not twice
    traced_call.install()  # the traced call's lists, tuples and dicts kept, in the extension's compilations only
    zero_dim_gradients.install()  # a 0-d tensor's gradient summed to its shape, in the extension's compilations
    python_guards.install()  # every Python value read checked at each call, in the extension's compilations only
    printing.install()  # a string in a collection printed as Python reads it back, in the extension's compilations
    for adapt in HOOKS.adaptations:  # the integrations' entries (``tensor_scatter_``'s symbol)
        adapt()
    module_calls.follow_indices()  # last: around every opcode handler the changes above put in thunder's table


def divert(torch_fn, thunder_fn) -> None:
    """Trace calls of ``torch_fn`` as ``thunder_fn``, unless thunder has an entry for it. Two tables say so:
    thunder's function map (``ltorch.register_function``), where thunder.dynamo's splitter looks up a node of
    a Dynamo graph and runs the entry on proxies to decide whether thunder takes the node; and the lookaside
    table through which thunder's interpreter diverts torch functions, filled, once, from that map when it
    loads, so a function registered later needs its entry made as thunder makes them."""
    if torch_fn not in ltorch._torch_to_thunder_function_map:
        ltorch.register_function(torch_fn, thunder_fn)
    if torch_fn not in _general_jit_lookaside_map:
        _general_jit_lookaside_map[torch_fn] = ensure_recursive_proxies(
            interpreter_needs_wrap(record_source_loc_in_symbol_header(thunder_fn))
        )


# ``ltorch.copy_`` (and ``zero_``, ``fill_``...) call the module's ``_copy_`` at trace time, so replacing it
# reaches every caller. A source that does not broadcast still fails, in ``expand``, naming both shapes.
_thunders_copy_ = ltorch._copy_


def _broadcasting_copy_(a, b, /):
    if isinstance(b, TensorProxy) and b.shape != a.shape:
        b = ltorch.expand(b, a.shape)
    return _thunders_copy_(a, b)


def _name_inplace_errors() -> None:
    # thunder tags ``copy_`` as no in-place op, yet it is the one every other write ends in
    for symbol in (*ltorch._inplace_to_out_of_place, ltorch.copy_):
        if symbol.meta is not None:
            # Symbol is a frozen dataclass; its hash and equality do not involve ``meta``
            object.__setattr__(symbol, "meta", naming_errors(symbol.name, symbol.meta, when=compiling_with_extension))


def _check_tensor_asserts() -> None:
    # the interpreter looks each opcode's handler up in this table as it meets the opcode
    handlers = interpreter._default_opcode_handler_map
    for name, jumps_on in JUMPS.items():
        if name in handlers:  # those of this Python
            handlers[name] = checking_tensor_asserts(handlers[name], jumps_on, when=compiling_with_extension)


def _add_missing_ops() -> None:
    if "mod" not in _method_name_to_fn_map:
        register_method("mod", ltorch.remainder)

    # ``fill_`` is ``zero_`` with another value, written as thunder writes ``zero_``, with thunder's own
    # ``_copy_``, so every pass sees a write.
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

    # ``record_function.__enter__`` calls ``torch.ops.profiler._record_function_enter_new``, which thunder
    # cannot trace ("is not registered"). It only names a range for the profiler: entering and leaving it
    # does nothing under the jit.
    @register_general_jit_lookaside(torch.autograd.profiler.record_function.__enter__)
    def _record_function_enter(record_function):
        return record_function

    @register_general_jit_lookaside(torch.autograd.profiler.record_function.__exit__)
    def _record_function_exit(record_function, exc_type, exc_value, traceback):
        return wrap_const(None)

    for name, traced_as in FOREACH.items():
        divert(getattr(torch, name), traced_as)

    _describe_layouts_with_nvfuser_direct()


def _describe_layouts_with_nvfuser_direct() -> None:
    import importlib.util

    from thunder.executors.nvfuserex import nvfuser_available

    if not nvfuser_available() or importlib.util.find_spec("nvfuser") is not None:
        return  # no nvFuser, or the legacy module thunder imports is there
    import nvfuser_direct
    import thunder.executors.nvfuserex_impl as nvfuserex_impl

    @functools.lru_cache(maxsize=2048)  # as thunder's own
    def compute_contiguity(shape, stride) -> tuple[tuple[bool | None, ...], tuple[int, ...]]:
        return tuple(tuple(x) for x in nvfuser_direct.compute_tensor_descriptor(shape, stride))

    nvfuserex_impl.compute_contiguity = compute_contiguity  # looked up by name at each region's call
