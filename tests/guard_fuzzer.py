"""The compile cache's guard, fuzzed: pairs of calls that share a cache key and differ in one Python value.

A pair is the Python source of one small program, written to a file of its own and imported as a module, and two
parameter sets for its ``build(p)``, A's and B's, equal but for at most one value. ``build`` makes the object to
compile (an ``nn.Module``, a function over a list and a dict of tensors, or a bound method of a plain object) and
its inputs; the forward reads the parameters' values in ways that steer the computation (``if self.flag:``,
``for _ in range(self.n):``, ``x * self.k``, ``if self.cfg["mode"] == "a"``, ``self.act(x)``, ``len(self.sizes)``,
``getattr(self, "maybe", None) is None``, ``vars(self)[...]``, ``operator.attrgetter``, ``self.__dict__``, a
closure's cell, a default, a partial's keyword, a global the code names), each held where ``p`` puts it: an
attribute set in ``__init__`` or after, a class attribute or a global assigned at run time, a submodule, a hook, a
buffer. A and B are the same file, so they have the same cache key, and what B differs in is in no source text: the
cache must tell them apart by the state's digest (``thunder_ext/compile_cache/state.py``) or thunder's prologue.

``run_pair`` compiles A with ``thunder_ext.jit(..., compile_cache=True)`` over a fresh cache folder and calls it (the
entry is saved), then runs B three ways, each of which must equal eager, as a recompilation or as a correct reuse:

1. a fresh ``thunder_ext.jit`` of B over that folder (against a third object built from B's parameters): the disk
   cache's guard (the state digest and the prologue);
2. A's jitted object called with B's inputs once B's ``build`` ran (B's globals, class attributes and companion
   module's values), against an eager twin of A: thunder's in-memory cache and the prologue's checks;
3. A's jitted object again, after A's object and its twin were edited alike in place to hold B's Python values
   (attributes, submodules, hooks and configs; a function's defaults and cells; a partial's keywords), against the
   twin.

Pairs whose B equals A, or differs from it in tensor values only (a seed, a buffer's contents), must load: the
fuzzer is not vacuous.

``FOUND_CASES`` are the places the first version of the state's digest did not see, each at its smallest (the
fuzzer found them; they are regression cases now). Run by hand::

    .venv/bin/python tests/guard_fuzzer.py --pairs 200 --seed 0          # a summary, and every wrong pair
    .venv/bin/python tests/guard_fuzzer.py --seed 0 --index 17 --show    # one pair's source and parameters
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import importlib.util
import os
import random
import re
import shutil
import sys
import tempfile
import textwrap
import time
import traceback
import types
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import thunder
import torch

import thunder_ext

# the values a parameter of each kind takes; a pair's B takes another of its kind's
DOMAINS: dict[str, list] = {
    "int_loop": [0, 1, 2, 3],
    "int_shape": [1, 2, 4, 8],
    "float": [0.5, 2.0, -1.5, 2],
    "bool": [True, False, 1, 0],
    "optional": [None, 2.0, 0.5],
    "str_mode": ["a", "b", "c", ""],
    "str_op": ["sin", "cos", "tanh"],
    "list": [[], [2.0], [2.0, 0.5], [0.5, 2.0, 3.0]],
    "tuple": [(1.0,), (1.0, 2.0), (2.0, 1.0), (3.0,)],
    "dict": [{"mode": "a", "k": 2.0}, {"mode": "b", "k": 2.0}, {"mode": "a", "k": 0.5},
             {"mode": "a", "k": 2.0, "bias": 1.0}],  # fmt: skip
    "callable": ["relu", "tanh", "double", "lambda_a", "lambda_b", "partial_2", "partial_half", "closure_3",
                 "closure_neg"],  # fmt: skip
    # a module's only
    "submodule": ["tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "identity", "layernorm", "layernorm_eps",
                  "layernorm_plain", "linear", "linear_nobias", "scale_2", "scale_none", "stack_0", "stack_1",
                  "stack_3", "seq"],  # fmt: skip
    "hook": [None, "double", "shift", "pre_half"],
    "training": [True, False],
    "buffer_value": [0.0, 1.0, 2.0],  # tensor contents only: the digest is equal, and B must load
    "buffer_shape": [1, 4],
    # a function's inputs, which thunder's prologue checks
    "n_xs": [1, 2, 3],
    "d_keys": [["a"], ["a", "b"]],
}
_PLAIN = [k for k in DOMAINS if k not in ("submodule", "hook", "training", "buffer_value", "buffer_shape", "n_xs",
                                          "d_keys")]  # fmt: skip

# how the code uses a value: ``{y}`` is the tensor computed so far, ``{R}`` reads the value
USES: dict[str, list[str]] = {
    "int_loop": ["for _ in range({R}):\n    {y} = {y} * 0.5 + 1.0", "{y} = {y} * {R}"],
    "int_shape": ["{y} = {y}.reshape({R}, -1).softmax(0).reshape(2, 4)"],
    "float": ["{y} = {y} * {R}", "{y} = {y} + {R}"],
    "bool": ["if {R}:\n    {y} = {y}.relu()\nelse:\n    {y} = {y} - 1.0", "{y} = {y} * 2.0 if {R} else {y}"],
    "optional": ["if {R} is None:\n    {y} = {y} + 1.0\nelse:\n    {y} = {y} * {R}",
                 "{y} = {y} if {R} is None else {y} - {R}"],  # fmt: skip
    "str_mode": ['if {R} == "a":\n    {y} = {y}.sin()\nelif {R} == "b":\n    {y} = {y}.cos()\n'
                 'else:\n    {y} = {y} * 2.0'],
    "str_op": ["{y} = getattr(torch, {R})({y})"],
    "list": ["for item in {R}:\n    {y} = {y} * item", "{y} = {y} * len({R})", "if {R}:\n    {y} = {y} + {R}[-1]",
             "{y} = {y} + sum({R})"],  # fmt: skip
    "dict": ['{y} = {y} * {R}["k"] if {R}["mode"] == "a" else {y} + {R}["k"]',
             'if "bias" in {R}:\n    {y} = {y} + {R}["bias"]', "for key in sorted({R}):\n    {y} = {y} + len(key)"],
    "callable": ["{y} = {R}({y})"],
}  # fmt: skip
USES["tuple"] = USES["list"]

# where a value is held, by the kind of object compiled ("module", "method", "function")
HOLDERS: dict[str, list[str]] = {
    "module": ["attr", "maybe_attr", "obj_attr", "dataclass", "class_attr", "global", "helper_global",
               "global_obj", "cfgmod", "closure", "default", "kwdefault", "partial"],
    "method": ["attr", "maybe_attr", "obj_attr", "dataclass", "class_attr", "global", "helper_global",
               "global_obj", "cfgmod", "closure", "default", "kwdefault", "partial"],
    "function": ["closure", "default", "kwdefault", "partial", "global", "globals_call", "helper_global",
                 "global_obj", "class_attr", "cfgmod"],
}  # fmt: skip

# each place the first version of the state's digest did not see (a user's class by its methods' code alone, a
# module of the user's by its name alone, ``globals()[...]``), at its smallest: a program (``{name}``: its module's
# name), its companion module ``cfg``, and A's and B's parameters; B differs from A in a None, which thunder's
# prologue does not check, and loaded A's entry then
FOUND_CASES: dict[str, tuple[str, str | None]] = {
    "a global a module's forward reads": ("""
        G = None


        class Root(torch.nn.Module):
            def forward(self, x):
                return x if G is None else x * G


        def build(p):
            global G
            G = p["v"]
            return Root(), (torch.ones(2, 4),)
    """, None),
    "a global of a helper a module's forward calls": ("""
        G = None


        def helper(x):
            return x if G is None else x * G


        class Root(torch.nn.Module):
            def forward(self, x):
                return helper(x)


        def build(p):
            global G
            G = p["v"]
            return Root(), (torch.ones(2, 4),)
    """, None),
    "a class attribute a module's forward reads": ("""
        class Root(torch.nn.Module):
            c = None

            def forward(self, x):
                return x if self.c is None else x * self.c


        def build(p):
            Root.c = p["v"]
            return Root(), (torch.ones(2, 4),)
    """, None),
    "a class attribute of a global object a function reads": ("""
        class Opts:
            c = None


        OPTS = Opts()


        def root(x):
            return x if OPTS.c is None else x * OPTS.c


        def build(p):
            Opts.c = p["v"]
            return root, (torch.ones(2, 4),)
    """, None),
    "an attribute of a module a function reads": ("""
        import {name}_cfg as cfg


        def root(x):
            return x if cfg.V is None else x * cfg.V


        def build(p):
            cfg.V = p["v"]
            return root, (torch.ones(2, 4),)
    """, "V = None\n"),
    "a global a function reads through globals()": ("""
        G = None


        def root(x):
            g = globals()["G"]
            return x if g is None else x * g


        def build(p):
            global G
            G = p["v"]
            return root, (torch.ones(2, 4),)
    """, None),
}


def found_pair(case: str) -> Pair:
    """FOUND_CASES' ``case`` as a pair: A's value None, B's 3.0."""
    body, cfg = FOUND_CASES[case]
    name = "guard_found_" + "_".join(case.replace("()", "").replace("'", "").split())
    source = "import torch\n" + textwrap.dedent(body).replace("{name}", name)
    return Pair(name, "found", source, cfg, {"v": None}, {"v": 3.0}, f"v: None -> 3.0 ({case})", must_load=False)


# the holders whose uses are in a helper function, which reads the value as its parameter
_IN_HELPER = ("closure", "default", "kwdefault", "partial")

PRELUDE = '''
import dataclasses
import functools
import operator

import torch
{imports}

def double(t):
    return t * 2.0


def scaled(t, k):
    return t * k


def make_scaler(k):
    def scaler(t):
        return t * k

    return scaler


CALLABLES = {{
    "relu": torch.relu,
    "tanh": torch.tanh,
    "double": double,
    "lambda_a": lambda t: t + 1.0,
    "lambda_b": lambda t: t * -1.0,
    "partial_2": functools.partial(scaled, k=2.0),
    "partial_half": functools.partial(scaled, k=0.5),
    "closure_3": make_scaler(3.0),
    "closure_neg": make_scaler(-1.0),
}}


def hook_double(module, args, out):
    return out * 2.0


def hook_shift(module, args, out):
    return out + 1.0


def pre_hook_half(module, args):
    return (args[0] * 0.5,)


HOOKS = {{
    "double": lambda m: m.register_forward_hook(hook_double),
    "shift": lambda m: m.register_forward_hook(hook_shift),
    "pre_half": lambda m: m.register_forward_pre_hook(pre_hook_half),
}}


class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x.tanh() if self.k is None else x * self.k


class Stack(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


SUBMODULES = {{
    "tanh": torch.nn.Tanh,
    "sigmoid": torch.nn.Sigmoid,
    "relu": torch.nn.ReLU,
    "gelu": torch.nn.GELU,
    "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh"),
    "identity": torch.nn.Identity,
    "layernorm": lambda: torch.nn.LayerNorm(4),
    "layernorm_eps": lambda: torch.nn.LayerNorm(4, eps=0.5),
    "layernorm_plain": lambda: torch.nn.LayerNorm(4, elementwise_affine=False),
    "linear": lambda: torch.nn.Linear(4, 4),
    "linear_nobias": lambda: torch.nn.Linear(4, 4, bias=False),
    "scale_2": lambda: Scale(2.0),
    "scale_none": lambda: Scale(None),
    "stack_0": lambda: Stack(0),
    "stack_1": lambda: Stack(1),
    "stack_3": lambda: Stack(3),
    "seq": lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()),
}}
'''


@dataclass
class Feature:
    name: str  # the parameter's name in ``p``, and the stem of every name the source gives it
    kind: str  # a key of DOMAINS (or "inplace": a buffer written in place, with no parameter)
    holder: str  # where the value is held: a key of HOLDERS' lists, or the kind's own place for a module's kinds
    uses: list[str] = field(default_factory=list)  # templates of USES, for the plain kinds


@dataclass
class Pair:
    """One program's source (and its companion module's, where a value is held there) and A's and B's parameters."""

    name: str
    root: str  # "module", "method" or "function"
    source: str
    cfg_source: str | None
    params_a: dict
    params_b: dict
    change: str  # "identical", "tensor values", or what differs
    must_load: bool  # B's state is A's: B must load A's entry

    def show(self) -> str:
        cfg = f"\n# {self.name}_cfg.py\n{self.cfg_source}" if self.cfg_source else ""
        return (f"# {self.name}.py ({self.root}; B differs in {self.change})\n{self.source}{cfg}\n"
                f"# A: build({self.params_a!r})\n# B: build({self.params_b!r})\n")  # fmt: skip


def _valexpr(f: Feature) -> str:
    """The expression of ``build``'s ``p`` that makes the value held: a copy of a container, so that A's and B's
    objects share none."""
    read = f'p["{f.name}"]'
    return {"callable": f"CALLABLES[{read}]", "list": f"list({read})", "tuple": f"tuple({read})",
            "dict": f"dict({read})"}.get(f.kind, read)  # fmt: skip


def _render(template: str, y: str, read: str) -> list[str]:
    return template.format(y=y, R=read).splitlines()


def _reads(rng: random.Random, f: Feature, root: str) -> str:
    """An expression of the root's code that reads ``f``'s value (the holders whose uses are in a helper read it
    there)."""
    n = f.name
    if f.holder == "attr":
        return rng.choice([f"self.{n}", f'vars(self)["{n}"]', f'self.__dict__["{n}"]',
                           f'operator.attrgetter("{n}")(self)', f'getattr(self, "{n}", None)', f'getattr(self, "{n}")'])
    if f.holder == "maybe_attr":
        return rng.choice([f'getattr(self, "{n}", None)', f'(self.{n} if hasattr(self, "{n}") else None)'])
    if f.holder == "obj_attr":
        return rng.choice([f"self.o_{n}.v", f'vars(self.o_{n})["v"]', f'operator.attrgetter("o_{n}.v")(self)'])
    if f.holder == "dataclass":
        return rng.choice([f"self.dc_{n}.v", f'getattr(self.dc_{n}, "v")'])
    if f.holder == "class_attr":
        if root == "function":
            return f"OPTS_{n}.v"
        return rng.choice([f"self.{n}", f"type(self).{n}", f'getattr(self, "{n}")'])
    if f.holder == "global":
        return f"G_{n}"
    if f.holder == "globals_call":
        return f'globals()["G_{n}"]'
    if f.holder == "global_obj":
        return rng.choice([f"OBJ_{n}.v", f'getattr(OBJ_{n}, "v")'])
    if f.holder == "cfgmod":
        return rng.choice([f"cfg.V_{n}", f'getattr(cfg, "V_{n}")'])
    if root == "function" and f.holder in _IN_HELPER:
        return n
    raise AssertionError(f.holder)


def _plain_feature(rng: random.Random, name: str, root: str) -> Feature:
    kind = rng.choice(_PLAIN)
    holder = rng.choice(HOLDERS[root])
    if holder == "maybe_attr":
        kind = "optional"
    uses = rng.sample(USES[kind], min(len(USES[kind]), rng.choice([1, 1, 2])))
    return Feature(name, kind, holder, uses)


def _module_feature(rng: random.Random, name: str, taken: set[str]) -> Feature:
    """A value only a module holds: a submodule, a hook, its training flag (once), a buffer's contents or shape, or
    a buffer it writes in place (no value)."""
    kinds = ["submodule", "submodule", "hook", "training", "buffer_value", "buffer_shape", "inplace"]
    kind = rng.choice([k for k in kinds if k != "training" or k not in taken])
    return Feature(name, kind, kind)


class _Source:
    """The pieces of a program's source, filled by each feature in turn."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.top: list[str] = []  # module-level definitions
        self.class_body: list[str] = []  # the root class's attributes
        self.init: list[str] = []  # the root class's ``__init__``, or the function's factory
        self.positional: list[str] = []  # the function's parameters after ``xs, d``: with a default
        self.keywords: list[str] = []  # and keyword-only: with a default, or bound by a partial
        self.partial: list[str] = []  # keywords of the partial ``build`` makes of the function
        self.build: list[str] = []  # ``build`` before it makes the object
        self.after: list[str] = []  # ``build`` after it made ``obj``
        self.body: list[str] = []  # the forward, ``run`` or function body
        self.cfg: list[str] = []  # the companion module, ``cfg``
        self.globals: list[str] = []  # what ``build`` assigns

    def add(self, rng: random.Random, f: Feature) -> None:
        n, root = f.name, self.root
        value = _valexpr(f)
        if f.kind == "submodule":
            self.init.append(f'self.s_{n} = SUBMODULES[p["{n}"]]()')
            call = rng.choice([f"self.s_{n}", f'getattr(self, "s_{n}")', f'self._modules["s_{n}"]'])
            self.body.append(f"y = {call}(y)")
        elif f.kind == "hook":
            target = rng.choice(["obj", "obj.lin"])
            self.after += [f'if p["{n}"] is not None:', f'    HOOKS[p["{n}"]]({target})']
        elif f.kind == "training":
            self.after.append(f'obj.train(p["{n}"])')
            self.body += rng.choice([["if self.training:", "    y = y * 2.0"], ["y = y if self.training else -y"]])
        elif f.kind == "buffer_value":
            self.init.append(f'self.register_buffer("b_{n}", torch.full((4,), float(p["{n}"])))')
            self.body.append(f"y = y + self.b_{n}")
        elif f.kind == "buffer_shape":
            self.init.append(f'self.register_buffer("b_{n}", torch.ones(p["{n}"]) * 1.5)')
            self.body.append(f"y = y * self.b_{n}")
        elif f.kind == "inplace":
            self.init.append(f'self.register_buffer("seen_{n}", torch.zeros(4))')
            self.body += [f"self.seen_{n}.add_(y.sum(0))", f"y = y + self.seen_{n}"]
        elif f.holder == "helper_global":
            self.top += [f"H_{n} = None", "", "", f"def helper_{n}(t):"]
            self.top += ["    " + line for u in f.uses for line in _render(u, "t", f"H_{n}")] + ["    return t", "", ""]
            self.globals.append(f"H_{n}")
            self.build.append(f"H_{n} = {value}")
            self.body.append(f"y = helper_{n}(y)")
        elif f.holder in _IN_HELPER and root != "function":
            lines = ["    " * 2 + line for u in f.uses for line in _render(u, "t", "val")] + ["        return t"]
            if f.holder == "partial":
                self.top += [f"def use_{n}(t, val):", *(line[4:] for line in lines), "", ""]
                self.init.append(f"self.f_{n} = functools.partial(use_{n}, val={value})")
            else:
                inner = {"closure": "inner(t)", "default": "inner(t, val=val_)", "kwdefault": "inner(t, *, val=val_)"}
                outer = "val" if f.holder == "closure" else "val_"
                self.top += [f"def make_{n}({outer}):", f"    def {inner[f.holder]}:", *lines, "", "    return inner"]
                self.top += ["", ""]
                self.init.append(f"self.f_{n} = make_{n}({value})")
            self.body.append(f"y = self.f_{n}(y)")
        else:
            if f.holder == "attr":
                self.init.append(f"self.{n} = {value}")
            elif f.holder == "maybe_attr":
                self.after += [f'if p["{n}"] is not None:', f'    obj.{n} = p["{n}"]']
            elif f.holder == "obj_attr":
                self.init += [f"self.o_{n} = Opts()", f"self.o_{n}.v = {value}"]
            elif f.holder == "dataclass":
                self.init.append(f"self.dc_{n} = Config(v={value})")
            elif f.holder == "class_attr":  # a function, as a class's attribute, is a static method's
                value = f"staticmethod({value})" if f.kind == "callable" else value
                if root == "function":
                    self.top += [f"class Opts_{n}:", "    v = None", "", "", f"OPTS_{n} = Opts_{n}()", "", ""]
                    self.build.append(f"Opts_{n}.v = {value}")
                else:
                    self.class_body.append(f"{n} = None")
                    self.build.append(f"Root.{n} = {value}")
            elif f.holder in ("global", "globals_call"):
                self.top.append(f"G_{n} = None")
                self.globals.append(f"G_{n}")
                self.build.append(f"G_{n} = {value}")
            elif f.holder == "global_obj":
                self.top.append(f"OBJ_{n} = Opts()")
                self.build.append(f"OBJ_{n}.v = {value}")
            elif f.holder == "cfgmod":
                self.cfg.append(f"V_{n} = None")
                self.build.append(f"cfg.V_{n} = {value}")
            elif f.holder in ("closure", "kwdefault"):  # a function's: a cell of its factory, a keyword's default
                self.init.append(f"{n} = {value}")
                if f.holder == "kwdefault":
                    self.keywords.append(f"{n}={n}")
            elif f.holder == "default":
                self.positional.append(f"{n}={value}")
            elif f.holder == "partial":
                self.keywords.append(n)
                self.partial.append(f"{n}={value}")
            for u in f.uses:
                self.body += _render(u, "y", _reads(rng, f, root))

    def text(self, name: str) -> str:
        imports = f"\nimport {name}_cfg as cfg\n" if self.cfg else ""
        out = [PRELUDE.format(imports=imports).lstrip("\n"), "", "class Opts:", "    v = None", "", "",
               "@dataclasses.dataclass", "class Config:", "    v: object", "", ""]  # fmt: skip
        out += [*self.top, "", ""] if self.top else []
        if self.root == "function":
            params = ", ".join(["xs", "d", *self.positional, *(["*", *self.keywords] if self.keywords else [])])
            out += ["def make_root(p):", *("    " + line for line in self.init), f"    def root({params}):"]
            out += ["        " + line for line in [*_INPUT_BODY, *self.body, "return y"]]
            out += ["", "    return root", "", ""]
        else:
            if self.root == "module":
                init = ["super().__init__()", "self.lin = torch.nn.Linear(4, 4)", *self.init]
                forward = ["def forward(self, x):", "    y = self.lin(x)"]
            else:
                init = self.init or ["pass"]
                forward = ["def run(self, xs, d):", *("    " + line for line in _INPUT_BODY)]
            out += [f"class Root{'(torch.nn.Module)' if self.root == 'module' else ''}:"]
            out += ["    " + line for line in [*self.class_body, "def __init__(self, p):", *("    " + i for i in init)]]
            out.append("")
            out += ["    " + line for line in [*forward, *("    " + b for b in self.body), "    return y", "", ""]]
        out += ["def build(p):"]
        out += [f"    global {', '.join(self.globals)}"] if self.globals else []
        out += ['    torch.manual_seed(p["seed"])', *("    " + line for line in self.build)]
        if self.root == "function":
            out.append("    obj = make_root(p)")
            out += [f"    obj = functools.partial(obj, {', '.join(self.partial)})"] if self.partial else []
        else:
            out.append("    obj = Root(p)")
        out += ["    " + line for line in self.after]
        if self.root == "module":
            out.append("    return obj, (torch.randn(2, 4),)")
        else:
            out += ['    xs = [torch.randn(2, 4) for _ in range(p["n_xs"])]',
                    '    d = {key: torch.randn(2, 4) for key in p["d_keys"]}']  # fmt: skip
            out.append(f"    return {'obj' if self.root == 'function' else 'obj.run'}, (xs, d)")
        text = "\n".join(line.rstrip() for line in out)
        return re.sub(r"\n{4,}", "\n\n\n", text) + "\n"  # two blank lines between definitions, as written by hand


_INPUT_BODY = ["y = xs[0] * 1.0", "for t in xs[1:]:", "    y = y + t", 'y = y + d["a"]', 'if "b" in d:',
               '    y = y * d["b"]']  # fmt: skip


def make_pair(seed: int, index: int) -> Pair:
    """The ``index``-th pair of ``seed``'s run."""
    rng = random.Random(f"{seed}:{index}")
    root = rng.choices(["module", "method", "function"], weights=[5, 2, 3])[0]
    features: list[Feature] = []
    for i in range(rng.randint(2, 5)):
        if root == "module" and rng.random() < 0.35:
            features.append(_module_feature(rng, f"v{i}", {f.kind for f in features}))
        else:
            features.append(_plain_feature(rng, f"v{i}", root))
    source = _Source(root)
    for f in features:
        source.add(rng, f)
    name = f"guard_fuzz_{seed}_{index}"
    a = {"seed": rng.randrange(1000)} | {f.name: rng.choice(DOMAINS[f.kind]) for f in features if f.kind in DOMAINS}
    if root != "module":
        a |= {"n_xs": rng.choice(DOMAINS["n_xs"]), "d_keys": rng.choice(DOMAINS["d_keys"])}
    inputs = [Feature(k, k, "input") for k in ("n_xs", "d_keys") if root != "module"]
    python = [f for f in features if f.kind in DOMAINS and f.kind != "buffer_value"] + inputs
    buffers = [f for f in features if f.kind == "buffer_value"]
    b, roll = dict(a), rng.random()
    if roll < 0.15:
        changed, change = None, "identical"
    elif roll < 0.25 or not python:
        changed = rng.choice([None, *buffers])
        if changed is None:
            b["seed"] = a["seed"] + 1
            change = f"tensor values: seed {a['seed']} -> {b['seed']}"
    else:
        changed = rng.choice(python)
    if changed is not None:
        # by repr: 2 and 2.0, 1 and True are other values to the code (and the digest)
        b[changed.name] = rng.choice([v for v in DOMAINS[changed.kind] if repr(v) != repr(a[changed.name])])
        change = f"{changed.name} ({changed.kind}, held by {changed.holder}): {a[changed.name]!r} -> "
        change += repr(b[changed.name])
        change = f"tensor values: {change}" if changed.kind == "buffer_value" else change
    must_load = change == "identical" or change.startswith("tensor values")
    cfg = "\n".join(source.cfg) + "\n" if source.cfg else None
    return Pair(name, root, source.text(name), cfg, a, b, change, must_load)


def pairs(seed: int, n: int) -> Iterator[Pair]:
    for index in range(n):
        yield make_pair(seed, index)


@dataclass
class Outcome:
    pair: Pair
    equal: bool = False  # B by a fresh jit over A's cache folder equals eager B
    loaded: bool = False
    saved: bool = False  # A's compilation was saved
    error: str | None = None
    discarded: bool = False  # A or B fails under stock thunder.jit too: nothing of the cache's to check
    # the same jitted object of A, called with B's inputs once B's build ran (B's globals, class attributes...):
    # equal to an eager twin of A; then once both were edited in place to hold B's Python values: equal again
    equal_same_object: bool = False
    equal_edited: bool = False

    @property
    def wrong(self) -> bool:
        equal = self.equal and self.equal_same_object and self.equal_edited
        return not self.discarded and (self.error is not None or not equal)


def import_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        close = isinstance(b, torch.Tensor) and a.shape == b.shape
        return close and torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def _state(obj: object) -> dict:
    return dict(obj.state_dict()) if isinstance(obj, torch.nn.Module) else {}


def run_pair(pair: Pair, folder: Path) -> Outcome:
    """A compiled and called over a fresh cache in ``folder``; then B three ways, each against eager: by a fresh
    ``thunder_ext.jit`` over that folder, through A's jitted object once B's build ran, and through A's jitted object
    after an edit in place that makes A's object (and its eager twin) hold B's Python values. The pair's modules are
    removed from ``sys.modules`` after."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [pair.name] + ([f"{pair.name}_cfg"] if pair.cfg_source else [])
    outcome = Outcome(pair)
    try:
        if pair.cfg_source:
            (folder / f"{pair.name}_cfg.py").write_text(pair.cfg_source)
            import_file(f"{pair.name}_cfg", folder / f"{pair.name}_cfg.py")
        (folder / f"{pair.name}.py").write_text(pair.source)
        module = import_file(pair.name, folder / f"{pair.name}.py")
        os.environ["THUNDER_EXT_CACHE_DIR"] = str(folder / "cache")
        with torch.no_grad():
            a, args_a = module.build(pair.params_a)
            eager_a = copy.deepcopy(a)  # A's twin, called as A is: its buffers written as A's
            jitted_a = thunder_ext.jit(a, compile_cache=True)
            try:
                jitted_a(*args_a)
            except Exception:
                outcome.discarded = _stock_fails(module, pair.params_a)
                raise
            eager_a(*module.build(pair.params_a)[1])
            outcome.saved = any((folder / "cache").glob("*/*.entry"))
            # 1. a fresh jit over the folder
            b, args_b = module.build(pair.params_b)
            jitted = thunder_ext.jit(b, compile_cache=True)
            try:
                got = jitted(*args_b)
            except Exception:
                outcome.discarded = _stock_fails(module, pair.params_b)
                raise
            outcome.loaded = thunder_ext.cache_loads(jitted) > 0
            eager, args_e = module.build(pair.params_b)
            want = eager(*args_e)
            outcome.equal = same(got, want) and same(args_b, args_e) and same(_state(b), _state(eager))
            # 2. A's jitted object, with B's inputs, B's globals and class attributes
            got, want = jitted_a(*module.build(pair.params_b)[1]), eager_a(*module.build(pair.params_b)[1])
            outcome.equal_same_object = same(got, want) and same(_state(a), _state(eager_a))
            # 3. A's object and its eager twin edited alike, in place, to hold B's Python values
            _edit_in_place(a, module.build(pair.params_b)[0])
            _edit_in_place(eager_a, module.build(pair.params_b)[0])
            got, want = jitted_a(*module.build(pair.params_b)[1]), eager_a(*module.build(pair.params_b)[1])
            outcome.equal_edited = same(got, want) and same(_state(a), _state(eager_a))
    except Exception:
        outcome.error = traceback.format_exc(limit=-8)
    finally:
        for name in names:
            sys.modules.pop(name, None)
    return outcome


def _edit_in_place(a: object, b: object) -> None:
    """Make ``a`` hold ``b``'s Python values, ``a`` itself edited: a module's attributes (configs, functions,
    hooks, ``training``), each submodule of the same class edited so, one of another class (or new) put in its
    place, its tensors with it; another object's attributes; a function's defaults and closure cells; a partial's
    keywords. The parameters and buffers of a module edited so stay ``a``'s (B differs in a Python value; a
    parameter rebound is ``tests/test_python_guards.py``'s)."""
    if isinstance(a, types.MethodType):
        _edit_in_place(a.__self__, b.__self__)
    elif isinstance(a, functools.partial):
        a.keywords.clear()
        a.keywords.update(b.keywords)
        _edit_in_place(a.func, b.func)
    elif isinstance(a, types.FunctionType):
        a.__defaults__, a.__kwdefaults__ = b.__defaults__, b.__kwdefaults__
        for mine, theirs in zip(a.__closure__ or (), b.__closure__ or ()):
            mine.cell_contents = theirs.cell_contents
    elif isinstance(a, torch.nn.Module):
        kept = ("_parameters", "_buffers", "_modules")
        for name in [n for n in vars(a) if n not in vars(b) and n not in kept]:
            del vars(a)[name]
        vars(a).update((n, v) for n, v in vars(b).items() if n not in kept)
        for name in [n for n in a._modules if n not in b._modules]:
            del a._modules[name]
        for name, theirs in b._modules.items():
            mine = a._modules.get(name)
            if mine is not None and type(mine) is type(theirs):
                _edit_in_place(mine, theirs)
            else:
                a._modules[name] = theirs
    else:
        vars(a).clear()
        vars(a).update(vars(b))


def _stock_fails(module, params: dict) -> bool:
    """Whether stock ``thunder.jit`` fails on the object ``params`` builds too (thunder 0.2.6 cannot compile some:
    a module with a forward pre-hook, whose prologue looks the hook up by a handle's id, ``KeyError``)."""
    stock, args = module.build(params)
    try:
        thunder.jit(stock)(*args)
    except Exception:  # noqa: BLE001
        return True
    return False


@dataclass
class Runs:
    """The outcomes of a fuzzer's run (each with ``wrong`` and ``discarded``), and how long it took; shared with
    ``block_fuzzer.py``."""

    outcomes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def wrong(self) -> list:
        return [o for o in self.outcomes if o.wrong]

    @property
    def discarded(self) -> list:
        return [o for o in self.outcomes if o.discarded]


class Summary(Runs):
    """The guard fuzzer's run."""

    @property
    def must_load(self) -> list[Outcome]:
        """Pairs whose B is A's state, but for those stock thunder.jit cannot compile (nothing is saved)."""
        return [o for o in self.outcomes if o.pair.must_load and not o.discarded]

    @property
    def not_loaded(self) -> list[Outcome]:
        """Pairs whose B is A's state, that did not load."""
        return [o for o in self.must_load if not o.loaded and not o.wrong]

    def report(self, shown: int = 10) -> str:
        """The counts, and the first ``shown`` wrong pairs, each with its source."""
        differing = [o for o in self.outcomes if not o.pair.must_load]
        identical = [o for o in self.must_load if o.pair.change == "identical"]
        tensors = [o for o in self.must_load if o.pair.change != "identical"]
        unsaved = [o.pair.name for o in self.outcomes if not o.saved and not o.wrong and not o.discarded]
        roots = ", ".join(f"{k} {v}" for k, v in sorted(Counter(o.pair.root for o in self.outcomes).items()))
        lines = [
            f"guard fuzzer: {len(self.outcomes)} pairs in {self.seconds:.0f} s ({roots}), {len(self.wrong)} wrong, "
            f"{len(self.discarded)} discarded (stock thunder.jit cannot compile A, or B, either)",
            f"  B equal to A: {sum(o.loaded for o in identical)} of {len(identical)} loaded; in tensor values only: "
            f"{sum(o.loaded for o in tensors)} of {len(tensors)} loaded",
            f"  B differing in a Python value: {len(differing)}, {sum(o.loaded for o in differing)} loaded",
        ]
        lines += [f"  NOT LOADED: {', '.join(o.pair.name for o in self.not_loaded)}"] if self.not_loaded else []
        lines += [f"  A NOT SAVED: {', '.join(unsaved)}"] if unsaved else []
        for o in self.wrong[:shown]:
            what = o.error or (f"B by a fresh jit {'loaded A' if o.loaded else 'compiled'}: equal {o.equal}; through "
                               f"A's jitted object: equal {o.equal_same_object}, after the edit {o.equal_edited}")
            lines += ["", f"WRONG: {o.pair.name}: {what}", o.pair.show()]
        return "\n".join(lines)


def run_pairs(seed: int, n: int, folder: Path | None = None) -> Summary:
    """``n`` pairs of ``seed``, each in a folder of its own under ``folder`` (a temporary one if None), removed
    unless the pair went wrong."""
    return run_each(pairs(seed, n), run_pair, Summary(), folder or tempfile.mkdtemp(prefix="guard-fuzz-"))


def run_each(items: Iterable, run: Callable, summary: Any, folder: Path | str) -> Any:
    """``run(item, folder / item.name)`` for each item, its outcome appended to ``summary.outcomes`` and its folder
    removed unless the outcome went wrong; ``summary.seconds`` set. Shared with ``block_fuzzer.py``."""
    start = time.perf_counter()
    for item in items:
        outcome = run(item, Path(folder) / item.name)
        summary.outcomes.append(outcome)
        if not outcome.wrong:
            shutil.rmtree(Path(folder) / item.name, ignore_errors=True)
        if len(summary.outcomes) % 50 == 0:
            gc.collect()  # between compilations: the tests pause automatic collection
    summary.seconds = time.perf_counter() - start
    return summary


def checked(summary: Any) -> str:
    """``summary``'s report, printed; fails where a program went wrong. Shared with ``test_block_fuzzer.py``."""
    report = summary.report()
    print(report)
    assert not summary.wrong, report
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--index", type=int, help="one pair only")
    parser.add_argument("--show", action="store_true", help="print the pair's source instead of running it")
    args = parser.parse_args(argv)
    os.environ["THUNDER_EXT_CACHE"] = "opt-in"  # A's and B's jits ask for it; nothing else is saved
    if args.index is not None:
        pair = make_pair(args.seed, args.index)
        print(pair.show())
        if args.show:
            return 0
        outcome = run_pair(pair, Path(tempfile.mkdtemp(prefix="guard-fuzz-")) / pair.name)
        print(f"equal {outcome.equal} (through A's jitted object {outcome.equal_same_object}, after the edit "
              f"{outcome.equal_edited}), loaded {outcome.loaded}, saved {outcome.saved}\n{outcome.error or ''}")
        return int(outcome.wrong)
    summary = run_pairs(args.seed, args.pairs)
    print(summary.report())
    return int(bool(summary.wrong))


if __name__ == "__main__":
    sys.exit(main())
