//! Context parallelism (`--cp`): each rank holds S/cp tokens of every sequence, attention passes
//! keys and values around a ring, gradients reduce over dp × cp.
//!
//! The design checked is Megatron-Core's context parallelism (NVIDIA Megatron-Core developer
//! guide, "context_parallel",
//! https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/context_parallel.html):
//! the sequence is cut into 2·cp chunks, rank i holding chunks i and 2·cp − 1 − i (causal load
//! balancing); attention runs cp − 1 ring steps, each sending the rank's current key and value
//! blocks (S/cp tokens × key/value heads per tensor-parallel rank × head dimension) to the next
//! rank point to point, overlapped with the attention of the block in hand; the backward pass
//! circulates the keys and values again together with their partial gradients; every other
//! operator splits its token index; weights are replicated over cp, so gradients (and the
//! distributed optimizer's shards) span the dp × cp ranks.

use assert_cmd::Command;
use num_traits::ToPrimitive;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::{AttentionMode, Model, ModelLoader};
use symshard::parallel::kernels::KernelEfficiency;
use symshard::parallel::{analyse, evaluate_strategy, Evaluation, Layout};
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Recompute, Tier};
use symshard::sym::{Bindings, Rational};

fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn model(name: &str, b: i64, s: i64) -> (Model, Bindings) {
    model_with(name, b, s, None)
}

fn model_with(name: &str, b: i64, s: i64, attention: Option<&str>) -> (Model, Bindings) {
    let mode = attention.map(|a| AttentionMode::from_name(a).unwrap());
    let m = ModelLoader::embedded()
        .unwrap()
        .with_attention(mode)
        .resolve(name)
        .unwrap();
    let mut v = m.values.clone();
    v.insert("B".into(), q(b));
    v.insert("S".into(), q(s));
    (m, v)
}

fn knobs(dp: u64, tp: u64, cp: u64, microbatches: u64) -> Knobs {
    Knobs {
        dp,
        tp,
        cp,
        microbatches,
        ..Knobs::data_parallel(1)
    }
}

fn run(m: &Model, v: &Bindings, k: &Knobs) -> Evaluation {
    let calib = Calibration::reference().unwrap();
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    evaluate_strategy(
        m,
        v,
        k,
        &layout,
        MachineRef::new(&calib, 8, &q(1_000_000_000_000)),
    )
    .unwrap()
    .1
}

fn ring_rows(e: &Evaluation) -> Vec<(String, Rational, u64, Tier)> {
    e.comm
        .iter()
        .filter(|c| c.axis == AxisKind::Cp)
        .map(|c| {
            assert_eq!(c.collective, CollectiveKind::SendRecv);
            (c.op.clone(), c.bytes.clone(), c.count, c.tier)
        })
        .collect()
}

/// Llama 3 8B (Hugging Face config meta-llama/Meta-Llama-3-8B,
/// https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json: 32 layers, 8
/// key/value heads, head dimension 4096/32 = 128), fused attention, bf16. With S = 32768,
/// cp = 2, tp = 2 and one sample per micro-batch, one ring step sends K and V of
/// 1 · 16384 tokens · 4 heads · 128 · 2 bytes each; forward cp − 1 = 1 step, backward twice the
/// bytes: 3 sends of that size per layer and micro-batch.
#[test]
fn ring_bytes_of_fused_attention_are_the_hand_count() {
    let (m, v) = model("llama3-8b", 64, 32768);
    let k = knobs(2, 2, 2, 32);
    let e = run(&m, &v, &k);
    let kv = q(2 * 16384 * (8 / 2) * 128 * 2);
    assert_eq!(kv, q(33_554_432));
    let rows = ring_rows(&e);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (op, bytes, count, tier) = &rows[0];
    assert_eq!(op, "context");
    assert_eq!(*bytes, kv);
    // 32 layers × 32 micro-batches × 3 (cp − 1) sends.
    assert_eq!(*count, 32 * 32 * 3);
    // tp · cp = 4 devices of a node of 8: the ring stays inside it.
    assert_eq!(*tier, Tier::Intra);
    // The same through the command line's JSON.
    let out = symshard()
        .args([
            "cost",
            "llama3-8b",
            "--set",
            "B=64",
            "--set",
            "S=32768",
            "--dp",
            "2",
            "--tp",
            "2",
            "--cp",
            "2",
            "--micro-batch-size",
            "1",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ring: Vec<&serde_json::Value> = j["per_device"]["comm"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["axis"] == "cp")
        .collect();
    assert_eq!(ring.len(), 1);
    assert_eq!(ring[0]["collective"], "send-recv");
    assert_eq!(ring[0]["bytes"], "33554432");
    assert_eq!(ring[0]["count"], 3072);
    // The per-operator table lists the ring with its tier.
    let out = symshard()
        .args([
            "cost",
            "llama3-8b",
            "--set",
            "B=64",
            "--set",
            "S=32768",
            "--tp",
            "8",
            "--cp",
            "4",
            "--per-op",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("send-recv"))
        .unwrap_or_else(|| panic!("{text}"));
    // tp · cp = 32 > 8 per node: the ring crosses nodes.
    assert!(
        line.contains(" cp ") && line.contains("inter-node"),
        "{line}"
    );
}

/// GPT-3 125M (Brown et al. 2020, Table 2.1: 12 layers, d_model 768, 12 heads of 64) runs eager
/// attention: the keys circulate beside the score GEMM, the values beside the context GEMM,
/// each 1 · (2048/2) tokens · 12 heads · 64 · 2 bytes per step; the eager S×S scores become
/// (S/cp)×S per rank.
#[test]
fn ring_bytes_of_eager_attention_are_the_hand_count() {
    let (m, v) = model("gpt3-125m", 8, 2048);
    let e = run(&m, &v, &knobs(1, 1, 2, 8));
    let mut rows = ring_rows(&e);
    rows.sort();
    let one = q(1024 * 12 * 64 * 2);
    assert_eq!(
        rows,
        vec![
            ("context".to_string(), one.clone(), 12 * 8 * 3, Tier::Intra),
            ("scores".to_string(), one, 12 * 8 * 3, Tier::Intra),
        ]
    );
    // Selective recomputation reruns the eager core, ring included: 4 sends.
    let mut k = knobs(1, 1, 2, 8);
    k.recompute = Recompute::Selective;
    let e = run(&m, &v, &k);
    assert!(ring_rows(&e).iter().all(|r| r.2 == 12 * 8 * 4));
}

/// Every token-indexed operator splits over cp and attention's work is cut evenly by the load
/// balancing: per-device FLOPs and saved activations are exactly 1/cp of cp = 1's, eager and
/// fused; weights, gradients and optimizer state are replicated.
#[test]
fn work_and_activations_divide_by_cp() {
    for (name, s) in [("llama3-8b", 16384), ("gpt3-125m", 2048)] {
        let (m, v) = model(name, 16, s);
        for cp in [2u64, 4] {
            let one = run(&m, &v, &knobs(2, 2, 1, 8));
            let many = run(&m, &v, &knobs(2, 2, cp, 8));
            let c = q(cp as i64);
            assert_eq!(
                &many.memory.activations * &c,
                one.memory.activations,
                "{name}"
            );
            assert_eq!(&many.flops * &c, one.flops, "{name}");
            assert_eq!(many.memory.params, one.memory.params);
            assert_eq!(many.memory.optimizer, one.memory.optimizer);
            // Whole-model FLOPs do not change.
            assert_eq!(many.model_flops, one.model_flops, "{name}");
        }
    }
}

/// Weights are replicated over dp × cp ranks: a weight gradient is all-reduced over dp · cp
/// ranks, 2(n − 1)/n of its bytes per rank (nccl-tests doc/PERFORMANCE.md); ZeRO-1 shards the
/// optimizer state over the same n ranks (Rajbhandari et al. 2020: 12 bytes per parameter).
#[test]
fn gradients_and_optimizer_state_span_dp_times_cp() {
    let (m, v) = model("llama3-8b", 64, 32768);
    let mut k = knobs(2, 2, 2, 32);
    let e = run(&m, &v, &k);
    // q_proj: 4096 × 4096 weights, half per tensor-parallel rank, bf16 gradients, n = 4.
    let grad = q(4096 * 4096 / 2 * 2);
    let row = e
        .comm
        .iter()
        .find(|c| c.op == "q_proj" && c.axis == AxisKind::Dp)
        .unwrap();
    assert_eq!(row.collective, CollectiveKind::AllReduce);
    assert_eq!(row.bytes, q(2) * q(3) / q(4) * &grad);
    k.zero = 1;
    let z = run(&m, &v, &k);
    let params = &e.memory.params / q(2); // bf16 weights → elements
    assert_eq!(z.memory.optimizer, q(12) * &params / q(4));
    // ZeRO needs only dp × cp > 1.
    let mut solo = knobs(1, 1, 4, 64);
    solo.zero = 1;
    let s = run(&m, &v, &solo);
    assert_eq!(s.memory.optimizer, q(12) * (&s.memory.params / q(2)) / q(4));
}

/// cp = 1 is the strategy without context parallelism, exactly: the context-parallel analysis
/// at p_cp = 1 prices every strategy as the plain one, and the command line prints the same.
#[test]
fn cp_one_is_unchanged() {
    use symshard::parallel::evaluate::{block_numbers, evaluate_with, microbatch_bindings};
    let calib = Calibration::reference().unwrap();
    let (m, v) = model("llama3-8b", 64, 8192);
    for sp in [false, true] {
        let mut k = knobs(4, 2, 1, 8);
        k.sequence_parallel = sp;
        k.zero = 1;
        k.recompute = Recompute::Selective;
        let layout = Layout {
            sequence_parallel: sp,
            ..Layout::default()
        };
        let plain = analyse(&m, &layout);
        let cp = plain.context_parallel();
        let b = microbatch_bindings(&m, &v, &k);
        let kernels = KernelEfficiency::of(&calib);
        let n1 = block_numbers(&plain, &b, &kernels).unwrap();
        let n2 = block_numbers(&cp, &b, &kernels).unwrap();
        let mem = q(80_000_000_000);
        let on = MachineRef::new(&calib, 8, &mem);
        let e1 = evaluate_with(&m, &plain, &n1, &k, on, true).unwrap();
        let e2 = evaluate_with(&m, &cp, &n2, &k, on, true).unwrap();
        assert_eq!(e1, e2);
    }
    let args = [
        "cost",
        "llama3-8b",
        "--dp",
        "4",
        "--tp",
        "2",
        "--micro-batch-size",
        "1",
        "--zero",
        "1",
        "--per-op",
        "--format",
        "json",
    ];
    let a = symshard().args(args).output().unwrap();
    let b = symshard().args(args).args(["--cp", "1"]).output().unwrap();
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
}

/// The screen `rank` orders strategies with agrees with the exact price under context
/// parallelism too (relative cost, memory, FLOP part).
#[test]
fn estimates_agree_with_exact_prices_under_cp() {
    use symshard::parallel::evaluate::{
        block_numbers, estimate, evaluate_with, microbatch_bindings,
    };
    use symshard::strategy::Schedule;
    let calib = Calibration::reference().unwrap();
    let kappa = |t: Tier| calib.balance(t).to_f64().unwrap();
    let kappa_hbm = calib.hbm_balance().to_f64().unwrap();
    let overlap = calib.overlap_saving().to_f64().unwrap();
    let mem = q(80_000_000_000);
    let on = MachineRef::new(&calib, 8, &mem);
    let mut checked = 0;
    for (name, s) in [("llama3-8b", 16384), ("gpt3-125m", 4096)] {
        let (m, v) = model(name, 16, s);
        for (dp, tp, pp, cp, mb) in [
            (2u64, 2u64, 1u64, 2u64, 8u64),
            (1, 4, 2, 4, 4),
            (2, 1, 4, 8, 8),
        ] {
            for sp in [false, true] {
                if sp && tp == 1 {
                    continue;
                }
                for (schedule, chunks, zero, recompute) in [
                    (Schedule::OneFOneB, 1, 0, Recompute::None),
                    (Schedule::Gpipe, 1, 3, Recompute::Full),
                    (Schedule::Interleaved, 2, 1, Recompute::Selective),
                    (Schedule::ZeroBubbleH1, 1, 2, Recompute::None),
                ] {
                    if pp == 1 && schedule != Schedule::OneFOneB {
                        continue;
                    }
                    let k = Knobs {
                        dp,
                        tp,
                        pp,
                        cp,
                        microbatches: mb,
                        schedule,
                        chunks,
                        sequence_parallel: sp,
                        recompute,
                        zero,
                        ..Knobs::data_parallel(1)
                    };
                    let layout = Layout {
                        sequence_parallel: sp,
                        ..Layout::default()
                    };
                    let a = analyse(&m, &layout).context_parallel();
                    let b = microbatch_bindings(&m, &v, &k);
                    let n = block_numbers(&a, &b, &KernelEfficiency::of(&calib)).unwrap();
                    // Interleaving needs the layers divisible by pp × chunks.
                    let Ok(est) = estimate(&m, &n, &k, &kappa, kappa_hbm, overlap, 8) else {
                        continue;
                    };
                    checked += 1;
                    let ex = evaluate_with(&m, &a, &n, &k, on, false).unwrap();
                    let total = ex.relative.total.to_f64().unwrap();
                    assert!((est.total - total).abs() <= 1e-9 * total, "{name} {k}");
                    let memory = ex.memory.total.to_f64().unwrap();
                    assert!((est.memory - memory).abs() <= 1e-9 * memory, "{name} {k}");
                    let fp = ex.relative.flop_part.to_f64().unwrap();
                    assert!((est.flop_part - fp).abs() <= 1e-9 * fp, "{name} {k}");
                }
            }
        }
    }
    assert!(checked >= 20, "{checked}");
}

/// A timeline with context parallelism runs, puts the ring on its own stream, sends exactly the
/// evaluation's ring bytes, and is no faster than its busiest stream; the ring hides behind the
/// attention blocks it runs beside, so the step is far shorter than compute plus ring.
#[test]
fn timeline_runs_the_ring_beside_attention() {
    use symshard::timeline::{plan_strategy, time_plan, Stream};
    for (name, s, attention) in [
        ("llama3-8b", 32768, None),
        ("llama3-8b", 16384, Some("eager")),
        ("gpt3-125m", 4096, None),
    ] {
        let (m, v) = model_with(name, 16, s, attention);
        let calib = Calibration::resolve("h100-sxm").unwrap();
        for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
            let mut k = knobs(2, 1, 4, 8);
            k.recompute = recompute;
            k.zero = 1;
            let (plan, e) = plan_strategy(
                &m,
                &v,
                &k,
                &Layout::default(),
                MachineRef::of(&calib, &calib.memory_bytes()),
            )
            .unwrap();
            // The saved analysis (`analyze -o`) keeps the ring bytes.
            let back: symshard::timeline::TimingPlan =
                serde_json::from_str(&plan.to_json()).unwrap();
            assert_eq!(back, plan);
            let t = time_plan(&plan, &calib).unwrap();
            let sim = &t.sim;
            let ring: Vec<_> = sim
                .events
                .iter()
                .filter(|x| x.stream == Stream::CpComm)
                .collect();
            assert!(!ring.is_empty());
            // One device per pipeline stage (pp = 1): its ring bytes are the evaluation's.
            let sent: f64 = ring.iter().map(|x| x.bytes).sum();
            let want: f64 = e
                .comm
                .iter()
                .filter(|c| c.axis == AxisKind::Cp)
                .map(|c| c.bytes.to_f64().unwrap() * c.count as f64)
                .sum();
            assert!(
                (sent - want).abs() <= 1e-9 * want,
                "{name} {k}: {sent} vs {want}"
            );
            for b in &sim.busy {
                let busiest = b.iter().cloned().fold(0.0, f64::max);
                assert!(sim.iteration >= busiest * (1.0 - 1e-12), "{name} {k}");
                assert!(b[Stream::CpComm] > 0.0);
            }
            let b = &sim.busy[0];
            assert!(
                sim.iteration < b[Stream::Compute] + b[Stream::CpComm],
                "{name} {k}: the ring is not hidden"
            );
            assert!(t.summary.devices[0].busy.cp_comm > 0.0);
        }
    }
}

/// Llama 3's long-context stage trained at 131,072 tokens with context parallelism 16
/// (Grattafiori et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.2 and
/// Table 4): at that length `rank` chooses cp > 1, by relative cost and by simulated seconds.
#[test]
fn rank_picks_context_parallelism_at_131k_tokens() {
    for calib in [None, Some("h100-sxm")] {
        let mut cmd = symshard();
        cmd.args([
            "rank",
            "llama3-70b",
            "--devices",
            "128",
            "--set",
            "S=131072",
            "--set",
            "B=16",
            "--top",
            "1",
            "--format",
            "json",
        ]);
        if let Some(c) = calib {
            cmd.args(["--calib", c]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let top = &j["strategies"][0];
        assert_eq!(top["feasible"], true);
        assert!(top["cp"].as_u64().unwrap() > 1, "{calib:?}: {top}");
        assert!(top["strategy"].as_str().unwrap().contains(" cp="), "{top}");
    }
}

/// `report` carries the top row's context parallelism into the cost and timeline it shows.
#[test]
fn report_keeps_the_top_rows_cp() {
    let path = std::env::temp_dir().join(format!("symshard-cp-{}.html", std::process::id()));
    let out = symshard()
        .args([
            "report",
            "llama3-70b",
            "--devices",
            "128",
            "--set",
            "S=131072",
            "--set",
            "B=16",
            "-o",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let html = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::remove_file(&path).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let title = html.split("Timeline of #1: ").nth(1).unwrap_or("");
    let title = title.split('<').next().unwrap_or("");
    assert!(title.contains(" cp="), "{title}");
}

/// Unasked, `rank` tries cp only where each rank keeps at least 4,096 tokens: cp ≤ 2 at the
/// usual 8,192 (NVIDIA's Llama 3.1 recipes, NVIDIA/dgxc-benchmarking llama3.1/README_*.md, run
/// cp = 2 there), cp = 1 at 4,096. `--fix cp=` and `--max cp=` steer it, and the emitted launch
/// flags carry it.
#[test]
fn rank_steers_and_emits_cp() {
    let rows = |extra: &[&str]| -> Vec<serde_json::Value> {
        let out = symshard()
            .args([
                "rank",
                "llama3-8b",
                "--devices",
                "16",
                "--top",
                "5",
                "--format",
                "json",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        j["strategies"].as_array().unwrap().clone()
    };
    assert!(rows(&["--set", "S=4096"]).iter().all(|r| r["cp"] == 1));
    let unasked = rows(&[]);
    assert!(unasked.iter().all(|r| r["cp"].as_u64().unwrap() <= 2));
    assert!(
        unasked.iter().any(|r| r["cp"] == 2),
        "cp = 2 at 8,192 tokens"
    );
    let fixed = rows(&["--fix", "cp=2"]);
    assert!(!fixed.is_empty() && fixed.iter().all(|r| r["cp"] == 2));
    let capped = rows(&["--set", "S=65536", "--set", "B=16", "--max", "cp=2"]);
    assert!(capped.iter().all(|r| r["cp"].as_u64().unwrap() <= 2));
    let out = symshard()
        .args([
            "rank",
            "llama3-8b",
            "--devices",
            "16",
            "--fix",
            "cp=2,zero=2",
            "--top",
            "1",
            "--emit",
            "megatron",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("--context-parallel-size 2"), "{text}");
    assert!(text.contains("--cp-comm-type p2p"), "{text}");
    let out = symshard()
        .args([
            "rank",
            "llama3-8b",
            "--devices",
            "16",
            "--fix",
            "cp=2,zero=3",
            "--top",
            "1",
            "--emit",
            "torchtitan",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("context_parallel_degree = 2"), "{text}");
}

/// Strategy files take `cp:`.
#[test]
fn strategy_files_take_cp() {
    let path = std::env::temp_dir().join(format!("symshard-cp-{}.yaml", std::process::id()));
    std::fs::write(&path, "dp: 2\ntp: 2\ncp: 2\nmicrobatches: 32\n").unwrap();
    let out = symshard()
        .args([
            "cost",
            "llama3-8b",
            "--set",
            "S=32768",
            "--set",
            "B=64",
            "--strategy",
        ])
        .arg(&path)
        .args(["--format", "json"])
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["per_device"]["strategy"]
        .as_str()
        .unwrap()
        .ends_with("cp=2"));
}

fn refused(args: &[&str], message: &str) {
    let out = symshard().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(message), "{args:?}: {err}");
}

/// Bad context-parallel requests are refused with the reason, never a panic.
#[test]
fn bad_cp_is_refused() {
    // 2·cp must divide S for the load-balanced chunks.
    refused(
        &["cost", "llama3-8b", "--cp", "3"],
        "2·cp = 6 does not divide the sequence length S = 8192",
    );
    refused(
        &["timeline", "llama3-8b", "--cp", "3", "--calib", "h100-sxm"],
        "does not divide the sequence length S",
    );
    refused(
        &["cost", "llama3-8b", "--cp", "0"],
        "`cp` must be at least 1",
    );
    // A model without a sequence.
    // ResNet's `S` is an image side: its family declares no sequence role.
    refused(
        &["cost", "resnet50", "--cp", "2"],
        "has no sequence to split (no symbol has the `sequence` role)",
    );
    refused(
        &["cost", "vit-b16", "--cp", "2"],
        "has no sequence to split (no symbol has the `sequence` role)",
    );
    refused(&["cost", "alexnet", "--cp", "2"], "cp = 2: model `alexnet`");
    // cp must divide the devices `rank` searches.
    refused(
        &["rank", "llama3-8b", "--devices", "16", "--fix", "cp=3"],
        "3 does not divide the 16 devices",
    );
    refused(
        &["rank", "llama3-8b", "--devices", "24", "--fix", "cp=3"],
        "cp = 3: 2·cp = 6 does not divide the sequence length S = 8192",
    );
    refused(
        &[
            "cost",
            "mixtral-8x7b",
            "--dp",
            "2",
            "--ep",
            "8",
            "--cp",
            "2",
        ],
        "`ep` = 8 must divide dp × cp = 2 × 2",
    );
}
