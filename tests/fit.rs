//! One definition of "fits": `cost`, `timeline` and `compare` judge a strategy against the
//! device memory less the headroom `rank` keeps (10 % of the table's capacity by default,
//! `--headroom` to change; a `--memory` given is all usable), so a row `rank` refuses is not
//! called fitting elsewhere.

mod common;

use common::json;

/// GPT-3 175B on 1024 A100 80 GB: 76.8 GB on its fullest device (symshard's own count), inside
/// the 80 GB capacity and beyond the 72 GB left after the default 10 % headroom.
const STRATEGY: [&str; 12] = [
    "--tp",
    "8",
    "--pp",
    "8",
    "--dp",
    "16",
    "--micro-batch-size",
    "1",
    "--recompute",
    "selective",
    "--calib",
    "a100-80gb",
];

fn run(command: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![command, "gpt3-175b"];
    args.extend(STRATEGY);
    args.extend(extra);
    args.extend(["--format", "json"]);
    json(&args)
}

#[test]
fn cost_and_timeline_judge_fit_as_rank_does() {
    let cost = |extra: &[&str]| run("cost", extra)["per_device"]["feasible"].clone();
    let timeline = |extra: &[&str]| run("timeline", extra);
    let need = timeline(&[])["memory_per_device"].as_f64().unwrap();
    assert!(need > 72e9 && need < 80e9, "{need}");
    // The default headroom: rank's memory limit on this table, and the others' too.
    let rank = json(&[
        "rank",
        "gpt3-175b",
        "--devices",
        "1024",
        "--calib",
        "a100-80gb",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(rank["memory_limit"], "72000000000");
    assert_eq!(cost(&[]), false);
    assert_eq!(
        run("cost", &[])["per_device"]["memory_limit"],
        "72000000000"
    );
    let t = timeline(&[]);
    assert_eq!(t["fits"], false);
    assert_eq!(t["memory_limit"].as_f64(), Some(72e9));
    // No headroom: the whole 80 GB, and it fits.
    assert_eq!(cost(&["--headroom", "0%"]), true);
    assert_eq!(timeline(&["--headroom", "0%"])["fits"], true);
    // A memory given is what the user has: all of it usable unless a headroom is given too.
    assert_eq!(cost(&["--memory", "80GB"]), true);
    assert_eq!(cost(&["--memory", "80GB", "--headroom", "8GB"]), false);
    assert_eq!(timeline(&["--headroom", "3GB"])["fits"], true);
    assert_eq!(timeline(&["--headroom", "4GB"])["fits"], false);
}

#[test]
fn compare_judges_fit_as_rank_does() {
    let args = |extra: &[&str]| {
        let mut a = vec![
            "compare",
            "gpt3-175b",
            "dp=16,tp=8,pp=8,mbs=1,recompute=selective",
            "dp=16,tp=8,pp=8,mbs=1,recompute=full",
            "--calib",
            "a100-80gb",
            "--format",
            "json",
        ];
        a.extend(extra);
        json(&a)
    };
    let feasible = |v: &serde_json::Value| v["a"]["fits"].clone();
    assert_eq!(feasible(&args(&[])), false, "{}", args(&[]));
    assert_eq!(feasible(&args(&["--headroom", "0%"])), true);
}

#[test]
fn a_bad_headroom_is_refused() {
    for bad in ["100%", "-5%", "80GB", "lots"] {
        let flag = format!("--headroom={bad}");
        let mut args = vec!["cost", "gpt3-175b"];
        args.extend(STRATEGY);
        args.push(&flag);
        let out = common::symshard().args(&args).output().unwrap();
        assert!(!out.status.success(), "{bad}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("headroom") || e.contains(bad), "{bad}: {e}");
    }
}
