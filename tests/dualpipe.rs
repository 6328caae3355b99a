//! DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1 and Table 2;
//! deepseek-ai/DualPipe): the simulated bubble against the table's (PP/2 − 1)(F&B + B − 3W),
//! the parameters and activations the table gives, the refusals, `rank --fix`, `--emit`, and
//! the shipped DeepSeek-V3 at the report's pp = 16.

mod common;

use common::symshard;
use num_traits::ToPrimitive;
use predicates::prelude::*;
use symshard::calib::{Calibration, MachineRef};
use symshard::strategy::{Knobs, Schedule};
use symshard::sym::Rational;
use symshard::timeline::*;

#[path = "common/uniform_plan.rs"]
mod uniform_plan;
use uniform_plan::{knobs, q, uniform};

/// The busiest rank's idle time over the step: flush − work.
fn idle(sim: &Simulation) -> f64 {
    let work = sim.work.iter().cloned().fold(0.0, f64::max);
    sim.flush - work
}

/// The busiest rank's work.
fn work(sim: &Simulation) -> f64 {
    sim.work.iter().cloned().fold(0.0, f64::max)
}

/// With F = B = W in the zero-bubble sense (a forward, an input gradient and a weight gradient
/// of one GEMM each, as in tests/zero_bubble.rs), Table 2's notation has F = 1, B = 2 (the
/// full backward), W = 1 and, with nothing to overlap, F&B = F + B = 3: DualPipe idles
/// (PP/2 − 1)(3 + 2 − 3) = 2(PP/2 − 1) units, against 1F1B's (PP − 1)(F + B) = 3(PP − 1).
/// Each rank works m(F + B) = 3m units (half the micro-batches on each of its two stages).
#[test]
fn dualpipe_idles_the_table_2_bubble() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    for (p, m) in [
        (2u64, 4u64),
        (2, 10),
        (4, 8),
        (4, 12),
        (6, 12),
        (8, 16),
        (8, 20),
        (8, 40),
    ] {
        let layers = 2 * p as usize;
        let dual = simulate(
            &uniform(knobs(p, m, Schedule::DualPipe), layers, (1000, 2000, 1000)),
            &rates,
            8,
        )
        .unwrap();
        let one = simulate(
            &uniform(knobs(p, m, Schedule::OneFOneB), layers, (1000, 2000, 0)),
            &rates,
            8,
        )
        .unwrap();
        // One unit: a third of a rank's work per micro-batch.
        let unit = work(&dual) / (3 * m) as f64;
        let want = (p / 2 - 1) as f64 * (3.0 + 2.0 - 3.0) * unit;
        assert!(
            (idle(&dual) - want).abs() < 1e-9 * work(&dual),
            "dualpipe p={p} m={m}: idle {} vs {want}",
            idle(&dual)
        );
        let want_1f1b = (p - 1) as f64 * 3.0 * unit;
        assert!(
            (idle(&one) - want_1f1b).abs() < 1e-9 * work(&one),
            "1f1b p={p} m={m}"
        );
        // The same work on every rank.
        for w in &dual.work {
            assert!((w - work(&dual)).abs() < 1e-9 * work(&dual), "p={p} m={m}");
        }
    }
}

/// Every rank runs each micro-batch's forward and backward on its two stages: m/2 forwards
/// of stage i and m/2 of stage pp − 1 − i, fed from the two ends.
#[test]
fn each_rank_runs_two_stages_half_the_micro_batches_each() {
    let (p, m) = (4usize, 8usize);
    for s in 0..p {
        let prog = program(Schedule::DualPipe, s, p, m, 1);
        assert_eq!(
            prog.len(),
            3 * m,
            "rank {s}: F, B and W of each micro-batch"
        );
        let stages: std::collections::BTreeSet<usize> = prog.iter().map(|t| t.stage).collect();
        let want: std::collections::BTreeSet<usize> = [s, p - 1 - s].into_iter().collect();
        assert_eq!(stages, want, "rank {s}");
        for t in &prog {
            assert_eq!(schedule_device(t.stage, t.microbatch, p, m), s);
        }
        let pairs = paired(Schedule::DualPipe, s, p, m, prog.len());
        assert_eq!(pairs.len(), prog.len());
        // A paired forward is followed by a backward of the other phase.
        for (i, &two) in pairs.iter().enumerate() {
            if two {
                assert_eq!(prog[i].pass, Pass::Forward);
                assert_eq!(prog[i + 1].pass, Pass::Backward);
                assert_ne!(prog[i].stage, prog[i + 1].stage);
            }
        }
    }
}

fn schedule_device(stage: usize, microbatch: usize, p: usize, m: usize) -> usize {
    device_of(Schedule::DualPipe, stage, microbatch, p, m)
}

/// `cost gpt3-125m` at pp = 4 and 8 micro-batches, the schedule left to add.
const COST_PP4: [&str; 6] = ["cost", "gpt3-125m", "--pp", "4", "--microbatches", "8"];

fn stage_memory(schedule: &str) -> Vec<serde_json::Value> {
    let v = common::json(&[&COST_PP4[..], &["--schedule", schedule, "--format", "json"]].concat());
    v["per_device"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["memory"].clone())
        .collect()
}

fn exact(v: &serde_json::Value, key: &str) -> Rational {
    v[key].as_str().unwrap().parse().unwrap()
}

/// Table 2 of arXiv:2412.19437: DualPipe holds 2× the parameters of 1F1B and PP + 1
/// micro-batches of activations (1F1B: PP on its first stage); deepseek-ai/DualPipe places
/// stages s and pp − 1 − s on rank s. Here gpt3-125m at pp = 4, whose stage 0 holds the
/// embedding and stage 3 the head, so a rank's two stages differ: rank s holds the weights,
/// gradients and optimizer state of 1F1B's stages s and 3 − s, and at the fullest moment of its
/// program, walked here task by task, the micro-batches it holds of each (from a forward to its
/// weight gradient), each at 1F1B's per-micro-batch activations of that stage (1F1B's stage s
/// holds 4 − s).
#[test]
fn dualpipe_holds_both_stages_parameters_and_pp_plus_1_activations() {
    let (one, dual) = (stage_memory("1f1b"), stage_memory("dualpipe"));
    let (p, m) = (4usize, 8usize);
    assert_eq!(one.len(), p);
    let per_microbatch: Vec<Rational> = (0..p)
        .map(|s| exact(&one[s], "activations") / q((p - s) as i64))
        .collect();
    assert_ne!(per_microbatch[0], per_microbatch[p - 1]);
    for s in 0..p {
        let mirror = p - 1 - s;
        for key in ["params", "grads", "optimizer"] {
            assert_eq!(
                exact(&dual[s], key),
                exact(&one[s], key) + exact(&one[mirror], key),
                "rank {s} {key}"
            );
        }
        let (mut held, mut fullest, mut most) = ([0i64; 2], q(0), 0);
        for t in program(Schedule::DualPipe, s, p, m, 1) {
            let i = usize::from(t.stage != s);
            match t.pass {
                Pass::Forward => held[i] += 1,
                Pass::Weight => held[i] -= 1,
                Pass::Backward => continue,
            }
            let now = per_microbatch[s].clone() * q(held[0])
                + per_microbatch[mirror].clone() * q(held[1]);
            fullest = fullest.max(now);
            most = most.max(held[0] + held[1]);
        }
        assert_eq!(most, p as i64 + 1, "rank {s}");
        assert_eq!(exact(&dual[s], "activations"), fullest, "rank {s}");
    }
}

#[test]
fn dualpipe_is_a_schedule_name_and_odd_pp_or_few_micro_batches_are_refused() {
    assert_eq!(Schedule::from_name("dualpipe"), Some(Schedule::DualPipe));
    assert_eq!(Schedule::DualPipe.to_string(), "dualpipe");
    for cmd in ["cost", "timeline"] {
        symshard()
            .args([cmd, "gpt2-124m", "--pp", "2", "--microbatches", "4"])
            .args(["--schedule", "dualpipe"])
            .assert()
            .success()
            .stdout(predicate::str::contains("dualpipe"));
        symshard()
            .args([cmd, "gpt2-124m", "--pp", "3", "--microbatches", "12"])
            .args(["--schedule", "dualpipe"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("even pp").and(predicate::str::contains("pp is 3")));
        for m in ["6", "9"] {
            symshard()
                .args([cmd, "gpt2-124m", "--pp", "4", "--microbatches", m])
                .args(["--schedule", "dualpipe"])
                .assert()
                .code(2)
                .stderr(
                    predicate::str::contains("at least 2·pp = 8")
                        .and(predicate::str::contains(format!("microbatches is {m}"))),
                );
        }
    }
    let dir = std::env::temp_dir().join(format!("symshard-dualpipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "pp: 4\nmicrobatches: 4\nschedule: dualpipe\n").unwrap();
    symshard()
        .args(["cost", "gpt2-124m", "--strategy", bad.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("microbatches is 4"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `rank` tries DualPipe only where asked, and then lists it on every pipeline (pp > 1 rows
/// are all DualPipe, with pp even and micro-batches even and at least 2·pp); `--emit` refuses
/// it for Megatron-LM and torchtitan, which do not run it.
#[test]
fn rank_lists_only_dualpipe_when_fixed_and_emit_refuses_it() {
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
    assert!(default.iter().all(|r| r["schedule"] != "dualpipe"));
    let fixed = rows(Some("schedule=dualpipe"));
    let piped: Vec<&serde_json::Value> = fixed
        .iter()
        .filter(|r| r["pp"].as_u64() > Some(1))
        .collect();
    assert!(!piped.is_empty());
    for r in piped {
        assert_eq!(r["schedule"], "dualpipe", "{r}");
        let (pp, m) = (
            r["pp"].as_u64().unwrap(),
            r["microbatches"].as_u64().unwrap(),
        );
        assert!(pp % 2 == 0 && m % 2 == 0 && m >= 2 * pp, "{r}");
    }
    for emit in ["megatron", "torchtitan"] {
        symshard()
            .args(["rank", "gpt3-125m", "--devices", "16"])
            .args(["--fix", "schedule=dualpipe,pp=4", "--emit", emit])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("DualPipe"));
    }
}

/// The shipped DeepSeek-V3 at the technical report's pipeline (arXiv:2412.19437, §3.2: 16-way
/// pipeline, 64-way expert parallelism over 8 nodes, ZeRO-1 data parallelism; 2048 H800 GPUs)
/// runs under DualPipe, with a step shorter than 1F1B's and its F&B chunks overlapping
/// one micro-batch's expert all-to-all with the other's compute.
#[test]
fn deepseek_v3_at_pp_16_runs_under_dualpipe() {
    let step = |schedule: &str| -> serde_json::Value {
        common::json(&[
            "timeline",
            "deepseek-v3",
            "--pp",
            "16",
            "--ep",
            "64",
            "--dp",
            "128",
            "--zero",
            "1",
            "--microbatches",
            "40",
            "--calib",
            "h800",
            "--schedule",
            schedule,
            "--format",
            "json",
        ])
    };
    let (one, dual) = (step("1f1b"), step("dualpipe"));
    let secs = |v: &serde_json::Value| v["iteration_seconds"].as_f64().unwrap();
    assert!(secs(&dual) > 0.0);
    assert!(
        secs(&dual) < secs(&one),
        "{} vs {}",
        secs(&dual),
        secs(&one)
    );
}

/// The technical report's layout of the shipped DeepSeek-V3 (see
/// `deepseek_v3_at_pp_16_runs_under_dualpipe`) planned under `schedule`.
fn deepseek_v3(schedule: Schedule) -> (TimingPlan, Calibration) {
    let k = Knobs {
        pp: 16,
        ep: 64,
        dp: 128,
        zero: 1,
        microbatches: 40,
        schedule,
        ..Knobs::data_parallel(1)
    };
    common::plan_on("deepseek-v3", &[], &k, "h800")
}

/// How long, on rank 0, an expert all-to-all of one micro-batch runs while the device
/// computes another micro-batch.
fn all_to_all_under_other_compute(schedule: Schedule) -> f64 {
    let (plan, calib) = deepseek_v3(schedule);
    common::all_to_all_under_other_compute(&plan, &calib)
}

/// The overlap is the simulator's, not a factor: in DualPipe's F&B chunks an expert
/// all-to-all of one micro-batch runs while the device computes the other (arXiv:2412.19437,
/// §3.2.1: a forward and a backward chunk run as a pair, each one's communication overlapped
/// with the other's computation); under 1F1B every all-to-all blocks its own micro-batch and
/// nothing runs under it.
#[test]
fn dualpipe_runs_one_micro_batchs_all_to_all_under_anothers_compute() {
    assert_eq!(all_to_all_under_other_compute(Schedule::OneFOneB), 0.0);
    assert!(all_to_all_under_other_compute(Schedule::DualPipe) > 0.0);
}

/// The exact relative cost: DualPipe idles less than 1F1B (Table 2 of arXiv:2412.19437: about
/// half the stages' worth, (PP/2 − 1) against (PP − 1)), more than nothing where pp > 2, none
/// at pp = 2. Rank s runs half the micro-batches through each of stages s and pp − 1 − s, so
/// its FLOPs are the mean of 1F1B's two stages' (here the first stage holds the embedding and
/// the last the head, so the two differ).
#[test]
fn the_exact_bubble_is_table_2s() {
    use symshard::model::ModelLoader;
    use symshard::parallel::Layout;
    let evaluate = |model: &str, pp: u64, m: u64, schedule: Schedule| {
        let md = ModelLoader::embedded().unwrap().resolve(model).unwrap();
        let mut values = md.values.clone();
        values.insert("B".into(), q(m as i64));
        let calib = Calibration::resolve("h100-sxm").unwrap();
        let k = knobs(pp, m, schedule);
        let layout = Layout::default();
        plan_strategy(
            &md,
            &values,
            &k,
            &layout,
            MachineRef::of(&calib, &calib.memory_bytes()),
        )
        .unwrap()
        .1
    };
    for (model, pp, m) in [
        ("gpt3-125m", 4u64, 8u64),
        ("gpt3-125m", 2, 4),
        ("llama3-8b", 4, 16),
    ] {
        let one = evaluate(model, pp, m, Schedule::OneFOneB);
        let dual = evaluate(model, pp, m, Schedule::DualPipe);
        let (b1, bd) = (&one.relative.bubble, &dual.relative.bubble);
        assert!(bd < b1, "{model}: {bd} vs {b1}");
        if pp == 2 {
            assert_eq!(*bd, q(0), "{model}");
        } else {
            assert!(*bd > q(0), "{model}");
        }
        let p = pp as usize;
        for r in 0..p {
            let mean = (&one.stages[r].flops + &one.stages[p - 1 - r].flops) / q(2);
            assert_eq!(dual.stages[r].flops, mean, "{model} rank {r}");
        }
        assert_ne!(one.stages[0].flops, one.stages[p - 1].flops, "{model}");
    }
}

/// What the timeline computes is what the evaluation prices: rank d runs half the
/// micro-batches of stage d and half of stage pp − 1 − d, so its FLOPs are the mean of the two
/// stages' per step; and its busy seconds per stream are its events' durations.
#[test]
fn busy_flops_are_the_mean_of_the_ranks_two_stages() {
    use symshard::model::ModelLoader;
    use symshard::parallel::Layout;
    use symshard::strategy::Recompute;
    let md = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-125m")
        .unwrap();
    let mut values = md.values.clone();
    values.insert("B".into(), q(32));
    let calib = Calibration::resolve("h100-sxm").unwrap();
    for (pp, m, recompute) in [
        (4u64, 8u64, Recompute::None),
        (4, 16, Recompute::Selective),
        (2, 4, Recompute::Full),
    ] {
        let k = Knobs {
            dp: 2,
            recompute,
            ..knobs(pp, m, Schedule::DualPipe)
        };
        let (plan, e) = plan_strategy(
            &md,
            &values,
            &k,
            &Layout::default(),
            MachineRef::of(&calib, &calib.memory_bytes()),
        )
        .unwrap();
        let tl = time_plan(&plan, &calib).unwrap();
        let p = pp as usize;
        let per_device = |s: Stream, f: &dyn Fn(&Event) -> f64| -> Vec<f64> {
            let mut v = vec![0.0; p];
            for ev in tl.sim.events.iter().filter(|ev| ev.stream == s) {
                v[ev.device] += f(ev);
            }
            v
        };
        let flops = per_device(Stream::Compute, &|ev| ev.flops);
        assert_eq!(e.stages.len(), p);
        // The evaluation prices rank d as the timeline runs it.
        let f = |s: usize| e.stages[s].flops.to_f64().unwrap();
        for (d, got) in flops.iter().enumerate() {
            let want = f(d);
            assert!((got - want).abs() <= 1e-9 * want, "pp={pp} m={m}: rank {d}");
        }
        for (d, dev) in tl.summary.devices.iter().enumerate() {
            for (stream, busy) in [
                (Stream::Compute, dev.busy.compute),
                (Stream::TpComm, dev.busy.tp_comm),
                (Stream::DpComm, dev.busy.dp_comm),
                (Stream::P2p, dev.busy.p2p),
            ] {
                let sum = per_device(stream, &|ev| ev.dur)[d];
                assert!((sum - busy).abs() < 1e-12, "rank {d} {stream:?}");
            }
        }
    }
}

/// `cost` under DualPipe says that its stage table's rows are ranks of two stages, and that the
/// busiest device's FLOPs are a rank's.
#[test]
fn cost_says_its_rows_are_dualpipe_ranks() {
    let text = common::stdout(&[&COST_PP4[..], &["--schedule", "dualpipe"]].concat());
    assert!(
        text.contains("(busiest rank: its two stages, one device"),
        "{text}"
    );
    assert!(text.contains("dualpipe: row s is rank s"), "{text}");
    assert!(
        text.contains("collectives (busiest rank: its two stages, half the micro-batches"),
        "{text}"
    );
    let plain = common::stdout(&COST_PP4);
    assert!(plain.contains("(busiest stage, one device"), "{plain}");
    assert!(!plain.contains("dualpipe: row s"), "{plain}");
    assert!(plain.contains("collectives (busiest stage;"), "{plain}");
}

/// `timeline` under DualPipe says that each device it shows runs two stages.
#[test]
fn timeline_says_a_dualpipe_device_runs_two_stages() {
    let args = ["timeline", "gpt3-125m", "--pp", "4", "--microbatches", "8"];
    let text = common::stdout(&[&args[..], &["--schedule", "dualpipe"]].concat());
    assert!(
        text.contains("rank s runs stages s and pp − 1 − s"),
        "{text}"
    );
    let plain = common::stdout(&args);
    assert!(plain.contains("one device per pipeline stage:"), "{plain}");
}

/// `cost gpt3-125m --pp 4 --dp 2 --microbatches 8` under `schedule` and ZeRO `zero`, as JSON.
fn rank_cost(schedule: &str, zero: &str) -> serde_json::Value {
    let more = [
        "--dp",
        "2",
        "--schedule",
        schedule,
        "--zero",
        zero,
        "--format",
        "json",
    ];
    common::json(&[&COST_PP4[..], &more].concat())["per_device"].clone()
}

/// DualPipe keeps every stage on two ranks, so before the optimizer step a rank adds its
/// mirror's gradients to its own (deepseek-ai/DualPipe, `examples/example_dualpipe.py`:
/// `p0.grad += p1all[pp_size - 1 - rank]`). The rank sends the bf16 gradient of what it
/// updates: without ZeRO, all its weights, as many bytes as its bf16 weights; under ZeRO 1 its
/// half of them at dp = 2. Those bytes are part of its point-to-point traffic, whose
/// activation sends ZeRO does not change; 1F1B sends none of them.
#[test]
fn a_dualpipe_rank_sends_its_gradients_to_its_mirror() {
    let (zero0, zero1) = (rank_cost("dualpipe", "0"), rank_cost("dualpipe", "1"));
    let sum = |v: &serde_json::Value| exact(v, "grad_sum_bytes");
    let weights: Vec<Rational> = zero0["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| exact(&s["memory"], "params"))
        .collect();
    // Each row is a rank of two stages and holds both stages' weights: the busiest rank's.
    let w = weights
        .iter()
        .find(|w| **w == sum(&zero0))
        .unwrap_or_else(|| panic!("{} among {weights:?}", sum(&zero0)));
    assert_eq!(sum(&zero1), w / Rational::from_integer(2.into()));
    assert_eq!(
        exact(&zero0, "p2p_bytes") - sum(&zero0),
        exact(&zero1, "p2p_bytes") - sum(&zero1)
    );
    let one = rank_cost("1f1b", "0");
    assert!(one.get("grad_sum_bytes").is_none(), "{one}");
    let text = common::stdout(&[&COST_PP4[..], &["--schedule", "dualpipe"]].concat());
    assert!(text.contains("of which gradient sum"), "{text}");
}

/// In the timeline each rank sends its copies' gradients to its mirror once, after its last
/// gradient and before its optimizer step, on the pipeline's stream: here without ZeRO and
/// data parallelism, 2 bytes (bf16) for each of the weights of its two stages.
#[test]
fn the_timeline_sums_each_ranks_gradients_before_its_step() {
    let calib = Calibration::reference().unwrap();
    let rates = Rates::of(&calib);
    let (p, m, layers) = (4u64, 8u64, 8usize);
    let with_weights = |schedule: Schedule| {
        let mut plan = uniform(knobs(p, m, schedule), layers, (1000, 2000, 1000));
        plan.blocks[0].params = q(1_000_000);
        plan.blocks[0].ops[0].params = q(1_000_000);
        time_plan(&plan, &calib).unwrap().sim
    };
    let sim = with_weights(Schedule::DualPipe);
    let per_rank = 2.0 * (layers as f64 / p as f64) * 1e6 * 2.0;
    for d in 0..p as usize {
        let on = |what: What| -> Vec<&Event> {
            sim.events
                .iter()
                .filter(|e| e.device == d && e.what == what)
                .collect()
        };
        let sums = on(What::GradSum);
        assert_eq!(sums.len(), 1, "rank {d}");
        let g = sums[0];
        assert_eq!(g.stream, Stream::P2p);
        assert_eq!(g.bytes, per_rank, "rank {d}");
        let want = rates.p2p_seconds(per_rank, symshard::strategy::Tier::Intra);
        assert!((g.dur - want).abs() <= 1e-12 * want, "rank {d}");
        let last_grad = sim
            .events
            .iter()
            .filter(|e| e.device == d && e.stream == Stream::Compute)
            .filter(|e| !matches!(e.what, What::Optimizer))
            .map(|e| e.start + e.dur)
            .fold(0.0, f64::max);
        assert!(g.start >= last_grad - 1e-12, "rank {d}");
        let opt = on(What::Optimizer);
        assert!(opt[0].start >= g.start + g.dur - 1e-12, "rank {d}");
    }
    let one = with_weights(Schedule::OneFOneB);
    assert!(one.events.iter().all(|e| e.what != What::GradSum));
}

/// Under DualPipe `cost` lists the collectives of the busiest rank, both its stages: gpt3-125m
/// at pp = 4 puts four layers on each middle stage, so a middle rank runs eight layers for half
/// the micro-batches each. Its tensor-parallel calls per step are a middle stage's under 1F1B
/// (8 layers × 4 micro-batches = 4 × 8), and it reduces the gradients of twice the layers.
#[test]
fn dualpipe_lists_the_collectives_of_both_stages() {
    let calls = |schedule: &str| -> [u64; 2] {
        let more = [
            "--dp",
            "2",
            "--tp",
            "2",
            "--schedule",
            schedule,
            "--format",
            "json",
        ];
        let v = common::json(&[&COST_PP4[..], &more].concat());
        let mut n = [0, 0];
        for r in v["per_device"]["comm"].as_array().unwrap() {
            let i = match r["axis"].as_str().unwrap() {
                "tp" => 0,
                "dp" => 1,
                other => panic!("{other}"),
            };
            n[i] += r["count"].as_u64().unwrap();
        }
        n
    };
    let ([tp1, dp1], [tp2, dp2]) = (calls("1f1b"), calls("dualpipe"));
    assert!(tp1 > 0 && dp1 > 0);
    assert_eq!(tp2, tp1);
    assert_eq!(dp2, 2 * dp1);
}
