//! FP8 training as NVIDIA Transformer Engine runs it (`precision: fp8`): the linear layers of the
//! repeated transformer layers as FP8 GEMMs under the delayed-scaling recipe, the attention's
//! batched matmuls and the output layer in bf16. Memory, casts and seconds of the same strategy
//! under bf16 and fp8, against hand counts.

mod common;

use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Evaluation, Layout};
use symshard::strategy::{Fp8Bytes, Knobs, Precision, Recompute};
use symshard::sym::{Bindings, Rational};
use symshard::timeline::time_summary;

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// GPT-2 124M (Radford et al. 2019): 12 layers of hidden 768, MLP 3072, sequence 1024.
const LAYERS: i64 = 12;
const H: i64 = 768;
const S: i64 = 1024;
/// The micro-batch of these tests.
const B: i64 = 16;

fn gpt2() -> (symshard::model::Model, Bindings) {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt2-124m")
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(B));
    (m, v)
}

fn run(k: &Knobs, machine: &str) -> Evaluation {
    let (m, v) = gpt2();
    let calib = Calibration::resolve(machine).unwrap();
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

fn knobs(precision: Precision, recompute: Recompute) -> Knobs {
    Knobs {
        precision,
        recompute,
        ..Knobs::data_parallel(1)
    }
}

/// Memory per device under fp8, counted by hand: Transformer Engine keeps an FP8 copy of each
/// FP8 GEMM's weight and of its transpose beside the bf16 weight and the fp32 master copy (2
/// bytes per weight element more), nothing more of gradients or optimizer state, and keeps each
/// linear layer's input in FP8 (1 byte per element) instead of bf16 (2 bytes): one byte less
/// per element of the layer's distinct linear inputs. The output layer (tied to the embedding,
/// outside the repeated layers) stays bf16 and adds nothing.
#[test]
fn memory_per_device_matches_a_hand_count() {
    let bf16 = run(&knobs(Precision::Bf16, Recompute::None), "h100-sxm");
    let fp8 = run(&knobs(Precision::Fp8, Recompute::None), "h100-sxm");
    assert_eq!(common::layer_weights(H), 12 * H * H);
    assert_eq!(
        &fp8.memory.params - &bf16.memory.params,
        q(2 * LAYERS * common::layer_weights(H))
    );
    assert_eq!(fp8.memory.grads, bf16.memory.grads);
    assert_eq!(fp8.memory.optimizer, bf16.memory.optimizer);
    assert_eq!(
        &bf16.memory.activations - &fp8.memory.activations,
        q(LAYERS * common::layer_inputs(B * S, H))
    );
    // Under full recomputation a layer keeps only its input: the FP8 copies of the weights
    // remain, the activations are the bf16 recipe's.
    let bf16 = run(&knobs(Precision::Bf16, Recompute::Full), "h100-sxm");
    let fp8 = run(&knobs(Precision::Fp8, Recompute::Full), "h100-sxm");
    assert_eq!(fp8.memory.activations, bf16.memory.activations);
    assert_eq!(
        &fp8.memory.params - &bf16.memory.params,
        q(2 * LAYERS * common::layer_weights(H))
    );
}

/// The cast kernels' bytes, brute force: every FP8 GEMM's operands counted from the layer's
/// shapes, 4 bytes per element cast (2 read in bf16, 1 + 1 written: the FP8 copy and its
/// transpose). A forward casts each distinct input once, a backward each output gradient, and
/// a step each weight once. The timeline's FP8 operators carry exactly those bytes, and no
/// operator outside the repeated layers (the output layer) or in the attention core is FP8.
#[test]
fn cast_bytes_match_a_brute_force_count() {
    let k = knobs(Precision::Fp8, Recompute::None);
    let (plan, _) = common::plan_on("gpt2-124m", &[("B", B)], &k, "h100-sxm");
    let (mut input, mut grad, mut weight, mut gemms) = (q(0), q(0), q(0), 0);
    for block in &plan.blocks {
        for op in &block.ops {
            let Some(ops) = op.fp8_operands() else {
                continue;
            };
            assert!(
                block.layer && op.matmul && !op.attention_core,
                "{}",
                op.name
            );
            let [i, g, w] = ops.cast_bytes(Fp8Bytes::DELAYED);
            if op.fp8_casts_input {
                input += i;
            }
            grad += g;
            weight += w;
            gemms += 1;
        }
    }
    // One layer copy in the plan (its repeats are timed alike).
    assert_eq!(gemms, 6);
    let (mut want_grad, mut want_weight) = (0i64, 0i64);
    for [rows, inner, cols] in common::layer_gemms(B * S, H) {
        want_grad += 4 * rows * cols;
        want_weight += 4 * inner * cols;
    }
    assert_eq!(input, q(4 * common::layer_inputs(B * S, H)));
    assert_eq!(grad, q(want_grad));
    assert_eq!(weight, q(want_weight));
    // The bf16 plan has no FP8 operator.
    let (plan, _) = common::plan_on(
        "gpt2-124m",
        &[("B", B)],
        &knobs(Precision::Bf16, Recompute::None),
        "h100-sxm",
    );
    assert!(plan
        .blocks
        .iter()
        .all(|b| b.ops.iter().all(|o| o.fp8_operands().is_none())));
}

/// The relative cost prices the same casts at κ_hbm and the FP8 GEMMs' FLOPs at the FP8 peak:
/// its compute part falls by 1 − 989/1979 of those FLOPs (NVIDIA H100 SXM datasheet: 989
/// TFLOP/s dense BF16, 1,979 dense FP8) and rises by κ_hbm times the cast bytes.
#[test]
fn the_relative_cost_prices_the_fp8_gemms_and_their_casts() {
    let calib = Calibration::resolve("h100-sxm").unwrap();
    let kappa = calib.hbm_balance();
    let bf16 = run(&knobs(Precision::Bf16, Recompute::None), "h100-sxm");
    let fp8 = run(&knobs(Precision::Fp8, Recompute::None), "h100-sxm");
    assert_eq!(fp8.flops, bf16.flops);
    let casts: i64 = (0..LAYERS)
        .map(|_| {
            4 * common::layer_inputs(B * S, H)
                + common::layer_gemms(B * S, H)
                    .iter()
                    .map(|[t, _, n]| 4 * t * n)
                    .sum::<i64>()
                + 4 * common::layer_weights(H)
        })
        .sum();
    let saved_share = Rational::new(990.into(), 1979.into());
    // The FP8 GEMMs' FLOPs: what compute and kernels lost, less the casts' price, over the
    // share (the gain is counted with the kernels, beyond the FLOPs at the bf16 plateau).
    let total = |e: &Evaluation| &e.relative.compute + &e.relative.kernels;
    let gemm_flops = (total(&bf16) - total(&fp8) + &kappa * q(casts)) / &saved_share;
    // Forward and backward of the linear layers: 6 FLOPs per weight element and token, and
    // the biases' adds (one per output element forward, one per output element in the bias
    // gradient's reduction backward).
    let t = B * S;
    let per_layer: i64 = common::layer_gemms(B * S, H)
        .iter()
        .map(|[_, k, n]| 6 * t * k * n + 2 * t * n)
        .sum();
    assert_eq!(gemm_flops, q(LAYERS * per_layer));
}

/// Seconds on h100-sxm for a compute-bound layout (GPT-3 2.7B, Brown et al. 2020 Table 2.1, on
/// one device, 8 sequences of 2048): fp8 is faster than bf16, but less than twice as fast: the
/// attention's batched matmuls, the output layer and the memory-bound operators stay as they
/// were, and the casts take time. GPT-2 124M, whose width (768) makes the casts nearly as long
/// as the GEMM time they save, gains less. An A100 has
/// no FP8 tensor cores (NVIDIA A100 datasheet lists TF32, BF16, FP16, INT8, no FP8): fp8 is
/// refused on a100-80gb, naming the table.
#[test]
fn fp8_is_faster_than_bf16_but_less_than_twice_on_h100() {
    let time = |model: &str, b: i64, precision: Precision| {
        let k = knobs(precision, Recompute::None);
        let (plan, calib) = common::plan_on(model, &[("B", b)], &k, "h100-sxm");
        time_summary(&plan, &calib).unwrap().iteration_seconds
    };
    let speedup =
        |model: &str, b: i64| time(model, b, Precision::Bf16) / time(model, b, Precision::Fp8);
    let large = speedup("gpt3-2.7b", 8);
    assert!(large > 1.1 && large < 2.0, "{large}");
    let small = speedup("gpt2-124m", B);
    assert!(small > 1.0 && small < large, "{small} vs {large}");

    let (m, v) = gpt2();
    let a100 = Calibration::resolve("a100-80gb").unwrap();
    let k = knobs(Precision::Fp8, Recompute::None);
    let err = evaluate_strategy(
        &m,
        &v,
        &k,
        &Layout::default(),
        MachineRef::new(&a100, 8, &q(1 << 40)),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("a100-80gb") && err.contains("fp8"), "{err}");
}

/// `cost --precision fp8` prices the FP8 weight copies (2 bytes per weight element of the
/// layers' linear layers) and the FP8-saved inputs in its memory per device.
#[test]
fn cost_honours_precision_fp8() {
    let cost = |p: &str| {
        let v = common::json(&[
            "cost",
            "gpt2-124m",
            "--set",
            "B=16",
            "--dp",
            "8",
            "--precision",
            p,
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ]);
        let m = &v["per_device"]["memory"];
        let n = |k: &str| m[k].as_str().unwrap().parse::<i64>().unwrap();
        (
            n("params"),
            n("activations"),
            v["per_device"]["strategy"].clone(),
        )
    };
    let (bf16, fp8) = (cost("bf16"), cost("fp8"));
    assert_eq!(fp8.0 - bf16.0, 2 * LAYERS * common::layer_weights(H));
    // Micro-batches of 2 sequences (16 over 8 ranks): the distinct linear inputs of each layer,
    // one byte per element less.
    assert_eq!(
        bf16.1 - fp8.1,
        LAYERS * common::layer_inputs(B * S, H) / (B / 2)
    );
    assert!(
        fp8.2.as_str().unwrap().contains("precision=fp8"),
        "{}",
        fp8.2
    );
}

/// `timeline --precision fp8` runs the FP8 GEMMs at the FP8 peak: a shorter step than bf16 for
/// GPT-3 2.7B on one H100, and the strategy it prints names the precision.
#[test]
fn timeline_honours_precision_fp8() {
    let step = |p: &str| {
        let v = common::json(&[
            "timeline",
            "gpt3-2.7b",
            "--set",
            "B=8",
            "--precision",
            p,
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ]);
        let s = v["strategy"].as_str().unwrap().to_string();
        (v["iteration_seconds"].as_f64().unwrap(), s)
    };
    let (bf16, fp8) = (step("bf16"), step("fp8"));
    assert!(
        fp8.0 < bf16.0 && 2.0 * fp8.0 > bf16.0,
        "{fp8:?} vs {bf16:?}"
    );
    assert!(fp8.1.contains("precision=fp8"), "{}", fp8.1);
    assert!(!bf16.1.contains("precision"), "{}", bf16.1);
}

/// `rank --fix precision=fp8` ranks FP8 strategies only, and `rank` without it searches no
/// precision: bf16 only (FP8 is priced where it is asked for).
#[test]
fn rank_fixes_precision_fp8() {
    let rank = |fix: &[&str]| {
        let mut args = vec![
            "rank",
            "gpt2-124m",
            "--devices",
            "8",
            "--top",
            "3",
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ];
        args.extend_from_slice(fix);
        common::json(&args)["strategies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["precision"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let fp8 = rank(&["--fix", "precision=fp8"]);
    assert!(!fp8.is_empty() && fp8.iter().all(|p| p == "fp8"), "{fp8:?}");
    let default = rank(&[]);
    assert!(
        !default.is_empty() && default.iter().all(|p| p == "bf16"),
        "{default:?}"
    );
}

/// `compare` prices each side in its own precision: the same FLOPs, FP8's weight copies in the
/// weights row, and the step's kernels (FLOP-equivalents beyond the FLOPs at the bf16 plateau)
/// lower by the FP8 GEMMs' gain.
#[test]
fn compare_honours_precision_fp8() {
    let v = common::json(&[
        "compare",
        "gpt3-2.7b",
        "dp=8",
        "dp=8,precision=fp8",
        "--set",
        "B=64",
        "--calib",
        "h100-sxm",
        "--format",
        "json",
    ]);
    let text = v.to_string();
    assert!(text.contains("precision=fp8"), "{text}");
    let rows = v["components"].as_array().expect("components");
    // The sign of a difference (exact integers or fractions, as strings).
    let sign = |group: &str, name: &str| -> i8 {
        let r = rows
            .iter()
            .find(|r| r["group"] == group && r["name"] == name)
            .unwrap_or_else(|| panic!("{group} {name}: {text}"));
        match r["difference"].as_str().unwrap() {
            "0" => 0,
            d if d.starts_with('-') => -1,
            _ => 1,
        }
    };
    assert_eq!(sign("compute", "compute FLOPs"), 0);
    assert_eq!(sign("memory", "weights"), 1);
    assert_eq!(sign("relative cost", "kernels"), -1);
}

/// A machine without FP8 tensor cores refuses `--precision fp8`, naming its table, with a
/// non-zero exit and no panic, in every command (NVIDIA A100 and V100 datasheets list no FP8
/// tensor-core rate).
#[test]
fn machines_without_fp8_refuse_it() {
    for machine in ["a100-80gb", "v100-dgx1", "a40-pcie"] {
        for args in [
            vec!["cost", "gpt2-124m", "--dp", "8", "--precision", "fp8"],
            vec!["timeline", "gpt2-124m", "--dp", "8", "--precision", "fp8"],
            vec![
                "rank",
                "gpt2-124m",
                "--devices",
                "8",
                "--fix",
                "precision=fp8",
            ],
        ] {
            let mut a = args.clone();
            a.extend_from_slice(&["--calib", machine]);
            let err = common::refused(&a);
            assert!(
                err.contains(machine) && err.contains("peak_flops.fp8"),
                "{a:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

/// Every command that times an FP8 or FP4 strategy says, under its header, that the table has
/// no GEMM curve of that format and which one it uses instead; a bf16 one says nothing.
#[test]
fn timed_low_precision_names_the_borrowed_curve() {
    let say = "its FP8 GEMMs are timed at the fp8 peak × the bf16 matmul curve";
    for args in [
        vec!["timeline", "gpt2-124m", "--dp", "8", "--precision", "fp8"],
        vec![
            "rank",
            "gpt2-124m",
            "--devices",
            "8",
            "--fix",
            "precision=fp8",
            "--top",
            "2",
        ],
        vec![
            "port",
            "gpt2-124m",
            "--devices",
            "8",
            "--fix",
            "precision=fp8",
        ],
    ] {
        let mut a = args.clone();
        a.extend_from_slice(&["--calib", "h100-sxm"]);
        let out = common::stdout(&a);
        assert!(out.contains(&format!("precision fp8: h100-sxm has no measured FP8 GEMM efficiency (efficiency.matmul_fp8); {say}")), "{a:?}: {out}");
        let bf16: Vec<&str> = a
            .iter()
            .copied()
            .filter(|x| !x.contains("fp8") && *x != "--precision" && *x != "--fix")
            .collect();
        assert!(!common::stdout(&bf16).contains(say), "{bf16:?}");
    }
    // rank's JSON (and the report, which reads it) carries the same line; a bf16 ranking none.
    let rank = |fix: &str| {
        common::json(&[
            "rank",
            "gpt2-124m",
            "--devices",
            "8",
            "--top",
            "2",
            "--calib",
            "h100-sxm",
            "--fix",
            fix,
            "--format",
            "json",
        ])
    };
    // port's table (MFU a column) defines it in its legend.
    let port = common::stdout(&["port", "gpt2-124m", "--devices", "8", "--calib", "h100-sxm"]);
    assert!(
        port.contains("MFU: model FLOPs per second per device (no recomputation) over the device's dense bf16 peak"),
        "{port}"
    );
    // The timeline's MFU says it is of the bf16 peak where the GEMMs run faster than that.
    let fp8 = common::stdout(&[
        "timeline",
        "gpt2-124m",
        "--dp",
        "8",
        "--precision",
        "fp8",
        "--calib",
        "h100-sxm",
    ]);
    let bf16 = common::stdout(&["timeline", "gpt2-124m", "--dp", "8", "--calib", "h100-sxm"]);
    assert!(fp8.contains("  MFU (of the bf16 peak)  "), "{fp8}");
    assert!(bf16.contains("  MFU                     "), "{bf16}");
    let lines = rank("precision=fp8")["borrowed_curves"].clone();
    assert_eq!(lines.as_array().map(Vec::len), Some(1), "{lines}");
    assert!(lines[0].as_str().unwrap().contains(say), "{lines}");
    assert!(rank("precision=bf16").get("borrowed_curves").is_none());
    let fp4 = common::stdout(&[
        "timeline",
        "gpt2-124m",
        "--dp",
        "8",
        "--precision",
        "nvfp4",
        "--calib",
        "b200",
    ]);
    assert!(
        fp4.contains("precision nvfp4: b200 has no FP4 GEMM efficiency curve"),
        "{fp4}"
    );
}

/// `--emit megatron` of an FP8 row turns on Megatron-LM's Transformer Engine FP8
/// (`--fp8-format hybrid`: E4M3 forward, E5M2 gradients); a bf16 row's does not.
#[test]
fn emit_megatron_turns_fp8_on() {
    let emit = |fix: &str| {
        common::stdout(&[
            "rank",
            "gpt3-2.7b",
            "--devices",
            "8",
            "--top",
            "1",
            "--fix",
            fix,
            "--calib",
            "h100-sxm",
            "--emit",
            "megatron",
        ])
    };
    assert!(emit("precision=fp8").contains("--fp8-format hybrid"));
    assert!(!emit("precision=bf16").contains("--fp8"));
}

/// The FP8 tables of NVIDIA's DGX Cloud benchmarking recipes (validation/, each setting
/// cited there), predicted as configured, stay within the file's recorded bound (validate exits
/// non-zero beyond it).
#[test]
fn dgxc_fp8_rows_stay_within_their_bound() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/validation/nvidia-dgxc-h100-fp8.yaml"
    );
    let out = common::symshard()
        .args(["validate", path])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("fp8 llama3.1").count(), 6, "{text}");
    assert_eq!(text.matches("fp8 nemotron4").count(), 2, "{text}");
}
