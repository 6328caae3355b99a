//! Rewrites generated from the rules and the law table: for every rule and every splittable index,
//! the law of its kind read from [`IndexKind::law`] — map `f(concat xs) = concat f(xs)`,
//! reduce-sum / reduce-max `f(concat xs) = Σ f(xs)` (a partial result), stat (statistics
//! combined across devices), window (halo exchanged) — and, for every map index, that the operator
//! commutes with `all_gather` and `shard` along it. Nothing is written per rule.
//!
//! Rewrite names trace back to the rule file and index: `linear.yaml:k:reduce-sum`.

use super::analysis::{axis_leaf, DistAnalysis, DistEGraph, Meta};
use super::apply::{apply_checked, var, AstBuilder, Checked};
use super::error::RewriteError;
use super::lang::{Dist, Marks};
use crate::rules::law::OutputLaw;
use crate::rules::{IndexKind, OpRule, ReduceOp};
use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

type Rw = Rewrite<Dist, DistAnalysis>;

/// The file a rule came from, as rewrite names cite it: `linear.yaml`.
pub fn rule_file(rule: &OpRule) -> String {
    rule.file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("{}.yaml", rule.name))
}

/// The name of the law rewrite of `index` of `rule`.
pub fn law_name(rule: &OpRule, index: &str, kind: IndexKind) -> String {
    format!("{}:{index}:{kind}", rule_file(rule))
}

fn input_var(k: usize) -> Var {
    var(&format!("x{k}"))
}

/// `(op RULE ?bind ?marks ?x0 .. ?xn)`, with input `replace` swapped for a given node.
fn op_pattern(b: &mut AstBuilder, rule: &OpRule, replace: Option<(usize, Id)>) -> Id {
    let name = b.node(Dist::Name(Symbol::from(rule.name.as_str())));
    let bind = b.var(var("bind"));
    let marks = b.var(var("marks"));
    let mut kids = vec![name, bind, marks];
    for k in 0..rule.inputs.len() {
        kids.push(match replace {
            Some((r, id)) if r == k => id,
            _ => b.var(input_var(k)),
        });
    }
    b.node(Dist::Op(kids.into()))
}

/// Whether input `k`'s einsum term iterates over index `i` (a term lacking a reduce-sum index
/// adds its value once: on a split, one device holds it and the others zeros).
pub fn term_has(rule: &OpRule, k: usize, i: &str) -> bool {
    match rule.term_of(k) {
        Some(term) => rule.term_indices(term).iter().any(|x| x == i),
        None => true,
    }
}

/// The right-hand side of the law of `index` on `axis`: the operator on the pieces, then the
/// combine the law table prescribes.
pub fn law_rhs(rule: &OpRule, index: &str, axis: &str, marks: &Marks) -> Option<PatternAst<Dist>> {
    let kind = rule.index(index)?.kind;
    let law = kind.law();
    if !law.splittable {
        return None;
    }
    let mut b = AstBuilder::default();
    let ax = b.node(axis_leaf(axis));
    let name = b.node(Dist::Name(Symbol::from(rule.name.as_str())));
    let bind = b.var(var("bind"));
    let marks = if law.finish.needs_mark() {
        b.node(Dist::Marks(marks.with(index, axis)))
    } else {
        b.var(var("marks"))
    };
    let mut kids = vec![name, bind, marks];
    for (k, t) in rule.inputs.iter().enumerate() {
        let x = b.var(input_var(k));
        kids.push(match t.position(index) {
            Some(d) => {
                let d = b.num(d);
                b.node(Dist::Shard([x, d, ax]))
            }
            None if kind == IndexKind::ReduceSum && !term_has(rule, k, index) => {
                b.node(Dist::Partial([x, ax]))
            }
            None => x,
        });
    }
    let op = b.node(Dist::Op(kids.into()));
    let gather = |b: &mut AstBuilder| {
        let d = b.num(rule.output.position(index)?);
        Some(b.node(Dist::AllGather([op, d, ax])))
    };
    match law.output {
        OutputLaw::Shard => gather(&mut b)?,
        OutputLaw::Partial(ReduceOp::Sum) => b.node(Dist::AllReduce([op, ax])),
        OutputLaw::Partial(ReduceOp::Max) => b.node(Dist::AllReduceMax([op, ax])),
        OutputLaw::ShardOrReplicate if rule.output.has(index) => gather(&mut b)?,
        OutputLaw::ShardOrReplicate => op,
    };
    Some(b.ast)
}

/// Applies the law of one index on every mesh axis where the operator is not yet split.
struct LawApplier {
    rule: OpRule,
    index: String,
    vars: Vec<Var>,
}

impl Applier<Dist, DistAnalysis> for LawApplier {
    fn apply_one(
        &self,
        egraph: &mut DistEGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Dist>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let marks = match subst.get(var("marks")).map(|id| &egraph[*id].data) {
            Some(Meta::Leaf(Dist::Marks(m))) => m.clone(),
            _ => return vec![],
        };
        let axes: Vec<String> = egraph
            .analysis
            .mesh
            .axes()
            .iter()
            .map(|(a, _)| a.clone())
            .collect();
        let mut out = Vec::new();
        for axis in axes {
            if let Some(rhs) = law_rhs(&self.rule, &self.index, &axis, &marks) {
                out.extend(apply_checked(
                    egraph,
                    eclass,
                    subst,
                    searcher_ast,
                    &rhs,
                    rule_name,
                ));
            }
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
}

fn op_vars(rule: &OpRule) -> Vec<Var> {
    let mut v = vec![var("bind"), var("marks")];
    v.extend((0..rule.inputs.len()).map(input_var));
    v
}

/// The law rewrites of `rule`: one per splittable index, named `FILE:INDEX:KIND`.
pub fn law_rewrites(rule: &OpRule) -> Result<Vec<Rw>, RewriteError> {
    let mut out = Vec::new();
    for ix in &rule.indices {
        if !ix.kind.law().splittable {
            continue;
        }
        let mut b = AstBuilder::default();
        op_pattern(&mut b, rule, None);
        let applier = LawApplier {
            rule: rule.clone(),
            index: ix.name.clone(),
            vars: op_vars(rule),
        };
        out.push(
            Rewrite::new(
                law_name(rule, &ix.name, ix.kind),
                Pattern::new(b.ast),
                applier,
            )
            .map_err(RewriteError::Rewrite)?,
        );
    }
    Ok(out)
}

/// The dimension holding `index` in `t`, if `index` is its outer part.
fn outer_position(t: &crate::rules::Tensor, index: &str) -> Option<usize> {
    let d = t.position(index)?;
    (t.dims[d].first().map(String::as_str) == Some(index)).then_some(d)
}

/// For every map index of `rule`: `f(.., all_gather(y), ..) = all_gather(f(.., y, ..))` and
/// `shard(f(xs)) = f(shard(xs))` along it, the other inputs that have the index sharded too.
pub fn commute_rewrites(rule: &OpRule) -> Result<Vec<Rw>, RewriteError> {
    let mut out = Vec::new();
    for ix in rule.indices.iter().filter(|i| i.kind == IndexKind::Map) {
        let i = ix.name.as_str();
        let Some(out_dim) = outer_position(&rule.output, i) else {
            continue;
        };
        let dims: Vec<Option<usize>> = rule.inputs.iter().map(|t| outer_position(t, i)).collect();
        if rule
            .inputs
            .iter()
            .zip(&dims)
            .any(|(t, d)| t.has(i) && d.is_none())
        {
            continue;
        }
        // The operator applied to the pieces: inputs with the index sharded, except `skip`.
        let sharded_op = |b: &mut AstBuilder, skip: Option<(usize, Id)>| {
            let ax = b.var(var("a"));
            let name = b.node(Dist::Name(Symbol::from(rule.name.as_str())));
            let bind = b.var(var("bind"));
            let marks = b.var(var("marks"));
            let mut kids = vec![name, bind, marks];
            for (k, d) in dims.iter().enumerate() {
                kids.push(match (skip, d) {
                    (Some((s, id)), _) if s == k => id,
                    (_, Some(d)) => {
                        let x = b.var(input_var(k));
                        let d = b.num(*d);
                        b.node(Dist::Shard([x, d, ax]))
                    }
                    (_, None) => b.var(input_var(k)),
                });
            }
            (b.node(Dist::Op(kids.into())), ax)
        };
        for (k, d) in dims.iter().enumerate() {
            let Some(d) = d else { continue };
            let mut lhs = AstBuilder::default();
            let y = lhs.var(var("y"));
            let dk = lhs.num(*d);
            let a = lhs.var(var("a"));
            let g = lhs.node(Dist::AllGather([y, dk, a]));
            op_pattern(&mut lhs, rule, Some((k, g)));
            let mut rhs = AstBuilder::default();
            let y = rhs.var(var("y"));
            let (op, ax) = sharded_op(&mut rhs, Some((k, y)));
            let od = rhs.num(out_dim);
            rhs.node(Dist::AllGather([op, od, ax]));
            let name = format!(
                "{}:{i}:map:through-all_gather({})",
                rule_file(rule),
                rule.inputs[k].name
            );
            out.push(
                Rewrite::new(name, Pattern::new(lhs.ast), Checked(Pattern::new(rhs.ast)))
                    .map_err(RewriteError::Rewrite)?,
            );
        }
        let mut lhs = AstBuilder::default();
        let op = op_pattern(&mut lhs, rule, None);
        let od = lhs.num(out_dim);
        let a = lhs.var(var("a"));
        lhs.node(Dist::Shard([op, od, a]));
        let mut rhs = AstBuilder::default();
        sharded_op(&mut rhs, None);
        let name = format!("{}:{i}:map:through-shard", rule_file(rule));
        out.push(
            Rewrite::new(name, Pattern::new(lhs.ast), Checked(Pattern::new(rhs.ast)))
                .map_err(RewriteError::Rewrite)?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;

    #[test]
    fn rewrite_names_trace_to_the_rule_file_and_index() {
        let rules = RuleSet::embedded().unwrap();
        let names: Vec<String> = law_rewrites(rules.get("linear").unwrap())
            .unwrap()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "linear.yaml:b:map",
                "linear.yaml:k:reduce-sum",
                "linear.yaml:n:map"
            ]
        );
    }

    #[test]
    fn opaque_indices_have_no_law() {
        let rules = RuleSet::embedded().unwrap();
        let concat = rules.get("concat").unwrap();
        let names: Vec<String> = law_rewrites(concat)
            .unwrap()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(names, ["concat.yaml:b:map"]);
        assert!(law_rhs(concat, "m", "a", &Marks::default()).is_none());
    }

    #[test]
    fn every_rule_generates_its_rewrites() {
        for rule in RuleSet::embedded().unwrap().iter() {
            let laws = law_rewrites(rule).unwrap();
            let splittable = rule
                .indices
                .iter()
                .filter(|i| i.kind.law().splittable)
                .count();
            assert_eq!(laws.len(), splittable, "{}", rule.name);
            commute_rewrites(rule).unwrap();
        }
    }
}
