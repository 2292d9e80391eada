"""The benchmark suite's own machinery (no timings are asserted: those live in docs/benchmarks/)."""

import pytest
import torch

from thunder_ext.benchmarks import (
    compile_ahead,
    compile_scaling,
    compile_time,
    decode,
    entry_points,
    generate,
    generate_session,
    guard_cost,
    hf_generate,
    kv_cache_write,
    warm_start,
)
from thunder_ext.benchmarks.measure import RUNNERS, THUNDER_EXT_TC, THUNDER_TC, Allocations, allocations
from thunder_ext.benchmarks.report import Table, Target
from thunder_ext.benchmarks.suite import parse, record_targets, targets_page

CPU = torch.device("cpu")


def test_allocations_count_what_a_call_allocates():
    k, new, pos = torch.zeros(64, 8), torch.ones(1, 8), torch.tensor([3])
    assert allocations(lambda: k.index_copy_(0, pos, new), CPU).total == 0
    functional = allocations(lambda: torch.index_copy(k, 0, pos, new), CPU)
    assert functional.largest == k.numel() * k.element_size()
    assert functional.total >= functional.largest


def test_unknown_case_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit):
        parse(["--cases", "kv_write,nope"])
    err = capsys.readouterr().err
    assert "unknown case(s) nope" in err and "kv_write" in err


def _kv_results(time_at_256: float, time_at_16384: float, bytes_: int) -> dict:
    return {
        length: ({r: t for r in RUNNERS}, {r: Allocations(bytes_, bytes_, bytes_) for r in RUNNERS})
        for length, t in ((256, time_at_256), (16384, time_at_16384))
    }


@pytest.mark.parametrize(
    "t256, t16384, bytes_, met",
    [(1e-4, 1.1e-4, 0, [True, True]), (1e-4, 1.3e-4, 0, [False, True]), (1e-4, 1e-4, 8192, [True, False])],
)
def test_kv_write_targets_follow_the_measurements(t256, t16384, bytes_, met):
    table = kv_cache_write.report(_kv_results(t256, t16384, bytes_))
    assert [t.met for t in table.targets[:2]] == met
    assert "16384" in table.markdown("test machine")


def test_a_run_of_some_cases_keeps_the_targets_of_the_others(tmp_path):
    def table(name: str, measured: str) -> Table:
        return Table(name, name, "", [], targets=[Target(f"{name} target", measured, True)])

    record_targets(tmp_path, [table("kv_cache_write", "1.05x"), table("adam", "1.49x")], "full run")
    page = targets_page(record_targets(tmp_path, [table("adam", "1.20x")], "adam alone"))
    rows = [line for line in page.splitlines() if line.startswith("| [")]
    assert rows == [
        "| [kv_cache_write](kv_cache_write.md) | kv_cache_write target | 1.05x | yes | 1 |",
        "| [adam](adam.md) | adam target | 1.20x | yes | 2 |",
    ]
    assert "1. full run" in page and "2. adam alone" in page


def test_the_torch_compile_executor_runners_have_their_targets():
    times = {r: 1e-4 for r in RUNNERS}
    slower = {**times, THUNDER_EXT_TC: 1.1e-4}
    results = {256: (times, {r: Allocations(0, 0, 0) for r in RUNNERS}),
               4096: (slower, {r: Allocations(0, 0, 0) for r in RUNNERS})}  # fmt: skip
    parity = [t for t in kv_cache_write.report(results).targets if THUNDER_TC in t.text]
    assert [(t.text.split(":")[0], t.met) for t in parity] == [("L=256", True), ("L=4096", False)]


def test_entry_points_targets_follow_the_measurements():
    adam = ("adam", 32, 2**18)
    runners = [entry_points.EAGER, entry_points.INDUCTOR, entry_points.STOCK_BACKEND, entry_points.EXT_BACKEND,
               entry_points.STOCK_BACKEND_TC, entry_points.EXT_BACKEND_TC]  # fmt: skip
    seconds = {r: 1e-3 for r in runners} | {entry_points.EXT_BACKEND: 1.3e-3}
    parameter_sized = {r: Allocations(2**20, 2**20, 2**20) for r in runners}
    no_allocation = dict.fromkeys(runners, Allocations(0, 0, 0)) | {entry_points.EXT_BACKEND: parameter_sized[entry_points.EXT_BACKEND]}
    kv = ("kv_write", 1, 2048)
    plugin_slower = {entry_points.JIT: 1e-4, entry_points.PLUGIN: 1.1e-4}
    table = entry_points.report({
        adam: (seconds, dict.fromkeys(runners, 1.0), no_allocation, (128, 128)),
        kv: (plugin_slower, dict.fromkeys(plugin_slower, 1.0), dict.fromkeys(plugin_slower, Allocations(0, 0, 0)), (2, 2)),
    })  # fmt: skip
    met = {t.text.split(": ", 1)[1]: t.met for t in table.targets}
    ext, ext_tc = entry_points.EXT_BACKEND, entry_points.EXT_BACKEND_TC
    assert met[f"{ext} no slower than {entry_points.STOCK_BACKEND}"] is False
    assert met[f"{ext} at most 1.2x Inductor"] is False
    assert met[f"{ext}, no parameter-sized allocation per step"] is False
    assert met[f"{ext_tc} no slower than {entry_points.STOCK_BACKEND_TC}"] is True
    assert met[f"{ext_tc}, no parameter-sized allocation per step"] is True
    assert met["through the plugin no slower per call than through thunder_ext.jit"] is False
    assert "32 × 262,144" in table.markdown("test machine")


def test_compile_scaling_targets_follow_the_measurements():
    def result(stock: float, ext: float, passes: float, in_regions: float | None, in_place: int) -> compile_scaling.Result:
        first_call = {compile_scaling.STOCK: stock, compile_scaling.EXT: ext}
        return compile_scaling.Result(first_call, passes, passes, in_regions, in_place, 50)

    linear = {100: result(10.0, 10.1, 0.1, 0.1, 50), 1000: result(100, 101, 1.0, 1.0, 50), 3000: result(300, 310, 3.0, None, 50)}
    quadratic = {100: result(10.0, 10.1, 0.1, 0.1, 50), 1000: result(100, 101, 1, 10, 50), 3000: result(300, 330, 30, None, 49)}
    met = [{t.text: t.met for t in compile_scaling.report(r).targets} for r in (linear, quadratic)]
    assert met[0] == {"100 writes: every write in place": True, "1,000 writes: every write in place": True,
                      "3,000 writes: every write in place": True,
                      "3,000 writes: the extension adds at most 5% to the first call": True,
                      "pass time per write within 1.5x from 100 to 3,000 writes": True,
                      "torch.compile executor: pass time per write within 1.5x from 100 to 1,000 writes": True}  # fmt: skip
    assert [met[1][text] for text in met[0]] == [True, True, False, False, False, False]
    assert compile_scaling.report(quadratic).rows[-1][-1] == "-"  # not measured at 3,000 writes


def _generate_result(growing: float, positions: int, same: bool) -> generate.Result:
    per_token = dict.fromkeys(generate.RUNNERS, 1e-3) | {generate.GROWING: growing}
    counts = dict.fromkeys(generate.RUNNERS, 2)
    return generate.Result(per_token, counts, dict.fromkeys(generate.RUNNERS, 2**20), dict.fromkeys(generate.RUNNERS, positions),
                           dict.fromkeys(generate.RUNNERS, 2**16), dict.fromkeys(generate.RUNNERS, True) | {generate.EAGER: same})  # fmt: skip


@pytest.mark.parametrize(
    "growing, positions, same, met",
    [(1e-3, 256, True, [True, True, True]), (1.1e-3, 256, True, [False, True, True]),
     (1e-3, 2048, True, [True, False, True]), (1e-3, 256, False, [True, True, False])],
)  # fmt: skip
def test_generate_targets_follow_the_measurements(growing, positions, same, met):
    table = generate.report({(2048, 128): _generate_result(growing, positions, same), (2048, 512): _generate_result(1, 4096, True)})
    assert [t.met for t in table.targets] == met  # the 512-token row has no target of its own
    assert len(table.rows) == 2


@pytest.mark.parametrize(
    "growing, copies, same, met",
    [(1e-3, 0, True, [True, True, True, True]), (1.2e-3, 0, True, [False, False, True, True]),
     (1e-3, 1, True, [True, True, True, False]), (1e-3, 0, False, [True, True, False, True])],
)  # fmt: skip
def test_hf_generate_targets_follow_the_measurements(growing, copies, same, met):
    runners = hf_generate.RUNNERS
    per_token = dict.fromkeys(runners, 1.1e-3) | {hf_generate.FX_DEFAULT: growing}
    result = hf_generate.Result(per_token, dict.fromkeys(runners, 1e-4), dict.fromkeys(runners, 2), dict.fromkeys(runners, 2**20),
                                dict.fromkeys(runners, "StaticCache"), dict.fromkeys(runners, True) | {hf_generate.EAGER_STATIC: same},
                                dict.fromkeys(runners, 0) | {hf_generate.RECIPE_STATIC: copies})  # fmt: skip
    table = hf_generate.report({512: result})
    assert [t.met for t in table.targets] == met
    assert len(table.rows) == len(runners)


def _session(seconds: float, compiled: list[int], tokens: list[list[int]]) -> generate_session.Session:
    return generate_session.Session([seconds / len(compiled)] * len(compiled), compiled, tokens)


@pytest.mark.parametrize(
    "growing_compiled, growing_seconds, met",
    [([2, 0, 0, 2], 90.0, [True, True, True, True]),  # lengths 5, 7, 10, 14: one bucket (128)
     ([2, 1, 0, 0], 90.0, [False, False, True, True]),  # a third compilation in the bucket, by a prompt seen before
     ([2, 0, 0, 0], 101.0, [True, True, False, True])],  # more than twice torch.compile's 50 s
)  # fmt: skip
def test_session_targets_follow_the_measurements(growing_compiled, growing_seconds, met, monkeypatch):
    monkeypatch.setattr(generate_session, "LENGTHS", (5, 7, 10, 300))  # buckets 128, 128, 128, 512
    tokens = [[1], [2], [3], [4]]
    results = {r: _session(10.0, [0, 0, 0, 0], tokens) for r in generate.RUNNERS}
    results[generate.DYNAMIC] = _session(50.0, [1, 0, 0, 0], tokens)
    results[generate.GROWING] = _session(growing_seconds, growing_compiled, tokens)
    table = generate_session.report(results)
    assert [t.met for t in table.targets] == met
    assert table.rows[-1][0] == "all"


def test_decode_targets_hold_the_growing_cache_to_eager_as_litgpt_runs_it():
    def result(growing: float) -> decode.Result:
        seconds = dict.fromkeys(decode.DECODE_RUNNERS, 1e-3) | {generate.GROWING: growing}
        no_allocation = dict.fromkeys(decode.DECODE_RUNNERS, Allocations(0, 0, 0))
        return decode.Result(seconds, no_allocation, 2**20, (8, 8), dict.fromkeys(decode.DECODE_RUNNERS, 0.0))

    table = decode.report({(1, 512): result(1e-3), (1, 8192): result(1.2e-3)})
    growing = [(t.text, t.met) for t in table.targets if generate.GROWING in t.text]
    assert growing == [(f"decode at 512, batch 1: {generate.GROWING} at most 1.0x eager", True),
                       (f"decode at 8192, batch 1: {generate.GROWING} at most 1.0x eager", False)]  # fmt: skip


def _compile_run(first: float, later: list[float], steady: float = 0.05, tokens=(1, 2, 3)) -> compile_time.Run:
    """A run whose first token took ``first`` s and whose later tokens ``later`` (then steady ones)."""
    return compile_time.Run(1.0, [first, *later, *[steady] * 20], [steady], [], list(tokens))


def _compile_results(ext_at_30: float, ext_at_80: float, growth: float, ext_steady: float, tc_steady: float,
                     tokens=(1, 2, 3)) -> dict:
    full = compile_time.Result({
        compile_time.EAGER: _compile_run(0.1, [0.05]),
        compile_time.EXT: _compile_run(ext_at_30, [20.0, 0.05, growth], steady=ext_steady, tokens=tokens),
        compile_time.EXT_TC: _compile_run(60.0, [60.0], steady=tc_steady),
        compile_time.DYNAMIC: _compile_run(300.0, [100.0]),
    })  # fmt: skip
    sweep_4 = compile_time.Result({compile_time.EXT: _compile_run(20.0, [20.0])})
    sweep_80 = compile_time.Result({compile_time.EXT: _compile_run(ext_at_80, [20.0])})
    return {("SmolLM2-135M", 30, "generate"): full, ("SmolLM2-135M", 4, "sweep"): sweep_4,
            ("SmolLM2-135M", 80, "sweep"): sweep_80}  # fmt: skip


# the targets: 30 and 80 layers' growth, first token and growths against torch.compile's, cold start, per token
# against eager's, the torch.compile executor's first token and per token, tokens equal
@pytest.mark.parametrize(
    "ext_at_30, ext_at_80, growth, ext_steady, tc_steady, tokens, met",
    [(25.0, 30.0, 5.0, 0.05, 0.05, (1, 2, 3), [True] * 9),
     (60.0, 70.0, 5.0, 0.05, 0.05, (1, 2, 3), [False, True, False, True, True, True, True, True, True]),  # 3x 4's
     (25.0, 60.0, 5.0, 0.05, 0.05, (1, 2, 3), [True, False, True, True, True, True, True, True, True]),  # 80: 2.4x
     (25.0, 30.0, 30.0, 0.05, 0.05, (1, 2, 3), [True, True, True, False, True, True, True, True, True]),  # 30 s
     (25.0, 30.0, 5.0, 0.05, 0.06, (1, 2, 3), [True, True, True, True, True, True, True, False, True]),  # tc slower
     (25.0, 30.0, 5.0, 0.06, 0.05, (1, 2, 4), [True, True, True, True, True, False, True, True, False])],  # slower
)  # fmt: skip
def test_compile_targets_follow_the_measurements(ext_at_30, ext_at_80, growth, ext_steady, tc_steady, tokens, met):
    table = compile_time.report(_compile_results(ext_at_30, ext_at_80, growth, ext_steady, tc_steady, tokens))
    assert [t.met for t in table.targets] == met, [(t.text, t.measured) for t in table.targets]
    assert [row[2] for row in table.rows] == [compile_time.EAGER, compile_time.EXT, compile_time.EXT_TC,
                                              compile_time.DYNAMIC, compile_time.EXT, compile_time.EXT]  # fmt: skip


# HF's Llama through the extension's recipe against torch.compile(dynamic) on the same model, tokens equal
@pytest.mark.parametrize(
    "recipe, tokens, met",
    [(20.0, (7,), [True, True]),
     (30.0, (7,), [False, True]),  # 0.3x torch.compile's
     (20.0, (8,), [True, False])],  # another token
)  # fmt: skip
def test_compile_hf_targets_follow_the_measurements(recipe, tokens, met):
    hf = compile_time.Result({
        compile_time.EAGER: _compile_run(0.1, [], tokens=(7,)),
        compile_time.HF_RECIPE: _compile_run(recipe, [], tokens=tokens),
        compile_time.DYNAMIC: _compile_run(100.0, [], tokens=(7,)),
    })  # fmt: skip
    table = compile_time.report({(compile_time.HF_MODEL, 30, "hf"): hf})
    assert [t.met for t in table.targets] == met, [(t.text, t.measured) for t in table.targets]
    assert [row[1] for row in table.rows] == ["30"] * 3


@pytest.mark.parametrize(
    "ahead_growth, ahead_steady, ahead_tokens, met",
    [(0.5, 0.05, (1, 2, 3), [True, True, True, True]),
     (12.0, 0.05, (1, 2, 3), [False, True, True, True]),  # a growth that stalls 12 s
     (0.5, 0.06, (1, 2, 3), [True, True, False, True]),  # slower per token
     (0.5, 0.05, (1, 2, 4), [True, True, True, False])],  # other tokens
)  # fmt: skip
def test_compile_ahead_targets_follow_the_measurements(ahead_growth, ahead_steady, ahead_tokens, met):
    result = compile_time.Result({
        compile_time.EAGER: _compile_run(0.1, [0.05]),
        compile_time.EXT: _compile_run(30.0, [30.0, 0.05, 30.0]),
        compile_time.EXT_AHEAD: _compile_run(30.0, [30.0, 0.05, ahead_growth], steady=ahead_steady, tokens=ahead_tokens),
        compile_time.DYNAMIC: _compile_run(150.0, [100.0]),
    })  # fmt: skip
    table = compile_ahead.report({("SmolLM2-135M", 30, "generate"): result})
    assert [t.met for t in table.targets] == met, [(t.text, t.measured) for t in table.targets]
    assert [row[2] for row in table.rows] == list(compile_ahead.RUNNERS)


def test_a_compilation_event_is_a_token_that_stalls():
    run = _compile_run(30.0, [20.0, 0.05, 12.0])
    assert [(what, round(s, 2)) for what, s in run.events()] == [("prefill", 29.95), ("decode", 19.95), ("token 3", 11.95)]


def _warm_results(ext_warm_first: float, dynamic_warm_first: float, ext_warm_tokens=(1, 2, 3)) -> dict:
    def run(first: float, tokens=(1, 2, 3)) -> warm_start.Run:
        return warm_start.Run(2.0, 0.5, [first - 0.5, *[0.05] * 20], list(tokens), [])

    result = warm_start.Result({
        (warm_start.EAGER, "cold"): run(0.6), (warm_start.EAGER, "warm"): run(0.6),
        (warm_start.EXT, "cold"): run(30.0), (warm_start.EXT, "warm"): run(ext_warm_first, ext_warm_tokens),
        (warm_start.DYNAMIC, "cold"): run(60.0), (warm_start.DYNAMIC, "warm"): run(dynamic_warm_first),
    })  # fmt: skip
    return {("demo", 4): result}


@pytest.mark.parametrize(
    "ext_warm_first, dynamic_warm_first, tokens, met",
    [(1.5, 10.0, (1, 2, 3), [True, True, True]),
     (2.5, 10.0, (1, 2, 3), [False, True, True]),  # over the demo model's 2 s
     (1.5, 2.0, (1, 2, 3), [True, False, True]),  # over half of torch.compile's warm first token
     (1.5, 10.0, (1, 2, 4), [True, True, False])],  # other tokens than eager's
)  # fmt: skip
def test_warm_start_targets_follow_the_measurements(ext_warm_first, dynamic_warm_first, tokens, met):
    table = warm_start.report(_warm_results(ext_warm_first, dynamic_warm_first, tokens))
    assert [t.met for t in table.targets] == met, [t.text for t in table.targets]
    assert [row[2] for row in table.rows] == ["cold", "warm"] * 3
    assert table.rows[3][4] == f"{ext_warm_first:.1f}"  # the first token counts the setup, where the cache loads


def test_warm_start_says_how_long_its_loads_checked_the_models_state():
    logged = [
        "thunder_ext: compiled GPT.forward(idx: cpu i64[1, 1]) in 7.0 s, saved to the compile cache (0.1 MB)",
        "thunder_ext: loaded GPT.forward(idx: cpu i64[1, 16]) from the compile cache in 0.02 s, its Python state "
        "checked in 0.15 s",
        "thunder_ext: loaded GPT.forward for 16 tokens x 1 sequence, KV cache of 128 positions from the compile cache "
        "in 0.1 s",  # the bucket's own line, of the same load
        "thunder_ext: loaded _grow() from the compile cache in 0.00 s, its Python state checked in 0.05 s",
    ]  # fmt: skip
    assert warm_start._summary(logged) == "1 compiled, 2 loaded (state checked in 0.20 s)"
    assert warm_start._summary(logged[:1]) == "1 compiled, 0 loaded"
    blocks = [
        "thunder_ext: compiled block_Block(cpu f32[1, 1, 576]) in 0.1 s, saved to the compile cache (0.0 MB)",
        "thunder_ext: loaded block_Block(cpu f32[1, 16, 576]) from the compile cache in 0.00 s",
    ]  # fmt: skip
    assert warm_start._summary(logged[:1] + blocks) == "1 compiled, 0 loaded; block programs: 1 compiled, 1 loaded"


@pytest.mark.parametrize(
    "on, off, met",
    [(0.0102, 0.0100, True),  # 2% exactly
     (0.0103, 0.0100, False)],  # over
)  # fmt: skip
def test_guard_cost_targets_follow_the_measurements(on, off, met):
    result = guard_cost.Result({"guards on": on, "guards off": off}, {"guards on": on, "guards off": off}, 2963,
                               0.0003, True)  # fmt: skip
    table = guard_cost.report({("demo", 4): result})
    assert [t.met for t in table.targets] == [met, met], [t.text for t in table.targets]
    assert table.rows[0][-1] == "yes" and table.rows[0][-3] == "2963"
