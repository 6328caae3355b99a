//! A lead smaller than the model's own error is a tie: each ranked row names the software stack
//! it assumes, and `rank --calib` marks the rows behind #1 by less than `validate`'s mean
//! |error| for the two rows' stacks.

mod common;

use common::{json, symshard};
use std::collections::BTreeMap;
use symshard::search::stack::Stack;

#[test]
fn the_stack_errors_are_what_validate_measures() {
    // The shipped table must be `validate`'s "by stack" mean |error| over validation/, to the
    // tenth of a percent it prints: over the files independent of their machine's table.
    let sources = json(&["validate", "--format", "json"]);
    let mut by_stack: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in sources.as_array().unwrap() {
        if s["independent"] == false {
            continue;
        }
        let stack = s["stack"].as_str().unwrap().to_string();
        for r in s["rows"].as_array().unwrap() {
            by_stack
                .entry(stack.clone())
                .or_default()
                .push(r["error"].as_f64().unwrap().abs());
        }
    }
    for stack in Stack::ALL {
        let errors = &by_stack[stack.label()];
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        assert_eq!(
            (mean * 1000.0).round() as u32,
            stack.mean_abs_error_permille(),
            "{}: validate now measures {:.1} %",
            stack.label(),
            mean * 100.0
        );
    }
    assert_eq!(by_stack.len(), Stack::ALL.len(), "{:?}", by_stack.keys());
}

#[test]
fn a_lead_within_the_stacks_error_is_shown_as_a_tie() {
    let args = [
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--calib",
        "h100-sxm",
        "--top",
        "4",
    ];
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let v = json(&a);
    let rows = v["strategies"].as_array().unwrap();
    let first = rows[0]["iteration_seconds"].as_f64().unwrap();
    let mut ties = 0;
    for r in rows {
        let stack = r["stack"].as_str().unwrap();
        let zero = r["zero"].as_u64().unwrap();
        let model_parallel = ["tp", "pp", "cp", "ep"]
            .iter()
            .any(|k| r[*k].as_u64().unwrap() > 1);
        let expected = match (zero >= 2, model_parallel) {
            (true, _) => "pytorch-fsdp",
            (false, true) => "megatron",
            (false, false) => "pytorch-ddp",
        };
        assert_eq!(stack, expected, "{r}");
        let behind = r["iteration_seconds"].as_f64().unwrap() / first - 1.0;
        let worse = [rows[0]["stack"].as_str().unwrap(), stack]
            .iter()
            .map(|s| {
                Stack::ALL
                    .into_iter()
                    .find(|x| x.label() == *s)
                    .unwrap()
                    .mean_abs_error()
            })
            .fold(0.0, f64::max);
        let tied = r.get("tie").is_some();
        assert_eq!(
            tied,
            r["rank"] != 1 && behind < worse,
            "{r}: {behind} behind, error {worse}"
        );
        ties += usize::from(tied);
    }
    assert!(
        ties > 0,
        "llama3-8b's top rows are within 1 % of each other"
    );
    let out = symshard().args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("ties: #2")), "{text}");
}

#[test]
fn ranking_by_relative_cost_marks_no_ties() {
    let v = json(&[
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    for r in v["strategies"].as_array().unwrap() {
        assert!(r.get("tie").is_none(), "{r}");
        assert!(r["stack"].is_string(), "{r}");
    }
}
