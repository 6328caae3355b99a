//! FP8 parameters (`fp8_params`, Megatron-LM's `--fp8-param-gather`): the FP8 GEMMs' weights
//! are kept only as their FP8 copies, gathered in FP8 by the distributed optimizer (ZeRO 1–2)
//! or before every forward and backward (ZeRO 3, Megatron-FSDP), and the transposed copy is
//! made from the gathered one. Memory, the all-gather's bytes (in the
//! evaluation's rows and on the simulated wire) and the per-step cast against hand counts, and
//! the refusals.
//!
//! Megatron-LM's `--fp8-param-gather`: "Keep the compute param in fp8 (do not use any other
//! intermediate dtype) and perform the param all-gather in fp8" (megatron/training/arguments.py,
//! NVIDIA/Megatron-LM commit 000c4ac2), asserted only with the distributed optimizer, torch
//! FSDP2 or Megatron-FSDP.

mod common;

use common::refused;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Evaluation, Layout};
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Precision};
use symshard::sym::{Bindings, Rational};
use symshard::timeline::{time_plan, time_summary};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// GPT-2 124M (Radford et al. 2019): 12 layers of hidden 768.
const LAYERS: i64 = 12;
const H: i64 = 768;
/// Data-parallel replicas of these tests.
const DP: i64 = 8;

fn gpt2() -> (symshard::model::Model, Bindings) {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt2-124m")
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(DP * 4));
    (m, v)
}

fn knobs(zero: u8, fp8_params: bool) -> Knobs {
    Knobs {
        precision: Precision::Fp8,
        zero,
        fp8_params,
        microbatches: 4,
        ..Knobs::data_parallel(DP as u64)
    }
}

fn run(k: &Knobs) -> Evaluation {
    let (m, v) = gpt2();
    let calib = Calibration::resolve("h100-sxm").unwrap();
    evaluate_strategy(
        &m,
        &v,
        k,
        &Layout::default(),
        MachineRef::new(&calib, 8, &q(1_000_000_000_000)),
    )
    .unwrap()
    .1
}

/// The FP8 GEMM weight elements of one device: every linear layer of the 12 repeated layers.
fn fp8_weights() -> i64 {
    LAYERS * common::layer_weights(H)
}

/// Without its bf16 copy each FP8 GEMM weight takes 2 bytes less (its FP8 copy and transposed
/// copy stay), under ZeRO 3 2 bytes less of the device's 1/dp shard; gradients, optimizer
/// state and activations are unchanged.
#[test]
fn memory_drops_the_bf16_copy_of_each_fp8_weight() {
    for zero in [1, 2, 3] {
        let plain = run(&knobs(zero, false));
        let params = run(&knobs(zero, true));
        let shards = if zero == 3 { DP } else { 1 };
        assert_eq!(
            &plain.memory.params - &params.memory.params,
            q(2 * fp8_weights()) / q(shards),
            "zero {zero}"
        );
        assert_eq!(plain.memory.grads, params.memory.grads);
        assert_eq!(plain.memory.optimizer, params.memory.optimizer);
        assert_eq!(plain.memory.activations, params.memory.activations);
    }
}

/// The data-parallel all-gather rows (ZeRO 1–2's weight gather after the optimizer step, ZeRO
/// 3's before each of the 4 micro-batches' forward and backward) move each FP8 GEMM weight
/// element as 1 byte (one FP8 copy; the delayed recipe's scale is per tensor) instead of 2,
/// over (n − 1)/n of the weights: (7/8) · 1 byte less per element and gather. The
/// reduce-scatter rows are unchanged.
#[test]
fn the_weight_gather_rows_move_one_byte_per_fp8_weight() {
    let total = |e: &Evaluation, kind: CollectiveKind| -> Rational {
        e.comm
            .iter()
            .filter(|r| r.axis == AxisKind::Dp && r.collective == kind)
            .map(|r| &r.bytes * q(r.count as i64))
            .fold(q(0), |a, b| a + b)
    };
    for zero in [1, 2, 3] {
        let plain = run(&knobs(zero, false));
        let params = run(&knobs(zero, true));
        let saved =
            total(&plain, CollectiveKind::AllGather) - total(&params, CollectiveKind::AllGather);
        let gathers = if zero == 3 { 2 * 4 } else { 1 };
        assert_eq!(
            saved,
            q(gathers * fp8_weights() * (DP - 1)) / q(DP),
            "zero {zero}"
        );
        assert_eq!(
            total(&plain, CollectiveKind::ReduceScatter),
            total(&params, CollectiveKind::ReduceScatter)
        );
    }
}

/// The simulated weight gathers carry the same bytes on the wire: the device's bf16 weights at
/// 2 bytes and its FP8 GEMM weights at 1, times (n − 1)/n, once a step under ZeRO 1 and before
/// each micro-batch's forward and backward under ZeRO 3.
#[test]
fn the_simulated_weight_gather_carries_fp8_bytes() {
    for (zero, gathers) in [(1, 1), (3, 2 * 4)] {
        simulated_gathers_carry_fp8_bytes(zero, gathers);
    }
}

fn simulated_gathers_carry_fp8_bytes(zero: u8, gathers: i64) {
    let wire = |fp8_params: bool| -> f64 {
        let (plan, calib) = common::plan_on(
            "gpt2-124m",
            &[("B", DP * 4)],
            &knobs(zero, fp8_params),
            "h100-sxm",
        );
        let t = time_plan(&plan, &calib).unwrap();
        t.sim
            .events
            .iter()
            .filter(|e| e.device == 0 && e.what == symshard::timeline::What::ParamGather)
            .map(|e| e.bytes)
            .sum()
    };
    let saved = wire(false) - wire(true);
    let expected = (gathers * fp8_weights()) as f64 * (DP - 1) as f64 / DP as f64;
    assert!(
        (saved - expected).abs() <= 1e-9 * expected,
        "zero {zero}: {saved} against {expected}"
    );
}

/// With FP8 parameters the step's weight cast is the transposed copy made from the gathered FP8
/// weight (1 byte read, 1 written per element) instead of a cast from bf16 (2 read, 1 + 1
/// written): 2 bytes less per FP8 weight element in the optimizer step's HBM traffic. The
/// optimizer's copy of its fp32 master shard into the model weights writes each FP8 weight
/// of the device's 1/dp shard as 1 byte instead of 2: 1/dp byte less per element. A step that
/// is no slower.
#[test]
fn the_per_step_weight_cast_reads_the_fp8_copy() {
    let plain = run(&knobs(1, false));
    let params = run(&knobs(1, true));
    // The relative cost prices HBM bytes at κ_hbm.
    let kappa = Calibration::resolve("h100-sxm").unwrap().hbm_balance();
    assert_eq!(
        &plain.relative.compute - &params.relative.compute,
        kappa * (q(2 * fp8_weights()) + q(fp8_weights()) / q(DP))
    );
    let seconds = |fp8_params: bool| {
        let (plan, calib) = common::plan_on(
            "gpt2-124m",
            &[("B", DP * 4)],
            &knobs(1, fp8_params),
            "h100-sxm",
        );
        time_summary(&plan, &calib).unwrap().iteration_seconds
    };
    assert!(seconds(true) < seconds(false));
}

/// Refused with the reason: without an FP8 recipe whose weights can be FP8 parameters, and
/// without a gather of the weights (ZeRO 0).
#[test]
fn refusals_name_the_reason() {
    let cost = |strategy: &str, model: &str, calib: &str| {
        refused(&["cost", model, "--strategy", strategy, "--calib", calib])
    };
    let e = cost("dp=8,zero=1,fp8-params", "gpt3-125m", "h100-sxm");
    assert!(e.contains("`fp8_params` needs an FP8 recipe"), "{e}");
    let e = cost(
        "dp=8,zero=1,precision=mxfp8,fp8-params",
        "gpt3-125m",
        "b200",
    );
    assert!(e.contains("precision=mxfp8"), "{e}");
    let e = cost(
        "dp=8,zero=1,precision=nvfp4,fp8-params",
        "gpt3-125m",
        "b200",
    );
    assert!(e.contains("precision=nvfp4"), "{e}");
    let e = cost(
        "dp=8,zero=0,precision=fp8,fp8-params",
        "gpt3-125m",
        "h100-sxm",
    );
    assert!(e.contains("needs a gather of the weights"), "{e}");
    assert!(e.contains("not zero 0"), "{e}");
    // A strategy file says it the same way, pointing at the knob.
    let dir = common::temp_dir("fp8_params_file");
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "dp: 8\ntp: 1\npp: 1\nzero: 0\nprecision: fp8\nfp8_params: true\n",
    )
    .unwrap();
    let e = refused(&[
        "cost",
        "gpt3-125m",
        "--strategy",
        file.to_str().unwrap(),
        "--calib",
        "h100-sxm",
    ]);
    assert!(e.contains("fp8_params"), "{e}");
}

/// `rank --fix fp8-params=on` keeps FP8 parameters on every row that allows them (an FP8 recipe
/// with ZeRO 1–3), the row passes back as it is printed, and `--emit megatron` says
/// `--fp8-param-gather` beside the distributed optimizer (ZeRO 1) or Megatron-FSDP (ZeRO 3).
#[test]
fn rank_keeps_fp8_params_where_rows_allow_them_and_emits_the_flag() {
    let rows = common::ranked_rows("gpt3-1.3b", 16, "precision=fp8,fp8-params=on", 40);
    for r in &rows {
        let zero = r["zero"].as_u64().unwrap();
        let params = r["fp8_params"].as_bool().unwrap_or(false);
        assert_eq!(params, zero >= 1, "{r}");
    }
    let row = rows
        .iter()
        .find(|r| r["fp8_params"].as_bool() == Some(true))
        .expect("a row with FP8 parameters");
    let strategy = row["strategy"].as_str().unwrap();
    assert!(strategy.contains("fp8-params"), "{strategy}");
    let back = common::cost_json("gpt3-1.3b", strategy);
    assert_eq!(
        back["per_device"]["memory"]["total"],
        row["memory"]["total"]
    );
    let text = common::emit_megatron("gpt3-1.3b", 16, "precision=fp8,fp8-params=on,zero=1");
    assert!(text.contains("--fp8-param-gather"), "{text}");
    assert!(text.contains("--use-distributed-optimizer"), "{text}");
    // Megatron-LM asserts `--fp8-param-gather` with the distributed optimizer, torch FSDP2 or
    // Megatron-FSDP (megatron/training/arguments.py at commit 000c4ac2).
    let text = common::emit_megatron("gpt3-1.3b", 16, "precision=fp8,fp8-params=on,zero=3");
    assert!(text.contains("--fp8-param-gather"), "{text}");
    assert!(text.contains("--use-megatron-fsdp"), "{text}");
    assert!(text.contains("optim_grads_params"), "{text}");
}

/// The relative cost's data-parallel traffic is the rows' bytes: at dp 8 on one node every
/// collective is intra-node, and `comm_intra` is κ_intra times the rows' bytes, with FP8
/// parameters as without.
#[test]
fn the_relative_cost_counts_the_rows_bytes() {
    let calib = Calibration::resolve("h100-sxm").unwrap();
    let kappa = calib.balance(symshard::strategy::Tier::Intra);
    for (zero, fp8_params) in [(1, false), (1, true), (3, false), (3, true)] {
        let e = run(&knobs(zero, fp8_params));
        let bytes = e
            .comm
            .iter()
            .map(|r| &r.bytes * q(r.count as i64))
            .fold(q(0), |a, b| a + b);
        assert_eq!(
            e.relative.comm_intra,
            &kappa * &bytes,
            "zero {zero}, fp8_params {fp8_params}"
        );
    }
}
