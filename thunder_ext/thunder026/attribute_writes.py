"""Every attribute a call assigns on an object from outside it reaches the object, or the compilation is refused.

thunder 0.2.6 holds the traced code's attribute writes until the epilogue, which writes each back: its lookaside of
``object.__setattr__`` puts the value into the object's ``__dict__`` through the interpreter. The first write of a
call into an object's ``__dict__`` makes the interpreter wrap that dict anew, so a second write of the same call
into it went through a wrapper the epilogue does not know: ``self.a = 1; self.b = 2`` left ``b`` unchanged, silently
(stock thunder too; the block fuzzer found it). And an object the prologue has no handle on, the compiled module
itself among them (``self.calls += 1`` in the jitted module's own ``forward``), had its writes dropped, silently.

In the extension's compilations, each write goes into the dict through the wrapper the epilogue writes back (thunder's
own lookaside of ``dict.__setitem__``, given that wrapper), and a write the epilogue would drop raises, naming the
attribute and the object, before anything runs.

Written for thunder 0.2.6's ``jit_ext``: its ``object.__setattr__`` lookaside, ``process_recorded_modifications``
and the ``JitCtx`` that records the modified dicts. Retired by: a thunder that writes back every attribute assigned.
"""

from __future__ import annotations

from collections.abc import Callable

from thunder.core import jit_ext
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import INTERPRETER_SIGNALS, PseudoInst, _interpret_call, unwrap, wrap_const

from thunder_ext.thunder026.scope import compiling_with_extension


class DroppedAttributeWriteError(NotImplementedError):
    """A compiled call assigns an attribute that thunder 0.2.6 would not write back."""


def _keeping_every_write(thunders: Callable, dict_setitem: Callable) -> Callable:
    def setattr_(obj, name, value):
        uobj = unwrap(obj)
        made_here = jit_ext.is_created_during_tracing(obj.provenance) or type(uobj) in jit_ext._TORCH_DYNAMIC_TYPES
        if made_here or not hasattr(uobj, "__dict__") or not compiling_with_extension():
            return thunders(obj, name, value)
        # thunder's lookaside, but for the write itself: the dict's wrapper found here is the one its epilogue reads
        if jit_ext.should_register_for_prologue(obj.provenance) and obj.original_value is obj.nothing:
            if getattr(obj.provenance, "proxy", None) is None:
                obj.provenance.proxy = obj.anyproxy = jit_ext.AnyProxy(uobj, history=obj.provenance)
        d = _interpret_call(getattr, obj, wrap_const("__dict__"))
        if d is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            return d
        d.provenance.ext_flag |= jit_ext.EXT_FLAG_IS_MODULE_MEMBER_DICT
        return dict_setitem(d, name, value)

    return setattr_


def _refusing_dropped_writes(thunders: Callable) -> Callable:
    def process(ctx, epilogue_trace):
        if compiling_with_extension():
            for written, changes in ctx._additional_outputs.items():
                owner = _owner(written.provenance)
                if owner is not None and getattr(owner, "proxy", None) is None:
                    names = ", ".join(repr(unwrap(key)) for _, _, key, _ in changes)
                    raise DroppedAttributeWriteError(
                        f"thunder_ext: the compiled call assigns {names} on {_described(owner)}, which thunder 0.2.6 "
                        "would not write back after the call (it keeps no handle on that object). Assign it outside "
                        "the compiled call, or keep the value in a buffer."
                    )
        return thunders(ctx, epilogue_trace)

    return process


def _owner(provenance):
    """The provenance of the object whose ``__dict__`` ``provenance`` is, if it is one."""
    if provenance.inst is PseudoInst.LOAD_ATTR and len(provenance.inputs) == 2:
        obj, attribute = provenance.inputs
        if attribute.inst is PseudoInst.CONSTANT and attribute.value == "__dict__":
            return obj
    return None


def _described(owner) -> str:
    if owner.inst is PseudoInst.INPUT_FN:
        return f"the compiled {type(get_compile_data().fn).__name__} itself"
    return f"an object the call reached as {owner}"


def install() -> None:
    """Replace thunder's ``object.__setattr__`` lookaside and wrap ``process_recorded_modifications`` (which
    thunder's jit calls by its module's name); ``adapt_thunder`` calls it once, before any other lookaside wraps
    them."""
    lookasides = jit_ext._general_jit_lookaside_map
    lookasides[object.__setattr__] = _keeping_every_write(lookasides[object.__setattr__], lookasides[dict.__setitem__])
    jit_ext.process_recorded_modifications = _refusing_dropped_writes(jit_ext.process_recorded_modifications)
