//! The weight all-gathers the timeline simulates (ZeRO 1–2's after the optimizer step, ZeRO 3's
//! before every micro-batch's forward and backward) move the bytes of the collectives table's
//! all-gather rows: one definition, the rows' zero_reduction share of each block's gradient
//! all-reduce. An expert's weights are gathered over its expert-data-parallel group, as its
//! gradients are reduced there (Megatron-Core's expert-data-parallel group: the dp·cp/ep ranks
//! holding the same experts).

mod common;

use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Layout};
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Precision};
use symshard::sym::Rational;
use symshard::timeline::{time_plan, What};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// The data-parallel all-gather bytes per device and step of the collectives table.
fn table_bytes(model: &str, batch: i64, k: &Knobs) -> f64 {
    let m = ModelLoader::embedded().unwrap().resolve(model).unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(batch));
    let calib = Calibration::resolve("h100-sxm").unwrap();
    let (_, e) = evaluate_strategy(
        &m,
        &v,
        k,
        &Layout::default(),
        MachineRef::new(&calib, 8, &q(1_000_000_000_000_000)),
    )
    .unwrap();
    let bytes: Rational = e
        .comm
        .iter()
        .filter(|r| r.axis == AxisKind::Dp && r.collective == CollectiveKind::AllGather)
        .map(|r| &r.bytes * q(r.count as i64))
        .fold(q(0), |a, b| a + b);
    symshard::parallel::amount::float(&bytes)
}

/// The bytes of the weight gathers device 0 simulates in one step.
fn simulated_bytes(model: &str, batch: i64, k: &Knobs) -> f64 {
    let (plan, calib) = common::plan_on(model, &[("B", batch)], k, "h100-sxm");
    let t = time_plan(&plan, &calib).unwrap();
    t.sim
        .events
        .iter()
        .filter(|e| e.device == 0 && e.what == What::ParamGather)
        .map(|e| e.bytes)
        .sum()
}

fn same(model: &str, batch: i64, k: &Knobs) {
    let table = table_bytes(model, batch, k);
    let simulated = simulated_bytes(model, batch, k);
    assert!(table > 0.0, "{model} {k}: no gather rows");
    assert!(
        (table - simulated).abs() <= 1e-9 * table,
        "{model} {k}: the table gathers {table} bytes, the simulation {simulated}"
    );
}

#[test]
fn a_dense_models_simulated_gathers_move_the_tables_bytes() {
    for zero in [1, 2, 3] {
        let k = Knobs {
            zero,
            microbatches: 2,
            ..Knobs::data_parallel(8)
        };
        same("gpt2-124m", 16, &k);
    }
}

/// With experts over ep = 4 of the 8 data-parallel ranks, each expert weight is gathered from
/// the 2 ranks holding the same experts: (2 − 1)/2 of its bytes, where a gather over all 8
/// replicas would move 7/8.
#[test]
fn an_experts_weights_are_gathered_over_its_expert_data_parallel_group() {
    for zero in [1, 3] {
        let k = Knobs {
            zero,
            ep: 4,
            microbatches: 1,
            ..Knobs::data_parallel(8)
        };
        same("mixtral-8x7b", 8, &k);
    }
}

/// With FP8 parameters the gathers move the FP8 GEMM weights as one FP8 copy, an expert's over
/// its expert-data-parallel group: the simulation's bytes are the table's.
#[test]
fn fp8_parameters_gather_the_same_bytes_in_the_table_and_the_simulation() {
    for zero in [1, 3] {
        let dense = Knobs {
            zero,
            microbatches: 2,
            precision: Precision::Fp8,
            fp8_params: true,
            ..Knobs::data_parallel(8)
        };
        same("gpt2-124m", 16, &dense);
        let moe = Knobs {
            zero,
            ep: 4,
            microbatches: 1,
            precision: Precision::Fp8,
            fp8_params: true,
            ..Knobs::data_parallel(8)
        };
        same("mixtral-8x7b", 8, &moe);
    }
}

/// An expert weight's FP8 copy saves (2 − 1) bytes per element of the device's E/ep experts,
/// over the (R/ep − 1)/(R/ep) of them a rank receives: at dp = 8, ep = 4, half of an eighth of
/// Mixtral 8x7B's expert weights per gather, less than the 7/8 a gather over all 8 replicas
/// would save. Hand count: 32 layers × 8 experts × three 4096 × 14336 matrices (Jiang et al.
/// 2024, arXiv:2401.04088, Table 1).
#[test]
fn an_experts_fp8_gather_saves_over_its_expert_data_parallel_group() {
    let expert_weights: i64 = 32 * 8 * 3 * 4096 * 14336;
    let k = |fp8_params: bool| Knobs {
        zero: 1,
        ep: 4,
        precision: Precision::Fp8,
        fp8_params,
        ..Knobs::data_parallel(8)
    };
    let saved =
        table_bytes("mixtral-8x7b", 8, &k(false)) - table_bytes("mixtral-8x7b", 8, &k(true));
    // Dense FP8 GEMMs (the attention projections, 4096 × (4096 + 1024 + 1024 + 4096) per
    // layer; the router's 4096 × 8 linear layer stays in bf16) over all 8 replicas, 7/8; the
    // experts' held quarter over 2 ranks, 1/2.
    let dense: i64 = 32 * 4096 * (4096 + 1024 + 1024 + 4096);
    let want = dense as f64 * 7.0 / 8.0 + (expert_weights / 4) as f64 / 2.0;
    assert!(
        (saved - want).abs() <= 1e-9 * want,
        "saved {saved}, hand count {want}"
    );
}
