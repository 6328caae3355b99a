//! The weight all-gathers the timeline simulates (ZeRO 1–2's after the optimizer step, ZeRO 3's
//! before every micro-batch's forward and backward) move the bytes of the collectives table's
//! all-gather rows: one definition, the rows' zero_reduction share of each block's gradient
//! all-reduce. An expert's weights are gathered over its expert-data-parallel group, as its
//! gradients are reduced there (Megatron-Core's expert-data-parallel group: the dp·cp/ep ranks
//! holding the same experts).

mod common;

use symshard::calib::Calibration;
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Layout};
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs};
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
        &calib,
        8,
        &q(1_000_000_000_000_000),
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
