//! The uses of the engine: proofs of every shipped rule's split table, and sequence parallelism
//! found on a GPT layer.

use super::rules;
use egg::{EGraph, RecExpr};
use std::collections::BTreeSet;
use std::time::Instant;
use symshard::model::ModelLoader;
use symshard::rewrite::laws::law_rewrites;
use symshard::rewrite::{
    block_analysis, block_program, explain_why, optimize_layer, optimize_layer_with, Dist, Limits,
    OptimizeOptions,
};
use symshard::rules::IndexKind;
use symshard::sym::Poly;

#[test]
fn every_split_of_every_shipped_rule_is_proven_or_explained() {
    for rule in rules().values() {
        let why = explain_why(rule).unwrap();
        let laws: BTreeSet<String> = law_rewrites(rule)
            .unwrap()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        for p in &why.proofs {
            let inner = p.note.as_deref().is_some_and(|n| n.contains("inner part"));
            assert!(
                p.proven || inner,
                "{} split {}: {:?}",
                rule.name,
                p.split,
                p.note
            );
            for s in &p.steps {
                assert!(
                    laws.contains(&s.rewrite),
                    "{} proof uses {}",
                    rule.name,
                    s.rewrite
                );
            }
            if p.proven {
                assert_eq!(
                    p.steps.len(),
                    p.split.split(", ").count(),
                    "{} {}",
                    rule.name,
                    p.split
                );
            }
        }
        assert!(why.lines().len() > why.proofs.len());
    }
}

#[test]
fn row_parallel_linear_is_proven_by_its_reduce_sum_law() {
    let why = explain_why(&rules()["linear"]).unwrap();
    let k = why.proofs.iter().find(|p| p.split == "k→a").unwrap();
    assert_eq!(k.steps[0].rewrite, "linear.yaml:k:reduce-sum");
    assert_eq!(
        k.steps[0].law.as_deref(),
        Some(IndexKind::ReduceSum.law().statement)
    );
    let text = why.lines().join("\n");
    assert!(
        text.contains("all_reduce(linear(shard(x, 1, a), shard(w, 0, a), partial(bias, a)), a)"),
        "{text}"
    );
}

// Communication optimisation of a GPT layer.

fn gpt2() -> symshard::model::Model {
    ModelLoader::embedded()
        .unwrap()
        .resolve("gpt2-124m")
        .unwrap()
}

/// GPT-2 124M with 16 heads of 48 instead of 12 of 64, so that tp = 8 divides the heads (as
/// `cost` requires); no formula of the layer's saving depends on the head count.
fn gpt2_16_heads() -> symshard::model::Model {
    let mut m = gpt2();
    m.values.insert(
        "NH".into(),
        symshard::sym::Rational::from_integer(16.into()),
    );
    m
}

fn count(text: &str, what: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(&format!("= {what}(")))
        .count()
}

#[test]
fn sequence_parallelism_is_discovered() {
    let model = gpt2_16_heads();
    let start = Instant::now();
    let r = optimize_layer(&model, 8, &model.values).unwrap();
    eprintln!(
        "SP discovery, one GPT-2 layer at tp=8: {:?} ({} iterations, {} e-nodes, {} e-classes, {})",
        start.elapsed(),
        r.run.iterations,
        r.run.egraph_nodes,
        r.run.egraph_classes,
        r.run.stop_reason
    );
    assert!(r.run.saturated, "{}", r.run.stop_reason);
    assert_eq!(
        (
            count(&r.before, "all_reduce"),
            count(&r.before, "reduce_scatter")
        ),
        (2, 0)
    );
    assert_eq!(count(&r.after, "all_reduce"), 0, "{}", r.after);
    assert_eq!(
        (
            count(&r.after, "reduce_scatter"),
            count(&r.after, "all_gather")
        ),
        (2, 2),
        "{}",
        r.after
    );
    // Same bytes on the wire; dropout ×2, add ×2 and layernorm on 1/8 of the rows.
    assert_eq!(r.saving.formulas.comm, Poly::zero());
    assert_eq!(
        r.saving.formulas.compute,
        Poly::parse("(1 - 1/8)*12*B*S*H").unwrap()
    );
    // Two one-byte masks and layernorm's input (bf16) and two fp32 statistics per row.
    assert_eq!(
        r.saving.formulas.activation,
        Poly::parse("(1 - 1/8)*(4*B*S*H + 8*B*S)").unwrap()
    );
    let moved: BTreeSet<&str> = r.moved.iter().map(|m| m.op.as_str()).collect();
    let expected = ["resid_dropout1", "res1", "ln2", "resid_dropout2", "res2"];
    assert_eq!(moved, expected.into_iter().collect());
    assert!(r.moved.iter().all(|m| m.after == "Shard(0)@tp"));
}

#[test]
fn identical_layers_share_one_eclass() {
    let model = gpt2_16_heads();
    let bi = model.blocks.iter().position(|b| b.name == "layer").unwrap();
    let ctx = block_analysis(&model, &model.blocks[bi], "tp", Poly::int(8));
    let one = block_program(&model, bi, &ctx, "tp").unwrap();
    let many = one.repeat(96);
    let size = |e: &RecExpr<Dist>| {
        let mut g = EGraph::new(ctx.clone());
        for _ in 0..3 {
            g.add_expr(e);
        }
        g.rebuild();
        g.total_number_of_nodes()
    };
    assert_eq!(size(&many.expr), size(&one.expr) + 2);
    let saturate = |layers: Option<u64>| {
        let opts = OptimizeOptions {
            layers,
            ..OptimizeOptions::default()
        };
        let start = Instant::now();
        let r = optimize_layer_with(&model, 8, &model.values, &opts).unwrap();
        (r, start.elapsed())
    };
    let (r1, t1) = saturate(None);
    let (r96, t96) = saturate(Some(96));
    eprintln!(
        "saturation at tp=8: 1 layer {t1:?}, {} e-nodes, {} e-classes; 96 layers {t96:?}, {} e-nodes, {} e-classes",
        r1.run.egraph_nodes, r1.run.egraph_classes, r96.run.egraph_nodes, r96.run.egraph_classes
    );
    assert_eq!(r96.run.egraph_nodes, r1.run.egraph_nodes + 2);
    let times = Poly::int(96);
    assert_eq!(
        r96.saving.formulas.compute,
        &times * &r1.saving.formulas.compute
    );
    assert_eq!(
        r96.after_cost.formulas.comm,
        &times * &r1.after_cost.formulas.comm
    );
}

#[test]
fn a_bounded_run_says_it_stopped_early() {
    let model = gpt2_16_heads();
    let opts = OptimizeOptions {
        limits: Limits {
            iterations: 1,
            ..Limits::default()
        },
        ..OptimizeOptions::default()
    };
    let r = optimize_layer_with(&model, 8, &model.values, &opts).unwrap();
    assert!(!r.run.saturated);
    assert_eq!(r.run.stop_reason, "iteration limit (1)");
    assert!(r.run.egraph_nodes > 0);
}

#[test]
fn optimize_rejects_bad_input_without_panicking() {
    let model = gpt2_16_heads();
    assert!(optimize_layer(&model, 0, &model.values).is_err());
    let mut values = model.values.clone();
    values.remove("B");
    let err = optimize_layer(&model, 8, &values).unwrap_err().to_string();
    assert!(err.contains("--set"), "{err}");
}

// The command line.

fn symshard() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("symshard").unwrap()
}

#[test]
fn optimize_and_explain_why_on_the_command_line() {
    let out = symshard()
        .args([
            "optimize",
            "gpt2-124m",
            "--tp",
            "8",
            "--set",
            "NH=16",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["run"]["stop_reason"], "saturated");
    assert!(v["after"].as_str().unwrap().contains("reduce_scatter"));
    assert_eq!(v["saving"]["comm"], "0");
    let out = symshard()
        .args(["optimize", "gpt2-124m", "--tp", "4", "--set", "B=2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("resid_dropout1"),
        "{text}"
    );
    let out = symshard()
        .args(["explain", "linear", "--why"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("by linear.yaml:k:reduce-sum"), "{text}");
    let out = symshard()
        .args(["explain", "softmax", "--why", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["proofs"][1]["steps"][0]["rewrite"], "softmax.yaml:n:stat");
}

#[test]
fn bad_optimize_input_exits_2() {
    for args in [
        &["optimize", "gpt2-124m", "--tp", "0"][..],
        &["optimize", "gpt2-124m", "--set", "B=0"],
        &["optimize", "no-such-model"],
        &["optimize", "alexnet"],
    ] {
        symshard().args(args).assert().code(2);
    }
}
