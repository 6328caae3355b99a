//! Hugging Face `config.json` → a model file: the family the architecture belongs to and its
//! symbols, each value with the config field it comes from.
//!
//! Supported `model_type`s: `gpt2` (family `gpt`), `bert` (`bert`), `llama` and `mistral`
//! (`llama`, or `llama_tied` with `tie_word_embeddings`), `mixtral` (`mixtral`) and `t5` (`t5` for
//! v1.0, ReLU and tied; `t5_v1_1` for v1.1 and FLAN-T5, gated-GELU and untied), `phi3` (`llama`),
//! `qwen2` (`qwen2`, q/k/v biases), `qwen3` (`qwen3`, per-head q/k norms), `gemma` and `gemma2`
//! (tied, GeGLU; Gemma 2 with post-norms and soft-capping); each family with a `_tied` variant
//! where the config ties the head; `phi`, `gpt_neox`, `falcon` and `opt` (each its own family:
//! parallel blocks with partial rotary, multi-query, learned positions), `qwen3_moe` and
//! `qwen2_moe` (routed experts; Qwen2-MoE with a sigmoid-gated shared expert), `deepseek_v2`
//! (`deepseek_v2`, or `deepseek_v2_qlora` with low-rank queries: multi-head latent attention,
//! dense then sparse layers, shared experts), `deepseek_v3` (`deepseek_v3`: as DeepSeek-V2 with
//! low-rank queries, a sigmoid gate with group-limited, renormalised top-k). Fields absent from
//! a file take the `transformers` class defaults, and the symbol's source says so. A field that
//! changes the architecture in a way the family cannot represent (biases, parallel blocks,
//! partial rotary, latent attention, …) is refused with its name and place, never dropped.

use super::json::Config;
use super::yaml_str;
use crate::diag::Source;
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The `model_type`s the importer reads.
pub const SUPPORTED: &[&str] = &[
    "gpt2",
    "bert",
    "llama",
    "mistral",
    "mixtral",
    "t5",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen2_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gemma",
    "gemma2",
    "phi3",
    "phi",
    "opt",
    "falcon",
    "gpt_neox",
];

/// A config turned into a model file.
#[derive(Debug, Clone)]
pub struct HfImport {
    /// The model's name.
    pub name: String,
    /// The config's `model_type`.
    pub model_type: String,
    /// The family the model file instantiates.
    pub family: String,
    /// The model file's text.
    pub yaml: String,
}

/// One symbol value and where it comes from.
struct Sym {
    name: &'static str,
    value: u64,
    source: String,
}

/// What an architecture reader produces.
struct Plan {
    family: &'static str,
    /// The Hugging Face module the family counts.
    module: String,
    symbols: Vec<Sym>,
    seq: Sym,
    notes: Vec<String>,
}

/// Reads `path` and converts it, naming the model `name` (the file's stem when `None`).
pub fn import_hf(path: &Path, name: Option<&str>) -> Result<HfImport> {
    let text = crate::diag::read_text(path)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    import_hf_text(path, text, name.unwrap_or(&stem))
}

/// The model file of a config, as a [`Source`] named after the config (what
/// [`crate::model::ModelLoader`] loads when given a `.json` path).
pub fn model_source_from_hf(path: &Path) -> Result<Source> {
    let imported = import_hf(path, None)?;
    Ok(Source::new(path, imported.yaml))
}

/// Converts the text of a config; `file` names it in messages and sources.
pub fn import_hf_text(file: &Path, text: String, name: &str) -> Result<HfImport> {
    let mut c = Config::parse(file, text)?;
    let model_type = c
        .opt_str("model_type")?
        .ok_or_else(|| {
            Error::at(
                file,
                1,
                1,
                format!(
                    "missing field `model_type` (supported: {})",
                    SUPPORTED.join(", ")
                ),
            )
        })?
        .to_string();
    c.context = format!("model_type `{model_type}`");
    let config_name = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| name.to_string());
    let src = |field: &str| format!("HF config {config_name}: {field}");
    let plan = plan_of(&c, &model_type, &src)?;
    let y = model_yaml(&c, file, &model_type, name, &plan);
    Ok(HfImport {
        name: name.to_string(),
        model_type,
        family: plan.family.to_string(),
        yaml: y,
    })
}
/// What the family of `model_type` counts of config `c`, or why it does not take it.
fn plan_of(c: &Config, model_type: &str, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    match model_type {
        "gpt2" => gpt2(c, src),
        "bert" => bert(c, src),
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen3" | "qwen3_moe" | "qwen2_moe"
        | "gemma" | "gemma2" | "phi3" => llama(c, src, model_type),
        "t5" => t5(c, src),
        "deepseek_v2" => deepseek_v2(c, src),
        "deepseek_v3" => deepseek_v3(c, src),
        "phi" => phi(c, src),
        "gpt_neox" => gpt_neox(c, src),
        "falcon" => falcon(c, src),
        "opt" => opt(c, src),
        other => Err(c.error(
            "model_type",
            None,
            format!(
                "unsupported model_type `{other}` (supported: {})",
                SUPPORTED.join(", ")
            ),
        )),
    }
}

/// The model file of `plan`: comments on where it comes from and what it counts, the name,
/// family and sources, the symbols and the default batch and sequence.
fn model_yaml(c: &Config, file: &Path, model_type: &str, name: &str, plan: &Plan) -> String {
    let architectures: Vec<&str> = c
        .get("architectures")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let file_name = file
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Imported by `symshard import hf` from {file_name} (model_type {model_type})."
    );
    if !architectures.is_empty() {
        let _ = writeln!(
            y,
            "# The config's architectures: {}; the model counts {}.",
            architectures.join(", "),
            plan.module
        );
    }
    for n in &plan.notes {
        let _ = writeln!(y, "# {n}");
    }
    let _ = writeln!(y, "name: {}", yaml_str(name));
    let _ = writeln!(y, "family: {}", plan.family);
    let _ = writeln!(
        y,
        "doc: {}",
        yaml_str(&format!("{name}, as Hugging Face's {}.", plan.module))
    );
    let _ = writeln!(
        y,
        "source: {}",
        yaml_str(&format!("Hugging Face config {file_name}"))
    );
    let _ = writeln!(y, "symbols:");
    for s in &plan.symbols {
        let _ = writeln!(
            y,
            "  {}: {{value: {}, source: {}}}",
            s.name,
            s.value,
            yaml_str(&s.source)
        );
    }
    let _ = writeln!(y, "defaults:");
    let _ = writeln!(
        y,
        "  B: {{value: 8, source: {}}}",
        yaml_str("a small default batch")
    );
    let _ = writeln!(
        y,
        "  S: {{value: {}, source: {}}}",
        plan.seq.value,
        yaml_str(&plan.seq.source)
    );
    y
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn sym(name: &'static str, value: u64, source: String) -> Sym {
    Sym {
        name,
        value,
        source,
    }
}

/// A required field as a symbol.
fn field(c: &Config, name: &'static str, key: &str, src: &dyn Fn(&str) -> String) -> Result<Sym> {
    Ok(sym(name, c.uint(key)?, src(key)))
}

/// `a / b` when it divides exactly.
fn divide(c: &Config, key: &str, a: u64, b: u64, what: &str) -> Result<u64> {
    if b == 0 || !a.is_multiple_of(b) {
        return Err(c.error(key, None, format!("{what}: {a} is not divisible by {b}")));
    }
    Ok(a / b)
}

/// Rejects a string field whose value the family cannot express.
fn expect_one_of(c: &Config, key: &str, default: &str, allowed: &[&str], why: &str) -> Result<()> {
    let v = c.opt_str(key)?.unwrap_or(default);
    if allowed.contains(&v) {
        return Ok(());
    }
    Err(c.error(
        key,
        None,
        format!(
            "{key} `{v}` is not supported for {}: {why} (supported: {})",
            c.context,
            allowed.join(", ")
        ),
    ))
}

fn gpt2(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    let gelus = [
        "gelu_new",
        "gelu",
        "gelu_fast",
        "gelu_pytorch_tanh",
        "gelu_python",
    ];
    expect_one_of(
        c,
        "activation_function",
        "gelu_new",
        &gelus,
        "the gpt family's MLP is GELU",
    )?;
    if c.opt_bool("tie_word_embeddings")? == Some(false) {
        return Err(c.error(
            "tie_word_embeddings",
            None,
            "tie_word_embeddings false is not supported for model_type `gpt2`: the gpt family's head is tied to the token embedding",
        ));
    }
    let h = c.uint("n_embd")?;
    let nh = c.uint("n_head")?;
    divide(c, "n_head", h, nh, "n_embd must split into n_head heads")?;
    let f = match c.opt_uint("n_inner")? {
        Some(f) => sym("F", f, src("n_inner")),
        None => {
            let how = if c.is_null("n_inner") {
                "n_inner null = 4*n_embd"
            } else {
                "n_inner absent = 4*n_embd"
            };
            let f = h
                .checked_mul(4)
                .ok_or_else(|| c.error("n_embd", None, "n_embd is too large"))?;
            sym("F", f, src(how))
        }
    };
    let p = field(c, "P", "n_positions", src)?;
    let seq = sym("S", p.value, src("n_positions"));
    Ok(Plan {
        family: "gpt",
        module: "GPT2LMHeadModel (head tied to the token embedding)".into(),
        symbols: vec![
            field(c, "L", "n_layer", src)?,
            sym("H", h, src("n_embd")),
            sym("NH", nh, src("n_head")),
            f,
            field(c, "V", "vocab_size", src)?,
            p,
        ],
        seq,
        notes: vec![],
    })
}

fn bert(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "hidden_act",
        "gelu",
        &["gelu", "gelu_new"],
        "the bert family's MLP is GELU",
    )?;
    expect_one_of(
        c,
        "position_embedding_type",
        "absolute",
        &["absolute"],
        "the bert family has learned absolute positions",
    )?;
    let h = c.uint("hidden_size")?;
    let nh = c.uint("num_attention_heads")?;
    divide(
        c,
        "num_attention_heads",
        h,
        nh,
        "hidden_size must split into heads",
    )?;
    let p = field(c, "P", "max_position_embeddings", src)?;
    let seq = sym("S", p.value, src("max_position_embeddings"));
    let tv = match c.opt_uint("type_vocab_size")? {
        Some(v) => sym("TV", v, src("type_vocab_size")),
        None => sym("TV", 2, src("type_vocab_size absent = 2")),
    };
    Ok(Plan {
        family: "bert",
        module: "BertModel (encoder and pooler, no pre-training heads)".into(),
        symbols: vec![
            field(c, "L", "num_hidden_layers", src)?,
            sym("H", h, src("hidden_size")),
            sym("NH", nh, src("num_attention_heads")),
            field(c, "F", "intermediate_size", src)?,
            field(c, "V", "vocab_size", src)?,
            p,
            tv,
        ],
        seq,
        notes: vec![],
    })
}

/// A field that changes the architecture of other `model_type`s, and when its value does.
#[derive(Clone, Copy)]
enum Sign {
    /// Present at all (a field only that architecture writes).
    Present,
    /// `true`.
    True,
    /// Present and not `null`.
    NotNull,
    /// A number other than 1.
    NotOne,
    /// A number other than 0.
    NotZero,
}

/// Fields of other architectures that change parameters or FLOPs: a reader refuses each one it
/// does not represent, naming it, instead of counting a model the config does not describe.
const FOREIGN: &[(&str, Sign, &str)] = &[
    ("attention_bias", Sign::True, "it adds biases to the attention projections"),
    ("mlp_bias", Sign::True, "it adds biases to the MLP projections"),
    ("qkv_bias", Sign::True, "it adds biases to the query, key and value projections"),
    ("use_qkv_bias", Sign::True, "it adds biases to the query, key and value projections"),
    ("bias", Sign::True, "it adds biases to the linear layers"),
    ("use_bias", Sign::True, "it adds biases to the linear layers"),
    (
        "use_sliding_window",
        Sign::Present,
        "it marks a Qwen2 config, whose query, key and value projections have biases (model_type `qwen2`)",
    ),
    (
        "max_window_layers",
        Sign::Present,
        "it marks a Qwen2 config, whose query, key and value projections have biases (model_type `qwen2`)",
    ),
    ("parallel_attn", Sign::True, "it runs attention and the MLP in parallel"),
    ("use_parallel_residual", Sign::True, "it runs attention and the MLP in parallel"),
    ("multi_query", Sign::True, "it selects multi-query attention"),
    ("new_decoder_architecture", Sign::True, "it selects Falcon's grouped decoder layout"),
    ("partial_rotary_factor", Sign::NotOne, "it rotates only part of each head"),
    ("rotary_pct", Sign::NotOne, "it rotates only part of each head"),
    ("qk_layernorm", Sign::True, "it normalises queries and keys"),
    ("use_qk_norm", Sign::True, "it normalises queries and keys"),
    ("attn_logit_softcapping", Sign::NotNull, "it soft-caps the attention scores"),
    ("final_logit_softcapping", Sign::NotNull, "it soft-caps the logits"),
    ("kv_lora_rank", Sign::NotNull, "it selects multi-head latent attention"),
    ("q_lora_rank", Sign::NotNull, "it selects low-rank query projections"),
    ("n_shared_experts", Sign::NotNull, "it adds shared experts"),
    ("shared_expert_intermediate_size", Sign::NotZero, "it adds a shared expert"),
    ("embd_pdrop", Sign::NotZero, "it adds dropout on the embeddings"),
    ("resid_pdrop", Sign::NotZero, "it adds dropout on the residual branches"),
    ("attention_dropout", Sign::NotZero, "it adds dropout on the attention probabilities"),
];

/// Refuses every field of [`FOREIGN`] that is set so as to change the architecture, except those
/// in `allowed`, which the reader handles itself.
fn refuse_foreign(c: &Config, allowed: &[&str]) -> Result<()> {
    for &(key, sign, what) in FOREIGN {
        if allowed.contains(&key) {
            continue;
        }
        let Some(v) = c.raw(key) else { continue };
        let hit = match sign {
            Sign::Present => true,
            Sign::True => v.as_bool() == Some(true),
            Sign::NotNull => !v.is_null(),
            Sign::NotOne => v.as_f64().is_some_and(|x| x != 1.0),
            Sign::NotZero => v.as_f64().is_some_and(|x| x != 0.0),
        };
        if hit {
            return Err(c.error(
                key,
                None,
                format!(
                    "field `{key}` ({v}) is not supported for {}: {what}, which the family cannot represent",
                    c.context
                ),
            ));
        }
    }
    Ok(())
}

/// A number field, if present, must equal `want` (a setting the family fixes).
fn expect_number(c: &Config, key: &str, want: f64, why: &str) -> Result<()> {
    match c.get(key) {
        None => Ok(()),
        Some(v) if v.as_f64() == Some(want) => Ok(()),
        Some(v) => Err(c.error(
            key,
            None,
            format!(
                "field `{key}` ({v}) is not supported for {}: {why}",
                c.context
            ),
        )),
    }
}

/// How a Llama-like `model_type` maps onto the families.
struct Decoder {
    /// The family without and with a tied head (`None`: that variant is refused).
    untied: Option<&'static str>,
    tied: Option<&'static str>,
    /// `tie_word_embeddings` when absent.
    tied_default: bool,
    /// The Hugging Face class counted.
    class: &'static str,
    /// Activation field and the values the family's MLP accepts.
    act_key: &'static str,
    act_default: &'static str,
    acts: &'static [&'static str],
    act_why: &'static str,
    /// `head_dim` when absent: `None` is hidden_size / num_attention_heads.
    head_dim_default: Option<u64>,
    /// Fields of [`FOREIGN`] the family represents.
    allowed: &'static [&'static str],
    /// A mixture-of-experts model: the field counting its experts (`None`: a dense model).
    experts: Option<&'static str>,
    /// The field of the (routed) MLP's inner size.
    ff_key: &'static str,
    /// A note on how the model's projections are laid out, for the model file.
    note: Option<&'static str>,
}

const SILU: &[&str] = &["silu"];
const GELU_TANH: &[&str] = &["gelu_pytorch_tanh", "gelu", "gelu_new", "gelu_fast"];

fn decoder_spec(model_type: &str) -> Decoder {
    let base = Decoder {
        untied: Some("llama"),
        tied: Some("llama_tied"),
        tied_default: false,
        class: "LlamaForCausalLM",
        act_key: "hidden_act",
        act_default: "silu",
        acts: SILU,
        act_why: "the family's MLP is SwiGLU",
        head_dim_default: None,
        allowed: &[],
        experts: None,
        ff_key: "intermediate_size",
        note: None,
    };
    match model_type {
        "mistral" => Decoder {
            class: "MistralForCausalLM",
            ..base
        },
        "mixtral" => Decoder {
            untied: Some("mixtral"),
            tied: None,
            class: "MixtralForCausalLM",
            experts: Some("num_local_experts"),
            ..base
        },
        "phi3" => Decoder {
            class: "Phi3ForCausalLM",
            note: Some("Phi-3 fuses q/k/v into qkv_proj and gate/up into gate_up_proj: the same parameters and FLOPs as the separate projections of the llama family."),
            ..base
        },
        "qwen2" => Decoder {
            untied: Some("qwen2"),
            tied: Some("qwen2_tied"),
            class: "Qwen2ForCausalLM",
            allowed: &["use_sliding_window", "max_window_layers"],
            ..base
        },
        "qwen3_moe" => Decoder {
            untied: Some("qwen3_moe"),
            tied: None,
            class: "Qwen3MoeForCausalLM",
            head_dim_default: Some(128),
            allowed: &["use_sliding_window", "max_window_layers"],
            experts: Some("num_experts"),
            ff_key: "moe_intermediate_size",
            ..base
        },
        "qwen2_moe" => Decoder {
            untied: Some("qwen2_moe"),
            tied: None,
            class: "Qwen2MoeForCausalLM",
            allowed: &[
                "use_sliding_window",
                "max_window_layers",
                "shared_expert_intermediate_size",
                "qkv_bias",
            ],
            experts: Some("num_experts"),
            ff_key: "moe_intermediate_size",
            ..base
        },
        "qwen3" => Decoder {
            untied: Some("qwen3"),
            tied: Some("qwen3_tied"),
            class: "Qwen3ForCausalLM",
            head_dim_default: Some(128),
            allowed: &["use_sliding_window", "max_window_layers"],
            ..base
        },
        "gemma" | "gemma2" => Decoder {
            untied: None,
            tied: Some(if model_type == "gemma" { "gemma" } else { "gemma2" }),
            tied_default: true,
            class: if model_type == "gemma" {
                "GemmaForCausalLM"
            } else {
                "Gemma2ForCausalLM"
            },
            act_key: if model_type == "gemma" {
                "hidden_act"
            } else {
                "hidden_activation"
            },
            act_default: "gelu_pytorch_tanh",
            acts: GELU_TANH,
            act_why: "the family's MLP is GeGLU",
            head_dim_default: Some(256),
            allowed: if model_type == "gemma" {
                &[]
            } else {
                &["attn_logit_softcapping", "final_logit_softcapping"]
            },
            ..base
        },
        _ => base,
    }
}

/// Llama-like decoders: Llama, Mistral, Mixtral, Phi-3, Qwen2, Qwen3, Gemma, Gemma 2
/// (`model_type` says which).
fn llama(c: &Config, src: &dyn Fn(&str) -> String, model_type: &str) -> Result<Plan> {
    let spec = decoder_spec(model_type);
    expect_one_of(c, spec.act_key, spec.act_default, spec.acts, spec.act_why)?;
    if spec.act_key == "hidden_activation" {
        // Gemma 2 reads `hidden_activation`; a `hidden_act` left in the file is ignored by
        // transformers, and is only accepted when it agrees.
        expect_one_of(c, "hidden_act", spec.act_default, spec.acts, spec.act_why)?;
    }
    refuse_foreign(c, spec.allowed)?;
    if model_type == "phi3" {
        expect_number(
            c,
            "partial_rotary_factor",
            1.0,
            "the family rotates every dimension of a head",
        )?;
    }
    let (h, nh, kv, d) = head_symbols(c, &spec, src)?;
    let tied = c
        .opt_bool("tie_word_embeddings")?
        .unwrap_or(spec.tied_default);
    let mut symbols = vec![
        field(c, "L", "num_hidden_layers", src)?,
        sym("H", h, src("hidden_size")),
        sym("NH", nh, src("num_attention_heads")),
        kv,
        d,
        field(c, "F", spec.ff_key, src)?,
        field(c, "V", "vocab_size", src)?,
    ];
    let family = match (tied, spec.tied, spec.untied) {
        (true, Some(f), _) | (false, _, Some(f)) => f,
        _ => {
            let (have, family_head) = if tied {
                ("true", "untied")
            } else {
                ("false", "tied to the token embedding")
            };
            return Err(c.error(
                "tie_word_embeddings",
                None,
                format!(
                    "tie_word_embeddings {have} is not supported for model_type `{model_type}`: the family's head is {family_head}"
                ),
            ));
        }
    };
    expert_symbols(c, &spec, model_type, src, &mut symbols)?;
    // Rotary settings: Llama 3.1 and later keep the pre-training length in the scaling block,
    // `rope_scaling` or, from transformers 5, `rope_parameters` (which also holds rope_theta).
    let mut seq = pretraining_length(c, src)?;
    let value = |n: &str| symbols.iter().find(|s| s.name == n).map(|s| s.value);
    if let (Some(e), Some(k)) = (value("E"), value("K")) {
        seq = whole_capacity(seq, e, k);
    }
    let theta = c
        .number_text(Some("rope_parameters"), "rope_theta")
        .map(|t| format!("rope_parameters.rope_theta {t}"))
        .or_else(|| {
            c.number_text(None, "rope_theta")
                .map(|t| format!("rope_theta {t}"))
        })
        .unwrap_or_else(|| "rope_theta absent (10000)".into());
    let mut notes = vec![format!(
        "Rotary positions: {theta}; the tables are buffers and cost no parameters."
    )];
    let windowed = c.opt_bool("use_sliding_window")? != Some(false);
    if let (Some(w), true) = (c.opt_uint("sliding_window")?, windowed) {
        let which = if model_type == "gemma2" {
            " (every other layer)"
        } else {
            ""
        };
        notes.push(format!(
            "sliding_window {w}{which}: attention is costed over the whole sequence S, as an eager kernel computes and masks it."
        ));
    }
    if let Some(n) = spec.note {
        notes.push(n.to_string());
    }
    routing_and_capping(c, model_type, &mut notes)?;
    let class = spec.class;
    let module = if tied {
        format!("{class} (head tied to the token embedding)")
    } else {
        class.to_string()
    };
    Ok(Plan {
        family,
        module,
        symbols,
        seq,
        notes,
    })
}

/// The attention's sizes: hidden size, heads, key/value heads (all heads when absent) and the
/// head dimension (stated, the family's default, or hidden size ÷ heads).
fn head_symbols(
    c: &Config,
    spec: &Decoder,
    src: &dyn Fn(&str) -> String,
) -> Result<(u64, u64, Sym, Sym)> {
    let h = c.uint("hidden_size")?;
    let nh = c.uint("num_attention_heads")?;
    let kv = match c.opt_uint("num_key_value_heads")? {
        Some(kv) => sym("KV", kv, src("num_key_value_heads")),
        None => sym(
            "KV",
            nh,
            src("num_key_value_heads absent = num_attention_heads"),
        ),
    };
    divide(
        c,
        "num_key_value_heads",
        nh,
        kv.value,
        "num_attention_heads must be a multiple of num_key_value_heads",
    )?;
    let d = match (c.opt_uint("head_dim")?, spec.head_dim_default) {
        (Some(d), _) => sym("D", d, src("head_dim")),
        (None, Some(d)) => sym(
            "D",
            d,
            src(&format!(
                "head_dim absent = {d}, the {} default",
                spec.class
            )),
        ),
        (None, None) => {
            let d = divide(
                c,
                "num_attention_heads",
                h,
                nh,
                "head_dim absent: hidden_size must split into heads",
            )?;
            sym(
                "D",
                d,
                src("head_dim absent = hidden_size / num_attention_heads"),
            )
        }
    };
    Ok((h, nh, kv, d))
}

/// A mixture of experts' symbols (experts, top-K, dropless capacity, Qwen2-MoE's shared
/// expert), refusing the layouts the families cannot state.
fn expert_symbols(
    c: &Config,
    spec: &Decoder,
    model_type: &str,
    src: &dyn Fn(&str) -> String,
    symbols: &mut Vec<Sym>,
) -> Result<()> {
    if let Some(experts) = spec.experts {
        let e = field(c, "E", experts, src)?;
        let k = field(c, "K", "num_experts_per_tok", src)?;
        if k.value > e.value {
            return Err(c.error(
                "num_experts_per_tok",
                None,
                format!(
                    "num_experts_per_tok {} is more than num_local_experts {}",
                    k.value, e.value
                ),
            ));
        }
        symbols.push(e);
        symbols.push(k);
        symbols.push(sym(
            "C",
            1,
            "dropless routing, as Hugging Face's sparse MoE blocks: no token is dropped or padded"
                .into(),
        ));
    }
    if model_type == "qwen2_moe" {
        expect_bool(
            c,
            "qkv_bias",
            true,
            true,
            "the qwen2_moe family has biases on the query, key and value projections",
        )?;
        symbols.push(match c.opt_uint("shared_expert_intermediate_size")? {
            Some(fs) => sym("FS", fs, src("shared_expert_intermediate_size")),
            None => sym(
                "FS",
                5632,
                src("shared_expert_intermediate_size absent = 5632, the Qwen2MoeConfig default"),
            ),
        });
    }
    if model_type == "qwen3_moe" || model_type == "qwen2_moe" {
        if c.opt_uint("decoder_sparse_step")?.unwrap_or(1) != 1 {
            return Err(c.error(
                "decoder_sparse_step",
                None,
                format!("decoder_sparse_step other than 1 is not supported for model_type `{model_type}`: the {model_type} family makes every layer sparse"),
            ));
        }
        if c.get("mlp_only_layers")
            .and_then(|v| v.as_array())
            .is_some_and(|a| !a.is_empty())
        {
            return Err(c.error(
                "mlp_only_layers",
                None,
                format!("a non-empty mlp_only_layers is not supported for model_type `{model_type}`: the {model_type} family makes every layer sparse"),
            ));
        }
    }
    Ok(())
}

/// The Qwen MoE families' top-K renormalisation as each family computes it, and Gemma 2's
/// soft-capping (a note; refused when switched off).
fn routing_and_capping(c: &Config, model_type: &str, notes: &mut Vec<String>) -> Result<()> {
    if model_type == "qwen2_moe" && c.opt_bool("norm_topk_prob")? == Some(true) {
        return Err(c.error(
            "norm_topk_prob",
            None,
            "norm_topk_prob true is not supported for model_type `qwen2_moe`: the qwen2_moe family keeps the top-K weights as the softmax gives them, without renormalising",
        ));
    }
    if model_type == "qwen3_moe" && c.opt_bool("norm_topk_prob")? != Some(true) {
        let how = if c.get("norm_topk_prob").is_some() {
            "false"
        } else {
            "absent (false, the Qwen3MoeConfig default)"
        };
        return Err(c.error(
            "norm_topk_prob",
            None,
            format!("norm_topk_prob {how} is not supported for model_type `qwen3_moe`: the qwen3_moe family renormalises the top-K weights"),
        ));
    }
    if model_type == "gemma2" {
        for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
            if c.is_null(key) {
                return Err(c.error(
                    key,
                    None,
                    format!("{key} null is not supported for model_type `gemma2`: the gemma2 family soft-caps scores and logits"),
                ));
            }
        }
        notes
            .push("Soft-capping: attention scores and logits pass through cap·tanh(x/cap).".into());
    }
    Ok(())
}

/// Each expert's capacity per sequence, C·S·K/E slots at C = 1, must be whole: with a number of
/// experts that does not divide S·K (Qwen1.5-MoE's 60), the default length is a shorter one for
/// which it is, step·2^j with step = E / gcd(E, K): of the multiples of step up to the
/// pre-training length, the one with the most factors of two (the sequence still splits evenly
/// across power-of-two device counts).
fn whole_capacity(seq: Sym, e: u64, k: u64) -> Sym {
    let step = e / gcd(e, k);
    if seq.value.is_multiple_of(step) || seq.value < step {
        return seq;
    }
    let twos = 1u64 << (seq.value / step).ilog2();
    let whole = step * twos;
    sym(
        "S",
        whole,
        format!(
            "{} rounded down to {whole} = {step}·{twos}, so that each of the {e} experts has C·S·K/E whole capacity slots per sequence",
            seq.source
        ),
    )
}

/// The default sequence length: the pre-training length of a scaled rotary block, else
/// max_position_embeddings.
fn pretraining_length(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Sym> {
    for block in ["rope_parameters", "rope_scaling"] {
        if let Some(n) = c.nested_uint(block, "original_max_position_embeddings")? {
            return Ok(sym(
                "S",
                n,
                src(&format!(
                    "{block}.original_max_position_embeddings (the pre-training length)"
                )),
            ));
        }
    }
    Ok(sym(
        "S",
        c.uint("max_position_embeddings")?,
        src("max_position_embeddings"),
    ))
}

/// DeepSeek-V2 (`deepseek_v2`): multi-head latent attention with full-rank queries, leading
/// dense layers, then routed and shared experts, as Hugging Face's DeepseekV2ForCausalLM.
fn deepseek_v2(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    let (qr, family) = deepseek_v2_settings(c)?;
    let l = c.uint("num_hidden_layers")?;
    let ld = dense_layers(c, l)?;
    let e = field(c, "E", "n_routed_experts", src)?;
    let k = field(c, "K", "num_experts_per_tok", src)?;
    if k.value > e.value {
        return Err(c.error(
            "num_experts_per_tok",
            None,
            format!(
                "num_experts_per_tok {} is more than n_routed_experts {}",
                k.value, e.value
            ),
        ));
    }
    let groups = match qr {
        Some(qr) => expert_groups(c, qr, e.value, k.value, src)?,
        None => Vec::new(),
    };
    let seq = whole_capacity(pretraining_length(c, src)?, e.value, k.value);
    let scaling = c
        .number_text(None, "routed_scaling_factor")
        .unwrap_or_else(|| "1.0 (absent)".into());
    let mut symbols = vec![
        sym("L", l, src("num_hidden_layers")),
        sym("LD", ld, src("first_k_dense_replace")),
        field(c, "H", "hidden_size", src)?,
        field(c, "NH", "num_attention_heads", src)?,
        field(c, "DN", "qk_nope_head_dim", src)?,
        field(c, "DR", "qk_rope_head_dim", src)?,
        field(c, "DV", "v_head_dim", src)?,
        field(c, "R", "kv_lora_rank", src)?,
        field(c, "FD", "intermediate_size", src)?,
        field(c, "F", "moe_intermediate_size", src)?,
        field(c, "NS", "n_shared_experts", src)?,
        field(c, "V", "vocab_size", src)?,
        e,
        k,
        sym(
            "C",
            1,
            "dropless routing, as Hugging Face's sparse MoE blocks: no token is dropped or padded"
                .into(),
        ),
    ];
    symbols.extend(groups);
    let notes = vec![
        format!("Routed weights scaled by routed_scaling_factor {scaling}; rotary scaling changes constants, not costs."),
        "Multi-head latent attention: keys and values are expanded from the latent to every head, as transformers computes them (no absorbed projections).".to_string(),
    ];
    Ok(Plan {
        family,
        module: "DeepseekV2ForCausalLM".into(),
        symbols,
        seq,
        notes,
    })
}
/// Checks the DeepSeek-V2 settings the family counts as they are (SwiGLU, a softmax gate kept
/// unnormalised, every layer after the dense ones sparse, an untied head, the routing that goes
/// with the queries' rank), and returns the queries' low rank (`None`: full rank) and the family.
fn deepseek_v2_settings(c: &Config) -> Result<(Option<u64>, &'static str)> {
    expect_one_of(
        c,
        "hidden_act",
        "silu",
        SILU,
        "the family's MLPs are SwiGLU",
    )?;
    refuse_foreign(c, &["kv_lora_rank", "n_shared_experts", "q_lora_rank"])?;
    // Queries: full rank (q_lora_rank null, DeepSeek-V2-Lite) with greedy routing, the family
    // deepseek_v2; or through a low-rank bottleneck with group-limited routing (DeepSeek-V2), the
    // family deepseek_v2_qlora. The class default of q_lora_rank is 1536, so it must be stated.
    if c.raw("q_lora_rank").is_none() {
        return Err(c.error(
            "q_lora_rank",
            None,
            "field `q_lora_rank` absent (1536, the DeepseekV2Config default) is not supported for model_type `deepseek_v2`: state it, null for full-rank queries (family deepseek_v2) or a number for low-rank ones (family deepseek_v2_qlora)",
        ));
    }
    let qr = c.opt_uint("q_lora_rank")?;
    let (family, method) = match qr {
        None => ("deepseek_v2", "greedy"),
        Some(_) => ("deepseek_v2_qlora", "group_limited_greedy"),
    };
    let why = match qr {
        None => "with full-rank queries (q_lora_rank null) the family deepseek_v2 ranks every expert at once",
        Some(_) => "with low-rank queries (q_lora_rank set) the family deepseek_v2_qlora ranks groups of experts first",
    };
    expect_one_of(c, "topk_method", "greedy", &[method], why)?;
    expect_one_of(
        c,
        "scoring_func",
        "softmax",
        &["softmax"],
        "the family's gate, as DeepseekV2TopkRouter, is a softmax",
    )?;
    if c.opt_bool("norm_topk_prob")? == Some(true) {
        return Err(c.error(
            "norm_topk_prob",
            None,
            "norm_topk_prob true is not supported for model_type `deepseek_v2`: DeepseekV2TopkRouter keeps the top-K weights as the softmax gives them, and the family counts that; a renormalising implementation would differ",
        ));
    }
    if c.opt_uint("moe_layer_freq")?.unwrap_or(1) != 1 {
        return Err(c.error(
            "moe_layer_freq",
            None,
            "moe_layer_freq other than 1 is not supported for model_type `deepseek_v2`: the family makes every layer after the first first_k_dense_replace sparse",
        ));
    }
    if c.opt_bool("tie_word_embeddings")? == Some(true) {
        return Err(c.error(
            "tie_word_embeddings",
            None,
            "tie_word_embeddings true is not supported for model_type `deepseek_v2`: the family's head is untied",
        ));
    }
    Ok((qr, family))
}

/// The leading dense layers (`first_k_dense_replace`, which must be stated): fewer than the `l`
/// layers, so that at least one sparse layer follows them.
fn dense_layers(c: &Config, l: u64) -> Result<u64> {
    match c.opt_uint("first_k_dense_replace")? {
        Some(ld) if ld < l => Ok(ld),
        other => {
            let v = other.map_or(
                "absent (0, the DeepseekV2Config default)".to_string(),
                |v| v.to_string(),
            );
            Err(c.error(
                "first_k_dense_replace",
                None,
                format!("first_k_dense_replace {v} is not supported for model_type `deepseek_v2`: the family has at least one dense layer first and at least one sparse layer after them (num_hidden_layers {l})"),
            ))
        }
    }
}

/// The symbols of group-limited routing with low-rank queries of rank `qr`: the rank, the groups
/// the `e` routed experts split into (`n_group`) and the groups each token's `k` experts are
/// chosen from (`topk_group`), checked to leave enough experts.
fn expert_groups(
    c: &Config,
    qr: u64,
    e: u64,
    k: u64,
    src: &dyn Fn(&str) -> String,
) -> Result<Vec<Sym>> {
    let ng = field(c, "NG", "n_group", src)?;
    let tg = field(c, "TG", "topk_group", src)?;
    divide(
        c,
        "n_group",
        e,
        ng.value,
        "n_routed_experts must split into n_group equal groups",
    )?;
    if tg.value > ng.value || k > tg.value * (e / ng.value) {
        return Err(c.error(
            "topk_group",
            None,
            format!(
                "topk_group {} of n_group {} leaves fewer than num_experts_per_tok {} experts to choose from",
                tg.value, ng.value, k
            ),
        ));
    }
    Ok(vec![sym("QR", qr, src("q_lora_rank")), ng, tg])
}

/// A number field as a symbol, or the `transformers` class default when absent (the source says
/// so); `null` is refused, naming the field.
fn field_or(
    c: &Config,
    name: &'static str,
    key: &str,
    default: u64,
    class: &str,
    src: &dyn Fn(&str) -> String,
) -> Result<Sym> {
    if c.is_null(key) {
        return Err(c.error(
            key,
            None,
            format!(
                "field `{key}` null is not supported for {}: the family needs a number (the {class} default is {default})",
                c.context
            ),
        ));
    }
    Ok(match c.opt_uint(key)? {
        Some(v) => sym(name, v, src(key)),
        None => sym(
            name,
            default,
            src(&format!("{key} absent = {default}, the {class} default")),
        ),
    })
}

/// The transformers config class whose defaults a DeepSeek-V3 import cites.
const DEEPSEEK_V3_CLASS: &str = "DeepseekV3Config";

/// DeepSeek-V3 (`deepseek_v3`): multi-head latent attention with low-rank queries, leading dense
/// layers, then routed experts behind a sigmoid, group-limited, renormalised gate and shared
/// experts, as Hugging Face's DeepseekV3ForCausalLM. Absent fields take the DeepseekV3Config
/// defaults (which are DeepSeek-V3's own sizes).
fn deepseek_v3(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "hidden_act",
        "silu",
        SILU,
        "the family's MLPs are SwiGLU",
    )?;
    refuse_foreign(c, &["kv_lora_rank", "n_shared_experts", "q_lora_rank"])?;
    refuse_other_deepseek(c)?;
    let nh = field_or(c, "NH", "num_attention_heads", 128, DEEPSEEK_V3_CLASS, src)?;
    if let Some(kv) = c.opt_uint("num_key_value_heads")? {
        if kv != nh.value {
            return Err(c.error(
                "num_key_value_heads",
                None,
                format!(
                    "num_key_value_heads {kv} is not supported for model_type `deepseek_v3`: latent attention expands keys and values to every one of the num_attention_heads {} heads",
                    nh.value
                ),
            ));
        }
    }
    let l = field_or(c, "L", "num_hidden_layers", 61, DEEPSEEK_V3_CLASS, src)?;
    let ld = field_or(c, "LD", "first_k_dense_replace", 3, DEEPSEEK_V3_CLASS, src)?;
    if ld.value == 0 || ld.value >= l.value {
        return Err(c.error(
            "first_k_dense_replace",
            None,
            format!(
                "first_k_dense_replace {} is not supported for model_type `deepseek_v3`: the family has at least one dense layer first and at least one sparse layer after them (num_hidden_layers {})",
                ld.value, l.value
            ),
        ));
    }
    let (e, k, ng, tg) = deepseek_routing(c, src)?;
    // At least one shared expert: a count of 0 is refused as no positive integer.
    let ns = field_or(c, "NS", "n_shared_experts", 1, DEEPSEEK_V3_CLASS, src)?;
    let seq = whole_capacity(pretraining_length(c, src)?, e.value, k.value);
    let scaling = c
        .number_text(None, "routed_scaling_factor")
        .unwrap_or_else(|| "2.5 (absent, the DeepseekV3Config default)".into());
    let sparse = l.value - ld.value;
    let mut notes = vec![
        format!("Routed weights renormalised and scaled by routed_scaling_factor {scaling}; rotary scaling changes constants, not costs."),
        "Multi-head latent attention: keys and values are expanded from the latent to every head, as transformers computes them (no absorbed projections).".to_string(),
        format!(
            "Not counted, as not learnable parameters of DeepseekV3ForCausalLM: each sparse layer's e_score_correction_bias, a buffer of {} values ({} in the {sparse} sparse layers), stored in the checkpoint.",
            e.value,
            sparse * e.value
        ),
    ];
    for key in ["num_nextn_predict_layers", "num_mtp_layers"] {
        // A count, zero included (no module): read as it is, not as a positive size.
        if let Some(n) = c.get(key).and_then(|v| v.as_u64()) {
            if n > 0 {
                notes.push(format!(
                    "Not counted: the config's {key} {n} multi-token-prediction module(s), which DeepseekV3ForCausalLM does not build (transformers skips their weights when loading and runs them only as a separate draft model in generation)."
                ));
            }
        }
    }
    if c.get("quantization_config").is_some() {
        notes.push("The checkpoint's quantization_config (stored weight format and scales) is not modelled: the counts are of the model as transformers builds it from the config; the number format is chosen when ranking.".to_string());
    }
    let qr = field_or(c, "QR", "q_lora_rank", 1536, DEEPSEEK_V3_CLASS, src)?;
    let symbols =
        vec![
        l,
        ld,
        field_or(c, "H", "hidden_size", 7168, DEEPSEEK_V3_CLASS, src)?,
        nh,
        field_or(c, "DN", "qk_nope_head_dim", 128, DEEPSEEK_V3_CLASS, src)?,
        field_or(c, "DR", "qk_rope_head_dim", 64, DEEPSEEK_V3_CLASS, src)?,
        field_or(c, "DV", "v_head_dim", 128, DEEPSEEK_V3_CLASS, src)?,
        field_or(c, "R", "kv_lora_rank", 512, DEEPSEEK_V3_CLASS, src)?,
        qr,
        field_or(c, "FD", "intermediate_size", 18432, DEEPSEEK_V3_CLASS, src)?,
        field_or(c, "F", "moe_intermediate_size", 2048, DEEPSEEK_V3_CLASS, src)?,
        ns,
        field_or(c, "V", "vocab_size", 129280, DEEPSEEK_V3_CLASS, src)?,
        e,
        k,
        ng,
        tg,
        sym(
            "C",
            1,
            "dropless routing, as Hugging Face's sparse MoE blocks: no token is dropped or padded"
                .into(),
        ),
    ];
    Ok(Plan {
        family: "deepseek_v3",
        module: "DeepseekV3ForCausalLM".into(),
        symbols,
        seq,
        notes,
    })
}

/// Refuses the DeepSeek-V3 configurations that describe another model: no query compression,
/// another router, unnormalised top-K, sparse layers at intervals, a tied head.
fn refuse_other_deepseek(c: &Config) -> Result<()> {
    if c.raw("q_lora_rank").is_some_and(|v| v.is_null()) {
        return Err(c.error(
            "q_lora_rank",
            None,
            "field `q_lora_rank` null (full-rank queries) is not supported for model_type `deepseek_v3`: the family deepseek_v3 has low-rank queries (q_a_proj, q_a_layernorm, q_b_proj)",
        ));
    }
    // DeepseekV3TopkRouter always scores with a sigmoid and ranks groups with the bias added
    // (`noaux_tc`); a config that says otherwise describes another model.
    expect_one_of(
        c,
        "topk_method",
        "noaux_tc",
        &["noaux_tc"],
        "DeepseekV3TopkRouter ranks groups of experts by their biased sigmoid scores, as the family's gate",
    )?;
    expect_one_of(
        c,
        "scoring_func",
        "sigmoid",
        &["sigmoid"],
        "the family's gate, as DeepseekV3TopkRouter, is a sigmoid",
    )?;
    if c.opt_bool("norm_topk_prob")? == Some(false) {
        return Err(c.error(
            "norm_topk_prob",
            None,
            "norm_topk_prob false is not supported for model_type `deepseek_v3`: the family's gate renormalises the top-K weights (the DeepseekV3Config default, true)",
        ));
    }
    if c.opt_uint("moe_layer_freq")?.unwrap_or(1) != 1 {
        return Err(c.error(
            "moe_layer_freq",
            None,
            "moe_layer_freq other than 1 is not supported for model_type `deepseek_v3`: DeepseekV3ForCausalLM, as the family, makes every layer after the first first_k_dense_replace sparse",
        ));
    }
    if c.opt_bool("tie_word_embeddings")? == Some(true) {
        return Err(c.error(
            "tie_word_embeddings",
            None,
            "tie_word_embeddings true is not supported for model_type `deepseek_v3`: the family's head is untied",
        ));
    }
    Ok(())
}

/// DeepSeek-V3's routing sizes: routed experts, top-K, groups and the groups chosen, checked as
/// DeepseekV3TopkRouter needs them.
fn deepseek_routing(c: &Config, src: &dyn Fn(&str) -> String) -> Result<(Sym, Sym, Sym, Sym)> {
    let e = field_or(c, "E", "n_routed_experts", 256, DEEPSEEK_V3_CLASS, src)?;
    let k = field_or(c, "K", "num_experts_per_tok", 8, DEEPSEEK_V3_CLASS, src)?;
    let ng = field_or(c, "NG", "n_group", 8, DEEPSEEK_V3_CLASS, src)?;
    let tg = field_or(c, "TG", "topk_group", 4, DEEPSEEK_V3_CLASS, src)?;
    let per = divide(
        c,
        "n_group",
        e.value,
        ng.value,
        "n_routed_experts must split into n_group equal groups",
    )?;
    if per < 2 {
        return Err(c.error(
            "n_group",
            None,
            format!(
                "n_group {} leaves {per} expert per group: DeepseekV3TopkRouter scores each group by its two largest scores",
                ng.value
            ),
        ));
    }
    if k.value == 0 || tg.value == 0 || tg.value > ng.value || k.value > tg.value * per {
        return Err(c.error(
            "topk_group",
            None,
            format!(
                "topk_group {} of n_group {} leaves fewer than num_experts_per_tok {} experts to choose from",
                tg.value, ng.value, k.value
            ),
        ));
    }
    Ok((e, k, ng, tg))
}

fn t5(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    let ff = c
        .opt_str("feed_forward_proj")?
        .unwrap_or("relu")
        .to_string();
    let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    let family = match (ff.as_str(), tied) {
        ("relu", true) => "t5",
        ("gated-gelu", false) => "t5_v1_1",
        _ => {
            let key = if c.get("feed_forward_proj").is_some() {
                "feed_forward_proj"
            } else {
                "tie_word_embeddings"
            };
            return Err(c.error(
                key,
                None,
                format!(
                    "feed_forward_proj `{ff}` with tie_word_embeddings {tied} is not supported for model_type `t5` (supported: relu with a tied head, T5 v1.0; gated-gelu with an untied head, T5 v1.1 and FLAN-T5)"
                ),
            ));
        }
    };
    let l = field(c, "L", "num_layers", src)?;
    let ld = match c.opt_uint("num_decoder_layers")? {
        Some(n) => sym("LD", n, src("num_decoder_layers")),
        None => sym("LD", l.value, src("num_decoder_layers absent = num_layers")),
    };
    let nb = match c.opt_uint("relative_attention_num_buckets")? {
        Some(n) => sym("NB", n, src("relative_attention_num_buckets")),
        None => sym("NB", 32, src("relative_attention_num_buckets absent = 32")),
    };
    let seq = match c.opt_uint("n_positions")? {
        Some(n) => sym("S", n, src("n_positions")),
        None => sym(
            "S",
            512,
            src("n_positions absent: 512, T5's pre-training input length"),
        ),
    };
    let module = match family {
        "t5" => "T5ForConditionalGeneration (v1.0, head tied to the shared embedding)",
        _ => "T5ForConditionalGeneration (v1.1, gated-GELU, untied head)",
    };
    Ok(Plan {
        family,
        module: module.into(),
        symbols: vec![
            l,
            ld,
            field(c, "H", "d_model", src)?,
            field(c, "NH", "num_heads", src)?,
            field(c, "DKV", "d_kv", src)?,
            field(c, "F", "d_ff", src)?,
            field(c, "V", "vocab_size", src)?,
            nb,
        ],
        seq,
        notes: vec![],
    })
}

/// A boolean field that must have the value the family fixes (`default` when absent).
fn expect_bool(c: &Config, key: &str, default: bool, want: bool, why: &str) -> Result<()> {
    let v = c.opt_bool(key)?.unwrap_or(default);
    if v == want {
        return Ok(());
    }
    let how = if c.get(key).is_some() {
        String::new()
    } else {
        " (its default)".to_string()
    };
    Err(c.error(
        key,
        None,
        format!("{key} {v}{how} is not supported for {}: {why}", c.context),
    ))
}

/// Hidden size and heads, with the head dimension hidden_size / heads.
fn heads(c: &Config, src: &dyn Fn(&str) -> String) -> Result<(Sym, Sym, Sym)> {
    let h = c.uint("hidden_size")?;
    let nh = c.uint("num_attention_heads")?;
    let d = divide(
        c,
        "num_attention_heads",
        h,
        nh,
        "hidden_size must split into heads",
    )?;
    Ok((
        sym("H", h, src("hidden_size")),
        sym("NH", nh, src("num_attention_heads")),
        sym("D", d, src("head dim = hidden_size / num_attention_heads")),
    ))
}

/// The rotated dimensions of a head under partial rotary: `int(fraction · D)`, as transformers
/// computes it, strictly between 0 and D (the families split each head in two).
fn rotary_dims(
    c: &Config,
    key: &str,
    default: f64,
    d: u64,
    src: &dyn Fn(&str) -> String,
) -> Result<Sym> {
    let (fraction, from) = match c.get(key) {
        None => (default, format!("{key} absent = {default}")),
        Some(v) => match v.as_f64() {
            Some(f) => (f, key.to_string()),
            None => {
                return Err(c.error(
                    key,
                    None,
                    format!("field `{key}` must be a number, found {v}"),
                ))
            }
        },
    };
    let rd = (fraction * d as f64).trunc();
    if !(rd >= 1.0 && rd < d as f64) {
        return Err(c.error(
            key,
            None,
            format!(
                "{key} {fraction} is not supported for {}: the family rotates part of each head, between 1 and {} of its {d} dimensions",
                c.context,
                d - 1
            ),
        ));
    }
    Ok(sym(
        "RD",
        rd as u64,
        src(&format!("int({from} × head dim {d})")),
    ))
}

fn phi(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "hidden_act",
        "gelu_new",
        &["gelu_new", "gelu", "gelu_pytorch_tanh", "gelu_fast"],
        "the phi family's MLP is GELU",
    )?;
    refuse_foreign(
        c,
        &[
            "partial_rotary_factor",
            "resid_pdrop",
            "embd_pdrop",
            "attention_dropout",
        ],
    )?;
    expect_bool(
        c,
        "tie_word_embeddings",
        false,
        false,
        "the phi family's head is untied, with a bias",
    )?;
    let (h, nh, d) = heads(c, src)?;
    if let Some(kv) = c.opt_uint("num_key_value_heads")? {
        if kv != nh.value {
            return Err(c.error(
                "num_key_value_heads",
                None,
                format!("num_key_value_heads {kv} is not supported for model_type `phi`: the phi family has multi-head attention ({} heads)", nh.value),
            ));
        }
    }
    let rd = rotary_dims(c, "partial_rotary_factor", 0.5, d.value, src)?;
    parallel_block_plan(
        c,
        ("phi", "PhiForCausalLM"),
        [h, nh, d, rd],
        "Parallel attention and MLP from one layernorm; rotary positions on RD dimensions of each head.",
        src,
    )
}

/// The plan of a parallel-block family with partial rotary positions: L, H, NH, D and RD (given),
/// F, V and the sequence length from the config.
fn parallel_block_plan(
    c: &Config,
    (family, module): (&'static str, &str),
    [h, nh, d, rd]: [Sym; 4],
    note: &str,
    src: &dyn Fn(&str) -> String,
) -> Result<Plan> {
    let seq = field(c, "S", "max_position_embeddings", src)?;
    Ok(Plan {
        family,
        module: module.into(),
        symbols: vec![
            field(c, "L", "num_hidden_layers", src)?,
            h,
            nh,
            d,
            rd,
            field(c, "F", "intermediate_size", src)?,
            field(c, "V", "vocab_size", src)?,
        ],
        seq,
        notes: vec![note.into()],
    })
}

fn gpt_neox(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "hidden_act",
        "gelu",
        &["gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"],
        "the gpt_neox family's MLP is GELU",
    )?;
    refuse_foreign(
        c,
        &[
            "use_parallel_residual",
            "rotary_pct",
            "partial_rotary_factor",
            "attention_bias",
        ],
    )?;
    expect_bool(
        c,
        "use_parallel_residual",
        true,
        true,
        "the gpt_neox family runs attention and the MLP in parallel",
    )?;
    expect_bool(
        c,
        "attention_bias",
        true,
        true,
        "the gpt_neox family's attention projections have biases",
    )?;
    expect_bool(
        c,
        "tie_word_embeddings",
        false,
        false,
        "the gpt_neox family's head (embed_out) is untied",
    )?;
    for key in ["hidden_dropout", "attention_dropout"] {
        expect_number(c, key, 0.0, "the gpt_neox family has no dropout")?;
    }
    let (h, nh, d) = heads(c, src)?;
    let rd = if c.get("rotary_pct").is_some() || c.get("partial_rotary_factor").is_none() {
        rotary_dims(c, "rotary_pct", 0.25, d.value, src)?
    } else {
        rotary_dims(c, "partial_rotary_factor", 0.25, d.value, src)?
    };
    parallel_block_plan(
        c,
        ("gpt_neox", "GPTNeoXForCausalLM"),
        [h, nh, d, rd],
        "Parallel attention and MLP, each with its own layernorm; rotary positions on RD dimensions of each head.",
        src,
    )
}

fn falcon(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "activation",
        "gelu",
        &["gelu"],
        "the falcon family's MLP is GELU",
    )?;
    refuse_foreign(
        c,
        &["parallel_attn", "multi_query", "new_decoder_architecture"],
    )?;
    expect_bool(
        c,
        "parallel_attn",
        true,
        true,
        "the falcon family runs attention and the MLP in parallel",
    )?;
    expect_bool(
        c,
        "new_decoder_architecture",
        false,
        false,
        "the falcon family has the original layout (one layernorm per layer, as Falcon-7B)",
    )?;
    expect_bool(
        c,
        "alibi",
        false,
        false,
        "the falcon family has rotary positions",
    )?;
    expect_bool(
        c,
        "apply_residual_connection_post_layernorm",
        false,
        false,
        "the falcon family adds the residual before the layernorm",
    )?;
    expect_bool(
        c,
        "tie_word_embeddings",
        true,
        true,
        "the falcon family's head is tied to the embedding",
    )?;
    for key in ["hidden_dropout", "attention_dropout"] {
        expect_number(c, key, 0.0, "the falcon family has no dropout")?;
    }
    let (h, nh, d) = heads(c, src)?;
    let kv = if c.opt_bool("multi_query")?.unwrap_or(true) {
        sym(
            "KV",
            1,
            src(if c.get("multi_query").is_some() {
                "multi_query true: one key/value head"
            } else {
                "multi_query absent = true: one key/value head"
            }),
        )
    } else {
        sym(
            "KV",
            nh.value,
            src("multi_query false: key/value heads = num_attention_heads"),
        )
    };
    let f = match c.opt_uint("ffn_hidden_size")? {
        Some(f) => sym("F", f, src("ffn_hidden_size")),
        None => sym(
            "F",
            4 * h.value,
            src("ffn_hidden_size absent = 4*hidden_size"),
        ),
    };
    let seq = match c.opt_uint("max_position_embeddings")? {
        Some(n) => sym("S", n, src("max_position_embeddings")),
        None => sym(
            "S",
            2048,
            src("max_position_embeddings absent = 2048, the FalconConfig default"),
        ),
    };
    Ok(Plan {
        family: "falcon",
        module: "FalconForCausalLM (head tied to the word embedding)".into(),
        symbols: vec![
            field(c, "L", "num_hidden_layers", src)?,
            h,
            nh,
            kv,
            d,
            f,
            field(c, "V", "vocab_size", src)?,
        ],
        seq,
        notes: vec!["Parallel attention and MLP from one layernorm; the fused query_key_value is counted as three projections.".into()],
    })
}

fn opt(c: &Config, src: &dyn Fn(&str) -> String) -> Result<Plan> {
    expect_one_of(
        c,
        "activation_function",
        "relu",
        &["relu"],
        "the opt family's MLP is ReLU",
    )?;
    refuse_foreign(c, &[])?;
    expect_bool(
        c,
        "do_layer_norm_before",
        true,
        true,
        "the opt family is pre-layernorm (OPT-350M is post-layernorm)",
    )?;
    expect_bool(
        c,
        "enable_bias",
        true,
        true,
        "the opt family's projections have biases",
    )?;
    expect_bool(
        c,
        "_remove_final_layer_norm",
        false,
        false,
        "the opt family has a final layernorm",
    )?;
    expect_bool(
        c,
        "tie_word_embeddings",
        true,
        true,
        "the opt family's head is tied to the token embedding",
    )?;
    let (h, nh, _) = heads(c, src)?;
    if let Some(w) = c.opt_uint("word_embed_proj_dim")? {
        if w != h.value {
            return Err(c.error(
                "word_embed_proj_dim",
                None,
                format!("word_embed_proj_dim {w} is not supported for model_type `opt`: the opt family has no projection between an embedding of another width and hidden_size {}", h.value),
            ));
        }
    }
    let p = field(c, "P", "max_position_embeddings", src)?;
    let seq = sym("S", p.value, src("max_position_embeddings"));
    Ok(Plan {
        family: "opt",
        module: "OPTForCausalLM (head tied to the token embedding)".into(),
        symbols: vec![
            field(c, "L", "num_hidden_layers", src)?,
            h,
            nh,
            field(c, "F", "ffn_dim", src)?,
            field(c, "V", "vocab_size", src)?,
            p,
        ],
        seq,
        notes: vec![],
    })
}
