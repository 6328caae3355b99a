//! A synchronous step runs at the pace of its slowest device: the timeline multiplies compute
//! by the expected slowest of the job's devices when the table gives a `pace_spread`.

use assert_cmd::Command;
use symshard::calib::{Calibration, MachineRef};
use symshard::diag::Source;
use symshard::machine::slowest_pace;
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::Knobs;
use symshard::sym::Rational;
use symshard::timeline::{plan_strategy, time_summary, Summary};

const A100: &str = include_str!("../calibration/a100-80gb.yaml");

/// The A100 table with its `pace_spread` line replaced by `line` (removed when empty).
fn a100_with(line: &str) -> String {
    let start = A100
        .find("  pace_spread:")
        .expect("the A100 table gives a pace_spread");
    let end = start + A100[start..].find('\n').unwrap() + 1;
    format!("{}{}{}", &A100[..start], line, &A100[end..])
}

/// gpt3-125m under `k` with `batch` sequences, timed on `calib`.
fn time(calib: &Calibration, k: &Knobs, batch: i64) -> Summary {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-125m")
        .unwrap();
    let mut values = m.values.clone();
    values.insert("B".into(), Rational::from_integer(batch.into()));
    let (p, _) =
        plan_strategy(&m, &values, k, &Layout::default(), MachineRef::whole(calib)).unwrap();
    time_summary(&p, calib).unwrap()
}

#[test]
fn one_device_runs_at_the_median_pace() {
    let with = Calibration::load(&Source::new("a100-80gb.yaml", A100)).unwrap();
    let without = Calibration::load(&Source::new("flat.yaml", a100_with(""))).unwrap();
    let (a, b) = (
        time(&with, &Knobs::data_parallel(1), 8),
        time(&without, &Knobs::data_parallel(1), 8),
    );
    assert_eq!(a.slowest_device_pace, 1.0);
    assert_eq!(a.iteration_seconds, b.iteration_seconds);
}

/// Data parallelism at a fixed per-device batch: every device does the same work, so without a
/// spread the step barely changes with the device count (the gradient all-reduce grows), and
/// with one the compute part grows by exactly the slowest device's pace.
#[test]
fn the_step_slows_with_the_slowest_of_more_devices() {
    let with = Calibration::load(&Source::new("a100-80gb.yaml", A100)).unwrap();
    let without = Calibration::load(&Source::new("flat.yaml", a100_with(""))).unwrap();
    let spread = 0.0148;
    let mut last = 1.0;
    for dp in [2, 8, 64] {
        let k = Knobs::data_parallel(dp);
        let (a, b) = (
            time(&with, &k, 4 * dp as i64),
            time(&without, &k, 4 * dp as i64),
        );
        assert_eq!(b.slowest_device_pace, 1.0);
        assert!((a.slowest_device_pace - slowest_pace(spread, dp)).abs() < 1e-12);
        assert!(
            a.slowest_device_pace > last,
            "dp {dp}: the pace grows with the devices"
        );
        last = a.slowest_device_pace;
        assert!(a.iteration_seconds > b.iteration_seconds, "dp {dp}");
        // Only compute is slowed: the step grows by less than the pace itself.
        assert!(a.iteration_seconds < b.iteration_seconds * a.slowest_device_pace);
    }
}

/// A spread beyond any published measurement is refused with the file, the line and the field.
#[test]
fn an_absurd_spread_is_refused_with_its_place() {
    for bad in ["0.5", "-0.01"] {
        let text = a100_with(&format!("  pace_spread: {{value: {bad}, source: x}}\n"));
        let line = text
            .lines()
            .position(|l| l.contains("pace_spread"))
            .unwrap()
            + 1;
        let e = Calibration::load(&Source::new("spread.yaml", text))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pace_spread") && e.contains("spread.yaml"),
            "{e}"
        );
        assert!(e.contains(&format!(":{line}")), "line {line} not in {e}");
    }
}

/// The command line says how much the slowest device slowed compute, and not on one device.
#[test]
fn the_timeline_names_the_slowest_device() {
    let run = |args: &[&str]| {
        let out = Command::cargo_bin("symshard")
            .unwrap()
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let many = run(&[
        "timeline",
        "gpt3-125m",
        "--dp",
        "16",
        "--calib",
        "a100-80gb",
        "--set",
        "B=64",
    ]);
    let want = format!("compute × {:.4}", slowest_pace(0.0148, 16));
    assert!(
        many.contains("slowest device") && many.contains(&want),
        "{many}"
    );
    let one = run(&[
        "timeline",
        "gpt3-125m",
        "--calib",
        "a100-80gb",
        "--set",
        "B=4",
    ]);
    assert!(!one.contains("slowest device"), "{one}");
}

/// `--with device.pace_spread=` asks what a cluster of more or less even devices would do; a
/// spread out of range is refused.
#[test]
fn a_what_if_spread_replaces_the_tables() {
    let run = |with: &str| {
        Command::cargo_bin("symshard")
            .unwrap()
            .args(["timeline", "gpt3-125m", "--dp", "16", "--set", "B=64"])
            .args(["--calib", "a100-80gb", "--with", with])
            .output()
            .unwrap()
    };
    let even = run("device.pace_spread=0");
    assert!(even.status.success());
    assert!(!String::from_utf8_lossy(&even.stdout).contains("slowest device"));
    let wide = run("device.pace_spread=3%");
    let text = String::from_utf8_lossy(&wide.stdout);
    let want = format!("compute × {:.4}", slowest_pace(0.03, 16));
    assert!(wide.status.success() && text.contains(&want), "{text}");
    let absurd = run("device.pace_spread=0.5");
    let e = String::from_utf8_lossy(&absurd.stderr);
    assert!(!absurd.status.success() && e.contains("0 to 0.2"), "{e}");
}
