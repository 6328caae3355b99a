"""Every function of the package against the command line's JSON: the same numbers, exactly."""

from __future__ import annotations

import json
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest

import symshard
from conftest import FIXTURES


def test_models_lists_the_shipped_zoo_with_exact_parameter_counts(cli):
    got = {m.name: m for m in symshard.models()}
    want = {m["name"]: m for m in cli.json("models") if "name" in m}
    assert set(got) == set(want)
    assert "gpt3-175b" in got
    for name, m in want.items():
        assert got[name].family == m["family"]
        if m.get("params") is not None:
            assert got[name].params == int(m["params"])
            assert type(got[name].params) is int


def test_machines_lists_the_shipped_tables_with_exact_numbers(cli):
    got = {m.name: m for m in symshard.machines()}
    want = {m["name"]: m for m in cli.json("machines")}
    assert set(got) == set(want)
    for name, m in want.items():
        g = got[name]
        assert g.peak_flops == {k: Fraction(v) for k, v in m["peak_flops"].items()}
        assert g.memory_capacity == Fraction(m["memory_capacity"])
        assert (g.gpus_per_node, g.inter_algorithm) == (m["gpus_per_node"], m["inter_algorithm"])
    # NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOP/s dense BF16 (SXM), an exact int.
    assert got["h100-sxm"].peak_flops["bf16"] == 989 * 10**12
    assert type(got["h100-sxm"].peak_flops["bf16"]) is int
    sources = symshard.machine_sources("h100-sxm")
    want_sources = cli.json("machines", "h100-sxm")
    assert [(s.path, s.value, s.source) for s in sources] == [
        (w["path"], w["value"], w["source"]) for w in want_sources
    ]
    with pytest.raises(symshard.SymshardError):
        symshard.machine_sources("h900")


def test_a_ranking_says_where_its_gemm_curve_is_borrowed(cli):
    r = symshard.rank("gpt2-124m", devices=8, calib="h100-sxm", fix="precision=fp8", top=2)
    want = cli.json(
        "rank", "gpt2-124m", "--devices", "8", "--calib", "h100-sxm", "--fix", "precision=fp8",
        "--top", "2",
    )
    assert r.borrowed_curves == want["borrowed_curves"]
    assert len(r.borrowed_curves) == 1 and "efficiency.matmul_fp8" in r.borrowed_curves[0]
    assert symshard.rank("gpt2-124m", devices=8, calib="h100-sxm", top=2).borrowed_curves == []


def test_rank_returns_the_command_lines_rows_exactly(cli):
    r = symshard.rank("gpt3-175b", devices=1024)
    want = cli.json("rank", "gpt3-175b", "--devices", "1024")
    got = dict(r.raw)
    for timing in ("search_seconds", "auto_layout_seconds"):
        got.pop(timing, None)
        want.pop(timing, None)
    assert got == want
    assert len(r.rows) == len(want["strategies"]) == 10
    for row, w in zip(r.rows, want["strategies"]):
        assert (row.dp, row.tp, row.pp, row.microbatches) == (w["dp"], w["tp"], w["pp"], w["microbatches"])
        assert row.relative_cost == Fraction(w["relative_cost"])
        assert isinstance(row.relative_cost, (int, Fraction))
        # Exact: an integer, or a ratio where the schedule's activation count is one
        # (interleaving keeps a fractional number of layers' activations on average).
        assert row.memory.total == Fraction(w["memory"]["total"])
        assert isinstance(row.memory_per_device, (int, Fraction))
        assert row.memory_per_device == row.memory.total
        assert row.relative.total == row.relative_cost
        rel = row.relative
        # The parts add up exactly; the kernel term (GEMMs below the plateau, launches) is
        # part of the reference table's pricing; overlapping the gradient reduction saves
        # something and never more than the communication it hides.
        parts = rel.compute + rel.kernels + rel.comm_intra + rel.comm_inter + rel.bubble
        assert parts - rel.hidden == rel.total
        assert rel.kernels > 0
        assert 0 <= rel.hidden <= rel.comm_intra + rel.comm_inter
    assert r.evaluated == want["evaluated"]
    assert r.rows[0].rank == 1


def test_rank_by_seconds_with_a_calibration_and_options(cli):
    r = symshard.rank("llama2-7b", devices=64, calib="a100-80gb", top=3, max_microbatches=32)
    want = cli.json(
        "rank", "llama2-7b", "--devices", "64", "--calib", "a100-80gb", "--top", "3",
        "--max-microbatches", "32",
    )
    assert [x.iteration_seconds for x in r.rows] == [w["iteration_seconds"] for w in want["strategies"]]
    assert all(isinstance(x.iteration_seconds, float) for x in r.rows)
    assert r.calibration == want["calibration"] == "a100-80gb"
    assert r.simulated == want["simulated"] > 0


def test_rank_takes_a_stack_profile_and_a_what_if_machine_as_the_command_line_does(cli):
    def same(r, *flags):
        want = cli.json("rank", "llama2-7b", "--devices", "64", "--top", "3", *flags)
        got = dict(r.raw)
        for x in (got, want):
            x.pop("search_seconds", None)
            x.pop("auto_layout_seconds", None)
        assert got == want

    # A stack profile alone ranks by simulated seconds on the reference machine, as `--stack`.
    r = symshard.rank("llama2-7b", devices=64, top=3, stack="auto")
    same(r, "--stack", "auto")
    assert r.rows[0].iteration_seconds is not None
    r = symshard.rank(
        "llama2-7b", devices=64, top=3, calib="h100-sxm", what_if="nvlink.bandwidth=x2,domain=16"
    )
    same(r, "--calib", "h100-sxm", "--with", "nvlink.bandwidth=x2,domain=16")
    assert "what-if" in r.calibration
    with pytest.raises(symshard.SymshardError, match="^what_if: unknown quantity `nvlink.bw`"):
        symshard.rank("llama2-7b", devices=64, calib="h100-sxm", what_if="nvlink.bw=x2")


def test_cost_takes_a_twenty_digit_symbol_exactly(cli):
    big = 12345678901234567890
    c = symshard.cost("gpt2-1.5b", B=big)
    want = cli.json("cost", "gpt2-1.5b", "--set", f"B={big}")
    assert c.symbols["B"] == big
    assert type(c.symbols["B"]) is int
    assert c.flops["forward"]["matmul"] == int(want["flops"]["forward"]["matmul"])
    assert c.flops["forward"]["matmul"] > 2**64
    assert c.activations == int(want["memory"]["activations"])
    assert c.params == int(want["params"])
    assert c.raw == want


def test_a_row_with_node_dispatch_passes_it_on(cli):
    # `rank --fix node-dispatch=on`: an expert-parallel row dispatches node by node, says so,
    # and its knobs price it the same way again.
    r = symshard.rank(
        "mixtral-8x7b", devices=64, calib="h100-sxm", fix="tp=2,ep=8,node-dispatch=on", top=1
    )
    row = r.rows[0]
    assert row.node_dispatch is True and row.knobs()["node_dispatch"] is True
    assert "node-dispatch" in row.strategy
    c = symshard.cost("mixtral-8x7b", strategy=row, calib="h100-sxm")
    a2a = [
        (Fraction(x.bytes), x.count) for x in c.per_device.comm if x.collective == "all-to-all"
    ]
    want = cli.json(
        "cost", "mixtral-8x7b", "--calib", "h100-sxm", "--strategy", row.strategy,
    )
    assert a2a == [
        (Fraction(x["bytes"]), x["count"])
        for x in want["per_device"]["comm"]
        if x["collective"] == "all-to-all"
    ]


def test_a_row_with_fp8_dispatch_is_priced_again_with_it(cli):
    # `rank --fix fp8-dispatch=on`: an expert-parallel row dispatches in FP8, says so, and
    # passes it on to `cost`, whose all-to-alls are the command line's given the same row.
    r = symshard.rank(
        "mixtral-8x7b", devices=64, calib="h100-sxm", fix="precision=fp8,fp8-dispatch=on", top=1
    )
    row = r.rows[0]
    assert row.ep > 1
    assert row.fp8_dispatch is True and row.knobs()["fp8_dispatch"] is True
    assert "fp8-dispatch" in row.strategy
    c = symshard.cost("mixtral-8x7b", strategy=row, calib="h100-sxm")
    assert c.per_device is not None
    a2a = sorted(
        (x.tensor, x.bytes, x.count) for x in c.per_device.comm if x.collective == "all-to-all"
    )
    # Toward the experts in FP8, back in bf16: two rows of two calls each per layer.
    assert [t for t, _, _ in a2a] == ["expert slots", "expert slots (FP8)"]
    want = cli.json(
        "cost", "mixtral-8x7b", "--calib", "h100-sxm", "--strategy", row.strategy,
    )
    got = sorted(
        (x["tensor"], int(x["bytes"]), x["count"])
        for x in want["per_device"]["comm"]
        if x["collective"] == "all-to-all"
    )
    assert [(t, int(b), n) for t, b, n in a2a] == got


def test_a_row_with_fp8_params_is_priced_again_with_them(cli):
    # `rank --fix fp8-params=on`: the row keeps FP8 parameters, says so, and passes them on to
    # `cost`, which prices the same memory as the command line given the flag.
    r = symshard.rank(
        "gpt3-1.3b", devices=16, calib="h100-sxm", fix="precision=fp8,fp8-params=on,zero=1", top=1
    )
    row = r.rows[0]
    assert row.fp8_params is True and row.knobs()["fp8_params"] is True
    c = symshard.cost("gpt3-1.3b", strategy=row, calib="h100-sxm")
    assert c.per_device is not None
    assert c.per_device.memory.total == row.memory.total
    want = cli.json(
        "cost", "gpt3-1.3b", "--calib", "h100-sxm", "--strategy", row.strategy,
    )
    assert c.per_device.memory.total == int(want["per_device"]["memory"]["total"])
    assert "fp8-params" in row.strategy


def test_cost_under_a_strategy_matches_the_command_line(cli):
    knobs = {"dp": 2, "tp": 8, "pp": 4, "microbatches": 8, "sequence_parallel": True, "recompute": "selective"}
    c = symshard.cost("llama2-7b", strategy=knobs)
    want = cli.json(
        "cost", "llama2-7b", "--dp", "2", "--tp", "8", "--pp", "4", "--microbatches", "8",
        "--sequence-parallel", "--recompute", "selective",
    )
    assert c.raw == want
    pd = c.per_device
    assert pd is not None
    assert pd.flops == int(want["per_device"]["flops"])
    assert [x.collective for x in pd.comm] == [x["collective"] for x in want["per_device"]["comm"]]
    assert all(type(x.bytes) is int for x in pd.comm)
    assert pd.memory.total == int(want["per_device"]["memory"]["total"])
    assert [s.flops for s in pd.stages] == [int(s["flops"]) for s in want["per_device"]["stages"]]
    assert not pd.feasible and "more than" in (pd.reason or "")


def test_symbolic_formulas_are_strings_that_evaluate_to_the_exact_counts(cli):
    sympy = pytest.importorskip("sympy")
    s = symshard.cost("llama2-7b", symbolic=True)
    n = symshard.cost("llama2-7b")
    assert isinstance(s.params, symshard.Formula)
    assert s.raw == cli.json("cost", "llama2-7b", "--symbolic")
    at = {sympy.Symbol(k): v for k, v in n.symbols.items()}
    assert s.params.sympy().subs(at) == n.params
    for p in ("forward", "backward"):
        for k in ("matmul", "other"):
            assert s.flops[p][k].sympy().subs(at) == n.flops[p][k]
    assert s.activations.sympy().subs(at) == n.activations


def test_timeline_matches_the_command_line_and_carries_the_gantt_chart(cli):
    knobs = {"dp": 4, "tp": 2, "pp": 2, "microbatches": 4}
    t = symshard.timeline("llama2-7b", knobs, calib="a100-80gb", svg=True)
    want = cli.json(
        "timeline", "llama2-7b", "--calib", "a100-80gb", "--dp", "4", "--tp", "2", "--pp", "2",
        "--microbatches", "4",
    )
    assert t.raw == want
    assert t.iteration_seconds == want["iteration_seconds"]
    assert t.svg is not None and t.svg.startswith("<svg")
    assert "stage 1 · device" in t.svg


def test_a_strategy_is_a_dict_with_the_short_knob_names_or_a_knob_string(cli):
    want = cli.json(
        "timeline", "llama2-7b", "--calib", "a100-80gb", "--dp", "4", "--tp", "2",
        "--micro-batch-size", "2", "--sequence-parallel",
    )
    by_dict = symshard.timeline("llama2-7b", {"dp": 4, "tp": 2, "mbs": 2, "sp": True}, calib="a100-80gb")
    by_text = symshard.timeline("llama2-7b", "dp=4,tp=2,mbs=2,sp", calib="a100-80gb")
    assert by_dict.raw == want
    assert by_text.raw == want
    with pytest.raises(TypeError, match="unknown strategy knob 'tensor_parallel'"):
        symshard.timeline("llama2-7b", {"tensor_parallel": 2}, calib="a100-80gb")


def test_a_calibration_may_name_the_attention_kernel_a_stack_runs(cli):
    knobs = {"dp": 8, "microbatches": 128}
    fa2 = symshard.timeline("llama2-7b", knobs, calib="a100-80gb")
    fa1 = symshard.timeline("llama2-7b", knobs, calib="a100-80gb@flash-attention-1")
    want = cli.json(
        "timeline", "llama2-7b", "--calib", "a100-80gb@flash-attention-1", "--dp", "8",
        "--microbatches", "128",
    )
    assert fa1.raw == want
    assert want["calibration"] == "a100-80gb@flash-attention-1"
    # Llama attends with flash attention by default: the older kernel is slower.
    assert fa1.iteration_seconds > fa2.iteration_seconds
    with pytest.raises(symshard.SymshardError) as e:
        symshard.timeline("llama2-7b", knobs, calib="a100-80gb@no-such-kernel")
    assert e.value.exit_code == 2
    assert "no attention kernel `no-such-kernel`" in e.value.message


def test_the_loss_runs_as_the_stack_computes_it(cli):
    knobs = {"dp": 8}
    fp32 = symshard.timeline("gpt3-125m", knobs, calib="a100-80gb")
    fused = symshard.timeline("gpt3-125m", knobs, calib="a100-80gb", loss="fused")
    want = cli.json(
        "timeline", "gpt3-125m", "--calib", "a100-80gb", "--dp", "8", "--loss", "fused"
    )
    assert fused.raw == want
    assert fused.iteration_seconds < fp32.iteration_seconds


def test_training_metrics_add_passes_over_the_logits(cli):
    knobs = {"dp": 8}
    none = symshard.timeline("gpt3-125m", knobs, calib="a100-80gb")
    two = symshard.timeline("gpt3-125m", knobs, calib="a100-80gb", train_metrics=2)
    want = cli.json(
        "timeline", "gpt3-125m", "--calib", "a100-80gb", "--dp", "8", "--train-metrics", "2"
    )
    assert two.raw == want
    assert two.iteration_seconds > none.iteration_seconds
    # The timeline states what it timed.
    assert none.settings == {"attention": "eager", "dropout": "on", "loss": "fp32"}
    assert two.settings["train-metrics"] == "2"


def test_dropout_off_keeps_no_masks(cli):
    knobs = {"dp": 8}
    on = symshard.cost("gpt3-125m", strategy=knobs)
    off = symshard.cost("gpt3-125m", strategy=knobs, dropout=False)
    want = cli.json("cost", "gpt3-125m", "--dp", "8", "--dropout", "off")
    assert off.raw == want
    act = lambda c: int(c.raw["per_device"]["memory"]["activations"])  # noqa: E731
    assert act(off) < act(on)
    assert (on.raw["settings"]["dropout"], off.raw["settings"]["dropout"]) == ("on", "off")


def test_recompute_modules_as_on_the_command_line(cli):
    knobs = {"dp": 8, "recompute": "selective"}
    # Under flash attention the default, core_attn, recomputes nothing, and says so.
    with pytest.warns(symshard.SymshardWarning, match="recomputes nothing"):
        base = symshard.cost("mixtral-8x7b", strategy=knobs)
    act = symshard.cost("mixtral-8x7b", strategy=knobs, recompute_modules=["moe_act", "layernorm"])
    want = cli.json(
        "cost", "mixtral-8x7b", "--dp", "8", "--recompute", "selective",
        "--recompute-modules", "layernorm,moe_act",
    )
    assert act.raw == want
    assert act.per_device.memory.activations < base.per_device.memory.activations
    assert act.raw["settings"]["recompute-modules"] == "layernorm,moe_act"
    with pytest.raises(symshard.SymshardError, match="mla_up_proj"):
        symshard.cost("mixtral-8x7b", strategy=knobs, recompute_modules="mla_up_proj")


def test_a_rank_row_feeds_timeline_and_cost(cli):
    r = symshard.rank("llama2-7b", devices=16, top=1)
    row = r.rows[0]
    t = symshard.timeline("llama2-7b", row, calib="h100-sxm")
    assert t.strategy.startswith(f"dp={row.dp} tp={row.tp} pp={row.pp}")
    c = symshard.cost("llama2-7b", strategy=row)
    assert c.per_device is not None and c.per_device.memory.total == row.memory_per_device


def test_explain_matches_the_command_line(cli):
    e = symshard.explain("linear")
    assert e.raw == cli.json("explain", "linear")
    assert e.name == "linear"
    assert e.split_table


def test_a_hugging_face_config_dict_or_object_is_a_model(cli, tmp_path):
    src = FIXTURES / "hf" / "Llama-2-7b-hf.json"
    config = json.loads(src.read_text())
    want = cli.json("cost", str(src))

    from_dict = symshard.cost(config)
    assert from_dict.params == int(want["params"])
    assert from_dict.flops == symshard.cost(src).flops

    class Config:  # the shape of a transformers PretrainedConfig
        def to_dict(self):
            return dict(config)

    assert symshard.cost(Config()).params == int(want["params"])


def test_a_transformers_config_is_a_model(cli):
    transformers = pytest.importorskip("transformers")
    src = FIXTURES / "hf" / "Llama-2-7b-hf.json"
    cfg = transformers.LlamaConfig(**json.loads(src.read_text()))
    assert symshard.cost(cfg).params == int(cli.json("cost", str(src))["params"])


def test_errors_carry_the_command_lines_message_and_exit_code(cli, tmp_path):
    with pytest.raises(symshard.SymshardError) as e:
        symshard.cost("no-such-model")
    assert (e.value.message, e.value.exit_code) == cli.error("cost", "no-such-model")
    assert e.value.exit_code == 2

    bad = tmp_path / "bad.yaml"
    bad.write_text("family: gpt\nsymbols:\n  L: {value: 2}\n  H: {value: oops}\n")
    with pytest.raises(symshard.SymshardError) as e:
        symshard.cost(bad)
    msg, code = cli.error("cost", str(bad))
    assert e.value.message == msg
    assert e.value.exit_code == code == 2
    assert f"{bad}:" in str(e.value)

    with pytest.raises(symshard.SymshardError) as e:
        symshard.cost("llama2-7b", NOPE=3)
    assert "no symbol `NOPE`" in e.value.message

    # The same refusal as the command line's, naming the keyword rather than the flag.
    with pytest.raises(symshard.SymshardError) as e:
        symshard.rank("llama2-7b", devices=8, top=0)
    msg, code = cli.error("rank", "llama2-7b", "--devices", "8", "--top", "0")
    assert msg == "--top must be at least 1"
    assert (e.value.message, e.value.exit_code) == ("top must be at least 1", code)

    with pytest.raises(TypeError, match="devices must be an int, not bool"):
        symshard.rank("gpt3-125m", devices=True)
    with pytest.raises(TypeError, match="devices must be an int"):
        symshard.rank("gpt3-125m", devices="8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no_such_option"):
        symshard.rank("llama2-7b", devices=8, no_such_option=1)

    with pytest.raises(TypeError):
        symshard.cost(3.5)


def test_tables_as_pandas_data_frames():
    pytest.importorskip("pandas")
    r = symshard.rank("llama2-7b", devices=16, top=4)
    df = r.to_pandas()
    assert list(df["rank"]) == [1, 2, 3, 4]
    assert df["relative.total"].iloc[0] == r.rows[0].relative.total
    c = symshard.cost("llama2-7b", per_op=True)
    assert len(c.to_pandas()) == len(c.per_op or [])
    t = symshard.timeline("llama2-7b", {"dp": 8}, calib="a100-80gb")
    assert len(t.to_pandas()) == len(t.devices)
    e = symshard.explain("linear")
    df = e.to_pandas()
    assert len(df) == len(e.split_table) == len(e.raw["split_table"]["entries"])
    assert list(df["splits"]) == [x.describe() for x in e.split_table]


def test_report_is_the_command_lines_report(cli, tmp_path):
    out = symshard.report("llama2-7b", devices=64, output=tmp_path / "py.html", top=8)
    p = cli.run("report", "llama2-7b", "--devices", "64", "--top", "8", "-o", str(tmp_path / "cli.html"))
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == (tmp_path / "cli.html").read_bytes()
    html = out.read_text()
    assert html.count('<figure class="chart"') == 4


def test_compare_matches_the_command_line_and_takes_rank_rows(cli):
    a, b = "dp=64,mbs=1,zero=1", "dp=8,tp=8,mbs=1,sp,zero=1"
    c = symshard.compare("llama3-8b", a, b)
    want = cli.json("compare", "llama3-8b", a, b)
    assert c.raw == want
    total = c.component("relative cost", "total")
    assert total.difference == total.b - total.a
    assert isinstance(total.a, (int, Fraction))
    assert c.cheaper == want["cheaper"] == "A"
    # A formula evaluates to its row's exact number at the model's symbols.
    row = c.component("communication", "all-gather on tp (intra-node) bytes/step")
    values = {k: Fraction(v) for k, v in want["symbols"].items()}
    import sympy

    expr = row.formula_b.sympy()
    got = expr.subs({sympy.Symbol(k): sympy.Rational(v.numerator, v.denominator) for k, v in values.items()})
    assert Fraction(str(got)) == row.b
    # The first two rows of a ranking, compared: #1 costs no more than #2.
    r = symshard.rank("llama3-8b", devices=64, top=2)
    w = symshard.compare("llama3-8b", r.rows[0], r.rows[1])
    first = w.component("relative cost", "total")
    assert first.a == r.rows[0].relative_cost
    assert first.b == r.rows[1].relative_cost
    with pytest.raises(symshard.SymshardError) as e:
        symshard.compare("llama3-8b", "dp=64,foo=1", b)
    assert "unknown knob `foo`" in e.value.message
    assert e.value.exit_code == 2


def test_report_passes_the_search_constraints_as_rank_does(cli, tmp_path):
    steer = dict(fix=["tp=2"], no_sp=True, max=["pp=2"], headroom="10%", max_microbatches=64)
    out = symshard.report("gpt3-1.3b", devices=16, output=tmp_path / "py.html", top=4, **steer)
    p = cli.run(
        "report", "gpt3-1.3b", "--devices", "16", "--top", "4", "--fix", "tp=2", "--no-sp",
        "--max", "pp=2", "--headroom", "10%", "--max-microbatches", "64", "-o", str(tmp_path / "cli.html"),
    )
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == (tmp_path / "cli.html").read_bytes()
    rows = symshard.rank("gpt3-1.3b", devices=16, top=4, **steer).rows
    assert rows and all(r.tp == 2 and not r.sequence_parallel for r in rows)
    html = out.read_text()
    for r in rows:
        assert f'title="{r.relative_cost}"' in html
    assert "\nintra-node all-reduce\n</text>" in html


def test_report_takes_a_stack_profile_as_the_command_line_does(cli, tmp_path):
    out = symshard.report("llama2-7b", devices=64, output=tmp_path / "py.html", top=3, stack="auto")
    p = cli.run(
        "report", "llama2-7b", "--devices", "64", "--stack", "auto", "--top", "3",
        "-o", str(tmp_path / "cli.html"),
    )
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == (tmp_path / "cli.html").read_bytes()
    assert "--stack auto" in out.read_text()


def test_the_split_table_is_the_command_lines_entries(cli):
    for name in ("linear", "conv2d"):
        e = symshard.explain(name)
        want = cli.json("explain", name)["split_table"]
        assert len(e.split_table) == len(want["entries"]) > 0
        assert e.dtype_bytes == want["dtype_bytes"]
        for got, w in zip([e.whole, *e.split_table], [want["whole"], *want["entries"]]):
            assert got is not None
            assert got.splits == [(s["index"], s["axis"], s["size"]) for s in w["splits"]]
            assert got.forward_compute == w["forward"]["compute"]
            assert got.backward_compute == w["backward"]["compute"]
            assert got.saved_bytes == w["saved_bytes"]
            assert isinstance(got.saved_bytes, symshard.Formula)
            for mine, theirs in (
                (got.forward_collectives, w["forward"]["collectives"]),
                (got.backward_collectives, w["backward"]["collectives"]),
            ):
                assert [(c.kind, c.tensor, c.axis, c.wire_bytes) for c in mine] == [
                    (c["kind"], c["tensor"], c["axis"], c["wire_bytes"]) for c in theirs
                ]
                assert all(isinstance(c.wire_bytes, symshard.Formula) for c in mine)
        assert e.unsplittable == {u["index"]: u["reason"] for u in want["unsplittable"]}
    assert e.whole.splits == []
    assert set(symshard.explain("conv2d").unsplittable) == {"kh", "kw"}
    # `b over a (p_a), n over b (p_b)` heads a row of `symshard explain linear`.
    text = cli.run("explain", "linear").stdout
    assert all(f"\n{x.describe()}\n" in text for x in symshard.explain("linear").split_table)


def test_formulas_of_explain_and_per_operator_rows_are_formula_objects(cli):
    sympy = pytest.importorskip("sympy")
    e = symshard.explain("linear")
    want = cli.json("explain", "linear")
    assert e.flops == want["flops"] and e.bytes == want["bytes"]
    assert all(isinstance(v, symshard.Formula) for v in [*e.flops.values(), *e.bytes.values()])
    b, k, n = sympy.symbols("b k n")
    assert e.flops["forward"].sympy() == 2 * b * k * n + b * n
    # Per operator: each formula evaluates to the numeric table's number at the model's symbols.
    s = symshard.cost("llama2-7b", symbolic=True, per_op=True)
    num = symshard.cost("llama2-7b", per_op=True)
    assert s.per_op is not None and num.per_op is not None and len(s.per_op) == len(num.per_op)
    at = {sympy.Symbol(x): v for x, v in num.symbols.items()}
    formulas = 0
    for fr, nr in zip(s.per_op, num.per_op):
        assert fr["name"] == nr["name"] and type(fr["name"]) is str
        for key in ("repeat", "params", "forward", "backward", "activations"):
            if isinstance(fr[key], symshard.Formula):
                formulas += 1
                assert fr[key].sympy().subs(at) == nr[key], (fr["name"], key)
            else:
                assert fr[key] == nr[key]
    assert formulas > 50
    # Under a strategy the library prices the device at the symbols' values: exact numbers.
    d = symshard.cost("llama2-7b", symbolic=True, strategy={"tp": 2}).per_device
    assert d is not None and type(d.flops) is int


def test_rank_takes_knobs_as_keywords(cli):
    def same(r, *flags):
        want = cli.json("rank", "gpt3-1.3b", "--devices", "16", "--top", "4", *flags)
        got = dict(r.raw)
        for x in (got, want):
            x.pop("search_seconds", None)
            x.pop("auto_layout_seconds", None)
        assert got == want
        return r.rows

    rows = same(
        symshard.rank("gpt3-1.3b", devices=16, top=4, tp=2, zero=1, sp=False, recompute="selective"),
        "--fix", "tp=2,zero=1,recompute=selective", "--no-sp",
    )
    assert rows and all(r.tp == 2 and r.zero == 1 and not r.sequence_parallel for r in rows)
    rows = same(
        symshard.rank("gpt3-1.3b", devices=16, top=4, pp=2, micro_batch_size=2, schedule="gpipe", sp=True),
        "--fix", "pp=2,mbs=2,schedule=gpipe,sp=on",
    )
    assert rows and all(r.pp == 2 and r.schedule == "gpipe" and r.sequence_parallel for r in rows)
    # ZB-V, tried only when fixed: two chunks per rank, its row's chunks still 1 as passed back.
    rows = same(symshard.rank("gpt3-1.3b", devices=16, top=4, pp=2, schedule="zb-v"), "--fix", "pp=2,schedule=zb-v")
    assert rows and all(r.pp == 2 and r.schedule == "zb-v" and r.chunks == 1 for r in rows)
    # DualPipeV likewise: ZB-V's placement in DualPipe's steps.
    rows = same(
        symshard.rank("gpt3-1.3b", devices=16, top=4, pp=2, schedule="dualpipev"), "--fix", "pp=2,schedule=dualpipev"
    )
    assert rows and all(r.pp == 2 and r.schedule == "dualpipev" and r.chunks == 1 for r in rows)
    rows = same(symshard.rank("gpt3-1.3b", devices=16, top=4, max_tp=2, max_pp=1), "--max", "tp=2,pp=1")
    assert rows and all(r.tp <= 2 and r.pp == 1 for r in rows)
    same(symshard.rank("gpt3-1.3b", devices=16, top=4, max={"tp": 2}, mbs=1), "--fix", "mbs=1", "--max", "tp=2")
    same(symshard.rank("gpt3-1.3b", devices=16, top=4, fix="tp=4", dp=4), "--fix", "tp=4,dp=4")
    rows = same(
        symshard.rank("gpt3-1.3b", devices=16, top=4, tp=2, sp=True, zero=1, overlap="tp-comm+param-gather"),
        "--fix", "tp=2,sp=on,zero=1,overlap=tp-comm+param-gather",
    )
    assert rows and all(r.overlap["tp-comm"] and r.overlap["param-gather"] for r in rows)
    # A row's knobs carry its overlaps to the timeline.
    assert rows[0].knobs()["tp_comm_overlap"] and rows[0].knobs()["overlap_param_gather"]
    # …and to compare, which prices the same strategy on both sides.
    c = symshard.compare("gpt3-1.3b", rows[0], rows[0])
    assert "overlap=tp-comm,param-gather" in c.raw["a"]["strategy"], c.raw["a"]
    # Mixed precision travels the same way: fixed in the search, stated by each row, carried
    # by its knobs to the timeline and to compare.
    rows = same(
        symshard.rank("gpt3-1.3b", devices=16, top=4, precision="autocast"),
        "--fix", "precision=autocast",
    )
    assert rows and all(r.precision == "autocast" for r in rows)
    assert rows[0].knobs()["precision"] == "autocast"
    c = symshard.compare("gpt3-1.3b", rows[0], rows[0])
    assert "precision=autocast" in c.raw["a"]["strategy"], c.raw["a"]
    with pytest.raises(TypeError, match="'tensor_parallel'"):
        symshard.rank("gpt3-1.3b", devices=16, tensor_parallel=2)
    with pytest.raises(TypeError, match="'max_schedule'"):
        symshard.rank("gpt3-1.3b", devices=16, max_schedule="gpipe")
    with pytest.raises(symshard.SymshardError) as e:
        symshard.rank("gpt3-1.3b", devices=16, zero=7)
    assert "zero" in e.value.message


def test_errors_of_a_config_dict_name_it_at_the_right_position(cli, tmp_path):
    config = json.loads((FIXTURES / "hf" / "Llama-2-7b-hf.json").read_text())
    config["hidden_size"] = "oops"
    # The command line on the same text: the same message, with the file's name.
    text = json.dumps(config, indent=2)
    (tmp_path / "config.json").write_text(text)
    msg, code = cli.error("cost", str(tmp_path / "config.json"))
    with pytest.raises(symshard.SymshardError) as e:
        symshard.cost(config)
    assert e.value.message == msg.replace(str(tmp_path / "config.json"), "<config dict>")
    assert e.value.message.startswith("<config dict>:")
    assert e.value.exit_code == code == 2
    assert e.value.source == text
    line, col = (int(x) for x in e.value.message.split(":")[1:3])
    assert e.value.source.splitlines()[line - 1][col - 1 :].startswith('"hidden_size"')

    class LlamaConfig:
        def to_dict(self):
            return dict(config)

    with pytest.raises(symshard.SymshardError) as e:
        symshard.cost(LlamaConfig())
    assert e.value.message.startswith("<LlamaConfig>:") and "symshard-" not in e.value.message


def test_warnings_of_the_library_are_python_warnings(cli, capfd):
    knobs = ("--dp", "1")
    p = cli.run("timeline", "llama2-7b", "--calib", "a100-80gb", *knobs, "--format", "json")
    assert p.returncode == 0
    want = [l[len("warning: ") :] for l in p.stderr.splitlines() if l.startswith("warning: ")]
    assert want and "does not fit in memory" in want[0]
    capfd.readouterr()
    with pytest.warns(symshard.SymshardWarning) as got:
        t = symshard.timeline("llama2-7b", {"dp": 1}, calib="a100-80gb")
    assert [str(w.message) for w in got] == want
    assert got[0].filename == __file__
    assert not t.fits
    assert "warning" not in capfd.readouterr().err


def test_results_are_attribute_classes_with_python_ints(cli):
    c = symshard.cost("llama2-7b", strategy={"tp": 8, "dp": 2, "recompute": "selective"})
    want = cli.json("cost", "llama2-7b", "--tp", "8", "--dp", "2", "--recompute", "selective")
    assert c.raw == want
    assert type(c.params) is int and c.params == int(want["params"])
    assert all(type(v) is int for v in c.symbols.values())
    d = c.per_device
    assert d is not None and isinstance(d.memory, symshard.Memory)
    assert type(d.flops) is int and d.flops == int(want["per_device"]["flops"])
    for got, raw in zip(d.stages, want["per_device"]["stages"]):
        for key in ("flops", "hbm_cost", "kernel_cost"):
            v = getattr(got, key)
            assert type(v) in (int, Fraction), (key, v)
            assert v == Fraction(raw[key])
    # The native objects the package builds on: attributes, not JSON text.
    n = symshard._native.cost(
        symshard._native.Model("llama2-7b"),
        strategy=symshard._native.Strategy(tp=8, dp=2, recompute="selective"),
    )
    assert type(n.params) is int and n.per_device.memory.total == d.memory.total
    assert isinstance(n.per_device.comm[0], symshard._native.Collective)
    m = symshard._native.Machine("h100-sxm", gpus_per_node=4, memory="60GB")
    assert (m.gpus_per_node, m.memory) == (4, 60 * 10**9)


def test_a_config_dict_needs_no_temporary_file(monkeypatch):
    config = json.loads((FIXTURES / "hf" / "Llama-2-7b-hf.json").read_text())
    want = symshard.cost(config).params

    def refuse(*args, **kwargs):
        raise AssertionError("a temporary directory was made")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    assert symshard.cost(config).params == want
    t = symshard.timeline(config, {"dp": 8}, calib="a100-80gb", svg=True)
    assert t.svg is not None and t.svg.startswith("<svg")


def test_rank_reports_the_best_strategy_on_64_of_each_nvl72_rack(cli):
    # A Mixtral shape with 64 experts at ep = 64 on 576 GB200 NVL72 GPUs: on full racks of 72,
    # 7 of the 9 expert groups straddle two racks; on 64 of each they stay on NVLink.
    args = dict(symbols={"E": 64, "B": 1152}, calib="gb200-nvl72", top=1, fix="ep=64,tp=1,cp=1")
    r = symshard.rank("mixtral-8x7b", devices=576, **args)
    want = cli.json(
        "rank", "mixtral-8x7b", "--set", "E=64", "--set", "B=1152", "--devices", "576",
        "--calib", "gb200-nvl72", "--top", "1", "--fix", "ep=64,tp=1,cp=1",
    )["partial_domains"]
    p = r.partial_domains
    assert p is not None
    assert (p.domain_size, p.gpus_per_domain, p.domains, p.full_domains) == (72, 64, 9, 8)
    assert p.best.strategy == want["best"]["strategy"]
    assert p.best.iteration_seconds == want["best"]["iteration_seconds"]
    assert p.change == want["change"] and p.wins == (p.change < 0)
    assert p.straddling == want["straddling"]
    # Given the devices per node, the user chose the placement: no comparison.
    given = symshard.rank("mixtral-8x7b", devices=576, gpus_per_node=72, **args)
    assert given.partial_domains is None
    assert given.rows[0].strategy == r.rows[0].strategy


# Each call refuses a bad value naming the keyword the caller passed, never a command-line flag:
# (the call, the keyword the message starts with, a phrase of the reason).
_REFUSED_BY_KEYWORD = [
    (lambda: symshard.rank("gpt3-175b", 1024, fix={"zero": 9}), "fix zero=9", "ZeRO stages"),
    (lambda: symshard.rank("gpt3-175b", 1024, zero=9), "fix zero=9", "ZeRO stages"),
    (lambda: symshard.rank("gpt3-175b", 1024, fix="bogus=1"), "fix", "unknown knob `bogus`"),
    (lambda: symshard.rank("gpt3-175b", 1024, max_tp="x"), "max `tp=x`", "whole number"),
    (lambda: symshard.rank("gpt3-175b", 1024, top=0), "top", "at least 1"),
    (lambda: symshard.rank("gpt3-175b", 0), "devices", "at least 1"),
    (lambda: symshard.rank("gpt3-175b", 1024, pp=97), "fix pp=97", "does not divide"),
    (lambda: symshard.rank("gpt3-175b", 1024, tp=8, max_tp=4), "fix tp=8", "max tp=4"),
    (
        lambda: symshard.cost("gpt3-175b", strategy={"pp": 2, "schedule": "none"}),
        "schedule none",
        "no pipeline",
    ),
    (lambda: symshard.rank("gpt3-175b", 1024, max_chunks=0), "max_chunks", "at least 1"),
    (lambda: symshard.rank("gpt3-175b", 1024, headroom="x"), "headroom", "unknown unit"),
    (lambda: symshard.rank("gpt3-175b", 1024, headroom="100%"), "headroom `100%`", "no memory"),
    # The device memory in the unit tables print, not as a count of bytes.
    (lambda: symshard.rank("gpt3-175b", 1024, headroom="90GB"), "headroom `", "all of the 80.0 GB"),
    (lambda: symshard.rank("gpt3-175b", 1024, headroom=90 * 10**9), "headroom `90.0 GB`", "all of"),
    (lambda: symshard.rank("gpt3-175b", 1024, headroom=-1), "headroom -1", "not negative"),
    (lambda: symshard.rank("gpt3-175b", 1024, memory="80Gb"), "memory", "bits"),
    (lambda: symshard.rank("gpt3-175b", 1024, symbols={"B": "x"}), "symbols `B=x`", "number"),
    (lambda: symshard.rank("gpt3-175b", 1024, symbols={"QQ": 3}), "symbols `QQ=3`", "no symbol"),
    (lambda: symshard.cost("gpt3-175b", B="x"), "symbols `B=x`", "number"),
    (lambda: symshard.rank("gpt3-175b", 1024, gpus_per_node=2000), "`gpus_per_node`", "1024"),
    (
        lambda: symshard.timeline("gpt3-175b", {"tp": 8, "pp": 8, "mbs": 7}, "a100-80gb"),
        "micro_batch_size 7",
        "does not divide",
    ),
    (
        lambda: symshard.timeline("gpt3-175b", {"tp": 8}, "a100-80gb", what_if="nvlink.bw=x2"),
        "what_if",
        "unknown quantity `nvlink.bw`",
    ),
]


@pytest.mark.parametrize("call,keyword,reason", _REFUSED_BY_KEYWORD)
def test_refusals_name_the_keyword_not_a_command_line_flag(call, keyword, reason):
    with pytest.raises(symshard.SymshardError) as e:
        call()
    assert e.value.message.startswith(keyword) or keyword in e.value.message, e.value.message
    assert reason in e.value.message, e.value.message
    assert "--" not in e.value.message, e.value.message
    assert e.value.exit_code == 2
