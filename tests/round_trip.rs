//! What `rank` prints can be run: each row, passed back to `timeline` as its JSON fields
//! (`--schedule none` included, as rank says of a strategy without a pipeline) or as its
//! strategy text (`--strategy "dp=64 tp=1 … zero=3"`), times the same strategy.

mod common;

use common::{json, refused, symshard};
use serde_json::Value;

/// `timeline` flags for a rank row, from its JSON fields alone.
fn flags_of(row: &Value) -> Vec<String> {
    let s = |k: &str| -> String {
        match &row[k] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        }
    };
    let mut a: Vec<String> = Vec::new();
    for (flag, key) in [
        ("--dp", "dp"),
        ("--tp", "tp"),
        ("--pp", "pp"),
        ("--micro-batch-size", "micro_batch_size"),
        ("--schedule", "schedule"),
        ("--chunks", "chunks"),
        ("--zero", "zero"),
        ("--ep", "ep"),
        ("--cp", "cp"),
        ("--precision", "precision"),
    ] {
        a.extend([flag.to_string(), s(key)]);
    }
    // A grouped row (`none|selective`) stands for each of its values; the first is one of them.
    let recompute = s("recompute");
    a.extend([
        "--recompute".into(),
        recompute.split('|').next().unwrap().into(),
    ]);
    if row["sequence_parallel"] == Value::Bool(true) {
        a.push("--sequence-parallel".into());
    }
    let o = &row["overlap"];
    if o["tp-comm"] == Value::Bool(true) {
        a.push("--tp-comm-overlap".into());
    }
    if o["param-gather"] == Value::Bool(true) {
        a.push("--overlap-param-gather".into());
    }
    if o["grad-reduce"] == Value::Bool(false) {
        a.push("--no-overlap-grad-reduce".into());
    }
    a
}

/// The timeline's strategy line (its header after the em dash, up to the machine).
fn timed_strategy(args: &[String]) -> String {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = text.lines().next().unwrap_or_default().to_string();
    head.split(" — ").nth(1).unwrap_or(&head).to_string()
}

#[test]
fn every_row_rank_prints_runs_when_passed_back_to_timeline() {
    for (model, devices, calib, top) in [
        ("llama3-8b", "64", "a100-80gb", "12"),
        ("llama2-7b", "32", "h100-sxm", "8"),
        ("mixtral-8x7b", "256", "h100-sxm", "4"),
        ("gpt3-175b", "1024", "a100-80gb", "4"),
    ] {
        let v = json(&[
            "rank",
            model,
            "--devices",
            devices,
            "--top",
            top,
            "--format",
            "json",
        ]);
        let rows = v["strategies"].as_array().unwrap();
        assert!(!rows.is_empty(), "{model}");
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row["layout"], "annotated", "{model}: {row}");
            let mut a: Vec<String> = vec!["timeline".into(), model.into()];
            a.extend(flags_of(row));
            a.extend(["--calib".into(), calib.into()]);
            let by_fields = timed_strategy(&a);
            if i < 3 {
                // The strategy text as printed, pasted as it is.
                let text = row["strategy"].as_str().unwrap();
                let b: Vec<String> = vec![
                    "timeline".into(),
                    model.into(),
                    "--strategy".into(),
                    text.into(),
                    "--calib".into(),
                    calib.into(),
                ];
                assert_eq!(timed_strategy(&b), by_fields, "{model}: {text}");
            }
        }
    }
}

#[test]
fn schedule_none_is_refused_with_a_pipeline() {
    let e = refused(&[
        "timeline",
        "llama3-8b",
        "--dp",
        "32",
        "--pp",
        "2",
        "--micro-batch-size",
        "1",
        "--schedule",
        "none",
    ]);
    assert!(e.contains("no pipeline") && e.contains("pp is 2"), "{e}");
    let e = refused(&[
        "timeline",
        "llama3-8b",
        "--strategy",
        "dp=32,pp=2,mbs=1,schedule=none",
    ]);
    assert!(e.contains("no pipeline"), "{e}");
}
