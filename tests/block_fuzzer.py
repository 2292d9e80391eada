"""Block replay and block programs, fuzzed: models of repeated layers that differ, layer by layer, in what their code
reads, each compiled three ways and compared with eager.

A program is the Python source of a small model, written to a file of its own and imported: a ``Root`` whose
``forward`` calls each layer of an ``nn.ModuleList`` (of an ``nn.Sequential`` in three programs of ten) in turn, each
``Layer`` built from ``p`` and its index. Each feature of a program is one of:

- **a value** every layer holds (all alike, one layer's differing, alternating, or each its own; ``VALUE_PATTERNS``)
  somewhere (``HOLDERS``: an attribute, one set on some layers only, a child module's, a per-layer object's, a
  dict's item, a list shared by the layers and indexed by the layer's index, an argument the root passes; or one
  value for all: a class attribute, a global, an object the layers share), read in a way that steers the
  computation (the guard fuzzer's ``USES``);
- **a structure** the layers may differ in (``STRUCTURES``: a submodule's class, a parameter's dtype or
  ``requires_grad``, ``training``, a forward hook);
- **a write** (``WRITES``: a cache written at positions, an accumulator, a slice, each layer's row of a tensor the
  root passes it and reads whole after the layers, one tensor the root passes every layer, the layer's argument; an
  attribute of the layer's or of an object outside the model assigned); and in a quarter of the programs, an HF-like
  cache (``KV``: an object the root passes every layer, whose tensor of the layer's index it writes), which a replay
  selects by each layer's own index, unless the layer uses its index otherwise too (``INDEX_USES``, in half of them):
  then each layer is a record of its own, whose ops may call another record's program.

``run_program`` runs the model eagerly and under ``thunder_ext.jit`` four ways (``WAYS``), each on a model of its own
built alike: replaying blocks (the default), with block programs (saved to a compile cache folder of the program's),
loaded (the block programs way's entries, from that folder, by a jit of its own), and interpreting every layer
(``replay_blocks=False``: the fresh compilation that a replay stands for). Two calls (new inputs; the buffers as the
first left them), then an edit made alike to every model (one layer's value, a shared value, a submodule replaced), and
a third call, where the loaded way traces before the block programs way: the folder then holds the block programs of the
model before the edit, each stored apart under its block's ops, and one loaded for an edited layer would compute what
the layer did before. Every output, buffer, plain attribute, input and gradient (where a program runs with grad) must
equal eager's, and each way's decisions (how, the user's line, bytes) the interpreting way's: the replaying way's
exactly, the programs ways' as in place or a copy (a program's call is one op of the model's trace, so a fusion
executor's regions end at it, and a write may run in place another way, never as a copy where the interpreting way's
does not), and the loaded way's the block programs way's exactly. A program that the interpreting way cannot compile
either is discarded: that is thunder's limit, not replay's.

Run by hand::

    .venv/bin/python tests/block_fuzzer.py --programs 200 --seed 0          # a summary, and every wrong program
    .venv/bin/python tests/block_fuzzer.py --seed 0 --index 17 --show       # one program's source
    .venv/bin/python tests/block_fuzzer.py --programs 20 --executor-set torch_compile   # Inductor's regions
"""

from __future__ import annotations

import argparse
import copy
import logging
import operator
import os
import random
import re
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import thunder
import torch

import thunder_ext
from guard_fuzzer import DOMAINS, USES, Runs, import_file, run_each, same
from thunder_ext.thunder026.trace_programs import called_program
from thunder_ext.regional.report import FIRST
from thunder_ext.tools.pytest_plugin import EXECUTOR_SETS, executors_of
from thunder_ext.transforms import InplaceTransform

# the compilations compared with eager; the last one is the fresh compilation the others must equal. The block
# programs way saves its compilations to the program's cache folder, where the loaded way, called after it, finds them
WAYS: dict[str, dict] = {
    "replayed": {"block_programs": False},
    "block programs": {"block_programs": True, "compile_cache": True},
    "loaded": {"block_programs": True, "compile_cache": True},
    "interpreted": {"replay_blocks": False},
}
REFERENCE = "interpreted"

# the value kinds a layer may hold (the guard fuzzer's domains, whose uses steer the computation)
KINDS = ["int_loop", "int_shape", "float", "bool", "optional", "str_mode", "tuple", "list"]
# where a layer's value is held: per layer, or one value shared by every layer
HOLDERS = ["attr", "attr", "attr", "maybe", "child", "obj", "dict", "argument", "shared_list", "shared_cfg"]
SHARED_HOLDERS = ["class_attr", "global", "shared_obj"]
# how the layers' values of a feature differ
VALUE_PATTERNS = ["alike", "alike", "one differs", "alternating", "each its own"]

STRUCTURES: dict[str, list] = {
    "submodule": ["tanh", "relu", "identity", "scale_2", "scale_half", "scale_none", "layernorm"],
    "dtype": ["float32", "float64"],
    "frozen": [True, False],
    "training": [True, False],
    "hook": [None, "double"],
}
# the writes; an attribute assigned makes a layer's record one that is not replayed, so it is drawn less often
WRITES = ["cache", "cache", "accumulate", "accumulate", "slice", "pages", "shared_tensor", "argument", "attribute",
          "outside_attribute"]
# Half the programs are made to replay: every layer alike (until the edit), and none of what makes a record one that
# is not replayed (an attribute assigned, a hook, vars or attrgetter on the layer) or a layer's key another's (an
# object of its own, a read of its index or of its whole ``__dict__``). Drawn from everything, a program almost always
# has a layer that is interpreted, and most have no replay at all. (A dict or an object of its own is compared by
# identity.)
NOT_REPLAYED = {"obj", "dict", "shared_list", "shared_cfg", "hook", "attribute", "outside_attribute"}

PRELUDE = '''
import operator

import torch


class Opts:
    v = None


class Holder(torch.nn.Module):
    def __init__(self, v):
        super().__init__()
        self.v = v


class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x.tanh() if self.k is None else x * self.k


SUBMODULES = {
    "tanh": torch.nn.Tanh,
    "relu": torch.nn.ReLU,
    "identity": torch.nn.Identity,
    "scale_2": lambda: Scale(2.0),
    "scale_half": lambda: Scale(0.5),
    "scale_none": lambda: Scale(None),
    "layernorm": lambda: torch.nn.LayerNorm(4),
}


def hook_double(module, args, out):
    return out * 2.0


OUTSIDE = Opts()  # an object outside the model that a layer may assign, as HF's cache layers do


class KV:
    """A cache that is no module, as HF's: the root passes it to every layer, which writes its own tensor, found by
    the layer's index (HF's ``past_key_values.update(k, v, self.layer_idx)``)."""

    def __init__(self, n):
        self.layers = [torch.zeros(2, 3, 4) for _ in range(n)]

    def update(self, new, pos, i):
        self.layers[i].index_copy_(1, pos, new.unsqueeze(1))
        return self.layers[i].mean(1)  # not the sum, which grows each layer's rounding (Inductor's, fused)
'''


# what a layer that finds its cache by its index may do with the index besides (``KV``): each a use that keeps a replay
# from giving a layer its own index, or (the last) a read of a layer's cache by a constant beside the selection
INDEX_USES = [
    "y = y * (1.0 + self.idx)",
    "y = -y if self.idx < 2 else y",
    "y = y * len(str(self.idx))",
    "y = y * {0: 1.0, 1: 0.5, 2: 2.0, 3: 1.5, 4: 3.0}[self.idx]",
    "y = y * max(self.idx, 1)",
    "y = y + {kv}.layers[0].mean(1)",
]


@dataclass
class Feature:
    name: str  # the parameter's name in ``p``, and the stem of every name the source gives it
    kind: str  # a value kind (``KINDS``), a structure (``STRUCTURES``) or a write (``WRITES``)
    holder: str  # where a value is held (``HOLDERS``, ``SHARED_HOLDERS``); "structure" or "write" otherwise
    values: list = field(default_factory=list)  # one per layer (a shared holder: all alike)
    uses: list[str] = field(default_factory=list)  # templates of USES, for values


@dataclass
class Program:
    """One model's source and its parameters; ``edit`` is what the third call's models are changed by."""

    name: str
    source: str
    params: dict
    grad: bool  # called with grad on, its gradients compared
    edit: str  # a description of the edit

    def show(self) -> str:
        mode = "with grad" if self.grad else "without grad"
        return f"# {self.name}.py ({mode}; the edit: {self.edit})\n{self.source}\n# build({self.params!r})\n"


def _render(template: str, y: str, read: str) -> list[str]:
    return template.format(y=y, R=read).splitlines()


def _per_layer(rng: random.Random, domain: list, n: int) -> list:
    """A value per layer, by one of ``VALUE_PATTERNS`` (values told apart by repr: 2 and 2.0 differ to the code)."""
    first = rng.choice(domain)
    others = [v for v in domain if repr(v) != repr(first)] or [first]
    pattern = rng.choice(VALUE_PATTERNS)
    if pattern == "alike":
        return [first] * n
    if pattern == "one differs":
        k = rng.randrange(1, n)
        return [rng.choice(others) if i == k else first for i in range(n)]
    if pattern == "alternating":
        other = rng.choice(others)
        return [first if i % 2 == 0 else other for i in range(n)]
    return [rng.choice(domain) for _ in range(n)]


def _value(kind: str, read: str) -> str:
    """The expression that makes a held value from ``read``: a copy of a list, so that no two layers (nor two
    models) share one."""
    return f"list({read})" if kind == "list" else read


class _Source:
    """The pieces of a program's source, filled by each feature in turn."""

    def __init__(self, n: int, grad: bool, replayable: bool) -> None:
        self.n, self.replayable = n, replayable
        self.two_outputs = False  # the layers return ``y, y.sum()``
        self.container = "ModuleList"  # or "Sequential": what holds the layers
        self.written = "y.detach()" if grad else "y"  # a buffer holds no autograd history in eager either
        self.top: list[str] = []  # module-level definitions
        self.globals: list[str] = []  # the globals ``build`` assigns
        self.build: list[str] = []  # ``build`` before it makes the root
        self.after: list[str] = []  # ``build`` after it made ``root``
        self.layer_class: list[str] = []  # the Layer class's attributes
        self.layer_init: list[str] = []  # ``Layer.__init__(self, i, p, root)``
        self.layer_params: list[str] = []  # ``Layer.forward``'s parameters after ``x, pos``
        self.layer_body: list[str] = []  # ``Layer.forward``, on ``y``
        self.call_args: list[str] = []  # what the root passes each layer after ``x, pos``
        self.root_init: list[str] = []  # ``Root.__init__`` before it makes the layers
        self.root_pre: list[str] = []  # ``Root.forward`` before the layers
        self.root_post: list[str] = []  # and after
        self.buffers: list[str] = []  # the layers' buffers that a write changes
        self.edits: list[tuple[str, list[str]]] = []  # (what, the lines of ``edit(root)``), one of them is taken
        # the edits of a value thunder's prologue does not check (None, a list, a tuple), which only the extension's
        # guards see: drawn first, three times in four
        self.unchecked_edits: list[tuple[str, list[str]]] = []

    # -- values ----------------------------------------------------------------------------------------------------

    def value(self, rng: random.Random, f: Feature) -> None:
        n, read = f.name, self._hold(rng, f)
        for use in f.uses:
            self.layer_body += _render(use, "y", read)

    def _hold(self, rng: random.Random, f: Feature) -> str:
        """Hold ``f``'s values; the expression of ``Layer.forward`` that reads its layer's."""
        k = self._edited_layer(rng)
        edits = len(self.edits)
        read = self._held(rng, f, k)
        if f.values[k] is None or isinstance(f.values[k], (list, tuple)):
            self.unchecked_edits += self.edits[edits:]
        return read

    def _held(self, rng: random.Random, f: Feature, k: int) -> str:
        n, mine = f.name, _value(f.kind, f'p["{f.name}"][i]')
        other = rng.choice([v for v in DOMAINS[f.kind] if repr(v) != repr(f.values[k])])
        if f.holder == "attr":
            self.layer_init.append(f"self.{n} = {mine}")
            self.edits.append((f"layer {k}'s {n} = {other!r}",
                               [f"root.layers[{k}].{n} = {_value(f.kind, repr(other))}"]))
            reads = [f"self.{n}", f'getattr(self, "{n}")', f'getattr(self, "{n}", None)']
            # a read of the whole ``__dict__`` counts every attribute read, the layer's index too: no replay
            whole = [f'self.__dict__["{n}"]', f'vars(self)["{n}"]', f'operator.attrgetter("{n}")(self)']
            return rng.choice(reads + ([] if self.replayable else whole))
        if f.holder == "maybe":  # set where the layer's value is not None
            self.layer_init += [f'if p["{n}"][i] is not None:', f'    self.{n} = p["{n}"][i]']
            self.edits.append((f"layer {k}'s {n} = {other!r}", [f"root.layers[{k}].{n} = {other!r}"]))
            return rng.choice([f'getattr(self, "{n}", None)', f'(self.{n} if hasattr(self, "{n}") else None)'])
        if f.holder == "child":
            self.layer_init.append(f"self.c_{n} = Holder({mine})")
            self.edits.append((f"layer {k}'s c_{n}.v = {other!r}",
                               [f"root.layers[{k}].c_{n}.v = {_value(f.kind, repr(other))}"]))
            return f"self.c_{n}.v"
        if f.holder == "obj":
            self.layer_init += [f"self.o_{n} = Opts()", f"self.o_{n}.v = {mine}"]
            self.edits.append((f"layer {k}'s o_{n}.v = {other!r}",
                               [f"root.layers[{k}].o_{n}.v = {_value(f.kind, repr(other))}"]))
            return f"self.o_{n}.v"
        if f.holder == "dict":
            self.layer_init.append(f'self.d_{n} = {{"v": {mine}}}')
            self.edits.append((f"layer {k}'s d_{n}['v'] = {other!r}",
                               [f'root.layers[{k}].d_{n}["v"] = {_value(f.kind, repr(other))}']))
            return f'self.d_{n}["v"]'
        if f.holder == "shared_list":  # a global list of every layer's values, indexed by the layer's index
            self.top.append(f"G_{n} = None")
            self.globals.append(f"G_{n}")
            self.build.append(f'G_{n} = [{_value(f.kind, "v")} for v in p["{n}"]]')
            self.edits.append((f"G_{n}[{k}] = {other!r}", [f"G_{n}[{k}] = {_value(f.kind, repr(other))}"]))
            return f"G_{n}[self.idx]"
        if f.holder == "shared_cfg":  # an object every layer holds, its list indexed by the layer's index
            values = f'[{_value(f.kind, "v")} for v in p["{n}"]]'
            self.root_init += [f"self.cfg_{n} = Opts()", f"self.cfg_{n}.vals = {values}"]
            self.layer_init.append(f"self.cfg_{n} = root.cfg_{n}")
            self.edits.append((f"cfg_{n}.vals[{k}] = {other!r}",
                               [f"root.cfg_{n}.vals[{k}] = {_value(f.kind, repr(other))}"]))
            return f"self.cfg_{n}.vals[self.idx]"
        if f.holder == "argument":  # the root passes each layer its value
            self.root_init.append(f'self.vals_{n} = [{_value(f.kind, "v")} for v in p["{n}"]]')
            self.layer_params.append(f"{n}=None")
            self.call_args.append(f"{n}=self.vals_{n}[i]")
            self.edits.append((f"vals_{n}[{k}] = {other!r}", [f"root.vals_{n}[{k}] = {_value(f.kind, repr(other))}"]))
            return n
        # one value for every layer
        one = _value(f.kind, f'p["{n}"][0]')
        if f.holder == "class_attr":
            self.layer_class.append(f"{n} = None")
            self.build.append(f"Layer.{n} = {one}")
            self.edits.append((f"Layer.{n} = {other!r}", [f"Layer.{n} = {_value(f.kind, repr(other))}"]))
            return rng.choice([f"self.{n}", f"type(self).{n}"])
        if f.holder == "global":
            self.top.append(f"G_{n} = None")
            self.globals.append(f"G_{n}")
            self.build.append(f"G_{n} = {one}")
            self.edits.append((f"G_{n} = {other!r}", [f'globals()["G_{n}"] = {_value(f.kind, repr(other))}']))
            return f"G_{n}"
        if f.holder == "shared_obj":
            self.root_init += [f"self.o_{n} = Opts()", f"self.o_{n}.v = {one}"]
            self.layer_init.append(f"self.o_{n} = root.o_{n}")
            self.edits.append((f"o_{n}.v = {other!r}", [f"root.o_{n}.v = {_value(f.kind, repr(other))}"]))
            return f"self.o_{n}.v"
        raise AssertionError(f.holder)

    def _edited_layer(self, rng: random.Random) -> int:
        """The layer an edit changes: one after the first, which a replay may stand for, where there is one."""
        return rng.randrange(1, self.n) if self.n > 1 else 0

    # -- structures ------------------------------------------------------------------------------------------------

    def structure(self, rng: random.Random, f: Feature) -> None:
        n, mine, k = f.name, f'p["{f.name}"][i]', self._edited_layer(rng)
        if f.kind == "submodule":
            self.layer_init.append(f"self.s_{n} = SUBMODULES[{mine}]()")
            self.layer_body.append(f"y = self.s_{n}(y)")
            other = rng.choice([s for s in STRUCTURES["submodule"] if s != f.values[k]])
            self.edits.append((f"layer {k}'s s_{n} = {other}", [f'root.layers[{k}].s_{n} = SUBMODULES["{other}"]()']))
        elif f.kind == "dtype":
            self.layer_init.append(f"self.l_{n} = torch.nn.Linear(4, 4, dtype=getattr(torch, {mine}))")
            self.layer_body.append(f"y = self.l_{n}(y.to(self.l_{n}.weight.dtype)).to(torch.float32)")
        elif f.kind == "frozen":
            self.layer_init.append(f"self.lin.requires_grad_({mine})")
            self.edits.append((f"layer {k}'s lin frozen", [f"root.layers[{k}].lin.requires_grad_(False)"]))
        elif f.kind == "training":
            self.after.append(f'for layer, training in zip(root.layers, p["{n}"]):')
            self.after.append("    layer.train(training)")
            reads = [["if self.training:", "    y = y * 2.0"], ["y = y if self.training else -y"]]
            self.layer_body += rng.choice(reads)
            self.edits.append((f"layer {k} in training", [f"root.layers[{k}].train(True)"]))
        elif f.kind == "hook":
            self.after += [f'for layer, hook in zip(root.layers, p["{n}"]):', "    if hook is not None:",
                           "        layer.register_forward_hook(hook_double)"]  # fmt: skip
        else:
            raise AssertionError(f.kind)

    # -- writes ----------------------------------------------------------------------------------------------------

    def write(self, f: Feature) -> None:
        n, w = f.name, self.written
        if f.kind == "cache":  # a KV cache's write at the call's positions
            self.layer_init.append(f'self.register_buffer("k_{n}", torch.zeros(2, 3, 4))')
            self.layer_body += [f"self.k_{n}.index_copy_(1, pos, {w}.unsqueeze(1))", f"y = y + self.k_{n}.sum(1)"]
            self.buffers.append(f"k_{n}")
        elif f.kind == "accumulate":
            self.layer_init.append(f'self.register_buffer("s_{n}", torch.zeros(4))')
            self.layer_body += [f"self.s_{n}.add_({w}.sum(0))", f"y = y + self.s_{n}"]
            self.buffers.append(f"s_{n}")
        elif f.kind == "slice":
            self.layer_init.append(f'self.register_buffer("b_{n}", torch.ones(2, 4))')
            self.layer_body += [f"self.b_{n}[:, :2] = {w}[:, 2:]", f"y = y * self.b_{n}"]
            self.buffers.append(f"b_{n}")
        elif f.kind == "pages":  # each layer writes its row of one tensor of the root's, which reads it whole
            # (passed: a row registered as the layer's own buffer is refused, aliased_arguments.py's third rule)
            self.root_init.append(f'self.register_buffer("pages_{n}", torch.zeros({self.n}, 4))')
            self.layer_params.append(f"pages_{n}=None")
            self.call_args.append(f"pages_{n}=self.pages_{n}")
            self.layer_body += [f"pages_{n}[self.idx].add_({w}.mean(0))", f"y = y + pages_{n}[self.idx]"]
            self.root_post.append(f"x = x + self.pages_{n}.sum(0)")
        elif f.kind == "shared_tensor":  # one tensor of the root's, which it passes every layer to write whole
            # (passed, as pages are: the same tensor registered as each layer's buffer too is refused)
            self.root_init.append(f'self.register_buffer("acc_{n}", torch.zeros(4))')
            self.layer_params.append(f"acc_{n}=None")
            self.call_args.append(f"acc_{n}=self.acc_{n}")
            self.layer_body += [f"acc_{n}.add_({w}.sum(0))", f"y = y + acc_{n}"]
        elif f.kind == "cache_object":  # each layer reads its index: a record of its own, which may share a program
            self.root_init.append(f"self.kv_{n} = KV({self.n})")
            self.layer_params.append(f"kv_{n}=None")
            self.call_args.append(f"kv_{n}=self.kv_{n}")
            self.layer_body.append(f"y = y + kv_{n}.update({w}, pos, self.idx)")
            self.layer_body += [use.replace("{kv}", f"kv_{n}") for use in f.uses]
            if f.values == ["read after"]:  # else, as HF's model, only the layers read it (a program's call may stand)
                self.root_post.append(f"x = x + torch.stack(self.kv_{n}.layers).sum(0).sum(1)")
        elif f.kind == "argument":
            self.layer_body += ["x.mul_(0.5)", "y = y + x"]
        elif f.kind == "attribute":
            self.layer_init.append(f"self.calls_{n} = 0")
            self.layer_body.append(f"self.calls_{n} = self.calls_{n} + 1")
        elif f.kind == "outside_attribute":
            self.layer_body.append(f"OUTSIDE.rows_{n} = y.shape[0]")
        else:
            raise AssertionError(f.kind)

    def read_a_buffer_before_the_layers(self, rng: random.Random) -> None:
        """The root reads a layer's written buffer before the layers run, and uses it after them."""
        buffer, k = rng.choice(self.buffers), rng.randrange(self.n)
        self.root_pre.append(f"before = self.layers[{k}].{buffer}.sum()")
        self.root_post.append("x = x + before")

    def text(self, name: str) -> str:
        out = [PRELUDE.lstrip("\n"), *self.top, "", ""]
        out += ["class Layer(torch.nn.Module):", *("    " + line for line in self.layer_class)]
        out += [""] if self.layer_class else []
        init = ["super().__init__()", "self.idx = i", "self.lin = torch.nn.Linear(4, 4)", *self.layer_init]
        out += ["    def __init__(self, i, p, root):", *("        " + line for line in init), ""]
        out += [f"    def forward(self, {', '.join(['x', 'pos', *self.layer_params])}):", "        y = self.lin(x)"]
        returned = "y, y.sum()" if self.two_outputs else "y"
        out += [*("        " + line for line in self.layer_body), f"        return {returned}", "", ""]
        call = ", ".join(["x", "pos", *self.call_args])
        out += ["class Root(torch.nn.Module):", "    def __init__(self, p):", "        super().__init__()"]
        out += ["        " + line for line in self.root_init]
        layers = 'Layer(i, p, self) for i in range(p["n"])'
        held = f"({layers})" if self.container == "ModuleList" else f"(*({layers}))"
        out += [f"        self.layers = torch.nn.{self.container}{held}", ""]
        out += ["    def forward(self, x, pos):", *("        " + line for line in self.root_pre)]
        if self.two_outputs:  # a layer returns a second tensor, which the root sums over the layers
            out += ["        total = 0", "        for i, layer in enumerate(self.layers):"]
            out += [f"            x, s = layer({call})", "            total = total + s"]
        else:
            out += ["        for i, layer in enumerate(self.layers):", f"            x = layer({call})"]
        post = [*self.root_post, *(["x = x + total"] if self.two_outputs else [])]
        out += [*("        " + line for line in post), "        return x", "", ""]
        out += ["def build(p):", *([f"    global {', '.join(self.globals)}"] if self.globals else [])]
        out += ['    torch.manual_seed(p["seed"])', *("    " + line for line in self.build)]
        out += ["    root = Root(p)", *("    " + line for line in self.after), "    return root", "", ""]
        return "\n".join(line.rstrip() for line in out)


def make_program(seed: int, index: int) -> Program:
    """The ``index``-th program of ``seed``'s run."""
    rng = random.Random(f"block:{seed}:{index}")
    n, grad, replayable = rng.choice([2, 3, 3, 4, 4, 5]), rng.random() < 0.3, rng.random() < 0.5
    source, params = _Source(n, grad, replayable), {"seed": rng.randrange(1000), "n": n}

    def draw(choices: list) -> str:
        return rng.choice([c for c in choices if not (replayable and c in NOT_REPLAYED)])

    def per_layer(domain: list) -> list:
        return [rng.choice(domain)] * n if replayable else _per_layer(rng, domain, n)

    for i in range(rng.randint(2, 5)):
        name, roll = f"v{i}", rng.random()
        if roll < 0.6:
            kind = rng.choice(KINDS)
            holder = draw(HOLDERS if rng.random() < 0.8 else SHARED_HOLDERS)
            kind = "optional" if holder == "maybe" else kind
            uses = rng.sample(USES[kind], min(len(USES[kind]), rng.choice([1, 1, 2])))
            f = Feature(name, kind, holder, [], uses)
            f.values = [rng.choice(DOMAINS[kind])] * n if holder in SHARED_HOLDERS else per_layer(DOMAINS[kind])
            source.value(rng, f)
        elif roll < 0.7:
            kind = draw(list(STRUCTURES))
            f = Feature(name, kind, "structure", per_layer(STRUCTURES[kind]))
            source.structure(rng, f)
        else:
            # with grad, eager refuses a write into the argument that the layer's own linear saved for its backward
            f = Feature(name, draw([w for w in WRITES if not (grad and w == "argument")]), "write")
            source.write(f)
        params[name] = f.values
    # an HF-like cache (``KV``), which makes every layer a record of its own (in a program made to replay, of the
    # same ops, so that all call one program): drawn apart, as the container is
    if (hf_cache := random.Random(f"block:{seed}:{index}:hf_cache")).random() < 0.25:
        kv = Feature("kv", "cache_object", "write", ["read after"] if hf_cache.random() < 0.5 else [])
        # half of them use the index otherwise too (its own stream: the programs drawn before are kept)
        if (use := random.Random(f"block:{seed}:{index}:index_use")).random() < 0.5:
            kv.uses = [use.choice(INDEX_USES)]
        source.write(kv)
    source.two_outputs = rng.random() < 0.25
    # drawn apart, so that each seed's programs are otherwise what they were before Sequential blocks were candidates
    source.container = "Sequential" if random.Random(f"block:{seed}:{index}:container").random() < 0.3 else "ModuleList"
    if source.buffers and rng.random() < 0.3:
        source.read_a_buffer_before_the_layers(rng)
    edits = source.unchecked_edits if source.unchecked_edits and rng.random() < 0.75 else source.edits
    edit, lines = rng.choice(edits) if edits else ("none", [])
    program_name = f"block_fuzz_{seed}_{index}"
    text = source.text(program_name) + "\n\n" + "\n".join(["def edit(root):", *("    " + x for x in lines or ["pass"])])
    return Program(program_name, re.sub(r"\n{4,}", "\n\n\n", text) + "\n", params, grad, edit)


# ---- running one ------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    program: Program
    differs: list[str] = field(default_factory=list)  # what of a way's differs from eager's, or from the reference
    error: str | None = None
    discarded: str | None = None  # why: the reference way, or eager, fails on it
    blocks: Counter = field(default_factory=Counter)  # the replayed way's block calls, by how they were traced
    reasons: Counter = field(default_factory=Counter)  # and why those interpreted were (the first of a kind aside)
    program_calls: int = 0  # the block programs way's calls of programs (with grad, forwards), in its last trace
    loads: int = 0  # the entries the loaded way loaded
    program_loads: int = 0  # the block programs the loaded way loaded apart, tracing the edited model

    @property
    def wrong(self) -> bool:
        return self.discarded is None and (self.error is not None or bool(self.differs))


def _plain_attributes(model: torch.nn.Module) -> dict:
    """Every submodule's attributes that hold numbers or strings (what a write of an attribute changes)."""
    return {(path, k): v for path, m in model.named_modules() for k, v in vars(m).items()
            if isinstance(v, (bool, int, float, str)) and not k.startswith("_")}  # fmt: skip


def _grads(model: torch.nn.Module) -> dict:
    return {name: p.grad for name, p in model.named_parameters()}


def _call(model: Callable, root: torch.nn.Module, x: torch.Tensor, pos: torch.Tensor, grad: bool):
    """One call; with grad, its output's sum differentiated (the gradients read, then cleared)."""
    if not grad:
        with torch.no_grad():
            return model(x, pos), {}
    out = model(x, pos)
    out.sum().backward()
    grads = _grads(root)
    root.zero_grad(set_to_none=True)
    return out.detach(), grads


def _traced_blocks(jitted) -> object:
    (transform,) = [t for t in thunder.compile_data(jitted).transforms if isinstance(t, InplaceTransform)]
    return transform.traced_blocks


def _decisions(jitted) -> Counter:
    return Counter((d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(jitted))


def _no_more_copies(ours: Counter, theirs: Counter) -> bool:
    """As many writes of each line and bytes as ``theirs``, and no more of them copies: a program's call ends a
    fusion executor's regions, so a write may run in place another way, never as a copy where theirs does not."""
    lines = {tuple(rest) for _, *rest in ours | theirs}

    def count(decisions: Counter, line: tuple, copies_only: bool = False) -> int:
        return sum(n for (how, *rest), n in decisions.items()
                   if tuple(rest) == line and (how == "copy" or not copies_only))  # fmt: skip

    return all(count(ours, line) == count(theirs, line) and count(ours, line, True) <= count(theirs, line, True)
               for line in lines)  # fmt: skip


# each way whose decisions are compared: with which way's, and how they must agree
DECISIONS_AGAINST: dict[str, tuple[str, Callable[[Counter, Counter], bool]]] = {
    "replayed": (REFERENCE, operator.eq),
    "block programs": (REFERENCE, _no_more_copies),
    "loaded": ("block programs", operator.eq),
}


def _failure(who: str) -> str:
    """Why a program is discarded: ``who`` fails, the exception being handled on one line (its traceback's last line
    can be a hint, or empty: Dynamo's), then its traceback."""
    line = traceback.format_exception_only(*sys.exc_info()[:2])[0].strip()
    return f"{who} fails:\n{line}\n{traceback.format_exc(limit=-3)}"


def run_program(program: Program, folder: Path) -> Outcome:
    """``program`` eagerly and each of ``WAYS``, three calls each with an edit before the third; compared."""
    folder.mkdir(parents=True, exist_ok=True)
    outcome, cache_folder = Outcome(program), os.environ.get("THUNDER_EXT_CACHE_DIR")
    os.environ["THUNDER_EXT_CACHE_DIR"] = str(folder / "cache")  # the program's own, for the loaded way
    try:
        (folder / f"{program.name}.py").write_text(program.source)
        module = import_file(program.name, folder / f"{program.name}.py")
        roots = {way: module.build(program.params) for way in ["eager", *WAYS]}
        jitted: dict = {}  # each made at its first call: the loaded way's then finds what the block programs way saved
        inputs = [(torch.randn(2, 4, generator=torch.Generator().manual_seed(c)), torch.tensor([c])) for c in range(3)]
        for c, (x, pos) in enumerate(inputs):
            if c == 2:
                for root in roots.values():
                    module.edit(root)
            eager_x = x.clone()
            try:
                want, want_grads = _call(roots["eager"], roots["eager"], eager_x, pos, program.grad)
            except Exception:  # noqa: BLE001
                outcome.discarded = _failure("eager")
                return outcome
            decisions = {}
            # after the edit the loaded way traces first, where the compile cache holds only the block programs of
            # the layers before it: one of those loaded for an edited layer would compute what the layer did
            order = [REFERENCE, *(w for w in WAYS if w != REFERENCE)]
            if c == 2:
                order.insert(1, order.pop(order.index("loaded")))
            for way in order:
                way_x = x.clone()
                try:
                    if way not in jitted:
                        jitted[way] = thunder_ext.jit(roots[way], **{"compile_cache": False, **WAYS[way]})
                    got, grads = _call(jitted[way], roots[way], way_x, pos, program.grad)
                except Exception:
                    if way == REFERENCE:
                        outcome.discarded = _failure("the interpreted way")
                        return outcome
                    raise
                compared = [("output", got, want), ("gradients", grads, want_grads), ("input", way_x, eager_x),
                            ("buffers", dict(roots[way].state_dict()), dict(roots["eager"].state_dict())),
                            ("attributes", _plain_attributes(roots[way]), _plain_attributes(roots["eager"]))]
                outcome.differs += [f"call {c}, {way}: {what}" for what, ours, theirs in compared
                                    if not same(ours, theirs)]  # fmt: skip
                decisions[way] = _decisions(jitted[way])
            for way, (other, agree) in DECISIONS_AGAINST.items():
                if not agree(decisions[way], decisions[other]):
                    outcome.differs.append(f"call {c}, {way}: decisions {dict(decisions[way])} against the "
                                           f"{other} way's {dict(decisions[other])}")  # fmt: skip
        calls = _traced_blocks(jitted["replayed"]).calls
        outcome.blocks = Counter(call.how for call in calls)
        outcome.reasons = Counter(call.reason for call in calls if call.reason and call.reason != FIRST)
        last = thunder.last_traces(jitted["block programs"])[-1]
        # a block program's call, or with grad its forward's
        outcome.program_calls = sum(called_program(b) is not None for b in last.bound_symbols)
        outcome.loads = thunder_ext.cache_loads(jitted["loaded"])
        traced = _traced_blocks(jitted["loaded"])  # None where it traced nothing: every call loaded an entry
        outcome.program_loads = 0 if traced is None else sum(p.loaded for p in traced.called)
    except Exception:  # noqa: BLE001
        outcome.error = traceback.format_exc(limit=-8)
    finally:
        sys.modules.pop(program.name, None)
        os.environ.pop("THUNDER_EXT_CACHE_DIR")
        if cache_folder is not None:
            os.environ["THUNDER_EXT_CACHE_DIR"] = cache_folder
    return outcome


class Summary(Runs):
    def report(self, shown: int = 10) -> str:
        """The counts (how the replaying way traced its blocks, how many programs the block programs way called),
        and the first ``shown`` wrong programs, each with its source."""
        blocks = sum((o.blocks for o in self.outcomes), Counter())
        called = sum(o.program_calls for o in self.outcomes)
        with_calls = sum(o.program_calls > 0 for o in self.outcomes)
        with_grad = sum(o.program_calls > 0 and o.program.grad for o in self.outcomes)
        lines = [
            f"block fuzzer: {len(self.outcomes)} programs in {self.seconds:.0f} s, {len(self.wrong)} wrong, "
            f"{len(self.discarded)} discarded (eager, or the interpreted way, fails on them)",
            f"  the replaying way's block calls: {blocks['replayed']} replayed, {blocks['interpreted']} interpreted; "
            f"the block programs way: {called} calls of programs in {with_calls} programs' last traces ({with_grad} "
            f"with grad); the loaded "
            f"way: {sum(o.loads for o in self.outcomes)} entries loaded, and after the edit "
            f"{sum(o.program_loads for o in self.outcomes)} block programs",
        ]
        reasons = sum((o.reasons for o in self.outcomes), Counter())
        lines += [f"  interpreted {k}x: {reason}" for reason, k in reasons.most_common(12)]
        why = Counter(o.discarded.splitlines()[1] for o in self.discarded)
        lines += [f"  discarded {k}x: {reason}" for reason, k in why.most_common(5)]
        for o in self.wrong[:shown]:
            lines += ["", f"WRONG: {o.program.name}: {o.error or '; '.join(o.differs)}", o.program.show()]
        return "\n".join(lines)


def run_programs(seed: int, n: int, folder: Path | None = None) -> Summary:
    """``n`` programs of ``seed``, each in a folder of its own under ``folder`` (a temporary one if None), removed
    unless the program went wrong."""
    made = (make_program(seed, index) for index in range(n))
    return run_each(made, run_program, Summary(), folder or tempfile.mkdtemp(prefix="block-fuzz-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--index", type=int, help="one program only")
    parser.add_argument("--show", action="store_true", help="print the program's source instead of running it")
    parser.add_argument("--executor-set", choices=EXECUTOR_SETS, default="defaults",
                        help="the executors put ahead of thunder's defaults, as the tests' executor sets")  # fmt: skip
    args = parser.parse_args(argv)
    thunder.extend.set_default_executors([*executors_of(args.executor_set), *thunder.get_default_executors()])
    logging.getLogger("thunder_ext").setLevel(logging.WARNING)  # a compile log line per way and call otherwise
    if args.index is not None:
        program = make_program(args.seed, args.index)
        print(program.show())
        if args.show:
            return 0
        outcome = run_program(program, Path(tempfile.mkdtemp(prefix="block-fuzz-")) / program.name)
        print(f"differs: {outcome.differs}\nblocks: {dict(outcome.blocks)}, program calls: {outcome.program_calls}")
        print(outcome.error or outcome.discarded or "")
        return int(outcome.wrong)
    summary = run_programs(args.seed, args.programs)
    print(summary.report())
    return int(bool(summary.wrong))


if __name__ == "__main__":
    sys.exit(main())
