//! Selective recomputation recomputes attention's core, found by the role the graph declares
//! (`attention: eager` operators, or `role: attention-core`), never by the name or the degree of
//! a symbol: ResNet's and ViT's `S` is an image side, and a user's sequence may be called `T`.

use num_bigint::BigInt;
use serde_json::Value;

mod common;

use common::{json, refused};

fn cost(args: &[&str]) -> Value {
    json(&[&["cost"][..], args, &["--format", "json"]].concat())
}

fn int(v: &Value) -> BigInt {
    v.as_str().unwrap().parse().unwrap()
}

/// Per-device FLOPs of one step under `recompute`, on one device.
fn flops(model: &str, recompute: &str) -> BigInt {
    int(&cost(&[model, "--dp", "1", "--recompute", recompute])["per_device"]["flops"])
}

/// Forward FLOPs of the operators named, times their repeat count.
fn forward_of(model: &str, names: &[&str]) -> BigInt {
    let v = cost(&[model, "--per-op"]);
    let mut sum = BigInt::from(0);
    let mut seen = 0;
    for op in v["per_op"].as_array().unwrap() {
        if names.contains(&op["name"].as_str().unwrap()) {
            sum += int(&op["forward"]) * int(&op["repeat"]);
            seen += 1;
        }
    }
    assert_eq!(seen, names.len(), "{model}: {names:?}");
    sum
}

#[test]
fn a_convolutional_network_has_no_attention_to_recompute() {
    let (none, selective, full) = (
        flops("resnet50", "none"),
        flops("resnet50", "selective"),
        flops("resnet50", "full"),
    );
    assert_eq!(selective, none);
    assert!(full > none);
}

#[test]
fn vit_recomputes_only_its_attention_core() {
    let extra = flops("vit-b16", "selective") - flops("vit-b16", "none");
    let core = forward_of("vit-b16", &["scores", "scale", "attn_softmax", "context"]);
    assert_eq!(extra, core);
    assert!(flops("vit-b16", "full") > flops("vit-b16", "selective"));
}

#[test]
fn t5_declares_its_attention_core_by_role() {
    let extra = flops("t5-base", "selective") - flops("t5-base", "none");
    let core = forward_of(
        "t5-base",
        &[
            "enc_scores",
            "enc_add_bias",
            "enc_softmax",
            "enc_attn_dropout",
            "enc_context",
            "dec_scores",
            "dec_add_bias",
            "dec_softmax",
            "dec_attn_dropout",
            "dec_context",
            "cross_scores",
            "cross_softmax",
            "cross_attn_dropout",
            "cross_context",
        ],
    );
    assert_eq!(extra, core);
}

/// One attention over `T` tokens; `role` goes on the operators between the projections.
fn tiny(dir: &std::path::Path, name: &str, role: &str) -> String {
    let text = format!(
        "name: {name}
graph:
  symbols:
    B: batch
    T: tokens
    H: hidden size
    NH: heads
  inputs:
    x: {{dims: [B, T, H]}}
  blocks:
    - name: embed
      ops:
        - {{name: proj, op: linear, bind: {{b: B*T, k: H, n: H}}, in: {{x: x}}}}
    - name: attention
      repeat: 2
      input: proj
      output: out
      ops:
        - {{name: q, op: linear, bind: {{b: B*T, k: H, n: H}}, in: {{x: in}}}}
        - {{name: k, op: linear, bind: {{b: B*T, k: H, n: H}}, in: {{x: in}}}}
        - {{name: v, op: linear, bind: {{b: B*T, k: H, n: H}}, in: {{x: in}}}}
        - {{name: scores, {role}op: bmm_scores, bind: {{b: B, g: NH, r: 1, q: T, k: T, d: H/NH}}, in: {{query: q, key: k}}}}
        - {{name: probs, {role}op: softmax, bind: {{b: B*NH*T, n: T}}, in: {{x: scores}}}}
        - {{name: context, {role}op: bmm_context, bind: {{b: B, g: NH, r: 1, q: T, k: T, d: H/NH}}, in: {{probs: probs, value: v}}}}
        - {{name: out, op: linear, bind: {{b: B*T, k: H, n: H}}, in: {{x: context}}}}
symbols:
  B: 4
  T: 64
  H: 32
  NH: 4
"
    );
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_sequence_under_another_name_is_recomputed_by_its_declared_role() {
    let dir = std::env::temp_dir().join(format!("symshard-roles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tagged = tiny(&dir, "tagged", "role: attention-core, ");
    let extra = flops(&tagged, "selective") - flops(&tagged, "none");
    assert_eq!(extra, forward_of(&tagged, &["scores", "probs", "context"]));
    assert!(extra > BigInt::from(0));
    // Undeclared, nothing is taken for attention: selective recomputes nothing.
    let plain = tiny(&dir, "plain", "");
    assert_eq!(flops(&plain, "selective"), flops(&plain, "none"));
    // A role that does not exist is refused with its file and line.
    let bad = tiny(&dir, "bad", "role: attention-cor, ");
    let err = refused(&["cost", &bad]);
    assert!(
        err.contains("bad.yaml:22:") && err.contains("unknown role `attention-cor`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn image_sides_are_not_a_sequence_for_selective_recomputation() {
    // Measured per-device FLOPs of one step on one device (cost --dp 1 --recompute …):
    //   resnet50: none 6,341,919,588,864; selective 6,341,919,588,864; full 7,698,460,262,912.
    //   vit-b16:  none 433,030,195,781,632; selective 439,027,501,441,024 (+5,997,305,659,392,
    //             the forward of its attention core); full 576,565,587,288,064.
    // When operators quadratic in the symbol named `S` were taken for attention, ResNet's and
    // ViT's convolutions and patch work (quadratic in the image side) counted as attention and
    // "selective" recomputed nearly the whole forward, as "full" does. Their families declare
    // no sequence role: `S` is an image side.
    let n = |s: &str| s.parse::<BigInt>().unwrap();
    assert_eq!(flops("resnet50", "none"), n("6341919588864"));
    assert_eq!(flops("resnet50", "selective"), n("6341919588864"));
    assert_eq!(flops("resnet50", "full"), n("7698460262912"));
    assert_eq!(flops("vit-b16", "none"), n("433030195781632"));
    assert_eq!(flops("vit-b16", "selective"), n("439027501441024"));
    assert_eq!(flops("vit-b16", "full"), n("576565587288064"));
    // Selective recomputes under 5 % of what full recomputes on ViT.
    let sel = flops("vit-b16", "selective") - flops("vit-b16", "none");
    let full = flops("vit-b16", "full") - flops("vit-b16", "none");
    assert!(sel * BigInt::from(20) < full);
}
