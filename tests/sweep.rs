//! `symshard sweep`: a grid of points written as Parquet and CSV whose rows agree, an
//! infeasible point as a row with its reason, a resumed sweep and any number of workers giving
//! the same bytes, crossovers in the summary, and malformed specs refused at their line.

mod common;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, UInt64Type};
use arrow::record_batch::RecordBatch;
use common::{refused_in, symshard, temp_dir};
use std::path::Path;

/// Three machines (one what-if), two precisions: the A100 has no FP8, so two points are
/// infeasible.
const SPEC: &str = "\
models: [gpt3-125m]
devices: [8]
machines:
  - h100-sxm
  - a100-80gb
  - {calib: h100-sxm, with: \"nvlink.bandwidth=x2\"}
precisions: [bf16, fp8]
price_per_gpu_hour: {h100-sxm: 2.5}
";

/// Runs a sweep in `dir`; it must succeed. Returns its standard output.
fn sweep(dir: &Path, spec: &str, out: &str, jobs: &str) -> String {
    let o = symshard()
        .current_dir(dir)
        .args(["sweep", spec, "-o", out, "--jobs", jobs])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The Parquet file read back with the parquet crate's reader, as one batch.
/// What `symshard sweep` prints for `spec`, run on two workers in a directory of its own.
fn summary_of(dir: &str, spec: &str) -> String {
    let dir = temp_dir(dir);
    std::fs::write(dir.join("c.yaml"), spec).unwrap();
    sweep(&dir, "c.yaml", "c.parquet", "2")
}

fn read_parquet(path: &Path) -> RecordBatch {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// A CSV line's fields (quoted fields may hold commas and doubled quotes).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn setup(name: &str) -> std::path::PathBuf {
    let dir = temp_dir(name);
    std::fs::write(dir.join("spec.yaml"), SPEC).unwrap();
    dir
}

#[test]
fn parquet_and_csv_hold_the_same_rows_with_infeasible_points_and_their_reasons() {
    let dir = setup("sweep-rows");
    let text = sweep(&dir, "spec.yaml", "r.parquet", "2");
    assert!(
        text.contains("6 points (6 run, 0 from the journal)"),
        "{text}"
    );
    assert!(
        text.contains("what-if machine: h100-sxm with nvlink.bandwidth"),
        "{text}"
    );
    let batch = read_parquet(&dir.join("r.parquet"));
    assert_eq!(batch.num_rows(), 6);
    // MFU's column says what it is of (the dense bf16 peak, under every precision).
    let schema = batch.schema();
    let mfu = schema.field_with_name("mfu").unwrap();
    assert_eq!(
        mfu.metadata().get("description").map(String::as_str),
        Some(symshard::units::MFU_MEANS)
    );
    let col = |n: &str| batch.column_by_name(n).unwrap().clone();
    let point = col("point");
    let point = point.as_primitive::<UInt64Type>();
    assert_eq!(point.values().to_vec(), vec![0, 1, 2, 3, 4, 5]);
    let machine = col("machine");
    let machine = machine.as_string::<i32>();
    let feasible = col("feasible");
    let feasible = feasible.as_boolean();
    let reason = col("reason");
    let reason = reason.as_string::<i32>();
    let seconds = col("seconds_per_step");
    let seconds = seconds.as_primitive::<Float64Type>();
    let what_if = col("what_if");
    let what_if = what_if.as_string::<i32>();
    let price = col("cost_per_trillion_tokens_dollars");
    let price = price.as_primitive::<Float64Type>();
    for i in 0..6 {
        let a100_fp8 = machine.value(i) == "a100-80gb" && i % 2 == 1;
        assert_eq!(feasible.value(i), !a100_fp8, "row {i}");
        if a100_fp8 {
            assert!(reason.value(i).contains("FP8"), "{}", reason.value(i));
            assert!(seconds.is_null(i));
        } else {
            assert!(reason.is_null(i));
            assert!(seconds.value(i) > 0.0);
        }
        // The what-if machine is marked; its price is its table's.
        let derived = machine.value(i).contains("+what-if(");
        assert_eq!(!what_if.is_null(i), derived);
        assert_eq!(!price.is_null(i), machine.value(i).starts_with("h100-sxm"));
    }
    // The CSV: a header and the same rows, field by field where both print them alike.
    let csv = std::fs::read_to_string(dir.join("r.csv")).unwrap();
    let lines: Vec<Vec<String>> = csv.lines().map(csv_fields).collect();
    assert_eq!(lines.len(), 7);
    let head = &lines[0];
    let at = |n: &str| head.iter().position(|h| h == n).unwrap();
    for (i, l) in lines[1..].iter().enumerate() {
        assert_eq!(l.len(), head.len());
        assert_eq!(l[at("point")], point.value(i).to_string());
        assert_eq!(l[at("machine")], machine.value(i));
        assert_eq!(l[at("feasible")], feasible.value(i).to_string());
        let s = &l[at("seconds_per_step")];
        if seconds.is_null(i) {
            assert!(s.is_empty());
            assert_eq!(l[at("reason")], reason.value(i));
        } else {
            assert_eq!(s.parse::<f64>().unwrap(), seconds.value(i));
        }
    }
}

#[test]
fn an_interrupted_sweep_resumes_from_its_journal_and_writes_the_same_bytes() {
    let dir = setup("sweep-resume");
    sweep(&dir, "spec.yaml", "r.parquet", "2");
    let first = std::fs::read(dir.join("r.parquet")).unwrap();
    let first_csv = std::fs::read(dir.join("r.csv")).unwrap();
    // Cut the journal as an interruption would: two points lost, the last line half written.
    let journal = dir.join("r.parquet.journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "a header and six rows");
    let kept = format!("{}\n{}", lines[..5].join("\n"), &lines[5][..20]);
    std::fs::write(&journal, kept).unwrap();
    std::fs::remove_file(dir.join("r.parquet")).unwrap();
    let again = sweep(&dir, "spec.yaml", "r.parquet", "2");
    assert!(again.contains("(2 run, 4 from the journal)"), "{again}");
    assert_eq!(std::fs::read(dir.join("r.parquet")).unwrap(), first);
    assert_eq!(std::fs::read(dir.join("r.csv")).unwrap(), first_csv);
    // Everything done: nothing runs, the same bytes again.
    let done = sweep(&dir, "spec.yaml", "r.parquet", "1");
    assert!(done.contains("(0 run, 6 from the journal)"), "{done}");
    assert_eq!(std::fs::read(dir.join("r.parquet")).unwrap(), first);
    // A row journaled twice and a line of bytes that are not text: the first row of a point
    // stands, the bad line is dropped, and the journal is written again without either.
    let text = std::fs::read_to_string(&journal).unwrap();
    let second_row = text.lines().nth(1).unwrap().to_string();
    let mut bytes = text.clone().into_bytes();
    bytes.extend_from_slice(second_row.as_bytes());
    bytes.extend_from_slice(b"\n\xff\xfe{\"point\n");
    std::fs::write(&journal, bytes).unwrap();
    let twice = sweep(&dir, "spec.yaml", "r.parquet", "1");
    assert!(twice.contains("(0 run, 6 from the journal)"), "{twice}");
    assert_eq!(std::fs::read(dir.join("r.parquet")).unwrap(), first);
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        7
    );
    // A changed spec does not reuse the journal.
    std::fs::write(dir.join("spec.yaml"), SPEC.replace("[8]", "[16]")).unwrap();
    let err = refused_in(&dir, &["sweep", "spec.yaml", "-o", "r.parquet"]);
    assert!(err.contains("journal of another sweep"), "{err}");
}

/// A calibration file edited between two runs of one spec: the journal's rows were priced on
/// the old table, so the rerun refuses to mix them in; with the journal deleted it prices anew.
#[test]
fn a_journal_is_not_reused_once_a_machine_file_changed() {
    let dir = temp_dir("sweep-edited-table");
    let table = include_str!("../calibration/h100-sxm.yaml");
    std::fs::write(dir.join("mine.yaml"), table).unwrap();
    let spec = "models: [gpt3-125m]\ndevices: [8]\nmachines: [mine.yaml]\n";
    std::fs::write(dir.join("spec.yaml"), spec).unwrap();
    sweep(&dir, "spec.yaml", "e.parquet", "1");
    let again = sweep(&dir, "spec.yaml", "e.parquet", "1");
    assert!(again.contains("(0 run, 1 from the journal)"), "{again}");
    // HBM bandwidth 3.35 TB/s -> 2 TB/s: the same spec text, another machine.
    let edited = table.replacen("value: 3.35e12", "value: 2.0e12", 1);
    assert_ne!(edited, table, "the edit must change the table");
    std::fs::write(dir.join("mine.yaml"), edited).unwrap();
    let err = refused_in(&dir, &["sweep", "spec.yaml", "-o", "e.parquet"]);
    assert!(err.contains("priced on other inputs"), "{err}");
    std::fs::remove_file(dir.join("e.parquet.journal.jsonl")).unwrap();
    let fresh = sweep(&dir, "spec.yaml", "e.parquet", "1");
    assert!(fresh.contains("(1 run, 0 from the journal)"), "{fresh}");
}

/// `report --sweep` draws the rows `sweep` wrote: the three charts, one legend entry per line,
/// the Pareto front, and a heatmap cell per pair of swept values that names each point's
/// winning family (or that none fits).
#[test]
fn report_draws_a_sweep() {
    let dir = setup("sweep-report");
    sweep(&dir, "spec.yaml", "p.parquet", "2");
    let o = symshard()
        .current_dir(&dir)
        .args(["report", "--sweep", "p.parquet", "-o", "p.html"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(dir.join("p.html")).unwrap();
    for id in ["scaling", "hours", "pareto", "heatmap"] {
        assert!(html.contains(&format!("<figure id=\"{id}\">")), "{id}");
    }
    assert_eq!(html.matches("<svg").count(), 3, "three charts drawn as SVG");
    // Both scaling charts are per token (issue: seconds or cost per token against devices).
    assert!(
        html.contains("hours per 10¹² tokens against devices"),
        "the time chart is per token"
    );
    assert!(
        html.contains("per 10¹² tokens against devices</text>")
            || html.matches("per 10¹² tokens against devices").count() >= 2,
        "the cost chart is per token"
    );
    // One line per machine and precision with a feasible point: 3 machines × 2 precisions,
    // less the A100's FP8.
    let legend = html.split("<ul class=\"legend\">").nth(1).unwrap();
    let legend = legend.split("</ul>").next().unwrap();
    assert_eq!(legend.matches("<li>").count(), 5, "{legend}");
    // The heatmap spans the two swept axes (devices has one value): machine by precision.
    let heat = html.split("<table class=\"heat\">").nth(1).unwrap();
    assert!(
        heat.contains("machine (rows) by precision (columns)"),
        "{heat}"
    );
    assert!(
        heat.contains("<th>a100-80gb</th>") && heat.contains("<th>fp8</th>"),
        "{heat}"
    );
    assert_eq!(heat.matches("<td>").count(), 6, "{heat}");
    // The A100 has no FP8: its cell has no layout and says why on hover.
    assert_eq!(heat.matches(">no layout<").count(), 1, "{heat}");
    assert!(heat.contains("title=\""), "{heat}");
    let front = html.split("<table id=\"front\">").nth(1).unwrap();
    assert!(
        front.matches("<tr>").count() >= 2,
        "a header and at least one point"
    );
    // The only addresses are the SVG namespace's.
    let addresses = html.matches("http").count();
    assert_eq!(
        addresses,
        html.matches("http://www.w3.org/2000/svg").count()
    );
    for pat in ["<script", "<link", "<img", "url("] {
        assert!(!html.contains(pat), "{pat}: the page is self-contained");
    }
    // Not a sweep's file: refused, naming it.
    std::fs::write(dir.join("bad.parquet"), "not parquet").unwrap();
    let err = refused_in(&dir, &["report", "--sweep", "bad.parquet", "-o", "b.html"]);
    assert!(err.contains("bad.parquet: not a Parquet file"), "{err}");
    let err = refused_in(
        &dir,
        &[
            "report",
            "--sweep",
            "p.parquet",
            "gpt3-1.3b",
            "-o",
            "b.html",
        ],
    );
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn one_worker_and_two_write_the_same_bytes() {
    let dir = setup("sweep-jobs");
    sweep(&dir, "spec.yaml", "one.parquet", "1");
    sweep(&dir, "spec.yaml", "two.parquet", "2");
    for ext in ["parquet", "csv"] {
        let one = std::fs::read(dir.join(format!("one.{ext}"))).unwrap();
        let two = std::fs::read(dir.join(format!("two.{ext}"))).unwrap();
        assert_eq!(one, two, "{ext}");
    }
}

/// Points evaluated elsewhere (as Ray's workers do, through the library) and recorded in any
/// order, their rows passed on as the journal's text, give the command line's bytes; a row twice,
/// or one of no point, is refused, and so is writing before every point has its row.
#[test]
fn rows_recorded_out_of_order_write_the_command_lines_bytes() {
    use symshard::sweep::{row_of_text, row_text, Loaded, SweepRun};
    let dir = setup("sweep-record");
    sweep(&dir, "spec.yaml", "cli.parquet", "1");
    let spec = dir.join("spec.yaml");
    let run = SweepRun::open(&spec, &dir.join("lib.parquet")).unwrap();
    let loaded = Loaded::read(&spec).unwrap();
    let pending = run.pending().unwrap();
    assert_eq!(pending, (0..run.points()).collect::<Vec<_>>());
    for &i in pending.iter().rev() {
        let text = row_text(&loaded.evaluate(&loaded.point(i).unwrap())).unwrap();
        run.record(row_of_text(&text).unwrap()).unwrap();
        if i == 1 {
            let twice = run.record(row_of_text(&text).unwrap()).unwrap_err();
            assert!(twice.to_string().contains("already has a row"), "{twice}");
        }
        if i == pending.len() as u64 - 1 {
            let early = run.finish().unwrap_err();
            assert!(early.to_string().contains("have no row yet"), "{early}");
        }
    }
    let beyond = loaded.point(run.points()).unwrap_err();
    assert!(beyond.to_string().contains("the sweep has"), "{beyond}");
    run.finish().unwrap();
    for ext in ["parquet", "csv"] {
        let cli = std::fs::read(dir.join(format!("cli.{ext}"))).unwrap();
        let lib = std::fs::read(dir.join(format!("lib.{ext}"))).unwrap();
        assert_eq!(cli, lib, "{ext}");
    }
}

#[test]
fn the_summary_names_a_crossover_between_adjacent_points() {
    let text = summary_of(
        "sweep-crossover",
        "models: [gpt3-1.3b]\ndevices: [8, 64]\nmachines: [a100-40gb]\nbatch: [64]\n",
    );
    assert!(
        text.contains("devices 8 → 64 (gpt3-1.3b, a100-40gb, batch 64): dp → dp+tp"),
        "{text}"
    );
}

/// Between two adjacent device counts the summary times both best layouts at the counts in
/// between. With the spec fixing dp = 8, a layout from 8 devices scaled to 16 keeps dp = 8 and
/// tp × pp × cp = 1, so its search fails. The summary says so, with why, instead of counting
/// 16 only among the counts where a layout does not run or fit.
#[test]
fn a_crossover_names_a_search_between_the_points_that_failed() {
    let text = summary_of(
        "sweep-crossover-failed",
        "models: [gpt3-1.3b]\ndevices: [8, 32]\nmachines: [a100-40gb]\nbatch: [64]\nfix: [dp=8]\n",
    );
    assert!(
        text.contains("devices 8 → 32 (gpt3-1.3b, a100-40gb, batch 64)"),
        "{text}"
    );
    assert!(
        text.contains(
            "at 16 devices a layout could not be searched: --fix dp=8,tp=1,pp=1,cp=1: dp × tp × pp × cp = 8, not the 16 devices"
        ),
        "{text}"
    );
}

/// Along the sequence, the crossover names the exact answer of `symshard crossover` for the two
/// winning layouts (by relative cost) and, where the first no longer fits at the second point,
/// its exact memory there against the usable memory.
#[test]
fn a_crossover_along_the_sequence_is_solved_exactly() {
    let dir = temp_dir("sweep-crossover-exact");
    std::fs::write(
        dir.join("c.yaml"),
        "models: [gpt3-1.3b]\ndevices: [8]\nmachines: [a100-40gb]\nsequence: [2048, 4096]\n",
    )
    .unwrap();
    let text = sweep(&dir, "c.yaml", "c.parquet", "1");
    let line = text
        .lines()
        .find(|l| l.contains("sequence 2048 → 4096"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("dp → dp+tp (points 0 and 1)"), "{line}");
    assert!(
        line.contains("by relative cost (exact): dp stays cheaper from S = 2048 to 4096"),
        "{line}"
    );
    assert!(
        line.contains("memory decides: at S = 4096 dp needs"),
        "{line}"
    );
    // The same strategies through `symshard crossover` and `cost`.
    let csv = std::fs::read_to_string(dir.join("c.csv")).unwrap();
    let header = csv_fields(csv.lines().next().unwrap());
    let at = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<Vec<String>> = csv.lines().skip(1).map(csv_fields).collect();
    let strategy = |r: &Vec<String>| format!("{} precision=bf16", r[at("strategy")]);
    let (a, b) = (strategy(&rows[0]), strategy(&rows[1]));
    let o = symshard()
        .args([
            "crossover",
            "gpt3-1.3b",
            &a,
            &b,
            "--in",
            "S",
            "--from",
            "2048",
        ])
        .args(["--to", "4096", "--calib", "a100-40gb", "--set", "B=512"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("S = 2048 … 4096              A is cheaper"),
        "{out}"
    );
    let o = symshard()
        .args(["cost", "gpt3-1.3b", "--strategy", &a, "--set", "S=4096"])
        .args(["--calib", "a100-40gb"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let total = out
        .lines()
        .find(|l| l.contains("total"))
        .unwrap_or_else(|| panic!("{out}"));
    let needs = line.split(" dp needs ").nth(1).unwrap();
    let needs = needs.split(" per device").next().unwrap();
    assert!(total.contains(needs), "{total} / {needs}");
}

/// An FP8 point's crossover is solved too: the row's strategy already says `precision=fp8`,
/// which the solve reads once (it once said it twice and was refused).
#[test]
fn an_fp8_crossover_along_the_sequence_is_solved() {
    let dir = temp_dir("sweep-crossover-fp8");
    std::fs::write(
        dir.join("c.yaml"),
        "models: [gpt3-1.3b]\ndevices: [8]\nmachines: [h100-sxm]\nprecisions: [fp8]\nsequence: [2048, 131072]\n",
    )
    .unwrap();
    let text = sweep(&dir, "c.yaml", "c.parquet", "1");
    let line = text
        .lines()
        .find(|l| l.contains("sequence 2048 → 131072"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("dp → dp+cp") && line.contains("by relative cost (exact)"),
        "{line}"
    );
    assert!(!line.contains("given twice"), "{line}");
}

#[test]
fn malformed_specs_are_refused_at_their_line() {
    let dir = temp_dir("sweep-malformed");
    for (spec, line, says) in [
        ("models: [gpt3-125m]\ndevices: [8]\nmachines: [h100-sxm]\nmodles: [x]\n", 4, "unknown field `modles`"),
        ("models:\n  - gpt3-125m\n  - gpt9\ndevices: [8]\nmachines: [h100-sxm]\n", 3, "gpt9"),
        ("models: [gpt3-125m]\ndevices: [8]\nmachines:\n  - h100-sxm\n  - {calib: h100-sxm, with: \"domian=4\"}\n", 5, "unknown quantity `domian`"),
        ("models: [gpt3-125m]\ndevices: [8, 0]\nmachines: [h100-sxm]\n", 2, "positive"),
        ("models: [gpt3-125m]\ndevices: [8]\nmachines: [h100-sxm]\nfix: [tpp=2]\n", 4, "tpp"),
        ("models: [gpt3-125m]\ndevices: [8]\nmachines: [h100-sxm]\nprice_per_gpu_hour: {h200-sxm: 3}\n", 4, "no machine `h200-sxm`"),
        ("models: [gpt3-125m]\ndevices: [8]\nmachines: [h100-sxm]\nstack: autoo\n", 4, "unknown stack profile `autoo`"),
    ] {
        std::fs::write(dir.join("bad.yaml"), spec).unwrap();
        let err = refused_in(&dir, &["sweep", "bad.yaml", "-o", "r.parquet"]);
        assert!(err.contains(&format!("bad.yaml:{line}:")), "{spec}\n{err}");
        assert!(err.contains(says), "{spec}\n{err}");
    }
    assert!(!dir.join("r.parquet").exists());
}

/// `stack:` prices every point as `rank --stack` does, and each row names the profile its
/// layout's seconds include: none by default; under `auto`, FSDP's for a ZeRO-3 layout
/// (`fix: zero=3`), Megatron-LM's for a tensor-parallel one (`fix: tp=2,zero=1`).
#[test]
fn a_spec_stack_prices_each_point_on_its_layouts_profile() {
    let dir = temp_dir("sweep-stack");
    let base = "models: [gpt3-125m]\ndevices: [8]\nmachines: [h100-sxm]\n";
    let mut seconds = Vec::new();
    for (name, extra, profile) in [
        ("free", "fix: zero=3\n", None),
        ("fsdp", "fix: zero=3\nstack: auto\n", Some("pytorch-fsdp")),
        (
            "megatron",
            "fix: tp=2,zero=1\nstack: auto\n",
            Some("megatron-lm-2021"),
        ),
    ] {
        let spec = format!("{name}.yaml");
        std::fs::write(dir.join(&spec), format!("{base}{extra}")).unwrap();
        let out = format!("{name}.parquet");
        sweep(&dir, &spec, &out, "1");
        let batch = read_parquet(&dir.join(&out));
        let col = batch.column_by_name("stack_profile").unwrap().clone();
        let col = col.as_string::<i32>();
        assert_eq!(col.len(), 1);
        match profile {
            None => assert!(col.is_null(0), "{name}"),
            Some(p) => assert_eq!(col.value(0), p, "{name}"),
        }
        let s = batch.column_by_name("seconds_per_step").unwrap().clone();
        seconds.push(s.as_primitive::<Float64Type>().value(0));
    }
    // FSDP's profile adds its seconds per kernel to the ZeRO-3 layout.
    assert!(seconds[1] > seconds[0], "{seconds:?}");
}

/// Along the devices, each winning layout is scaled to the counts between the two points (its
/// dp and micro-batch count follow the devices) and the first count where the second is no
/// slower is named, with both times: each is what `rank` gives for that scaled layout there.
#[test]
fn a_crossover_along_the_devices_names_the_first_count_where_the_second_layout_wins() {
    let dir = temp_dir("sweep-crossover-devices");
    std::fs::write(
        dir.join("d.yaml"),
        "models: [llama3-8b]\ndevices: [8, 32]\nmachines: [a100-80gb]\nbatch: [512]\n",
    )
    .unwrap();
    let text = sweep(&dir, "d.yaml", "d.parquet", "2");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("devices 8 → 32"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("by simulated seconds"), "{line}");
    // `… from D (T_B s against T_A s)`.
    let at = line.find(" from ").unwrap_or_else(|| panic!("{line}")) + 6;
    let rest = &line[at..];
    let d: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
    assert!(8 < d && d < 32, "{line}");
    let times: Vec<&str> = rest
        .split(['(', ')'])
        .nth(1)
        .unwrap()
        .split(" s against ")
        .map(|t| t.trim_end_matches(" s"))
        .collect();
    // The two points' layouts, from the CSV, scaled to `d` devices.
    let csv = std::fs::read_to_string(dir.join("d.csv")).unwrap();
    let mut lines = csv.lines();
    let head = csv_fields(lines.next().unwrap());
    let col = |row: &[String], name: &str| -> String {
        row[head.iter().position(|h| h == name).unwrap()].clone()
    };
    let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
    let scaled = |row: &[String]| -> String {
        let n = |k: &str| col(row, k).parse::<u64>().unwrap();
        let dp = d / (n("devices") / n("dp"));
        let mut fix = format!(
            "precision=bf16,dp={dp},tp={},pp={},cp={},ep={},mbs={},microbatches={},zero={},sp={},recompute={}",
            n("tp"),
            n("pp"),
            n("cp"),
            n("ep"),
            n("micro_batch_size"),
            512 / (dp * n("micro_batch_size")),
            n("zero"),
            if col(row, "sequence_parallel") == "true" { "on" } else { "off" },
            col(row, "recompute"),
        );
        if n("pp") > 1 {
            fix += &format!(",schedule={}", col(row, "schedule"));
        }
        fix
    };
    let seconds = |fix: String| -> String {
        let o = symshard()
            .args([
                "rank",
                "llama3-8b",
                "--devices",
                &d.to_string(),
                "--calib",
                "a100-80gb",
            ])
            .args([
                "--set", "B=512", "--top", "1", "--format", "json", "--fix", &fix,
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        format!(
            "{:.3}",
            doc["strategies"][0]["iteration_seconds"].as_f64().unwrap()
        )
    };
    assert_eq!(seconds(scaled(&rows[1])), times[0], "{line}");
    assert_eq!(seconds(scaled(&rows[0])), times[1], "{line}");
}
