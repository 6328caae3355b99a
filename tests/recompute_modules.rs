//! Selective recomputation of named submodules, as Megatron-Core's `--recompute-modules` runs
//! them (`recompute_modules` in megatron/core/transformer/transformer_config.py, Megatron-LM
//! commit 000c4ac: default `core_attn`; `moe_act`, `layernorm` and `mla_up_proj` use
//! output-discarding checkpointing). The activations each module frees and the FLOPs it reruns
//! are counted by hand from the model's published sizes; the default is the attention core
//! alone; a module the model does not declare, an unknown name and a bad family tag are refused;
//! `--emit megatron` names the modules priced.

mod common;

use common::{json, refused, refused_validation_row, stdout, temp_dir};
use serde_json::Value;

/// An exact integer from a JSON number or an exact-number string.
fn int(v: &Value) -> i128 {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not an exact integer: {v}"))
}

/// `cost MODEL` at dp 1, one micro-batch of B = 1 and S = 4096, selective recomputation, with
/// `extra` arguments, as JSON.
fn cost(model: &str, extra: &[&str]) -> Value {
    cost_with(model, "selective", "S=4096", extra)
}

/// [`cost`] under recomputation `recompute`, at the sequence `seq` (`S=…`).
fn cost_with(model: &str, recompute: &str, seq: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "cost",
        model,
        "--set",
        "B=1",
        "--set",
        seq,
        "--recompute",
        recompute,
        "--format",
        "json",
    ];
    args.extend(extra);
    json(&args)
}

fn activations(c: &Value) -> i128 {
    int(&c["per_device"]["memory"]["activations"])
}

fn flops(c: &Value) -> i128 {
    int(&c["per_device"]["flops"])
}

/// Tokens of the one micro-batch.
const T: i128 = 4096;

/// DeepSeek-V3's sizes, Hugging Face config deepseek-ai/DeepSeek-V3 (config.json):
/// hidden_size 7168, num_attention_heads 128, qk_nope_head_dim 128, qk_rope_head_dim 64,
/// v_head_dim 128, moe_intermediate_size 2048, num_experts_per_tok 8, num_hidden_layers 61 of
/// which first_k_dense_replace 3 are dense.
const H: i128 = 7168;
const NH: i128 = 128;
const DN: i128 = 128;
const DR: i128 = 64;
const DV: i128 = 128;
const F: i128 = 2048;
const K: i128 = 8;
const LAYERS: i128 = 61;
const MOE_LAYERS: i128 = 58;

/// What `layernorm` frees per layer: the two norms' bf16 outputs the projections save, and each
/// norm's own fp32 reciprocal root mean square per row (the rule saves its input and `rstd`; the
/// input stays, to recompute from).
fn layernorm_bytes(h: i128) -> i128 {
    2 * (T * h * 2) + 2 * (T * 4)
}

/// What `mla_up_proj` frees per layer: the queries and keys (NH heads of DN + DR) and values
/// (NH heads of DV) the fused attention saves, in bf16.
fn mla_up_proj_bytes() -> i128 {
    2 * (T * NH * (DN + DR) * 2) + T * NH * DV * 2
}

/// What `moe_act` frees per MoE layer: the SwiGLU output the down-projection saves and the
/// SiLU output the product saves, each T·K rows of F in bf16 (all experts on the one device).
fn moe_act_bytes() -> i128 {
    2 * (T * K * F * 2)
}

#[test]
fn the_default_is_the_attention_core_alone() {
    // GPT-3's family runs eager attention, whose core selective recomputation drops.
    let none = cost_with("gpt3-1.3b", "none", "S=4096", &[]);
    let default = cost("gpt3-1.3b", &[]);
    let named = cost("gpt3-1.3b", &["--recompute-modules", "core_attn"]);
    assert!(activations(&default) < activations(&none));
    assert_eq!(default["per_device"], named["per_device"]);
    // The default is not named among the settings.
    let text = stdout(&[
        "cost",
        "gpt3-1.3b",
        "--recompute",
        "selective",
        "--recompute-modules",
        "core_attn",
    ]);
    assert!(!text.contains("recompute-modules"), "{text}");
}

#[test]
fn layernorm_frees_the_norm_outputs_of_an_eager_gpt() {
    // GPT-3 1.3B (Brown et al. 2020, Table 2.1): 24 layers of d_model 2048, context 2048.
    let at = |modules: &str| {
        activations(&cost_with(
            "gpt3-1.3b",
            "selective",
            "S=2048",
            &["--recompute-modules", modules],
        ))
    };
    let (t, h, layers) = (2048, 2048, 24);
    // The two norms' bf16 outputs, and each norm's fp32 mean and reciprocal deviation per row;
    // the attention core's saving is the same with or without the norms.
    let freed = layers * (2 * (t * h * 2) + 2 * (t * 8));
    assert_eq!(at("core_attn") - at("core_attn,layernorm"), freed);
}

#[test]
fn mlp_and_shared_experts_keep_their_inputs_and_outputs_only() {
    // Llama 3 8B (Hugging Face config meta-llama/Meta-Llama-3-8B: 32 layers, hidden 4096,
    // intermediate 14336): the gate's and the up-projection's outputs, the SiLU's output and the
    // product go; the norm's output (the MLP's input) and the MLP's output stay.
    let base = activations(&cost("llama3-8b", &[]));
    let mlp = activations(&cost("llama3-8b", &["--recompute-modules", "mlp"]));
    assert_eq!(base - mlp, 32 * 4 * (T * 14336 * 2));
    // The MLP's three GEMMs run again, 2·T·H·F FLOPs each, and its SiLU and product.
    let extra =
        flops(&cost("llama3-8b", &["--recompute-modules", "mlp"])) - flops(&cost("llama3-8b", &[]));
    let gemms = 32 * 3 * (2 * T * 4096 * 14336);
    assert!(
        extra > gemms && extra < gemms + gemms / 1000,
        "{extra} vs {gemms}"
    );
    // DeepSeek-V3's shared expert (n_shared_experts 1 of moe_intermediate_size 2048), on each
    // of its 58 MoE layers: the same four tensors of width F.
    let base = activations(&cost("deepseek-v3", &[]));
    let shared = activations(&cost(
        "deepseek-v3",
        &["--recompute-modules", "shared_experts"],
    ));
    assert_eq!(base - shared, MOE_LAYERS * 4 * (T * F * 2));
}

#[test]
fn each_module_frees_what_its_outputs_and_intermediates_held() {
    let base = activations(&cost("deepseek-v3", &[]));
    let ln = activations(&cost("deepseek-v3", &["--recompute-modules", "layernorm"]));
    let mla = activations(&cost(
        "deepseek-v3",
        &["--recompute-modules", "mla_up_proj"],
    ));
    let act = activations(&cost("deepseek-v3", &["--recompute-modules", "moe_act"]));
    let all = activations(&cost(
        "deepseek-v3",
        &["--recompute-modules", "layernorm,mla_up_proj,moe_act"],
    ));
    // Flash attention keeps no S×S tensor: core_attn frees nothing here, so each module's
    // saving is its own.
    assert_eq!(base - ln, LAYERS * layernorm_bytes(H));
    assert_eq!(base - mla, LAYERS * mla_up_proj_bytes());
    assert_eq!(base - act, MOE_LAYERS * moe_act_bytes());
    assert_eq!(
        base - all,
        LAYERS * (layernorm_bytes(H) + mla_up_proj_bytes()) + MOE_LAYERS * moe_act_bytes()
    );
}

#[test]
fn recomputation_reruns_the_forward_flops_of_the_modules_ops() {
    // The model's own per-operator FLOPs, which recomputation does not change.
    let per_op = cost("deepseek-v3", &["--per-op"]);
    // The up-projections: queries from the 1536-wide latent to NH·(DN + DR), keys and values
    // from the 512-wide latent to NH·(DN + DV) (q_lora_rank 1536, kv_lora_rank 512 in the same
    // config), on every layer.
    let gemms = LAYERS * (2 * T * 1536 * NH * (DN + DR) + 2 * T * 512 * NH * (DN + DV));
    let base = flops(&cost("deepseek-v3", &[]));
    let mla = flops(&cost(
        "deepseek-v3",
        &["--recompute-modules", "mla_up_proj"],
    ));
    // The GEMMs and the module's elementwise operators (rotary embedding), nothing else.
    let others: i128 = per_op["per_op"]
        .as_array()
        .expect("per-op rows")
        .iter()
        .filter(|r| {
            let n = r["name"].as_str().unwrap_or("");
            ["q_rope", "k_rope", "dense_q_rope", "dense_k_rope"].contains(&n)
        })
        .map(|r| int(&r["forward"]) * int(&r["repeat"]))
        .sum();
    assert!(others > 0, "{per_op}");
    assert_eq!(mla - base, gemms + others);
}

#[test]
fn the_timeline_reruns_the_modules() {
    let busy = |extra: &[&str]| -> f64 {
        let mut args = vec![
            "timeline",
            "mixtral-8x7b",
            "--set",
            "B=8",
            "--set",
            "S=1024",
            "--dp",
            "8",
            "--ep",
            "8",
            "--recompute",
            "selective",
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ];
        args.extend(extra);
        let t = json(&args);
        t["devices"][0]["busy"]["compute"].as_f64().unwrap()
    };
    let base = busy(&[]);
    let act = busy(&["--recompute-modules", "layernorm,moe_act"]);
    assert!(act > base, "{act} vs {base}");
}

#[test]
fn a_module_the_model_does_not_declare_is_refused() {
    let err = refused(&[
        "cost",
        "llama3-8b",
        "--recompute",
        "selective",
        "--recompute-modules",
        "mla_up_proj",
    ]);
    assert!(
        err.contains("mla_up_proj") && err.contains("llama3-8b"),
        "{err}"
    );
    assert!(err.contains("core_attn, layernorm"), "{err}");
    let err = refused(&["cost", "llama3-8b", "--recompute-modules", "attention"]);
    assert!(
        err.contains("core_attn") && err.contains("moe_act"),
        "{err}"
    );
}

#[test]
fn a_bad_module_in_a_graph_model_file_or_validation_row_is_refused() {
    let dir = temp_dir("recompute-modules");
    let graph = "name: tiny\n\
                 graph:\n  \
                   symbols: {B: batch, H: hidden}\n  \
                   inputs: {x: {dims: [B, H]}}\n  \
                   blocks:\n    \
                     - name: body\n      \
                       ops:\n        \
                         - {name: norm, recompute: norms, op: rmsnorm, bind: {b: B, h: H}, in: {x: x}}\n\
                 symbols: {H: 64}\n\
                 defaults: {B: 2}\n";
    std::fs::write(dir.join("tiny.yaml"), graph).unwrap();
    let path = dir.join("tiny.yaml").display().to_string();
    let err = refused(&["cost", &path]);
    assert!(err.contains("norms") && err.contains("tiny.yaml"), "{err}");
    let file = "name: ds\nfamily: deepseek_v3\nrecompute_modules: [layernorm, moe_acts]\n";
    std::fs::write(dir.join("ds.yaml"), file).unwrap();
    let path = dir.join("ds.yaml").display().to_string();
    let err = refused(&["cost", &path]);
    assert!(err.contains("moe_acts") && err.contains("ds.yaml"), "{err}");
    let err = refused_validation_row("recompute-row", "recompute_modules: [core]");
    assert!(err.contains("v.yaml:8") && err.contains("`core`"), "{err}");
}

#[test]
fn emit_megatron_names_the_modules_priced() {
    let emitted = |extra: &[&str]| -> String {
        let mut args = vec![
            "rank",
            "mixtral-8x7b",
            "--devices",
            "64",
            "--fix",
            "recompute=selective",
            "--top",
            "1",
            "--emit",
            "megatron",
        ];
        args.extend(extra);
        stdout(&args)
    };
    let with = emitted(&["--recompute-modules", "moe_act,layernorm"]);
    assert!(
        with.contains("--recompute-modules layernorm moe_act"),
        "{with}"
    );
    assert!(with.contains("--recompute-granularity selective"), "{with}");
    let without = emitted(&[]);
    assert!(!without.contains("--recompute-modules"), "{without}");
}

#[test]
fn the_header_names_the_modules() {
    let text = stdout(&[
        "cost",
        "mixtral-8x7b",
        "--recompute",
        "selective",
        "--recompute-modules",
        "moe_act",
    ]);
    assert!(text.contains("recompute-modules moe_act"), "{text}");
}
