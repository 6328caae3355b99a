//! The collectives table of an evaluation: the analysis's collectives of the blocks a device
//! runs, the context-parallel ring passes and the expert-parallel all-to-alls, row by row.

use super::*;
use crate::parallel::amount::reruns_forward;

/// A collective row with its bytes per call in the fold's number type.
pub(super) fn comm_row<T: Priced>(
    c: &Comm,
    tier: Tier,
    bytes: T,
    count: u64,
    reason: String,
    gradient: bool,
) -> CommRow {
    CommRow {
        collective: c.kind,
        axis: c.axis,
        tier,
        formula: bytes.formula().cloned(),
        bytes: bytes.value().clone(),
        count,
        op: c.op.clone(),
        tensor: c.tensor.clone(),
        reason,
        gradient,
        expert_group: false,
        in_forward: c.site.in_forward(),
    }
}

/// The collectives of the analysis that the blocks `counts` (block, copies) of one device run
/// per step: per-micro-batch collectives (a repeated layer's forward ones twice under full
/// recomputation, which runs its forward again), and gradient reductions: data-parallel
/// all-reduces as the ZeRO stage runs them, the others once a step or, where ZeRO 2–3 shards
/// the gradients, once a micro-batch (expert weights reduced only among the ranks that hold
/// the same experts).
pub(super) fn analysis_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    k: &Knobs,
    links: &Links,
    layer_block: &[bool],
    counts: &[(usize, u64)],
) -> Result<Vec<CommRow>, StrategyError> {
    let mut comm = Vec::new();
    let plain_dp_tier = links.mesh.axis(AxisKind::Dp).tier;
    let tier_of = |ax: AxisKind, grad: bool| match ax {
        AxisKind::Dp if grad => links.dp_tier,
        AxisKind::Dp => plain_dp_tier,
        _ => links.tp_tier,
    };
    for &(bi, copies) in counts {
        for (at, b) in &numbers[bi].comm {
            let c = at.of(&a.blocks[bi]);
            let per_call = b.clone() / T::int(c.calls.into());
            let tier = tier_of(c.axis, false);
            let mut row = comm_row(c, tier, per_call, 0, c.reason.clone(), false);
            let rerun = row.in_forward && reruns_forward(k.recompute, layer_block[bi]);
            row.count = copies * k.microbatches * c.calls as u64 * if rerun { 2 } else { 1 };
            comm.push(row);
        }
        let experts: Vec<&str> = a.blocks[bi]
            .ops
            .iter()
            .filter(|o| o.role == Some(Role::ExpertGemm))
            .map(|o| o.name.as_str())
            .collect();
        for (at, b) in &numbers[bi].grad_comm {
            let c = at.of(&a.blocks[bi]);
            let expert = experts.contains(&c.op.as_str());
            // An expert weight's gradients, under expert parallelism, over the ranks holding
            // the same experts.
            let group = expert && k.ep > 1 && c.axis == AxisKind::Dp;
            let (b, tier) = if group {
                (
                    crate::parallel::moe::expert_grad_allreduce(b, k.dp, k.cp, k.ep)?,
                    links.mesh.expert_grad_axis(k.ep).tier,
                )
            } else {
                (b.clone(), tier_of(c.axis, true))
            };
            let per_call = b / T::int(c.calls.into());
            if c.axis == AxisKind::Dp && c.kind == CollectiveKind::AllReduce {
                let layer = a.blocks[bi].repeat != Poly::one();
                let saving = row_fp8_gather_saving(&numbers[bi], *at, layer, expert, k)
                    / T::int(c.calls.into());
                // As the step runs it under its ZeRO stage: reduce-scatters and all-gathers.
                for (kind, calls, share) in crate::parallel::amount::zero_reduction(k) {
                    let mut bytes = per_call.clone() * T::constant(share);
                    if kind == CollectiveKind::AllGather && k.fp8_params {
                        bytes = bytes - saving.clone();
                    }
                    let count = copies * c.calls as u64 * calls;
                    let mut row =
                        comm_row(c, tier, bytes, count, zero_reason(k.zero, &c.reason), true);
                    row.collective = kind;
                    row.expert_group = group;
                    comm.push(row);
                }
                continue;
            }
            // Once a step, or with each micro-batch's reduce-scatter where ZeRO 2–3 shards the
            // gradients ([`crate::parallel::amount::grad_reductions`]).
            let times = if k.shards_gradients() {
                k.microbatches
            } else {
                1
            };
            let count = copies * c.calls as u64 * times;
            let mut row = comm_row(c, tier, per_call, count, c.reason.clone(), true);
            row.expert_group = group;
            comm.push(row);
        }
    }
    Ok(comm)
}

/// What one all-gather of the weights of the operator of gradient collective `at` (ZeRO 1–2's
/// after the step, or one of ZeRO 3's per layer) does not move with FP8 parameters, all calls
/// together ([`crate::parallel::amount::fp8_gather_saving`] for its weight: a repeated
/// layer's FP8 GEMM, an `expert` one's over its expert-data-parallel group; zero otherwise).
pub(super) fn row_fp8_gather_saving<T: Priced>(
    n: &BlockNumbers<T>,
    at: CommRef,
    layer: bool,
    expert: bool,
    k: &Knobs,
) -> T {
    // Counted once per operator, on its first gradient (a linear layer's weight, before its
    // bias).
    let CommRef::Grad { op, index: 0 } = at else {
        return T::zero();
    };
    if !layer {
        return T::zero();
    }
    n.fp8_op_weights
        .iter()
        .find(|(o, _)| *o == op)
        .map_or_else(T::zero, |(_, w)| {
            // A device holds E/ep experts' weights, gathered over the ranks holding the same.
            let (held, ranks) = if expert {
                (w.clone() / T::int(k.ep), k.expert_replicas())
            } else {
                (w.clone(), k.replicas())
            };
            crate::parallel::amount::fp8_gather_saving(held, k, ranks)
        })
}

/// Why a data-parallel gradient collective runs, under ZeRO stage `zero`.
pub(super) fn zero_reason(zero: u8, reason: &str) -> String {
    match zero {
        0 => reason.to_string(),
        1 => format!("{reason}; ZeRO 1: reduce-scattered to the optimizer shards once a step, the updated weights all-gathered"),
        2 => format!("{reason}; ZeRO 2: each micro-batch's gradients reduce-scattered to their shards, the updated weights all-gathered once a step"),
        _ => format!("{reason}; ZeRO 3 (FSDP): each micro-batch's gradients reduce-scattered, the weights all-gathered before every forward and backward"),
    }
}

/// The context-parallel ring passes of the blocks `counts` per step: forward (cp − 1) steps,
/// backward 2·(cp − 1), plus the forward's again where recomputation reruns the operator.
pub(super) fn ring_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    k: &Knobs,
    links: &Links,
    layer_block: &[bool],
    counts: &[(usize, u64)],
) -> Vec<CommRow> {
    let mut comm = Vec::new();
    for &(bi, copies) in counts {
        let n = &numbers[bi];
        for (oi, x) in &n.ring_ops {
            let op = &a.blocks[bi].ops[*oi];
            let reruns = match (k.recompute, layer_block[bi]) {
                (Recompute::Full, true) => 1,
                (Recompute::Selective, true) => u64::from(op.recomputed),
                _ => 0,
            };
            comm.push(CommRow {
                collective: CollectiveKind::SendRecv,
                axis: AxisKind::Cp,
                tier: links.cp_tier,
                bytes: x.value().clone(),
                formula: x.formula().cloned(),
                count: copies * k.microbatches * (k.cp - 1) * (3 + reruns),
                op: op.name.clone(),
                tensor: "key, value".into(),
                gradient: false,
                expert_group: false,
                in_forward: false,
                reason: "context parallelism passes each rank's keys and values to the next rank of the ring, cp − 1 steps forward; backward passes them again with their gradients".into(),
            });
        }
    }
    comm
}

/// The expert-parallel all-to-alls of the blocks `counts` per step: tokens go to the devices
/// holding their experts and back, forward and backward (and forward again where full
/// recomputation reruns a repeated layer).
pub(super) fn all_to_all_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    k: &Knobs,
    links: &Links,
    layer_block: &[bool],
    counts: &[(usize, u64)],
    share: &Rational,
) -> Vec<CommRow> {
    let mut comm = Vec::new();
    for &(bi, copies) in counts {
        let n = &numbers[bi];
        if n.slot_bytes.is_zero() {
            continue;
        }
        // Each row's calls are half forward, half backward.
        let again = |calls: u64| {
            if reruns_forward(k.recompute, layer_block[bi]) {
                calls + calls / 2
            } else {
                calls
            }
        };
        let [toward, back, ..] =
            crate::parallel::moe::all_to_all_wire(n.slot_bytes.clone(), k, share);
        let row = |per_call: T, calls: u64, tensor: &str, reason: &str| CommRow {
            collective: CollectiveKind::AllToAll,
            axis: AxisKind::Ep,
            tier: links.ep_tier,
            bytes: per_call.value().clone(),
            formula: per_call.formula().cloned(),
            count: copies * k.microbatches * again(calls),
            op: format!("{} experts", a.blocks[bi].name),
            tensor: tensor.into(),
            reason: reason.into(),
            gradient: false,
            expert_group: false,
            in_forward: false,
        };
        if k.fp8_dispatch {
            comm.push(row(
                toward,
                2,
                "expert slots (FP8)",
                "tokens go to the devices holding their experts, forward (dispatch) and backward (the combine's gradient), in FP8 with a scale per 128 elements (DeepSeek-V3's FP8 dispatch)",
            ));
            comm.push(row(
                back,
                2,
                "expert slots",
                "tokens come back from their experts, forward (combine) and backward (the dispatch's gradient), in bf16",
            ));
        } else {
            comm.push(row(
                back,
                4,
                "expert slots",
                "tokens go to the devices holding their experts and back, forward and backward",
            ));
        }
    }
    comm
}
