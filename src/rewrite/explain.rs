//! Why a split costs what it costs: for each entry of a rule's split table, the chain of laws
//! that proves the split program equal to the unsplit operator (egg explanations).
//!
//! The split program is built from the split table's placements and collectives
//! ([`crate::rules::split`]), not from the rewrites, so a proof is a check that the table and the
//! laws agree.

use super::analysis::{axis_leaf, DistAnalysis, Mesh, Meta};
use super::collective::collective_rewrites;
use super::lang::{Dim, Dist, Extents, Marks, ShapeLit};
use super::laws::{law_rewrites, term_has};
use super::program::render_inline;
use super::run::{built_in, rule_rewrites, Limits, RunStats};
use crate::error::{Error, Result};
use crate::rules::split::{split_table, SplitEntry, AXES};
use crate::rules::{Dtype, IndexKind, OpRule, Placement, ReduceOp};
use crate::sym::Poly;
use egg::{EGraph, FlatTerm, Id, RecExpr, Symbol};
use serde::Serialize;

/// One rewrite of a proof.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProofStep {
    /// The rewrite applied (`linear.yaml:k:reduce-sum`).
    pub rewrite: String,
    /// Whether it was applied right to left.
    pub reversed: bool,
    /// The law it instantiates, from the law table.
    pub law: Option<String>,
    /// The program after the step.
    pub term: String,
}

/// The proof of one split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitProof {
    /// The split: `k→a`, `b→a, k→b`.
    pub split: String,
    /// The split program built from the split table.
    pub program: String,
    /// Whether the laws prove it equal to the unsplit operator.
    pub proven: bool,
    /// The steps, when proven.
    pub steps: Vec<ProofStep>,
    /// Why it is not proven, when it is not.
    pub note: Option<String>,
}

/// The proofs of a rule's split table.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    /// The rule.
    pub rule: String,
    /// The unsplit operator.
    pub unsplit: String,
    /// One proof per split of the table.
    pub proofs: Vec<SplitProof>,
    /// Indices that cannot be split, with the law that says so.
    pub unsplittable: Vec<String>,
    /// How the run ended.
    pub run: RunStats,
}

impl Why {
    /// The proofs as text lines.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "{}: the forward program of each split, proven equal to {} by the law table",
            self.rule, self.unsplit
        )];
        for p in &self.proofs {
            if !p.proven {
                let why = p.note.as_deref().unwrap_or("not proven within the limits");
                out.push(format!("split {}: NOT proven — {why}", p.split));
                continue;
            }
            let n = p.steps.len();
            out.push(format!(
                "split {}: {n} step{}",
                p.split,
                if n == 1 { "" } else { "s" }
            ));
            out.push(format!("    {}", self.unsplit));
            for s in &p.steps {
                let dir = if s.reversed { " (right to left)" } else { "" };
                let law = s
                    .law
                    .as_deref()
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default();
                out.push(format!("  = {}    by {}{dir}{law}", s.term, s.rewrite));
            }
        }
        for u in &self.unsplittable {
            out.push(format!("unsplittable {u}"));
        }
        let r = &self.run;
        out.push(format!(
            "e-graph: {} after {} iterations, {} e-nodes, {} e-classes",
            r.stop_reason, r.iterations, r.egraph_nodes, r.egraph_classes
        ));
        out
    }
}

fn leaf(e: &mut RecExpr<Dist>, n: Dist) -> Id {
    e.add(n)
}

/// The unsplit operator over whole inputs named as in the rule, sizes as the index names.
fn unsplit(rule: &OpRule) -> (RecExpr<Dist>, Vec<Id>, [Id; 3]) {
    let mut e = RecExpr::default();
    let sym = |s: &str| Dim(Poly::symbol(s));
    let bind = Extents(
        rule.indices
            .iter()
            .map(|i| i.name.as_str())
            .chain(rule.params.iter().map(String::as_str))
            .map(|s| (s.to_string(), sym(s)))
            .collect(),
    );
    let mut inputs = Vec::new();
    for t in &rule.inputs {
        let dims = t
            .dims
            .iter()
            .map(|g| Dim(g.iter().map(|i| t.extent(i)).product()))
            .collect();
        let elem_bytes = match t.dtype {
            Dtype::Fixed(b) if b != 2 => Some(b),
            _ => None,
        };
        let name = leaf(&mut e, Dist::Name(Symbol::from(t.name.as_str())));
        let shape = leaf(
            &mut e,
            Dist::Shape(ShapeLit {
                dims,
                elem_bytes,
                shard: None,
            }),
        );
        inputs.push(e.add(Dist::Tensor([name, shape])));
    }
    let head = [
        leaf(&mut e, Dist::Name(Symbol::from(rule.name.as_str()))),
        leaf(&mut e, Dist::Extents(bind)),
        leaf(&mut e, Dist::Marks(Marks::default())),
    ];
    (e, inputs, head)
}

fn op(e: &mut RecExpr<Dist>, head: [Id; 3], marks: Option<Marks>, ins: &[Id]) -> Id {
    let mut kids = head.to_vec();
    if let Some(m) = marks {
        kids[2] = e.add(Dist::Marks(m));
    }
    kids.extend_from_slice(ins);
    e.add(Dist::Op(kids.into()))
}

/// The split program of a table entry: inputs placed as the table says (a term that lacks a
/// reduce-sum index added on one device only), statistics and halos marked, then the collectives
/// that make the output whole, innermost axis first.
fn split_program(rule: &OpRule, entry: &SplitEntry) -> RecExpr<Dist> {
    let (mut e, inputs, head) = unsplit(rule);
    let mut marks = Marks::default();
    let mut ins = inputs.clone();
    let axes: Vec<Id> = entry
        .splits
        .iter()
        .map(|s| e.add(axis_leaf(&s.axis)))
        .collect();
    for (n, s) in entry.splits.iter().enumerate() {
        let a = axes[n];
        let kind = rule
            .index(&s.index)
            .map(|i| i.kind)
            .unwrap_or(IndexKind::Opaque);
        if kind.law().finish.needs_mark() {
            marks = marks.with(&s.index, &s.axis);
        }
        for (k, x) in ins.iter_mut().enumerate() {
            let p = entry.forward.inputs[k].placements[n];
            *x = match p {
                Placement::Shard(d) => {
                    let d = e.add(Dist::Num(d as u64));
                    e.add(Dist::Shard([*x, d, a]))
                }
                _ if kind == IndexKind::ReduceSum && !term_has(rule, k, &s.index) => {
                    e.add(Dist::Partial([*x, a]))
                }
                _ => *x,
            };
        }
    }
    let mut v = op(&mut e, head, Some(marks), &ins);
    for n in (0..entry.splits.len()).rev() {
        let a = axes[n];
        v = match entry.forward.outputs[0].placements[n] {
            Placement::Shard(d) => {
                let d = e.add(Dist::Num(d as u64));
                e.add(Dist::AllGather([v, d, a]))
            }
            Placement::Partial(ReduceOp::Sum) => e.add(Dist::AllReduce([v, a])),
            Placement::Partial(ReduceOp::Max) => e.add(Dist::AllReduceMax([v, a])),
            Placement::Replicate => v,
        };
    }
    e
}

/// A split of an index that is the inner part of a merged dimension: a block of that dimension
/// splits its outer part instead.
fn inner_split(rule: &OpRule, entry: &SplitEntry) -> Option<String> {
    for s in &entry.splits {
        for t in rule.inputs.iter().chain([&rule.output]) {
            let Some(d) = t.position(&s.index) else {
                continue;
            };
            if t.dims[d].first() != Some(&s.index) {
                return Some(format!(
                    "`{}` is the inner part of dimension {d} of `{}` ({}): a block of that \
                     dimension splits `{}`",
                    s.index,
                    t.name,
                    t.dims[d].join("*"),
                    t.dims[d][0]
                ));
            }
        }
    }
    None
}

/// The law a rewrite name cites, from the law table.
fn law_of(rewrite: &str) -> Option<String> {
    let kind = rewrite.split(':').nth(2)?;
    IndexKind::from_name(kind).map(|k| k.law().statement.to_string())
}

/// The rewrite that produced this step, searching the term's subterms.
fn step_rule(t: &FlatTerm<Dist>) -> Option<(String, bool)> {
    if let Some(r) = t.forward_rule {
        return Some((r.to_string(), false));
    }
    if let Some(r) = t.backward_rule {
        return Some((r.to_string(), true));
    }
    t.children.iter().find_map(step_rule)
}

/// The proofs of every split of `rule`'s split table, within the default limits.
pub fn explain_why(rule: &OpRule) -> Result<Why> {
    explain_why_with(
        rule,
        &Limits {
            iterations: 8,
            nodes: 20_000,
            ..Limits::default()
        },
    )
}

/// [`explain_why`] within `limits`.
pub fn explain_why_with(rule: &OpRule, limits: &Limits) -> Result<Why> {
    let table = split_table(rule, 2);
    let mesh = Mesh::new(AXES.iter().map(|(a, p)| (a.to_string(), Poly::symbol(p))));
    let ctx = DistAnalysis::new([rule.clone()], mesh, 2);
    let (mut lhs, inputs, head) = unsplit(rule);
    op(&mut lhs, head, None, &inputs);
    let mut egraph = EGraph::new(ctx.clone()).with_explanations_enabled();
    let root = egraph.add_expr(&lhs);
    if let Meta::Invalid(why) = &egraph[root].data {
        return Err(Error::Usage(format!("rule `{}`: {why}", rule.name)));
    }
    let mut proofs = Vec::new();
    let mut targets = Vec::new();
    for entry in &table.entries {
        let program = split_program(rule, entry);
        let split = entry
            .splits
            .iter()
            .map(|s| format!("{}→{}", s.index, s.axis))
            .collect::<Vec<_>>()
            .join(", ");
        let metas = ctx.program_meta(&program);
        let invalid = inner_split(rule, entry).or_else(|| {
            metas.iter().find_map(|m| match m {
                Meta::Invalid(why) => Some(why.to_string()),
                _ => None,
            })
        });
        let note = match invalid {
            Some(why) => Some(format!(
                "the table's placements follow no law of this rule: {why}"
            )),
            None => {
                targets.push(egraph.add_expr(&program));
                None
            }
        };
        proofs.push((split, program, note));
    }
    let mut rules = collective_rewrites().map_err(built_in)?;
    rules.extend(law_rewrites(rule).map_err(|e| rule_rewrites(&rule.name, e))?);
    let goals = targets.clone();
    let mut runner = limits
        .runner(egraph)
        .with_hook(move |r| {
            let root = r.egraph.find(root);
            if goals.iter().all(|t| r.egraph.find(*t) == root) {
                Err("every split proven".to_string())
            } else {
                Ok(())
            }
        })
        .run(&rules);
    let run = RunStats::of(&runner);
    let mut out = Vec::new();
    for (split, program, note) in proofs {
        let mut proof = SplitProof {
            split,
            program: render_inline(&program),
            proven: false,
            steps: Vec::new(),
            note,
        };
        let equal = proof.note.is_none()
            && runner
                .egraph
                .lookup_expr(&program)
                .map(|id| runner.egraph.find(id))
                == Some(runner.egraph.find(root));
        if equal {
            let mut expl = runner.explain_equivalence(&lhs, &program);
            for t in expl.make_flat_explanation().iter().skip(1) {
                let (rewrite, reversed) = step_rule(t).unwrap_or_default();
                proof.steps.push(ProofStep {
                    law: law_of(&rewrite),
                    rewrite,
                    reversed,
                    term: render_inline(&t.remove_rewrites().get_recexpr()),
                });
            }
            proof.proven = true;
        }
        out.push(proof);
    }
    Ok(Why {
        rule: rule.name.clone(),
        unsplit: render_inline(&lhs),
        proofs: out,
        unsplittable: table
            .unsplittable
            .iter()
            .map(|u| format!("{}: {}", u.index, u.reason))
            .collect(),
        run,
    })
}
