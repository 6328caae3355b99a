//! Under expert parallelism an expert weight's gradients are reduced, and its weights gathered,
//! over the ranks holding the same experts (Megatron-Core's expert-data-parallel group, the
//! dp·cp/ep ranks `tp × ep` devices apart; megatron/core/parallel_state.py), not over the dp·cp
//! replicas. Those ranks span the same nodes as the replicas but with fewer of them in each
//! node, so more of their ring crosses the inter-node links: with tp = 1 and ep = 8 on nodes of
//! 8, each node holds one expert-parallel group and an expert's 4 replicas sit one per node.
//! The relative cost and the timeline both price the two groups apart. Hand counts from
//! Mixtral 8x7B's configuration (Jiang et al. 2024, arXiv:2401.04088, Table 1: 32 layers,
//! dim 4096, hidden_dim 14336, 8 experts; Hugging Face mistralai/Mixtral-8x7B-v0.1
//! config.json): three 4096 × 14336 matrices per expert, 46,702,792,704 parameters in all.

mod common;

use symshard::calib::Calibration;
use symshard::machine::Collective;
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Mesh, Tier};
use symshard::sym::Rational;
use symshard::timeline::{time_plan, Rates, What};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

const PARAMETERS: f64 = 46_702_792_704.0;
/// One expert's weights over the 32 layers.
const ONE_EXPERT: f64 = 32.0 * 3.0 * 4096.0 * 14336.0;

/// dp = 32, ep = 8, ZeRO 1, tp = pp = 1: 32 devices on 4 nodes of 8.
fn knobs() -> Knobs {
    Knobs {
        ep: 8,
        zero: 1,
        microbatches: 1,
        ..Knobs::data_parallel(32)
    }
}

/// The relative cost prices the expert rows' bytes at the κ of their own group: all 4 ranks
/// holding an expert are in different nodes, so all of their ring crosses the inter-node
/// links; the replicas' ring (8 per node on 4 nodes) puts (4 − 1)/31 of its bytes there.
#[test]
fn the_relative_cost_prices_expert_gradients_on_their_own_group() {
    let e = common::evaluate_on(
        "mixtral-8x7b",
        &[("B", 32), ("S", 256)],
        &knobs(),
        "h100-sxm",
    );
    let (mut dense, mut expert) = (q(0), q(0));
    for r in e
        .comm
        .iter()
        .filter(|r| r.gradient && r.axis == AxisKind::Dp)
    {
        let bytes = &r.bytes * q(r.count as i64);
        if r.op.starts_with("expert_") {
            expert += bytes;
        } else {
            dense += bytes;
        }
    }
    assert!(expert > q(0) && dense > q(0));
    let calib = Calibration::resolve("h100-sxm").unwrap();
    let inter = calib.balance(Tier::Inter);
    // Nothing else crosses the nodes: the expert-parallel all-to-alls stay in each node.
    let want = inter * (dense * Rational::new(3.into(), 31.into()) + expert);
    assert_eq!(e.relative.comm_inter, want);
}

/// The timeline gathers the updated weights after the optimizer step (ZeRO 1) as two
/// collectives, each over its group: the dense weights over the 32 replicas, the device's one
/// expert over the 4 ranks holding it. Bytes per rank: (n − 1)/n of each group's 2-byte
/// weights.
#[test]
fn the_timeline_gathers_expert_weights_over_their_own_group() {
    let (plan, calib) = common::plan_on(
        "mixtral-8x7b",
        &[("B", 32), ("S", 256)],
        &knobs(),
        "h100-sxm",
    );
    let t = time_plan(&plan, &calib).unwrap();
    let gathers: Vec<_> = t
        .sim
        .events
        .iter()
        .filter(|e| e.device == 0 && e.what == What::ParamGather)
        .collect();
    assert_eq!(gathers.len(), 1);
    let dense_wire = (PARAMETERS - 8.0 * ONE_EXPERT) * 2.0 * 31.0 / 32.0;
    let expert_wire = ONE_EXPERT * 2.0 * 3.0 / 4.0;
    assert!((gathers[0].bytes - dense_wire - expert_wire).abs() < 1e-6 * gathers[0].bytes);
    let mesh = Mesh::of(&knobs(), 8);
    let rates = Rates::of(&calib);
    let edp = mesh.expert_grad_axis(8);
    assert_eq!((edp.size, edp.per_node, edp.tier), (4, 1, Tier::Inter));
    let want = rates.collective_seconds(Collective::AllGather, dense_wire, &mesh.grad_axis())
        + rates.collective_seconds(Collective::AllGather, expert_wire, &edp);
    assert!(
        (gathers[0].dur - want).abs() < 1e-6 * want,
        "{} s against {want} s",
        gathers[0].dur
    );
    // Over the replicas' ring the same expert bytes would take a fraction of that.
    let flat = rates.collective_seconds(Collective::AllGather, expert_wire, &edp);
    let spread = rates.collective_seconds(Collective::AllGather, expert_wire, &mesh.grad_axis());
    assert!(flat > 2.0 * spread, "{flat} against {spread}");
}

/// The plan states each expert weight's gradient reduction on the expert group's axis, and
/// the collectives table its all-reduce's share as reduce-scatters and all-gathers.
#[test]
fn expert_gradient_reductions_are_on_the_expert_group() {
    let (plan, _) = common::plan_on(
        "mixtral-8x7b",
        &[("B", 32), ("S", 256)],
        &knobs(),
        "h100-sxm",
    );
    let layer = plan.blocks.iter().find(|b| b.layer).unwrap();
    for (op, c) in &layer.grads {
        let expert = layer.ops[*op].expert;
        let on_group = c.axis == symshard::timeline::Axis::ExpertDp;
        assert_eq!(expert, on_group, "{}", c.name);
    }
    let e = common::evaluate_on(
        "mixtral-8x7b",
        &[("B", 32), ("S", 256)],
        &knobs(),
        "h100-sxm",
    );
    assert!(e
        .comm
        .iter()
        .any(|r| r.op.starts_with("expert_") && r.collective == CollectiveKind::ReduceScatter));
}
