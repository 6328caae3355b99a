//! Context parallelism together with expert parallelism, as Megatron-Core lays them out.
//!
//! `initialize_model_parallel` in megatron/core/parallel_state.py (NVIDIA/Megatron-LM at commit
//! 00caa53af30912914981c86f39db123961678bbd) numbers the dense layers' ranks tp-cp-dp-pp and the
//! expert layers' ranks tp-ep-edp-pp over the same devices (its expert `RankGenerator` has
//! cp = 1 and expert-dp = world ÷ (tp · ep · pp)): an expert-parallel group is ep consecutive
//! ranks at the tensor-parallel stride drawn from the cp × dp ranks, and the expert gradients are
//! reduced over the dp·cp/ep ranks holding the same experts. Each rank routes its own S/cp tokens.
//!
//! Mixtral 8x7B's sizes (Jiang et al. 2024, "Mixtral of Experts", arXiv:2401.04088, Table 1:
//! dim 4096, hidden_dim 14336, 32 layers, 8 experts, top-2) are read from the shipped model's
//! symbols; weights, gradients and messages are bf16 (2 bytes), the optimizer 12 bytes per
//! parameter.

use assert_cmd::Command;
use serde_json::Value;
use symshard::sym::Rational;

fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn json(args: &[&str]) -> Value {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rat(v: &Value) -> Rational {
    v.as_str().unwrap().parse().unwrap()
}

/// A strategy of mixtral-8x7b as `cost --format json` prices it.
struct Cost {
    /// The model's symbols.
    sym: Value,
    /// Parameters of the whole model.
    params: Rational,
    /// Per device.
    dev: Value,
}

impl Cost {
    fn of(b: u64, dp: u64, tp: u64, cp: u64, ep: u64, zero: u8) -> Cost {
        let (b, dp, tp, cp, ep, zero) = (
            format!("B={b}"),
            dp.to_string(),
            tp.to_string(),
            cp.to_string(),
            ep.to_string(),
            zero.to_string(),
        );
        let mut args = vec![
            "cost",
            "mixtral-8x7b",
            "--set",
            &b,
            "--dp",
            &dp,
            "--cp",
            &cp,
            "--ep",
            &ep,
            "--zero",
            &zero,
            "--format",
            "json",
        ];
        if tp != "1" {
            args.extend(["--tp", &tp]);
        }
        let j = json(&args);
        Cost {
            sym: j["symbols"].clone(),
            params: rat(&j["params"]),
            dev: j["per_device"].clone(),
        }
    }

    fn s(&self, name: &str) -> Rational {
        rat(&self.sym[name])
    }

    /// The rows of an operator: (collective, tier, bytes per call, calls).
    fn rows(&self, op: &str) -> Vec<(String, String, Rational, u64)> {
        self.dev["comm"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["op"] == op)
            .map(|c| {
                (
                    c["collective"].as_str().unwrap().to_string(),
                    c["tier"].as_str().unwrap().to_string(),
                    rat(&c["bytes"]),
                    c["count"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// The expert all-to-all: (tier, bytes per call, calls); none without expert parallelism.
    fn all_to_all(&self) -> Option<(String, Rational, u64)> {
        let rows = self.rows("layer experts");
        assert!(rows.len() <= 1);
        rows.into_iter().next().map(|(kind, tier, bytes, count)| {
            assert_eq!(kind, "all-to-all");
            (tier, bytes, count)
        })
    }

    /// The reduce-scatter (ZeRO 1) of one expert weight's gradient, bytes per call.
    fn expert_grad(&self) -> Rational {
        let rows = self.rows("expert_w1");
        let rs: Vec<_> = rows.iter().filter(|r| r.0 == "reduce-scatter").collect();
        assert_eq!(rs.len(), 1, "{rows:?}");
        rs[0].2.clone()
    }

    fn memory(&self, what: &str) -> Rational {
        rat(&self.dev["memory"][what])
    }

    /// Expert parameter elements of the whole model: w1, w3 (E × H × F) and w2 (E × F × H) in
    /// each of L layers.
    fn expert_params(&self) -> Rational {
        self.s("L") * q(3) * self.s("E") * self.s("H") * self.s("F")
    }

    /// The all-to-all bytes a rank sends per call, derived independently: the rank's tokens
    /// (B/dp sequences of a micro-batch, S/cp tokens of each) routed to K experts at capacity C,
    /// rows of H bf16 elements, of which (ep − 1)/ep leave the rank.
    fn expected_all_to_all(&self, dp: i64, cp: i64, ep: i64) -> Rational {
        let tokens = self.s("B") / q(dp) * self.s("S") / q(cp);
        let slots = tokens * self.s("K") * self.s("C") * self.s("H") * q(2);
        q(ep - 1) / q(ep) * slots
    }

    /// The reduce-scatter of one expert weight's gradient (E·H·F bf16 elements over all
    /// experts): a rank holds E/ep experts' share, S/ep bytes, and the R = dp·cp/ep ranks
    /// holding the same experts each send (1 − 1/R) of it: (1 − ep/(dp·cp))·S/ep.
    fn expected_expert_grad(&self, dp: i64, cp: i64, ep: i64) -> Rational {
        let s = self.s("E") * self.s("H") * self.s("F") * q(2);
        (q(1) - q(ep) / q(dp * cp)) * s / q(ep)
    }
}

/// At cp = 1 every number of a MoE strategy is what it was: the all-to-all and the expert
/// gradients match the formulas, the memory the independent count, and all of them the values
/// the previous release printed (`symshard cost mixtral-8x7b --set B=… --dp … --tp … --ep …
/// --zero 1 --format json` before context parallelism was allowed with expert parallelism).
#[test]
fn cp_one_is_unchanged() {
    // (B, dp, tp, ep, all-to-all tier, params bytes, optimizer bytes, total bytes) of the
    // previous release, less what it counted twice: the attention's output, which the fused
    // kernel keeps for its backward and the output projection keeps as its input (one tensor
    // to autograd), and the gate's routing, kept by the gate and by dispatch (256 MiB and
    // 512 KiB per layer and device at tp = 1).
    type Case = (u64, u64, u64, u64, &'static str, i64, i64, i64);
    let cases: [Case; 6] = [
        (8, 8, 1, 1, "", 93405585408, 70054189056, 590371903488),
        (8, 8, 1, 2, "intra", 48308428800, 70054189056, 500177590272),
        (8, 8, 1, 4, "intra", 25759850496, 70054189056, 455080433664),
        (8, 8, 1, 8, "intra", 14485561344, 70054189056, 432531855360),
        (
            16,
            16,
            1,
            8,
            "intra",
            14485561344,
            35027094528,
            397504760832,
        ),
        (8, 8, 2, 8, "inter", 7244095488, 35028080640, 250910627840),
    ];
    for (b, dp, tp, ep, tier, params, optimizer, total) in cases {
        let c = Cost::of(b, dp, tp, 1, ep, 1);
        let case = format!("B={b} dp={dp} tp={tp} ep={ep}");
        let (dpi, epi) = (dp as i64, ep as i64);
        match c.all_to_all() {
            None => assert_eq!(ep, 1, "{case}"),
            Some((t, bytes, count)) => {
                assert_eq!(t, tier, "{case}");
                // Tensor parallelism leaves the slots whole on each tp rank.
                assert_eq!(bytes, c.expected_all_to_all(dpi, 1, epi), "{case}");
                assert_eq!(q(count as i64), q(4) * c.s("L"), "{case}");
            }
        }
        assert_eq!(
            c.expert_grad(),
            c.expected_expert_grad(dpi, 1, epi) / q(tp as i64),
            "{case}"
        );
        // Weights (bf16) on a device: the dense ones over tp, 1/ep of the experts over tp.
        let experts = c.expert_params();
        let dense = &c.params - &experts;
        if tp == 1 {
            assert_eq!(
                c.memory("params"),
                (&dense + &experts / q(epi)) * q(2),
                "{case}"
            );
            // ZeRO 1: the optimizer's 12 bytes per parameter over the dp ranks for dense
            // weights, over the dp/ep ranks holding the same experts for the 1/ep held.
            assert_eq!(
                c.memory("optimizer"),
                (&dense / q(dpi) + &experts / q(epi) / q(dpi / epi)) * q(12),
                "{case}"
            );
        }
        assert_eq!(c.memory("params"), q(params), "{case}");
        assert_eq!(c.memory("grads"), q(params), "{case}");
        assert_eq!(c.memory("optimizer"), q(optimizer), "{case}");
        assert_eq!(c.memory("total"), q(total), "{case}");
    }
}

/// At cp > 1 each rank routes its own S/cp tokens over the expert-parallel group, expert
/// gradients and ZeRO state span the dp·cp/ep ranks holding the same experts.
///
/// The invariants: a rank's tokens per micro-batch are B/(dp·m) sequences × S/cp tokens, so
/// (1) at the same dp (and B, ep) cp = 2 halves the all-to-all bytes per rank, with the same
/// number of calls; (2) at the same dp·cp product, (dp, cp) = (4, 2) and (8, 1) give each rank
/// the same B/dp · S/cp tokens, so the all-to-all bytes are equal, and so are the expert
/// gradients (the same 8 ranks hold the same weights) and the memory of the weights.
#[test]
fn cp_divides_the_tokens_each_rank_routes() {
    for ep in [2, 4, 8] {
        let base = Cost::of(8, 8, 1, 1, ep, 1);
        let cp2 = Cost::of(8, 8, 1, 2, ep, 1);
        let (a, b) = (base.all_to_all().unwrap(), cp2.all_to_all().unwrap());
        assert_eq!(b.1, &a.1 / q(2), "ep={ep}");
        assert_eq!(b.1, cp2.expected_all_to_all(8, 2, ep as i64), "ep={ep}");
        assert_eq!(b.2, a.2, "ep={ep}");
        let same = Cost::of(8, 4, 1, 2, ep, 1);
        let c = same.all_to_all().unwrap();
        assert_eq!(c.1, a.1, "ep={ep}");
        assert_eq!(same.expert_grad(), base.expert_grad(), "ep={ep}");
        for m in ["params", "grads", "optimizer"] {
            assert_eq!(same.memory(m), base.memory(m), "ep={ep} {m}");
        }
    }
}

/// Expert gradients at dp = 8, cp = 2 reduce over dp·cp/ep ranks, not dp/ep: 16/4 = 4 ranks
/// at ep = 4 (3/4 of a rank's share sent, where dp/ep = 2 ranks would send 1/2); dense ones
/// over all 16. ZeRO shards the expert state over the same dp·cp/ep ranks.
#[test]
fn expert_gradients_and_state_span_dp_cp_over_ep() {
    for (dp, cp, ep) in [(8, 2, 4), (8, 2, 8), (2, 4, 8), (4, 2, 2), (1, 8, 4)] {
        let case = format!("dp={dp} cp={cp} ep={ep}");
        let c = Cost::of(8, dp, 1, cp, ep, 1);
        let (dpi, cpi, epi) = (dp as i64, cp as i64, ep as i64);
        assert_eq!(
            c.expert_grad(),
            c.expected_expert_grad(dpi, cpi, epi),
            "{case}"
        );
        // A dense weight, q_proj (H × H, bf16): (1 − 1/(dp·cp)) of it per rank.
        let qp = c.rows("q_proj");
        let rs: Vec<_> = qp.iter().filter(|r| r.0 == "reduce-scatter").collect();
        let h = c.s("H");
        assert_eq!(
            rs[0].2,
            (q(1) - q(1) / q(dpi * cpi)) * &h * &h * q(2),
            "{case}"
        );
        let experts = c.expert_params();
        let dense = &c.params - &experts;
        let r = q(dpi * cpi);
        assert_eq!(
            c.memory("params"),
            (&dense + &experts / q(epi)) * q(2),
            "{case}"
        );
        assert_eq!(
            c.memory("optimizer"),
            (&dense / &r + &experts / q(epi) / (&r / q(epi))) * q(12),
            "{case}"
        );
        // ZeRO 3 shards the weights themselves the same way.
        let z3 = Cost::of(8, dp, 1, cp, ep, 3);
        assert_eq!(
            z3.memory("params"),
            (&dense / &r + &experts / q(epi) / (&r / q(epi))) * q(2),
            "{case}"
        );
        assert_eq!(
            c.all_to_all().unwrap().1,
            c.expected_all_to_all(dpi, cpi, epi),
            "{case}"
        );
    }
}

/// The expert-parallel group is ep consecutive ranks at the tensor-parallel stride, drawn from
/// the cp × dp ranks context-parallel ones first (Megatron-Core's order): at tp = 1, dp = 2,
/// cp = 4, ep = 8 it is one node of 8 (taking dp ranks first, at stride cp, it would span 32
/// devices); at tp = 2 it spans 16, two nodes; tp = 2, ep = 4 stays in a node.
#[test]
fn expert_groups_follow_megatron_core_rank_order() {
    for (dp, tp, cp, ep, tier) in [
        (2, 1, 4, 8, "intra"),
        (4, 2, 2, 8, "inter"),
        (4, 2, 2, 4, "intra"),
        (8, 1, 2, 8, "intra"),
    ] {
        let c = Cost::of(8, dp, tp, cp, ep, 1);
        assert_eq!(
            c.all_to_all().unwrap().0,
            tier,
            "dp={dp} tp={tp} cp={cp} ep={ep}"
        );
    }
}

/// ep must divide dp × cp, and the error says so.
#[test]
fn ep_not_dividing_dp_cp_is_refused() {
    let out = symshard()
        .args([
            "cost",
            "mixtral-8x7b",
            "--dp",
            "2",
            "--cp",
            "2",
            "--ep",
            "8",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`ep` = 8 must divide dp × cp = 2 × 2"),
        "{err}"
    );
    // ep = 4 divides dp × cp = 4 though not dp = 2: accepted.
    let c = Cost::of(8, 2, 1, 2, 4, 1);
    assert!(c.all_to_all().is_some());
}

/// The timeline runs the expert all-to-alls on `ep_comm` and the attention ring on `cp_comm`;
/// no stream is busier than the iteration, and halving each rank's tokens (cp = 2) shortens the
/// all-to-alls.
#[test]
fn timeline_runs_all_to_all_and_ring() {
    let run = |cp: &str| {
        json(&[
            "timeline",
            "mixtral-8x7b",
            "--calib",
            "h100-sxm",
            "--dp",
            "8",
            "--ep",
            "8",
            "--cp",
            cp,
            "--zero",
            "1",
            "--format",
            "json",
        ])
    };
    let t = run("2");
    let iteration = t["iteration_seconds"].as_f64().unwrap();
    let busy = &t["devices"][0]["busy"];
    let ep = busy["ep_comm"].as_f64().unwrap();
    assert!(ep > 0.0, "{busy}");
    assert!(busy["cp_comm"].as_f64().unwrap() > 0.0, "{busy}");
    for d in t["devices"].as_array().unwrap() {
        for (s, v) in d["busy"].as_object().unwrap() {
            assert!(v.as_f64().unwrap() <= iteration * (1.0 + 1e-12), "{s}");
        }
    }
    let one = run("1");
    let ep1 = one["devices"][0]["busy"]["ep_comm"].as_f64().unwrap();
    // No ring at cp = 1 (the stream is left out of the summary or idle).
    assert_eq!(
        one["devices"][0]["busy"]["cp_comm"].as_f64().unwrap_or(0.0),
        0.0
    );
    assert!(ep < ep1, "cp = 2: {ep} s, cp = 1: {ep1} s");
}

/// `rank` prices strategies with both: at 131,072 tokens on 256 devices, fixing ep = 8 and
/// cp = 4 returns feasible rows, and unsteered the list holds some with ep > 1 and cp > 1.
#[test]
fn rank_prices_expert_and_context_parallelism_together() {
    let base = [
        "rank",
        "mixtral-8x7b",
        "--devices",
        "256",
        "--set",
        "S=131072",
        "--format",
        "json",
    ];
    let mut fixed = base.to_vec();
    fixed.extend(["--fix", "ep=8,cp=4", "--top", "5"]);
    let j = json(&fixed);
    let rows = j["strategies"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!((r["ep"].as_u64(), r["cp"].as_u64()), (Some(8), Some(4)));
    }
    assert_eq!(rows[0]["feasible"], true);
    let mut free = base.to_vec();
    free.extend(["--top", "20"]);
    let j = json(&free);
    let rows = j["strategies"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["ep"].as_u64().unwrap() > 1 && r["cp"].as_u64().unwrap() > 1),
        "{j}"
    );
}
