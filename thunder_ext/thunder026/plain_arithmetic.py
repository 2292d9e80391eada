"""A binary operator on two plain numbers of one type (``n += 1``, ``C // n_head``) computed by one call of the
type's method, not by thunder's Python emulation of how Python picks that method.

thunder 0.2.6's ``BINARY_OP`` handler interprets two small functions for every operator (the in-place method if the
left operand's type has one, then the left's method, then the right's reflected one), each ``type``, ``hasattr``
and ``getattr`` in them one more interpreted call, and ends in an opaque call of the method. For ``enumerate``'s
``n += 1``, once a layer, that is about 5 ms on this project's 2-core VM; the first block's shape arithmetic pays it
at every operator. For two operands of exactly ``int``, or exactly ``float``, neither type has an in-place method,
and the left's method returns a result for the right's own type, so Python's answer is that one call.

Rule: where the interpreter tracks provenance, the instruction is one of the 26 arithmetic operators, both values
are exactly ``int`` or exactly ``float`` (a proxied number, a bool, a mix of the two types go to thunder's handler),
and the type's out-of-place method returns a value, the two operands are popped and the value pushed, wrapped
with the record thunder gives an opaque call's result (so the interpreter's callbacks see what they see from
thunder's handler); anything else, and a method that raises (``1 // 0``: thunder's handler raises it as Python
does), goes to thunder's handler. In the extension's compilations only: stock thunder's keep thunder's handler.

Retired by: thunder computing arithmetic on plain numbers directly.
"""

from __future__ import annotations

from thunder.core import interpreter

from thunder_ext.thunder026.scope import compiling_with_extension

_thunders = interpreter._default_opcode_handler_map["BINARY_OP"]
# the out-of-place method of each ``BINARY_OP`` argument, in ``dis._nb_ops``' order; the 13 after are in-place forms
_METHODS = ("__add__", "__and__", "__floordiv__", "__lshift__", "__matmul__", "__mul__", "__mod__", "__or__",
            "__pow__", "__rshift__", "__sub__", "__truediv__", "__xor__")  # fmt: skip


def _binary_op_handler(inst, /, stack: interpreter.InterpreterStack, **kwargs):
    a, b = stack.getitem_wrapped(-2), stack.getitem_wrapped(-1)
    kind = type(a.value) if isinstance(a, interpreter.WrappedValue) else None
    if (
        kind in (int, float) and isinstance(b, interpreter.WrappedValue) and type(b.value) is kind
        and inst.arg < 2 * len(_METHODS) and interpreter.get_interpretercompilectx()._with_provenance_tracking
        and compiling_with_extension()
    ):  # fmt: skip
        method = getattr(kind, _METHODS[inst.arg % len(_METHODS)], None)
        try:
            value = NotImplemented if method is None else method(a.value, b.value)
        except Exception:  # noqa: BLE001  (thunder's handler raises it, as Python does)
            value = NotImplemented
        if value is not NotImplemented:
            stack.pop_wrapped()
            stack.pop_wrapped()
            interpreter.get_interpreterruntimectx().record_opaque_call(method)
            inputs = [interpreter.wrap_const(method).provenance, interpreter.wrap_args((a, b)).provenance,
                      interpreter.wrap_kwargs({}).provenance]  # fmt: skip
            record = interpreter.ProvenanceRecord(interpreter.PseudoInst.OPAQUE, inputs=inputs)
            stack.append(interpreter.wrap(value, provenance=record))
            return None
    return _thunders(inst, stack=stack, **kwargs)


def install() -> None:
    interpreter._default_opcode_handler_map["BINARY_OP"] = _binary_op_handler
