"""Shared test setup: run a program under eager PyTorch and under thunder_ext.jit on equal inputs and compare
everything; litgpt models stepped beside their jitted copies; adversarial schedulers that reorder a trace
as any pass respecting dataflow may."""

from __future__ import annotations

import contextlib
import copy

import torch
import thunder
from thunder.core import dtypes, prims
from thunder.core.codeutils import SigInfo
from thunder.core.devices import cpu
from thunder.core.proxies import TensorProxy
from thunder.core.rematerialization import rematerialize
from thunder.core.symbol import has_tags
from thunder.core.trace import TraceCtx, tracectx
from thunder.core.transforms import Transform
from thunder.executors.passes import update_fusion_call_ctx
from thunder.transforms.cudagraph import CUDAGraphRunner, CUDAGraphTransform
from torch.testing import assert_close

import thunder_ext
from fake_nvfuser import fusion_region
from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.no_recomputation import RECOMPUTING_DIFFERS, pin_reads_of_overwritten_storage
from thunder_ext.transforms.op_kinds import is_copy_to_out


def clone_args(args):
    """Clones that keep the aliasing between arguments (a tensor and a view of it stay base and view)."""
    storages: dict[int, torch.UntypedStorage] = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        key = a.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = a.untyped_storage().clone()
        clone = torch.empty(0, dtype=a.dtype, device=a.device)
        out.append(clone.set_(storages[key], a.storage_offset(), a.shape, a.stride()))
    return out


def assert_matches_eager(fn, *args, jit=thunder_ext.jit, **jit_kwargs):
    """Outputs and every argument after the call match eager; returns the jitted function."""
    eager_args, jit_args = clone_args(args), clone_args(args)
    expected = fn(*eager_args)
    jfn = jit(fn, **jit_kwargs)
    actual = jfn(*jit_args)
    assert_close(actual, expected)
    for i, (a, e) in enumerate(zip(jit_args, eager_args)):
        assert_close(a, e, msg=lambda m: f"argument {i} differs after the call: {m}")
    return jfn


def writes_in(trace) -> list:
    return [b for b in trace.bound_symbols if is_copy_to_out(b)]


def functionalized_trace(jfn):
    """The computation trace right after the functionalization pass."""
    return next(t for t in thunder.last_traces(jfn) if "functionalize writes" in str(t.get_provenance()))


# Traces built by hand


@contextlib.contextmanager
def tracing(*names, shape=(4,)):
    """A trace to call prims in, and tensors named ``names`` to call them on."""
    trace = TraceCtx()
    with tracectx(trace):
        yield trace, [TensorProxy(n, shape=shape, device=cpu, dtype=dtypes.float32) for n in names]


def pinned(trace) -> list:
    """``trace``'s ops as the extension's pass before the fusion passes leaves them (tagged where
    rematerialization must not recompute them)."""
    return pin_reads_of_overwritten_storage(trace).bound_symbols


def read_then_written_beside_a_free_read(x, y):
    d = x * 2  # reads x, which the write below overwrites: pinned
    e = y * 3  # reads nothing written: free
    x.add_(1)
    return d + e


def pinned_operands_of_the_result(trace) -> list[bool]:
    """For ``read_then_written_beside_a_free_read``'s final trace: whether the ops that compute ``d`` and
    ``e`` (the operands of the op that computes the result, in a region or not) carry the tag that keeps
    rematerialization from recomputing them."""
    ops = [s for b in trace.bound_symbols for s in (b.subsymbols if b.sym.is_fusion else [b])]
    made_by = {o.name: op for op in ops for o in op.flat_proxy_outs}
    (result,) = trace.bound_symbols[-1].args[0]
    return [has_tags(made_by[a.name], {RECOMPUTING_DIFFERS}) for a in made_by[result.name].flat_proxy_args]


def computation(trace, *regions_and_return):
    """``trace`` made of ``regions_and_return``, callable on its ``args``."""
    trace.bound_symbols = list(regions_and_return)
    trace._siginfo = SigInfo("computation")
    trace._siginfo.args = [(a.name, None) for a in trace.args]
    return trace


def as_claimed(write):
    """A ``copy_to_out_`` as the extension's executor claims it, before any fusion pass."""
    return plain_copy_to_out.bind(*write.args, **write.kwargs, output=write.output, subsymbols=[write])


def rematerialized(trace, *regions_and_return):
    """``trace`` made of fusion regions (and ops between), after thunder's rematerialization, which runs in
    each fusion executor's pass."""
    return update_fusion_call_ctx(rematerialize(computation(trace, *regions_and_return)))


def negated_then_read(executor, *, pin: bool, claimed: bool):
    """x negated in place by one of ``executor``'s regions, read by the next, after rematerialization, with the
    ops pinned as the extension's pass before the fusion passes pins them, or not. ``claimed``: the regions
    hold the write as the extension's executor claims it (torch.compile's compile the PyTorch form of their
    ops), else as the primitive (the stand-in nvFuser's hold prims)."""
    with tracing("x") as (trace, (x,)):
        w = copy_to_out_(prims.neg(x), out=x)
        result = prims.exp(prims.mul(w, 2.0))
    if claimed:
        trace.bound_symbols[1] = as_claimed(trace.bound_symbols[1])
    trace.args = [x]
    ops = pinned(trace) if pin else trace.bound_symbols
    return rematerialized(
        trace,
        executor.fuse(fusion_region([x], [w], ops[:2]), 0),
        executor.fuse(fusion_region([w], [result], ops[2:]), 1),
        prims.python_return.bind(result, output=None),
    )


def covering(families: dict[tuple, str]) -> set[str]:
    """Few families whose switches, together, take every value any family's take (greedy set cover): where CI
    cannot run every family (tests/test_litgpt_families.py, tests/test_hf_families.py)."""
    left = {(i, v) for switches in families for i, v in enumerate(switches)}
    chosen: set[str] = set()
    while left:
        best = max(families, key=lambda s: len(left & set(enumerate(s))))
        left -= set(enumerate(best))
        chosen.add(families[best])
    return chosen


# litgpt models and their KV caches


THUNDER_VARIANTS = ["llama1-like", "long-context-like", "llama2-like", "codellama2-like", "gpt-neox-like"]
VOCAB = 96


def small_llama(**overrides) -> torch.nn.Module:
    """A llama-style litgpt model small enough for CPU tests."""
    import litgpt  # only where a test uses litgpt: its tests skip without it

    config = dict(
        block_size=64, vocab_size=VOCAB, padded_vocab_size=VOCAB, n_layer=2, n_head=8, n_embd=64,
        n_query_groups=8, rotary_percentage=1.0, parallel_residual=False, bias=False,
        norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=128,
    )  # fmt: skip
    return litgpt.GPT(litgpt.Config(**{**config, **overrides})).eval()


def caches(model) -> list[torch.Tensor]:
    return [t for block in model.transformer.h for t in (block.attn.kv_cache.k, block.attn.kv_cache.v)]


class Pair:
    """An eager litgpt model and a thunder_ext-jitted deep copy, stepped together and compared each step.

    ``step`` returns the jitted copy's logits, so whatever is computed from them is the extension's.
    ``growing``: the copy's cache is ``thunder_ext.set_kv_cache``'s, whose buffers hold a bucket of positions
    (``min_capacity`` the smallest), compared with the same positions of eager's; the eager model keeps litgpt's.
    """

    def __init__(self, model: torch.nn.Module, *, context=contextlib.nullcontext, growing: bool = False,
                 min_capacity: int = 8, **tolerance):  # fmt: skip
        self.eager, self.copy = model, copy.deepcopy(model)
        # with the growing cache, strict: a write left a copy raises, the growth copy's too (its jit takes the model's)
        self.jitted = thunder_ext.jit(self.copy, strict=growing)
        self.context, self.tolerance = context, tolerance
        self.growing, self.min_capacity = growing, min_capacity

    def set_kv_cache(self, **kwargs) -> None:
        self.eager.set_kv_cache(**kwargs)
        if self.growing:
            thunder_ext.set_kv_cache(self.jitted, **kwargs, min_capacity=self.min_capacity)
        else:
            self.copy.set_kv_cache(**kwargs)
        self.pointers = [t.data_ptr() for t in caches(self.copy)]

    def step(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        capacities = [t.shape[2] for t in caches(self.copy)]
        with torch.inference_mode(), self.context():
            got, want = self.jitted(x, input_pos), self.eager(x, input_pos)
        assert_close(got, want, **self.tolerance)
        for i, (a, b) in enumerate(zip(caches(self.copy), caches(self.eager))):
            held = a.shape[2]  # a growing cache holds the first positions of eager's (a circular one before it wraps)
            assert_close(a, b[:, :, :held], **self.tolerance, msg=lambda m: f"cache buffer {i} differs from eager: {m}")
        if [t.shape[2] for t in caches(self.copy)] != capacities:  # grown: new buffers, written in place from then on
            self.pointers = [t.data_ptr() for t in caches(self.copy)]
        assert [t.data_ptr() for t in caches(self.copy)] == self.pointers, "a cache buffer moved to new storage"
        copies = [str(d) for d in thunder_ext.inplace_decisions(self.jitted) if d.how == "copy"]
        assert not copies, copies
        return got

    def greedy(self, prompt: torch.Tensor, steps: int) -> torch.Tensor:
        """Prefill ``prompt``, then decode: ``steps`` calls, each giving one token from the jitted copy's
        logits (both models are fed it); returns all tokens."""
        tokens, x, pos = prompt, prompt, torch.arange(prompt.shape[1])
        for _ in range(steps):
            x = self.step(x, pos)[:, -1].argmax(-1, keepdim=True)
            tokens, pos = torch.cat((tokens, x), dim=1), pos[-1:] + 1
        return tokens


@torch.inference_mode()
def greedy_without_cache(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    tokens = prompt
    for _ in range(steps):
        nxt = model(tokens)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat((tokens, nxt), dim=1)
    return tokens


# Adversarial schedulers


def without_dels(trace):
    """The ops of ``trace`` but its ``del``s and, in a backward trace, its ``clear_mutable_collection``s: a clear
    empties a collection in place, with no dataflow edge to the unpacking that must come first (``t2, =
    cotangents`` after ``clear_mutable_collection(cotangents)`` fails: ``requires_grad/found_84af56ed28e3``)."""
    return [b for b in trace.bound_symbols if b.sym.name not in ("python_del", "clear_mutable_collection")]


def rescheduled(trace, bsyms):
    """``trace`` with its ops in the order ``bsyms``, and ``del`` (and a backward's clears) placed anew for that
    order, as thunder places them."""
    new = thunder.core.trace.from_trace(trace)
    new.bound_symbols = bsyms
    backward = thunder.core.trace.TraceTag.BACKWARD in trace.tags
    return thunder.executors.passes.del_last_used(new, clear_mutable_collections=backward)


def is_write_or_rename(bsym) -> bool:
    return is_copy_to_out(bsym) or bsym.sym.name == "update_aliases"


def hoist(trace, first, *, latest: bool = False):
    """An adversarial scheduler: a topological order that runs the ops ``first`` picks as early as dataflow allows
    (of those ready, the earliest in program order, or the latest where ``latest``).

    Legal for any pass that respects dataflow, so dataflow edges are all that keep a write below the
    readers of the value it overwrites (``hoist_writes``) and above the readers of its new value
    (``hoist_reads``), and two ops in eager's order (``run_latest_first``).
    """
    *body, ret = without_dels(trace)
    produced: set[str] = set()
    scheduled = []
    while body:
        ready = [b for b in body if all(p.name in produced for p in b.flat_proxy_args)]
        eager = [b for b in ready if first(b)]
        pick = (eager or ready)[-1 if latest else 0]
        body.remove(pick)
        scheduled.append(pick)
        produced.update(p.name for p in pick.flat_proxy_outs)
    return rescheduled(trace, scheduled + [ret])


def hoist_writes(trace):
    return hoist(trace, is_write_or_rename)


def hoist_reads(trace):
    return hoist(trace, lambda b: not is_write_or_rename(b))


def run_latest_first(trace):
    """Ops that no edge orders run in the reverse of their order: two writes of different tensors, say."""
    return hoist(trace, lambda b: False, latest=True)


def sink_reads(trace):
    """The opposite adversary: every op but the writes runs as late as dataflow allows.

    A reader of the old value then lands between the producer of ``computed`` and the write.
    """
    *body, ret = without_dels(trace)
    placed = []
    while body:
        consumed = {p.name for b in body for p in b.flat_proxy_args}
        ready = [b for b in body if not consumed & {o.name for o in b.flat_proxy_outs}]
        late = [b for b in ready if not is_copy_to_out(b)]
        pick = (late or ready)[0]  # the earliest first: in forward order it lands last
        body.remove(pick)
        placed.append(pick)
    return rescheduled(trace, placed[::-1] + [ret])


class LatestFirst(Transform):
    def transform_trace_post_optimization(self, trace, **kwargs):
        return run_latest_first(trace)


class SinkReads(Transform):
    def transform_trace_post_optimization(self, trace, **kwargs):
        return sink_reads(trace)


class HoistWrites(Transform):
    def transform_trace_post_optimization(self, trace, **kwargs):
        return hoist_writes(trace)


class HoistReads(Transform):
    def transform_trace_post_optimization(self, trace, **kwargs):
        return hoist_reads(trace)


# Copies that nvFuser would return as views of their input, read after a write of it (transforms/aliasing_as_traced.py)


def sum_of_one_element_then_write(a, b):  # the fuzzer's program on an H100 (cuda/found_4c28956511b5)
    r = a.sum()
    a.add_(b)
    return r


def clone_then_write(a, b):
    c = a.clone()
    a.mul_(b)
    return c


def max_over_a_size_one_axis_then_write(a, b):
    m = a.amax(dim=1)
    a.add_(b)
    return m * 1, m


COPIES_NVFUSER_WOULD_ALIAS = {
    "sum of one element": (sum_of_one_element_then_write, (1,)),
    "clone": (clone_then_write, (4,)),
    "max over a size-1 axis": (max_over_a_size_one_axis_then_write, (3, 1)),
}


class _ReplayingRunner(CUDAGraphRunner):
    """What a captured CUDA graph does with its arguments, without CUDA: the first call of a shape keeps the
    tensors it ran on (static ones, as thunder tags module buffers and parameters, by address; the others as
    copies), and each later call copies its non-static arguments in, runs on the kept tensors, and returns the
    first call's outputs with the new values. A static argument that moved is not seen, as a graph does not."""

    def build_cuda_graph(self, fn, args, static_args_mask):
        kept = tuple(a if static else self.get_static_buffer(a) for a, static in zip(args, static_args_mask))
        return fn, kept, fn(*kept)

    def call_cuda_graph(self, fn_name, *args):
        key = self.make_cache_key(fn_name, *args)
        if key not in self.cuda_graph_cache:
            fn, _ = self.python_callables[fn_name]
            self.cuda_graph_cache[key] = self.build_cuda_graph(fn, args, self.make_static_inputs_mask(fn_name, *args))
            return self.cuda_graph_cache[key][2]
        fn, kept, outputs = self.cuda_graph_cache[key]
        for k, a in zip(kept, args):
            if k is not a and isinstance(k, torch.Tensor):
                k.copy_(a)
        for out, new in zip(outputs, fn(*kept)):
            if isinstance(out, torch.Tensor):
                out.copy_(new)
        return outputs


class ReplayedGraphs(CUDAGraphTransform):
    """thunder's ``CUDAGraphTransform`` with its regions replayed as a captured graph replays them
    (``_ReplayingRunner``), for CPU tests of what graphs assume of the tensors they are given."""

    def __init__(self):
        super().__init__()
        self.cuda_graph_runner = _ReplayingRunner()
