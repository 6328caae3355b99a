//! ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, §6; PyTorch's
//! `ScheduleZBVZeroBubble`, torchtitan's `ZBVZeroBubble`): the chunks placed as a "V", the
//! simulated bubble, the activations held, the pipeline sends, and what `rank` and `--emit` do
//! with it. The exact pricing's placement against the timeline's is in `priced_as_timed`, the
//! lower bound against the simulated step in `rank_seconds`'s property test.

mod common;

use common::symshard;
use symshard::calib::Calibration;
use symshard::strategy::Schedule;
use symshard::sym::Rational;
use symshard::timeline::*;

#[path = "common/uniform_plan.rs"]
mod uniform_plan;
use uniform_plan::{bubble, knobs, uniform};

/// With a chunk's F, B and W equal (one GEMM each of the same size), ZB-V's program idles
/// (p − 1) chunk forwards per step: its ranks wait for the first micro-batch to reach them,
/// and every other slot is filled. Of the rank's m·6 chunk units that is (p − 1)/(6m), half
/// ZB-H1's (p − 1)/(3m) (Qi et al.'s ZB-V "zero bubble" assumes the optimizer step's
/// synchronisation bypassed as well; the timeline keeps it, so the fill remains).
#[test]
fn zb_v_idles_p_minus_1_chunk_forwards() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    for (p, m) in [
        (2u64, 4u64),
        (2, 3),
        (4, 8),
        (4, 7),
        (4, 16),
        (8, 16),
        (3, 9),
    ] {
        // Two layers per chunk, 2p chunks.
        let k = knobs(p, m, Schedule::ZeroBubbleV);
        let plan = uniform(k, 4 * p as usize, (1000, 2000, 1000));
        assert_eq!(plan.stages.len(), 2 * p as usize);
        let zb = simulate(&plan, &rates, 8).unwrap();
        let want = (p - 1) as f64 / (6 * m) as f64;
        assert!(
            (bubble(&zb) - want).abs() < 1e-9,
            "zb-v p={p} m={m}: {} vs {want}",
            bubble(&zb)
        );
        let h1 = simulate(
            &uniform(
                knobs(p, m, Schedule::ZeroBubbleH1),
                4 * p as usize,
                (1000, 2000, 1000),
            ),
            &rates,
            8,
        )
        .unwrap();
        assert!(zb.iteration < h1.iteration, "p={p} m={m}");
    }
}

fn activations(args: &[&str]) -> Vec<Rational> {
    let mut all = vec!["gpt3-125m"];
    all.extend(args);
    common::stage_activations(&all)
}

/// The activations a rank holds: at the fullest moment of its program, each chunk's
/// micro-batches at that chunk's own size; min(2m, m + s + 1, 2p) chunk micro-batches in all
/// (a walk of PyTorch's order, tested in the library), so p whole-stage micro-batches from
/// 2p − 1 micro-batches on. gpt3-125m's 12 layers over 4 chunks at pp = 2: rank 1 holds layers
/// 3–5 and 6–8, one micro-batch of them with one micro-batch, two from two on.
#[test]
fn zb_v_holds_p_micro_batches_of_a_whole_stage() {
    let at = |m: &str| {
        activations(&[
            "--pp",
            "2",
            "--schedule",
            "zb-v",
            "--microbatches",
            m,
            "--set",
            &format!("B={m}"),
        ])
    };
    let (one, two, eight) = (at("1"), at("2"), at("8"));
    let q = |n: i64| Rational::from_integer(n.into());
    assert_eq!(eight[1], &one[1] * q(2));
    assert_eq!(two[1], &one[1] * q(2));
    // Rank 0's chunks differ (the embedding's, the head's): with one micro-batch it holds one
    // of each, with two, two of its first and one of its last; with eight, at its fullest,
    // three and one or four of its first (PyTorch's order walked by hand).
    let first = &two[0] - &one[0];
    let last = &one[0] - &first;
    assert!(last > first, "the head's chunk holds the logits");
    let three_one = &first * q(3) + &last;
    let four = &first * q(4);
    assert_eq!(eight[0], three_one.max(four));
}

/// Each neighbouring rank takes one chunk's output and gives back its gradient, and the other
/// chunk's the other way; the turn of the V (rank p − 1, chunk p − 1 to chunk p) stays on the
/// device, and rank 0's second chunk is the last stage. In the timeline's trace at pp = 3 with
/// 6 micro-batches: rank 2 sends no activation from stage 2, six from stage 3; rank 0 six from
/// stage 0 and none from stage 5.
#[test]
fn the_turn_of_the_v_stays_on_the_device() {
    let dir = std::env::temp_dir().join(format!("symshard-zbv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    symshard()
        .args([
            "timeline",
            "gpt3-125m",
            "--pp",
            "3",
            "--microbatches",
            "6",
            "--set",
            "B=12",
            "--schedule",
            "zb-v",
            "--trace",
            trace.to_str().unwrap(),
        ])
        .assert()
        .success();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let sends_from = |device: u64, stage: u64| {
        events
            .iter()
            .filter(|e| {
                e["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("send activation"))
                    && e["pid"] == device
                    && e["args"]["stage"] == stage
            })
            .count()
    };
    assert_eq!(sends_from(2, 2), 0);
    assert_eq!(sends_from(2, 3), 6);
    assert_eq!(sends_from(0, 0), 6);
    assert_eq!(sends_from(0, 5), 0);
    assert_eq!(sends_from(1, 1), 6);
    assert_eq!(sends_from(1, 4), 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rank` tries ZB-V only where asked; `--emit torchtitan` names PyTorch's `ZBVZeroBubble` with
/// 2·pp − 1 split points; Megatron-LM has no such schedule, so `--emit megatron` refuses it;
/// layers that 2·pp chunks do not divide are refused naming the schedule.
#[test]
fn rank_tries_zb_v_when_fixed_and_torchtitan_runs_it() {
    assert!(common::ranked_rows_with("gpt3-125m", 16, 400, &[])
        .iter()
        .all(|r| r["schedule"] != "zb-v"));
    let fixed = common::ranked_rows("gpt3-125m", 16, "schedule=zb-v", 400);
    assert!(fixed.iter().any(|r| r["schedule"] == "zb-v"));

    let out = common::stdout(&[
        "rank",
        "llama3-8b",
        "--devices",
        "32",
        "--fix",
        "schedule=zb-v,pp=4,zero=3",
        "--emit",
        "torchtitan",
    ]);
    assert!(
        out.contains("pipeline_parallel_schedule = \"ZBVZeroBubble\""),
        "{out}"
    );
    let points = out
        .lines()
        .find(|l| l.starts_with("pipeline_parallel_split_points"))
        .unwrap();
    assert_eq!(points.matches("layers.").count(), 7, "{points}");

    let megatron = common::refused(&[
        "rank",
        "llama3-8b",
        "--devices",
        "32",
        "--fix",
        "schedule=zb-v,pp=4",
        "--emit",
        "megatron",
    ]);
    assert!(megatron.contains("ZB-V"), "{megatron}");
    // 12 layers over 2·4 chunks: `rank` says why nothing is left, `cost` refuses it.
    let why = "zb-v with 2 chunks needs the 12 layers divisible by pp × chunks = 8";
    for args in [
        &[
            "rank",
            "gpt3-125m",
            "--devices",
            "16",
            "--fix",
            "schedule=zb-v,pp=4",
        ][..],
        &[
            "cost",
            "gpt3-125m",
            "--pp",
            "4",
            "--microbatches",
            "8",
            "--schedule",
            "zb-v",
        ],
    ] {
        let err = common::refused(args);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    assert_eq!(Schedule::from_name("zb-v"), Some(Schedule::ZeroBubbleV));
    assert_eq!(Schedule::ZeroBubbleV.to_string(), "zb-v");
}
