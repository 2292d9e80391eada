"""The house rules: the package's layers import only downwards, thunder's private names stay in
``thunder_ext/thunder026/``, and design.md's pipeline is the one ``transforms/pipeline.py`` runs.

Each rule is read from the source with ``ast``, so it holds for imports made inside functions too.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
import sys
import tomllib

import pytest
import thunder
import torch

import thunder_ext
from thunder_ext.transforms.pipeline import PIPELINE, Hook

# The layers, lowest first: a module may import modules of its own layer or of a lower one. Each is a folder
# but for thunder_ext's own modules, which are two (the primitive and what every layer may use; the entry
# points), and the command line, which runs the demo and the benchmarks.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("thunder_ext.primitive", "thunder_ext.inplace_errors", "thunder_ext.logs", "thunder_ext.hooks",
              "thunder_ext.libraries", "thunder_ext.gc_pause")),
    ("executors", ("thunder_ext.executors",)),
    ("thunder 0.2.6 glue", ("thunder_ext.thunder026",)),
    ("regional compilation", ("thunder_ext.regional",)),
    ("transforms", ("thunder_ext.transforms",)),
    ("compile cache", ("thunder_ext.compile_cache",)),
    ("entry points", ("thunder_ext.jit", "thunder_ext.plugin", "thunder_ext.dynamo", "thunder_ext.decisions")),
    ("integrations", ("thunder_ext.integrations",)),
    ("public API", ("thunder_ext",)),
    ("tools", ("thunder_ext.tools",)),
    ("benchmarks", ("thunder_ext.benchmarks",)),
    ("command line", ("thunder_ext.tools.cli",)),
]
GLUE = "thunder_ext.thunder026"
PYPROJECT = pathlib.Path(__file__).parent.parent / "pyproject.toml"

pytestmark = pytest.mark.executor_sets("defaults")  # the rules are read from the source: no executor runs


def _modules() -> dict[str, pathlib.Path]:
    """Every module of the installed package, by its dotted name: each package pyproject.toml lists, read in the
    folder it installs from (``thunder_ext.transforms`` is ``transforms/``, not a folder inside ``thunder_ext/``)."""
    found = {}
    for name in tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["packages"]:
        for folder in importlib.util.find_spec(name).submodule_search_locations:
            for path in sorted(pathlib.Path(folder).glob("*.py")):
                found[name if path.stem == "__init__" else f"{name}.{path.stem}"] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> int:
    """The layer of ``module``: that of the longest prefix the table lists."""
    matches = [(len(prefix), k) for k, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer of LAYERS"
    return max(matches)[1]


def imports_of(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each ``thunder_ext`` module that ``path`` imports, wherever the import stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "thunder_ext"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "thunder_ext":
            # ``from pkg import name`` imports the submodule ``pkg.name`` where there is one
            found += [(node.lineno, f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module)
                      for a in node.names]
    return found


def upward_imports(modules: dict[str, pathlib.Path]) -> list[str]:
    return [
        f"{path}:{line}: {name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, path in modules.items()
        for line, target in imports_of(path)
        if layer_of(target) > layer_of(name)
    ]


def test_every_module_imports_only_its_own_layer_and_those_below():
    assert upward_imports(MODULES) == []


def test_the_layers_are_the_folders_in_order_so_no_folders_import_each_other():
    folders = {name.rsplit(".", 1)[0] if path.stem != "__init__" else name for name, path in MODULES.items()}
    prefixes = {p for _, ps in LAYERS for p in ps}
    # a folder inside a layer's folder (transforms/regions/) is of that layer
    assert {f for f in folders if f not in prefixes and f.rsplit(".", 1)[0] not in prefixes - {"thunder_ext"}} == set()
    edges = {(layer_of(n), layer_of(t)) for n, p in MODULES.items() for _, t in imports_of(p)}
    assert all(a >= b for a, b in edges)  # an edge upwards would close a cycle with the edges down


def test_the_layer_check_fails_on_an_import_upwards(tmp_path):
    # breaking the rule once: an analysis that imports the entry point that runs it
    broken = tmp_path / "aliasing.py"
    broken.write_text("from thunder_ext.jit import jit\n")
    found = upward_imports({"thunder_ext.transforms.aliasing": broken})
    assert found == [f"{broken}:1: thunder_ext.transforms.aliasing (transforms) imports thunder_ext.jit (entry points)"]


def test_the_command_lines_parsers_are_outside_the_package_and_import_the_standard_library_only():
    # thunder_ext_cli.py: what `thunder-ext --help` imports, so not the package (whose import is thunder's); the
    # package's commands import their parsers from it, and its main() imports thunder_ext.tools.cli, in the call
    assert "thunder_ext_cli" in tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["py-modules"]
    path = pathlib.Path(importlib.util.find_spec("thunder_ext_cli").origin)
    assert path == PYPROJECT.parent / "thunder_ext_cli.py"
    tree = ast.parse(path.read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom)}
    assert {n for n in names if n.split(".")[0] not in sys.stdlib_module_names | {"__future__"}} == set()
    inside = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} - names
    assert inside == {"thunder_ext.tools.cli"}


def _defined_names(tree: ast.AST) -> set[str]:
    """The names ``tree`` defines: functions, classes, parameters, names and attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _thunders_private_names() -> set[str]:
    """Names with one leading underscore that thunder's own source defines: what a module outside the glue must
    not read. (Where the extension defines the same name itself, reading it is no reading of thunder's; nor is a
    member every ``torch.nn.Module`` holds, ``_parameters``, which thunder's ``ThunderModule`` sets too.)"""
    sources = [p for p in pathlib.Path(thunder.__file__).parent.rglob("*.py") if "tests" not in p.parts]
    names = set().union(*(_defined_names(ast.parse(p.read_text(), str(p))) for p in sources))
    torchs = set(vars(torch.nn.Module())) | set(dir(torch.nn.Module))
    return {n for n in names if re.fullmatch(r"_[A-Za-z0-9]\w*", n) and not n.endswith("__") and n not in torchs}


def _own_names(paths) -> set[str]:
    return set().union(*(_defined_names(ast.parse(p.read_text())) for p in paths))


THUNDER_PRIVATE = _thunders_private_names()


def _qualname_literal(node: ast.AST, own: set[str]) -> str | None:
    """The private name, as a string, that ``node`` matches against a ``__qualname__`` (``"_elementwise_" in
    f.__qualname__``, ``f.__qualname__ == "_meta"``, ``f.__qualname__.startswith("_x")``): a name of thunder's read
    by its text, which no attribute or import shows."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        operands = [node.func.value, *node.args]
    else:
        return None
    if not any(isinstance(n, ast.Attribute) and n.attr == "__qualname__" for o in operands for n in ast.walk(o)):
        return None
    return next((o.value for o in operands if isinstance(o, ast.Constant) and isinstance(o.value, str)
                 and o.value.startswith("_") and o.value not in own), None)  # fmt: skip


def private_thunder_names(path: pathlib.Path, own: set[str]) -> list[str]:
    """Where ``path`` imports a private name from thunder, reads one of thunder's private attributes, or matches a
    private name against a ``__qualname__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "thunder":
            found += [f"{path}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr in THUNDER_PRIVATE and node.attr not in own:
            found.append(f"{path}:{node.lineno}: .{node.attr}")
        elif (  # getattr(x, "_name"), hasattr(x, "_name")
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in THUNDER_PRIVATE
            and node.args[1].value not in own
        ):
            found.append(f"{path}:{node.lineno}: .{node.args[1].value}")
        elif (literal := _qualname_literal(node, own)) is not None:
            found.append(f"{path}:{node.lineno}: {literal!r} against a __qualname__")
    return found


def test_thunders_private_names_are_read_in_the_glue_package_only():
    outside = [p for name, p in MODULES.items() if not (name == GLUE or name.startswith(GLUE + "."))]
    own = _own_names(outside)
    assert [f for path in outside for f in private_thunder_names(path, own)] == []
    # and the glue does read them: the test looks where they are
    glue = [p for name, p in MODULES.items() if name.startswith(GLUE)]
    assert [f for path in glue for f in private_thunder_names(path, own)] != []


def test_the_private_name_check_fails_on_a_private_name_outside_the_glue(tmp_path):
    # breaking the rule once: the view-op table read where the analysis uses it, not through the glue
    broken = tmp_path / "aliasing.py"
    broken.write_text(
        "import thunder.torch as ltorch\nfrom thunder.core.jit_ext import _general_jit_lookaside_map\n"
        "views = ltorch._syms_returning_views\nmodule = getattr(compiled, '_model', compiled)\n"
        "binary = meta.__qualname__.startswith('_elementwise_binary')\n"
        "elementwise = [s for s in symbols if '_elementwise_' in s.meta.__qualname__]\n"
        "members = module._parameters\n"  # torch's, read on a torch module: not reported
    )
    assert private_thunder_names(broken, set()) == [
        f"{broken}:2: from thunder.core.jit_ext import _general_jit_lookaside_map",
        f"{broken}:3: ._syms_returning_views",
        f"{broken}:4: ._model",
        f"{broken}:5: '_elementwise_binary' against a __qualname__",
        f"{broken}:6: '_elementwise_' against a __qualname__",
    ]


DESIGN = pathlib.Path(__file__).parent.parent / "docs" / "design.md"


def documented_pipeline(text: str) -> list[tuple[str, str]]:
    """``(stage, module)`` of each stage design.md's pipeline block names, in its order: a line of the block
    that names a function of ``transforms/`` and its module."""
    block = text.split("## Where it runs in thunder's pipeline", 1)[1].split("```", 2)[1]
    return re.findall(r"\b([a-z_]+)\s+(transforms/[\w/]+\.py)", block)


def test_design_md_shows_the_pipeline_that_runs():
    assert documented_pipeline(DESIGN.read_text()) == [(s.name, s.module) for s in PIPELINE]


def test_the_pipeline_check_fails_on_a_reordered_doc():
    text = DESIGN.read_text()
    swapped = text.replace("give_zeros_their_prims", "@@").replace("name_lines_inside_writes", "give_zeros_their_prims")
    assert documented_pipeline(swapped.replace("@@", "name_lines_inside_writes")) != [(s.name, s.module) for s in PIPELINE]


@pytest.mark.parametrize("hook", list(Hook))
def test_every_hook_runs_stages(hook):
    assert [s for s in PIPELINE if s.hook is hook]


def test_importing_the_package_leaves_thunder_ext_consistent():
    assert thunder_ext.jit is not None and "thunder_ext.integrations" in {m for m in MODULES}
