"""Writes inside fusion regions: one protocol (``rules``), one set of rules per fusion executor (``torch_compile``,
``nvfuser``), and how a refused write leaves its region (``give_back``).

A fusion executor's pass may take a ``copy_to_out_`` into a region (thunder_ext registers it with
nvFuser and with thunder's torch.compile executor). What a region may then do with the write depends
on how the executor runs the region, so each executor's rules are a ``RegionRules``, which a module of this
package registers for the executor object (``register_region_rules``); a region is known by its symbol's
executor. How the executor runs the write is its own module's, under ``executors/``; when a region may keep it
is the checker's knowledge of that executor, here:

- ``in_order``: whether the region runs its ops in their order. Then the ordering rule of the checker
  applies inside the region as outside it, and a refused write is given back by *taking it out* with its
  producer: the same ops in the same order, those two on the PyTorch executor, the runs between them
  regions of their own. Otherwise (nvFuser schedules a region's ops as it likes) the region is rebuilt
  without the write, which runs after it, and the executor's rules must prove that no op of the region
  sees the write early; a region that returns a view of the written value is split as above instead.
- ``blocker``: why the region cannot run a given write itself, or None.
- ``ahead``: what runs before a region that keeps its writes, so that the blocker may allow them
  (torch.compile checks a KV write's position there, rule 4); the region reads what those ops return.

=============  ========  ============================================================================
executor       in order  a write stays in the region when
=============  ========  ============================================================================
nvFuser        no        ``regions/nvfuser.py``: six rules for an output aliasing a region input,
                         and a seventh checked when the call runs (an argument written is dense)
torch.compile  yes       ``regions/torch_compile.py``: the region computes ``computed``, writes its
                         storage once, reads its old value only towards ``computed``, no op of it
                         may fail at runtime but where a position checked before it stands for
                         the op, no two of its inputs alias ``out``, and it returns nothing that
                         Inductor may take for a no-op of the written value, only views of it
=============  ========  ============================================================================

A region of an executor with no rules keeps no write: every write in it is given back. The helpers
both executors' rules share are in ``rules``: ``RegionOps`` (a region's ops, indexed once for all its writes),
``elementwise_cone``.

Before the fusion passes run, rematerialization across writes is ruled out (``transforms/no_recomputation.py``),
and the writes that no region keeps, whatever else it holds, are kept out of them (``transforms/uncomputed_writes.py``):
the rules above judge what the regions then hold.
"""


# each executor's rules, registered for its executor objects
import thunder_ext.transforms.regions.nvfuser  # noqa: E402, F401
import thunder_ext.transforms.regions.torch_compile  # noqa: E402, F401
