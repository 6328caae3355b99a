//! A lead smaller than the model's own error is a tie: each ranked row names the software stack
//! it assumes, and `rank --calib` marks the rows behind #1 by less than `validate`'s mean
//! |error| for the two rows' stacks.

mod common;

use common::{json, symshard};
use std::collections::BTreeMap;
use symshard::search::stack::Stack;

/// `validate`'s mean |error| by stack over validation/, in tenths of a percent, over the files
/// independent of their machine's table and the rows not in a profile's fit set; and the
/// number of fit rows left out. Only the stacks a ranked row can assume ([`Stack::ALL`]): the
/// corpus also holds stacks `rank` never prices a row on (MaxText on TPUs).
fn measured(args: &[&str]) -> (BTreeMap<String, u32>, usize) {
    let sources = json(args);
    let mut by_stack: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut fitted = 0;
    for s in sources.as_array().unwrap() {
        if s["independent"] == false {
            continue;
        }
        let stack = s["stack"].as_str().unwrap().to_string();
        if !Stack::ALL.iter().any(|k| k.label() == stack) {
            continue;
        }
        for r in s["rows"].as_array().unwrap() {
            if r["set"] == "fit" {
                fitted += 1;
                continue;
            }
            by_stack
                .entry(stack.clone())
                .or_default()
                .push(r["error"].as_f64().unwrap().abs());
        }
    }
    let permille = by_stack
        .into_iter()
        .map(|(s, e)| {
            (
                s,
                (e.iter().sum::<f64>() / e.len() as f64 * 1000.0).round() as u32,
            )
        })
        .collect();
    (permille, fitted)
}

#[test]
fn the_stack_errors_are_what_validate_measures() {
    // The shipped table must be `validate`'s "by stack" mean |error| over validation/, to the
    // tenth of a percent it prints: over the files independent of their machine's table.
    let (measured, fitted) = measured(&["validate", "--format", "json"]);
    assert_eq!(fitted, 0);
    let shipped: BTreeMap<String, u32> = Stack::ALL
        .iter()
        .map(|s| (s.label().to_string(), s.mean_abs_error_permille()))
        .collect();
    assert_eq!(measured, shipped, "validate now measures these (‰)");
}

#[test]
fn the_profiled_stack_errors_are_what_validate_stack_auto_measures() {
    // With each file priced on its stack's shipped profile, the mean |error| of the rows the
    // profile was not fitted on (every row where the stack has no profile).
    let (measured, fitted) = measured(&["validate", "--stack", "auto", "--format", "json"]);
    // Every shipped profile's fit set is left out: the rows each records fitting
    // (stacks/*.yaml, `fit.rows`), all of them from independent files.
    let declared: usize = symshard::embedded::STACKS
        .iter()
        .map(|(stem, text)| {
            let src = symshard::diag::Source::new(format!("stacks/{stem}.yaml"), *text);
            let file: symshard::calib::stack::ProfileFile = src.parse().unwrap();
            file.fit.expect("a shipped profile states its fit").rows
        })
        .sum();
    assert!(declared > 0);
    assert!(fitted >= declared, "{fitted} fit rows, {declared} declared");
    let shipped: BTreeMap<String, u32> = Stack::ALL
        .iter()
        .map(|s| (s.label().to_string(), s.profiled_mean_abs_error_permille()))
        .collect();
    assert_eq!(
        measured, shipped,
        "validate --stack auto now measures these (‰)"
    );
}

#[test]
fn a_lead_within_the_stacks_error_is_shown_as_a_tie() {
    // Profile-free (the default), compared with `validate`'s own error; each row priced on
    // its stack's profile, with the error `validate --stack auto` measures.
    ties_follow_the_errors(&[], Stack::mean_abs_error);
    ties_follow_the_errors(&["--stack", "auto"], |s| {
        f64::from(s.profiled_mean_abs_error_permille()) / 1000.0
    });
}

fn ties_follow_the_errors(extra: &[&str], error: impl Fn(Stack) -> f64) {
    let mut args = vec![
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--calib",
        "h100-sxm",
        "--top",
        "4",
    ];
    args.extend(extra);
    let mut a = args.clone();
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
            .map(|s| error(Stack::ALL.into_iter().find(|x| x.label() == *s).unwrap()))
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

/// `--stack NAME` times every row on one profile, fitted on runs of one stack: rows that assume
/// another stack are named, and `--stack auto` offered; rows that all assume the profile's stack
/// get no such line, and neither does `--stack auto`.
#[test]
fn a_named_profile_says_which_rows_assume_another_stack() {
    let base = [
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--calib",
        "h100-sxm",
        "--top",
        "5",
    ];
    let with = |extra: &[&str]| {
        let rows = json(&[&base[..], extra, &["--format", "json"]].concat());
        let text = common::stdout(&[&base[..], extra].concat());
        (rows, text)
    };
    let (rows, text) = with(&["--stack", "pytorch-fsdp"]);
    let other: Vec<String> = rows["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["stack"] != "pytorch-fsdp")
        .map(|r| format!("#{}", r["rank"]))
        .collect();
    assert!(!other.is_empty(), "the top 5 all assume FSDP: {text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("stack: --stack pytorch-fsdp is a profile of pytorch-fsdp runs"))
        .unwrap_or_else(|| panic!("no stack line: {text}"));
    assert!(
        line.contains(&format!("{} assume", other.join(", "))),
        "{line}"
    );
    assert!(line.contains("--stack auto"), "{line}");
    // Every row of the ranking on the Megatron profile is a Megatron layout: no line.
    let (_, text) = with(&["--stack", "megatron-lm-2021", "--fix", "zero=1,tp=2"]);
    assert!(!text.lines().any(|l| l.starts_with("stack:")), "{text}");
    let (_, text) = with(&["--stack", "auto"]);
    assert!(!text.lines().any(|l| l.starts_with("stack:")), "{text}");
}
