//! Under expert parallelism the distributed optimizer shards each expert's state among the ranks
//! that hold that expert (Megatron-Core's expert-data-parallel group, dp·cp/ep ranks;
//! megatron/core/parallel_state.py), not among all dp·cp replicas: the optimizer step of a
//! device reads and writes `1/replicas` of its dense parameters and `ep/replicas` of its E/ep
//! experts'. Hand counts from Mixtral 8x7B's configuration (Jiang et al. 2024, arXiv:2401.04088,
//! Table 1: 32 layers, dim 4096, hidden_dim 14336, 8 experts; Hugging Face
//! mistralai/Mixtral-8x7B-v0.1 config.json): three 4096 × 14336 matrices per expert.

mod common;

use symshard::parallel::amount::{optimizer_traffic, HeldParams};
use symshard::strategy::{Knobs, Precision};
use symshard::timeline::block_held;

const LAYERS: f64 = 32.0;
/// The expert weights of the whole model (all 8 experts of all layers).
const EXPERT_WEIGHTS: f64 = LAYERS * 8.0 * 3.0 * 4096.0 * 14336.0;

fn knobs(ep: u64, zero: u8) -> Knobs {
    Knobs {
        ep,
        zero,
        precision: Precision::Bf16,
        ..Knobs::data_parallel(8)
    }
}

/// What a device of the plan of `k` holds (one pipeline stage: every block).
fn held(k: &Knobs) -> HeldParams<f64> {
    let (plan, _) = common::plan_on("mixtral-8x7b", &[("B", 8), ("S", 256)], k, "h100-sxm");
    plan.items.iter().fold(HeldParams::default(), |sum, &b| {
        sum + block_held(&plan.blocks[b])
    })
}

/// The plan's expert parameters are the device's E/ep experts', told apart from the dense ones
/// by their rule's declared role.
#[test]
fn a_device_holds_its_own_experts() {
    for ep in [1u64, 2, 4, 8] {
        let h = held(&knobs(ep, 1));
        let want = EXPERT_WEIGHTS / ep as f64;
        assert!(
            (h.experts - want).abs() < 1e-6 * want,
            "ep {ep}: {}",
            h.experts
        );
        assert!(h.dense > 0.0);
    }
}

/// The gradient norm reads the fp32 gradients of the shard the device updates (4 bytes each):
/// with ZeRO 1 over dp = 8 and ep = 4, the dense parameters' eighth and half of its own experts'
/// (the 2 ranks holding the same experts). Without a distributed optimizer, all of them.
#[test]
fn the_optimizer_updates_each_experts_shard_among_the_ranks_holding_it() {
    for (ep, zero, experts, dense) in [
        (4u64, 1u8, 2.0, 8.0),
        (8, 1, 1.0, 8.0),
        (1, 1, 8.0, 8.0),
        (4, 0, 1.0, 1.0),
    ] {
        let k = knobs(ep, zero);
        let h = held(&k);
        let norm = optimizer_traffic(&h, &k)[0];
        let want = 4.0 * (h.dense / dense + h.experts / experts);
        assert!(
            (norm - want).abs() < 1e-9 * want,
            "ep {ep} zero {zero}: {norm} vs {want}"
        );
    }
}

/// Expert parallelism moves expert state between devices without shrinking what each updates:
/// at ep = 1 a device holds all 8 experts and updates an eighth of them (8 replicas share each);
/// at ep = 8 over dp = 8 it holds one expert that no other rank holds and updates all of it.
/// Either way its shard holds an eighth of the model's expert weights.
#[test]
fn expert_parallelism_leaves_each_device_the_same_expert_state_to_update() {
    let (k1, k8) = (knobs(1, 1), knobs(8, 1));
    let (ep1, ep8) = (held(&k1), held(&k8));
    let dense = ep1.dense / 8.0;
    for (h, k) in [(ep1, &k1), (ep8, &k8)] {
        let shard = h.shard(k).0;
        let want = dense + EXPERT_WEIGHTS / 8.0;
        assert!(
            (shard - want).abs() < 1e-9 * want,
            "ep {}: {shard} vs {want}",
            k.ep
        );
    }
}

/// A device reads and writes the weights of its own experts only. Its expert GEMM `expert_w1`
/// (Mixtral 8x7B, one 256-token sequence per device at dp 8, two experts per token) reads the
/// 512 routed tokens' rows (4096 bf16 elements each) and the weights of its 8/ep experts
/// (4096 × 14336 each) and writes 512 rows of 14336: the same FLOPs at every ep, a weight
/// 1/ep the size. Its backward reads and writes each of these twice (the output gradient read
/// by both gradient GEMMs, the input's and the weight's gradients written, the weight and the
/// input read).
#[test]
fn an_expert_gemm_moves_the_weights_of_the_devices_own_experts() {
    for ep in [1u64, 2, 8] {
        let (plan, _) = common::plan_on(
            "mixtral-8x7b",
            &[("B", 8), ("S", 256)],
            &knobs(ep, 0),
            "h100-sxm",
        );
        let op = plan
            .blocks
            .iter()
            .flat_map(|b| &b.ops)
            .find(|o| o.name == "expert_w1")
            .unwrap();
        let slots = 256 * 2;
        let want = 2 * (slots * 4096 + (8 / ep as i64) * 4096 * 14336 + slots * 14336);
        let q = |n: i64| symshard::sym::Rational::from_integer(n.into());
        assert_eq!(op.forward_bytes, q(want), "ep {ep}");
        assert_eq!(op.backward_bytes, q(2 * want), "ep {ep}");
        assert_eq!(op.forward_flops, q(2 * slots * 4096 * 14336), "ep {ep}");
    }
}

/// `cost --per-op` lists a device's own parameters: at ep = 8 an expert GEMM holds one of
/// Mixtral's 8 experts (4096 × 14336), at ep = 1 all 8; a dense operator is unchanged.
#[test]
fn per_op_rows_hold_the_devices_own_experts() {
    let params = |ep: &str| -> std::collections::BTreeMap<String, String> {
        let v = common::json(&[
            "cost",
            "mixtral-8x7b",
            "--dp",
            "8",
            "--ep",
            ep,
            "--set",
            "B=8",
            "--set",
            "S=256",
            "--per-op",
            "--format",
            "json",
        ]);
        v["per_device"]["per_op"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["block"] == "layer")
            .map(|o| {
                let p = o["params"].as_str().unwrap().to_string();
                (o["name"].as_str().unwrap().to_string(), p)
            })
            .collect()
    };
    let (one, eight) = (params("1"), params("8"));
    assert_eq!(one["expert_w1"], (8 * 4096 * 14336).to_string());
    assert_eq!(eight["expert_w1"], (4096 * 14336).to_string());
    assert_eq!(one["q_proj"], eight["q_proj"]);
}
