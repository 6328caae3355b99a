//! Mixed precision as the two common training recipes keep it: `bf16` (bf16 weights with an fp32
//! master copy, Megatron-LM's `--bf16`) and `autocast` (fp32 weights under `torch.autocast`, PyTorch
//! AMP). Memory, data-parallel traffic and HBM traffic of the same strategy under each, exactly.

mod common;

use symshard::calib::{Calibration, MachineRef};
use symshard::model::{Model, ModelLoader};
use symshard::parallel::{evaluate_strategy, Evaluation, Layout};
use symshard::strategy::{AxisKind, Knobs, Precision};
use symshard::sym::{Bindings, Rational};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn gpt2() -> (Model, Bindings) {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt2-124m")
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(16));
    (m, v)
}

fn run(k: &Knobs) -> Evaluation {
    let (m, v) = gpt2();
    let calib = Calibration::reference().unwrap();
    let layout = Layout::default();
    evaluate_strategy(
        &m,
        &v,
        k,
        &layout,
        MachineRef::new(&calib, 8, &q(1_000_000_000_000)),
    )
    .unwrap()
    .1
}

fn knobs(dp: u64, zero: u8, m: u64, precision: Precision) -> Knobs {
    Knobs {
        zero,
        microbatches: m,
        precision,
        ..Knobs::data_parallel(dp)
    }
}

/// GPT-2 124M's parameters (Radford et al. 2019; `symshard cost gpt2-124m` equals PyTorch's
/// count, tests/known_answers.rs).
const PARAMS: i64 = 124_439_808;

/// Weights, gradients and optimizer state per parameter: 2 + 2 + 12 bytes under bf16 (bf16
/// weights and gradients, fp32 master weights and two moments; Rajbhandari et al. 2020, §3.1),
/// 4 + 4 + 8 under autocast (fp32 weights and gradients, two fp32 moments, no separate master
/// copy), each sharded from its ZeRO stage on. Each micro-batch in flight keeps autocast's bf16
/// weight copies for its backward: 2 bytes per parameter more activation memory.
#[test]
fn model_state_and_activations_follow_the_recipe() {
    let p = q(PARAMS);
    for (dp, zero) in [(1u64, 0u8), (4, 1), (4, 2), (4, 3)] {
        let bf16 = run(&knobs(dp, zero, 1, Precision::Bf16));
        let amp = run(&knobs(dp, zero, 1, Precision::Autocast));
        let shard = |bytes: i64, stage: u8| {
            if zero >= stage && dp > 1 {
                &p * q(bytes) / q(dp as i64)
            } else {
                &p * q(bytes)
            }
        };
        assert_eq!(bf16.memory.params, shard(2, 3), "zero {zero}");
        assert_eq!(bf16.memory.grads, shard(2, 2), "zero {zero}");
        assert_eq!(bf16.memory.optimizer, shard(12, 1), "zero {zero}");
        assert_eq!(amp.memory.params, shard(4, 3), "zero {zero}");
        assert_eq!(amp.memory.grads, shard(4, 2), "zero {zero}");
        assert_eq!(amp.memory.optimizer, shard(8, 1), "zero {zero}");
        // One micro-batch in flight (no pipeline).
        assert_eq!(
            &amp.memory.activations - &bf16.memory.activations,
            &p * q(2),
            "zero {zero}"
        );
    }
    // Under full recomputation the recomputed forward casts the weights again: no copies kept.
    let full = |precision| Knobs {
        recompute: symshard::strategy::Recompute::Full,
        ..knobs(4, 1, 1, precision)
    };
    assert_eq!(
        run(&full(Precision::Autocast)).memory.activations,
        run(&full(Precision::Bf16)).memory.activations
    );
}

/// Data-parallel collectives move fp32 gradients (DDP's all-reduce of `.grad`, FSDP's
/// reduce-scatter) and fp32 weights (ZeRO 1's gather after the step, FSDP's gathers) under
/// autocast: every data-parallel row carries twice the bytes of the bf16 recipe's, and nothing
/// else changes.
#[test]
fn data_parallel_traffic_doubles_under_autocast() {
    for zero in 0..=3u8 {
        let bf16 = run(&knobs(4, zero, 2, Precision::Bf16));
        let amp = run(&knobs(4, zero, 2, Precision::Autocast));
        assert_eq!(bf16.comm.len(), amp.comm.len());
        let mut dp_rows = 0;
        for (a, b) in bf16.comm.iter().zip(&amp.comm) {
            assert_eq!(
                (a.axis, a.collective, a.count),
                (b.axis, b.collective, b.count)
            );
            if a.axis == AxisKind::Dp {
                assert_eq!(&a.bytes * q(2), b.bytes, "zero {zero}: {}", a.op);
                dp_rows += 1;
            } else {
                assert_eq!(a.bytes, b.bytes);
            }
        }
        assert!(dp_rows > 0, "zero {zero}");
        assert_eq!(bf16.flops, amp.flops);
    }
}

/// The relative cost's compute part prices every micro-batch's weight traffic at κ_hbm: under
/// autocast 6 bytes per parameter to cast the weights in the forward, 6 to cast the weight
/// gradients back and 12 to add them to `.grad`, against the bf16 recipe's 8 (the fp32
/// gradient buffer read and written): 16 bytes per parameter and micro-batch more. Once a step
/// the bf16 recipe's optimizer also copies the fp32 master weights into the bf16 model weights
/// (4 bytes read, 2 written per parameter), which autocast's fp32 model weights do not need.
#[test]
fn the_relative_cost_prices_the_casts() {
    let calib = Calibration::reference().unwrap();
    let kappa = calib.hbm_balance();
    for m in [1u64, 4] {
        let bf16 = run(&knobs(1, 0, m, Precision::Bf16));
        let amp = run(&knobs(1, 0, m, Precision::Autocast));
        let extra = &amp.relative.compute - &bf16.relative.compute;
        let bytes = 16 * m as i64 - 6;
        assert_eq!(extra, &kappa * q(bytes * PARAMS), "m = {m}");
    }
}

/// The recipe is a knob of strategy files, of every command's `--precision` and of `rank --fix`;
/// a value that is neither recipe is refused with the file, line and the allowed values.
#[test]
fn the_precision_knob_is_read_everywhere_and_checked() {
    let dir = common::temp_dir("precision");
    std::fs::write(dir.join("amp.yaml"), "dp: 2\nprecision: autocast\n").unwrap();
    let out = common::symshard()
        .current_dir(&dir)
        .args([
            "cost",
            "gpt2-124m",
            "--set",
            "B=16",
            "--strategy",
            "amp.yaml",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("precision=autocast"), "{text}");

    std::fs::write(dir.join("bad.yaml"), "dp: 2\nprecision: fp16\n").unwrap();
    let err = common::refused_in(&dir, &["cost", "gpt2-124m", "--strategy", "bad.yaml"]);
    assert!(err.contains("bad.yaml:2:"), "{err}");
    assert!(err.contains("fp16") && err.contains("autocast"), "{err}");

    let err = common::refused(&["timeline", "gpt2-124m", "--precision", "fp16"]);
    assert!(err.contains("bf16, autocast, fp8"), "{err}");

    let json = common::json(&[
        "rank",
        "gpt2-124m",
        "--devices",
        "8",
        "--top",
        "3",
        "--fix",
        "precision=autocast",
        "--format",
        "json",
    ]);
    let rows = json["strategies"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["precision"] == "autocast"), "{json}");

    let err = common::refused(&[
        "rank",
        "gpt2-124m",
        "--devices",
        "8",
        "--fix",
        "precision=fp16",
    ]);
    assert!(
        err.contains(
            "unknown precision (bf16, autocast, fp8, fp8-current, fp8-block, mxfp8, nvfp4, or any)"
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
