//! The FP8 recipes beside Transformer Engine's default delayed scaling: per-tensor current
//! scaling (`Float8CurrentScaling`), DeepSeek-V3's block scaling (arXiv:2412.19437 §3.3.1;
//! `Float8BlockScaling`: fp32 scales per 1×128 activation tile and per 128×128 weight block)
//! and MXFP8 (OCP Microscaling Formats v1.0; `MXFP8BlockScaling`: one E8M0 byte per 32
//! elements, Blackwell only), and NVFP4 (arXiv:2509.25149; `NVFP4BlockScaling`: E2M1 elements,
//! an E4M3 scale per 16 elements or 16 × 16 weight block, FP4 GEMMs, Blackwell only). Memory, casts and refusals against hand counts of GPT-2 124M
//! (Radford et al. 2019: 12 layers, hidden 768, MLP 3072, sequence 1024).

mod common;

use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{evaluate_strategy, Evaluation, Layout};
use symshard::strategy::{Fp8Bytes, Knobs, Precision, Recompute};
use symshard::sym::Rational;
use symshard::timeline::time_summary;

const LAYERS: i64 = 12;
const H: i64 = 768;
const S: i64 = 1024;
const B: i64 = 16;

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn frac((n, d): (u64, u64)) -> Rational {
    Rational::new((n as i64).into(), (d as i64).into())
}

fn knobs(precision: Precision, recompute: Recompute) -> Knobs {
    Knobs {
        precision,
        recompute,
        ..Knobs::data_parallel(1)
    }
}

fn run(k: &Knobs, machine: &str) -> Result<Evaluation, String> {
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt2-124m")
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(B));
    let calib = Calibration::resolve(machine).unwrap();
    evaluate_strategy(
        &m,
        &v,
        k,
        &Layout::default(),
        MachineRef::new(&calib, 8, &q(1 << 40)),
    )
    .map(|e| e.1)
    .map_err(|e| e.to_string())
}

/// Elements a layer's casts touch: (activations and output gradients, weights).
fn layer_cast_elements() -> (i64, i64) {
    let grads: i64 = common::layer_gemms(B * S, H)
        .iter()
        .map(|[t, _, n]| t * n)
        .sum();
    (
        common::layer_inputs(B * S, H) + grads,
        common::layer_weights(H),
    )
}

const RECIPES: [(Precision, Fp8Bytes); 5] = [
    (Precision::Fp8, Fp8Bytes::DELAYED),
    (Precision::Fp8Current, Fp8Bytes::CURRENT),
    (Precision::Fp8Block, Fp8Bytes::BLOCK),
    (Precision::Mxfp8, Fp8Bytes::MX),
    (Precision::Nvfp4, Fp8Bytes::NVFP4),
];

/// The recipes' bytes per element, by hand from their formats: a cast reads the bf16 tensor
/// (2 bytes; current scaling twice, its amax first) and writes a rowwise and a columnwise
/// copy of 1 byte per element plus scales: none per element for per-tensor scaling, a 4-byte
/// fp32 scale per 128 elements (activations) or per 128 × 128 (weights) for DeepSeek's blocks,
/// a 1-byte E8M0 scale per 32 elements for MXFP8; NVFP4 writes half a byte per element and
/// a 1-byte E4M3 scale per 16 elements (16 × 16 for weights), and reads twice (its per-tensor
/// amax first).
#[test]
fn each_recipes_bytes_follow_from_its_format() {
    let elem = |half: bool, scale_bytes: i64, per: i64| {
        let base = if half {
            Rational::new(1.into(), 2.into())
        } else {
            q(1)
        };
        base + Rational::new(scale_bytes.into(), per.into())
    };
    let one = |scale_bytes: i64, per: i64| elem(false, scale_bytes, per);
    let cast = |amax_reads: i64, copy: Rational| q(2 * amax_reads) + q(2) * copy;
    for (recipe, act, weight, reads) in [
        (Fp8Bytes::DELAYED, one(0, 1), one(0, 1), 1),
        (Fp8Bytes::CURRENT, one(0, 1), one(0, 1), 2),
        (Fp8Bytes::BLOCK, one(4, 128), one(4, 128 * 128), 1),
        (Fp8Bytes::MX, one(1, 32), one(1, 32), 1),
        (
            Fp8Bytes::NVFP4,
            elem(true, 1, 16),
            elem(true, 1, 16 * 16),
            2,
        ),
    ] {
        assert_eq!(frac(recipe.cast), cast(reads, act.clone()), "{recipe:?}");
        assert_eq!(
            frac(recipe.weight_cast),
            cast(reads, weight.clone()),
            "{recipe:?}"
        );
        assert_eq!(frac(recipe.weight_copy), q(2) * weight, "{recipe:?}");
        assert_eq!(frac(recipe.saved), act, "{recipe:?}");
    }
}

/// Memory per device, by hand, for every recipe: the FP8 weight copies (rowwise and
/// columnwise, with their scales) beside the bf16 weights, and each linear layer's input kept
/// in FP8 with its scales instead of bf16.
#[test]
fn memory_per_device_matches_a_hand_count_for_every_recipe() {
    let bf16 = run(&knobs(Precision::Bf16, Recompute::None), "b200").unwrap();
    for (precision, bytes) in RECIPES {
        let e = run(&knobs(precision, Recompute::None), "b200").unwrap();
        assert_eq!(
            &e.memory.params - &bf16.memory.params,
            frac(bytes.weight_copy) * q(LAYERS * common::layer_weights(H)),
            "{precision}"
        );
        assert_eq!(e.memory.grads, bf16.memory.grads);
        assert_eq!(e.memory.optimizer, bf16.memory.optimizer);
        assert_eq!(
            &bf16.memory.activations - &e.memory.activations,
            (q(2) - frac(bytes.saved)) * q(LAYERS * common::layer_inputs(B * S, H)),
            "{precision}"
        );
    }
}

/// The relative cost prices each recipe's casts at κ_hbm: against the delayed recipe, only
/// the bytes per element cast differ, and under NVFP4 the GEMMs' gain: their FLOPs are worth
/// 1 − bf16 peak ÷ FP4 peak fewer FLOP-equivalents instead of 1 − bf16 ÷ FP8 (NVIDIA DGX B200
/// datasheet figures as the b200 table gives them: 2,250 TFLOP/s dense BF16, 4,500 FP8, 9,000
/// FP4).
#[test]
fn the_relative_cost_prices_each_recipes_casts() {
    let calib = Calibration::resolve("b200").unwrap();
    let kappa = calib.hbm_balance();
    let peak = |k: &str| calib.device.peak_flops[k].value.clone();
    let fp4_more = (q(1) - peak("bf16") / peak("fp4")) - (q(1) - peak("bf16") / peak("fp8"));
    // The linear layers' FLOPs: 6 per weight element and token, and the biases' adds.
    let t = B * S;
    let gemm_flops: i64 = LAYERS
        * common::layer_gemms(B * S, H)
            .iter()
            .map(|[_, k, n]| 6 * t * k * n + 2 * t * n)
            .sum::<i64>();
    let total = |e: &Evaluation| &e.relative.compute + &e.relative.kernels;
    let delayed = run(&knobs(Precision::Fp8, Recompute::None), "b200").unwrap();
    let (acts, weights) = layer_cast_elements();
    let casts =
        |b: Fp8Bytes| q(LAYERS) * (frac(b.cast) * q(acts) + frac(b.weight_cast) * q(weights));
    for (precision, bytes) in RECIPES {
        let e = run(&knobs(precision, Recompute::None), "b200").unwrap();
        assert_eq!(e.flops, delayed.flops);
        let gain = if bytes.fp4 {
            &fp4_more * q(gemm_flops)
        } else {
            q(0)
        };
        assert_eq!(
            total(&e) - total(&delayed),
            &kappa * (casts(bytes) - casts(Fp8Bytes::DELAYED)) - gain,
            "{precision}"
        );
    }
}

/// The timeline's casts follow the recipe too: per-tensor current scaling reads each tensor
/// twice, so a step takes longer than under delayed scaling; the block-scaled recipes write
/// 1/32 more bytes per element; none is faster than delayed scaling.
#[test]
fn the_timeline_times_each_recipes_casts() {
    let time = |precision: Precision| {
        let k = knobs(precision, Recompute::None);
        let (plan, calib) = common::plan_on("gpt2-124m", &[("B", B)], &k, "b200");
        time_summary(&plan, &calib).unwrap().iteration_seconds
    };
    let delayed = time(Precision::Fp8);
    let current = time(Precision::Fp8Current);
    assert!(current > delayed * 1.001, "{current} vs {delayed}");
    for p in [Precision::Fp8Block, Precision::Mxfp8] {
        let t = time(p);
        assert!(
            t >= delayed && t < current,
            "{p}: {t} vs {delayed}, {current}"
        );
    }
}

/// MXFP8 needs tensor cores that scale blocks themselves: refused on an H100 (whose table
/// lists no `scaled_formats`), naming the table and the field; DeepSeek's block scaling runs
/// on any FP8 tensor cores (DeepSeek-V3 trained with it on H800); no FP8 recipe runs on an
/// A100 (no FP8 peak).
#[test]
fn mxfp8_needs_blackwell_and_every_recipe_fp8_tensor_cores() {
    let err = run(&knobs(Precision::Mxfp8, Recompute::None), "h100-sxm").unwrap_err();
    assert!(
        err.contains("h100-sxm") && err.contains("device.scaled_formats") && err.contains("mxfp8"),
        "{err}"
    );
    assert!(run(&knobs(Precision::Fp8Block, Recompute::None), "h800").is_ok());
    for (precision, _) in RECIPES {
        let err = run(&knobs(precision, Recompute::None), "a100-80gb").unwrap_err();
        assert!(
            err.contains("a100-80gb") && err.contains(&format!("precision={precision}")),
            "{err}"
        );
    }
    let stderr = common::refused(&[
        "timeline",
        "gpt2-124m",
        "--precision",
        "mxfp8",
        "--calib",
        "h100-sxm",
    ]);
    assert!(stderr.contains("scaled_formats"), "{stderr}");
    // NVFP4 needs an FP4 peak (not on an H100) and the format in hardware: the MI355X's table
    // gives an FP4 peak (MXFP4) but does not list NVFP4.
    let err = run(&knobs(Precision::Nvfp4, Recompute::None), "h100-sxm").unwrap_err();
    assert!(err.contains("peak_flops.fp4"), "{err}");
    let err = run(&knobs(Precision::Nvfp4, Recompute::None), "mi355x").unwrap_err();
    assert!(err.contains("mi355x") && err.contains("nvfp4"), "{err}");
}

/// The command line takes every recipe: `rank --fix precision=mxfp8` ranks MXFP8 rows on a
/// B200, `--emit megatron` names Megatron-LM's recipe (`--fp8-recipe`, whose choices are
/// tensorwise, delayed, mxfp8 and blockwise), and an unknown precision lists the names.
#[test]
fn the_command_line_takes_every_recipe() {
    // `rank … --fix FIX --emit megatron` on a B200: its standard output and error together.
    let emit = |fix: &str| {
        let out = common::symshard()
            .args([
                "rank",
                "gpt2-124m",
                "--devices",
                "8",
                "--calib",
                "b200",
                "--fix",
            ])
            .args([fix, "--emit", "megatron"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{fix}");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    for (fix, recipe, format) in [
        ("precision=fp8", "delayed", "hybrid"),
        ("precision=fp8-current", "tensorwise", "hybrid"),
        ("precision=fp8-block", "blockwise", "e4m3"),
        ("precision=mxfp8", "mxfp8", "e4m3"),
    ] {
        let v = common::json(&[
            "rank",
            "gpt2-124m",
            "--devices",
            "8",
            "--top",
            "2",
            "--calib",
            "b200",
            "--fix",
            fix,
            "--format",
            "json",
        ]);
        let rows = v["strategies"].as_array().unwrap();
        assert!(!rows.is_empty());
        let name = fix.trim_start_matches("precision=");
        assert!(rows.iter().all(|r| r["precision"] == name), "{fix}");
        let text = emit(fix);
        assert!(
            text.contains(&format!("--fp8-recipe {recipe}"))
                && text.contains(&format!("--fp8-format {format}")),
            "{fix}: {text}"
        );
    }
    // NVFP4 ranks too; the cited Megatron-LM cannot select it, and the emitted flags say so.
    let all = emit("precision=nvfp4");
    assert!(
        all.contains("precision=nvfp4") && !all.contains("--fp8-recipe"),
        "{all}"
    );
    let stderr = common::refused(&[
        "rank",
        "gpt2-124m",
        "--devices",
        "8",
        "--fix",
        "precision=fp4",
    ]);
    assert!(
        stderr.contains("fp8-block") && stderr.contains("mxfp8") && stderr.contains("nvfp4"),
        "{stderr}"
    );
}

/// A table's `scaled_formats` lists known formats only, each once; an unknown one is refused
/// at its line.
#[test]
fn a_table_lists_known_scaled_formats_only() {
    let dir = common::temp_dir("scaled-formats");
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/b200.yaml"),
    )
    .unwrap();
    for (bad, says) in [
        ("mxfp6", "not a block-scaled format"),
        ("mxfp8, mxfp8", "listed twice"),
    ] {
        let file = dir.join("t.yaml");
        std::fs::write(
            &file,
            text.replace("formats: [mxfp8, nvfp4]", &format!("formats: [{bad}]")),
        )
        .unwrap();
        let err = Calibration::resolve(file.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.yaml:") && err.contains(says), "{err}");
    }
}

/// `rank --fix precision=any` searches bf16 and every recipe the machine runs: on a B200 (whose
/// FP4 peak is twice its FP8 and four times its bf16 one, NVIDIA DGX B200 datasheet) NVFP4
/// rows lead GPT-3 2.7B; on an H100 no row is MXFP8 or NVFP4 (its table lists no scaled
/// formats); on an A100 (no FP8 peak) every row is bf16. The table shows a precision column.
#[test]
fn rank_searches_every_precision_the_machine_runs() {
    let precisions = |machine: &str| {
        let v = common::json(&[
            "rank",
            "gpt3-2.7b",
            "--devices",
            "8",
            "--top",
            "40",
            "--calib",
            machine,
            "--fix",
            "precision=any",
            "--format",
            "json",
        ]);
        v["strategies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["precision"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let b200 = precisions("b200");
    assert_eq!(b200[0], "nvfp4", "{b200:?}");
    let h100 = precisions("h100-sxm");
    assert!(
        h100.iter().all(|p| p != "mxfp8" && p != "nvfp4") && h100.iter().any(|p| p != "bf16"),
        "{h100:?}"
    );
    let a100 = precisions("a100-80gb");
    assert!(a100.iter().all(|p| p == "bf16"), "{a100:?}");
    let out = common::symshard()
        .args([
            "rank",
            "gpt3-2.7b",
            "--devices",
            "8",
            "--top",
            "3",
            "--calib",
            "b200",
            "--fix",
            "precision=any",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let head = text.lines().find(|l| l.starts_with("rank ")).unwrap();
    assert!(head.contains(" zero  precision  layout"), "{head}");
    let stderr = common::refused(&[
        "rank",
        "gpt3-2.7b",
        "--devices",
        "8",
        "--fix",
        "precision=any,precision=fp8",
    ]);
    assert!(stderr.contains("given twice"), "{stderr}");
}

/// Delayed scaling moves no more bytes than any other FP8 recipe in any cast, copy or saved
/// input, at the same FP8 peak, so `precision=any` need not search the others: on the same
/// knobs they are never faster (the_timeline_times_each_recipes_casts) nor smaller. NVFP4 and bf16 are
/// not dominated by it.
#[test]
fn delayed_scaling_dominates_the_other_fp8_recipes_in_speed_and_memory() {
    for p in [Precision::Fp8Current, Precision::Fp8Block, Precision::Mxfp8] {
        assert!(Precision::Fp8.dominates(p), "{p}");
        assert!(!p.dominates(Precision::Fp8), "{p}");
        assert!(!Precision::SEARCHED.contains(&p));
    }
    assert!(!Precision::Fp8.dominates(Precision::Nvfp4));
    assert!(!Precision::Fp8.dominates(Precision::Bf16));
    let delayed = run(&knobs(Precision::Fp8, Recompute::None), "b200").unwrap();
    for p in [Precision::Fp8Current, Precision::Fp8Block, Precision::Mxfp8] {
        let e = run(&knobs(p, Recompute::None), "b200").unwrap();
        assert!(e.memory.total >= delayed.memory.total, "{p}");
    }
}
