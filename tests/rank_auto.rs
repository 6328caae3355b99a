//! Auto-sharding inside `rank`: for each tensor-parallel degree the layout the per-operator
//! search finds is priced next to the annotated one, with the same knobs, memory and
//! redistribution rules. On the GPT and Llama families it costs no more than the annotated
//! Megatron-LM layout; on a GPT graph without annotations it gives real tensor parallelism at
//! no more than the annotated family's cost; JSON carries its placements and the table marks
//! which layout a row uses.

mod common;
use common::{json, symshard};
use serde_json::Value;
use std::str::FromStr;
use symshard::sym::Rational;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/auto/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `rank ARGS --format json`, which must succeed.
fn rank_json(args: &[&str]) -> Value {
    let mut all = vec!["rank"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    json(&all)
}

fn rational(v: &Value) -> Rational {
    Rational::from_str(v.as_str().unwrap()).unwrap()
}

/// The exact cost of the top row of `rank model --fix knobs --layouts which`, and its layout.
fn top(model: &str, sets: &[&str], devices: &str, knobs: &str, which: &str) -> (Rational, String) {
    let mut args = vec![
        model,
        "--devices",
        devices,
        "--fix",
        knobs,
        "--layouts",
        which,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    args.extend(["--top", "1"]);
    let v = rank_json(&args);
    let r = &v["strategies"][0];
    (
        rational(&r["relative_cost"]),
        r["layout"].as_str().unwrap().to_string(),
    )
}

/// At every degree and with sequence parallelism on and off, the auto layout costs no more than
/// the annotated (Megatron-LM) layout with the same knobs; on GPT-3 it is strictly cheaper
/// somewhere (the search finds a better layout than the annotations).
#[test]
fn auto_costs_no_more_than_megatron_on_gpt_and_llama() {
    for (model, sets) in [
        ("gpt3-1.3b", vec!["L=2", "B=16", "S=2048"]),
        ("llama3-8b", vec!["L=2", "B=16", "S=4096"]),
    ] {
        let mut cheaper = false;
        for tp in [2, 4] {
            for sp in ["off", "on"] {
                let knobs = format!("tp={tp},pp=1,mbs=1,recompute=none,zero=1,sp={sp}");
                let (ann, kind) = top(model, &sets, "8", &knobs, "annotated");
                assert_eq!(kind, "annotated");
                let (auto, kind) = top(model, &sets, "8", &knobs, "auto");
                assert_eq!(kind, "auto", "{model} {knobs}");
                assert!(
                    auto <= ann,
                    "{model} {knobs}: auto {auto} > annotated {ann}"
                );
                cheaper |= auto < ann;
                // Both together: the cheaper of the two comes first.
                let (both, _) = top(model, &sets, "8", &knobs, "both");
                assert_eq!(both, auto.clone().min(ann), "{model} {knobs}");
            }
        }
        if model.starts_with("gpt3") {
            assert!(cheaper, "{model}: the search never beat the annotations");
        }
    }
}

/// GPT-2's graph without annotations: the annotated layout replicates every operator, the auto
/// layout splits features; its rows cost no more than the annotated gpt2-124m (Megatron-LM) at
/// the same knobs, and far less than replication.
#[test]
fn unannotated_gpt2_gets_tensor_parallelism() {
    let plain = fixture("gpt2-unannotated");
    for tp in [2, 4] {
        let knobs = format!("tp={tp},pp=1,mbs=4,recompute=none,zero=0,sp=off");
        let (auto, kind) = top(&plain, &[], "8", &knobs, "auto");
        assert_eq!(kind, "auto");
        let (replicated, _) = top(&plain, &[], "8", &knobs, "annotated");
        let (megatron, _) = top("gpt2-124m", &[], "8", &knobs, "annotated");
        assert!(
            auto <= megatron,
            "tp {tp}: auto {auto} > Megatron {megatron}"
        );
        // Within 2 % of Megatron-LM: the search's layout is Megatron's but for where it keeps
        // the residual stream.
        let gap = (&megatron - &auto) / &megatron;
        assert!(gap < Rational::new(2.into(), 100.into()), "tp {tp}: {gap}");
        assert!(auto < replicated, "tp {tp}");
    }
    // Both layouts searched together: at tp = 4 without sequence parallelism the auto layout
    // leads.
    let v = rank_json(&[
        &plain,
        "--devices",
        "8",
        "--top",
        "3",
        "--fix",
        "tp=4,sp=off",
    ]);
    let rows = v["strategies"].as_array().unwrap();
    assert_eq!(rows[0]["layout"], "auto", "{rows:#?}");
}

/// `--format json` gives every auto row its per-operator placements (every operator of the
/// model, an index or `none`) and how they were found; annotated rows have none. The table
/// marks the layout of each row and explains the column.
#[test]
fn json_carries_placements_and_table_marks_layouts() {
    let base = [
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--fix",
        "tp=4,pp=1,sp=off",
    ];
    let mut args = base.to_vec();
    args.extend(["--top", "40", "--layouts", "both"]);
    let v = rank_json(&args);
    let rows = v["strategies"].as_array().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for r in rows {
        let kind = r["layout"].as_str().unwrap();
        kinds.insert(kind.to_string());
        match kind {
            "auto" => {
                let p = r["placements"].as_object().unwrap();
                for op in ["q_proj", "fc_in", "fc_out", "ln1", "wte", "lm_head"] {
                    assert!(p.contains_key(op), "{op} missing from {p:?}");
                }
                assert!(p.values().any(|x| x != "none"));
                assert_eq!(r["layout_search"], "exact");
            }
            "annotated" => assert!(r.get("placements").is_none()),
            k => panic!("layout {k}"),
        }
    }
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(v["auto_layouts"][0]["tp"], 4);
    // --emit json: the top row's analysis under its own layout.
    let mut e = base.to_vec();
    e.extend(["--emit", "json", "--top", "1", "--layouts", "auto"]);
    let v = rank_json(&e);
    assert_eq!(v["strategies"][0]["layout"], "auto");
    let text = v["emitted"].to_string();
    let p = v["strategies"][0]["placements"].as_object().unwrap();
    assert!(text.contains("\"tp\""), "{text}");
    assert!(!p.is_empty());
    // The table: a layout column, the legend.
    let out = symshard().arg("rank").args(&args).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let head = text.lines().find(|l| l.starts_with("rank")).unwrap();
    assert!(head.contains(" layout "), "{head}");
    assert!(
        text.contains("  auto  ") || text.contains(" auto "),
        "{text}"
    );
    assert!(text.contains("annotated"), "{text}");
    assert!(
        text.contains("layout: the tensor-parallel layout"),
        "{text}"
    );
    assert!(text.contains("auto layouts ("), "{text}");
}

/// `--layouts annotated` prices what `rank` priced before: no auto row and no search; an
/// unknown value is a usage error (exit code 2).
#[test]
fn layouts_flag() {
    let v = rank_json(&[
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--layouts",
        "annotated",
        "--top",
        "20",
    ]);
    for r in v["strategies"].as_array().unwrap() {
        assert_eq!(r["layout"], "annotated");
    }
    assert!(v.get("auto_layouts").is_none());
    let both = rank_json(&[
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--top",
        "20",
        "--layouts",
        "both",
    ]);
    assert!(
        both["evaluated"].as_u64().unwrap() > v["evaluated"].as_u64().unwrap(),
        "both layouts price more strategies"
    );
    symshard()
        .args([
            "rank",
            "gpt3-125m",
            "--devices",
            "8",
            "--layouts",
            "megatron",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--layouts"));
}
