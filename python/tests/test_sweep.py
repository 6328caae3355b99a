"""`symshard.sweep`: a sweep run from Python, on this process's threads or over a Ray cluster,
writes the same Parquet and CSV files as `symshard sweep`, bit for bit, however its points were
partitioned; an interrupted sweep resumes from its journal. The Ray tests start a local Ray
cluster; they are skipped where Ray is not installed, except under CI (`.ci/python` installs it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import symshard
from symshard import _native

# A grid with an infeasible point (gpt3-175b on 8 devices does not fit) and two machines.
SPEC = """\
models: [gpt3-125m, gpt3-175b]
devices: [8, 16]
machines: [a100-80gb, h100-sxm]
precisions: [bf16]
price_per_gpu_hour: {a100-80gb: 1.5, h100-sxm: 2.5}
"""

POINTS = 8


def spec(tmp_path: Path) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC)
    return p


def cli_files(cli, tmp_path: Path) -> tuple:
    out = tmp_path / "cli" / "s.parquet"
    out.parent.mkdir()
    p = cli.run("sweep", str(spec(tmp_path)), "-o", str(out), "--jobs", "2")
    assert p.returncode == 0, p.stderr
    return out.read_bytes(), out.with_suffix(".csv").read_bytes()


def ray_module():
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("Ray is not installed (.ci/python installs it)")
        pytest.skip("Ray is not installed")
    return ray


@pytest.fixture(scope="module")
def ray_cluster():
    ray = ray_module()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_a_local_sweep_writes_the_command_lines_files(cli, tmp_path):
    parquet, csv = cli_files(cli, tmp_path)
    out = tmp_path / "py" / "s.parquet"
    out.parent.mkdir()
    r = symshard.sweep(spec(tmp_path), out, jobs=1)
    assert out.read_bytes() == parquet
    assert r.csv.read_bytes() == csv
    assert (r.points, r.resumed, r.executor) == (POINTS, 0, "local")
    # Typed rows: the Parquet columns as attributes, counts as ints, rates as floats.
    assert [row.point for row in r.rows] == list(range(POINTS))
    feasible = [row for row in r.rows if row.feasible]
    assert feasible and all(isinstance(row.tp, int) and isinstance(row.seconds_per_step, float) for row in feasible)
    infeasible = [row for row in r.rows if not row.feasible]
    assert r.infeasible == len(infeasible) > 0
    assert all(row.reason and row.strategy is None for row in infeasible)


def test_rows_are_read_from_the_journal_when_asked_for(tmp_path):
    out = tmp_path / "s.parquet"
    r = symshard.sweep(spec(tmp_path), out, jobs=1)
    rows = r.rows
    assert isinstance(rows, symshard.SweepRows) and not isinstance(rows, list)
    assert len(rows) == POINTS
    # Indexing, negative indices and slices read the rows asked for, in point order.
    assert rows[0].point == 0 and rows[-1].point == POINTS - 1
    assert [x.point for x in rows[2:5]] == [2, 3, 4]
    assert [x.point for x in rows[::3]] == list(range(0, POINTS, 3))
    assert [x.point for x in rows[5:2]] == []
    assert list(rows) == [rows[i] for i in range(POINTS)]
    with pytest.raises(IndexError):
        rows[POINTS]
    with pytest.raises(TypeError):
        rows["0"]  # type: ignore[call-overload]
    # The journal changed in place after the sweep finished: a row read then says so, rather
    # than returning another point's row.
    lines = r.journal.read_text().splitlines(keepends=True)
    r.journal.write_text(lines[0] + "".join(reversed(lines[1:])))
    with pytest.raises(symshard.SymshardError, match="no longer where the sweep left it"):
        rows[0]


def test_to_pandas_is_the_frame_of_the_rows(tmp_path):
    pd = pytest.importorskip("pandas")
    r = symshard.sweep(spec(tmp_path), tmp_path / "s.parquet", jobs=1)
    # Built a column at a time from chunks of the journal, it is the frame of the rows as dicts:
    # the same columns in the same order, values and dtypes.
    df = r.to_pandas()
    want = pd.DataFrame([dict(x) for x in r.rows])
    assert list(df.columns) == list(want.columns) == list(r.rows[0].keys())
    assert df.equals(want)
    assert (df.dtypes == want.dtypes).all()
    assert len(df) == POINTS and list(df["point"]) == list(range(POINTS))


@pytest.mark.parametrize("partitions", [1, 3, POINTS])
def test_a_ray_sweep_writes_the_same_bytes_whatever_the_partitioning(cli, tmp_path, ray_cluster, partitions):
    parquet, csv = cli_files(cli, tmp_path)
    out = tmp_path / "ray" / "s.parquet"
    out.parent.mkdir()
    r = symshard.sweep(spec(tmp_path), out, executor="ray", partitions=partitions)
    assert r.executor == "ray"
    assert out.read_bytes() == parquet
    assert r.csv.read_bytes() == csv
    assert r.points == POINTS


def test_a_ray_sweep_resumes_from_its_journal(cli, tmp_path, ray_cluster):
    parquet, _ = cli_files(cli, tmp_path)
    out = tmp_path / "ray" / "s.parquet"
    out.parent.mkdir()
    s = os.fspath(spec(tmp_path))
    # Half the points run and journaled, then the sweep stops before writing.
    run = _native.SweepRun(s, os.fspath(out))
    run.record(_native.sweep_points(s, [0, 1, 2, 3]))
    del run
    assert not out.exists()
    r = symshard.sweep(s, out, executor="ray", partitions=2)
    assert r.resumed == 4
    assert out.read_bytes() == parquet


def test_rows_from_workers_are_checked(tmp_path):
    s = os.fspath(spec(tmp_path))
    run = _native.SweepRun(s, os.fspath(tmp_path / "s.parquet"))
    row = _native.sweep_points(s, [5])
    run.record(row)
    with pytest.raises(_native.NativeError, match="point 5 of the sweep already has a row"):
        run.record(row)
    with pytest.raises(_native.NativeError, match="not a sweep row"):
        run.record(["{}"])
    with pytest.raises(_native.NativeError, match=f"point {POINTS}: the sweep has {POINTS} points"):
        _native.sweep_points(s, [POINTS])
    with pytest.raises(_native.NativeError, match="have no row yet"):
        run.finish()


def test_bad_sweep_arguments_are_refused(tmp_path):
    s = spec(tmp_path)
    with pytest.raises(symshard.SymshardError, match="executor must be 'local' or 'ray'"):
        symshard.sweep(s, tmp_path / "s.parquet", executor="dask")
    with pytest.raises(symshard.SymshardError, match="NAME.parquet"):
        symshard.sweep(s, tmp_path / "s.csv")
    with pytest.raises(symshard.SymshardError, match="jobs= is for executor='local'"):
        symshard.sweep(s, tmp_path / "s.parquet", executor="ray", jobs=2)
