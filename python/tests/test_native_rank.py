"""`rank` through the library's typed interface: no command line is built, no stderr is read,
the rows are objects with exact Python ints, and warnings arrive as data."""

from __future__ import annotations

import shutil
from fractions import Fraction

import pytest

import symshard
from symshard import _native
from conftest import ROOT


@pytest.fixture
def no_argv(monkeypatch):
    """Fails a test that runs a command line."""

    def refused(*args, **kwargs):
        raise AssertionError(f"a command line was used: {args}")

    monkeypatch.setattr(_native, "run_json", refused)


def test_rank_rows_are_typed_objects_with_exact_ints(cli, no_argv):
    r = symshard.rank("llama3-8b", devices=64, top=3)
    want = cli.json("rank", "llama3-8b", "--devices", "64", "--top", "3")
    assert len(r.rows) == 3
    for row, w in zip(r.rows, want["strategies"]):
        assert type(row.dp) is int and type(row.tp) is int
        assert isinstance(row.relative_cost, (int, Fraction))
        assert row.relative_cost == Fraction(w["relative_cost"])
        assert row.memory_per_device == Fraction(w["memory_per_device"])
        assert row.relative.total == row.relative_cost
        assert row.strategy == w["strategy"]
        assert row.layout == w["layout"] and row.stack == w["stack"]
        assert row.micro_batch_size == w["micro_batch_size"]
    assert r.warnings == []
    assert sum(c for c, _ in r.rejected_by_kind.values()) == sum(r.rejected.values())


def test_the_native_ranking_carries_each_rows_knobs_as_a_strategy(no_argv):
    model = _native.Model("gpt3-1.3b")
    n = _native.rank(model, 16, top=2, fix="tp=2", max="pp=2", headroom="10%", pareto=True)
    assert not n.by_seconds and n.memory_limit < 80_000_000_000
    assert type(n.memory_limit) is int
    assert n.pareto
    for row in n.rows:
        assert row.tp == 2 and row.pp <= 2
        assert isinstance(row.knobs, _native.Strategy)
        c = _native.cost(model, strategy=row.knobs)
        assert c.per_device is not None
        assert c.per_device.memory.total == row.memory_per_device
        assert c.per_device.strategy == row.strategy
    timed = _native.rank(model, 16, top=1, machine=_native.Machine("a100-80gb"))
    assert timed.by_seconds and timed.simulated > 0
    assert isinstance(timed.rows[0].iteration_seconds, float)


def test_warnings_are_data_and_python_warnings(tmp_path, no_argv):
    shutil.copy(ROOT / "operator_rules" / "add.yaml", tmp_path / "add.yaml")
    with pytest.warns(symshard.SymshardWarning, match="replaces the shipped rule `add`"):
        r = symshard.rank("gpt3-125m", devices=8, top=1, rules=tmp_path)
    assert len(r.warnings) == 1 and r.warnings[0].startswith("note: `")


def test_bad_options_are_the_command_lines_errors_naming_the_keyword(cli, no_argv):
    for flags in (["--fix", "foo=1"], ["--max", "schedule=gpipe"], ["--top", "0"]):
        cli_message = cli.error("rank", "gpt3-1.3b", "--devices", "8", *flags)[0]
        # The command line names its flag (`--fix`), Python its keyword (`fix`).
        assert cli_message.startswith(flags[0])
        want = flags[0][2:] + cli_message[len(flags[0]):]
        kwargs = {"fix": "foo=1"} if flags[0] == "--fix" else {}
        if flags[0] == "--max":
            kwargs = {"max": "schedule=gpipe"}
        top = 0 if flags[0] == "--top" else 10
        with pytest.raises(symshard.SymshardError) as e:
            symshard.rank("gpt3-1.3b", devices=8, top=top, **kwargs)
        assert e.value.message == want
        assert e.value.exit_code == 2
    with pytest.raises(symshard.SymshardError, match="unknown layouts `sideways`"):
        symshard.rank("gpt3-1.3b", devices=8, layouts="sideways")


def test_compare_is_typed_and_matches_the_command_line(cli, no_argv):
    a, b = "dp=64,mbs=1,zero=1", "dp=8,tp=8,mbs=1,sp,zero=1"
    c = symshard.compare("llama3-8b", a, b, calib="h100-sxm")
    want = cli.json("compare", "llama3-8b", a, b, "--calib", "h100-sxm")
    assert c.raw == want
    total = c.component("relative cost", "total")
    assert type(total.a) in (int, Fraction) and total.difference == total.b - total.a
    assert list(c.wins_on) == [p["part"] for p in want["wins_on"]]
    with pytest.raises(TypeError, match="'sideways'"):
        symshard.compare("llama3-8b", a, b, sideways=1)
    msg, code = cli.error("compare", "gpt3-1.3b", "tp=7,dp=8", "tp=4,dp=4")
    with pytest.raises(symshard.SymshardError) as e:
        symshard.compare("gpt3-1.3b", "tp=7,dp=8", "tp=4,dp=4")
    assert (e.value.message, e.value.exit_code) == (msg, code)


def test_crossover_is_typed_and_matches_the_command_line(cli, no_argv):
    a, b = "dp=64,mbs=1,zero=1", "dp=8,tp=8,mbs=1,sp,zero=1"
    c = symshard.crossover("llama3-8b", a, b, "S", start=16, stop=16384, step=16)
    want = cli.json(
        "crossover", "llama3-8b", a, b, "--in", "S", "--from", "16", "--to", "16384", "--step", "16"
    )
    # The same document, its step's reason naming the keyword rather than the flag.
    assert want.pop("step_reason") == "--step 16, as given"
    assert c.raw.pop("step_reason") == c.step_reason == "step 16, as given"
    assert c.raw == want
    assert (c.start, c.stop, c.step) == (16, 16384, 16)
    assert [(f, t, w) for f, t, w in c.intervals] == [
        (int(i["from"]), int(i["to"]), i["winner"] if isinstance(i["winner"], str) else "invalid")
        for i in want["intervals"]
    ]
    # Every end of an interval is an exact evaluation of both strategies, as Python ints.
    assert c.boundaries and all(type(x) in (int, Fraction) for bd in c.boundaries for x in bd)
    # Without a step, the lattice the strategies need is chosen and said, as the command line
    # does; a rank row is a strategy too.
    r = symshard.rank("llama3-8b", devices=64, top=2).rows
    chosen = symshard.crossover("llama3-8b", r[0], r[1], "S", stop=4096)
    assert chosen.step_reason
    with pytest.raises(symshard.SymshardError, match="^start 9000 is above stop 4096"):
        symshard.crossover("llama3-8b", a, b, "S", start=9000, stop=4096)
    with pytest.raises(symshard.SymshardError, match="^symbol `Q`: model `llama3-8b` has no"):
        symshard.crossover("llama3-8b", a, b, "Q")
    with pytest.raises(TypeError, match="'sideways'"):
        symshard.crossover("llama3-8b", a, b, "S", sideways=1)


def test_cost_and_timeline_warnings_are_data(no_argv):
    with pytest.warns(symshard.SymshardWarning, match="does not fit in memory"):
        t = symshard.timeline("llama2-7b", {"dp": 8}, calib="a100-80gb")
    assert t.fits is False
    n = _native.timeline(
        _native.Model("llama2-7b"), _native.Strategy(dp=8), _native.Machine("a100-80gb")
    )
    assert len(n.warnings) == 1 and n.warnings[0].startswith("warning: ")
    with pytest.warns(symshard.SymshardWarning, match="selective recomputation recomputes nothing"):
        symshard.cost("llama2-7b", strategy={"tp": 8, "dp": 2, "recompute": "selective"})


def test_report_is_written_by_the_library_without_a_command_line(cli, tmp_path, no_argv):
    steer = dict(fix="tp=2", sp=False, max_pp=2, headroom="10%", max_microbatches=64, gpus_per_node=8)
    out = symshard.report("gpt3-1.3b", devices=16, output=tmp_path / "py.html", top=4, **steer)
    p = cli.run(
        "report", "gpt3-1.3b", "--devices", "16", "--top", "4", "--fix", "tp=2", "--no-sp",
        "--max", "pp=2", "--headroom", "10%", "--max-microbatches", "64", "--gpus-per-node", "8",
        "-o", str(tmp_path / "cli.html"),
    )
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == (tmp_path / "cli.html").read_bytes()
    with pytest.raises(TypeError, match="'why'"):
        symshard.report("gpt3-1.3b", devices=16, output=tmp_path / "x.html", why=True)


def test_models_and_explain_are_typed_calls(cli, no_argv):
    got = {m.name: m for m in symshard.models()}
    assert type(got["gpt3-175b"].params) is int and got["gpt3-175b"].family == "gpt"
    e = symshard.explain("linear")
    assert e.name == "linear" and e.split_table
    assert symshard.explain("linear", dtype_bytes=4).dtype_bytes == 4
    with pytest.raises(symshard.SymshardError, match="nosuch"):
        symshard.explain("nosuch")
    with pytest.raises(TypeError):
        symshard.explain("linear", dtype_bytes="4")


def test_a_machine_has_one_usable_memory(no_argv):
    # A100 80 GB: 10 % of the capacity kept free by default, as rank keeps it.
    assert _native.Machine("a100-80gb").usable_memory == 72_000_000_000
    assert _native.Machine("a100-80gb", headroom="0%").usable_memory == 80_000_000_000
    assert _native.Machine("a100-80gb", memory="40GB").usable_memory == 40_000_000_000
    assert _native.Machine("a100-80gb", memory="40GB", headroom="4GB").usable_memory == 36_000_000_000
    # A headroom in bytes as an int, as `memory` takes one; a float is neither text nor bytes.
    assert _native.Machine("a100-80gb", headroom=4 * 10**9).usable_memory == 76_000_000_000
    assert symshard.rank("gpt3-1.3b", 8, headroom=4 * 10**9, top=1).rows == symshard.rank(
        "gpt3-1.3b", 8, headroom="4GB", top=1
    ).rows
    with pytest.raises(TypeError, match="int of bytes"):
        symshard.rank("gpt3-1.3b", 8, headroom=8.5)
    with pytest.raises(_native.NativeError):
        _native.Machine("a100-80gb", headroom="100%").usable_memory
    row = {"dp": 16, "tp": 8, "pp": 8, "mbs": 1, "recompute": "selective"}
    with pytest.warns(symshard.SymshardWarning, match="does not fit"):
        t = symshard.timeline("gpt3-175b", row, calib="a100-80gb")
    assert t.memory_limit == 72e9 and t.fits is False
    assert symshard.timeline("gpt3-175b", dict(row, headroom="0%"), calib="a100-80gb").fits is True


def test_stack_auto_prices_each_row_on_its_own_stacks_profile(cli, no_argv):
    # The same rows and seconds as `rank --stack auto`: a ZeRO-3 row on PyTorch FSDP's profile.
    machine = _native.Machine("h100-sxm", stack="auto")
    n = _native.rank(_native.Model("llama3-8b"), 64, top=2, fix="zero=3", machine=machine)
    want = cli.json(
        "rank", "llama3-8b", "--devices", "64", "--top", "2", "--fix", "zero=3",
        "--calib", "h100-sxm", "--stack", "auto",
    )
    assert n.stack_profile is not None
    assert n.stack_profile.startswith("per row (--stack auto): ")
    for row, w in zip(n.rows, want["strategies"]):
        assert row.stack == "pytorch-fsdp" and row.strategy == w["strategy"]
        assert row.iteration_seconds == w["iteration_seconds"]
    free = _native.rank(
        _native.Model("llama3-8b"), 64, top=1, fix="zero=3", machine=_native.Machine("h100-sxm")
    )
    assert free.stack_profile is None
    assert free.rows[0].iteration_seconds < n.rows[0].iteration_seconds


def test_a_named_stack_ranks_only_the_layouts_it_runs(cli, no_argv):
    # megatron-lm-2021's `supports:` caps ZeRO at stage 1 (its distributed optimizer): the
    # ranking reports the limits and holds no ZeRO 2–3 row, as `rank --stack` does.
    machine = _native.Machine("h100-sxm", stack="megatron-lm-2021")
    n = _native.rank(_native.Model("llama3-8b"), 64, top=5, machine=machine)
    want = cli.json(
        "rank", "llama3-8b", "--devices", "64", "--top", "5",
        "--calib", "h100-sxm", "--stack", "megatron-lm-2021",
    )
    assert n.stack_supports == want["stack_supports"]["runs"]
    assert "zero ≤ 1" in n.stack_supports
    assert [r.strategy for r in n.rows] == [w["strategy"] for w in want["strategies"]]
    assert all(w["zero"] <= 1 for w in want["strategies"])
    assert _native.rank(_native.Model("llama3-8b"), 64, top=1).stack_supports is None
