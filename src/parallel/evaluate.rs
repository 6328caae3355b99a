//! Evaluating an analysis for one strategy: exact per-device FLOPs, collectives, point-to-point
//! bytes and memory, the pipeline partition, and the relative cost of DESIGN §3.

use super::analysis::{Analysis, Comm, DP, TP};
use crate::calib::Calibration;
use crate::model::Model;
use crate::rules::law::CollectiveKind;
use crate::strategy::{AxisKind, Knobs, Mesh, Recompute, Schedule, Tier};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, ToPrimitive, Zero};
use serde::Serialize;

/// Bytes of mixed-precision Adam state per parameter: bf16 weights, bf16 gradients, and fp32
/// master weights, momentum and variance (Rajbhandari et al. 2020).
pub const WEIGHT_BYTES: i64 = 2;
/// Gradient bytes per parameter.
pub const GRAD_BYTES: i64 = 2;
/// Optimizer-state bytes per parameter.
pub const OPTIMIZER_BYTES: i64 = 12;

/// One block evaluated for one (micro)batch on one device.
#[derive(Debug, Clone, Default)]
pub struct BlockNumbers {
    /// Copies of the block.
    pub repeat: u64,
    /// Forward FLOPs.
    pub forward: Rational,
    /// Backward FLOPs.
    pub backward: Rational,
    /// Forward FLOPs of the attention core.
    pub attention_forward: Rational,
    /// Saved bytes.
    pub saved: Rational,
    /// Saved bytes of the attention core.
    pub attention_saved: Rational,
    /// Parameter elements.
    pub params: Rational,
    /// Per-microbatch collectives: (comm, evaluated wire bytes).
    pub comm: Vec<(Comm, Rational)>,
    /// Per-step gradient reductions.
    pub grad_comm: Vec<(Comm, Rational)>,
    /// Boundary activation bytes.
    pub boundary: Rational,
}

fn eval(p: &Poly, b: &Bindings) -> Result<Rational, String> {
    p.eval(b).map_err(|e| e.to_string())
}

/// Megatron-LM pads the vocabulary to a multiple of this times the tensor-parallel degree
/// (`--make-vocab-size-divisible-by`, default 128) when tensor parallelism splits it.
pub const VOCAB_PAD: u64 = 128;

/// The bindings of one microbatch: the model's values with `B` divided by the micro-batch count,
/// and a vocabulary `V` that tensor parallelism does not divide padded as Megatron-LM pads it.
pub fn microbatch_bindings(values: &Bindings, k: &Knobs) -> Bindings {
    let mut b = values.clone();
    if let Some(v) = b.get_mut("V") {
        let t = r(k.tp);
        if k.tp > 1 && !(&*v / &t).is_integer() {
            let unit = r(VOCAB_PAD * k.tp);
            *v = (&*v / &unit).ceil() * unit;
        }
    }
    if let Some(v) = b.get_mut("B") {
        *v = &*v / Rational::from_integer(k.microbatches.into());
    }
    b.insert(DP.into(), Rational::from_integer(k.dp.into()));
    b.insert(TP.into(), Rational::from_integer(k.tp.into()));
    b
}

/// Evaluates every block of an analysis for one microbatch.
pub fn block_numbers(a: &Analysis, b: &Bindings) -> Result<Vec<BlockNumbers>, String> {
    let mut out = Vec::new();
    for blk in &a.blocks {
        let repeat = eval(&blk.repeat, b)?;
        if !repeat.is_integer() || repeat <= Rational::zero() {
            return Err(format!("block `{}` repeats {repeat} times", blk.name));
        }
        let mut n = BlockNumbers {
            repeat: repeat
                .to_integer()
                .to_u64()
                .ok_or("repeat count too large")?,
            ..BlockNumbers::default()
        };
        for op in &blk.ops {
            let fwd = eval(&op.forward, b)?;
            let saved = eval(&op.saved, b)?;
            if op.attention_core {
                n.attention_forward += &fwd;
                n.attention_saved += &saved;
            }
            n.forward += fwd;
            n.backward += eval(&op.backward, b)?;
            n.saved += saved;
            n.params += eval(&op.params, b)?;
            for c in &op.comm {
                n.comm.push((c.clone(), eval(&c.wire_bytes, b)?));
            }
            for c in &op.grad_comm {
                n.grad_comm.push((c.clone(), eval(&c.wire_bytes, b)?));
            }
        }
        for c in &blk.edges {
            n.comm.push((c.clone(), eval(&c.wire_bytes, b)?));
        }
        n.boundary = eval(&blk.boundary_bytes, b)?;
        out.push(n);
    }
    Ok(out)
}

/// A collective as reported per device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommRow {
    /// Its kind.
    pub collective: CollectiveKind,
    /// Mesh axis.
    pub axis: AxisKind,
    /// Link tier.
    pub tier: Tier,
    /// Wire bytes per call per rank.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bytes: Rational,
    /// Calls per training step.
    pub count: u64,
    /// Operator or edge.
    pub op: String,
    /// Tensor moved.
    pub tensor: String,
    /// Why.
    pub reason: String,
}

/// Memory per device in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Memory {
    /// Weights.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub params: Rational,
    /// Gradients.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub grads: Rational,
    /// Optimizer state.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub optimizer: Rational,
    /// Saved activations.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub activations: Rational,
    /// All together.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub total: Rational,
}

/// FLOP-equivalent cost (DESIGN §3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RelativeCost {
    /// Compute FLOPs per device per step (with recomputation).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub compute: Rational,
    /// κ_intra × intra-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_intra: Rational,
    /// κ_inter × inter-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_inter: Rational,
    /// Idle pipeline time, in FLOP-equivalents.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bubble: Rational,
    /// The part of `total` that is FLOPs (compute and its share of the bubble).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flop_part: Rational,
    /// The part of `total` that is κ × bytes (scales with the machine balance).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub byte_part: Rational,
    /// The sum.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub total: Rational,
}

/// One pipeline stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// Stage number.
    pub stage: u64,
    /// Layer items (block copies) it runs, as `block×count`.
    pub items: Vec<(String, u64)>,
    /// FLOPs per device per step.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flops: Rational,
    /// Memory per device.
    pub memory: Memory,
}

/// A strategy evaluated on one machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// The knobs.
    pub knobs: Knobs,
    /// The mesh.
    pub mesh: Mesh,
    /// FLOPs per device per step on the busiest stage, with recomputation.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flops: Rational,
    /// Model FLOPs per step of the whole model (forward + backward, no recomputation).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub model_flops: Rational,
    /// Collectives of the busiest stage's device.
    pub comm: Vec<CommRow>,
    /// Point-to-point bytes sent per device per step.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub p2p_bytes: Rational,
    /// Memory of the fullest device.
    pub memory: Memory,
    /// Stages.
    pub stages: Vec<Stage>,
    /// Idle fraction of the pipeline schedule.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bubble_fraction: Rational,
    /// Relative cost.
    pub relative: RelativeCost,
    /// Whether it fits in memory.
    pub feasible: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// Per-item numbers of the pipeline partition.
#[derive(Clone)]
struct Item {
    block: usize,
    compute: Rational,
    tp_bytes: Rational,
    saved: Rational,
    params: Rational,
}

fn r(v: u64) -> Rational {
    Rational::from_integer(v.into())
}

/// Checks that every split divides its index at these bindings.
pub fn check_divisibility(
    model: &Model,
    a: &Analysis,
    b: &Bindings,
    k: &Knobs,
) -> Result<(), String> {
    for (blk, ba) in model.blocks.iter().zip(&a.blocks) {
        for (node, op) in blk.ops().zip(&ba.ops) {
            let mut by_index: Vec<(String, u64, &str)> = Vec::new();
            if let Some(i) = &op.plan.dp {
                by_index.push((i.clone(), k.dp, "dp"));
            }
            if let Some((i, _)) = &op.plan.tp {
                match by_index.iter_mut().find(|(j, _, _)| j == i) {
                    Some(e) => {
                        e.1 *= k.tp;
                        e.2 = "dp × tp";
                    }
                    None => by_index.push((i.clone(), k.tp, "tp")),
                }
            }
            for (i, size, axis) in by_index {
                let v = eval(&node.bind[&i], b)?;
                let q = &v / r(size);
                if !q.is_integer() || q.is_zero() {
                    return Err(format!(
                        "{axis} = {size} does not divide `{}` index `{i}` = {} = {v}",
                        node.name, node.bind[&i]
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Splits `items` into exactly `pp` contiguous stages, minimising the largest stage time: a
/// binary search on the largest load with a greedy packing, then the fullest stages split until
/// there are `pp` (splitting never raises the largest load). Returns the stage boundaries.
fn partition(items: &[Item], pp: usize, kappa_tp: f64) -> Option<Vec<usize>> {
    let n = items.len();
    if pp == 0 || pp > n {
        return None;
    }
    let t: Vec<f64> = items
        .iter()
        .map(|i| {
            i.compute.to_f64().unwrap_or(f64::MAX)
                + kappa_tp * i.tp_bytes.to_f64().unwrap_or(f64::MAX)
        })
        .collect();
    let pack = |limit: f64| -> Vec<usize> {
        let mut bounds = vec![0];
        let mut load = 0.0;
        for (i, &x) in t.iter().enumerate() {
            if load > 0.0 && load + x > limit {
                bounds.push(i);
                load = 0.0;
            }
            load += x;
        }
        bounds.push(n);
        bounds
    };
    let (mut lo, mut hi) = (t.iter().cloned().fold(0.0, f64::max), t.iter().sum::<f64>());
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if pack(mid).len() - 1 <= pp {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut bounds = pack(hi);
    while bounds.len() - 1 < pp {
        // Split the stage with the most items in two.
        let s = (0..bounds.len() - 1).max_by_key(|&s| bounds[s + 1] - bounds[s])?;
        if bounds[s + 1] - bounds[s] < 2 {
            return None;
        }
        let mid = bounds[s] + (bounds[s + 1] - bounds[s]) / 2;
        bounds.insert(s + 1, mid);
    }
    Some(bounds)
}

/// Evaluates a strategy. `memory` is the device capacity in bytes.
pub fn evaluate(
    model: &Model,
    a: &Analysis,
    numbers: &[BlockNumbers],
    knobs: &Knobs,
    calib: &Calibration,
    gpus_per_node: u64,
    memory: &Rational,
) -> Result<Evaluation, String> {
    let k = knobs;
    let mesh = Mesh::new(k.tp, k.dp, k.pp, gpus_per_node);
    let kappa = |t: Tier| calib.balance(t);
    let tp_tier = mesh.axis(AxisKind::Tp).tier;
    let dp_tier = mesh.axis(AxisKind::Dp).tier;
    let p2p_tier = mesh.p2p_tier();
    let m = r(k.microbatches);
    // Items: block copies in order.
    let repeated: Vec<bool> = numbers
        .iter()
        .map(|n| n.repeat > 1 || a.blocks.len() == 1)
        .collect();
    let mut items = Vec::new();
    for (bi, n) in numbers.iter().enumerate() {
        let layer = repeated[bi] || model.blocks[bi].repeat != Poly::one();
        let (extra, saved) = match (k.recompute, layer) {
            (Recompute::Full, true) => (n.forward.clone(), n.boundary.clone()),
            (Recompute::Selective, true) => {
                (n.attention_forward.clone(), &n.saved - &n.attention_saved)
            }
            _ => (Rational::zero(), n.saved.clone()),
        };
        let tp_bytes: Rational = n
            .comm
            .iter()
            .filter(|(c, _)| c.axis == AxisKind::Tp)
            .map(|(_, b)| b.clone())
            .sum();
        for _ in 0..n.repeat {
            items.push(Item {
                block: bi,
                compute: &n.forward + &n.backward + &extra,
                tp_bytes: tp_bytes.clone(),
                saved: saved.clone(),
                params: n.params.clone(),
            });
        }
    }
    if (k.pp as usize) > items.len() {
        return Err(format!(
            "pp = {} is more than the {} layers to place",
            k.pp,
            items.len()
        ));
    }
    let v = if k.schedule == Schedule::Interleaved {
        k.chunks
    } else {
        1
    };
    if v > 1 && !(items.len() as u64).is_multiple_of(k.pp * v) {
        return Err(format!(
            "interleaved-1f1b with {v} chunks needs the {} layers divisible by pp × chunks = {}",
            items.len(),
            k.pp * v
        ));
    }
    let kt = kappa(tp_tier).to_f64().unwrap_or(0.0);
    let bounds = partition(&items, k.pp as usize, kt).ok_or("no pipeline partition")?;
    let zero_div = |stage_min: u8| {
        if k.zero >= stage_min {
            r(k.dp)
        } else {
            Rational::one()
        }
    };
    let full_layer_saved: Rational = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| repeated[*bi])
        .map(|(_, n)| n.saved.clone())
        .max()
        .unwrap_or_default();
    let mut stages = Vec::new();
    let mut best: Option<(Rational, usize)> = None;
    let mut stage_time = Vec::new();
    let mut stage_extra = Vec::new();
    for s in 0..k.pp as usize {
        let its = &items[bounds[s]..bounds[s + 1]];
        let compute: Rational = its.iter().map(|i| i.compute.clone()).sum::<Rational>() * &m;
        let tp_bytes: Rational = its.iter().map(|i| i.tp_bytes.clone()).sum::<Rational>() * &m;
        let params: Rational = its.iter().map(|i| i.params.clone()).sum();
        let saved: Rational = its.iter().map(|i| i.saved.clone()).sum();
        let inflight = match k.schedule {
            Schedule::Gpipe => m.clone(),
            _ if k.pp == 1 => Rational::one(),
            Schedule::OneFOneB => r(k.microbatches.min(k.pp - s as u64)),
            Schedule::Interleaved => {
                let base = r(k.microbatches.min(k.pp - s as u64));
                base * (Rational::one() + Rational::new((k.pp - 1).into(), (k.pp * v).into()))
            }
        };
        let mut activations = saved * inflight;
        if k.recompute == Recompute::Full {
            activations += full_layer_saved.clone();
        }
        let weights = &params * r(WEIGHT_BYTES as u64) / zero_div(3);
        let grads = &params * r(GRAD_BYTES as u64) / zero_div(2);
        let optimizer = &params * r(OPTIMIZER_BYTES as u64) / zero_div(1);
        let total = &weights + &grads + &optimizer + &activations;
        let mem = Memory {
            params: weights,
            grads,
            optimizer,
            activations,
            total,
        };
        let mut names: Vec<(String, u64)> = Vec::new();
        for i in its {
            let name = a.blocks[i.block].name.clone();
            match names.last_mut() {
                Some((n, c)) if *n == name => *c += 1,
                _ => names.push((name, 1)),
            }
        }
        // Per-step gradient reductions of the stage's parameters; ZeRO-3 gathers weights again
        // in forward and backward: 3/2 of the all-reduce bytes.
        let mut dp_bytes = Rational::zero();
        let mut tp_grad = Rational::zero();
        for i in its {
            for (c, b) in &numbers[i.block].grad_comm {
                match c.axis {
                    AxisKind::Dp => dp_bytes += b.clone(),
                    _ => tp_grad += b.clone(),
                }
            }
        }
        if k.zero == 3 {
            dp_bytes *= Rational::new(3.into(), 2.into());
        }
        // Activations go forward to the next stage, their gradients back to the previous one.
        let boundary_after = |end: usize| numbers[items[end - 1].block].boundary.clone();
        let mut p2p = Rational::zero();
        if (s as u64) + 1 < k.pp {
            p2p += boundary_after(bounds[s + 1]);
        }
        if s > 0 {
            p2p += boundary_after(bounds[s]);
        }
        let p2p = p2p * &m;
        let time = &compute + kappa(tp_tier) * (&tp_bytes + &tp_grad);
        let extra = kappa(dp_tier) * &dp_bytes + kappa(p2p_tier) * &p2p;
        let total_cost = &time + &extra;
        if best.as_ref().is_none_or(|(b, _)| total_cost > *b) {
            best = Some((total_cost, s));
        }
        stage_time.push(time);
        stage_extra.push((dp_bytes, tp_bytes + tp_grad, p2p));
        stages.push(Stage {
            stage: s as u64,
            items: names,
            flops: compute,
            memory: mem,
        });
    }
    let (_, bs) = best.ok_or("no stages")?;
    let t_max = stage_time.iter().max().cloned().unwrap_or_default();
    let bubble_fraction = Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    let bubble = &t_max * &bubble_fraction;
    let t_max_stage = stage_time.iter().position(|t| *t == t_max).unwrap_or(0);
    let t_max_flops = stages[t_max_stage].flops.clone();
    let (dp_bytes, tp_bytes, p2p) = stage_extra[bs].clone();
    let mut relative = RelativeCost {
        compute: stages[bs].flops.clone(),
        bubble,
        ..RelativeCost::default()
    };
    for (bytes, tier) in [(&dp_bytes, dp_tier), (&tp_bytes, tp_tier), (&p2p, p2p_tier)] {
        let c = kappa(tier) * bytes;
        match tier {
            Tier::Intra => relative.comm_intra += c,
            Tier::Inter => relative.comm_inter += c,
        }
    }
    relative.total =
        &relative.compute + &relative.comm_intra + &relative.comm_inter + &relative.bubble;
    relative.flop_part = &relative.compute + &t_max_flops * &bubble_fraction;
    relative.byte_part = &relative.total - &relative.flop_part;
    // Collectives of the busiest stage's device.
    let mut comm = Vec::new();
    let its = &items[bounds[bs]..bounds[bs + 1]];
    let mut per_block: Vec<(usize, u64)> = Vec::new();
    for i in its {
        match per_block.iter_mut().find(|(b, _)| *b == i.block) {
            Some(e) => e.1 += 1,
            None => per_block.push((i.block, 1)),
        }
    }
    for (bi, copies) in per_block {
        let tier_of = |ax: AxisKind| if ax == AxisKind::Dp { dp_tier } else { tp_tier };
        for (c, b) in &numbers[bi].comm {
            comm.push(CommRow {
                collective: c.kind,
                axis: c.axis,
                tier: tier_of(c.axis),
                bytes: b / r(c.calls.into()),
                count: copies * k.microbatches * c.calls as u64,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
                reason: c.reason.clone(),
            });
        }
        for (c, b) in &numbers[bi].grad_comm {
            comm.push(CommRow {
                collective: c.kind,
                axis: c.axis,
                tier: tier_of(c.axis),
                bytes: b / r(c.calls.into()),
                count: copies * c.calls as u64,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
                reason: c.reason.clone(),
            });
        }
    }
    let fullest = stages
        .iter()
        .map(|s| &s.memory)
        .max_by(|a, b| a.total.cmp(&b.total))
        .cloned()
        .unwrap_or_default();
    let feasible = fullest.total <= *memory;
    let reason = (!feasible).then(|| {
        format!(
            "needs {} bytes per device, more than {}",
            fullest.total.to_integer(),
            memory.to_integer()
        )
    });
    // Whole-model FLOPs per step without recomputation.
    let mut model_flops = Rational::zero();
    for (n, blk) in numbers.iter().zip(&a.blocks) {
        let _ = blk;
        model_flops += (&n.forward + &n.backward) * r(n.repeat);
    }
    model_flops = model_flops * &m * r(k.dp) * r(k.tp);
    Ok(Evaluation {
        knobs: k.clone(),
        mesh,
        flops: stages[bs].flops.clone(),
        model_flops,
        comm,
        p2p_bytes: p2p,
        memory: fullest,
        stages,
        bubble_fraction,
        relative,
        feasible,
        reason,
    })
}
