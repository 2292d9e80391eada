"""A tuple or list unpacked (``a, b = pair``) by taking its items' wrappers, without interpreting an iterator.

thunder 0.2.6's ``UNPACK_SEQUENCE`` handler interprets ``iter`` and then ``next`` once per item and once more, and
each ``next`` runs its ``SequenceIter.__next__`` through the interpreter, with every global, subscript and ``+=`` of
that Python as one more interpreted call: about 1,400 instructions and 46 ms on this project's 2-core VM to unpack
``for block_idx, block in enumerate(self.transformer.h)`` once, 1.2 s of a 30-layer litgpt model's compilation (a
cProfile, 2026-12-05). What it pushes is, for an exact ``tuple`` or ``list``, each item's wrapper as the sequence's
``__getitem__`` lookaside returns it after ``track_items``: the same values, with the same provenance.

Rule: where the interpreter tracks provenance and the value unpacked is exactly a ``tuple`` or ``list`` of the
count the instruction asks for, its ``track_items`` runs and its item wrappers are pushed, last first, as thunder's
handler pushes them; anything else (another iterable, another count, whose error thunder raises) goes to
thunder's handler. In the extension's compilations only: stock thunder's keep thunder's handler.

A call's ``*args`` (``CALL_FUNCTION_EX``: ``block(*args)`` in ``nn.Module.__call__``, once a layer) is unpacked
by the same rule where it is exactly a ``tuple``: thunder interprets a subscript of each item, which returns that
item's wrapper. A list goes to thunder's way: a recorded block notes the reads of an existing list's items through
its ``__getitem__`` (``module_calls``), and a tuple's items cannot change.

Retired by: thunder unpacking a list or tuple from its item wrappers.
"""

from __future__ import annotations

from thunder.core import interpreter

from thunder_ext.thunder026.scope import compiling_with_extension

_thunders = interpreter._default_opcode_handler_map["UNPACK_SEQUENCE"]
_thunders_args = interpreter.wrap_args_from_list


def _unpack_sequence_handler(inst, /, stack: interpreter.InterpreterStack, **kwargs):
    seq = stack.getitem_wrapped(-1)
    if (
        isinstance(seq, interpreter.WrappedValue) and type(seq.value) in (tuple, list) and len(seq.value) == inst.arg
        and interpreter.get_interpretercompilectx()._with_provenance_tracking and compiling_with_extension()
    ):  # fmt: skip
        stack.pop_wrapped()
        seq.track_items()
        for item in reversed(seq.item_wrappers):
            stack.append(item)
        return None
    return _thunders(inst, stack=stack, **kwargs)


def _wrap_args_from_list(args: interpreter.WrappedValue) -> list:
    if type(args.value) is tuple and compiling_with_extension():
        args.track_items()
        return list(args.item_wrappers)
    return _thunders_args(args)


def install() -> None:
    interpreter._default_opcode_handler_map["UNPACK_SEQUENCE"] = _unpack_sequence_handler
    interpreter.wrap_args_from_list = _wrap_args_from_list  # read by the CALL_FUNCTION_EX handler at each call
