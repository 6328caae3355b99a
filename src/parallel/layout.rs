//! Layouts: which rule index of each operator each mesh axis splits, the way Megatron-LM lays out
//! a transformer. Data parallelism splits the index bound to the batch `B`; tensor parallelism
//! splits the index a family marks with `tp:` (column-parallel then row-parallel linears, heads in
//! attention, vocabulary in the embedding and the loss); sequence parallelism splits the
//! sequence index of the operators tensor parallelism leaves whole.

use super::analysis::{DP, TP};
use crate::model::{Model, OpNode};
use crate::rules::split::AxisSplit;
use crate::strategy::AxisKind;
use crate::sym::Poly;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// What a shard on an axis cuts, so that differently shaped views of one tensor compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tag {
    /// The batch.
    Batch,
    /// The sequence.
    Seq,
    /// A feature dimension (hidden, heads, MLP, vocabulary).
    Feature,
}

/// A tensor's placement on one mesh axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// Split.
    Shard(Tag),
    /// Whole.
    Replicate,
    /// Awaiting a sum.
    Partial,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Shard(t) => write!(f, "Shard({t:?})"),
            Place::Replicate => f.write_str("Replicate"),
            Place::Partial => f.write_str("Partial"),
        }
    }
}

/// Layout choices shared by all operators.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Layout {
    /// Megatron-LM sequence parallelism.
    pub sequence_parallel: bool,
    /// Per-operator tensor-parallel index overrides (`none` replicates the operator).
    pub tp_overrides: BTreeMap<String, String>,
}

/// The splits of one operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OpPlan {
    /// Index split over the data-parallel axis.
    pub dp: Option<String>,
    /// Index split over the tensor-parallel axis, and what it cuts.
    pub tp: Option<(String, Tag)>,
}

impl OpPlan {
    /// The splits as `AxisSplit`s, sizes `p_dp` and `p_tp`.
    pub fn splits(&self) -> Vec<AxisSplit> {
        let mut v = Vec::new();
        if let Some(i) = &self.dp {
            v.push(AxisSplit {
                index: i.clone(),
                axis: AxisKind::Dp.name().into(),
                size: Poly::symbol(DP),
            });
        }
        if let Some((i, _)) = &self.tp {
            v.push(AxisSplit {
                index: i.clone(),
                axis: AxisKind::Tp.name().into(),
                size: Poly::symbol(TP),
            });
        }
        v
    }

    /// The tag of axis `k` (0: dp, 1: tp).
    pub fn tag(&self, k: usize) -> Tag {
        match k {
            0 => Tag::Batch,
            _ => self.tp.as_ref().map(|(_, t)| *t).unwrap_or(Tag::Feature),
        }
    }
}

fn binds(node: &OpNode, index: &str, symbol: &str) -> bool {
    node.bind
        .get(index)
        .is_some_and(|f| f.degree_in(symbol).1 > 0)
}

fn splittable(node: &OpNode, index: &str) -> bool {
    node.rule
        .index(index)
        .is_some_and(|i| i.kind.law().splittable)
}

/// The value of [`Layout::tp_overrides`] that splits an operator's sequence index on the
/// tensor-parallel axis, as sequence parallelism splits the operators it reaches (the layout the
/// e-graph pass derives writes it; not an identifier, so no rule index is named so).
pub const SEQ_SHARD: &str = "seq-shard";

/// The index of `node` that binds `model`'s sequence symbol and can be split.
pub fn sequence_index(node: &OpNode, model: &Model) -> Option<String> {
    node.rule
        .indices
        .iter()
        .map(|i| i.name.as_str())
        .find(|i| {
            model
                .roles
                .sequence
                .as_deref()
                .is_some_and(|s| binds(node, i, s))
                && splittable(node, i)
        })
        .map(str::to_string)
}

/// The splits of `node` of `model` under `layout`; data parallelism splits the index that binds
/// the model's batch symbol, sequence parallelism the one that binds its sequence (its
/// `sequence` role).
pub fn plan(node: &OpNode, layout: &Layout, model: &Model) -> OpPlan {
    let batch = model.batch.as_deref();
    let indices: Vec<&str> = node.rule.indices.iter().map(|i| i.name.as_str()).collect();
    let dp = indices
        .iter()
        .find(|i| batch.is_some_and(|b| binds(node, i, b)) && splittable(node, i))
        .map(|i| i.to_string());
    let annotated = match layout.tp_overrides.get(&node.name) {
        Some(o) if o == "none" => None,
        Some(o) if o == SEQ_SHARD => {
            let tp = sequence_index(node, model).map(|i| (i, Tag::Seq));
            return OpPlan { dp, tp };
        }
        Some(o) => Some(o.clone()),
        None => node.tp.clone(),
    };
    let tp = match annotated {
        Some(i) if splittable(node, &i) => Some((i, Tag::Feature)),
        Some(_) => None,
        None if layout.sequence_parallel => sequence_index(node, model).map(|i| (i, Tag::Seq)),
        None => None,
    };
    OpPlan { dp, tp }
}
