//! Split tables derived from a rule and the law table alone: for each index (and each pair of
//! indices over two mesh axes) what every device computes, which placements the inputs need,
//! what the output's placement is, and which collectives finish the operator — forward and
//! backward. Backward passes are derived from the signature: the gradient of an input is the
//! einsum of the output gradient with the other inputs of its term, reducing the indices that
//! input lacks. Nothing is special-cased: data-parallel gradient all-reduce is the reduce-sum over
//! the batch index in the weight gradient.

use super::law::{CollectiveKind, Finish, IndexKind, OutputLaw, ReduceOp};
use super::rule::{tensor_bytes, Flops, OpRule, Tensor};
use crate::sym::{Poly, Rational};
use serde::Serialize;
use std::fmt;

/// Bytes of one statistic (max, sum, mean, variance): kept in fp32 as Megatron-LM and PyTorch's
/// fused kernels do.
pub const STAT_BYTES: i64 = 4;

/// The mesh-axis names used in split tables, and their size symbols.
pub const AXES: [(&str, &str); 2] = [("a", "p_a"), ("b", "p_b")];

/// One index split over one mesh axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AxisSplit {
    /// The rule's index.
    pub index: String,
    /// The mesh axis name.
    pub axis: String,
    /// The axis size (a symbol such as `p_a`, or a number).
    pub size: Poly,
}

/// Where a tensor lives along one mesh axis (PyTorch DTensor / GSPMD vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Split along this tensor dimension.
    Shard(usize),
    /// Whole on every device.
    Replicate,
    /// Whole size on every device, awaiting a reduction.
    Partial(ReduceOp),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Shard(d) => write!(f, "Shard({d})"),
            Placement::Replicate => f.write_str("Replicate"),
            Placement::Partial(op) => write!(f, "Partial({op})"),
        }
    }
}

/// A tensor's placement on each split axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorPlacement {
    /// The tensor.
    pub tensor: String,
    /// One placement per split axis, in split order.
    pub placements: Vec<Placement>,
}

/// A collective needed on one axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveCost {
    /// What it is.
    pub kind: CollectiveKind,
    /// The reduction, for all-reduce.
    pub op: Option<ReduceOp>,
    /// The mesh axis it runs on.
    pub axis: String,
    /// The tensor it moves.
    pub tensor: String,
    /// Calls (statistics may need several).
    pub count: u32,
    /// Bytes of the logical tensor of one call on this axis (`S` of nccl-tests doc/PERFORMANCE.md).
    pub size: Poly,
    /// Bytes each rank sends on the wire, all calls together.
    pub wire_bytes: Poly,
    /// Why it is needed: the law it follows from.
    pub reason: String,
    /// A cheaper equivalent when the consumer accepts a sharded result.
    pub alternative: Option<Alternative>,
}

/// The reduce-scatter alternative of an all-reduce.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// The collective.
    pub kind: CollectiveKind,
    /// Its wire bytes.
    pub wire_bytes: Poly,
    /// The placement it leaves.
    pub leaves: Placement,
}

/// One pass (forward or backward) under a split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassSplit {
    /// FLOPs per device.
    pub compute: Poly,
    /// Of `compute`, the gradients of the parameter inputs (a backward's weight-gradient
    /// GEMMs, which a zero-bubble schedule defers): the einsum gradients of the inputs marked
    /// `param`. Zero in a forward, and for a rule whose backward FLOPs are one stated formula.
    #[serde(skip)]
    pub weight_compute: Poly,
    /// Placements the pass reads.
    pub inputs: Vec<TensorPlacement>,
    /// Placements the pass leaves before its collectives.
    pub outputs: Vec<TensorPlacement>,
    /// Collectives that finish it.
    pub collectives: Vec<CollectiveCost>,
}

impl PassSplit {
    /// Total wire bytes per rank of the pass's collectives.
    pub fn wire_bytes(&self) -> Poly {
        self.collectives.iter().map(|c| c.wire_bytes.clone()).sum()
    }
}

/// A split of a rule's indices over mesh axes, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitEntry {
    /// The splits, one per axis.
    pub splits: Vec<AxisSplit>,
    /// Forward pass.
    pub forward: PassSplit,
    /// Backward pass (all input gradients).
    pub backward: PassSplit,
    /// Bytes saved for backward, per device.
    pub saved_bytes: Poly,
}

/// Why a split is not allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotSplittable {
    /// The index.
    pub index: String,
    /// The reason, from the law table.
    pub reason: String,
}

/// Every single-index and two-index split of a rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitTable {
    /// The rule.
    pub rule: String,
    /// Bytes of a compute element assumed (2: bf16).
    pub dtype_bytes: u32,
    /// The unsplit operator.
    pub whole: SplitEntry,
    /// Allowed splits.
    pub entries: Vec<SplitEntry>,
    /// Indices that cannot be split, with the reason.
    pub unsplittable: Vec<NotSplittable>,
}

/// Derives a rule's split table with compute elements of `dtype_bytes` bytes.
pub fn split_table(rule: &OpRule, dtype_bytes: u32) -> SplitTable {
    let mut entries = Vec::new();
    let mut unsplittable = Vec::new();
    let splittable: Vec<&str> = rule
        .indices
        .iter()
        .filter(|i| {
            let ok = i.kind.law().splittable;
            if !ok {
                unsplittable.push(NotSplittable {
                    index: i.name.clone(),
                    reason: format!("{} index: {}", i.kind, i.kind.law().statement),
                });
            }
            ok
        })
        .map(|i| i.name.as_str())
        .collect();
    let axis = |k: usize, index: &str| AxisSplit {
        index: index.to_string(),
        axis: AXES[k].0.to_string(),
        size: Poly::symbol(AXES[k].1),
    };
    for i in &splittable {
        if let Ok(e) = derive(rule, &[axis(0, i)], dtype_bytes) {
            entries.push(e);
        }
    }
    for (n, i) in splittable.iter().enumerate() {
        for j in &splittable[n + 1..] {
            if let Ok(e) = derive(rule, &[axis(0, i), axis(1, j)], dtype_bytes) {
                entries.push(e);
            }
        }
    }
    let whole = derive(rule, &[], dtype_bytes).expect("the unsplit operator is always valid");
    SplitTable {
        rule: rule.name.clone(),
        dtype_bytes,
        whole,
        entries,
        unsplittable,
    }
}

/// Prices one split: each entry splits one index over one mesh axis (an index may appear on
/// several axes).
pub fn derive(
    rule: &OpRule,
    splits: &[AxisSplit],
    dtype_bytes: u32,
) -> Result<SplitEntry, NotSplittable> {
    for s in splits {
        let ix = rule.index(&s.index).ok_or_else(|| NotSplittable {
            index: s.index.clone(),
            reason: format!("rule `{}` has no index `{}`", rule.name, s.index),
        })?;
        if !ix.kind.law().splittable {
            return Err(NotSplittable {
                index: s.index.clone(),
                reason: format!("{} index: {}", ix.kind, ix.kind.law().statement),
            });
        }
        // One index may be split over several axes (the rows of a data- and sequence-parallel
        // layer): the law applies to each axis in turn.
    }
    let d = Deriver {
        rule,
        splits,
        dtype: dtype_bytes,
    };
    Ok(SplitEntry {
        splits: splits.to_vec(),
        forward: d.forward(),
        backward: d.backward(),
        saved_bytes: rule.saved.iter().map(|t| d.local_bytes(t)).sum(),
    })
}

struct Deriver<'a> {
    rule: &'a OpRule,
    splits: &'a [AxisSplit],
    dtype: u32,
}

impl Deriver<'_> {
    fn kind(&self, s: &AxisSplit) -> IndexKind {
        self.rule
            .index(&s.index)
            .map(|i| i.kind)
            .unwrap_or(IndexKind::Opaque)
    }

    /// Product of the sizes of splits whose index satisfies `pred`, skipping split `skip`.
    fn divisor(&self, skip: Option<usize>, pred: impl Fn(&str) -> bool) -> Poly {
        self.splits
            .iter()
            .enumerate()
            .filter(|(n, s)| Some(*n) != skip && pred(&s.index))
            .map(|(_, s)| s.size.clone())
            .product()
    }

    fn div(p: Poly, d: &Poly) -> Poly {
        p.checked_div(d).expect("axis sizes are non-zero monomials")
    }

    /// Bytes of `t` held by one device (sharded on every split axis whose index it has).
    fn local_bytes(&self, t: &Tensor) -> Poly {
        Self::div(
            tensor_bytes(t, self.dtype),
            &self.divisor(None, |i| t.has(i)),
        )
    }

    /// Bytes of `t` in one collective on split `n`: the shard the other axes leave.
    fn group_bytes(&self, t: &Tensor, n: usize) -> Poly {
        Self::div(
            tensor_bytes(t, self.dtype),
            &self.divisor(Some(n), |i| t.has(i)),
        )
    }

    fn placement_of(&self, t: &Tensor) -> TensorPlacement {
        TensorPlacement {
            tensor: t.name.clone(),
            placements: self
                .splits
                .iter()
                .map(|s| match t.position(&s.index) {
                    Some(d) => Placement::Shard(d),
                    None => Placement::Replicate,
                })
                .collect(),
        }
    }

    fn forward(&self) -> PassSplit {
        let rule = self.rule;
        let compute = match &rule.flops {
            Flops::Explicit { forward, .. } => {
                Self::div(forward.clone(), &self.divisor(None, |_| true))
            }
            Flops::Einsum => {
                let terms: Poly = rule
                    .terms
                    .iter()
                    .map(|t| {
                        let idx = rule.term_indices(t);
                        Self::div(
                            rule.term_flops(t),
                            &self.divisor(None, |i| idx.iter().any(|x| x == i)),
                        )
                    })
                    .sum();
                terms
                    + Self::div(
                        rule.combine_flops(),
                        &self.divisor(None, |i| rule.output.has(i)),
                    )
            }
        };
        let inputs = rule.inputs.iter().map(|t| self.placement_of(t)).collect();
        let mut out = self.placement_of(&rule.output);
        let mut collectives = Vec::new();
        for (n, s) in self.splits.iter().enumerate() {
            let kind = self.kind(s);
            let law = kind.law();
            if let OutputLaw::Partial(op) = law.output {
                out.placements[n] = Placement::Partial(op);
            }
            match law.finish {
                Finish::Nothing => {}
                Finish::AllReduceOutput(op) => {
                    let size = self.group_bytes(&rule.output, n);
                    let reason = format!(
                        "`{}` is {kind}, not in the output: {} leaves partial {op}s",
                        s.index, law.statement
                    );
                    let alternative =
                        (op == ReduceOp::Sum && !rule.output.dims.is_empty()).then(|| {
                            Alternative {
                                kind: CollectiveKind::ReduceScatter,
                                wire_bytes: CollectiveKind::ReduceScatter
                                    .wire_bytes(&size, &s.size),
                                leaves: Placement::Shard(0),
                            }
                        });
                    collectives.push(CollectiveCost {
                        kind: CollectiveKind::AllReduce,
                        op: Some(op),
                        axis: s.axis.clone(),
                        tensor: rule.output.name.clone(),
                        count: 1,
                        wire_bytes: CollectiveKind::AllReduce.wire_bytes(&size, &s.size),
                        size,
                        reason,
                        alternative,
                    });
                }
                Finish::AllReduceStatistics => {
                    let ix = rule.index(&s.index).expect("validated");
                    collectives.push(self.stat_collective(n, &rule.output, ix.stats, "forward"));
                }
                Finish::HaloExchange => {
                    for t in rule.inputs.iter().filter(|t| t.has(&s.index)) {
                        collectives.push(self.halo(n, t));
                    }
                }
            }
        }
        PassSplit {
            compute,
            weight_compute: Poly::zero(),
            inputs,
            outputs: vec![out],
            collectives,
        }
    }

    /// All-reduce of `count` statistics per row of `t` along split `n`'s index.
    fn stat_collective(&self, n: usize, t: &Tensor, count: u32, pass: &str) -> CollectiveCost {
        let s = &self.splits[n];
        // One statistic per row: the tensor's extent over its non-stat indices.
        let is_stat = |i: &str| {
            self.rule
                .index(i)
                .is_some_and(|x| x.kind == IndexKind::Stat)
        };
        let rows: Poly = t
            .indices()
            .filter(|i| !is_stat(i))
            .map(|i| t.extent(i))
            .product();
        let rows = Self::div(rows, &self.divisor(Some(n), |i| t.has(i) && !is_stat(i)));
        let size = rows * Poly::int(STAT_BYTES);
        let one_call = CollectiveKind::AllReduce.wire_bytes(&size, &s.size);
        CollectiveCost {
            kind: CollectiveKind::AllReduce,
            op: Some(ReduceOp::Sum),
            axis: s.axis.clone(),
            tensor: format!("{} statistics of {}", pass, t.name),
            count,
            wire_bytes: one_call * Poly::int(count as i64),
            size,
            reason: format!(
                "`{}` is stat: {} — only {count} fp32 statistic(s) per row cross devices",
                s.index,
                IndexKind::Stat.law().statement
            ),
            alternative: None,
        }
    }

    /// Halo exchange of `t` along split `n`'s window index.
    fn halo(&self, n: usize, t: &Tensor) -> CollectiveCost {
        let s = &self.splits[n];
        let mut elems = self.halo_rows(n);
        for i in t.indices().filter(|i| *i != s.index) {
            let local = Self::div(t.extent(i), &self.divisor(Some(n), |j| j == i));
            // An earlier axis's exchange has already brought its halo rows along `i`: this one
            // forwards them too (the corners of a split over two window indices).
            let brought: Poly = (0..n)
                .filter(|&m| {
                    self.splits[m].index == i && self.kind(&self.splits[m]) == IndexKind::Window
                })
                .map(|m| self.halo_rows(m))
                .sum();
            elems *= local + brought;
        }
        let size = elems * Poly::int(t.dtype.bytes(self.dtype) as i64);
        CollectiveCost {
            kind: CollectiveKind::HaloExchange,
            op: None,
            axis: s.axis.clone(),
            tensor: t.name.clone(),
            count: 1,
            wire_bytes: size.clone(),
            size,
            reason: format!(
                "`{}` is window: {}",
                s.index,
                IndexKind::Window.law().statement
            ),
            alternative: None,
        }
    }

    /// Rows of split `n`'s window index a rank receives: the rule's `halo` from its two
    /// neighbours together; with two ranks each has one neighbour and receives half of it.
    fn halo_rows(&self, n: usize) -> Poly {
        let s = &self.splits[n];
        let halo = self
            .rule
            .index(&s.index)
            .and_then(|ix| ix.halo.clone())
            .unwrap_or_else(Poly::zero);
        match s.size.as_integer().and_then(|v| i64::try_from(v).ok()) {
            Some(1) => Poly::zero(),
            Some(2) => halo * Poly::constant(Rational::new(1.into(), 2.into())),
            _ => halo,
        }
    }

    /// The all-reduce of the gradient `grad` of input `t`, which lacks the index `s` split on
    /// mesh axis `n`: its gradient einsum sums over it (a reduce-scatter may replace it).
    fn grad_sum(&self, t: &Tensor, n: usize, s: &AxisSplit, grad: &str) -> CollectiveCost {
        let size = self.group_bytes(t, n);
        CollectiveCost {
            kind: CollectiveKind::AllReduce,
            op: Some(ReduceOp::Sum),
            axis: s.axis.clone(),
            tensor: grad.to_string(),
            count: 1,
            wire_bytes: CollectiveKind::AllReduce.wire_bytes(&size, &s.size),
            alternative: Some(Alternative {
                kind: CollectiveKind::ReduceScatter,
                wire_bytes: CollectiveKind::ReduceScatter.wire_bytes(&size, &s.size),
                leaves: Placement::Shard(0),
            }),
            size,
            reason: format!(
                "`{}` is not an index of `{}`: its gradient sums over `{}` ({})",
                s.index,
                t.name,
                s.index,
                IndexKind::ReduceSum.law().statement
            ),
        }
    }

    fn backward(&self) -> PassSplit {
        let rule = self.rule;
        let all: Vec<String> = rule.indices.iter().map(|i| i.name.clone()).collect();
        let mut compute = match &rule.flops {
            Flops::Explicit { backward, .. } => {
                Self::div(backward.clone(), &self.divisor(None, |_| true))
            }
            Flops::Einsum => Poly::zero(),
        };
        let mut weight_compute = Poly::zero();
        let mut dy = self.placement_of(&rule.output);
        dy.tensor = format!("d{}", rule.output.name);
        let mut inputs = vec![dy];
        for t in rule
            .saved
            .iter()
            .chain(rule.inputs.iter().filter(|t| t.param))
        {
            if !inputs.iter().any(|p| p.tensor == t.name) {
                inputs.push(self.placement_of(t));
            }
        }
        let mut outputs = Vec::new();
        let mut collectives = Vec::new();
        for (k, t) in rule.inputs.iter().enumerate() {
            if !t.grad {
                continue;
            }
            // The gradient's iteration space: its term's indices (the whole op if explicit).
            let space = match (&rule.flops, rule.term_of(k)) {
                (Flops::Einsum, Some(term)) => rule.term_indices(term),
                _ => all.clone(),
            };
            if matches!(rule.flops, Flops::Einsum) {
                let grad = Self::div(
                    rule.grad_flops(k),
                    &self.divisor(None, |i| space.iter().any(|x| x == i)),
                );
                if t.param {
                    weight_compute += &grad;
                }
                compute += grad;
            }
            let mut grad = self.placement_of(t);
            grad.tensor = format!("d{}", t.name);
            for (n, s) in self.splits.iter().enumerate() {
                let kind = self.kind(s);
                if t.has(&s.index) {
                    match kind {
                        IndexKind::Stat if !t.param => {
                            let ix = rule.index(&s.index).expect("validated");
                            if ix.backward_stats > 0 {
                                collectives.push(self.stat_collective(
                                    n,
                                    t,
                                    ix.backward_stats,
                                    "backward",
                                ));
                            }
                        }
                        IndexKind::Window => {
                            let mut dout = rule.output.clone();
                            dout.name = format!("d{}", rule.output.name);
                            collectives.push(self.halo(n, &dout));
                        }
                        _ => {}
                    }
                } else if space.iter().any(|x| x == &s.index) {
                    // The gradient einsum sums over an index this input lacks.
                    grad.placements[n] = Placement::Partial(ReduceOp::Sum);
                    collectives.push(self.grad_sum(t, n, s, &grad.tensor));
                }
            }
            outputs.push(grad);
        }
        PassSplit {
            compute,
            weight_compute,
            inputs,
            outputs,
            collectives,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;

    fn entry(rule: &str, splits: &[(&str, usize)]) -> SplitEntry {
        let set = RuleSet::embedded().unwrap();
        let splits: Vec<AxisSplit> = splits
            .iter()
            .map(|&(index, k)| AxisSplit {
                index: index.into(),
                axis: AXES[k].0.into(),
                size: Poly::symbol(AXES[k].1),
            })
            .collect();
        derive(set.get(rule).unwrap(), &splits, 2).unwrap()
    }

    fn poly(text: &str) -> Poly {
        Poly::parse(text).unwrap()
    }

    /// A linear layer's backward is two GEMMs, dX = dY·Wᵀ and dW = Xᵀ·dY, 2·b·k·n FLOPs each,
    /// and the bias's gradient, a sum of dY over the rows (b·n adds); the weight part is dW
    /// and the bias's, exactly, under every split.
    #[test]
    fn a_linear_layers_weight_gradient_is_its_dw_gemm_and_its_bias_sum() {
        let whole = entry("linear", &[]);
        assert_eq!(whole.backward.compute, poly("4*b*k*n + b*n"));
        assert_eq!(whole.backward.weight_compute, poly("2*b*k*n + b*n"));
        // Row-parallel (k split): both GEMMs divide, the bias's sum does not.
        let row = entry("linear", &[("k", 0)]);
        assert_eq!(row.backward.weight_compute, poly("2*b*k*n/p_a + b*n"));
        // Column-parallel (n split) under data parallelism (b split): all divide.
        let col = entry("linear", &[("b", 0), ("n", 1)]);
        assert_eq!(
            col.backward.weight_compute,
            poly("2*b*k*n/(p_a*p_b) + b*n/(p_a*p_b)")
        );
        assert_eq!(col.forward.weight_compute, Poly::zero());
    }

    /// Operators without parameters have no weight gradient: element-wise ones, and a product
    /// of two activations (the attention scores), whose two backward GEMMs are both input
    /// gradients.
    #[test]
    fn operators_without_parameters_have_no_weight_gradient() {
        for rule in ["gelu", "mul", "softmax", "bmm_scores"] {
            let e = entry(rule, &[]);
            assert!(!e.backward.compute.is_zero(), "{rule}");
            assert_eq!(e.backward.weight_compute, Poly::zero(), "{rule}");
        }
    }
}
