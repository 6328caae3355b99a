//! FP8 dispatch (DeepSeek-V3, arXiv:2412.19437, §3.3.2): the expert-parallel all-to-alls that
//! carry tokens toward the experts (the forward dispatch, the backward of combine) move each
//! element as 1 byte of E4M3 and an fp32 scale per 128 elements, 33/64 of the bf16 bytes; the
//! two that carry them back stay bf16. The collectives table, the relative cost and the
//! simulated wire agree, against hand counts; the refusals name the knob.

mod common;

use common::refused;
use symshard::calib::Calibration;
use symshard::parallel::Evaluation;
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Precision, Tier};
use symshard::sym::Rational;
use symshard::timeline::{time_plan, Stream};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// Mixtral 8x7B (Jiang et al. 2024): 32 MoE layers of hidden 4096, top-2 of 8 experts.
const LAYERS: i64 = 32;
const H: i64 = 4096;
const DP: u64 = 8;
const EP: u64 = 8;
/// Samples per step, sequence length.
const B: i64 = 8;
const S: i64 = 256;

fn knobs(fp8_dispatch: bool) -> Knobs {
    Knobs {
        precision: Precision::Fp8,
        ep: EP,
        fp8_dispatch,
        ..Knobs::data_parallel(DP)
    }
}

fn run(k: &Knobs) -> Evaluation {
    common::evaluate_on("mixtral-8x7b", &[("B", B), ("S", S)], k, "h100-sxm")
}

/// The all-to-all rows: (tensor, bytes per call, calls).
fn all_to_alls(e: &Evaluation) -> Vec<(String, Rational, u64)> {
    let mut rows: Vec<(String, Rational, u64)> = e
        .comm
        .iter()
        .filter(|r| r.axis == AxisKind::Ep && r.collective == CollectiveKind::AllToAll)
        .map(|r| (r.tensor.clone(), r.bytes.clone(), r.count))
        .collect();
    rows.sort();
    rows
}

/// The slots one device dispatches per layer and micro-batch, in bf16: its B/dp samples' S
/// tokens, each sent to its top-2 experts, H elements of 2 bytes; (ep − 1)/ep of them leave.
fn bf16_wire() -> Rational {
    let slots = q(B / DP as i64 * S * 2 * H * 2);
    slots * q(EP as i64 - 1) / q(EP as i64)
}

#[test]
fn the_rows_move_fp8_toward_the_experts_and_bf16_back() {
    let plain = all_to_alls(&run(&knobs(false)));
    assert_eq!(
        plain,
        vec![("expert slots".into(), bf16_wire(), LAYERS as u64 * 4)]
    );
    let fp8 = all_to_alls(&run(&knobs(true)));
    assert_eq!(
        fp8,
        vec![
            ("expert slots".into(), bf16_wire(), LAYERS as u64 * 2),
            (
                "expert slots (FP8)".into(),
                bf16_wire() * q(33) / q(64),
                LAYERS as u64 * 2
            ),
        ]
    );
}

/// At dp = ep = 8 on one node every collective is intra-node, and the relative cost's
/// intra-node part is κ_intra times the rows' bytes, with FP8 dispatch as without.
#[test]
fn the_relative_cost_counts_the_rows_bytes() {
    let kappa = Calibration::resolve("h100-sxm")
        .unwrap()
        .balance(Tier::Intra);
    for fp8_dispatch in [false, true] {
        let e = run(&knobs(fp8_dispatch));
        let bytes = e
            .comm
            .iter()
            .map(|r| &r.bytes * q(r.count as i64))
            .fold(q(0), |a, b| a + b);
        assert_eq!(
            e.relative.comm_intra,
            &kappa * &bytes,
            "fp8_dispatch {fp8_dispatch}"
        );
    }
}

/// The simulated expert-parallel stream carries the rows' bytes.
#[test]
fn the_simulated_all_to_alls_carry_the_rows_bytes() {
    for fp8_dispatch in [false, true] {
        let k = knobs(fp8_dispatch);
        let table: f64 = all_to_alls(&run(&k))
            .iter()
            .map(|(_, b, n)| symshard::parallel::amount::float(b) * *n as f64)
            .sum();
        let (plan, calib) = common::plan_on("mixtral-8x7b", &[("B", B), ("S", S)], &k, "h100-sxm");
        let t = time_plan(&plan, &calib).unwrap();
        let simulated: f64 = t
            .sim
            .events
            .iter()
            .filter(|e| e.device == 0 && e.stream == Stream::EpComm)
            .map(|e| e.bytes)
            .sum();
        assert!(
            (table - simulated).abs() <= 1e-9 * table,
            "fp8_dispatch {fp8_dispatch}: table {table}, simulated {simulated}"
        );
    }
}

#[test]
fn refusals_name_the_reason() {
    let cost = |strategy: &str| {
        refused(&[
            "cost",
            "mixtral-8x7b",
            "--set",
            "B=64",
            "--strategy",
            strategy,
            "--calib",
            "h100-sxm",
        ])
    };
    let e = cost("dp=8,ep=8,fp8-dispatch");
    assert!(e.contains("`fp8_dispatch` needs an FP8 recipe"), "{e}");
    assert!(e.contains("precision=bf16"), "{e}");
    let e = cost("dp=8,precision=fp8,fp8-dispatch");
    assert!(e.contains("needs expert parallelism, ep > 1"), "{e}");
    let e = refused(&[
        "cost",
        "mixtral-8x7b",
        "--set",
        "B=64",
        "--strategy",
        "dp=8,ep=8,precision=nvfp4,fp8-dispatch",
        "--calib",
        "b200",
    ]);
    assert!(e.contains("precision=nvfp4"), "{e}");
}

/// `rank --fix fp8-dispatch=on` dispatches in FP8 on every row with ep > 1, the row passes
/// back to `cost` as printed, and `--emit megatron` warns that the cited Megatron-LM dispatches
/// in bf16.
#[test]
fn rank_dispatches_in_fp8_where_rows_allow_it() {
    let back = common::expert_knob_passes_back(
        "mixtral-8x7b",
        64,
        "precision=fp8,fp8-dispatch=on",
        "fp8_dispatch",
        "fp8-dispatch",
    );
    assert!(
        back["per_device"]["comm"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["tensor"] == "expert slots (FP8)"),
        "{back}"
    );
    let text = common::emit_megatron("mixtral-8x7b", 64, "precision=fp8,fp8-dispatch=on,ep=8");
    assert!(text.contains("FP8 dispatch"), "{text}");
}
