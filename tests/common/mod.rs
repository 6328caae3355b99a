//! Helpers shared by the data-driven test harnesses.

#![allow(dead_code)]

use assert_cmd::Command;
use libtest_mimic::Failed;
use serde_json::Value;
use std::path::{Path, PathBuf};
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::Knobs;
use symshard::sym::Rational;
use symshard::timeline::{plan_strategy, TimingPlan};

/// The `*.yaml` files of `dir`, sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

/// Checks `text` against the snapshot `tests/snapshots/NAME.snap`, as a trial result.
pub fn snapshot(name: &str, text: String) -> Result<(), Failed> {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        settings.bind(|| insta::assert_snapshot!(name.to_string(), text));
    }));
    result.map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "snapshot mismatch".into());
        Failed::from(msg)
    })
}

/// The command line under test.
pub fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

/// `rank MODEL --devices DEVICES --calib h100-sxm --fix FIX --top 1 --emit megatron`, which must
/// succeed: its standard output (the table and the emitted arguments).
#[allow(dead_code)]
pub fn emit_megatron(model: &str, devices: u64, fix: &str) -> String {
    let n = devices.to_string();
    let args = ["--devices", &n, "--calib", "h100-sxm", "--fix", fix];
    stdout(
        &[
            &["rank", model][..],
            &args,
            &["--top", "1", "--emit", "megatron"],
        ]
        .concat(),
    )
}

/// `rank MODEL --devices DEVICES --fix FIX --top 20` (FIX turning on the expert-parallel knob
/// `key`): the knob is on exactly in the rows with ep > 1, a row says so with `word` in its
/// strategy, and that strategy passed back to `cost` keeps it. Returns `cost`'s JSON.
#[allow(dead_code)]
pub fn expert_knob_passes_back(
    model: &str,
    devices: u64,
    fix: &str,
    key: &str,
    word: &str,
) -> Value {
    let rows = ranked_rows(model, devices, fix, 20);
    for r in &rows {
        let ep = r["ep"].as_u64().unwrap();
        let on = r[key].as_bool().unwrap_or(false);
        assert_eq!(on, ep > 1, "{r}");
    }
    let row = rows
        .iter()
        .find(|r| r[key].as_bool() == Some(true))
        .unwrap_or_else(|| panic!("a row with {key}"));
    let strategy = row["strategy"].as_str().unwrap();
    assert!(strategy.contains(word), "{strategy}");
    let back = cost_json(model, strategy);
    assert!(
        back["per_device"]["strategy"]
            .as_str()
            .unwrap()
            .contains(word),
        "{back}"
    );
    back
}

/// `cost MODEL --strategy STRATEGY --calib h100-sxm --format json`, which must succeed: a
/// ranked row's strategy passed back as it was printed.
#[allow(dead_code)]
pub fn cost_json(model: &str, strategy: &str) -> Value {
    json(&[
        "cost",
        model,
        "--strategy",
        strategy,
        "--calib",
        "h100-sxm",
        "--format",
        "json",
    ])
}

/// `rank MODEL --devices DEVICES --calib h100-sxm --fix FIX --top TOP --format json`: its rows.
#[allow(dead_code)]
pub fn ranked_rows(model: &str, devices: u64, fix: &str, top: u64) -> Vec<Value> {
    ranked_rows_with(model, devices, top, &["--fix", fix])
}

/// `rank MODEL --devices DEVICES --calib h100-sxm --top TOP --format json` with `extra`
/// arguments: its rows (at least one).
#[allow(dead_code)]
pub fn ranked_rows_with(model: &str, devices: u64, top: u64, extra: &[&str]) -> Vec<Value> {
    let (n, top) = (devices.to_string(), top.to_string());
    let mut args = vec![
        "rank",
        model,
        "--devices",
        &n,
        "--calib",
        "h100-sxm",
        "--top",
        &top,
        "--format",
        "json",
    ];
    args.extend(extra);
    let v = json(&args);
    let rows = v["strategies"].as_array().unwrap().clone();
    assert!(!rows.is_empty(), "{model} {extra:?}: no row");
    rows
}

/// `cost ARGS --format json`: each stage's activation bytes, exact.
#[allow(dead_code)]
pub fn stage_activations(args: &[&str]) -> Vec<Rational> {
    let mut all = vec!["cost"];
    all.extend(args);
    all.extend(["--format", "json"]);
    json(&all)["per_device"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["memory"]["activations"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// Runs a command that must succeed and returns its standard output as JSON.
pub fn json(args: &[&str]) -> Value {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs a command that must succeed and returns its standard output.
pub fn stdout(args: &[&str]) -> String {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must be refused with exit code 2 and returns its stderr.
pub fn refused(args: &[&str]) -> String {
    let out = symshard().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?} should be refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `symshard ARGS…` in `dir`; it must be refused with exit code 2. Returns its stderr.
pub fn refused_in(dir: &Path, args: &[&str]) -> String {
    let out = symshard().current_dir(dir).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?} should be refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `symshard validate` on a file of one row (gpt3-125m, dp 8, on a100-80gb) whose line 8 is
/// `field` (one YAML line such as `loss: half`), in a directory of its own for test `name`: it
/// must be refused with exit code 2. Returns its stderr.
pub fn refused_validation_row(name: &str, field: &str) -> String {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("v.yaml"),
        format!(
            "source: test\nmachine: a100-80gb\nsettings: none\nbound: 0.9\nruns:\n  - name: s\n    \
             model: gpt3-125m\n    {field}\n    strategy: {{dp: 8}}\n    published: 1\n"
        ),
    )
    .unwrap();
    refused_in(&dir, &["validate", "v.yaml"])
}

/// An empty directory of its own for test `name`, under the system's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("symshard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `symshard COMMAND FILE ARGS…` (`args` = `[COMMAND, ARGS…]`) in `dir`; it must succeed.
/// Returns its standard output.
pub fn run_on_file(dir: &Path, file: &str, args: &[&str]) -> String {
    let out = symshard()
        .current_dir(dir)
        .arg(args[0])
        .arg(file)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The timing plan of shipped model `model`, with the symbols `set` replacing its values, under
/// `knobs` (the layout's sequence parallelism following the knob's) on the shipped table
/// `machine`, and that table.
pub fn plan_on(
    model: &str,
    set: &[(&str, i64)],
    knobs: &Knobs,
    machine: &str,
) -> (TimingPlan, Calibration) {
    plan_with_loader(
        &ModelLoader::embedded().unwrap(),
        model,
        set,
        knobs,
        machine,
    )
}

/// The exact evaluation of `knobs` on `model` with the symbols `set`, on `machine`'s table
/// with 8 devices per node and memory that never binds (1 EB per device).
#[allow(dead_code)]
pub fn evaluate_on(
    model: &str,
    set: &[(&str, i64)],
    knobs: &Knobs,
    machine: &str,
) -> symshard::parallel::Evaluation {
    let (m, values) = model_with(&ModelLoader::embedded().unwrap(), model, set);
    let calib = Calibration::resolve(machine).unwrap();
    let memory = Rational::from_integer(1_000_000_000_000_000u64.into());
    symshard::parallel::evaluate_strategy(
        &m,
        &values,
        knobs,
        &Layout::default(),
        MachineRef::new(&calib, 8, &memory),
    )
    .unwrap()
    .1
}

/// Model `model` as `loader` builds it, with its symbol values and those of `set` over them.
fn model_with(
    loader: &ModelLoader,
    model: &str,
    set: &[(&str, i64)],
) -> (symshard::model::Model, symshard::sym::Bindings) {
    let m = loader.resolve(model).unwrap();
    let mut values = m.values.clone();
    for (k, v) in set {
        values.insert(k.to_string(), Rational::from_integer((*v).into()));
    }
    (m, values)
}

/// [`plan_on`] with the model built by `loader` (an attention or loss mode of its own).
pub fn plan_with_loader(
    loader: &ModelLoader,
    model: &str,
    set: &[(&str, i64)],
    knobs: &Knobs,
    machine: &str,
) -> (TimingPlan, Calibration) {
    let (m, values) = model_with(loader, model, set);
    let calib = Calibration::resolve(machine).unwrap();
    let layout = Layout {
        sequence_parallel: knobs.sequence_parallel,
        ..Layout::default()
    };
    let (plan, _) = plan_strategy(
        &m,
        &values,
        knobs,
        &layout,
        MachineRef::of(&calib, &calib.memory_bytes()),
    )
    .unwrap();
    (plan, calib)
}

/// Every calibration table the repository ships (the README lists them).
pub const SHIPPED_TABLES: &[&str] = &[
    "dgx-h100",
    "v100-dgx1",
    "v100-dgx2h",
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-sxm-te",
    "h200-sxm",
    "a40-pcie",
    "h800",
    "b200",
    "mi300x",
    "mi325x",
    "mi355x",
    "gaudi3",
    "gb200-nvl72",
    "gb300-nvl72",
    "tpu-v5p",
    "tpu-v6e",
];

/// A GPT-style layer's linear layers as GEMMs `[rows, inner, cols]` (x[rows, inner] ·
/// w[inner, cols]) for `tokens` tokens of width `h`: the q, k and v projections (one input,
/// three weights of h × h), the attention's output projection, the MLP's two layers (h × 4h,
/// 4h × h; Radford et al. 2019; Vaswani et al. 2017 §3).
pub fn layer_gemms(tokens: i64, h: i64) -> [[i64; 3]; 6] {
    let t = tokens;
    [
        [t, h, h],
        [t, h, h],
        [t, h, h],
        [t, h, h],
        [t, h, 4 * h],
        [t, 4 * h, h],
    ]
}

/// The distinct inputs of those linear layers, in elements: the q, k and v projections read one
/// tensor (one cast), the output projection and the MLP's two layers one each.
pub fn layer_inputs(tokens: i64, h: i64) -> i64 {
    3 * tokens * h + tokens * 4 * h
}

/// Weights of those linear layers: 4h² in attention, 8h² in the MLP.
pub fn layer_weights(h: i64) -> i64 {
    layer_gemms(1, h).iter().map(|[_, k, n]| k * n).sum()
}

/// A Mixtral shape with 64 experts (E = 64, B = 1,152) at ep = 64, tp = cp = 1 on 576 GB200 NVL72
/// GPUs: 8 full racks of 72, where 7 of the 9 expert groups straddle two racks, or 64 of each of
/// 9 racks. The arguments after the command.
#[allow(dead_code)]
pub const EXPERTS_ON_NVL72: [&str; 11] = [
    "mixtral-8x7b",
    "--set",
    "E=64",
    "--set",
    "B=1152",
    "--devices",
    "576",
    "--calib",
    "gb200-nvl72",
    "--fix",
    "ep=64,tp=1,cp=1",
];

/// Seconds, on device 0 of `plan` timed on `calib`, that an expert all-to-all of one
/// micro-batch runs while the device computes another micro-batch (DualPipe's and DualPipeV's
/// F&B chunks hide one under the other; under 1F1B and ZB-V nothing runs under it).
#[allow(dead_code)]
pub fn all_to_all_under_other_compute(plan: &TimingPlan, calib: &Calibration) -> f64 {
    use symshard::timeline::{time_plan, Event, Stream};
    let tl = time_plan(plan, calib).unwrap();
    let on0 = |s: Stream| -> Vec<&Event> {
        tl.sim
            .events
            .iter()
            .filter(|e| e.device == 0 && e.stream == s && e.microbatch.is_some())
            .collect()
    };
    let (a2a, compute) = (on0(Stream::EpComm), on0(Stream::Compute));
    assert!(!a2a.is_empty(), "no expert all-to-all");
    let mut hidden = 0.0;
    for e in &a2a {
        for c in &compute {
            if c.microbatch != e.microbatch {
                hidden += (c.end().min(e.end()) - c.start.max(e.start)).max(0.0);
            }
        }
    }
    hidden
}
