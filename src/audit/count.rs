//! Brute-force counting, independent of the derivation: every point of an operator's iteration
//! space is given to the device that computes it, and per device the FLOPs, the tensor elements
//! read and written, the elements several devices contribute to, and the normalised rows spanning
//! devices are counted. Placements and collectives are then inferred from those element sets.
//!
//! Who computes a point: along a split index in the point's space, the device owning the index's
//! block; along a split index the space lacks, rank 0 in the forward pass (a bias term of a
//! partial output is added once) and every rank in the backward pass (a gradient that does not
//! depend on the index is computed where it is needed). In the backward pass along a window
//! index, the device owning the windowed input's row (the row the gradient lands in; zero padding
//! goes to the nearest row's owner).
//!
//! What is computed: an einsum term's products summed over the indices the output lacks, so
//! contributions from several devices to one output element are partial sums; a gradient likewise
//! sums over the indices its tensor lacks. For rules with explicit FLOPs only the index kinds say
//! what the operator does: a reduce-max index leaves partial maxima, a stat index leaves complete
//! results once `stats` statistics per row are combined.

use super::plan::{Case, AXIS_NAMES};
use super::space::{hidden_name, Access, Space};
use super::tally::{Assign, Job, Mesh, PassBuilder, StatJob};
use crate::error::{Error, Result};
use crate::rules::law::ReduceOp;
use crate::rules::{Flops, IndexKind, OpRule, Tensor};
use crate::sym::Rational;
use std::fmt;

/// The name prefix of what a kernel touches only for its byte count (what a forward kernel
/// saves beyond its output, what a backward kernel reads of the saved tensors and parameters);
/// such tensors have no placement of their own to check.
pub const SAVED_PREFIX: &str = "saved ";

/// Bytes of one statistic (fp32).
pub const STATISTIC_BYTES: i64 = 4;

/// What brute force finds for both passes.
#[derive(Debug, Clone)]
pub struct Counted {
    /// Forward pass.
    pub forward: PassCount,
    /// Backward pass (all input gradients).
    pub backward: PassCount,
}

/// What brute force finds for one pass.
#[derive(Debug, Clone)]
pub struct PassCount {
    /// FLOPs of the busiest device.
    pub flops: Rational,
    /// Bytes the busiest device's kernels read and write: per kernel, the distinct elements it
    /// touches of each tensor it reads or writes, at the tensor's element size.
    pub io_bytes: i64,
    /// Every tensor the pass reads or writes, with its inferred placement.
    pub tensors: Vec<TensorCount>,
    /// The collectives the element sets call for.
    pub collectives: Vec<CountedCollective>,
}

/// A tensor of a pass.
#[derive(Debug, Clone)]
pub struct TensorCount {
    /// Its name (`dy`, `dx` for gradients).
    pub name: String,
    /// Whether the pass writes it (an output or a gradient) rather than reads it.
    pub written: bool,
    /// Inferred placement on each mesh axis.
    pub placement: Vec<CountedPlacement>,
}

/// A placement inferred from which elements each device touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountedPlacement {
    /// Each device touches the block of this dimension its axis coordinate selects (plus, for
    /// a window, rows of its neighbours' blocks).
    Shard(usize),
    /// Every device needs the same elements.
    Replicate,
    /// Several devices contribute to the same elements.
    Partial(ReduceOp),
    /// None of the above: the elements a device needs are not a block of one dimension.
    Irregular,
}

impl fmt::Display for CountedPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountedPlacement::Shard(d) => write!(f, "Shard({d})"),
            CountedPlacement::Replicate => f.write_str("Replicate"),
            CountedPlacement::Partial(op) => write!(f, "Partial({op})"),
            CountedPlacement::Irregular => f.write_str("Irregular"),
        }
    }
}

/// What a collective moves, as both sides name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollectiveKey {
    /// An all-reduce of a partial tensor.
    Reduce {
        /// The tensor.
        tensor: String,
        /// The reduction.
        op: ReduceOp,
    },
    /// An all-reduce of per-row statistics.
    Statistics {
        /// `forward` or `backward`.
        pass: String,
        /// The tensor whose rows they belong to.
        tensor: String,
    },
    /// A halo exchange: elements a device touches outside its own block.
    Halo {
        /// The tensor.
        tensor: String,
    },
    /// A collective brute force never calls for.
    Other {
        /// Its kind.
        kind: String,
        /// The tensor.
        tensor: String,
    },
}

impl fmt::Display for CollectiveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectiveKey::Reduce { tensor, op } => write!(f, "all-reduce({op}) of {tensor}"),
            CollectiveKey::Statistics { pass, tensor } => {
                write!(f, "all-reduce of {pass} statistics of {tensor}")
            }
            CollectiveKey::Halo { tensor } => write!(f, "halo of {tensor}"),
            CollectiveKey::Other { kind, tensor } => write!(f, "{kind} of {tensor}"),
        }
    }
}

/// A collective brute force calls for on one axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedCollective {
    /// What it moves.
    pub key: CollectiveKey,
    /// The mesh axis (position in the split).
    pub axis: usize,
    /// Bytes of one call: the partial elements of one axis group, the statistics rows of one
    /// group, or the halo elements of the device that receives most.
    pub size: i64,
    /// Calls (statistics per row).
    pub calls: u32,
}

/// Counts both passes of `rule` under `case`.
pub fn count(rule: &OpRule, case: &Case) -> Result<Counted> {
    let mesh = Mesh::new(case);
    Ok(Counted {
        forward: forward(rule, case, &mesh)?,
        backward: backward(rule, case, &mesh)?,
    })
}

/// The indices of `tensors` in the rule's declaration order.
fn indices_of<'a>(rule: &OpRule, tensors: impl IntoIterator<Item = &'a Tensor>) -> Vec<String> {
    let tensors: Vec<&Tensor> = tensors.into_iter().collect();
    rule.indices
        .iter()
        .filter(|i| tensors.iter().any(|t| t.has(&i.name)))
        .map(|i| i.name.clone())
        .collect()
}

fn kind(rule: &OpRule, index: &str) -> IndexKind {
    rule.index(index).map_or(IndexKind::Opaque, |i| i.kind)
}

fn evaluate(rule: &OpRule, case: &Case, f: &crate::sym::Poly) -> Result<Rational> {
    f.eval(&case.bindings())
        .map_err(|e| Error::Usage(format!("rule `{}`: FLOP formula `{f}`: {e}", rule.name)))
}

fn forward(rule: &OpRule, case: &Case, mesh: &Mesh) -> Result<PassCount> {
    let mut pass = PassBuilder::new(mesh);
    pass.one_kernel = true;
    let y = &rule.output;
    match &rule.flops {
        Flops::Einsum => {
            let sums = vec![Some(ReduceOp::Sum); mesh.axes()];
            for term in &rule.terms {
                let inputs: Vec<&Tensor> = term.iter().map(|&k| &rule.inputs[k]).collect();
                let indices = indices_of(rule, inputs.iter().copied().chain([y]));
                let space = Space::new(case, &indices, &inputs);
                let reduces = indices.iter().any(|i| !y.has(i));
                let per_point = term.len() as i64 - 1 + i64::from(reduces);
                let mut job = Job::new(
                    case,
                    &space,
                    Rational::from_integer(per_point.into())
                        / Rational::from_integer(space.hidden_volume().into()),
                    |coord, _| coord.map_or(Assign::First, |c| block(case, &space, c)),
                );
                for t in &inputs {
                    job.reads.push((
                        pass.slot(&t.name, t, case, &space, None)?,
                        access(case, &space, t)?,
                    ));
                }
                let slot = pass.slot(&y.name, y, case, &space, Some(sums.clone()))?;
                job.writes.push((slot, access(case, &space, y)?));
                pass.run(&space, job);
            }
            if rule.terms.len() > 1 {
                // Adding the terms: one add per output element and extra term.
                let indices = indices_of(rule, [y]);
                let space = Space::new(case, &indices, &[]);
                let job = Job::new(
                    case,
                    &space,
                    Rational::from_integer((rule.terms.len() as i64 - 1).into()),
                    |coord, _| coord.map_or(Assign::First, |c| block(case, &space, c)),
                );
                pass.run(&space, job);
            }
        }
        Flops::Explicit { forward, .. } => {
            let all: Vec<String> = rule.indices.iter().map(|i| i.name.clone()).collect();
            let tensors: Vec<&Tensor> = rule.inputs.iter().chain([y]).collect();
            let space = Space::new(case, &all, &tensors);
            let weight =
                evaluate(rule, case, forward)? / Rational::from_integer(space.volume().into());
            let mut job = Job::new(case, &space, weight, |coord, _| {
                coord.map_or(Assign::First, |c| block(case, &space, c))
            });
            for t in &rule.inputs {
                job.reads.push((
                    pass.slot(&t.name, t, case, &space, None)?,
                    access(case, &space, t)?,
                ));
            }
            // What the kernel saves for backward beyond its inputs and output (a mask,
            // statistics): stored by every device for its own elements, so its bytes count
            // like a read — touched elements, no reduction between devices.
            for t in rule.saved_extra() {
                job.reads.push((
                    pass.slot(&format!("{SAVED_PREFIX}{}", t.name), t, case, &space, None)?,
                    access(case, &space, t)?,
                ));
            }
            let ops: Vec<Option<ReduceOp>> = case
                .splits
                .iter()
                .map(|s| match kind(rule, &s.index) {
                    IndexKind::ReduceMax => Some(ReduceOp::Max),
                    IndexKind::Stat => None,
                    _ => Some(ReduceOp::Sum),
                })
                .collect();
            let slot = pass.slot(&y.name, y, case, &space, Some(ops))?;
            job.writes.push((slot, access(case, &space, y)?));
            for (ax, s) in case.splits.iter().enumerate() {
                let Some(ix) = rule.index(&s.index).filter(|i| i.kind == IndexKind::Stat) else {
                    continue;
                };
                let rows: Vec<String> = rule
                    .indices
                    .iter()
                    .filter(|i| i.kind != IndexKind::Stat)
                    .map(|i| i.name.clone())
                    .collect();
                job.stats.push(StatJob::new(
                    &space, ax, &rows, "forward", &y.name, ix.stats,
                ));
            }
            pass.run(&space, job);
        }
    }
    Ok(pass.finish())
}

fn backward(rule: &OpRule, case: &Case, mesh: &Mesh) -> Result<PassCount> {
    let mut pass = PassBuilder::new(mesh);
    let y = &rule.output;
    let dy = format!("d{}", y.name);
    let sums = vec![Some(ReduceOp::Sum); mesh.axes()];
    match &rule.flops {
        Flops::Einsum => {
            for (k, t) in rule.inputs.iter().enumerate() {
                let Some(term) = rule.terms.iter().find(|term| term.contains(&k)) else {
                    continue;
                };
                if !t.grad {
                    continue;
                }
                let inputs: Vec<&Tensor> = term.iter().map(|&j| &rule.inputs[j]).collect();
                let indices = indices_of(rule, inputs.iter().copied().chain([y]));
                let space = Space::new(case, &indices, &inputs);
                let reduces = indices.iter().any(|i| !t.has(i));
                let per_point = term.len() as i64 - 1 + i64::from(reduces);
                let mut job = Job::new(
                    case,
                    &space,
                    Rational::from_integer(per_point.into())
                        / Rational::from_integer(space.hidden_volume().into()),
                    |coord, index| backward_assign(case, &space, &inputs, coord, index),
                );
                job.reads.push((
                    pass.slot(&dy, y, case, &space, None)?,
                    access(case, &space, y)?,
                ));
                for u in inputs.iter().filter(|u| u.name != t.name) {
                    job.reads.push((
                        pass.slot(&u.name, u, case, &space, None)?,
                        access(case, &space, u)?,
                    ));
                }
                let slot =
                    pass.slot(&format!("d{}", t.name), t, case, &space, Some(sums.clone()))?;
                job.writes.push((slot, access(case, &space, t)?));
                pass.run(&space, job);
            }
        }
        Flops::Explicit { backward, .. } => {
            let all: Vec<String> = rule.indices.iter().map(|i| i.name.clone()).collect();
            let tensors: Vec<&Tensor> = rule.inputs.iter().chain([y]).collect();
            let space = Space::new(case, &all, &tensors);
            let weight =
                evaluate(rule, case, backward)? / Rational::from_integer(space.volume().into());
            let mut job = Job::new(case, &space, weight, |coord, index| {
                backward_assign(
                    case,
                    &space,
                    &rule.inputs.iter().collect::<Vec<_>>(),
                    coord,
                    index,
                )
            });
            job.reads.push((
                pass.slot(&dy, y, case, &space, None)?,
                access(case, &space, y)?,
            ));
            // What the backward kernel reads besides the output gradient: what the rule saved
            // for it, and its parameters.
            let saved_or_params = rule.saved.iter().chain(
                rule.inputs
                    .iter()
                    .filter(|t| t.param && !rule.saved.iter().any(|s| s.name == t.name)),
            );
            for t in saved_or_params {
                job.reads.push((
                    pass.slot(&format!("{SAVED_PREFIX}{}", t.name), t, case, &space, None)?,
                    access(case, &space, t)?,
                ));
            }
            for t in rule.inputs.iter().filter(|t| t.grad) {
                let slot =
                    pass.slot(&format!("d{}", t.name), t, case, &space, Some(sums.clone()))?;
                job.writes.push((slot, access(case, &space, t)?));
                if t.param {
                    continue;
                }
                job.stats.extend(backward_stats(rule, case, &space, t));
            }
            pass.run(&space, job);
        }
    }
    Ok(pass.finish())
}

/// The statistics all-reduces of the backward of a rule's input `t` that a split of a
/// statistics index (with backward statistics) needs, one per such split axis.
fn backward_stats(rule: &OpRule, case: &Case, space: &Space, t: &Tensor) -> Vec<StatJob> {
    let mut out = Vec::new();
    for (ax, s) in case.splits.iter().enumerate() {
        let Some(ix) = rule.index(&s.index) else {
            continue;
        };
        if ix.kind != IndexKind::Stat || ix.backward_stats == 0 || !t.has(&s.index) {
            continue;
        }
        let rows: Vec<String> = t
            .indices()
            .filter(|i| kind(rule, i) != IndexKind::Stat)
            .map(str::to_string)
            .collect();
        out.push(StatJob::new(
            space,
            ax,
            &rows,
            "backward",
            &t.name,
            ix.backward_stats,
        ));
    }
    out
}

fn access(case: &Case, space: &Space, t: &Tensor) -> Result<Access> {
    Access::new(case, space, t)
}

/// Block distribution of coordinate `coord` over the devices of its split.
fn block(case: &Case, space: &Space, coord: usize) -> Assign {
    let name = &space.names[coord];
    let devices = case
        .splits
        .iter()
        .find(|s| &s.index == name)
        .map_or(1, |s| i64::from(s.devices));
    Assign::Block {
        coord,
        block: (space.sizes[coord] / devices).max(1),
    }
}

/// Backward assignment along split `index`: by the owner of the windowed row a gradient lands in,
/// by block otherwise, and on every device when the space lacks the index.
fn backward_assign(
    case: &Case,
    space: &Space,
    tensors: &[&Tensor],
    coord: Option<usize>,
    index: &str,
) -> Assign {
    let Some(coord) = coord else {
        return Assign::All;
    };
    let devices = case
        .splits
        .iter()
        .find(|s| s.index == index)
        .map_or(1, |s| i64::from(s.devices));
    for t in tensors {
        let Some(w) = case.window(&t.name, index) else {
            continue;
        };
        let kernel = w
            .kernel_index
            .as_deref()
            .and_then(|k| space.position(k))
            .or_else(|| space.position(&hidden_name(index)));
        if let Some(kernel) = kernel {
            return Assign::Owner {
                coord,
                kernel,
                stride: w.stride,
                pad: w.pad,
                extent: w.extent,
                block: (w.extent / devices).max(1),
            };
        }
    }
    block(case, space, coord)
}

/// The name of axis `ax`.
pub fn axis_name(ax: usize) -> &'static str {
    AXIS_NAMES.get(ax).copied().unwrap_or("?")
}
