//! Soundness: every rewrite that fires, executed on random tensors on 2, 3 and 2×2 devices by the
//! reference interpreter; and the interpreter itself tells unsound equalities apart.

use super::interp::{Interp, SimMesh};
use super::{rules, sound, tensor};
use egg::{EGraph, RecExpr};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use symshard::rewrite::laws::{commute_rewrites, law_name};
use symshard::rewrite::{rewrites, Dist, DistAnalysis, Limits, Mesh};
use symshard::rules::OpRule;
use symshard::sym::Poly;

/// The interpreter tells the unsound equalities above apart: it is an oracle with teeth.
#[test]
fn interpreter_refutes_unsound_equalities() {
    let all = rules();
    let mesh = SimMesh {
        axes: vec![("a".into(), 2)],
    };
    let cases: [(&str, &str, &str); 4] = [
        (
            "linear",
            "(op linear {b=2,k=4,n=2} <> (tensor x [2,4]) (tensor w [4,2]) (tensor bias [2]))",
            "(all_reduce (op linear {b=2,k=4,n=2} <> (shard (tensor x [2,4]) 1 a) (shard (tensor w [4,2]) 0 a) (tensor bias [2])) a)",
        ),
        (
            "softmax",
            "(op softmax {b=2,n=4} <> (tensor x [2,4]))",
            "(all_gather (op softmax {b=2,n=4} <> (shard (tensor x [2,4]) 1 a)) 1 a)",
        ),
        (
            "reduce_max",
            "(op reduce_max {b=2,n=4} <> (tensor x [2,4]))",
            "(all_reduce_max (op reduce_max {b=2,n=4} <> (shard (tensor x [2,4]) 0 a)) a)",
        ),
        (
            "gelu",
            "(reduce_scatter (op gelu {b=2,h=4} <> (partial (tensor x [2,4]) a)) 0 a)",
            "(op gelu {b=2,h=4} <> (reduce_scatter (partial (tensor x [2,4]) a) 0 a))",
        ),
    ];
    for (rule, lhs, rhs) in cases {
        let r = &all[rule];
        let mut env = sound::inputs(r, &sound::extents(r, 2), 7);
        env.insert(
            "x".into(),
            tensor::T::from_fn(&[2, 4], |i| (i[0] * 4 + i[1]) as f64 / 3.0 - 1.0),
        );
        let interp = Interp {
            rules: &all,
            mesh: mesh.clone(),
            env,
        };
        let l = sound::run(&interp, &lhs.parse().unwrap());
        let rr = sound::run(&interp, &rhs.parse().unwrap());
        let same = matches!((&l, &rr), (Ok(a), Ok(b)) if a.0.close(&b.0, 1e-9) && a.1 == b.1);
        assert!(
            !same,
            "{rule}: the interpreter cannot tell\n  {lhs}\nfrom\n  {rhs}"
        );
    }
}

/// Law rewrites whose law applies: a split index must be the outer part of every dimension it
/// is in (a contiguous block of `n*d` splits `n`, not `d`).
fn applicable_laws(rule: &OpRule) -> Vec<String> {
    rule.indices
        .iter()
        .filter(|i| i.kind.law().splittable)
        .filter(|i| {
            rule.inputs
                .iter()
                .chain([&rule.output])
                .all(|t| t.position(&i.name).is_none_or(|d| t.dims[d][0] == i.name))
        })
        .map(|i| law_name(rule, &i.name, i.kind))
        .collect()
}

/// Saturates `programs` under `rules` (bounded) and executes every node of every class.
fn run_and_check(
    all: &BTreeMap<String, OpRule>,
    rule: &OpRule,
    (mesh, base): &(SimMesh, usize),
    programs: &[RecExpr<Dist>],
    rules: &[egg::Rewrite<Dist, DistAnalysis>],
    fired: &mut BTreeSet<String>,
) -> usize {
    let ext = sound::extents(rule, *base);
    let sizes = mesh
        .axes
        .iter()
        .map(|(a, p)| (a.clone(), Poly::int(*p as i64)));
    let mut egraph = EGraph::new(DistAnalysis::new([rule.clone()], Mesh::new(sizes), 2));
    for p in programs {
        egraph.add_expr(p);
    }
    let limits = Limits {
        iterations: mesh.axes.len(),
        nodes: 4_000,
        time: Duration::from_secs(10),
    };
    let runner = limits.runner(egraph).run(rules);
    for it in &runner.iterations {
        fired.extend(it.applied.keys().map(|k| k.to_string()));
    }
    let interp = Interp {
        rules: all,
        mesh: mesh.clone(),
        env: sound::inputs(rule, &ext, 11),
    };
    assert_eq!(runner.egraph.analysis.stats.conflicts, 0, "{}", rule.name);
    sound::check_egraph(&interp, &runner.egraph)
        .unwrap_or_else(|e| panic!("{} on {:?}: {e}", rule.name, mesh.axes))
}

#[test]
fn every_generated_rewrite_is_sound_on_every_rule() {
    let all = rules();
    let mut fired: BTreeSet<String> = BTreeSet::new();
    let mut checked = 0;
    for rule in all.values() {
        let laws = rewrites([rule]).unwrap();
        let commutes = commute_rewrites(rule).unwrap();
        for m in sound::meshes() {
            let ext = sound::extents(rule, m.1);
            let alone: RecExpr<Dist> = sound::op_text(rule, &ext, |_, t| t).parse().unwrap();
            checked += run_and_check(&all, rule, &m, &[alone], &laws, &mut fired);
            let programs = sound::commute_programs(rule, &ext, "a");
            checked += run_and_check(&all, rule, &m, &programs, &commutes, &mut fired);
        }
    }
    for rule in all.values() {
        for name in applicable_laws(rule) {
            assert!(fired.contains(&name), "law `{name}` never fired");
        }
        for rw in commute_rewrites(rule).unwrap() {
            assert!(
                fired.contains(rw.name.as_str()),
                "`{}` never fired",
                rw.name
            );
        }
    }
    assert!(fired.contains("all_reduce=all_gather∘reduce_scatter"));
    assert!(checked > 1000, "only {checked} nodes checked");
}

#[test]
fn every_collective_rewrite_is_sound() {
    let all = rules();
    let linear = all["linear"].clone();
    let mesh = SimMesh {
        axes: vec![("a".into(), 2), ("b".into(), 2)],
    };
    let sizes = mesh
        .axes
        .iter()
        .map(|(a, p)| (a.clone(), Poly::int(*p as i64)));
    let mut egraph = EGraph::new(DistAnalysis::new([linear.clone()], Mesh::new(sizes), 2));
    let p = "(op linear {b=4,k=4,n=4} <> (shard (tensor x [4,4]) 1 a) (shard (tensor w [4,4]) 0 a) (partial (tensor bias [4]) a))";
    let y = "(tensor y [4,4,4])";
    let s = format!("(shard {y} 0 a)");
    for text in [
        format!("(all_reduce {p} a)"),
        format!("(all_gather (reduce_scatter {p} 1 a) 1 a)"),
        format!("(all_gather (shard {y} 1 a) 1 a)"),
        format!("(shard (all_gather {s} 0 a) 0 a)"),
        format!("(shard (all_gather {s} 0 a) 2 a)"),
        format!("(all_to_all (all_to_all {s} 0 1 a) 1 2 a)"),
        format!("(all_to_all (all_to_all {s} 0 1 a) 1 0 a)"),
        format!("(all_gather (all_to_all {s} 0 1 a) 1 a)"),
        format!("(all_to_all (reduce_scatter {p} 0 a) 0 1 a)"),
        format!("(all_reduce (partial {y} a) a)"),
        format!("(reduce_scatter (partial {y} a) 1 a)"),
        format!("(replicate {y} a)"),
        format!("(send (all_gather {s} 0 a) b)"),
        format!("(recv (all_gather {s} 0 a) b)"),
    ] {
        egraph.add_expr(&text.parse().unwrap());
    }
    let runner = Limits {
        iterations: 4,
        ..Limits::default()
    }
    .runner(egraph)
    .run(&symshard::rewrite::collective::collective_rewrites().unwrap());
    let fired: BTreeSet<String> = runner
        .iterations
        .iter()
        .flat_map(|it| it.applied.keys().map(|k| k.to_string()))
        .collect();
    let every: BTreeSet<String> = symshard::rewrite::collective::collective_rewrites()
        .unwrap()
        .iter()
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(fired, every, "every collective rewrite fires");
    let mut env = std::collections::HashMap::new();
    let mut rng = tensor::Rng(5);
    for (name, shape) in [
        ("x", vec![4, 4]),
        ("w", vec![4, 4]),
        ("bias", vec![4]),
        ("y", vec![4, 4, 4]),
    ] {
        env.insert(
            name.to_string(),
            tensor::T::from_fn(&shape, |_| rng.float()),
        );
    }
    let interp = Interp {
        rules: &all,
        mesh,
        env,
    };
    let n = sound::check_egraph(&interp, &runner.egraph).unwrap();
    assert!(n > 20);
}
