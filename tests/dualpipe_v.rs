//! DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py: DualPipe "cut in half"; PyTorch's
//! `ScheduleDualPipeV`, torchtitan's `DualPipeV`): ZB-V's placement run in DualPipe's eight
//! steps. The simulated bubble against the DualPipe README's formula, the activations held,
//! the F&B chunks' overlap, and what `cost`, `rank` and `--emit` do with it. Its program's order
//! is checked against `DualPipeV.step` in the library's schedule tests; the lower bound against
//! the simulated step in `timeline::bound`'s property test.

mod common;

use symshard::calib::Calibration;
use symshard::strategy::{Knobs, Schedule};
use symshard::sym::Rational;
use symshard::timeline::*;

#[path = "common/uniform_plan.rs"]
mod uniform_plan;
use uniform_plan::{bubble, knobs, q, uniform};

/// deepseek-ai/DualPipe's README ("Pipeline Bubbles and Memory Usage Comparison"): DualPipeV
/// idles (PP/2 − 1)(F&B + B − 3W) for PP stages, here PP = 2p chunks, with F a chunk's forward,
/// B its full backward, W its weight gradient and F&B an overlapped forward and backward. With
/// one GEMM per layer (F = 1, B = 2 of which W = 1, nothing to overlap so F&B = F + B = 3), that
/// is (p − 1)(3 + 2 − 3) = 2(p − 1) chunk units of the rank's 6m: twice ZB-V's (p − 1), the
/// price of F&B chunks with no communication to hide.
#[test]
fn dualpipe_v_idles_the_readmes_bubble() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    for (p, m) in [
        (2u64, 4u64),
        (2, 5),
        (3, 6),
        (3, 9),
        (4, 8),
        (4, 9),
        (4, 16),
        (8, 16),
    ] {
        let sim = |schedule| {
            let plan = uniform(knobs(p, m, schedule), 4 * p as usize, (1000, 2000, 1000));
            assert_eq!(plan.stages.len(), 2 * p as usize);
            simulate(&plan, &rates, 8).unwrap()
        };
        let (v, zb) = (sim(Schedule::DualPipeV), sim(Schedule::ZeroBubbleV));
        let want = (2 * (p - 1)) as f64 / (6 * m) as f64;
        assert!(
            (bubble(&v) - want).abs() < 1e-9,
            "dualpipev p={p} m={m}: {} vs {want}",
            bubble(&v)
        );
        assert!(zb.iteration < v.iteration, "p={p} m={m}");
    }
}

fn activations(schedule: &str, m: &str) -> Vec<Rational> {
    common::stage_activations(&[
        "gpt3-125m",
        "--pp",
        "2",
        "--schedule",
        schedule,
        "--microbatches",
        m,
        "--set",
        &format!("B={m}"),
    ])
}

/// The README's "Activation Per Device": PP + 1 micro-batches of one of its PP stages, so
/// 2p + 1 chunk micro-batches on every rank, one more than ZB-V's 2p (a walk of the program,
/// tested in the library). gpt3-125m's 12 layers over 4 chunks at pp = 2: rank 1 holds layers
/// 3–5 and 6–8, two equal chunks, so it holds 5/4 of ZB-V's activations at any micro-batch
/// count from 2p = 4 on.
#[test]
fn dualpipe_v_holds_one_chunk_micro_batch_more_than_zb_v() {
    for m in ["4", "5", "16"] {
        let (v, zb) = (activations("dualpipev", m), activations("zb-v", m));
        assert_eq!(v[1], &zb[1] * Rational::new(5.into(), 4.into()), "m {m}");
        // Rank 0's chunks differ (the embedding's, the head's): it holds more than ZB-V too.
        assert!(v[0] > zb[0], "m {m}");
    }
}

/// Mixtral 8x7B at pp = 4 (32 layers, 8 chunks), 8-way expert parallelism, on H100s.
fn mixtral(schedule: Schedule) -> (TimingPlan, Calibration) {
    let k = Knobs {
        pp: 4,
        ep: 8,
        dp: 8,
        zero: 1,
        microbatches: 8,
        schedule,
        ..Knobs::data_parallel(1)
    };
    common::plan_on("mixtral-8x7b", &[("B", 64)], &k, "h100-sxm")
}

/// Seconds, on rank 0, that an expert all-to-all of one micro-batch runs while the device
/// computes another micro-batch.
fn all_to_all_under_other_compute(schedule: Schedule) -> f64 {
    let (plan, calib) = mixtral(schedule);
    common::all_to_all_under_other_compute(&plan, &calib)
}

/// DualPipeV's F&B chunks run one micro-batch's expert all-to-all under another's compute,
/// as DualPipe's do (`DualPipeV._forward_backward_compute_chunk` calls the module's
/// `overlapped_forward_backward`); ZB-V runs one task at a time, so nothing of another
/// micro-batch runs under an all-to-all.
#[test]
fn dualpipe_v_runs_one_micro_batchs_all_to_all_under_anothers_compute() {
    assert_eq!(all_to_all_under_other_compute(Schedule::ZeroBubbleV), 0.0);
    assert!(all_to_all_under_other_compute(Schedule::DualPipeV) > 0.0);
}

/// The exact relative cost's bubble: (p − 1)/(2m) of a rank's F&B + B − 3W, so positive at
/// pp = 2, where DualPipe's (PP/2 − 1) is zero; and below 1F1B's.
#[test]
fn the_exact_bubble_counts_p_minus_1_chunks() {
    let evaluate = |pp: u64, m: u64, schedule: Schedule| {
        common::evaluate_on(
            "llama3-8b",
            &[("B", m as i64)],
            &knobs(pp, m, schedule),
            "h100-sxm",
        )
    };
    for (pp, m) in [(2u64, 4u64), (4, 16)] {
        let one = evaluate(pp, m, Schedule::OneFOneB);
        let v = evaluate(pp, m, Schedule::DualPipeV);
        let dual = evaluate(pp, m, Schedule::DualPipe);
        assert!(v.relative.bubble > q(0), "pp {pp}");
        assert!(v.relative.bubble < one.relative.bubble, "pp {pp}");
        if pp == 2 {
            assert_eq!(dual.relative.bubble, q(0));
        }
    }
}

/// `cost` and `timeline` say what a row is; fewer than 2·pp micro-batches and layers that 2·pp
/// chunks do not divide are refused, naming the schedule; the names parse.
#[test]
fn dualpipe_v_is_a_schedule_name_and_its_shapes_are_checked() {
    for (command, says) in [
        ("cost", "dualpipev: row s is rank s"),
        ("timeline", "under dualpipev rank s runs chunks s"),
    ] {
        let out = common::stdout(&[
            command,
            "gpt3-125m",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--schedule",
            "dualpipev",
        ]);
        assert!(out.contains(says), "{command}: {out}");
    }
    for (pp, m, why) in [
        (
            "2",
            "3",
            "dualpipev needs at least 2·pp = 4 micro-batches (one per stage of its V), but microbatches is 3",
        ),
        (
            "8",
            "16",
            "dualpipev with 2 chunks needs the 12 layers divisible by pp × chunks = 16",
        ),
    ] {
        let err = common::refused(&[
            "cost",
            "gpt3-125m",
            "--pp",
            pp,
            "--microbatches",
            m,
            "--set",
            "B=16",
            "--schedule",
            "dualpipev",
        ]);
        assert!(err.contains(why), "pp {pp} m {m}: {err}");
    }
    assert_eq!(Schedule::from_name("dualpipev"), Some(Schedule::DualPipeV));
    assert_eq!(Schedule::from_name("dualpipe-v"), Some(Schedule::DualPipeV));
    assert_eq!(Schedule::DualPipeV.to_string(), "dualpipev");
}

/// `rank` tries DualPipeV only where asked; `--emit torchtitan` names PyTorch's `DualPipeV` with
/// 2·pp − 1 split points and says that the keys' torchtitan predates it, and, without expert
/// parallelism, that torchtitan does not overlap the F&B chunks as priced; Megatron-LM has no
/// such schedule, so `--emit megatron` refuses it.
#[test]
fn rank_tries_dualpipe_v_when_fixed_and_torchtitan_runs_it() {
    assert!(common::ranked_rows_with("gpt3-125m", 16, 400, &[])
        .iter()
        .all(|r| r["schedule"] != "dualpipev"));
    let fixed = common::ranked_rows("gpt3-125m", 16, "schedule=dualpipev", 400);
    assert!(fixed.iter().any(|r| r["schedule"] == "dualpipev"));

    let out = common::stdout(&[
        "rank",
        "llama3-8b",
        "--devices",
        "32",
        "--fix",
        "schedule=dualpipev,pp=4,zero=3",
        "--emit",
        "torchtitan",
    ]);
    assert!(
        out.contains("pipeline_parallel_schedule = \"DualPipeV\""),
        "{out}"
    );
    let points = out
        .lines()
        .find(|l| l.starts_with("pipeline_parallel_split_points"))
        .unwrap();
    assert_eq!(points.matches("layers.").count(), 7, "{points}");
    assert!(out.contains("# warning: DualPipeV is newer than"), "{out}");
    assert!(
        out.contains("torchtitan overlaps them only with expert parallelism"),
        "{out}"
    );

    let megatron = common::refused(&[
        "rank",
        "llama3-8b",
        "--devices",
        "32",
        "--fix",
        "schedule=dualpipev,pp=4",
        "--emit",
        "megatron",
    ]);
    assert!(megatron.contains("DualPipeV"), "{megatron}");
}
