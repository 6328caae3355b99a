//! A timing plan of identical one-matmul layers, for the pipeline-schedule tests: every
//! schedule's simulated bubble against its closed form.

use std::collections::BTreeMap;
use symshard::strategy::{Knobs, Schedule};
use symshard::sym::Rational;
use symshard::timeline::*;

pub fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

pub fn knobs(pp: u64, m: u64, schedule: Schedule) -> Knobs {
    Knobs {
        pp,
        microbatches: m,
        schedule,
        ..Knobs::data_parallel(1)
    }
}

/// A plan of `layers` identical layers of one matmul: forward `f` FLOPs, backward `b` of which
/// `w` are the weight gradient; nothing else.
pub fn uniform(k: Knobs, layers: usize, (f, b, w): (i64, i64, i64)) -> TimingPlan {
    let op = PlanOp {
        name: "mm".into(),
        matmul: true,
        attention_core: false,
        fused_attention: false,
        forward_flops: q(f),
        backward_flops: q(b),
        weight_grad_flops: q(w),
        forward_bytes: q(0),
        backward_bytes: q(0),
        ring_bytes: q(0),
        gemms: Vec::new(),
        params: q(0),
        fused_with_next: false,
        param_grad_bytes: q(0),
        fan_in_bytes: q(0),
        fp8: false,
        fp8_casts_input: false,
        weight_share: q(1),
        expert: false,
    };
    let block = PlanBlock {
        name: "layer".into(),
        layer: true,
        ops: vec![op],
        forward: vec![Step::Compute(0)],
        backward: vec![Step::Compute(0)],
        grads: vec![],
        boundary_bytes: q(0),
        params: q(0),
    };
    // Virtual stages: pp, or two per rank under ZB-V.
    let p = (k.pp * k.virtual_chunks()) as usize;
    TimingPlan {
        format: FORMAT.into(),
        model: "uniform".into(),
        symbols: BTreeMap::new(),
        samples: q(k.microbatches as i64),
        knobs: k,
        gpus_per_node: Some(8),
        tokens: q(0),
        model_flops: q(0),
        memory_per_device: q(0),
        batch_symbol: None,
        sequence_symbol: None,
        settings: BTreeMap::new(),
        routing: None,
        blocks: vec![block],
        items: vec![0; layers],
        stages: vec![layers / p; p],
    }
}

/// The simulated idle share of the busiest rank's work: (flush − work) / work.
#[allow(dead_code)]
pub fn bubble(sim: &Simulation) -> f64 {
    let work = sim.work.iter().cloned().fold(0.0, f64::max);
    (sim.flush - work) / work
}
