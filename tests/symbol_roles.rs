//! Symbols play declared roles (`roles: {batch: B, sequence: S, vocab: V, heads: NH, layer: L}`),
//! not names: a model whose every symbol is called otherwise, its roles declared, is costed and
//! ranked exactly as the original. Roles are checked where they are declared; a graph that
//! declares none has them inferred from the conventional names, once, and says so.

use serde_json::Value;
use std::path::Path;

mod common;

use common::{refused_in, run_on_file as run, temp_dir};

/// Every symbol of the `gpt` family, with the name the renamed copy gives it.
const RENAMED: [(&str, &str); 8] = [
    ("B", "Nb"),
    ("S", "Tk"),
    ("L", "Ly"),
    ("H", "Hd"),
    ("NH", "Hn"),
    ("F", "Ff"),
    ("V", "Vc"),
    ("P", "Ps"),
];

/// `text` with every whole-word occurrence of a `from` replaced by its `to`.
fn renamed(text: &str, pairs: &[(&str, &str)]) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    'next: while i < chars.len() {
        if i == 0 || !word(chars[i - 1]) {
            for (from, to) in pairs {
                let f: Vec<char> = from.chars().collect();
                if chars[i..].starts_with(&f) && chars.get(i + f.len()).is_none_or(|c| !word(*c)) {
                    out.push_str(to);
                    i += f.len();
                    continue 'next;
                }
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn back() -> Vec<(&'static str, &'static str)> {
    RENAMED.iter().map(|(a, b)| (*b, *a)).collect()
}

/// gpt3-125m with the `gpt` family's graph written inline and its symbols renamed by `pairs`.
fn inline_gpt(pairs: &[(&str, &str)]) -> String {
    inline("gpt", "gpt3-125m", pairs)
}

/// A shipped model with its family's graph written inline and its symbols renamed by `pairs`.
fn inline(family: &str, model: &str, pairs: &[(&str, &str)]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let family =
        std::fs::read_to_string(root.join(format!("models/families/{family}.yaml"))).unwrap();
    let model = std::fs::read_to_string(root.join(format!("models/{model}.yaml"))).unwrap();
    let mut out = String::from("name: renamed\ndoc: gpt3-125m with its graph inline.\ngraph:\n");
    for line in family.lines() {
        if line.starts_with("family:") || line.starts_with("doc:") {
            continue;
        }
        out.push_str("  ");
        out.push_str(&renamed(line, pairs));
        out.push('\n');
    }
    let mut values = false;
    for line in model.lines() {
        values |= line.starts_with("symbols:");
        if values {
            out.push_str(&renamed(line, pairs));
            out.push('\n');
        }
    }
    out
}

/// JSON output as a value, without the timings, which differ run to run.
fn json(text: &str) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !k.contains("seconds"));
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: Value = serde_json::from_str(text).unwrap();
    strip(&mut v);
    v
}

#[test]
fn every_symbol_renamed_with_declared_roles_is_costed_and_ranked_the_same() {
    let dir = temp_dir("renamed");
    let original = inline_gpt(&[]);
    let copy = inline_gpt(&RENAMED);
    assert!(copy.contains(
        "roles: {batch: Nb, sequence: Tk, vocab: Vc, heads: Hn, layer: Ly, hidden: Hd, ffn: Ff, positions: Ps}"
    ));
    std::fs::write(dir.join("o.yaml"), &original).unwrap();
    std::fs::write(dir.join("r.yaml"), &copy).unwrap();
    for args in [
        // Tensor parallelism that pads the vocabulary, context parallelism that cuts the
        // sequence, sequence parallelism that shards it.
        &[
            "cost",
            "--tp",
            "2",
            "--dp",
            "4",
            "--cp",
            "2",
            "--sequence-parallel",
            "--format",
            "json",
        ][..],
        &[
            "cost",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "2",
            "--recompute",
            "selective",
            "--format",
            "json",
        ],
        &["rank", "--devices", "16", "--format", "json"],
        &["rank", "--devices", "64", "--format", "json"],
        &[
            "rank",
            "--devices",
            "16",
            "--fix",
            "cp=2",
            "--format",
            "json",
        ],
        // Megatron-LM's flags from the roles: hidden and MLP sizes, heads, positions.
        &[
            "rank",
            "--devices",
            "16",
            "--top",
            "1",
            "--emit",
            "megatron",
            "--format",
            "json",
        ],
        // Tokens per second come from the sequence role (`Tk` in the copy).
        &[
            "timeline",
            "--tp",
            "2",
            "--dp",
            "4",
            "--calib",
            "a100-80gb",
            "--format",
            "json",
        ],
    ] {
        let o = run(&dir, "o.yaml", args);
        let r = run(&dir, "r.yaml", args);
        assert_eq!(json(&o), json(&renamed(&r, &back())), "{args:?}");
    }
    // The text of `rank` too, its header naming the batch and sequence by their names
    // (gpt3-125m's shipped values: B = 256 and S = 2048, Brown et al. 2020 Table 2.1).
    let o = run(&dir, "o.yaml", &["rank", "--devices", "16"]);
    let r = run(&dir, "r.yaml", &["rank", "--devices", "16"]);
    assert!(
        r.starts_with("renamed (Nb = 256, Tk = 2048) on 16 devices"),
        "{r}"
    );
    let timeless = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.contains("strategies priced"))
            .map(String::from)
            .collect()
    };
    assert_eq!(timeless(&o), timeless(&renamed(&r, &back())));
    // And the header of `timeline`, whose plan records the roles.
    let t = run(
        &dir,
        "r.yaml",
        &["timeline", "--tp", "2", "--dp", "4", "--calib", "a100-80gb"],
    );
    assert!(t.contains("(Nb = 256, Tk = 2048)"), "{t}");
    // Refusals name the sequence by its name.
    let err = refused_in(&dir, &["cost", "r.yaml", "--cp", "3"]);
    assert!(
        err.contains("2·cp = 6 does not divide the sequence length Tk = 2048"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn roles_are_checked_where_they_are_declared() {
    let dir = temp_dir("checked");
    let roles =
        "roles: {batch: B, sequence: S, vocab: V, heads: NH, layer: L, hidden: H, ffn: F, positions: P}";
    for (bad, says) in [
        (
            "roles: {batch: B, vocabulary: V}",
            "unknown role `vocabulary` (the symbol roles: batch, sequence, vocab, heads, layer, hidden, ffn, kv_heads, head_dim, positions, experts, top_k, expert_groups, groups_per_token)",
        ),
        (
            "roles: {batch: B, sequence: T}",
            "role `sequence`: unknown symbol `T`",
        ),
        (
            "roles: {batch: B, sequence: S, heads: S}",
            "role `heads`: symbol `S` already has the role `sequence`",
        ),
        (
            "roles: {batch: B, layer: H}",
            "role `layer`: no block repeats `H` times",
        ),
    ] {
        let text = inline_gpt(&[]).replace(roles, bad);
        assert!(text.contains(bad));
        std::fs::write(dir.join("m.yaml"), &text).unwrap();
        let line = text.lines().position(|l| l.contains("roles:")).unwrap() + 1;
        let err = refused_in(&dir, &["cost", "m.yaml"]);
        assert!(err.contains(&format!("m.yaml:{line}:")), "{err}");
        assert!(err.contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn undeclared_roles_are_inferred_from_the_conventional_names_and_reported() {
    let dir = temp_dir("inferred");
    let declared = inline_gpt(&[]);
    let roles = "  roles: {batch: B, sequence: S, vocab: V, heads: NH, layer: L, hidden: H, ffn: F, positions: P}\n";
    let undeclared = declared.replace(roles, "");
    assert_ne!(declared, undeclared);
    std::fs::write(dir.join("d.yaml"), &declared).unwrap();
    std::fs::write(dir.join("u.yaml"), &undeclared).unwrap();
    let args = [
        "cost", "--tp", "2", "--cp", "2", "--dp", "2", "--format", "json",
    ];
    assert_eq!(
        json(&run(&dir, "d.yaml", &args)),
        json(&run(&dir, "u.yaml", &args))
    );
    let note = "roles inferred from symbol names (the graph declares none): batch B, sequence S, vocab V, heads NH, layer L, hidden H, ffn F, positions P";
    assert!(run(&dir, "u.yaml", &["cost"]).contains(note));
    assert!(!run(&dir, "d.yaml", &["cost"]).contains("inferred"));
    // A renamed graph without roles has none of them: no batch, no sequence.
    let bare = inline_gpt(&RENAMED).replace(
        "  roles: {batch: Nb, sequence: Tk, vocab: Vc, heads: Hn, layer: Ly, hidden: Hd, ffn: Ff, positions: Ps}\n",
        "",
    );
    std::fs::write(dir.join("b.yaml"), &bare).unwrap();
    let err = refused_in(&dir, &["cost", "b.yaml", "--cp", "2"]);
    assert!(
        err.contains("has no sequence to split (no symbol has the `sequence` role)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shipped_families_declare_their_roles() {
    let loader = symshard::model::ModelLoader::embedded().unwrap();
    for name in [
        "gpt3-175b",
        "llama3-8b",
        "mixtral-8x7b",
        "t5-base",
        "bert-base",
    ] {
        let m = loader.resolve(name).unwrap();
        let r = &m.roles;
        assert!(r.inferred.is_empty(), "{name}");
        assert_eq!(
            [&r.sequence, &r.vocab, &r.heads, &r.layer].map(|s| s.as_deref()),
            [Some("S"), Some("V"), Some("NH"), Some("L")],
            "{name}"
        );
    }
    // Vision: `S` is an image side, never a sequence.
    for name in ["resnet50", "vit-b16", "vgg16", "alexnet"] {
        let m = loader.resolve(name).unwrap();
        assert!(m.roles.inferred.is_empty(), "{name}");
        assert_eq!(m.roles.sequence, None, "{name}");
    }
    let vit = loader.resolve("vit-b16").unwrap();
    assert_eq!(vit.roles.heads.as_deref(), Some("NH"));
    assert_eq!(vit.roles.layer.as_deref(), Some("L"));
}

/// The mixture-of-experts sizes are roles too: Mixtral with its experts and top-k renamed emits
/// the same Megatron-LM flags (`--num-experts 8 --moe-router-topk 2`, the shipped
/// mixtral-8x7b's values from the Hugging Face config of Mixtral-8x7B-v0.1: num_local_experts
/// 8, num_experts_per_tok 2).
#[test]
fn expert_roles_reach_emit() {
    let dir = temp_dir("experts");
    let pairs = [("E", "Nx"), ("K", "Tk")];
    let original = inline("mixtral", "mixtral-8x7b", &[]);
    let copy = inline("mixtral", "mixtral-8x7b", &pairs);
    assert!(copy.contains("experts: Nx, top_k: Tk"), "{copy}");
    std::fs::write(dir.join("o.yaml"), &original).unwrap();
    std::fs::write(dir.join("r.yaml"), &copy).unwrap();
    let args = [
        "rank",
        "--devices",
        "64",
        "--top",
        "1",
        "--emit",
        "megatron",
    ];
    let o = run(&dir, "o.yaml", &args);
    let r = run(&dir, "r.yaml", &args);
    for flag in ["--num-experts 8", "--moe-router-topk 2"] {
        assert!(o.contains(flag), "{o}");
        assert!(r.contains(flag), "{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
