//! Which split an operator application is: from its inputs' placements, the index split on each
//! mesh axis, checked against the law of that index's kind, and the output placement the law
//! gives.

use super::analysis::{show, DistAnalysis, TensorMeta};
use super::error::RewriteError;
use super::lang::{Extents, Marks};
use super::laws::term_has;
use crate::rules::law::OutputLaw;
use crate::rules::{IndexKind, OpRule, Placement, ReduceOp};
use crate::sym::Poly;
use std::collections::BTreeMap;

/// How an operator node is split: the index split on each mesh axis and the resulting output.
#[derive(Debug, Clone)]
pub struct OpSplit {
    /// Per mesh axis, the rule index split on it.
    pub index: Vec<Option<String>>,
    /// Output placement per axis.
    pub output: Vec<Placement>,
    /// Global output shape.
    pub output_shape: Vec<Poly>,
    /// The rule's formulas' symbols bound to this node's extents.
    pub bind: BTreeMap<String, Poly>,
}

impl OpSplit {
    /// Checks an operator application against its rule and the law table.
    pub fn infer(
        ctx: &DistAnalysis,
        rule: &OpRule,
        bind: &Extents,
        marks: &Marks,
        ins: &[&TensorMeta],
    ) -> Result<OpSplit, RewriteError> {
        let (polys, output_shape) = Self::checked_inputs(rule, bind, ins)?;
        let axes = ctx.mesh.axes().len();
        let mut index: Vec<Option<String>> = vec![None; axes];
        let mut output = vec![Placement::Replicate; axes];
        for n in 0..axes {
            let axis = &ctx.mesh.axes()[n].0;
            if let Some((i, out)) = Self::on_axis(rule, marks, ins, &index, n, axis)? {
                output[n] = out;
                index[n] = Some(i);
            }
        }
        let r = &rule.name;
        for (n, p) in output.iter().enumerate() {
            if let Placement::Shard(d) = p {
                if output[..n].contains(p) {
                    return Err(RewriteError::OutputTwice {
                        dim: *d,
                        rule: r.clone(),
                    });
                }
            }
        }
        Ok(OpSplit {
            index,
            output,
            output_shape,
            bind: polys,
        })
    }

    /// Checks the inputs against the rule (their count, every index's extent, their shapes);
    /// returns the extents and the output's shape.
    fn checked_inputs(
        rule: &OpRule,
        bind: &Extents,
        ins: &[&TensorMeta],
    ) -> Result<(BTreeMap<String, Poly>, Vec<Poly>), RewriteError> {
        let r = &rule.name;
        if ins.len() != rule.inputs.len() {
            return Err(RewriteError::InputCount {
                rule: r.clone(),
                expected: rule.inputs.len(),
                given: ins.len(),
            });
        }
        let polys = bind.polys();
        for name in rule.indices.iter().map(|i| &i.name).chain(&rule.params) {
            if !polys.contains_key(name) {
                return Err(RewriteError::NoExtent {
                    rule: r.clone(),
                    index: name.clone(),
                });
            }
        }
        let shape_of = |t: &crate::rules::Tensor| -> Result<Vec<Poly>, RewriteError> {
            t.dims
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|i| {
                            t.extent(i)
                                .substitute_all(&polys)
                                .map_err(RewriteError::from)
                        })
                        .product()
                })
                .collect()
        };
        for (k, (t, m)) in rule.inputs.iter().zip(ins).enumerate() {
            let want = shape_of(t)?;
            if want != m.shape {
                return Err(RewriteError::InputShape {
                    k,
                    input: t.name.clone(),
                    rule: r.clone(),
                    shape: show(&m.shape),
                    wanted: show(&want),
                });
            }
        }
        let output_shape = shape_of(&rule.output)?;
        Ok((polys, output_shape))
    }

    /// The index the inputs split on mesh axis `n` (`axis`) and the output's placement there,
    /// checked against the index's law and the marks; `None` where nothing is split on it.
    fn on_axis(
        rule: &OpRule,
        marks: &Marks,
        ins: &[&TensorMeta],
        index: &[Option<String>],
        n: usize,
        axis: &str,
    ) -> Result<Option<(String, Placement)>, RewriteError> {
        let r = &rule.name;
        let at = |k: usize| ins[k].placements[n];
        let shard = (0..ins.len()).find_map(|k| match at(k) {
            Placement::Shard(d) => Some((k, d)),
            _ => None,
        });
        let Some((k0, d0)) = shard else {
            if (0..ins.len()).any(|k| at(k) != Placement::Replicate) {
                return Err(RewriteError::PartialUnsplit {
                    rule: r.clone(),
                    axis: axis.to_string(),
                });
            }
            if let Some(i) = marks.on_axis(axis) {
                return Err(RewriteError::MarkUnsplit {
                    rule: r.clone(),
                    index: i.to_string(),
                    axis: axis.to_string(),
                });
            }
            return Ok(None);
        };
        let i = rule.inputs[k0]
            .dims
            .get(d0)
            .and_then(|g| g.first())
            .ok_or_else(|| RewriteError::NoDimension {
                rule: r.clone(),
                k: k0,
                dim: d0,
            })?;
        let kind = rule.index(i).map(|x| x.kind).unwrap_or(IndexKind::Opaque);
        let law = kind.law();
        if !law.splittable {
            return Err(RewriteError::Unsplittable {
                index: i.clone(),
                rule: r.clone(),
                kind,
                statement: law.statement,
            });
        }
        if index.iter().flatten().any(|j| j == i) {
            return Err(RewriteError::IndexTwice {
                index: i.clone(),
                rule: r.clone(),
            });
        }
        inputs_placed(rule, i, kind, &at, axis)?;
        mark_agrees(rule, marks, i, kind, axis)?;
        let out_pos = || match rule.output.position(i) {
            Some(d) if rule.output.dims[d].first() == Some(i) => Ok(Placement::Shard(d)),
            _ => Err(RewriteError::OutputNotOuter {
                index: i.clone(),
                rule: r.clone(),
            }),
        };
        let out = match law.output {
            OutputLaw::Shard => out_pos()?,
            OutputLaw::Partial(op) => Placement::Partial(op),
            OutputLaw::ShardOrReplicate if rule.output.has(i) => out_pos()?,
            OutputLaw::ShardOrReplicate => Placement::Replicate,
        };
        Ok(Some((i.clone(), out)))
    }
}

/// Each input of `rule` placed on `axis` as splitting its index `i` (of `kind`) needs: sharded
/// on its dimension of `i`, partial where a sum over `i` leaves it out, replicated otherwise.
fn inputs_placed(
    rule: &OpRule,
    i: &str,
    kind: IndexKind,
    at: &dyn Fn(usize) -> Placement,
    axis: &str,
) -> Result<(), RewriteError> {
    for (k, t) in rule.inputs.iter().enumerate() {
        let want = match t.position(i) {
            Some(d) if t.dims[d].first().map(String::as_str) == Some(i) => Placement::Shard(d),
            Some(d) => {
                return Err(RewriteError::NotOuter {
                    index: i.to_string(),
                    dim: d,
                    tensor: t.name.clone(),
                })
            }
            None if kind == IndexKind::ReduceSum && !term_has(rule, k, i) => {
                Placement::Partial(ReduceOp::Sum)
            }
            None => Placement::Replicate,
        };
        if at(k) != want {
            return Err(RewriteError::InputPlacement(Box::new(
                super::error::Misplaced {
                    index: i.to_string(),
                    rule: rule.name.clone(),
                    axis: axis.to_string(),
                    input: t.name.clone(),
                    needs: want,
                    found: at(k),
                },
            )));
        }
    }
    Ok(())
}

/// A mark on `axis` exactly where the law of `i` (of `kind`) needs one.
fn mark_agrees(
    rule: &OpRule,
    marks: &Marks,
    i: &str,
    kind: IndexKind,
    axis: &str,
) -> Result<(), RewriteError> {
    let law = kind.law();
    let needs_mark = law.finish.needs_mark();
    if needs_mark == (marks.on_axis(axis) == Some(i)) {
        return Ok(());
    }
    Err(if needs_mark {
        RewriteError::NeedsMark {
            index: i.to_string(),
            rule: rule.name.clone(),
            kind,
            axis: axis.to_string(),
            statement: law.statement,
        }
    } else {
        RewriteError::NeedlessMark {
            rule: rule.name.clone(),
            axis: axis.to_string(),
            index: i.to_string(),
            kind,
        }
    })
}
