"""Regional compilation: each repeated block of a model traced once and compiled once, and called for every layer.

thunder 0.2.6 interprets the Python of every layer and takes the whole model's trace through its pipeline op by op,
so compile time grows with depth. Here, in the compilations of a ``RegionalTransform`` (``InplaceTransform`` is
one):

- ``replay``: the first call of each kind of block (an element of one of the model's ``nn.ModuleList``s, or a
  repeated block of an ``nn.Sequential``) is interpreted and recorded; each later one whose key matches is replayed
  from the record with its own tensors;
- ``keys``: what a call must share with a record to replay it;
- ``programs``: a record's ops compiled once through every stage and executor of the model's compilation, as a
  block program that each layer calls as one op;
- ``report``: what was traced how, for the compile log (``compiled Block once (0.1 s), called 30 times``);
- ``transform``: the switches (``replay_blocks``, ``block_programs``) and the program store.

What this needs of thunder's interpreter and pipeline is glue in ``thunder_ext/thunder026/`` (``module_calls``,
``trace_programs``, ``python_guards``); where a call of a program may stand for a block's ops is the extension's
rule, in ``transforms/block_calls.py``.
"""

from thunder_ext.regional.transform import RegionalTransform

__all__ = ["RegionalTransform"]
