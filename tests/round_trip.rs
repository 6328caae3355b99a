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

/// The schedule word of a strategy text (`dp=64 tp=1 pp=1 mbs=1 none sp=off …`): the one item
/// that is not `KNOB=VALUE`, its chunks (`(v=2)`) left off.
fn schedule_word(strategy: &str) -> String {
    let words: Vec<&str> = strategy
        .split_whitespace()
        .filter(|w| !w.contains('=') || w.contains("(v="))
        .collect();
    assert_eq!(words.len(), 1, "one schedule word in `{strategy}`");
    words[0].split('(').next().unwrap().to_string()
}

#[test]
fn a_strategy_without_a_pipeline_names_its_schedule_none_everywhere() {
    let rank = [
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--fix",
        "tp=1,pp=1,zero=3",
        "--top",
        "1",
        "--emit",
        "torchtitan",
    ];
    // JSON: the `schedule` field, the strategy text, and the emitted torchtitan config's
    // description of the same row.
    let v = json(&[&rank[..], &["--format", "json"]].concat());
    let row = &v["strategies"][0];
    assert_eq!(row["pp"], 1, "{row}");
    assert_eq!(row["schedule"], "none", "{row}");
    let text = row["strategy"].as_str().unwrap();
    assert_eq!(schedule_word(text), "none", "{text}");
    assert!(!text.contains("1f1b"), "{text}");
    assert_eq!(v["emitted"]["strategy"], text);
    let toml = v["emitted"]["toml"].as_str().unwrap();
    let description = format!("description = \"llama3-8b {text}\"");
    assert!(toml.contains(&description), "{description}\n{toml}");
    // The rank table's schedule column and the emitted config printed under it.
    let table = common::stdout(&rank);
    let mut lines = table.lines();
    let head: Vec<&str> = lines
        .by_ref()
        .find(|l| l.starts_with("rank "))
        .unwrap_or_else(|| panic!("{table}"))
        .split_whitespace()
        .collect();
    let column = head.iter().position(|h| *h == "schedule").unwrap();
    let first: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!((first[0], first[3]), ("1", "1"), "{table}");
    assert_eq!(first[column], "none", "{table}");
    assert!(table.contains(&description), "{description}\n{table}");
    // The timeline header of the row passed back, as its text and as its fields.
    for args in [
        vec!["timeline", "llama3-8b", "--strategy", text],
        vec![
            "timeline",
            "llama3-8b",
            "--dp",
            "64",
            "--pp",
            "1",
            "--micro-batch-size",
            "1",
            "--schedule",
            "none",
            "--zero",
            "3",
        ],
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let timed = timed_strategy(&args);
        // Up to the machine (`… zero=3 on dgx-h100 (64 devices, …)`).
        let knobs = timed.split(" on ").next().unwrap();
        assert_eq!(schedule_word(knobs), "none", "{args:?}: {timed}");
    }
}
