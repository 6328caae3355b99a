//! Which split an operator application is: from its inputs' placements, the index split on each
//! mesh axis, checked against the law of that index's kind, and the output placement the law
//! gives.

use super::analysis::{show, DistAnalysis, TensorMeta};
use super::lang::{Extents, Marks};
use super::laws::term_has;
use crate::rules::law::{Finish, OutputLaw};
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
    ) -> Result<OpSplit, String> {
        let r = &rule.name;
        if ins.len() != rule.inputs.len() {
            return Err(format!(
                "`{r}` takes {} inputs, given {}",
                rule.inputs.len(),
                ins.len()
            ));
        }
        let polys = bind.polys();
        for name in rule.indices.iter().map(|i| &i.name).chain(&rule.params) {
            if !polys.contains_key(name) {
                return Err(format!("`{r}` needs the extent of `{name}`"));
            }
        }
        let shape_of = |t: &crate::rules::Tensor| -> Result<Vec<Poly>, String> {
            t.dims
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|i| {
                            t.extent(i)
                                .substitute_all(&polys)
                                .map_err(|e| e.to_string())
                        })
                        .product()
                })
                .collect()
        };
        for (k, (t, m)) in rule.inputs.iter().zip(ins).enumerate() {
            let want = shape_of(t)?;
            if want != m.shape {
                return Err(format!(
                    "input {k} (`{}`) of `{r}` has shape {}, the rule wants {}",
                    t.name,
                    show(&m.shape),
                    show(&want)
                ));
            }
        }
        let axes = ctx.mesh.axes().len();
        let mut index = vec![None; axes];
        let mut output = vec![Placement::Replicate; axes];
        for n in 0..axes {
            let axis = &ctx.mesh.axes()[n].0;
            let at = |k: usize| ins[k].placements[n];
            let shard = (0..ins.len()).find_map(|k| match at(k) {
                Placement::Shard(d) => Some((k, d)),
                _ => None,
            });
            let Some((k0, d0)) = shard else {
                if (0..ins.len()).any(|k| at(k) != Placement::Replicate) {
                    return Err(format!(
                        "`{r}` has a partial input on `{axis}` but no split index"
                    ));
                }
                if let Some(i) = marks.on_axis(axis) {
                    return Err(format!(
                        "`{r}` marks `{i}@{axis}` but no input is split on `{axis}`"
                    ));
                }
                continue;
            };
            let i = rule.inputs[k0]
                .dims
                .get(d0)
                .and_then(|g| g.first())
                .ok_or_else(|| format!("`{r}` input {k0} has no dimension {d0}"))?;
            let kind = rule.index(i).map(|x| x.kind).unwrap_or(IndexKind::Opaque);
            let law = kind.law();
            if !law.splittable {
                return Err(format!("`{i}` of `{r}` is {kind}: {}", law.statement));
            }
            if index.iter().flatten().any(|j| j == i) {
                return Err(format!("`{i}` of `{r}` is split on two axes"));
            }
            for (k, t) in rule.inputs.iter().enumerate() {
                let want = match t.position(i) {
                    Some(d) if t.dims[d].first() == Some(i) => Placement::Shard(d),
                    Some(d) => {
                        return Err(format!(
                            "`{i}` is not the outer part of dimension {d} of `{}`: a block of \
                             that dimension does not split `{i}`",
                            t.name
                        ))
                    }
                    None if kind == IndexKind::ReduceSum && !term_has(rule, k, i) => {
                        Placement::Partial(ReduceOp::Sum)
                    }
                    None => Placement::Replicate,
                };
                if at(k) != want {
                    return Err(format!(
                        "split of `{i}` of `{r}` on `{axis}` needs `{}` {want}, found {}",
                        t.name,
                        at(k)
                    ));
                }
            }
            let needs_mark = matches!(
                law.finish,
                Finish::AllReduceStatistics | Finish::HaloExchange
            );
            if needs_mark != (marks.on_axis(axis) == Some(i.as_str())) {
                return Err(if needs_mark {
                    format!(
                        "`{i}` of `{r}` is {kind}: its split needs `<{i}@{axis}>` ({})",
                        law.statement
                    )
                } else {
                    format!("`{r}` marks `{axis}` but splits `{i}` there, a {kind} index")
                });
            }
            let out_pos = || match rule.output.position(i) {
                Some(d) if rule.output.dims[d].first() == Some(i) => Ok(Placement::Shard(d)),
                _ => Err(format!(
                    "`{i}` is not the outer part of an output dimension of `{r}`"
                )),
            };
            output[n] = match law.output {
                OutputLaw::Shard => out_pos()?,
                OutputLaw::Partial(op) => Placement::Partial(op),
                OutputLaw::ShardOrReplicate if rule.output.has(i) => out_pos()?,
                OutputLaw::ShardOrReplicate => Placement::Replicate,
            };
            index[n] = Some(i.clone());
        }
        let output_shape = shape_of(&rule.output)?;
        for (n, p) in output.iter().enumerate() {
            if let Placement::Shard(d) = p {
                if output[..n].contains(p) {
                    return Err(format!(
                        "output dimension {d} of `{r}` is split on two axes"
                    ));
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
}
