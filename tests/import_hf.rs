//! Hugging Face `config.json` import: every fixture gives the parameters and FLOPs of the
//! hand-written model file of the same network, or the published count (zoo_facts.md); config
//! variants (tied heads, `rope_parameters`, defaults) and bad configs; the command line end to end.

use assert_cmd::Command;
use num_bigint::BigInt;
use std::path::{Path, PathBuf};
use symshard::diag::Source;
use symshard::import::{import_hf, model_source_from_hf};
use symshard::model::{model_cost, Model, ModelLoader};
use symshard::sym::{Bindings, Rational};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn fixture(name: &str) -> PathBuf {
    root()
        .join("tests/fixtures/hf")
        .join(format!("{name}.json"))
}

fn loader() -> ModelLoader {
    ModelLoader::embedded().expect("shipped rules load")
}

/// Parameters, forward and backward FLOPs (matmul-like and other) and saved bytes, evaluated
/// under the model's own values.
fn numbers(m: &Model) -> Vec<(&'static str, Rational)> {
    numbers_at(m, &m.values)
}

fn numbers_at(m: &Model, v: &Bindings) -> Vec<(&'static str, Rational)> {
    let c = model_cost(m);
    let ev = |p: &symshard::sym::Poly| p.eval(v).unwrap_or_else(|e| panic!("{}: {e}", m.name));
    vec![
        ("parameters", ev(&c.params)),
        ("forward matmul-like", ev(&c.forward.matmul)),
        ("forward other", ev(&c.forward.other)),
        ("backward matmul-like", ev(&c.backward.matmul)),
        ("backward other", ev(&c.backward.other)),
        ("activations", ev(&c.activations)),
    ]
}

fn imported(name: &str) -> Model {
    loader()
        .resolve(fixture(name).to_str().unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn int(n: i64) -> Rational {
    Rational::from_integer(BigInt::from(n))
}

fn params(m: &Model) -> Rational {
    numbers(m)[0].1.clone()
}

/// Each config ↔ the shipped model file written by hand from the same config.
#[test]
fn every_fixture_matches_its_hand_written_model() {
    let pairs = [
        ("gpt2", "gpt2-124m"),
        ("gpt2-xl", "gpt2-1.5b"),
        ("bert-base-uncased", "bert-base"),
        ("bert-large-uncased", "bert-large"),
        ("t5-base", "t5-base"),
        ("Llama-2-7b-hf", "llama2-7b"),
        ("Llama-2-70b-hf", "llama2-70b"),
        ("Meta-Llama-3-8B", "llama3-8b"),
        ("Meta-Llama-3-70B", "llama3-70b"),
        ("Meta-Llama-3.1-405B", "llama3-405b"),
        ("Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("DeepSeek-V3", "deepseek-v3"),
    ];
    let l = loader();
    for (config, model) in pairs {
        let a = imported(config);
        let b = l.resolve(model).unwrap();
        assert_eq!(a.family, b.family, "{config}");
        // A config says nothing of the batch: every other value, the sequence included, comes
        // from the config and must agree; the batch is the hand-written file's.
        let mut values = a.values.clone();
        values.insert("B".into(), b.values["B"].clone());
        assert_eq!(values, b.values, "{config} ↔ {model}");
        assert_eq!(numbers_at(&a, &values), numbers(&b), "{config} ↔ {model}");
    }
}

/// zoo_facts.md: HF Mistral-7B-v0.1 7,241,732,096 (GGUF general.parameter_count); HF API
/// Mixtral-8x7B-v0.1 safetensors.total 46,702,792,704; HF API google/flan-t5-base
/// safetensors.total 247,577,856 (gated-GELU, untied head).
#[test]
fn published_counts_of_models_without_a_hand_written_file() {
    assert_eq!(params(&imported("Mistral-7B-v0.1")), int(7_241_732_096));
    assert_eq!(params(&imported("Mixtral-8x7B-v0.1")), int(46_702_792_704));
    let flan = imported("flan-t5-base");
    assert_eq!(flan.family.as_deref(), Some("t5_v1_1"));
    assert_eq!(params(&flan), int(247_577_856));
}

/// A config edited as JSON and written to a scratch file named `name`.
fn variant(
    name: &str,
    base: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> PathBuf {
    let text = std::fs::read_to_string(fixture(base)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(v.as_object_mut().unwrap());
    write(name, &serde_json::to_string_pretty(&v).unwrap())
}

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("symshard-import-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn load(path: &Path) -> Result<Model, String> {
    loader()
        .resolve(path.to_str().unwrap())
        .map_err(|e| e.to_string())
}

/// A tied head shares the embedding table: V·H fewer parameters, same FLOPs.
#[test]
fn tied_llama_uses_the_tied_family() {
    let p = variant("tied-llama.json", "Meta-Llama-3-8B", |m| {
        m.insert("tie_word_embeddings".into(), true.into());
    });
    let tied = load(&p).unwrap();
    assert_eq!(tied.family.as_deref(), Some("llama_tied"));
    let untied = imported("Meta-Llama-3-8B");
    assert_eq!(params(&untied) - params(&tied), int(128_256 * 4096));
    assert_eq!(numbers(&tied)[1..], numbers(&untied)[1..]);
}

/// Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json: tied head, head_dim 64, 8 KV heads):
/// embed 128256·2048 + 16 layers × (2·2048² + 2·2048·512 + 3·2048·8192 + 2·2048) + 2048
/// = 1,235,814,400, the published parameter count.
#[test]
fn llama_3_2_1b_tied_with_head_dim() {
    let p = write(
        "Llama-3.2-1B.json",
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 2048,
            "head_dim": 64, "intermediate_size": 8192, "max_position_embeddings": 131072,
            "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
            "num_key_value_heads": 8, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
            "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": true,
            "vocab_size": 128256}"#,
    );
    let m = load(&p).unwrap();
    assert_eq!(params(&m), int(1_235_814_400));
    assert_eq!(m.values["S"], int(8192));
    assert_eq!(m.values["D"], int(64));
}

/// transformers 5 writes `rope_parameters` (with rope_theta inside) instead of `rope_theta` and
/// `rope_scaling`: same model.
#[test]
fn rope_parameters_form() {
    let p = variant("Llama-3.1-405B-v5.json", "Meta-Llama-3.1-405B", |m| {
        let mut rope = m.remove("rope_scaling").unwrap();
        let theta = m.remove("rope_theta").unwrap();
        rope.as_object_mut()
            .unwrap()
            .insert("rope_theta".into(), theta);
        m.insert("rope_parameters".into(), rope);
    });
    let text = import_hf(&p, None).unwrap().yaml;
    assert!(text.contains("rope_parameters.rope_theta 500000"), "{text}");
    assert!(
        text.contains("rope_parameters.original_max_position_embeddings"),
        "{text}"
    );
    assert_eq!(
        numbers(&load(&p).unwrap()),
        numbers(&imported("Meta-Llama-3.1-405B"))
    );
}

/// Absent fields take the transformers defaults: num_key_value_heads = heads, and for T5
/// num_decoder_layers = num_layers.
#[test]
fn defaults_of_absent_fields() {
    let p = variant("no-kv.json", "Llama-2-7b-hf", |m| {
        m.remove("num_key_value_heads");
    });
    let m = load(&p).unwrap();
    assert_eq!(m.values["KV"], int(32));
    assert_eq!(numbers(&m), numbers(&imported("Llama-2-7b-hf")));
    assert!(m.sources["KV"].contains("absent = num_attention_heads"));
    let t5 = imported("t5-base");
    assert_eq!(t5.values["LD"], int(12));
}

/// The model file `import hf` writes loads on its own, under the name asked for.
#[test]
fn written_model_file_loads_under_its_name() {
    let out = import_hf(&fixture("gpt2"), Some("my-gpt2")).unwrap();
    assert_eq!(
        (out.family.as_str(), out.model_type.as_str()),
        ("gpt", "gpt2")
    );
    let m = loader()
        .load(&Source::new("models/my-gpt2.yaml", out.yaml))
        .unwrap();
    assert_eq!(m.name, "my-gpt2");
    assert!(m.sources.values().all(|s| !s.is_empty()));
    assert!(m.sources["F"].contains("n_inner absent = 4*n_embd"));
    let src = model_source_from_hf(&fixture("gpt2")).unwrap();
    assert_eq!(src.file, fixture("gpt2"));
}

fn error(path: &Path) -> String {
    load(path).expect_err("must fail")
}

#[test]
fn unsupported_model_type_is_named_with_its_place() {
    let p = variant("mamba.json", "gpt2", |m| {
        m.insert("model_type".into(), "mamba".into());
    });
    let e = error(&p);
    assert!(e.contains("mamba.json:"), "{e}");
    assert!(e.contains("unsupported model_type `mamba`"), "{e}");
    assert!(
        e.contains("supported: gpt2, bert, llama, mistral, mixtral, t5, qwen2"),
        "{e}"
    );
    // The position of the field: `"model_type"` is on some line, column 3.
    let line = e.split(':').nth(1).unwrap().parse::<usize>().unwrap();
    assert!(line > 1, "{e}");
}

#[test]
fn missing_and_mistyped_fields_are_named() {
    let p = variant("no-hidden.json", "Llama-2-7b-hf", |m| {
        m.remove("hidden_size");
    });
    let e = error(&p);
    assert!(
        e.contains("no-hidden.json") && e.contains("missing field `hidden_size`"),
        "{e}"
    );
    assert!(e.contains("model_type `llama`"), "{e}");
    let p = variant("str-layers.json", "bert-base-uncased", |m| {
        m.insert("num_hidden_layers".into(), "twelve".into());
    });
    let e = error(&p);
    assert!(
        e.contains("field `num_hidden_layers` must be a positive integer"),
        "{e}"
    );
    let p = variant("no-type.json", "gpt2", |m| {
        m.remove("model_type");
    });
    assert!(error(&p).contains("missing field `model_type`"));
}

#[test]
fn malformed_json_reports_line_and_column() {
    let p = write(
        "broken.json",
        "{\n  \"model_type\": \"gpt2\",\n  \"n_embd\": 768,,\n}\n",
    );
    let e = error(&p);
    assert!(e.starts_with(&format!("{}:3:", p.display())), "{e}");
    assert!(e.contains("malformed JSON"), "{e}");
}

#[test]
fn architectures_the_families_cannot_express() {
    let p = variant("t5-relu-untied.json", "t5-base", |m| {
        m.insert("tie_word_embeddings".into(), false.into());
    });
    assert!(error(&p).contains("feed_forward_proj `relu` with tie_word_embeddings false"));
    let p = variant("gpt2-untied.json", "gpt2", |m| {
        m.insert("tie_word_embeddings".into(), false.into());
    });
    assert!(error(&p).contains("tie_word_embeddings false is not supported"));
    let p = variant("biased.json", "Meta-Llama-3-8B", |m| {
        m.insert("attention_bias".into(), true.into());
    });
    let e = error(&p);
    assert!(
        e.contains("field `attention_bias` (true) is not supported for model_type `llama`"),
        "{e}"
    );
    let p = variant("odd-heads.json", "Llama-2-7b-hf", |m| {
        m.insert("num_key_value_heads".into(), 5.into());
    });
    assert!(error(&p).contains("not divisible"));
}

fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

#[test]
fn cost_takes_a_config_directly() {
    let out = symshard()
        .args([
            "cost",
            fixture("gpt2").to_str().unwrap(),
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
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["params"], "124439808");
}

#[test]
fn import_then_cost_end_to_end() {
    let dir = std::env::temp_dir().join(format!("symshard-import-hf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("mixtral-import.yaml");
    symshard()
        .args([
            "import",
            "hf",
            fixture("Mixtral-8x7B-v0.1").to_str().unwrap(),
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("name: \"mixtral-import\"") && text.contains("family: mixtral"),
        "{text}"
    );
    let res = symshard()
        .args(["cost", out.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(res.status.success());
    let v: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap();
    assert_eq!(v["params"], "46702792704");
}

#[test]
fn bad_configs_exit_2_without_panicking() {
    let bad = [
        variant("cli-mamba.json", "gpt2", |m| {
            m.insert("model_type".into(), "mamba".into());
        }),
        variant("cli-missing.json", "bert-base-uncased", |m| {
            m.remove("vocab_size");
        }),
        write("cli-broken.json", "{\"model_type\": \"gpt2\""),
    ];
    for p in bad {
        for args in [vec!["cost"], vec!["import", "hf"]] {
            let out = symshard().args(&args).arg(&p).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} {}: {err}",
                p.display()
            );
            assert!(err.starts_with("error: "), "{err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

/// A Qwen2 config relabelled as llama: its q/k/v biases (28 layers × (3584 + 2·512) = 129,024
/// parameters in Qwen2.5-7B) cannot be expressed by the llama family, and the Qwen2-only fields
/// give it away. Refused with the field and the file named, never counted without the biases.
#[test]
fn qwen2_relabelled_as_llama_is_refused() {
    let p = variant("qwen-as-llama.json", "Qwen2.5-7B", |m| {
        m.insert("model_type".into(), "llama".into());
    });
    let e = error(&p);
    assert!(e.contains("qwen-as-llama.json:"), "{e}");
    assert!(
        e.contains("`use_sliding_window`") || e.contains("`max_window_layers`"),
        "{e}"
    );
    assert!(
        e.contains("marks a Qwen2 config") && e.contains("model_type `qwen2`"),
        "{e}"
    );
    // Without the Qwen2-only fields, a bias flag still names itself.
    let p = variant("qwen-as-llama-2.json", "Qwen2.5-7B", |m| {
        m.insert("model_type".into(), "llama".into());
        m.remove("max_window_layers");
        m.remove("use_sliding_window");
        m.insert("qkv_bias".into(), true.into());
    });
    let e = error(&p);
    assert!(
        e.contains("`qkv_bias`") && e.contains("qwen-as-llama-2.json:"),
        "{e}"
    );
    // The same file under its own type is the qwen2 family, 129,024 parameters more than the
    // llama family would count.
    let q = imported("Qwen2.5-7B");
    assert_eq!(q.family.as_deref(), Some("qwen2"));
    let p = variant("qwen-llama-clean.json", "Qwen2.5-7B", |m| {
        m.insert("model_type".into(), "llama".into());
        m.remove("max_window_layers");
        m.remove("use_sliding_window");
    });
    assert_eq!(params(&q) - params(&load(&p).unwrap()), int(129_024));
}

/// Fields that change the architecture in ways a family cannot represent are refused, each by
/// name, in the file and at the line where it stands.
#[test]
fn foreign_architecture_fields_are_refused() {
    let cases: [(&str, &str, serde_json::Value); 7] = [
        ("Meta-Llama-3-8B", "parallel_attn", true.into()),
        ("Qwen3-8B", "attention_bias", true.into()),
        ("Mistral-7B-v0.1", "partial_rotary_factor", 0.5.into()),
        (
            "Phi-3-mini-4k-instruct",
            "partial_rotary_factor",
            0.75.into(),
        ),
        ("Phi-3-mini-4k-instruct", "resid_pdrop", 0.1.into()),
        ("gemma-7b", "final_logit_softcapping", 30.0.into()),
        ("Meta-Llama-3-8B", "kv_lora_rank", 512.into()),
    ];
    for (base, key, value) in cases {
        let name = format!("foreign-{base}-{key}.json");
        let p = variant(&name, base, |m| {
            m.insert(key.into(), value);
        });
        let e = error(&p);
        assert!(e.contains(&format!("{name}:")), "{e}");
        assert!(e.contains(&format!("`{key}`")), "{e}");
        // The line of the field, not line 1.
        let line = e.split(':').nth(1).unwrap().parse::<usize>().unwrap();
        assert!(line > 1, "{e}");
    }
    // Settings a family fixes: Gemma 2 without soft-capping, a Gemma with an untied head.
    let p = variant("gemma2-nocap.json", "gemma-2-2b", |m| {
        m.insert("attn_logit_softcapping".into(), serde_json::Value::Null);
    });
    assert!(error(&p).contains("attn_logit_softcapping null is not supported"));
    let p = variant("gemma-untied.json", "gemma-2b", |m| {
        m.insert("tie_word_embeddings".into(), false.into());
    });
    assert!(error(&p).contains("tie_word_embeddings false is not supported"));
    let p = variant("gemma-silu.json", "gemma-2b", |m| {
        m.insert("hidden_act".into(), "silu".into());
    });
    assert!(error(&p).contains("hidden_act `silu` is not supported"));
}

/// The fields the new families read: Qwen3's head_dim default, Gemma 2's note on sliding windows.
#[test]
fn new_families_state_their_sources() {
    let p = variant("qwen3-nohd.json", "Qwen3-0.6B", |m| {
        m.remove("head_dim");
    });
    let m = load(&p).unwrap();
    assert_eq!(m.values["D"], int(128));
    assert!(
        m.sources["D"].contains("head_dim absent = 128"),
        "{}",
        m.sources["D"]
    );
    let text = import_hf(&fixture("gemma-2-9b"), None).unwrap().yaml;
    assert!(
        text.contains("sliding_window 4096 (every other layer)"),
        "{text}"
    );
    assert!(text.contains("Soft-capping"), "{text}");
}

/// Parallel-block families refuse the settings they do not represent, each by name.
#[test]
fn parallel_block_families_refuse_other_layouts() {
    let cases: [(&str, &str, serde_json::Value, &str); 8] = [
        (
            "pythia-1.4b",
            "use_parallel_residual",
            false.into(),
            "use_parallel_residual false is not supported",
        ),
        (
            "pythia-1.4b",
            "rotary_pct",
            1.0.into(),
            "rotary_pct 1 is not supported",
        ),
        (
            "falcon-7b",
            "new_decoder_architecture",
            true.into(),
            "new_decoder_architecture true is not supported",
        ),
        (
            "falcon-7b",
            "alibi",
            true.into(),
            "alibi true is not supported",
        ),
        (
            "falcon-7b",
            "bias",
            true.into(),
            "field `bias` (true) is not supported",
        ),
        (
            "phi-2",
            "qk_layernorm",
            true.into(),
            "field `qk_layernorm` (true) is not supported",
        ),
        (
            "opt-1.3b",
            "do_layer_norm_before",
            false.into(),
            "do_layer_norm_before false is not supported",
        ),
        (
            "opt-1.3b",
            "word_embed_proj_dim",
            512.into(),
            "word_embed_proj_dim 512 is not supported",
        ),
    ];
    for (base, key, value, msg) in cases {
        let name = format!("layout-{base}-{key}.json");
        let p = variant(&name, base, |m| {
            m.insert(key.into(), value);
        });
        let e = error(&p);
        assert!(e.contains(&format!("{name}:")) && e.contains(msg), "{e}");
    }
    // Falcon without multi-query: every head has its own keys and values.
    let p = variant("falcon-mha.json", "falcon-7b", |m| {
        m.insert("multi_query".into(), false.into());
    });
    let mha = load(&p).unwrap();
    assert_eq!(mha.values["KV"], mha.values["NH"]);
    // 32 layers × 2 × 4544 × (70 × 64) more key/value weights than with one key/value head.
    assert_eq!(
        params(&mha) - params(&imported("falcon-7b")),
        int(32 * 2 * 4544 * 70 * 64)
    );
    // Phi-2 rotates int(0.4 × 80) = 32 of each head's 80 dimensions.
    let phi = imported("phi-2");
    assert_eq!(
        (phi.values["D"].clone(), phi.values["RD"].clone()),
        (int(80), int(32))
    );
}

/// Qwen3-MoE: every layer sparse with renormalised top-K weights, or refused.
#[test]
fn qwen3_moe_layouts() {
    let m = imported("Qwen3-30B-A3B");
    assert_eq!(m.family.as_deref(), Some("qwen3_moe"));
    assert_eq!(
        (m.values["E"].clone(), m.values["K"].clone()),
        (int(128), int(8))
    );
    let p = variant("qwen3-moe-step.json", "Qwen3-30B-A3B", |m| {
        m.insert("decoder_sparse_step".into(), 2.into());
    });
    assert!(error(&p).contains("decoder_sparse_step"));
    let p = variant("qwen3-moe-dense.json", "Qwen3-30B-A3B", |m| {
        m.insert("mlp_only_layers".into(), serde_json::json!([0, 1]));
    });
    let e = error(&p);
    assert!(
        e.contains("mlp_only_layers") && e.contains("qwen3-moe-dense.json:"),
        "{e}"
    );
    // Qwen3-MoE renormalises the top-K weights; without it the family would count a step
    // transformers skips, so the file is refused.
    let p = variant("qwen3-moe-nonorm.json", "Qwen3-30B-A3B", |m| {
        m.remove("norm_topk_prob");
    });
    let e = error(&p);
    assert!(e.contains("norm_topk_prob absent (false"), "{e}");
    // A shared expert (Qwen2-MoE) is refused, not dropped.
    let p = variant("qwen3-moe-shared.json", "Qwen3-30B-A3B", |m| {
        m.insert("shared_expert_intermediate_size".into(), 5632.into());
    });
    assert!(error(&p).contains("`shared_expert_intermediate_size`"));
}

/// Qwen2-MoE (config: https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json):
/// every layer sparse, top-K weights not renormalised, one sigmoid-gated shared expert; other
/// settings refused with the field named.
#[test]
fn qwen2_moe_layouts() {
    let m = imported("Qwen1.5-MoE-A2.7B");
    assert_eq!(m.family.as_deref(), Some("qwen2_moe"));
    assert_eq!(
        (
            m.values["E"].clone(),
            m.values["K"].clone(),
            m.values["F"].clone(),
            m.values["FS"].clone()
        ),
        (int(60), int(4), int(1408), int(5632))
    );
    // 60 experts, 4 per token: every expert has S·K/E whole slots per sequence when 15 divides
    // S; the default length is 15·512, the multiple of 15 up to the pre-training length 8192
    // with the most factors of two.
    assert_eq!(m.values["S"], int(7680));
    // A renormalising gate is another family's step: refused.
    let p = variant("qwen2-moe-norm.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("norm_topk_prob".into(), true.into());
    });
    let e = error(&p);
    assert!(
        e.contains("qwen2-moe-norm.json:") && e.contains("norm_topk_prob true"),
        "{e}"
    );
    // Absent, it takes the Qwen2MoeConfig default, false: the family's gate.
    let p = variant("qwen2-moe-norm-absent.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.remove("norm_topk_prob");
    });
    assert_eq!(params(&load(&p).unwrap()), params(&m));
    // Dense layers among the sparse ones are refused.
    let p = variant("qwen2-moe-step.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("decoder_sparse_step".into(), 2.into());
    });
    let e = error(&p);
    assert!(
        e.contains("qwen2-moe-step.json:") && e.contains("decoder_sparse_step"),
        "{e}"
    );
    let p = variant("qwen2-moe-dense.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("mlp_only_layers".into(), serde_json::json!([0]));
    });
    assert!(error(&p).contains("mlp_only_layers"));
    // Absent, the shared expert's size is the Qwen2MoeConfig default, 5632 (this config's).
    let p = variant("qwen2-moe-noshared.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.remove("shared_expert_intermediate_size");
    });
    assert_eq!(params(&load(&p).unwrap()), params(&m));
    // Biases the family lacks, or lacking those it has, are refused.
    let p = variant("qwen2-moe-noqkvbias.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("qkv_bias".into(), false.into());
    });
    let e = error(&p);
    assert!(
        e.contains("qwen2-moe-noqkvbias.json:") && e.contains("qkv_bias false"),
        "{e}"
    );
    let p = variant("qwen2-moe-mlp-bias.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("mlp_bias".into(), true.into());
    });
    assert!(error(&p).contains("`mlp_bias`"));
    let p = variant("qwen2-moe-tied.json", "Qwen1.5-MoE-A2.7B", |m| {
        m.insert("tie_word_embeddings".into(), true.into());
    });
    assert!(error(&p).contains("tie_word_embeddings true"));
}

/// DeepSeek-V2 (config: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json):
/// latent attention with full-rank queries, first_k_dense_replace dense layers, greedy softmax
/// routing; other settings refused with the field named.
#[test]
fn deepseek_v2_layouts() {
    let m = imported("DeepSeek-V2-Lite");
    assert_eq!(m.family.as_deref(), Some("deepseek_v2"));
    let v = |k: &str| m.values[k].clone();
    assert_eq!(
        (v("L"), v("LD"), v("E"), v("K"), v("NS"), v("R")),
        (int(27), int(1), int(64), int(6), int(2), int(512))
    );
    // The pre-training length of the YaRN block.
    assert_eq!(v("S"), int(4096));
    let refused = |name: &str, edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let p = variant(name, "DeepSeek-V2-Lite", edit);
        let e = error(&p);
        assert!(e.contains(&format!("{name}:")), "{e}");
        e
    };
    // Low-rank queries come with group-limited routing (DeepSeek-V2), full-rank ones with
    // greedy routing (DeepSeek-V2-Lite); the other pairings are refused.
    let e = refused("ds-qlora.json", &|m| {
        m.insert("q_lora_rank".into(), 1536.into());
    });
    assert!(
        e.contains("topk_method `greedy`") && e.contains("deepseek_v2_qlora"),
        "{e}"
    );
    let e = refused("ds-qlora-absent.json", &|m| {
        m.remove("q_lora_rank");
    });
    assert!(e.contains("`q_lora_rank` absent"), "{e}");
    let p = variant("ds2-fullq.json", "DeepSeek-V2", |m| {
        m.insert("q_lora_rank".into(), serde_json::Value::Null);
    });
    let e = error(&p);
    assert!(
        e.contains("ds2-fullq.json:") && e.contains("topk_method `group_limited_greedy`"),
        "{e}"
    );
    // Group-limited routing (DeepSeek-V2), other scoring, renormalisation, sparse-layer spacing.
    let e = refused("ds-group.json", &|m| {
        m.insert("topk_method".into(), "group_limited_greedy".into());
    });
    assert!(e.contains("topk_method `group_limited_greedy`"), "{e}");
    let e = refused("ds-sigmoid.json", &|m| {
        m.insert("scoring_func".into(), "sigmoid".into());
    });
    assert!(e.contains("scoring_func `sigmoid`"), "{e}");
    let e = refused("ds-norm.json", &|m| {
        m.insert("norm_topk_prob".into(), true.into());
    });
    assert!(e.contains("norm_topk_prob true"), "{e}");
    let e = refused("ds-freq.json", &|m| {
        m.insert("moe_layer_freq".into(), 2.into());
    });
    assert!(e.contains("moe_layer_freq"), "{e}");
    // No dense layer first, or no sparse layer after them.
    let e = refused("ds-nodense.json", &|m| {
        m.remove("first_k_dense_replace");
    });
    assert!(e.contains("first_k_dense_replace absent"), "{e}");
    let e = refused("ds-alldense.json", &|m| {
        m.insert("first_k_dense_replace".into(), 27.into());
    });
    assert!(e.contains("first_k_dense_replace 27"), "{e}");
    // Biases and a tied head the family lacks.
    let e = refused("ds-bias.json", &|m| {
        m.insert("attention_bias".into(), true.into());
    });
    assert!(e.contains("`attention_bias`"), "{e}");
    let e = refused("ds-tied.json", &|m| {
        m.insert("tie_word_embeddings".into(), true.into());
    });
    assert!(e.contains("tie_word_embeddings true"), "{e}");
    // One more dense layer: a sparse layer's parameters give way to a dense one's.
    let p = variant("ds-two-dense.json", "DeepSeek-V2-Lite", |m| {
        m.insert("first_k_dense_replace".into(), 2.into());
    });
    let (h, f, fd, e, ns) = (2048i64, 1408i64, 10944i64, 64i64, 2i64);
    let sparse_mlp = h * e + 3 * h * f * e + 3 * h * f * ns;
    let dense_mlp = 3 * h * fd;
    assert_eq!(
        params(&load(&p).unwrap()) - params(&m),
        int(dense_mlp - sparse_mlp)
    );
}

/// DeepSeek-V3 (config: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json):
/// low-rank queries, a sigmoid gate with group-limited, renormalised top-k, three dense layers;
/// absent fields take the DeepseekV3Config defaults; the settings the family does not model are
/// refused with the field named; the ones it does not count are said in the model file.
#[test]
fn deepseek_v3_layouts() {
    let m = imported("DeepSeek-V3");
    assert_eq!(m.family.as_deref(), Some("deepseek_v3"));
    let v = |k: &str| m.values[k].clone();
    assert_eq!(
        (v("L"), v("LD"), v("E"), v("K"), v("NG"), v("TG")),
        (int(61), int(3), int(256), int(8), int(8), int(4))
    );
    assert_eq!(
        (v("QR"), v("R"), v("NS"), v("F"), v("FD")),
        (int(1536), int(512), int(1), int(2048), int(18432))
    );
    // The pre-training length of the YaRN block; 256 experts, 8 per token: S·K/E whole.
    assert_eq!(v("S"), int(4096));
    // What the model file says it does not count: the buffer, the MTP module, the fp8 format.
    let text = import_hf(&fixture("DeepSeek-V3"), None).unwrap().yaml;
    for said in [
        "e_score_correction_bias, a buffer of 256 values (14848 in the 58 sparse layers)",
        "num_nextn_predict_layers 1 multi-token-prediction module(s)",
        "quantization_config",
    ] {
        assert!(text.contains(said), "{said}\n{text}");
    }
    // Every structural field absent: the DeepseekV3Config defaults are DeepSeek-V3's sizes, and
    // the sources say they are defaults.
    let p = variant("ds3-defaults.json", "DeepSeek-V3", |m| {
        for k in [
            "first_k_dense_replace",
            "hidden_size",
            "intermediate_size",
            "kv_lora_rank",
            "moe_intermediate_size",
            "n_group",
            "n_routed_experts",
            "n_shared_experts",
            "norm_topk_prob",
            "num_attention_heads",
            "num_experts_per_tok",
            "num_hidden_layers",
            "num_key_value_heads",
            "q_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "routed_scaling_factor",
            "scoring_func",
            "topk_group",
            "topk_method",
            "v_head_dim",
            "vocab_size",
        ] {
            m.remove(k);
        }
    });
    let d = load(&p).unwrap();
    assert_eq!(numbers(&d), numbers(&m));
    let text = import_hf(&p, None).unwrap().yaml;
    assert!(
        text.contains("q_lora_rank absent = 1536, the DeepseekV3Config default"),
        "{text}"
    );
    let refused = |name: &str, edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let p = variant(name, "DeepSeek-V3", edit);
        let e = error(&p);
        assert!(e.contains(&format!("{name}:")), "{e}");
        e
    };
    let e = refused("ds3-fullq.json", &|m| {
        m.insert("q_lora_rank".into(), serde_json::Value::Null);
    });
    assert!(e.contains("`q_lora_rank` null"), "{e}");
    let e = refused("ds3-greedy.json", &|m| {
        m.insert("topk_method".into(), "greedy".into());
    });
    assert!(e.contains("topk_method `greedy`"), "{e}");
    let e = refused("ds3-softmax.json", &|m| {
        m.insert("scoring_func".into(), "softmax".into());
    });
    assert!(e.contains("scoring_func `softmax`"), "{e}");
    let e = refused("ds3-nonorm.json", &|m| {
        m.insert("norm_topk_prob".into(), false.into());
    });
    assert!(e.contains("norm_topk_prob false"), "{e}");
    let e = refused("ds3-freq.json", &|m| {
        m.insert("moe_layer_freq".into(), 2.into());
    });
    assert!(e.contains("moe_layer_freq"), "{e}");
    let e = refused("ds3-alldense.json", &|m| {
        m.insert("first_k_dense_replace".into(), 61.into());
    });
    assert!(e.contains("first_k_dense_replace 61"), "{e}");
    let e = refused("ds3-kv.json", &|m| {
        m.insert("num_key_value_heads".into(), 16.into());
    });
    assert!(e.contains("num_key_value_heads 16"), "{e}");
    let e = refused("ds3-groups.json", &|m| {
        m.insert("n_group".into(), 7.into());
    });
    assert!(e.contains("n_group equal groups"), "{e}");
    let e = refused("ds3-singletons.json", &|m| {
        m.insert("n_group".into(), 256.into());
        m.insert("topk_group".into(), 8.into());
    });
    assert!(e.contains("n_group 256 leaves 1 expert per group"), "{e}");
    let e = refused("ds3-topk-group.json", &|m| {
        m.insert("topk_group".into(), 9.into());
    });
    assert!(e.contains("topk_group 9"), "{e}");
    let e = refused("ds3-bias.json", &|m| {
        m.insert("attention_bias".into(), true.into());
    });
    assert!(e.contains("`attention_bias`"), "{e}");
    let e = refused("ds3-tied.json", &|m| {
        m.insert("tie_word_embeddings".into(), true.into());
    });
    assert!(e.contains("tie_word_embeddings true"), "{e}");
    let e = refused("ds3-noshared.json", &|m| {
        m.insert("n_shared_experts".into(), 0.into());
    });
    assert!(
        e.contains("`n_shared_experts` must be a positive integer"),
        "{e}"
    );
    let e = refused("ds3-gelu.json", &|m| {
        m.insert("hidden_act".into(), "gelu".into());
    });
    assert!(e.contains("hidden_act `gelu`"), "{e}");
    // No MTP module: nothing said of one; the count is the same.
    let p = variant("ds3-nomtp.json", "DeepSeek-V3", |m| {
        m.insert("num_nextn_predict_layers".into(), 0.into());
    });
    assert_eq!(params(&load(&p).unwrap()), params(&m));
    assert!(!import_hf(&p, None)
        .unwrap()
        .yaml
        .contains("multi-token-prediction"));
    // One more dense layer: a sparse layer's MLP (router E·H, experts 3·H·F·E, shared 3·H·NS·F)
    // gives way to a dense one's, 3·H·FD.
    let p = variant("ds3-four-dense.json", "DeepSeek-V3", |m| {
        m.insert("first_k_dense_replace".into(), 4.into());
    });
    let (h, f, fd, e, ns) = (7168i64, 2048i64, 18432i64, 256i64, 1i64);
    let sparse_mlp = h * e + 3 * h * f * e + 3 * h * f * ns;
    assert_eq!(
        params(&load(&p).unwrap()) - params(&m),
        int(3 * h * fd - sparse_mlp)
    );
}

/// DeepSeek-V2 (config: https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json):
/// low-rank queries and group-limited routing, the family deepseek_v2_qlora.
#[test]
fn deepseek_v2_qlora_layouts() {
    let m = imported("DeepSeek-V2");
    assert_eq!(m.family.as_deref(), Some("deepseek_v2_qlora"));
    let v = |k: &str| m.values[k].clone();
    assert_eq!(
        (v("QR"), v("NG"), v("TG"), v("E"), v("K")),
        (int(1536), int(8), int(3), int(160), int(6))
    );
    // 160 experts, 6 per token: S·K/E whole when 80 divides S; 80·32 is the multiple of 80 up
    // to the pre-training length 4096 with the most factors of two.
    assert_eq!(v("S"), int(2560));
    // The low-rank query path: q_a_proj H×QR, its RMSNorm QR and q_b_proj QR×NH·(DN+DR) in place
    // of q_proj H×NH·(DN+DR), in each of the 60 layers.
    // One more latent feature adds a column of q_a_proj, a norm weight and a row of q_b_proj.
    let (h, q) = (5120i64, 128 * (128 + 64));
    let p = variant("ds2-q-width.json", "DeepSeek-V2", |m| {
        m.insert("q_lora_rank".into(), 1537.into());
    });
    assert_eq!(
        params(&load(&p).unwrap()) - params(&m),
        int(60 * (h + 1 + q))
    );
    // Groups that do not split the experts, or too few kept groups for the top-K.
    let p = variant("ds2-groups.json", "DeepSeek-V2", |m| {
        m.insert("n_group".into(), 7.into());
    });
    let e = error(&p);
    assert!(
        e.contains("ds2-groups.json:") && e.contains("n_group"),
        "{e}"
    );
    let p = variant("ds2-topk-group.json", "DeepSeek-V2", |m| {
        m.insert("topk_group".into(), 9.into());
    });
    assert!(error(&p).contains("topk_group 9"));
}

/// `import --help` names every model_type the importer reads.
#[test]
fn help_lists_every_supported_model_type() {
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .args(["import", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for t in symshard::import::hf::SUPPORTED {
        assert!(
            text.contains(&format!(" {t},")) || text.contains(&format!(" {t})")),
            "{t} missing from:\n{text}"
        );
    }
}
