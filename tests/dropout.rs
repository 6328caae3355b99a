//! Dropout as a model setting: `dropout: false` in a model file, `--dropout off` on the command
//! line, `dropout: false` in a validation row. At probability 0 PyTorch's dropout returns its
//! input (no kernel, no mask), so the graph's dropout operators are taken out and their readers
//! read the dropout's input.

mod common;

use serde_json::Value;
use symshard::model::{ModelLoader, Producer};
use symshard::sym::Rational;

fn activations(extra: &[&str]) -> Rational {
    let mut args = vec!["cost", "gpt3-125m", "--dp", "8", "--format", "json"];
    args.extend_from_slice(extra);
    let v: Value = common::json(&args);
    let text = v["per_device"]["memory"]["activations"].as_str().unwrap();
    text.parse::<Rational>().unwrap()
}

#[test]
fn dropout_off_takes_the_dropout_operators_out_and_rewires_their_readers() {
    let on = ModelLoader::embedded().unwrap();
    let off = ModelLoader::embedded().unwrap().with_dropout(Some(false));
    let with = on.resolve("gpt3-125m").unwrap();
    let without = off.resolve("gpt3-125m").unwrap();
    let dropouts = |m: &symshard::model::Model| {
        m.blocks
            .iter()
            .flat_map(|b| b.graph.node_weights())
            .filter(|o| o.rule.name == "dropout")
            .count()
    };
    // embed_dropout, and per layer the scores' dropout and the two residual ones.
    assert_eq!(dropouts(&with), 4);
    assert_eq!(dropouts(&without), 0);
    let layer = without.blocks.iter().find(|b| b.name == "layer").unwrap();
    let node = |name: &str| {
        layer
            .graph
            .node_weights()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let reads = |name: &str, input: usize| match &node(name).inputs[input].1 {
        Producer::Op { node, .. } => layer.graph[*node].name.clone(),
        other => format!("{other:?}"),
    };
    // res1 = in + resid_dropout1(out_proj) becomes in + out_proj; context reads the softmax.
    assert_eq!(reads("res1", 1), "out_proj");
    assert_eq!(reads("res2", 1), "fc_out");
    assert_eq!(reads("context", 0), "attn_softmax");
    let embed = &without.blocks[0];
    assert_eq!(embed.graph[embed.output.unwrap()].name, "embed_add");
}

/// GPT-3 125M on 8 devices, 32 sequences of 2048 each, eager attention. Dropout on keeps, per
/// score element, the softmax's output (2 bytes), the mask (1) and the dropout's output that the
/// weighted sum reads (2); off, the weighted sum reads the softmax's output, kept once: 3 bytes
/// less. Each residual dropout and the embedding's keep a one-byte mask per element.
#[test]
fn dropout_off_keeps_no_masks_and_the_probabilities_once() {
    let (b, s, h, nh, l) = (32i64, 2048i64, 768i64, 12i64, 12i64);
    let scores = b * nh * s * s;
    let want = l * (3 * scores + 2 * b * s * h) + b * s * h;
    let on = activations(&[]);
    let off = activations(&["--dropout", "off"]);
    assert_eq!(on - off, Rational::from_integer(want.into()));
    assert_eq!(activations(&["--dropout", "on"]), activations(&[]));
}

#[test]
fn a_model_file_may_turn_dropout_off_and_the_command_line_overrides_it() {
    let dir = common::temp_dir("dropout-model-file");
    let base = include_str!("../models/gpt3-125m.yaml");
    std::fs::write(dir.join("m.yaml"), format!("{base}dropout: false\n")).unwrap();
    let act = |extra: &[&str]| {
        let mut args = vec!["--dp", "8", "--format", "json"];
        args.extend_from_slice(extra);
        let out = common::run_on_file(&dir, "m.yaml", &[&["cost"], &args[..]].concat());
        let v: Value = serde_json::from_str(&out).unwrap();
        v["per_device"]["memory"]["activations"]
            .as_str()
            .unwrap()
            .parse::<Rational>()
            .unwrap()
    };
    assert_eq!(act(&[]), activations(&["--dropout", "off"]));
    assert_eq!(act(&["--dropout", "on"]), activations(&[]));

    std::fs::write(dir.join("bad.yaml"), format!("{base}dropout: sometimes\n")).unwrap();
    let e = common::refused_in(&dir, &["cost", "bad.yaml"]);
    assert!(e.contains("bad.yaml:") && e.contains("dropout"), "{e}");
}

#[test]
fn bad_dropout_values_are_refused() {
    let e = common::refused(&["cost", "gpt3-125m", "--dropout", "maybe"]);
    assert!(e.contains("maybe") && e.contains("--dropout"), "{e}");

    let e = common::refused_validation_row("dropout-validation", "dropout: 3");
    assert!(e.contains("v.yaml:8:"), "{e}");
}
