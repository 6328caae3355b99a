//! Stack profiles: `calibrate --from-runs` recovers the parameters that generated synthetic
//! runs, and reports each source left out; `--stack` adds exactly its seconds; the default is
//! profile-free; bad profile files are refused at their line with exit code 2; every shipped
//! profile loads and names a fit set. The synthetic runs are the shipped validation rows with
//! their published times replaced by the timeline's own predictions under known parameters.

mod common;

use common::{refused_in, stdout, symshard, temp_dir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use symshard::calib::stack::{Param, StackProfile};
use symshard::diag::Source;
use symshard::validate::run_file_with;

/// The parameters the synthetic runs are generated with.
fn known() -> BTreeMap<Param, f64> {
    BTreeMap::from([
        (Param::StepOverhead, 0.25),
        (Param::MicrobatchOverhead, 0.002),
        (Param::KernelOverhead, 4e-6),
    ])
}

/// Writes the shipped validation file `stem` into `dir` with every published time replaced by
/// the prediction under `values` (and no band: each row is predicted at its own settings).
fn synthetic(dir: &Path, stem: &str, values: &BTreeMap<Param, f64>) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("validation/{stem}.yaml"));
    let src = Source::read(&path).unwrap();
    let profile = StackProfile::of("known", values.clone());
    let outcome = run_file_with(stem, &src, Some(&profile)).unwrap();
    let mut raw: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let runs = raw.get_mut("runs").unwrap().as_sequence_mut().unwrap();
    for (run, row) in runs.iter_mut().zip(&outcome.rows) {
        let map = run.as_mapping_mut().unwrap();
        map.remove("band");
        map.insert("published".into(), row.predicted.into());
    }
    let out = dir.join(format!("{stem}.yaml"));
    std::fs::write(&out, serde_yaml::to_string(&raw).unwrap()).unwrap();
    out
}

/// Writes the shipped validation files `stems` into `dir` as synthetic runs under [`known`]
/// values, and `runs.yaml`, a fit set `name` of all of them labelled `megatron`.
fn synthetic_fit_set(dir: &Path, name: &str, stems: &[&str]) {
    let mut runs = format!("name: {name}\ndoc: synthetic runs\nlabel: megatron\nfit_set:\n");
    for stem in stems {
        synthetic(dir, stem, &known());
        runs += &format!("  - file: {stem}.yaml\n");
    }
    std::fs::write(dir.join("runs.yaml"), runs).unwrap();
}

fn fitted(path: &Path) -> StackProfile {
    StackProfile::load(&Source::read(path).unwrap()).unwrap()
}

/// `symshard calibrate --from-runs DIR/RUNS -o DIR/OUTPUT`, which must succeed: its report and
/// the profile it wrote.
fn calibrate_from_runs(dir: &Path, runs: &str, output: &str) -> (String, StackProfile) {
    let out = stdout(&[
        "calibrate",
        "--from-runs",
        dir.join(runs).to_str().unwrap(),
        "-o",
        dir.join(output).to_str().unwrap(),
    ]);
    (out, fitted(&dir.join(output)))
}

fn assert_close(got: f64, want: f64, tolerance: f64, what: &str) {
    assert!(
        (got - want).abs() <= tolerance * want.abs(),
        "{what}: {got} against {want}"
    );
}

#[test]
fn calibrate_from_runs_recovers_known_parameters() {
    let dir = temp_dir("stack-recover");
    synthetic_fit_set(
        &dir,
        "synthetic",
        &["narayanan2021-table1", "nvidia-dgxc-h100"],
    );
    let (out, p) = calibrate_from_runs(&dir, "runs.yaml", "synthetic.yaml");
    for (param, want) in known() {
        assert_close(p.get(param), want, 0.01, param.name());
    }
    assert!(p.fitted_on("nvidia-dgxc-h100", "llama3.1-8B 8 GPUs"));
    assert!(out.contains("each source left out"), "{out}");
    assert!(out.contains("narayanan2021-table1    10"), "{out}");
    assert!(
        out.contains("left out in turn: mean |error| 0.0 %"),
        "{out}"
    );
}

#[test]
fn three_step_times_of_one_source_fit_with_each_row_left_out() {
    // The user's case: a few step times from one cluster, one parameter.
    let dir = temp_dir("stack-one-source");
    let values = BTreeMap::from([(Param::StepOverhead, 0.4)]);
    synthetic(&dir, "korthikanti2022-table5", &values);
    std::fs::write(
        dir.join("runs.yaml"),
        "name: mine\ndoc: three runs\nparameters: [step_overhead]\nfit_set:\n  \
         - file: korthikanti2022-table5.yaml\n    rows: [22B full, 175B full, 530B full]\n",
    )
    .unwrap();
    let (out, p) = calibrate_from_runs(&dir, "runs.yaml", "mine.yaml");
    assert_close(p.get(Param::StepOverhead), 0.4, 0.001, "step_overhead");
    assert_eq!(p.get(Param::KernelOverhead), 0.0);
    assert!(out.contains("each row left out"), "{out}");
    // `validate --stack` repeats the profile's record of its fit, by row as it was measured.
    let text = stdout(&[
        "validate",
        "--stack",
        dir.join("mine.yaml").to_str().unwrap(),
        dir.join("korthikanti2022-table5.yaml").to_str().unwrap(),
    ]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("  its fit (calibrate")
                && l.contains(": each row left out in turn ")),
        "{text}"
    );
    // A validation file is itself a fit set: every step-time row, every parameter.
    let (whole, w) = calibrate_from_runs(&dir, "korthikanti2022-table5.yaml", "whole.yaml");
    assert!(whole.contains("fitted on 8 rows from 1 source"), "{whole}");
    assert_close(w.get(Param::StepOverhead), 0.4, 0.01, "whole");
}

fn iteration(args: &[&str]) -> f64 {
    common::json(args)["iteration_seconds"].as_f64().unwrap()
}

#[test]
fn a_step_overhead_adds_exactly_its_seconds_and_the_default_is_profile_free() {
    let dir = temp_dir("stack-step");
    std::fs::write(
        dir.join("s.yaml"),
        "name: s\ndoc: one term\nparameters:\n  step_overhead: {value: 0.125}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m.yaml"),
        "name: m\ndoc: one term\nparameters:\n  microbatch_overhead: {value: 0.01}\n",
    )
    .unwrap();
    let base = [
        "timeline",
        "gpt3-1.3b",
        "--tp",
        "2",
        "--dp",
        "4",
        "--microbatches",
        "4",
    ];
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra);
        args.extend(["--format", "json"]);
        iteration(&args)
    };
    let s = dir.join("s.yaml");
    let m = dir.join("m.yaml");
    let free = run(&[]);
    assert_eq!(free, run(&["--stack", "none"]));
    let step = run(&["--stack", s.to_str().unwrap()]);
    assert!((step - free - 0.125).abs() < 1e-9, "{free} → {step}");
    // One pipeline stage, four micro-batches: eight gaps of 10 ms on the critical path.
    let gaps = run(&["--stack", m.to_str().unwrap()]);
    assert!((gaps - free - 0.08).abs() < 1e-9, "{free} → {gaps}");
    // Profile-free by default: no `stack_profile` in the summary, and the table says so; the
    // profile of the strategy's own stack (tp = 2: Megatron's) with `--stack auto`; the one
    // given otherwise.
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["--format", "json"]);
    assert!(common::json(&args).get("stack_profile").is_none());
    let table = common::stdout(&base);
    assert!(
        table.contains("stack profile: none, profile-free"),
        "{table}"
    );
    let mut auto = args.clone();
    auto.extend(["--stack", "auto"]);
    let own = common::json(&auto)["stack_profile"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        own.starts_with("megatron-lm-2021 (") && own.contains("the megatron stack"),
        "{own}"
    );
    args.extend(["--stack", s.to_str().unwrap()]);
    assert!(common::json(&args)["stack_profile"]
        .as_str()
        .unwrap()
        .starts_with("s ("));
}

#[test]
fn bad_profiles_are_refused_at_their_line() {
    let dir = temp_dir("stack-bad");
    let cases = [
        ("unknown-field.yaml", "name: x\ndoc: d\ncolour: red\nparameters: {}\n", ":3:1: unknown field `colour`"),
        (
            "five.yaml",
            "name: x\ndoc: d\nparameters:\n  a: {value: 1}\n  b: {value: 1}\n  c: {value: 1}\n  d: {value: 1}\n  e: {value: 1}\n",
            ":3:1: a profile has at most 4 parameters, this one has 5",
        ),
        (
            "negative.yaml",
            "name: x\ndoc: d\nparameters:\n  step_overhead: {value: -0.5}\n",
            ":4:3: `step_overhead` is seconds and must not be negative",
        ),
        (
            "unknown-param.yaml",
            "name: x\ndoc: d\nparameters:\n  gemm_speed: {value: 0.5}\n",
            ":4:3: unknown parameter `gemm_speed`",
        ),
        (
            "unit.yaml",
            "name: x\ndoc: d\nparameters:\n  kernel_overhead: {value: 5}\n",
            ":4:3: `kernel_overhead` = 5 s is above",
        ),
        (
            "supports-knob.yaml",
            "name: x\ndoc: d\nparameters: {}\nsupports:\n  source: s\n  max:\n    mbs: 1\n",
            ":7:5: unknown knob `mbs` (a stack's limits name dp, tp, pp, cp, ep, zero)",
        ),
        (
            "supports-zero.yaml",
            "name: x\ndoc: d\nparameters: {}\nsupports:\n  source: s\n  max: {zero: 4}\n",
            ":6:9: `zero` = 4: expected 0 to 3",
        ),
        (
            "supports-schedule.yaml",
            "name: x\ndoc: d\nparameters: {}\nsupports:\n  source: s\n  schedules: [1f1b, pipedream]\n",
            ":6:21: unknown value `pipedream` (known: gpipe, 1f1b,",
        ),
        (
            "supports-empty.yaml",
            "name: x\ndoc: d\nparameters: {}\nsupports:\n  source: s\n  precisions: []\n",
            ":6:3: `precisions` lists nothing",
        ),
        (
            "supports-source.yaml",
            "name: x\ndoc: d\nparameters: {}\nsupports:\n  max: {zero: 1}\n",
            ":5:3: supports: missing field `source`",
        ),
    ];
    for (file, text, want) in cases {
        std::fs::write(dir.join(file), text).unwrap();
        let err = refused_in(
            &dir,
            &["timeline", "gpt3-125m", "--dp", "8", "--stack", file],
        );
        assert!(err.contains(&format!("{file}{want}")), "{file}: {err}");
        let err = refused_in(&dir, &["validate", "--stack", file]);
        assert!(err.contains(&format!("{file}{want}")), "{file}: {err}");
    }
    let err = refused_in(
        &dir,
        &[
            "rank",
            "gpt3-125m",
            "--devices",
            "8",
            "--stack",
            "no-such-stack",
        ],
    );
    assert!(
        err.contains("unknown stack profile `no-such-stack`"),
        "{err}"
    );
    // A fit set naming a row that is not there.
    std::fs::write(
        dir.join("runs.yaml"),
        "name: x\ndoc: d\nfit_set:\n  - file: narayanan2021-table1\n    rows: [no such row]\n",
    )
    .unwrap();
    let err = refused_in(
        &dir,
        &["calibrate", "--from-runs", "runs.yaml", "-o", "x.yaml"],
    );
    assert!(err.contains("no row `no such row`"), "{err}");
    // At the row's line of the fit-set file (line 5: `rows: [no such row]`).
    assert!(err.contains("runs.yaml:5:"), "{err}");
}

/// `validate --stack p.yaml` (its table) with a profile `p` of `label` fitted on the shipped file
/// `fit`, written in a directory of its own for test `name`.
fn validate_with_profile(name: &str, label: &str, fit: &str) -> (PathBuf, String) {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("p.yaml"),
        format!(
            "name: p\ndoc: d\nlabel: {label}\nfit_set:\n  - file: {fit}\n\
             parameters:\n  step_overhead: {{value: 0.1}}\n"
        ),
    )
    .unwrap();
    let out = symshard()
        .current_dir(&dir)
        .args(["validate", "--stack", "p.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (dir, text)
}

#[test]
fn validate_reports_fit_and_test_rows_apart() {
    let (dir, text) = validate_with_profile("stack-validate", "megatron", "megatron-v1-dgx2h");
    assert!(text.contains("test rows: mean |error|"), "{text}");
    assert!(text.contains("fit rows: mean |error|"), "{text}");
    assert!(text.contains("  stack profile: p (step_overhead"), "{text}");
    // Files of another stack stay profile-free.
    let json: serde_json::Value = serde_json::from_slice(
        &symshard()
            .current_dir(&dir)
            .args(["validate", "--stack", "p.yaml", "--format", "json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for o in json.as_array().unwrap() {
        let megatron = o["stack"] == "megatron";
        assert_eq!(o.get("stack_profile").is_some(), megatron, "{}", o["name"]);
        let fit = o["name"] == "megatron-v1-dgx2h";
        for r in o["rows"].as_array().unwrap() {
            let want = match (megatron, fit) {
                (false, _) => None,
                (true, true) => Some("fit"),
                (true, false) => Some("test"),
            };
            assert_eq!(r.get("set").and_then(|s| s.as_str()), want);
        }
    }
}

#[test]
fn the_headline_with_a_profile_is_its_test_rows() {
    // Fitted on Megatron-LM v1.0's rows, the headline and the groups leave those rows out and
    // say so: the headline is over the independent rows less the fit rows.
    let (_, text) = validate_with_profile("stack-headline", "megatron", "megatron-v1-dgx2h");
    let headline = text.lines().find(|l| l.starts_with("headline:")).unwrap();
    let fit = text
        .lines()
        .find(|l| l.contains("fit rows: mean |error|"))
        .unwrap();
    let count = |line: &str, after: &str| -> usize {
        let at = line.find(after).unwrap() + after.len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let fitted = count(fit, " over ");
    assert!(fitted > 0, "{fit}");
    assert!(
        headline.contains(&format!(
            "the {fitted} rows a stack profile was fitted on left out (in sample)"
        )),
        "{headline}"
    );
    let free = symshard().args(["validate"]).output().unwrap();
    let free = String::from_utf8_lossy(&free.stdout).into_owned();
    let free = free.lines().find(|l| l.starts_with("headline:")).unwrap();
    assert_eq!(
        count(headline, " over ") + fitted,
        count(free, " over "),
        "{headline}\n{free}"
    );
    assert!(headline.contains("independent test rows"), "{headline}");
    assert!(text.contains("by stack (the software the measurements ran; independent test rows)"));
}

#[test]
fn rows_that_are_not_independent_are_no_test_rows() {
    // The DDP files: flash-attention-training-a100 (5 rows), the two Lambda files (1 each) and
    // the two Dao 2023 Table 1 files (4 each), which share a publication with a100-80gb's
    // attention rates (`independent: false`). Fitted on one Lambda row, the test rows are the
    // other 6 independent ones, not 14.
    let (_, text) = validate_with_profile(
        "stack-independent",
        "pytorch-ddp",
        "lambda-flash-attention-a100",
    );
    let line = |set: &str| {
        text.lines()
            .find(|l| l.contains(&format!("{set} rows: mean |error|")))
            .unwrap_or_default()
    };
    assert!(line("test").contains(" over 6 "), "{text}");
    assert!(line("fit").contains(" over 1 "), "{text}");
}

#[test]
fn every_shipped_profile_loads_and_declares_its_fit_set() {
    for (stem, text) in symshard::embedded::STACKS {
        let src = Source::new(format!("stacks/{stem}.yaml"), *text);
        let p = StackProfile::load(&src).unwrap();
        assert_eq!(&p.name, stem);
        assert!(!p.fit_set.is_empty(), "{stem}: no declared fit set");
        let file: symshard::calib::stack::ProfileFile = src.parse().unwrap();
        let fit = file.fit.expect("a shipped profile states its fit");
        assert!(
            fit.sources >= 2,
            "{stem}: leave-one-source-out needs two sources"
        );
    }
}

#[test]
fn every_shipped_profile_is_what_its_fit_set_gives() {
    // "Never edit a profile's numbers by hand" (stacks/README.md): each stacks/NAME.yaml is
    // byte for byte what `calibrate --from-runs stacks/fit/NAME.yaml` writes today.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = temp_dir("stack-rebuild");
    for (stem, text) in symshard::embedded::STACKS {
        let out = dir.join(format!("{stem}.yaml"));
        let fit = format!("stacks/fit/{stem}.yaml");
        let run = symshard()
            .current_dir(root)
            .args([
                "calibrate",
                "--from-runs",
                &fit,
                "-o",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(run.status.success(), "{fit}: {run:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            *text,
            "stacks/{stem}.yaml is not what its fit set gives"
        );
    }
}

#[test]
fn a_refit_with_fewer_rows_than_parameters_is_called_underdetermined() {
    // Two sources of 8 and 2 rows, three parameters: without the 8-row source two rows are
    // left for three parameters, so that refit is one of many; without the 2-row source, 8
    // remain.
    let dir = temp_dir("stack-underdetermined");
    synthetic_fit_set(
        &dir,
        "two",
        &["korthikanti2022-table5", "megatron-v1-dgx2h"],
    );
    let (out, _) = calibrate_from_runs(&dir, "runs.yaml", "two.yaml");
    let line = |source: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(source) && l.contains(" %"))
            .unwrap_or_else(|| panic!("no left-out row for {source}: {out}"))
            .to_string()
    };
    assert!(
        line("korthikanti2022-table5").contains("(underdetermined: 2 rows for 3 parameters)"),
        "{out}"
    );
    assert!(
        !line("megatron-v1-dgx2h").contains("underdetermined"),
        "{out}"
    );
    assert!(
        out.contains("without korthikanti2022-table5 the rest has fewer rows than parameters"),
        "{out}"
    );
    let file: symshard::calib::stack::ProfileFile = Source::read(&dir.join("two.yaml"))
        .unwrap()
        .parse()
        .unwrap();
    let fit = file.fit.unwrap();
    assert_eq!(fit.underdetermined, ["korthikanti2022-table5"]);
    // `validate` repeats the profile's own record of its fit under its rows.
    let text = String::from_utf8(
        symshard()
            .current_dir(&dir)
            .args(["validate", "--stack", "two.yaml"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let record = text
        .lines()
        .find(|l| l.starts_with("  its fit (calibrate"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        record.contains(&format!(
            "each source left out in turn {:.1} %",
            100.0 * fit.leave_one_out_error.unwrap()
        )),
        "{record}"
    );
    assert!(
        record.ends_with("without korthikanti2022-table5 fewer rows than parameters remain"),
        "{record}"
    );
}
