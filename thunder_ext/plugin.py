"""``thunder_ext.Inplace``: the extension as a ``thunder.Plugin``, registered as ``"inplace"``; and
``thunder_ext.DefaultExecutorsRecipe``, for ``thunder.compile`` where nvFuser is absent.

``thunder.compile(model, plugins="inplace")`` (or ``plugins=[thunder_ext.Inplace(strict=True), ...]``)
adds the extension's executor and transform to whatever the recipe picks, under either interpreter:
with ``thunder.jit`` they go to the jit, with ``thunder.fx`` to every thunder subgraph of the
``ThunderCompiler`` backend.

Where it goes among the others (``Recipe.apply`` orders PRE plugins, then the recipe, then POST plugins,
for executors and transforms alike):

- PRE, so that ``inplace_ex`` comes before the recipe's fuser: a fusion region is compiled with the
  operators its executor list claimed first, and ``copy_to_out_`` is the extension's own.
- So its transform runs before the recipe's and the POST plugins': before ``PrunePrologueChecks``, which
  keeps the extension's prologue checks (they are not metadata checks); before ``reduce-overhead``'s
  ``CUDAGraphTransform``, which must capture the in-place trace, not the copies it replaces.
"""

from __future__ import annotations

import thunder
from thunder.core.recipe import Lookaside, Plugin, PluginPolicy
from thunder.core.transforms import Transform
from thunder.extend import Executor
from thunder.plugins import register_plugin
from thunder.recipes import BaseRecipe

from thunder_ext.compile_cache import CompileCache
from thunder_ext.executors import inplace_ex
from thunder_ext.hooks import HOOKS
from thunder_ext.transforms import InplaceTransform


class Inplace(Plugin):
    """Run in-place writes in place under ``thunder.compile``; ``strict``, ``replay_blocks``, ``block_programs`` and
    ``compile_cache`` as in ``thunder_ext.jit``. Under the ``thunder.jit`` interpreter only are repeated blocks
    replayed and modules kept in the compile cache: ``thunder.fx``'s graphs hold no module calls, and Dynamo guards
    and caches them."""

    policy = PluginPolicy.PRE

    def __init__(self, *, strict: bool = False, replay_blocks: bool = True, block_programs: bool | None = None,
                 compile_cache: bool | None = None) -> None:  # fmt: skip
        self.strict, self.replay_blocks, self.compile_cache = strict, replay_blocks, compile_cache
        self.block_programs = block_programs

    def setup_executors(self) -> list[Executor]:
        return [inplace_ex]

    def setup_transforms(self) -> list[Transform]:
        cache = [] if self.compile_cache is False else [CompileCache(self.compile_cache)]
        options = dict(strict=self.strict, replay_blocks=self.replay_blocks, block_programs=self.block_programs)
        inplace = InplaceTransform(**options)
        return [inplace, *cache]

    def setup_lookasides(self) -> list[Lookaside]:
        return [lookaside for lookasides in HOOKS.plugin_lookasides for lookaside in lookasides()]


register_plugin("inplace", Inplace)


class DefaultExecutorsRecipe(BaseRecipe):
    """thunder's default recipe (``PrunePrologueChecks``) with thunder's default executors instead of its one
    fuser. thunder 0.2.6's default recipe asks for nvFuser even where it is absent (a CPU), and then passes
    ``None`` as an executor, which ``thunder.jit`` refuses; ``BaseRecipe(fuser="torch.compile")`` runs
    everywhere but leaves thunder's other executors out."""

    def setup_executors(self) -> list[Executor]:
        return list(thunder.get_default_executors())
