//! The checked applier: a rewrite's result is added only when it is a well-formed distributed
//! program whose shape and placements equal those of the class it joins.

use super::analysis::{DistAnalysis, DistEGraph, Meta};
use super::error::RewriteError;
use super::lang::Dist;
use egg::{Applier, ENodeOrVar, Id, Pattern, PatternAst, Subst, Symbol, Var};

/// A pattern right-hand side that is checked before it is added.
#[derive(Debug, Clone)]
pub struct Checked(pub Pattern<Dist>);

/// Parses a pattern text, naming it when it is refused.
pub fn pattern(text: &str) -> Result<Pattern<Dist>, RewriteError> {
    text.parse()
        .map_err(|e: egg::RecExprParseError<_>| RewriteError::Pattern {
            pattern: text.into(),
            why: e.to_string(),
        })
}

impl Checked {
    /// Parses the pattern text.
    pub fn parse(text: &str) -> Result<Checked, RewriteError> {
        pattern(text).map(Checked)
    }
}

impl Applier<Dist, DistAnalysis> for Checked {
    fn apply_one(
        &self,
        egraph: &mut DistEGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Dist>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        apply_checked(egraph, eclass, subst, searcher_ast, &self.0.ast, rule_name)
    }

    fn get_pattern_ast(&self) -> Option<&PatternAst<Dist>> {
        Some(&self.0.ast)
    }

    fn vars(&self) -> Vec<Var> {
        self.0.vars()
    }
}

/// The data `rhs` would have once instantiated with `subst`.
pub fn instantiate(egraph: &DistEGraph, rhs: &PatternAst<Dist>, subst: &Subst) -> Meta {
    let mut metas: Vec<Meta> = Vec::with_capacity(rhs.len());
    for node in rhs.as_ref() {
        let m = match node {
            ENodeOrVar::Var(v) => match subst.get(*v) {
                Some(id) => egraph[*id].data.clone(),
                None => Meta::Invalid(RewriteError::Unbound(v.to_string())),
            },
            ENodeOrVar::ENode(n) => egraph.analysis.infer(n, |c| &metas[usize::from(c)]),
        };
        metas.push(m);
    }
    metas
        .pop()
        .unwrap_or(Meta::Invalid(RewriteError::EmptyPattern))
}

/// Adds `rhs` under `subst` and unions it with `eclass` when its data equals the class's;
/// otherwise counts a rejection and adds nothing.
pub fn apply_checked(
    egraph: &mut DistEGraph,
    eclass: Id,
    subst: &Subst,
    searcher_ast: Option<&PatternAst<Dist>>,
    rhs: &PatternAst<Dist>,
    rule_name: Symbol,
) -> Vec<Id> {
    let got = instantiate(egraph, rhs, subst);
    let ok = matches!(got, Meta::Tensor(_)) && got == egraph[eclass].data;
    if !ok {
        egraph.analysis.stats.rejected += 1;
        return vec![];
    }
    match searcher_ast {
        Some(lhs) => {
            let (id, did) = egraph.union_instantiations(lhs, rhs, subst, rule_name);
            if did {
                vec![id]
            } else {
                vec![]
            }
        }
        None => {
            let id = egraph.add_instantiation(rhs, subst);
            if egraph.union(eclass, id) {
                vec![eclass]
            } else {
                vec![]
            }
        }
    }
}

/// Builds pattern ASTs node by node.
#[derive(Default)]
pub struct AstBuilder {
    /// The pattern so far; its last node is the root.
    pub ast: PatternAst<Dist>,
}

impl AstBuilder {
    /// Adds a node.
    pub fn node(&mut self, n: Dist) -> Id {
        self.ast.add(ENodeOrVar::ENode(n))
    }

    /// Adds a variable.
    pub fn var(&mut self, v: Var) -> Id {
        self.ast.add(ENodeOrVar::Var(v))
    }

    /// Adds a dimension number.
    pub fn num(&mut self, n: usize) -> Id {
        self.node(Dist::Num(n as u64))
    }
}

/// The variable `?name`.
pub fn var(name: &str) -> Var {
    // Names built here always start with `?`.
    format!("?{name}")
        .parse()
        .unwrap_or_else(|_| Var::from_u32(0))
}
