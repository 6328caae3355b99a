//! The batch symbol is a declared role (`roles: {batch: B}`), not a name: a model whose batch
//! is called otherwise is analysed exactly as the same model with `B`.

use std::path::Path;

mod common;

use common::{refused_in, run_on_file as run, temp_dir};

/// The `gpt` family's roles with its batch called `N`.
const ROLES_N: &str =
    "roles: {batch: N, sequence: S, vocab: V, heads: NH, layer: L, hidden: H, ffn: F, positions: P}";

/// A model file with the `gpt` family's graph written inline and gpt3-125m's values, its batch
/// symbol called `batch`.
fn inline_gpt(batch: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let family = std::fs::read_to_string(root.join("models/families/gpt.yaml")).unwrap();
    let model = std::fs::read_to_string(root.join("models/gpt3-125m.yaml")).unwrap();
    // Whole-word `B` only: formulas such as `B*S`, the input dims and the symbol keys.
    let rename = |text: &str| word_replaced(text, "B", batch);
    let mut out = String::from("name: renamed\ndoc: gpt3-125m with its graph inline.\ngraph:\n");
    for line in family.lines() {
        if line.starts_with("family:") || line.starts_with("doc:") {
            continue;
        }
        out.push_str("  ");
        out.push_str(&rename(line));
        out.push('\n');
    }
    let mut values = false;
    for line in model.lines() {
        if line.starts_with("symbols:") {
            values = true;
        }
        if values {
            out.push_str(&rename(line));
            out.push('\n');
        }
    }
    out
}

/// `text` with every whole-word `from` replaced by `to`.
fn word_replaced(text: &str, from: &str, to: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let chars: Vec<char> = text.chars().collect();
    let f: Vec<char> = from.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let here = chars[i..].starts_with(&f);
        let before = i == 0 || !word(chars[i - 1]);
        let after = chars.get(i + f.len()).is_none_or(|c| !word(*c));
        if here && before && after {
            out.push_str(to);
            i += f.len();
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// JSON output as a value, without the timings (`search_seconds`), which differ run to run.
fn json(text: &str) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !k.contains("seconds"));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    strip(&mut v);
    v
}

#[test]
fn a_batch_called_otherwise_is_analysed_the_same() {
    let dir = temp_dir("same");
    std::fs::write(dir.join("b.yaml"), inline_gpt("B")).unwrap();
    std::fs::write(dir.join("n.yaml"), inline_gpt("N")).unwrap();
    assert!(inline_gpt("N").contains(ROLES_N));
    let shipped_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for args in [
        &[
            "cost", "--tp", "2", "--pp", "2", "--dp", "4", "--format", "json",
        ][..],
        &[
            "cost",
            "--dp",
            "8",
            "--microbatches",
            "4",
            "--zero",
            "1",
            "--format",
            "json",
        ],
        &[
            "cost",
            "--tp",
            "2",
            "--dp",
            "4",
            "--micro-batch-size",
            "2",
            "--format",
            "json",
        ],
        &["rank", "--devices", "16", "--format", "json"],
    ] {
        let b = run(&dir, "b.yaml", args);
        let n = run(&dir, "n.yaml", args);
        // The inline graph is the shipped model.
        let shipped = run(shipped_dir, "gpt3-125m", args);
        assert_eq!(
            json(&shipped.replace("\"gpt3-125m\"", "\"renamed\"")),
            json(&b),
            "{args:?}: inline graph vs shipped"
        );
        // The same numbers and text, with `N` where `B` was (symbol tables sort by name).
        assert_eq!(
            json(&word_replaced(&b, "B", "N")),
            json(&n),
            "{args:?}: B vs N"
        );
        assert_eq!(b.contains("\"B\""), n.contains("\"N\""), "{args:?}");
    }
    // The cost reports the batch under its name.
    let n = run(&dir, "n.yaml", &["cost", "--dp", "2", "--format", "json"]);
    assert!(json(&n)["symbols"]["N"] == "256", "{n}");
    // Undeclared, `N` is no batch: nothing for data parallelism to split.
    let undeclared = inline_gpt("N").replace(&format!("  {ROLES_N}\n"), "");
    std::fs::write(dir.join("u.yaml"), undeclared).unwrap();
    let err = refused_in(&dir, &["cost", "u.yaml", "--dp", "4"]);
    assert!(err.contains("has no batch symbol to split"), "{err}");
}

#[test]
fn roles_are_checked_where_they_are_declared() {
    let dir = temp_dir("checked");
    for (role, says) in [
        (
            "roles: {batch: N, vocabulary: V}",
            "unknown role `vocabulary` (the symbol roles: batch, sequence, vocab, heads, layer, hidden, ffn, kv_heads, head_dim, positions, experts, top_k, expert_groups, groups_per_token)",
        ),
        ("roles: {batch: Q}", "role `batch`: unknown symbol `Q`"),
    ] {
        let text = inline_gpt("N").replace(ROLES_N, role);
        std::fs::write(dir.join("m.yaml"), &text).unwrap();
        let line = text.lines().position(|l| l.contains("roles:")).unwrap() + 1;
        let err = refused_in(&dir, &["cost", "m.yaml"]);
        assert!(err.contains(&format!("m.yaml:{line}:")), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn shipped_families_declare_their_batch() {
    let loader = symshard::model::ModelLoader::embedded().unwrap();
    for name in [
        "gpt3-175b",
        "llama3-8b",
        "mixtral-8x7b",
        "resnet50",
        "t5-base",
        "vit-b16",
    ] {
        let m = loader.resolve(name).unwrap();
        assert_eq!(m.batch.as_deref(), Some("B"), "{name}");
    }
}
