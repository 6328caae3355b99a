//! Data-parallel gradient reductions in timelines: overlapping them (and the other overlap
//! knobs) never slows a step, and sharded gradients (ZeRO ≥ 2) are reduce-scattered after every
//! micro-batch.

use num_traits::ToPrimitive;
use proptest::prelude::*;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::{check_knobs, Knobs, Overlap, Recompute, Schedule};
use symshard::sym::Rational;
use symshard::timeline::*;

/// The timeline of gpt3-125m under `k` (batch dp × micro-batches, one sequence each) on an A100
/// table, whose `comm_contention` is not zero; `None` when the strategy does not apply.
fn timeline(k: &Knobs) -> Option<Timeline> {
    timeline_of("gpt3-125m", k)
}

/// [`timeline`] of the shipped model `model`.
fn timeline_of(model: &str, k: &Knobs) -> Option<Timeline> {
    check_knobs(k).ok()?;
    let loader = ModelLoader::embedded().ok()?;
    let m = loader.resolve(model).ok()?;
    let mut values = m.values.clone();
    let batch = (k.dp * k.microbatches) as i64;
    values.insert("B".into(), Rational::from_integer(batch.into()));
    let calib = Calibration::resolve("a100-80gb").ok()?;
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    let (p, _) = plan_strategy(&m, &values, k, &layout, MachineRef::whole(&calib)).ok()?;
    time_plan(&p, &calib).ok()
}

fn base(dp: u64, tp: u64, pp: u64, cp: u64, m: u64, schedule: Schedule, zero: u8) -> Knobs {
    Knobs {
        dp,
        tp,
        pp,
        microbatches: m,
        schedule,
        chunks: if schedule == Schedule::Interleaved {
            2
        } else {
            1
        },
        sequence_parallel: tp > 1,
        recompute: Recompute::None,
        zero,
        ep: 1,
        cp,
        overlap: Overlap {
            tp_comm: false,
            grad_reduce: false,
            param_gather: false,
        },
        precision: Default::default(),
        pipeline_split: Default::default(),
        fp8_params: false,
        fp8_dispatch: false,
        node_dispatch: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// The README's guarantee: an overlapped step is never slower than the same step without
    /// overlap, and never faster than its busiest stream (every stream, the context- and
    /// expert-parallel ones included).
    #[test]
    fn overlap_never_slows_a_step_nor_beats_its_busiest_stream(
        pp in 1u64..=4,
        interleaved in any::<bool>(),
        zero in 0u8..=3,
        cp in 1u64..=2,
        tp in 1u64..=2,
        knob in 0usize..3,
    ) {
        let schedule = if interleaved && pp > 1 { Schedule::Interleaved } else { Schedule::OneFOneB };
        // 12 micro-batches: a multiple of every pp the interleaved schedule needs.
        let serial = base(2, tp, pp, cp, 12, schedule, zero);
        let mut k = serial.clone();
        match knob {
            0 => k.overlap.grad_reduce = true,
            1 => k.overlap.tp_comm = true,
            _ => k.overlap.param_gather = true,
        }
        let (Some(slow), Some(fast)) = (timeline(&serial), timeline(&k)) else {
            return Ok(());
        };
        let (ts, t) = (slow.summary.iteration_seconds, fast.summary.iteration_seconds);
        // Buckets cost a collective call each: where the last ones are ready only as the
        // backward ends, what they hide can be less than the latency of the extra calls (the
        // only way an overlapped step may lose, as on the machine; README).
        let calls = |tl: &Timeline| -> Vec<usize> {
            let mut n = vec![0; tl.sim.busy.len()];
            for e in tl.sim.events.iter().filter(|e| grad_reduction(e)) {
                n[e.device] += 1;
            }
            n
        };
        let extra = calls(&fast)
            .iter()
            .zip(calls(&slow))
            .map(|(a, b)| a.saturating_sub(b))
            .max()
            .unwrap_or(0);
        let call = fast
            .sim
            .events
            .iter()
            .filter(|e| grad_reduction(e))
            .map(|e| e.dur)
            .fold(f64::INFINITY, f64::min);
        let slack = if extra > 0 { extra as f64 * call } else { 0.0 };
        prop_assert!(t <= ts * (1.0 + 1e-9) + slack, "{k}: overlapped {t} > {ts} + {slack}");
        for d in &fast.summary.devices {
            let b = d.busy;
            for busy in [b.compute, b.tp_comm, b.dp_comm, b.p2p, b.ep_comm, b.cp_comm] {
                prop_assert!(busy <= t * (1.0 + 1e-12), "{k}: a stream busy {busy} > {t}");
            }
        }
    }
}

/// ZeRO 3 steps heavy on their data-parallel stream (every layer's weights gathered before each
/// forward and backward of one-sequence micro-batches, over 8 or 32 data-parallel ranks): the
/// gradient reduce-scatters launched during the backward must not hold up the next layer's
/// weight gather, which FSDP issues before them (see `run` in src/timeline/sim/mod.rs). Queued
/// behind them, the gather serialised every layer's backward with the data-parallel stream and
/// the overlapped step lost up to 11 % here (and 3 % on GPT-3 175B with dp 32, tp 2, pp 16,
/// which is too slow for a debug build).
#[test]
fn zero3_reduce_scatters_never_delay_the_next_layers_gather() {
    for (dp, pp) in [(8, 4), (8, 8), (32, 4), (32, 8)] {
        let mut serial = base(dp, 2, pp, 1, 16, Schedule::OneFOneB, 3);
        serial.recompute = Recompute::Selective;
        let mut k = serial.clone();
        k.overlap.grad_reduce = true;
        let slow = timeline_of("gpt3-13b", &serial).expect("a valid strategy");
        let fast = timeline_of("gpt3-13b", &k).expect("a valid strategy");
        let (ts, t) = (
            slow.summary.iteration_seconds,
            fast.summary.iteration_seconds,
        );
        assert!(t <= ts, "{k}: overlapped {t} s > {ts} s without overlap");
        // The regime of the case: the data-parallel stream about as busy as compute.
        let dp_busy = slow
            .summary
            .devices
            .iter()
            .map(|d| d.busy.dp_comm)
            .fold(0.0, f64::max);
        let compute = slow
            .summary
            .devices
            .iter()
            .map(|d| d.busy.compute)
            .fold(0.0, f64::max);
        assert!(
            dp_busy > 0.75 * compute,
            "{k}: dp_comm {dp_busy} s, compute {compute} s"
        );
    }
}

/// Whether `e` is a data-parallel gradient reduction.
fn grad_reduction(e: &Event) -> bool {
    e.stream == Stream::DpComm && matches!(e.what, What::Grad { .. })
}

/// Bytes the data-parallel stream reduce-scatters (gradient events), per device.
fn reduced_bytes(tl: &Timeline) -> Vec<f64> {
    let p = tl.sim.busy.len();
    let mut out = vec![0.0; p];
    for e in &tl.sim.events {
        if grad_reduction(e) {
            out[e.device] += e.bytes;
        }
    }
    out
}

/// Sharded gradients (ZeRO 2: each device keeps the 1/n shard it owns, Rajbhandari et al.,
/// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC'20, §5.2; PyTorch
/// FSDP's `SHARD_GRAD_OP` likewise reduce-scatters after each backward while accumulating
/// gradients without `no_sync`) are reduce-scattered after every micro-batch's backward: m times
/// grads × (n − 1)/n bytes per step. ZeRO 1 keeps whole gradients and reduce-scatters them once.
#[test]
fn sharded_gradients_are_reduce_scattered_after_every_micro_batch() {
    let (m, dp) = (4u64, 4u64);
    for overlap in [false, true] {
        let mut by_zero = Vec::new();
        for zero in [1u8, 2] {
            let mut k = base(dp, 1, 2, 1, m, Schedule::OneFOneB, zero);
            k.overlap.grad_reduce = overlap;
            let tl = timeline(&k).expect("a valid strategy");
            // The gradient bytes of each pipeline rank's stages, as an all-reduce carries them
            // (2 (n − 1)/n per gradient byte): half of that is a reduce-scatter's.
            let p = k.pp as usize;
            let mut grads = vec![0.0; p];
            for (s, &n) in tl.plan.stages.iter().enumerate() {
                let first: usize = tl.plan.stages[..s].iter().sum();
                for &b in &tl.plan.items[first..first + n] {
                    for (_, c) in tl.plan.blocks[b]
                        .grads
                        .iter()
                        .filter(|g| g.1.axis == Axis::Dp)
                    {
                        grads[s % p] += c.bytes.to_f64().unwrap() / 2.0;
                    }
                }
            }
            let times = if zero >= 2 { m as f64 } else { 1.0 };
            for (d, got) in reduced_bytes(&tl).into_iter().enumerate() {
                let want = times * grads[d];
                assert!(want > 0.0);
                assert!(
                    (got - want).abs() <= 1e-9 * want,
                    "zero {zero} overlap {overlap} device {d}: {got} bytes, want {want}"
                );
            }
            by_zero.push(tl.summary.devices[0].busy.dp_comm);
        }
        // More traffic takes the data-parallel stream longer.
        assert!(by_zero[1] > by_zero[0], "overlap {overlap}: {by_zero:?}");
    }
}
