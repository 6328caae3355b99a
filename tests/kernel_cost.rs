//! The relative cost's kernel term: what the kernels take beyond their FLOPs at the matmul
//! plateau, read from the calibration table (its matmul curve by GEMM size, its tiling, its
//! attention curve and its time per kernel).

use num_traits::{ToPrimitive, Zero};
use symshard::calib::{Calibration, MachineRef};
use symshard::model::{Model, ModelLoader};
use symshard::parallel::{evaluate_strategy, Evaluation, Layout};
use symshard::strategy::{Knobs, Recompute};
use symshard::sym::{Bindings, Rational};

mod common;
use common::json;

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn llama(batch: i64) -> (Model, Bindings) {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("llama3-8b")
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(batch));
    (m, v)
}

fn evaluate(m: &Model, v: &Bindings, k: &Knobs, calib: &Calibration) -> Evaluation {
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    let memory = q(1_000_000_000_000);
    evaluate_strategy(
        m,
        v,
        k,
        &layout,
        MachineRef::new(calib, calib.gpus_per_node(), &memory),
    )
    .unwrap()
    .1
}

/// The parts add up to the total; without a pipeline (no partition to move, no bubble) the
/// kernel term is exactly what the total loses when every kernel runs at the plateau, less the
/// traffic the longer backward hides, and the rest of the relative cost is the same.
#[test]
fn the_kernel_term_is_the_difference_from_the_plateau() {
    let (m, v) = llama(64);
    for machine in ["dgx-h100", "a100-80gb", "v100-dgx2h", "a40-pcie"] {
        let calib = Calibration::resolve(machine).unwrap();
        for (dp, tp, mb, recompute) in [
            (8, 8, 8, Recompute::None),
            (64, 1, 1, Recompute::Selective),
            (16, 4, 4, Recompute::Full),
        ] {
            let k = Knobs {
                tp,
                microbatches: mb,
                sequence_parallel: tp > 1,
                recompute,
                zero: 1,
                ..Knobs::data_parallel(dp)
            };
            let e = evaluate(&m, &v, &k, &calib);
            let flat = evaluate(&m, &v, &k, &calib.at_plateau());
            let r = &e.relative;
            let case = format!("{machine} {k}");
            assert!(r.kernels > Rational::zero(), "{case}");
            assert!(flat.relative.kernels.is_zero(), "{case}");
            assert_eq!(
                &r.compute + &r.kernels + &r.comm_intra + &r.comm_inter + &r.bubble - &r.hidden,
                r.total,
                "{case}"
            );
            // The kernels also lengthen the backward, under which more of the gradient reduction
            // hides where the backward, not the reduction, is the smaller.
            assert!(r.hidden >= flat.relative.hidden, "{case}");
            assert_eq!(
                &flat.relative.total + &r.kernels - (&r.hidden - &flat.relative.hidden),
                r.total,
                "{case}"
            );
            assert_eq!(flat.relative.compute, r.compute, "{case}");
            assert_eq!(flat.flops, e.flops, "{case}");
            assert_eq!(e.stages[0].kernel_cost, r.kernels, "{case}");
            // Full recomputation reruns every forward kernel of a layer: the term grows with it
            // (selective recomputation has nothing to rerun under Llama's fused attention).
            if recompute == Recompute::Full {
                let plain = evaluate(
                    &m,
                    &v,
                    &Knobs {
                        recompute: Recompute::None,
                        ..k.clone()
                    },
                    &calib,
                );
                assert!(plain.relative.kernels < r.kernels, "{case}");
            }
        }
    }
}

/// Published trend (Korthikanti et al. 2022, Narayanan et al. SC'21 Fig. 13: throughput rises
/// with the micro-batch size at first): the same step's FLOPs cost more per FLOP in small GEMMs.
/// On the A100 table (its GEMM sweep's curve, 2 µs per kernel), Llama 3 8B under tp = 8 pays a
/// larger kernel term per FLOP at one sample per micro-batch than at four, and at tp = 8 than at
/// tp = 2 for the same micro-batches.
#[test]
fn smaller_gemms_cost_more_per_flop() {
    let (m, v) = llama(64);
    let calib = Calibration::resolve("a100-80gb").unwrap();
    let share = |dp: u64, tp: u64, mb: u64| {
        let k = Knobs {
            tp,
            microbatches: mb,
            sequence_parallel: true,
            zero: 1,
            ..Knobs::data_parallel(dp)
        };
        let e = evaluate(&m, &v, &k, &calib);
        (e.relative.kernels / &e.flops).to_f64().unwrap()
    };
    let (one, four) = (share(8, 8, 8), share(8, 8, 2));
    assert!(one > four, "mbs 1: {one}, mbs 4: {four}");
    let (tp8, tp2) = (share(8, 8, 8), share(32, 2, 2));
    assert!(tp8 > tp2, "tp 8: {tp8}, tp 2: {tp2}");
}

/// `rank` orders by the relative cost with its kernel term, and prints it inside the compute
/// share: the JSON rows carry it, and it is part of the total they are sorted by.
#[test]
fn rank_rows_carry_the_kernel_term() {
    let v = json(&["rank", "llama3-8b", "--devices", "64", "--format", "json"]);
    let exact = |x: &serde_json::Value| -> Rational { x.as_str().unwrap().parse().unwrap() };
    let rows = v["strategies"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let rel = &r["relative"];
        let sum = exact(&rel["compute"])
            + exact(&rel["kernels"])
            + exact(&rel["comm_intra"])
            + exact(&rel["comm_inter"])
            + exact(&rel["bubble"])
            - exact(&rel["hidden"]);
        assert_eq!(sum, exact(&rel["total"]));
        assert!(exact(&rel["kernels"]) > Rational::zero());
    }
}
