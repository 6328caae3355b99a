//! Hugging Face architectures against transformers and PyTorch: for every config fixture measured
//! by `tools/hf_reference.py`, the imported model's parameter count equals transformers' count of
//! the full published config, and its forward matmul-like FLOPs equal what PyTorch's
//! `FlopCounterMode` counts for `model(input_ids)` at the batch, sequence and (reduced) layer
//! count recorded in `tests/fixtures/hf/reference.json`. The configs' sources are listed in
//! `tests/fixtures/hf/SOURCES.md`.

use num_bigint::BigInt;
use std::path::{Path, PathBuf};
use symshard::model::{model_cost, Model, ModelLoader};
use symshard::sym::Rational;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(name: &str) -> Model {
    ModelLoader::embedded()
        .expect("shipped rules load")
        .resolve(root().join(format!("{name}.json")).to_str().unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn int(v: &serde_json::Value) -> Rational {
    Rational::from_integer(v.as_i64().map(BigInt::from).expect("an integer"))
}

/// (fixture, family the importer must choose).
const CASES: &[(&str, &str)] = &[
    ("Qwen2.5-7B", "qwen2"),
    ("Qwen2-0.5B", "qwen2_tied"),
    ("Qwen3-8B", "qwen3"),
    ("Qwen3-0.6B", "qwen3_tied"),
    ("gemma-7b", "gemma"),
    ("gemma-2b", "gemma"),
    ("gemma-2-9b", "gemma2"),
    ("gemma-2-2b", "gemma2"),
    ("Phi-3-mini-4k-instruct", "llama"),
    ("phi-2", "phi"),
    ("opt-1.3b", "opt"),
    ("pythia-1.4b", "gpt_neox"),
    ("falcon-7b", "falcon"),
    ("Qwen3-30B-A3B", "qwen3_moe"),
    ("Qwen1.5-MoE-A2.7B", "qwen2_moe"),
    ("DeepSeek-V2-Lite", "deepseek_v2"),
    ("DeepSeek-V2", "deepseek_v2_qlora"),
    ("DeepSeek-V3", "deepseek_v3"),
    ("DeepSeek-V3-tiny", "deepseek_v3"),
];

/// Fixtures whose parameters are measured but not their FLOPs (the reference records why).
const PARAMS_ONLY: &[&str] = &["DeepSeek-V3"];

/// Checks one fixture; returns (symshard, reference) pairs for the message.
fn check(name: &str, family: &str) {
    let r = reference();
    let r = &r["models"][name];
    assert!(r.is_object(), "{name}: no reference numbers");
    let m = load(name);
    assert_eq!(m.family.as_deref(), Some(family), "{name}");
    let cost = model_cost(&m);
    let params = cost.params.eval(&m.values).unwrap();
    assert_eq!(params, int(&r["params"]), "{name}: parameters");
    if r["flops"].is_null() {
        assert!(
            PARAMS_ONLY.contains(&name) && r["flops_not_measured"].is_string(),
            "{name}: no FLOPs measured, and no reason recorded"
        );
        return;
    }
    let mut at = m.values.clone();
    for k in ["B", "S", "L"] {
        at.insert(k.into(), int(&r["flops"][k]));
    }
    let flops = cost.forward.matmul.eval(&at).unwrap();
    assert_eq!(
        flops,
        int(&r["flops"]["forward"]),
        "{name}: forward matmul FLOPs"
    );
}

#[test]
fn every_measured_fixture_is_tested() {
    let r = reference();
    let measured: Vec<&String> = r["models"].as_object().unwrap().keys().collect();
    for name in &measured {
        assert!(
            CASES.iter().any(|(n, _)| n == name),
            "{name} is measured but not tested"
        );
    }
    assert_eq!(measured.len(), CASES.len());
}

#[test]
fn qwen2() {
    check("Qwen2.5-7B", "qwen2");
    check("Qwen2-0.5B", "qwen2_tied");
}

#[test]
fn qwen3() {
    check("Qwen3-8B", "qwen3");
    check("Qwen3-0.6B", "qwen3_tied");
}

#[test]
fn gemma() {
    check("gemma-7b", "gemma");
    check("gemma-2b", "gemma");
}

#[test]
fn gemma2() {
    check("gemma-2-9b", "gemma2");
    check("gemma-2-2b", "gemma2");
}

#[test]
fn phi3() {
    check("Phi-3-mini-4k-instruct", "llama");
}

#[test]
fn phi() {
    check("phi-2", "phi");
}

#[test]
fn opt() {
    check("opt-1.3b", "opt");
}

#[test]
fn gpt_neox() {
    check("pythia-1.4b", "gpt_neox");
}

#[test]
fn falcon() {
    check("falcon-7b", "falcon");
}

#[test]
fn qwen3_moe() {
    check("Qwen3-30B-A3B", "qwen3_moe");
}

/// Config: https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json
#[test]
fn qwen2_moe() {
    check("Qwen1.5-MoE-A2.7B", "qwen2_moe");
}

/// Config: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json (one dense
/// layer, then sparse ones; the reference counts FLOPs at two layers, one of each).
#[test]
fn deepseek_v2() {
    check("DeepSeek-V2-Lite", "deepseek_v2");
}

/// Config: https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json (low-rank
/// queries, group-limited routing; two layers measured, one dense and one sparse).
#[test]
fn deepseek_v2_qlora() {
    check("DeepSeek-V2", "deepseek_v2_qlora");
}

/// DeepSeek-V3 (config: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json):
/// the parameters of the full config (671,026,404,352, as transformers counts them; the FLOPs of
/// four full-width layers are not measured), and both of the architecture at small sizes, two
/// layers measured, one dense and one sparse.
#[test]
fn deepseek_v3() {
    check("DeepSeek-V3", "deepseek_v3");
    check("DeepSeek-V3-tiny", "deepseek_v3");
}

/// The router's e_score_correction_bias is a buffer: in the state dict (E values per sparse
/// layer) but not among the parameters transformers counts, nor among the model's.
#[test]
fn deepseek_v3_bias_is_a_buffer_not_a_parameter() {
    let r = reference();
    for name in ["DeepSeek-V3", "DeepSeek-V3-tiny"] {
        let m = load(name);
        let v = |k: &str| m.values[k].clone();
        let buffers = int(&r["models"][name]["state_dict_buffers"]);
        assert_eq!(buffers, (v("L") - v("LD")) * v("E"), "{name}");
    }
}
