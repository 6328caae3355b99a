//! The e-class analysis: the global shape, element size and per-axis placement of every
//! tensor-valued class, inferred from the law table. An operator node is well formed only when
//! its inputs' placements are one of the splits the law of the split index allows; its output
//! placement is that law's output (`Shard`, `Partial`, or `Shard`/`Replicate` for statistics).

use super::error::RewriteError;
use super::lang::Dist;
use super::opsplit::OpSplit;
use crate::rules::{OpRule, Placement, ReduceOp};
use crate::sym::Poly;
use egg::{Analysis, DidMerge, EGraph, Id, Symbol};
use std::collections::BTreeMap;

/// A device mesh: named axes with their sizes (symbols such as `p_a`, or numbers).
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    axes: Vec<(String, Poly)>,
}

impl Mesh {
    /// A mesh with these axes, in order.
    pub fn new(axes: impl IntoIterator<Item = (String, Poly)>) -> Mesh {
        Mesh {
            axes: axes.into_iter().collect(),
        }
    }

    /// The axes, in order.
    pub fn axes(&self) -> &[(String, Poly)] {
        &self.axes
    }

    /// The position of axis `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|(a, _)| a == name)
    }
}

/// What the analysis knows about a tensor-valued class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Global extents.
    pub shape: Vec<Poly>,
    /// Bytes per element.
    pub elem_bytes: u32,
    /// Placement on each mesh axis, in mesh order.
    pub placements: Vec<Placement>,
}

/// The analysis data of a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meta {
    /// A tensor-valued class.
    Tensor(TensorMeta),
    /// An attribute leaf (sizes, marks, a shape, a number, a name).
    Leaf(Dist),
    /// A node that is not a well-formed distributed program, with the reason.
    Invalid(RewriteError),
}

impl Meta {
    /// The tensor data, if this is a well-formed tensor.
    pub fn tensor(&self) -> Result<&TensorMeta, RewriteError> {
        match self {
            Meta::Tensor(t) => Ok(t),
            Meta::Invalid(why) => Err(why.clone()),
            Meta::Leaf(l) => Err(RewriteError::NotATensor(l.to_string())),
        }
    }
}

/// Counters of what the checks turned away.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Rewrite results refused by the shape and placement check.
    pub rejected: usize,
    /// Merges of classes whose data disagreed (zero for sound rewrites).
    pub conflicts: usize,
}

/// The analysis: the rules operators refer to, the mesh and the compute element size.
#[derive(Debug, Clone)]
pub struct DistAnalysis {
    rules: BTreeMap<String, OpRule>,
    /// The mesh.
    pub mesh: Mesh,
    /// Bytes of a compute element (2 for bf16).
    pub compute_bytes: u32,
    /// What the checks turned away.
    pub stats: CheckStats,
}

/// An e-graph of distributed programs.
pub type DistEGraph = EGraph<Dist, DistAnalysis>;

impl DistAnalysis {
    /// An analysis over `rules` on `mesh`.
    pub fn new(rules: impl IntoIterator<Item = OpRule>, mesh: Mesh, compute_bytes: u32) -> Self {
        DistAnalysis {
            rules: rules.into_iter().map(|r| (r.name.clone(), r)).collect(),
            mesh,
            compute_bytes,
            stats: CheckStats::default(),
        }
    }

    /// The rule called `name`.
    pub fn rule(&self, name: &str) -> Option<&OpRule> {
        self.rules.get(name)
    }

    /// The rules, by name.
    pub fn rules(&self) -> impl Iterator<Item = &OpRule> {
        self.rules.values()
    }

    /// The data of a node whose children have data `child`.
    pub fn infer<'a>(&self, node: &Dist, child: impl Fn(Id) -> &'a Meta) -> Meta {
        if node.is_leaf() {
            return Meta::Leaf(node.clone());
        }
        match self.infer_tensor(node, &child) {
            Ok(t) => Meta::Tensor(t),
            Err(why) => Meta::Invalid(why),
        }
    }

    fn axis<'a>(&self, m: &'a Meta) -> Result<(usize, &'a str), RewriteError> {
        match m {
            Meta::Leaf(Dist::Name(s)) => {
                let name = s.as_str();
                let n = self
                    .mesh
                    .position(name)
                    .ok_or_else(|| RewriteError::NoAxis(name.into()))?;
                Ok((n, name))
            }
            other => Err(RewriteError::Expected {
                wanted: "a mesh axis",
                found: format!("{other:?}"),
            }),
        }
    }

    fn infer_tensor<'a>(
        &self,
        node: &Dist,
        child: &impl Fn(Id) -> &'a Meta,
    ) -> Result<TensorMeta, RewriteError> {
        let t = |id: Id| child(id).tensor();
        let num = |id: Id| match child(id) {
            Meta::Leaf(Dist::Num(n)) => usize::try_from(*n).map_err(|_| RewriteError::Number(*n)),
            other => Err(RewriteError::Expected {
                wanted: "a number",
                found: format!("{other:?}"),
            }),
        };
        let axis = |id: Id| self.axis(child(id));
        let retag = |x: &TensorMeta, n: usize, from: Placement, to: Placement, what| {
            self.retag(x, n, (from, to), what)
        };
        let sum = Placement::Partial(ReduceOp::Sum);
        match node {
            Dist::Tensor([_, shape]) => self.tensor_leaf(child(*shape)),
            Dist::View([x, shape, map]) => self.view(t(*x)?, child(*shape), child(*map)),
            Dist::Shard([x, d, a]) => {
                let d = num(*d)?;
                retag(
                    t(*x)?,
                    axis(*a)?.0,
                    Placement::Replicate,
                    Placement::Shard(d),
                    "shard",
                )
            }
            Dist::Replicate([x, a]) => {
                let r = Placement::Replicate;
                retag(t(*x)?, axis(*a)?.0, r, r, "replicate")
            }
            Dist::Partial([x, a]) => {
                retag(t(*x)?, axis(*a)?.0, Placement::Replicate, sum, "partial")
            }
            Dist::AllReduce([x, a]) => {
                retag(t(*x)?, axis(*a)?.0, sum, Placement::Replicate, "all_reduce")
            }
            Dist::AllReduceMax([x, a]) => {
                let max = Placement::Partial(ReduceOp::Max);
                retag(
                    t(*x)?,
                    axis(*a)?.0,
                    max,
                    Placement::Replicate,
                    "all_reduce_max",
                )
            }
            Dist::ReduceScatter([x, d, a]) => {
                let d = num(*d)?;
                retag(
                    t(*x)?,
                    axis(*a)?.0,
                    sum,
                    Placement::Shard(d),
                    "reduce_scatter",
                )
            }
            Dist::AllGather([x, d, a]) => {
                let d = num(*d)?;
                let r = Placement::Replicate;
                retag(t(*x)?, axis(*a)?.0, Placement::Shard(d), r, "all_gather")
            }
            Dist::AllToAll([x, i, j, a]) => {
                let (i, j) = (num(*i)?, num(*j)?);
                if i == j {
                    return Err(RewriteError::AllToAllSelf);
                }
                let to = Placement::Shard(j);
                retag(t(*x)?, axis(*a)?.0, Placement::Shard(i), to, "all_to_all")
            }
            Dist::Send([x, a]) | Dist::Recv([x, a]) => {
                axis(*a)?;
                Ok(t(*x)?.clone())
            }
            Dist::Seq([a, b]) => {
                t(*a)?;
                Ok(t(*b)?.clone())
            }
            Dist::Repeat([n, body]) => {
                num(*n)?;
                Ok(t(*body)?.clone())
            }
            Dist::Op(children) => self.op(children, child),
            leaf => Err(RewriteError::NotAProgram(leaf.to_string())),
        }
    }

    /// `x` with its placement on mesh axis `n` changed `from` → `to` by the collective or
    /// annotation `what`; refused where `x` is not placed `from` there, or where `to` shards a
    /// dimension the axis cannot cut.
    fn retag(
        &self,
        x: &TensorMeta,
        n: usize,
        (from, to): (Placement, Placement),
        what: &'static str,
    ) -> Result<TensorMeta, RewriteError> {
        if x.placements[n] != from {
            return Err(RewriteError::Retag {
                what,
                needs: from,
                axis: self.mesh.axes[n].0.clone(),
                found: x.placements[n],
            });
        }
        if let Placement::Shard(d) = to {
            check_dim(x, d, n)?;
        }
        let mut out = x.clone();
        out.placements[n] = to;
        Ok(out)
    }

    /// A named tensor of the shape `shape`: replicated on every mesh axis, or sharded on the
    /// first along the dimension the shape names.
    fn tensor_leaf(&self, shape: &Meta) -> Result<TensorMeta, RewriteError> {
        let Meta::Leaf(Dist::Shape(s)) = shape else {
            return Err(RewriteError::Expected {
                wanted: "a shape",
                found: format!("{shape:?}"),
            });
        };
        let mut placements = vec![Placement::Replicate; self.mesh.axes.len()];
        if let Some(d) = s.shard {
            match placements.first_mut() {
                Some(p) if d < s.dims.len() => *p = Placement::Shard(d),
                _ => {
                    return Err(RewriteError::Expected {
                        wanted: "a dimension of the shape on a mesh axis",
                        found: s.to_string(),
                    })
                }
            }
        }
        Ok(TensorMeta {
            shape: s.dims.iter().map(|d| d.0.clone()).collect(),
            elem_bytes: s.elem_bytes.unwrap_or(self.compute_bytes),
            placements,
        })
    }

    fn view(&self, x: &TensorMeta, shape: &Meta, map: &Meta) -> Result<TensorMeta, RewriteError> {
        let (Meta::Leaf(Dist::Shape(s)), Meta::Leaf(Dist::Layout(map))) = (shape, map) else {
            return Err(RewriteError::ViewArguments);
        };
        let shape: Vec<Poly> = s.dims.iter().map(|d| d.0.clone()).collect();
        let (a, b): (Poly, Poly) = (x.shape.iter().product(), shape.iter().product());
        if a != b {
            return Err(RewriteError::ViewElements {
                from: a.to_string(),
                to: b.to_string(),
            });
        }
        let mut out = TensorMeta {
            shape,
            elem_bytes: x.elem_bytes,
            placements: x.placements.clone(),
        };
        for p in out.placements.iter_mut() {
            if let Placement::Shard(d) = *p {
                let e = *map.0.get(&d).ok_or(RewriteError::ViewShard(d))?;
                *p = Placement::Shard(e);
                check_rank(&out.shape, e)?;
            }
        }
        Ok(out)
    }

    fn op<'a>(
        &self,
        children: &[Id],
        child: &impl Fn(Id) -> &'a Meta,
    ) -> Result<TensorMeta, RewriteError> {
        let [rule, bind, marks, inputs @ ..] = children else {
            return Err(RewriteError::MalformedOp("a rule, extents and marks"));
        };
        let (Meta::Leaf(Dist::Name(rule)), Meta::Leaf(Dist::Extents(bind))) =
            (child(*rule), child(*bind))
        else {
            return Err(RewriteError::MalformedOp("a rule name and extents"));
        };
        let Meta::Leaf(Dist::Marks(marks)) = child(*marks) else {
            return Err(RewriteError::MalformedOp("marks <..>"));
        };
        let rule = self
            .rule(rule.as_str())
            .ok_or_else(|| RewriteError::UnknownRule(rule.to_string()))?;
        let ins: Vec<&TensorMeta> = inputs
            .iter()
            .map(|&i| child(i).tensor())
            .collect::<Result<_, _>>()?;
        let split = OpSplit::infer(self, rule, bind, marks, &ins)?;
        Ok(TensorMeta {
            shape: split.output_shape,
            elem_bytes: rule.output.dtype.bytes(self.compute_bytes),
            placements: split.output,
        })
    }
}

fn check_rank(shape: &[Poly], d: usize) -> Result<(), RewriteError> {
    if d >= shape.len() {
        return Err(RewriteError::Rank {
            dim: d,
            rank: shape.len(),
        });
    }
    Ok(())
}

/// Dimension `d` exists and no axis other than `n` shards it.
fn check_dim(x: &TensorMeta, d: usize, n: usize) -> Result<(), RewriteError> {
    check_rank(&x.shape, d)?;
    let other = x
        .placements
        .iter()
        .enumerate()
        .any(|(m, p)| m != n && *p == Placement::Shard(d));
    if other {
        return Err(RewriteError::ShardedTwice(d));
    }
    Ok(())
}

/// `[a, b]` with formulas in canonical text.
pub fn show(shape: &[Poly]) -> String {
    let parts: Vec<String> = shape.iter().map(|p| p.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl Analysis<Dist> for DistAnalysis {
    type Data = Meta;

    fn make(egraph: &mut DistEGraph, enode: &Dist, _id: Id) -> Meta {
        let g: &DistEGraph = egraph;
        g.analysis.infer(enode, |c| &g[c].data)
    }

    fn merge(&mut self, to: &mut Meta, from: Meta) -> DidMerge {
        if *to == from {
            DidMerge(false, false)
        } else {
            self.stats.conflicts += 1;
            DidMerge(false, true)
        }
    }
}

/// The name of a mesh axis as a leaf.
pub fn axis_leaf(name: &str) -> Dist {
    Dist::Name(Symbol::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;
    use egg::RecExpr;

    fn meta(rule: &str, text: &str) -> Meta {
        let rules = RuleSet::embedded().unwrap();
        let mesh = Mesh::new([("a".to_string(), Poly::symbol("p"))]);
        let ctx = DistAnalysis::new(rules.get(rule).cloned(), mesh, 2);
        let e: RecExpr<Dist> = text.parse().unwrap();
        ctx.program_meta(&e).pop().unwrap()
    }

    const X: &str = "(tensor x [b,k])";
    const W: &str = "(tensor w [k,n])";
    const BIAS: &str = "(tensor bias [n])";

    #[test]
    fn placements_follow_the_law_table() {
        let row = format!(
            "(op linear {{b=b,k=k,n=n}} <> (shard {X} 1 a) (shard {W} 0 a) (partial {BIAS} a))"
        );
        let Meta::Tensor(t) = meta("linear", &row) else {
            panic!()
        };
        assert_eq!(t.placements, vec![Placement::Partial(ReduceOp::Sum)]);
        assert_eq!(t.shape, vec![Poly::symbol("b"), Poly::symbol("n")]);
        let col = format!("(op linear {{b=b,k=k,n=n}} <> {X} (shard {W} 1 a) (shard {BIAS} 0 a))");
        let Meta::Tensor(t) = meta("linear", &col) else {
            panic!()
        };
        assert_eq!(t.placements, vec![Placement::Shard(1)]);
    }

    #[test]
    fn splits_the_law_does_not_allow_are_invalid() {
        let cases = [
            // The bias would be added on every device.
            (
                "linear",
                format!("(op linear {{b=b,k=k,n=n}} <> (shard {X} 1 a) (shard {W} 0 a) {BIAS})"),
            ),
            // Only one operand of the contraction is split.
            (
                "linear",
                format!("(op linear {{b=b,k=k,n=n}} <> (shard {X} 1 a) {W} {BIAS})"),
            ),
            // A wrong shape.
            (
                "linear",
                format!("(op linear {{b=b,k=k,n=n}} <> {W} {W} {BIAS})"),
            ),
            // A gather of a dimension that is not sharded.
            ("linear", format!("(all_gather {X} 0 a)")),
            // A stat index split without its statistics combined.
            (
                "softmax",
                "(op softmax {b=b,n=n} <> (shard (tensor x [b,n]) 1 a))".to_string(),
            ),
            // An opaque index split.
            (
                "concat",
                "(op concat {b=b,m=m,n=n} <> (shard (tensor x [b,m]) 1 a) (tensor y [b,n]))"
                    .to_string(),
            ),
        ];
        let mut whys = Vec::new();
        for (rule, text) in cases {
            let Meta::Invalid(why) = meta(rule, &text) else {
                panic!("{text} is invalid")
            };
            whys.push(why);
        }
        // Each refusal names the offending index, rule or dimension.
        assert!(matches!(
            &whys[1],
            RewriteError::InputPlacement(m) if m.index == "k" && m.rule == "linear" && m.input == "w"
        ));
        assert!(matches!(&whys[2], RewriteError::InputShape { k: 0, input, .. } if input == "x"));
        assert_eq!(
            whys[3],
            RewriteError::Retag {
                what: "all_gather",
                needs: Placement::Shard(0),
                axis: "a".into(),
                found: Placement::Replicate,
            }
        );
        assert!(
            matches!(&whys[4], RewriteError::NeedsMark { index, rule, .. } if index == "n" && rule == "softmax")
        );
        assert!(
            matches!(&whys[5], RewriteError::Unsplittable { index, rule, .. } if index == "m" && rule == "concat")
        );
    }

    #[test]
    fn views_move_shards_where_their_map_says() {
        let good = "(view (shard (tensor q [b*s,h]) 1 a) [b,s,h] |1>2|)";
        let Meta::Tensor(t) = meta("linear", good) else {
            panic!("{good} is valid")
        };
        assert_eq!(t.placements, vec![Placement::Shard(2)]);
        let bad = "(view (shard (tensor q [b*s,h]) 0 a) [b,s,h] |1>2|)";
        assert_eq!(
            meta("linear", bad),
            Meta::Invalid(RewriteError::ViewShard(0))
        );
    }
}
