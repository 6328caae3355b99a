//! ZB-H1 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv:2401.10241):
//! the simulated bubble against the paper's (p − 1)(T_F + T_B − T_W), the step against 1F1B's,
//! the activations in flight, the exact bubble, the lower bound, and the names users type.

mod common;

use common::symshard;
use num_traits::ToPrimitive;
use predicates::prelude::*;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{Evaluation, Layout};
use symshard::strategy::{Knobs, Recompute, Schedule};
use symshard::sym::Rational;
use symshard::timeline::*;

#[path = "common/uniform_plan.rs"]
mod uniform_plan;
use uniform_plan::{bubble, knobs, q, uniform};

/// With T_F = T_B = T_W (the paper's §3.1 setting: a matmul's forward, input gradient and
/// weight gradient are one GEMM each of the same size), 1F1B idles (p − 1)·3 units of its
/// m·3 and ZB-H1 (p − 1)(T_F + T_B − T_W) = (p − 1)·1: a third of 1F1B's bubble.
#[test]
fn zb_h1_idles_p_minus_1_times_f_plus_b_minus_w() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    for (p, m) in [(2u64, 4u64), (4, 8), (4, 16), (8, 16), (3, 9), (4, 4)] {
        let layers = 2 * p as usize;
        let one = simulate(
            &uniform(knobs(p, m, Schedule::OneFOneB), layers, (1000, 2000, 0)),
            &rates,
            8,
        )
        .unwrap();
        let zb = simulate(
            &uniform(
                knobs(p, m, Schedule::ZeroBubbleH1),
                layers,
                (1000, 2000, 1000),
            ),
            &rates,
            8,
        )
        .unwrap();
        let want_1f1b = (p - 1) as f64 / m as f64;
        let want_zb = (p - 1) as f64 / (3 * m) as f64;
        assert!(
            (bubble(&one) - want_1f1b).abs() < 1e-9,
            "1f1b p={p} m={m}: {}",
            bubble(&one)
        );
        assert!(
            (bubble(&zb) - want_zb).abs() < 1e-9,
            "zb-h1 p={p} m={m}: {} vs {want_zb}",
            bubble(&zb)
        );
        // The same work, less idle: a shorter step.
        let work = |s: &Simulation| s.work.iter().cloned().fold(0.0, f64::max);
        assert!((work(&one) - work(&zb)).abs() < 1e-9 * work(&one));
        assert!(zb.iteration < one.iteration, "p={p} m={m}");
    }
}

/// Without a weight gradient (W = 0) ZB-H1 is 1F1B: the same step.
#[test]
fn zb_h1_without_weight_gradients_is_1f1b() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    let one = simulate(
        &uniform(knobs(4, 8, Schedule::OneFOneB), 8, (1000, 2000, 0)),
        &rates,
        8,
    )
    .unwrap();
    let zb = simulate(
        &uniform(knobs(4, 8, Schedule::ZeroBubbleH1), 8, (1000, 2000, 0)),
        &rates,
        8,
    )
    .unwrap();
    assert!((one.iteration - zb.iteration).abs() < 1e-9 * one.iteration);
}

fn planned(
    model: &str,
    batch: i64,
    k: &Knobs,
    machine: &str,
) -> (TimingPlan, Evaluation, Calibration) {
    let m = ModelLoader::embedded().unwrap().resolve(model).unwrap();
    let mut values = m.values.clone();
    values.insert("B".into(), q(batch));
    let calib = Calibration::resolve(machine).unwrap();
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    let (p, e) = plan_strategy(
        &m,
        &values,
        k,
        &layout,
        MachineRef::of(&calib, &calib.memory_bytes()),
    )
    .unwrap();
    (p, e, calib)
}

/// On a real model at pp = 4 the simulated ZB-H1 step is no longer than 1F1B's, its bubble is
/// smaller, and the trace shows the weight-gradient steps (`W`), each micro-batch's after its
/// `B` on the same rank, with the gradient reductions after the last of them.
#[test]
fn zb_h1_is_no_slower_than_1f1b_on_gpt3_125m_at_pp_4() {
    for (machine, recompute, dp) in [
        ("a100-80gb", Recompute::None, 1),
        ("h100-sxm", Recompute::Selective, 2),
        ("a40-pcie", Recompute::Full, 2),
    ] {
        let mut k1 = knobs(4, 8, Schedule::OneFOneB);
        k1.recompute = recompute;
        k1.dp = dp;
        let kz = Knobs {
            schedule: Schedule::ZeroBubbleH1,
            ..k1.clone()
        };
        let (p1, _, calib) = planned("gpt3-125m", 8 * dp as i64, &k1, machine);
        let (pz, _, _) = planned("gpt3-125m", 8 * dp as i64, &kz, machine);
        let s1 = time_summary(&p1, &calib).unwrap();
        let tz = time_plan(&pz, &calib).unwrap();
        let sz = &tz.summary;
        assert!(
            sz.iteration_seconds <= s1.iteration_seconds * (1.0 + 1e-9),
            "{machine} {recompute}: zb-h1 {} s, 1f1b {} s",
            sz.iteration_seconds,
            s1.iteration_seconds
        );
        assert!(
            sz.bubble_fraction < s1.bubble_fraction,
            "{machine}: {} vs {}",
            sz.bubble_fraction,
            s1.bubble_fraction
        );
        let ev = &tz.sim.events;
        let weights: Vec<&Event> = ev
            .iter()
            .filter(|e| e.pass == Pass::Weight && e.stream == Stream::Compute)
            .collect();
        assert!(!weights.is_empty(), "{machine}: no weight-gradient step");
        for w in &weights {
            // Its micro-batch's input gradient on the same rank ended before it.
            let b_end = ev
                .iter()
                .filter(|e| {
                    e.pass == Pass::Backward
                        && e.device == w.device
                        && e.microbatch == w.microbatch
                        && e.stream == Stream::Compute
                })
                .map(Event::end)
                .fold(f64::MIN, f64::max);
            assert!(
                b_end <= w.start + 1e-12,
                "{machine}: W of {:?} before its B",
                w.microbatch
            );
        }
        if dp > 1 {
            for d in 0..4 {
                let last_w = weights
                    .iter()
                    .filter(|e| e.device == d)
                    .map(|e| e.start)
                    .fold(f64::MIN, f64::max);
                let first_reduce = ev
                    .iter()
                    .filter(|e| {
                        e.device == d
                            && matches!(e.what, What::Grad { .. })
                            && e.stream == Stream::DpComm
                    })
                    .map(|e| e.start)
                    .fold(f64::MAX, f64::min);
                assert!(
                    first_reduce >= last_w,
                    "{machine}: rank {d} reduces before its last W starts"
                );
            }
        }
    }
}

/// Every stage holds min(m, p) micro-batches' activations under ZB-H1: stage 0's count under
/// 1F1B, so stage 0 holds what it holds under 1F1B (the paper's "same peak memory"), and the
/// later stages, which 1F1B lets hold fewer, hold as many.
#[test]
fn zb_h1_holds_1f1b_stage_0_activations_on_every_stage() {
    let stages = |schedule: &str| -> Vec<Rational> {
        common::stage_activations(&[
            "gpt3-125m",
            "--pp",
            "4",
            "--microbatches",
            "8",
            "--schedule",
            schedule,
        ])
    };
    let (one, zb) = (stages("1f1b"), stages("zb-h1"));
    assert_eq!(one.len(), 4);
    assert_eq!(zb[0], one[0]);
    // Stages 1 and 2 hold the same layers: 4 micro-batches under ZB-H1 against 3 and 2.
    assert_eq!(&zb[1] * q(3), &one[1] * q(4));
    assert_eq!(&zb[2] * q(2), &one[2] * q(4));
    assert_eq!(zb[1], zb[2]);
}

/// The exact relative cost: ZB-H1 idles (p − 1)/m of the slowest stage's time less twice its
/// weight gradients, so less than 1F1B and never below a third of it (T_W ≤ T_F and
/// T_W ≤ T_B: a weight gradient mirrors a forward product); the rest of the cost is 1F1B's.
#[test]
fn the_exact_bubble_shrinks_by_twice_the_weight_gradients() {
    for (model, pp, m) in [
        ("gpt3-125m", 4u64, 8u64),
        ("gpt3-125m", 2, 2),
        ("llama3-8b", 4, 16),
    ] {
        let (_, e1, _) = planned(
            model,
            m as i64,
            &knobs(pp, m, Schedule::OneFOneB),
            "h100-sxm",
        );
        let (_, ez, _) = planned(
            model,
            m as i64,
            &knobs(pp, m, Schedule::ZeroBubbleH1),
            "h100-sxm",
        );
        let (b1, bz) = (&e1.relative.bubble, &ez.relative.bubble);
        assert!(bz < b1, "{model}: {bz} vs {b1}");
        assert!(bz * q(3) >= *b1, "{model}: {bz} vs {b1}");
        assert_eq!(e1.relative.compute, ez.relative.compute, "{model}");
        assert_eq!(&e1.relative.total - b1, &ez.relative.total - bz, "{model}");
        // The reported fraction is the bubble's share of the slowest stage's time.
        let f1 = e1.bubble_fraction.to_f64().unwrap();
        let fz = ez.bubble_fraction.to_f64().unwrap();
        assert_eq!(
            e1.bubble_fraction,
            Rational::new(((pp - 1) as i64).into(), (m as i64).into())
        );
        assert!(
            fz < f1 && fz * 3.0 >= f1 * (1.0 - 1e-12),
            "{model}: {fz} vs {f1}"
        );
    }
}

#[test]
fn zb_h1_is_a_schedule_name_and_a_bad_name_is_refused() {
    assert_eq!(Schedule::from_name("zb-h1"), Some(Schedule::ZeroBubbleH1));
    assert_eq!(Schedule::ZeroBubbleH1.to_string(), "zb-h1");
    assert_eq!(Schedule::from_name("zb-h2"), None);
    symshard()
        .args(["cost", "gpt2-124m", "--pp", "2", "--schedule", "zb-h1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("zb-h1"));
    symshard()
        .args(["timeline", "gpt2-124m", "--pp", "2", "--schedule", "zb-h2"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("unknown schedule `zb-h2`")
                .and(predicate::str::contains("zb-h1")),
        );
    symshard()
        .args([
            "rank",
            "gpt2-124m",
            "--devices",
            "8",
            "--fix",
            "schedule=zbh1",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("zb-h1"));
    let dir = std::env::temp_dir().join(format!("symshard-zb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(&good, "pp: 2\nmicrobatches: 4\nschedule: zb-h1\n").unwrap();
    symshard()
        .args(["cost", "gpt2-124m", "--strategy", good.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("zb-h1"));
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "pp: 2\nmicrobatches: 4\nschedule: zero-bubble\n").unwrap();
    symshard()
        .args(["cost", "gpt2-124m", "--strategy", bad.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("bad.yaml:3:")
                .and(predicate::str::contains("unknown schedule `zero-bubble`")),
        );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rank` tries ZB-H1 only where asked (the default search is unchanged), and then on every
/// pipeline; no stack `--emit` targets names ZB-H1, so emitting it is refused.
#[test]
fn rank_tries_zb_h1_when_fixed_and_emit_refuses_it() {
    let rows = |fix: Option<&str>| -> Vec<serde_json::Value> {
        let mut args = vec!["rank", "gpt3-125m", "--devices", "16", "--top", "400"];
        args.extend(["--format", "json"]);
        if let Some(f) = fix {
            args.extend(["--fix", f]);
        }
        let v = common::json(&args);
        v["strategies"].as_array().cloned().unwrap_or_default()
    };
    let default = rows(None);
    assert!(!default.is_empty());
    assert!(default
        .iter()
        .all(|r| r.to_string().find("zb-h1").is_none()));
    let fixed = rows(Some("schedule=zb-h1"));
    assert!(fixed.iter().any(|r| r.to_string().contains("zb-h1")));
    for emit in ["megatron", "torchtitan"] {
        symshard()
            .args([
                "rank",
                "gpt3-125m",
                "--devices",
                "16",
                "--fix",
                "schedule=zb-h1,pp=4",
                "--emit",
                emit,
            ])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("ZB-H1"));
    }
}

/// A saved analysis of a ZB-H1 strategy keeps each operator's weight-gradient FLOPs and times
/// as the direct run; one edited to a weight gradient larger than its backward is refused with
/// the file and the operator, not simulated.
#[test]
fn a_saved_zb_h1_analysis_times_alike_and_a_broken_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("symshard-zb-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("plan.json");
    let strategy = ["--pp", "2", "--microbatches", "4", "--schedule", "zb-h1"];
    let mut args = vec!["analyze", "gpt2-124m"];
    args.extend(strategy);
    args.extend(["-o", saved.to_str().unwrap()]);
    symshard().args(&args).assert().success();
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("weight_grad_flops"));
    let step = |v: &serde_json::Value| v["iteration_seconds"].as_f64().unwrap();
    let direct = {
        let mut a = vec!["timeline", "gpt2-124m"];
        a.extend(strategy);
        a.extend(["--format", "json"]);
        common::json(&a)
    };
    let loaded = common::json(&["timeline", saved.to_str().unwrap(), "--format", "json"]);
    assert_eq!(step(&direct), step(&loaded));
    // The first operator with a weight gradient gets one larger than its whole backward.
    let mut plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let op = plan["blocks"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .flat_map(|b| b["ops"].as_array_mut().unwrap().iter_mut())
        .find(|o| o.get("weight_grad_flops").is_some())
        .unwrap();
    let name = op["name"].as_str().unwrap().to_string();
    op["weight_grad_flops"] = serde_json::json!("1000000000000000000000");
    let broken = dir.join("broken.json");
    std::fs::write(&broken, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    symshard()
        .args(["timeline", broken.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("broken.json")
                .and(predicate::str::contains(format!("operator `{name}`")))
                .and(predicate::str::contains(
                    "`weight_grad_flops` exceeds `backward_flops`",
                )),
        );
    std::fs::remove_dir_all(&dir).unwrap();
}
