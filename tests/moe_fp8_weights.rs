//! Under expert parallelism a device holds E/ep experts, so its FP8 weight copies (memory) and
//! the per-step casts of its FP8 weights cover 1/ep of the expert weights, as its parameters
//! do: in the evaluation (memory) and in the timeline's plan (the weight operand its casts
//! read). Hand counts from Mixtral 8x7B's configuration (Jiang et al. 2024, arXiv:2401.04088,
//! Table 1: 32 layers, dim 4096, hidden_dim 14336, 8 experts; Hugging Face
//! mistralai/Mixtral-8x7B-v0.1 config.json): three 4096 × 14336 matrices per expert.

mod common;

use symshard::parallel::Evaluation;
use symshard::strategy::{Knobs, Precision};
use symshard::sym::Rational;

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

const LAYERS: i64 = 32;
const EXPERTS: i64 = 8;
/// The expert GEMMs' weight elements of the whole model (all experts).
const EXPERT_WEIGHTS: i64 = LAYERS * EXPERTS * 3 * 4096 * 14336;

fn knobs(ep: u64, precision: Precision) -> Knobs {
    Knobs {
        precision,
        ep,
        ..Knobs::data_parallel(8)
    }
}

fn run(k: &Knobs) -> Evaluation {
    common::evaluate_on("mixtral-8x7b", &[("B", 8), ("S", 256)], k, "h100-sxm")
}

/// The FP8 weight copies a device keeps (the delayed recipe's rowwise and columnwise copies,
/// 2 bytes per element): with ep = 8 the expert ones are an eighth of those at ep = 1.
#[test]
fn a_devices_fp8_weight_copies_cover_its_own_experts() {
    let copies = |ep: u64| -> Rational {
        &run(&knobs(ep, Precision::Fp8)).memory.params
            - &run(&knobs(ep, Precision::Bf16)).memory.params
    };
    let (one, eight) = (copies(1), copies(8));
    assert_eq!(&one - &eight, q(2 * EXPERT_WEIGHTS) * q(7) / q(8));
}

/// The plan's expert GEMMs hand their casts 1/ep of the weight operand their shapes count.
#[test]
fn the_plans_expert_gemms_cast_their_own_experts_weights() {
    let weights = |ep: u64| -> Rational {
        let (plan, _) = common::plan_on(
            "mixtral-8x7b",
            &[("B", 8), ("S", 256)],
            &knobs(ep, Precision::Fp8),
            "h100-sxm",
        );
        let per_block: Vec<Rational> = plan
            .blocks
            .iter()
            .map(|b| {
                b.ops
                    .iter()
                    .filter_map(|o| o.fp8_operands())
                    .map(|o| o.weight)
                    .fold(q(0), |a, w| a + w)
            })
            .collect();
        // The repeated layer's block, once per layer.
        per_block.into_iter().max().unwrap() * q(LAYERS)
    };
    let (one, eight) = (weights(1), weights(8));
    assert_eq!(&one - &eight, q(EXPERT_WEIGHTS) * q(7) / q(8));
}

/// With FP8 parameters under ZeRO 3 the bf16 weight shard dropped is the device's: 2 bytes of
/// each dense FP8 GEMM weight over the 8 replicas, and of each of its E/ep experts' FP8 weights
/// over the dp/ep = 2 ranks that shard them. The dense FP8 GEMMs are the attention projections
/// (4096 × (4096 + 1024 + 1024 + 4096) per layer); the router's linear layer stays in bf16.
#[test]
fn fp8_parameters_drop_each_shards_bf16_weight() {
    let k = |fp8_params: bool| Knobs {
        zero: 3,
        ep: 4,
        fp8_params,
        ..knobs(4, Precision::Fp8)
    };
    let dropped = &run(&k(false)).memory.params - &run(&k(true)).memory.params;
    let dense = q(LAYERS * 4096 * (4096 + 1024 + 1024 + 4096));
    let held = q(EXPERT_WEIGHTS) / q(4);
    assert_eq!(dropped, q(2) * dense / q(8) + q(2) * held / q(2));
}

/// Megatron-Core computes the router's logits outside Transformer Engine
/// (megatron/core/transformer/moe/router.py, `Router.gating` through `router_gating_linear`, a
/// GEMM in the input's dtype or `--moe-router-dtype`): under an FP8 recipe the router is no FP8
/// GEMM, while the attention projections and the experts are.
#[test]
fn the_router_stays_out_of_fp8() {
    let (plan, _) = common::plan_on(
        "mixtral-8x7b",
        &[("B", 8), ("S", 256)],
        &knobs(1, Precision::Fp8),
        "h100-sxm",
    );
    let layer = plan.blocks.iter().find(|b| b.layer).unwrap();
    let fp8 = |name: &str| {
        layer
            .ops
            .iter()
            .find(|o| o.name.ends_with(name))
            .unwrap_or_else(|| panic!("no operator {name}"))
            .fp8
    };
    assert!(!fp8("router"));
    for gemm in ["q_proj", "o_proj", "expert_w1", "expert_w2"] {
        assert!(fp8(gemm), "{gemm}");
    }
}

/// A shared expert's gate is a plain `torch.nn.functional.linear` in Megatron-Core
/// (megatron/core/transformer/moe/shared_experts.py), like the router: the `sigmoid_gate` rule
/// names its `gate` input in `router:`, so the linear layer feeding it is marked, as the
/// router feeding a `moe-gate` is. Qwen1.5-MoE-A2.7B (its Hugging Face config.json, in
/// tests/fixtures/hf): one sigmoid-gated shared expert per layer.
#[test]
fn a_shared_experts_gate_is_a_router_too() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf/Qwen1.5-MoE-A2.7B.json");
    let m = symshard::model::ModelLoader::embedded()
        .unwrap()
        .resolve(path.to_str().unwrap())
        .unwrap();
    let mut marked: Vec<&str> = m
        .ops()
        .filter(|(_, n)| n.router)
        .map(|(_, n)| n.name.as_str())
        .collect();
    marked.sort();
    assert_eq!(marked, ["router", "shared_expert_gate"]);
}
