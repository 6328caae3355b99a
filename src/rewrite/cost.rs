//! Exact costs of distributed programs: per device, the FLOPs an operator computes (its split
//! table entry, [`crate::rules::split::derive`]), the wire bytes of each collective
//! ([`CollectiveKind::wire_bytes`]) and the activation bytes kept for the backward pass. Costs are
//! formulas; extraction compares them exactly under symbol values.

use super::analysis::{DistAnalysis, DistEGraph, Meta, TensorMeta};
use super::error::RewriteError;
use super::lang::Dist;
use super::opsplit::OpSplit;
use crate::rules::split::derive;
use crate::rules::{AxisSplit, CollectiveKind, Placement};
use crate::sym::{Bindings, Poly, Rational};
use egg::{CostFunction, Id, Language, RecExpr};
use num_bigint::BigInt;
use serde::Serialize;
use std::collections::HashMap;

/// Per-device cost of one node (or a whole program), as formulas.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeCost {
    /// FLOPs computed by one device.
    pub compute: Poly,
    /// Bytes one device sends on the wire.
    pub comm: Poly,
    /// Bytes of activations one device keeps for the backward pass.
    pub activation: Poly,
}

impl NodeCost {
    fn add_scaled(&mut self, other: &NodeCost, times: &Poly) {
        self.compute += times * &other.compute;
        self.comm += times * &other.comm;
        self.activation += times * &other.activation;
    }
}

/// How the three costs weigh against each other in one scalar, in FLOP-equivalents.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// FLOPs one byte on the wire is worth: the machine balance of the link (κ of DESIGN §3).
    pub flops_per_wire_byte: Rational,
    /// FLOPs one byte of saved activations is worth (a tie-breaker between equal schedules).
    pub flops_per_saved_byte: Rational,
}

impl Default for Weights {
    /// κ ≈ 2200: about 989 dense bf16 TFLOP/s over 450 GB/s of intra-node link per direction
    /// (an H100 SXM node); one FLOP per saved byte.
    fn default() -> Self {
        Weights {
            flops_per_wire_byte: Rational::from_integer(2200.into()),
            flops_per_saved_byte: Rational::from_integer(1.into()),
        }
    }
}

fn int(n: u64) -> Poly {
    Poly::from_bigint(BigInt::from(n))
}

impl DistAnalysis {
    /// Bytes of `x` in one call of a collective on axis `n`: sharded by every other axis.
    fn group_bytes(&self, x: &TensorMeta, n: Option<usize>) -> Result<Poly, RewriteError> {
        let mut b: Poly = x.shape.iter().product::<Poly>() * int(x.elem_bytes.into());
        for (m, p) in x.placements.iter().enumerate() {
            if Some(m) != n && matches!(p, Placement::Shard(_)) {
                b = b.checked_div(&self.mesh.axes()[m].1)?;
            }
        }
        Ok(b)
    }

    /// The per-device cost of `node`, whose children have data `child`.
    pub fn node_cost<'a>(
        &self,
        node: &Dist,
        child: impl Fn(Id) -> &'a Meta,
    ) -> Result<NodeCost, RewriteError> {
        let t = |id: Id| child(id).tensor();
        let axis = |id: Id| match child(id) {
            Meta::Leaf(Dist::Name(s)) => self
                .mesh
                .position(s.as_str())
                .ok_or_else(|| RewriteError::NoAxis(s.to_string())),
            other => Err(RewriteError::Expected {
                wanted: "a mesh axis",
                found: format!("{other:?}"),
            }),
        };
        let wire = |kind: CollectiveKind, x: &TensorMeta, n: usize, local: bool| {
            let size = self.group_bytes(x, if local { None } else { Some(n) })?;
            Ok(NodeCost {
                comm: kind.wire_bytes(&size, &self.mesh.axes()[n].1),
                ..NodeCost::default()
            })
        };
        match node {
            Dist::AllReduce([x, a]) | Dist::AllReduceMax([x, a]) => {
                wire(CollectiveKind::AllReduce, t(*x)?, axis(*a)?, false)
            }
            Dist::ReduceScatter([x, _, a]) => {
                wire(CollectiveKind::ReduceScatter, t(*x)?, axis(*a)?, false)
            }
            Dist::AllGather([x, _, a]) => wire(CollectiveKind::AllGather, t(*x)?, axis(*a)?, false),
            Dist::AllToAll([x, _, _, a]) => wire(CollectiveKind::AllToAll, t(*x)?, axis(*a)?, true),
            Dist::Send([x, a]) => wire(CollectiveKind::SendRecv, t(*x)?, axis(*a)?, true),
            Dist::Op(children) => self.op_cost(children, &child),
            _ => Ok(NodeCost::default()),
        }
    }

    fn op_cost<'a>(
        &self,
        children: &[Id],
        child: &impl Fn(Id) -> &'a Meta,
    ) -> Result<NodeCost, RewriteError> {
        let [rule, bind, marks, inputs @ ..] = children else {
            return Err(RewriteError::MalformedOp("a rule, extents and marks"));
        };
        let (
            Meta::Leaf(Dist::Name(rule)),
            Meta::Leaf(Dist::Extents(bind)),
            Meta::Leaf(Dist::Marks(marks)),
        ) = (child(*rule), child(*bind), child(*marks))
        else {
            return Err(RewriteError::MalformedOp("a rule name, extents and marks"));
        };
        let rule = self
            .rule(rule.as_str())
            .ok_or_else(|| RewriteError::UnknownRule(rule.to_string()))?;
        let ins: Vec<&TensorMeta> = inputs
            .iter()
            .map(|&i| child(i).tensor())
            .collect::<Result<_, _>>()?;
        let split = OpSplit::infer(self, rule, bind, marks, &ins)?;
        let splits: Vec<AxisSplit> = split
            .index
            .iter()
            .zip(self.mesh.axes())
            .filter_map(|(i, (axis, size))| {
                Some(AxisSplit {
                    index: i.clone()?,
                    axis: axis.clone(),
                    size: size.clone(),
                })
            })
            .collect();
        let entry =
            derive(rule, &splits, self.compute_bytes).map_err(|e| RewriteError::Split(e.reason))?;
        let sub = |p: &Poly| p.substitute_all(&split.bind).map_err(RewriteError::from);
        let mut comm = Poly::zero();
        // Statistics and halo collectives happen inside the operator; an all-reduce of the
        // output is a node of its own.
        for c in &entry.forward.collectives {
            let inside = splits.iter().any(|s| {
                s.axis == c.axis
                    && rule
                        .index(&s.index)
                        .is_some_and(|i| i.kind.law().finish.needs_mark())
            });
            if inside {
                comm += sub(&c.wire_bytes)?;
            }
        }
        Ok(NodeCost {
            compute: sub(&entry.forward.compute)?,
            comm,
            activation: sub(&entry.saved_bytes)?,
        })
    }

    /// The data of every node of a program, in order.
    pub fn program_meta(&self, expr: &RecExpr<Dist>) -> Vec<Meta> {
        let mut metas: Vec<Meta> = Vec::with_capacity(expr.len());
        for (_, node) in expr.items() {
            let m = self.infer(node, |c| &metas[usize::from(c)]);
            metas.push(m);
        }
        metas
    }

    /// The per-device cost of a whole program: each distinct node once per execution, a
    /// `repeat`'s body as many times as it repeats.
    pub fn program_cost(&self, expr: &RecExpr<Dist>) -> Result<NodeCost, RewriteError> {
        let metas = self.program_meta(expr);
        if let Some(Meta::Invalid(why)) = metas.iter().find(|m| matches!(m, Meta::Invalid(_))) {
            return Err(why.clone());
        }
        let nodes = expr.as_ref();
        let mut times: Vec<BigInt> = vec![BigInt::from(0); nodes.len()];
        if let Some(last) = times.last_mut() {
            *last = BigInt::from(1);
        }
        for i in (0..nodes.len()).rev() {
            let here = times[i].clone();
            let factor = match &nodes[i] {
                Dist::Repeat([n, _]) => match &nodes[usize::from(*n)] {
                    Dist::Num(n) => BigInt::from(*n),
                    _ => BigInt::from(1),
                },
                _ => BigInt::from(1),
            };
            for (k, c) in nodes[i].children().iter().enumerate() {
                let m = if matches!(nodes[i], Dist::Repeat(_)) && k == 1 {
                    &here * &factor
                } else {
                    here.clone()
                };
                let slot = &mut times[usize::from(*c)];
                if m > *slot {
                    *slot = m;
                }
            }
        }
        let mut total = NodeCost::default();
        for (i, node) in nodes.iter().enumerate() {
            if times[i] == BigInt::from(0) {
                continue;
            }
            let c = self.node_cost(node, |c| &metas[usize::from(c)])?;
            total.add_scaled(&c, &Poly::from_bigint(times[i].clone()));
        }
        Ok(total)
    }
}

/// A cost compared exactly; `Unknown` (a formula with an unbound symbol) is worse than any.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Score {
    /// FLOP-equivalents.
    Finite(Rational),
    /// Could not be evaluated.
    Unknown,
}

impl Score {
    /// The sum of two costs.
    pub fn add(&self, other: &Score) -> Score {
        match (self, other) {
            (Score::Finite(a), Score::Finite(b)) => Score::Finite(a + b),
            _ => Score::Unknown,
        }
    }

    /// The cost `n` times over.
    pub fn times(&self, n: u64) -> Score {
        match self {
            Score::Finite(a) => Score::Finite(a * Rational::from_integer(n.into())),
            Score::Unknown => Score::Unknown,
        }
    }
}

/// The scalar cost of a [`NodeCost`] under `values` and `weights`.
pub fn score(c: &NodeCost, values: &Bindings, weights: &Weights) -> Score {
    let eval = |p: &Poly| p.eval(values).ok();
    match (eval(&c.compute), eval(&c.comm), eval(&c.activation)) {
        (Some(f), Some(b), Some(a)) => {
            Score::Finite(f + b * &weights.flops_per_wire_byte + a * &weights.flops_per_saved_byte)
        }
        _ => Score::Unknown,
    }
}

/// Extraction cost: each node's exact per-device cost under symbol values, summed over the
/// tree, a `repeat` counting its body as many times as it repeats.
pub struct ExactCost<'a> {
    egraph: &'a DistEGraph,
    values: &'a Bindings,
    weights: Weights,
    cache: HashMap<Dist, Score>,
}

impl<'a> ExactCost<'a> {
    /// A cost function over `egraph` under `values`.
    pub fn new(egraph: &'a DistEGraph, values: &'a Bindings, weights: Weights) -> Self {
        ExactCost {
            egraph,
            values,
            weights,
            cache: HashMap::new(),
        }
    }

    /// The cost of `node` alone.
    pub fn own(&mut self, node: &Dist) -> Score {
        if let Some(s) = self.cache.get(node) {
            return s.clone();
        }
        let g = self.egraph;
        let s = match g.analysis.node_cost(node, |c| &g[c].data) {
            Ok(c) => score(&c, self.values, &self.weights),
            Err(_) => Score::Unknown,
        };
        self.cache.insert(node.clone(), s.clone());
        s
    }
}

impl CostFunction<Dist> for ExactCost<'_> {
    type Cost = Score;

    fn cost<C>(&mut self, enode: &Dist, mut costs: C) -> Score
    where
        C: FnMut(Id) -> Score,
    {
        let own = self.own(enode);
        if let Dist::Repeat([n, body]) = enode {
            let n = match &self.egraph[*n].data {
                Meta::Leaf(Dist::Num(n)) => *n,
                _ => return Score::Unknown,
            };
            return own.add(&costs(*body).times(n));
        }
        enode
            .children()
            .iter()
            .fold(own, |acc, c| acc.add(&costs(*c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::analysis::Mesh;
    use crate::rules::RuleSet;

    fn cost(text: &str) -> NodeCost {
        let rules = RuleSet::embedded().unwrap();
        let mesh = Mesh::new([("a".to_string(), Poly::symbol("p"))]);
        let ctx = DistAnalysis::new(rules.get("linear").cloned(), mesh, 2);
        ctx.program_cost(&text.parse().unwrap()).unwrap()
    }

    const P: &str = "(op linear {b=b,k=k,n=n} <> (shard (tensor x [b,k]) 1 a) \
                     (shard (tensor w [k,n]) 0 a) (partial (tensor bias [n]) a))";

    #[test]
    fn collectives_cost_their_ring_wire_bytes() {
        let p = |s: &str| Poly::parse(s).unwrap();
        let op = cost(P);
        assert_eq!(op.comm, Poly::zero());
        assert_eq!(
            cost(&format!("(all_reduce {P} a)")).comm,
            p("2*(1 - 1/p)*2*b*n")
        );
        let rs = cost(&format!("(reduce_scatter {P} 0 a)"));
        assert_eq!(rs.comm, p("(1 - 1/p)*2*b*n"));
        let ag = cost(&format!("(all_gather (reduce_scatter {P} 0 a) 0 a)"));
        assert_eq!(ag.comm, p("2*(1 - 1/p)*2*b*n"));
        assert_eq!(ag.compute, op.compute);
    }

    #[test]
    fn operators_cost_their_split_table_entry() {
        let c = cost(P);
        // The contraction is split; the bias term is computed on every device.
        assert_eq!(c.compute, Poly::parse("2*b*k*n/p + b*n").unwrap());
        assert_eq!(c.activation, Poly::parse("2*b*k/p").unwrap());
        let r = cost(&format!("(repeat 3 {P})"));
        assert_eq!(r.compute, Poly::int(3) * c.compute);
    }
}
