//! The e-graph as a pass over the auto layout inside `rank`: on a GPT-2 graph imported from ONNX
//! (no `tp:` marks), the layer's program under the auto layout is rewritten, the operators the
//! extraction moves become overrides of the layout, and the `auto+e-graph` rows that layout
//! prices can be priced again by `cost` and `timeline` from a strategy file.

mod common;
use common::{json, stdout, symshard, temp_dir};
use serde_json::Value;

/// The ONNX fixture imported into `dir`.
fn imported(dir: &std::path::Path) -> String {
    let onnx = format!(
        "{}/tests/fixtures/onnx/exported/gpt2_ts_dynamic.onnx",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = dir.join("g2.yaml");
    symshard()
        .args(["import", "onnx", &onnx, "-o"])
        .arg(&out)
        .assert()
        .success();
    out.display().to_string()
}

fn rank(model: &str) -> Value {
    json(&[
        "rank",
        model,
        "--devices",
        "8",
        "--set",
        "B=8",
        "--set",
        "S=1024",
        "--fix",
        "tp=4",
        "--layouts",
        "auto",
        "--top",
        "40",
        "--format",
        "json",
    ])
}

#[test]
fn rank_lists_the_egraph_variant_of_the_auto_layout() {
    let dir = temp_dir("egraph-rank");
    let model = imported(&dir);
    let r = rank(&model);
    let rows = r["strategies"].as_array().unwrap();
    let eg: Vec<&Value> = rows.iter().filter(|s| s["layout"] == "e-graph").collect();
    assert!(!eg.is_empty(), "{rows:?}");
    // The variant's placements put the first layernorm on sequence shards.
    let p = &eg[0]["placements"];
    assert_eq!(
        p["model_transformer_h_0_ln_1_LayerNormalization"], "seq-shard",
        "{p}"
    );
    let layouts = r["egraph_layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), 1);
    assert_eq!(layouts[0]["tp"], 4);
    let saved: symshard::sym::Rational = layouts[0]["layer_wire_bytes_saved"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(saved > symshard::sym::Rational::from_integer(0.into()));
    let text = stdout(&[
        "rank",
        &model,
        "--devices",
        "8",
        "--set",
        "B=8",
        "--set",
        "S=1024",
        "--fix",
        "tp=4",
        "--layouts",
        "auto",
        "--top",
        "40",
    ]);
    assert!(text.contains("auto+e-graph"), "{text}");
    assert!(
        text.contains("e-graph over the auto layout (tp = 4)"),
        "{text}"
    );
}

#[test]
fn cost_and_timeline_price_the_egraph_variant_from_a_strategy_file() {
    let dir = temp_dir("egraph-strategy");
    let model = imported(&dir);
    let r = rank(&model);
    let row = r["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["layout"] == "e-graph")
        .unwrap()
        .clone();
    let mut file = format!(
        "dp: {}\ntp: {}\nmicrobatches: {}\nzero: {}\nsplits:\n",
        row["dp"], row["tp"], row["microbatches"], row["zero"]
    );
    for (op, i) in row["placements"].as_object().unwrap() {
        file.push_str(&format!("  {op}: {}\n", i.as_str().unwrap()));
    }
    let path = dir.join("egraph.yaml");
    std::fs::write(&path, file).unwrap();
    let s = path.display().to_string();
    let sets = ["--set", "B=8", "--set", "S=1024"];
    let mut args = vec!["cost", model.as_str(), "--strategy", s.as_str()];
    args.extend(sets);
    stdout(&args);
    let mut args = vec!["timeline", model.as_str(), "--strategy", s.as_str()];
    args.extend(sets);
    let t = stdout(&args);
    assert!(!t.is_empty());
}

#[test]
fn a_sequence_shard_on_an_operator_without_a_sequence_is_refused() {
    let dir = temp_dir("egraph-refused");
    let path = dir.join("bad.yaml");
    std::fs::write(&path, "dp: 1\ntp: 2\nsplits:\n  fc: seq-shard\n").unwrap();
    let out = symshard()
        .args(["cost", "resnet50", "--strategy"])
        .arg(&path)
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("seq-shard"), "{err}");
}
