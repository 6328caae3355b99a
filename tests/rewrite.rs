//! The e-graph engine: one equivalence test per law and per collective rewrite, tests that unsound
//! equalities are not provable, soundness of every generated rewrite against a reference
//! interpreter on a simulated mesh, split-table proofs, and sequence parallelism found on a GPT
//! layer.

#[path = "rewrite/interp.rs"]
mod interp;
#[path = "rewrite/kernels.rs"]
mod kernels;
#[path = "rewrite/sound.rs"]
mod sound;
#[path = "rewrite/soundness.rs"]
mod soundness;
#[path = "rewrite/tensor.rs"]
mod tensor;
#[path = "rewrite/uses.rs"]
mod uses;

use egg::{EGraph, RecExpr};
use std::collections::BTreeMap;
use std::time::Duration;
use symshard::rewrite::{rewrites, Dist, DistAnalysis, Limits, Mesh};
use symshard::rules::{OpRule, RuleSet};
use symshard::sym::Poly;

fn rules() -> BTreeMap<String, OpRule> {
    RuleSet::embedded()
        .expect("shipped rules load")
        .iter()
        .map(|r| (r.name.clone(), r.clone()))
        .collect()
}

/// Whether the laws of `names` and the collective algebra prove `lhs` = `rhs` on a mesh with
/// axes `a` and `b` (sizes `p_a`, `p_b`); stops as soon as they are equal.
fn proves(names: &[&str], lhs: &str, rhs: &str) -> bool {
    let all = rules();
    let used: Vec<OpRule> = names.iter().map(|n| all[*n].clone()).collect();
    let mesh =
        Mesh::new([("a", "p_a"), ("b", "p_b")].map(|(a, p)| (a.to_string(), Poly::symbol(p))));
    let mut egraph = EGraph::new(DistAnalysis::new(used.clone(), mesh, 2));
    let lhs: RecExpr<Dist> = lhs.parse().expect("lhs parses");
    let rhs: RecExpr<Dist> = rhs.parse().expect("rhs parses");
    let (l, r) = (egraph.add_expr(&lhs), egraph.add_expr(&rhs));
    let limits = Limits {
        iterations: 6,
        nodes: 5_000,
        time: Duration::from_secs(5),
    };
    let runner = limits
        .runner(egraph)
        .with_hook(move |run| {
            if run.egraph.find(l) == run.egraph.find(r) {
                Err("proven".into())
            } else {
                Ok(())
            }
        })
        .run(&rewrites(used.iter()).expect("rewrites build"));
    assert_eq!(
        runner.egraph.analysis.stats.conflicts, 0,
        "a rewrite merged different data"
    );
    runner.egraph.find(l) == runner.egraph.find(r)
}

fn assert_proves(names: &[&str], lhs: &str, rhs: &str) {
    assert!(proves(names, lhs, rhs), "not proven:\n  {lhs}\n= {rhs}");
}

const LINEAR: &str =
    "(op linear {b=b,k=k,n=n} <> (tensor x [b,k]) (tensor w [k,n]) (tensor bias [n]))";
const P: &str = "(op linear {b=b,k=k,n=n} <> (shard (tensor x [b,k]) 1 a) (shard (tensor w [k,n]) 0 a) (partial (tensor bias [n]) a))";
const X: &str = "(tensor x [b,n])";

fn sub(template: &str) -> String {
    template.replace("$P", P).replace("$X", X)
}

// One test per law of the law table.

#[test]
fn law_map() {
    let rhs = "(all_gather (op linear {b=b,k=k,n=n} <> (tensor x [b,k]) (shard (tensor w [k,n]) 1 a) (shard (tensor bias [n]) 0 a)) 1 a)";
    assert_proves(&["linear"], LINEAR, rhs);
}

#[test]
fn law_reduce_sum() {
    assert_proves(&["linear"], LINEAR, &sub("(all_reduce $P a)"));
}

#[test]
fn law_reduce_max() {
    let lhs = "(op reduce_max {b=b,n=n} <> (tensor x [b,n]))";
    let rhs = "(all_reduce_max (op reduce_max {b=b,n=n} <> (shard (tensor x [b,n]) 1 a)) a)";
    assert_proves(&["reduce_max"], lhs, rhs);
}

#[test]
fn law_stat() {
    let lhs = "(op softmax {b=b,n=n} <> (tensor x [b,n]))";
    let rhs = "(all_gather (op softmax {b=b,n=n} <n@a> (shard (tensor x [b,n]) 1 a)) 1 a)";
    assert_proves(&["softmax"], lhs, rhs);
}

#[test]
fn law_stat_not_in_output() {
    let lhs = "(op cross_entropy {t=t,v=v} <> (tensor logits [t,v]) (tensor labels [t]:8))";
    let rhs = "(op cross_entropy {t=t,v=v} <v@a> (shard (tensor logits [t,v]) 1 a) (tensor labels [t]:8))";
    assert_proves(&["cross_entropy"], lhs, rhs);
}

#[test]
fn law_window() {
    let x = "(tensor x [n,c,oh*stride-2*pad+kh-stride,ow*stride-2*pad+kw-stride])";
    let b = "{c=c,kh=kh,kw=kw,n=n,oh=oh,ow=ow,pad=pad,stride=stride}";
    let lhs = format!("(op maxpool2d {b} <> {x})");
    let rhs = format!("(all_gather (op maxpool2d {b} <oh@a> (shard {x} 2 a)) 2 a)");
    assert_proves(&["maxpool2d"], &lhs, &rhs);
}

#[test]
fn laws_compose_over_two_axes() {
    let rhs = "(all_gather (all_reduce (op linear {b=b,k=k,n=n} <> (shard (shard (tensor x [b,k]) 0 a) 1 b) (shard (tensor w [k,n]) 0 b) (partial (tensor bias [n]) b)) b) 0 a)";
    assert_proves(&["linear"], LINEAR, rhs);
}

// One test per collective rewrite.

#[test]
fn all_reduce_is_all_gather_of_reduce_scatter() {
    assert_proves(
        &["linear"],
        &sub("(all_reduce $P a)"),
        &sub("(all_gather (reduce_scatter $P 0 a) 0 a)"),
    );
}

#[test]
fn all_gather_of_shard_is_identity() {
    assert_proves(&[], &sub("(all_gather (shard $X 1 a) 1 a)"), X);
    assert_proves(
        &[],
        &sub("(shard (all_gather (shard $X 1 a) 1 a) 1 a)"),
        &sub("(shard $X 1 a)"),
    );
}

#[test]
fn partial_sums_finish() {
    assert_proves(&[], &sub("(all_reduce (partial $X a) a)"), X);
    assert_proves(
        &[],
        &sub("(reduce_scatter (partial $X a) 0 a)"),
        &sub("(shard $X 0 a)"),
    );
}

#[test]
fn resharding_is_all_to_all() {
    let s0 = sub("(shard $X 0 a)");
    assert_proves(
        &[],
        &format!("(shard (all_gather {s0} 0 a) 1 a)"),
        &format!("(all_to_all {s0} 0 1 a)"),
    );
    assert_proves(
        &[],
        &sub("(all_to_all (shard $X 0 a) 0 1 a)"),
        &sub("(shard $X 1 a)"),
    );
}

#[test]
fn adjacent_collectives_fuse() {
    let s = "(shard (tensor y [i,j,k]) 0 a)";
    assert_proves(
        &[],
        &format!("(all_to_all (all_to_all {s} 0 1 a) 1 2 a)"),
        &format!("(all_to_all {s} 0 2 a)"),
    );
    assert_proves(
        &[],
        &format!("(all_to_all (all_to_all {s} 0 1 a) 1 0 a)"),
        s,
    );
    assert_proves(
        &[],
        &format!("(all_gather (all_to_all {s} 0 1 a) 1 a)"),
        &format!("(all_gather {s} 0 a)"),
    );
    assert_proves(
        &["linear"],
        &sub("(all_to_all (reduce_scatter $P 0 a) 0 1 a)"),
        &sub("(reduce_scatter $P 1 a)"),
    );
    assert_proves(
        &["linear"],
        &sub("(all_gather (reduce_scatter $P 1 a) 1 a)"),
        &sub("(all_reduce $P a)"),
    );
}

#[test]
fn replicate_is_identity() {
    assert_proves(&[], &sub("(replicate $X a)"), X);
}

#[test]
fn send_a_shard_then_gather() {
    let s = sub("(shard $X 0 a)");
    assert_proves(
        &[],
        &format!("(send (all_gather {s} 0 a) b)"),
        &format!("(all_gather (send {s} b) 0 a)"),
    );
}

#[test]
fn map_operators_commute_with_gather_and_shard() {
    let drop = |x: &str| format!("(op dropout {{b=b,h=n}} <> {x})");
    let s = sub("(shard $X 0 a)");
    assert_proves(
        &["dropout"],
        &drop(&format!("(all_gather {s} 0 a)")),
        &format!("(all_gather {} 0 a)", drop(&s)),
    );
    assert_proves(&["dropout"], &format!("(shard {} 0 a)", drop(X)), &drop(&s));
    let add = |x: &str, y: &str| format!("(op add {{b=b,h=n}} <> {x} {y})");
    assert_proves(
        &["add"],
        &add("(tensor r [b,n])", &format!("(all_gather {s} 0 a)")),
        &format!(
            "(all_gather {} 0 a)",
            add("(shard (tensor r [b,n]) 0 a)", &s)
        ),
    );
}

#[test]
fn gather_of_a_reduce_scatter_is_delayed_past_a_map_operator() {
    let drop = |x: &str| format!("(op dropout {{b=b,h=n}} <> {x})");
    assert_proves(
        &["linear", "dropout"],
        &drop(&sub("(all_reduce $P a)")),
        &format!("(all_gather {} 0 a)", drop(&sub("(reduce_scatter $P 0 a)"))),
    );
}

// Unsound equalities are not provable.

#[test]
#[should_panic(expected = "not proven")]
fn reduce_sum_split_without_reduction_is_not_the_operator() {
    assert_proves(&["linear"], LINEAR, P);
}

#[test]
#[should_panic(expected = "not proven")]
fn bias_added_on_every_device_is_not_the_operator() {
    let rhs = "(all_reduce (op linear {b=b,k=k,n=n} <> (shard (tensor x [b,k]) 1 a) (shard (tensor w [k,n]) 0 a) (tensor bias [n])) a)";
    assert_proves(&["linear"], LINEAR, rhs);
}

#[test]
#[should_panic(expected = "not proven")]
fn stat_split_without_statistics_is_not_the_operator() {
    let lhs = "(op softmax {b=b,n=n} <> (tensor x [b,n]))";
    let rhs = "(all_gather (op softmax {b=b,n=n} <> (shard (tensor x [b,n]) 1 a)) 1 a)";
    assert_proves(&["softmax"], lhs, rhs);
}

#[test]
#[should_panic(expected = "not proven")]
fn partial_maxima_are_not_summed() {
    let lhs = "(op reduce_max {b=b,n=n} <> (tensor x [b,n]))";
    let rhs = "(all_reduce (op reduce_max {b=b,n=n} <> (shard (tensor x [b,n]) 1 a)) a)";
    assert_proves(&["reduce_max"], lhs, rhs);
}

#[test]
#[should_panic(expected = "not proven")]
fn reduce_scatter_does_not_move_past_a_nonlinear_operator() {
    let gelu = |x: &str| format!("(op gelu {{b=b,h=n}} <> {x})");
    assert_proves(
        &["linear", "gelu"],
        &gelu(&sub("(reduce_scatter $P 0 a)")),
        &format!("(reduce_scatter {} 0 a)", gelu(P)),
    );
}

#[test]
#[should_panic(expected = "not proven")]
fn gather_along_another_dimension_is_not_identity() {
    assert_proves(&[], &sub("(all_gather (shard $X 0 a) 1 a)"), X);
}

#[test]
#[should_panic(expected = "not proven")]
fn splitting_the_inner_part_of_a_merged_dimension_is_not_a_law() {
    let lhs = "(op reshape {b=b,d=d,n=n} <> (tensor x [b,d*n]))";
    let rhs = "(all_gather (op reshape {b=b,d=d,n=n} <> (shard (tensor x [b,d*n]) 1 a)) 2 a)";
    assert_proves(&["reshape"], lhs, rhs);
}
