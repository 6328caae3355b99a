//! The algebra of collectives: `all_reduce = all_gather ∘ reduce_scatter`, `all_gather ∘ shard =
//! id` (both ways round), partial sums finished, adjacent collectives fused, re-sharding through
//! `all_to_all`, and point-to-point transfers of gathered tensors sent as shards.
//!
//! Together with the commuting rewrites of [`super::laws`] these move the all-gather half of an
//! all-reduce past the map operators that follow it: a reduce-scatter followed by operators that
//! are map on the scattered index runs them on the shards (sequence parallelism). The
//! reduce-scatter itself moves past an operator only when the operator is linear in that input,
//! which the law table does not record, so that direction is not generated.

use super::analysis::{DistAnalysis, DistEGraph, Meta};
use super::apply::{apply_checked, pattern, var, AstBuilder, Checked};
use super::error::RewriteError;
use super::lang::Dist;
use egg::{Applier, Id, PatternAst, Rewrite, Subst, Symbol, Var};

type Rw = Rewrite<Dist, DistAnalysis>;

/// `(all_reduce ?x ?a) => (all_gather (reduce_scatter ?x D ?a) D ?a)` for every dimension `D`.
struct SplitAllReduce;

impl Applier<Dist, DistAnalysis> for SplitAllReduce {
    fn apply_one(
        &self,
        egraph: &mut DistEGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Dist>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let rank = match subst.get(var("x")).map(|id| &egraph[*id].data) {
            Some(Meta::Tensor(t)) => t.shape.len(),
            _ => return vec![],
        };
        let mut out = Vec::new();
        for d in 0..rank {
            let mut b = AstBuilder::default();
            let x = b.var(var("x"));
            let a = b.var(var("a"));
            let dd = b.num(d);
            let rs = b.node(Dist::ReduceScatter([x, dd, a]));
            b.node(Dist::AllGather([rs, dd, a]));
            out.extend(apply_checked(
                egraph,
                eclass,
                subst,
                searcher_ast,
                &b.ast,
                rule_name,
            ));
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        vec![var("x"), var("a")]
    }
}

/// The collective algebra, each rewrite checked like every other.
pub fn collective_rewrites() -> Result<Vec<Rw>, RewriteError> {
    let table: [(&str, &str, &str); 14] = [
        (
            "all_gather∘reduce_scatter=all_reduce",
            "(all_gather (reduce_scatter ?x ?d ?a) ?d ?a)",
            "(all_reduce ?x ?a)",
        ),
        (
            "all_gather∘shard=id",
            "(all_gather (shard ?x ?d ?a) ?d ?a)",
            "?x",
        ),
        (
            "shard∘all_gather=id",
            "(shard (all_gather ?x ?d ?a) ?d ?a)",
            "?x",
        ),
        (
            "all_reduce∘partial=id",
            "(all_reduce (partial ?x ?a) ?a)",
            "?x",
        ),
        (
            "reduce_scatter∘partial=shard",
            "(reduce_scatter (partial ?x ?a) ?d ?a)",
            "(shard ?x ?d ?a)",
        ),
        (
            "shard∘all_gather=all_to_all",
            "(shard (all_gather ?x ?i ?a) ?j ?a)",
            "(all_to_all ?x ?i ?j ?a)",
        ),
        (
            "all_to_all∘shard=shard",
            "(all_to_all (shard ?x ?i ?a) ?i ?j ?a)",
            "(shard ?x ?j ?a)",
        ),
        (
            "all_to_all∘all_to_all=all_to_all",
            "(all_to_all (all_to_all ?x ?i ?j ?a) ?j ?k ?a)",
            "(all_to_all ?x ?i ?k ?a)",
        ),
        (
            "all_to_all∘all_to_all=id",
            "(all_to_all (all_to_all ?x ?i ?j ?a) ?j ?i ?a)",
            "?x",
        ),
        (
            "all_gather∘all_to_all=all_gather",
            "(all_gather (all_to_all ?x ?i ?j ?a) ?j ?a)",
            "(all_gather ?x ?i ?a)",
        ),
        (
            "all_to_all∘reduce_scatter=reduce_scatter",
            "(all_to_all (reduce_scatter ?x ?i ?a) ?i ?j ?a)",
            "(reduce_scatter ?x ?j ?a)",
        ),
        ("replicate=id", "(replicate ?x ?a)", "?x"),
        (
            "send∘all_gather=all_gather∘send",
            "(send (all_gather ?x ?d ?a) ?b)",
            "(all_gather (send ?x ?b) ?d ?a)",
        ),
        (
            "recv∘all_gather=all_gather∘recv",
            "(recv (all_gather ?x ?d ?a) ?b)",
            "(all_gather (recv ?x ?b) ?d ?a)",
        ),
    ];
    let mut out = Vec::new();
    for (name, lhs, rhs) in table {
        out.push(
            Rewrite::new(name, pattern(lhs)?, Checked::parse(rhs)?)
                .map_err(RewriteError::Rewrite)?,
        );
    }
    let lhs = pattern("(all_reduce ?x ?a)")?;
    out.push(
        Rewrite::new("all_reduce=all_gather∘reduce_scatter", lhs, SplitAllReduce)
            .map_err(RewriteError::Rewrite)?,
    );
    Ok(out)
}
