//! Auto-sharding inside `rank`: for each tensor-parallel degree the layout the per-operator
//! search finds is priced next to the annotated one, with the same knobs, memory and
//! redistribution rules. On the GPT and Llama families it costs no more than the annotated
//! Megatron-LM layout; on a GPT graph without annotations it gives real tensor parallelism at
//! no more than the annotated family's cost; JSON carries its placements and the table marks
//! which layout a row uses.

mod common;
use common::{json, symshard};
use serde_json::Value;
use std::str::FromStr;
use symshard::sym::Rational;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/auto/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `rank ARGS --format json`, which must succeed.
fn rank_json(args: &[&str]) -> Value {
    let mut all = vec!["rank"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    json(&all)
}

fn rational(v: &Value) -> Rational {
    Rational::from_str(v.as_str().unwrap()).unwrap()
}

/// The exact cost of the top row of `rank model --fix knobs --layouts which`, and its layout.
fn top(model: &str, sets: &[&str], devices: &str, knobs: &str, which: &str) -> (Rational, String) {
    let mut args = vec![
        model,
        "--devices",
        devices,
        "--fix",
        knobs,
        "--layouts",
        which,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    args.extend(["--top", "1"]);
    let v = rank_json(&args);
    let r = &v["strategies"][0];
    (
        rational(&r["relative_cost"]),
        r["layout"].as_str().unwrap().to_string(),
    )
}

/// At every degree and with sequence parallelism on and off, the auto layout costs no more than
/// the annotated (Megatron-LM) layout with the same knobs; on GPT-3 it is strictly cheaper
/// somewhere (the search finds a better layout than the annotations).
#[test]
fn auto_costs_no_more_than_megatron_on_gpt_and_llama() {
    for (model, sets) in [
        ("gpt3-1.3b", vec!["L=2", "B=16", "S=2048"]),
        ("llama3-8b", vec!["L=2", "B=16", "S=4096"]),
    ] {
        let mut cheaper = false;
        for tp in [2, 4] {
            for sp in ["off", "on"] {
                let knobs = format!("tp={tp},pp=1,mbs=1,recompute=none,zero=1,sp={sp}");
                let (ann, kind) = top(model, &sets, "8", &knobs, "annotated");
                assert_eq!(kind, "annotated");
                let (auto, kind) = top(model, &sets, "8", &knobs, "auto");
                assert_eq!(kind, "auto", "{model} {knobs}");
                assert!(
                    auto <= ann,
                    "{model} {knobs}: auto {auto} > annotated {ann}"
                );
                cheaper |= auto < ann;
                // Both together: the cheaper of the two comes first.
                let (both, _) = top(model, &sets, "8", &knobs, "both");
                assert_eq!(both, auto.clone().min(ann), "{model} {knobs}");
            }
        }
        if model.starts_with("gpt3") {
            assert!(cheaper, "{model}: the search never beat the annotations");
        }
    }
}

/// GPT-2's graph without annotations: the annotated layout replicates every operator, the auto
/// layout splits features; its rows cost no more than the annotated gpt2-124m (Megatron-LM) at
/// the same knobs, and far less than replication.
#[test]
fn unannotated_gpt2_gets_tensor_parallelism() {
    let plain = fixture("gpt2-unannotated");
    for tp in [2, 4] {
        let knobs = format!("tp={tp},pp=1,mbs=4,recompute=none,zero=0,sp=off");
        let (auto, kind) = top(&plain, &[], "8", &knobs, "auto");
        assert_eq!(kind, "auto");
        let (replicated, _) = top(&plain, &[], "8", &knobs, "annotated");
        let (megatron, _) = top("gpt2-124m", &[], "8", &knobs, "annotated");
        assert!(
            auto <= megatron,
            "tp {tp}: auto {auto} > Megatron {megatron}"
        );
        // Real tensor parallelism: at least a quarter below replication (the search prices the
        // memory-bound operators' HBM bytes as the relative cost does, so it may keep the
        // residual stream and layer norms split where Megatron-LM replicates them).
        let saving = (&replicated - &auto) / &replicated;
        assert!(
            saving > Rational::new(1.into(), 4.into()),
            "tp {tp}: auto {auto}, replicated {replicated}"
        );
    }
    // Both layouts searched together: at tp = 4 without sequence parallelism the auto layout
    // leads.
    let v = rank_json(&[
        &plain,
        "--devices",
        "8",
        "--top",
        "3",
        "--fix",
        "tp=4,sp=off",
    ]);
    let rows = v["strategies"].as_array().unwrap();
    assert_eq!(rows[0]["layout"], "auto", "{rows:#?}");
}

/// `--format json` gives every auto row its per-operator placements (every operator of the
/// model, an index or `none`) and how they were found; annotated rows have none. The table
/// marks the layout of each row and explains the column.
#[test]
fn json_carries_placements_and_table_marks_layouts() {
    let base = [
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--fix",
        "tp=4,pp=1,sp=off",
    ];
    let mut args = base.to_vec();
    // Enough rows that the annotated layout's appear behind the auto layout's and its e-graph
    // variant's.
    args.extend(["--top", "80", "--layouts", "both"]);
    let v = rank_json(&args);
    let rows = v["strategies"].as_array().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for r in rows {
        let kind = r["layout"].as_str().unwrap();
        kinds.insert(kind.to_string());
        match kind {
            // The e-graph's variant of the auto layout carries its placements too.
            "auto" | "e-graph" => {
                let p = r["placements"].as_object().unwrap();
                for op in ["q_proj", "fc_in", "fc_out", "ln1", "wte", "lm_head"] {
                    assert!(p.contains_key(op), "{op} missing from {p:?}");
                }
                assert!(p.values().any(|x| x != "none"));
                assert_eq!(r["layout_search"], "exact");
            }
            "annotated" => assert!(r.get("placements").is_none()),
            k => panic!("layout {k}"),
        }
    }
    assert!(
        kinds.contains("auto") && kinds.contains("annotated"),
        "{kinds:?}"
    );
    assert_eq!(v["auto_layouts"][0]["tp"], 4);
    // --emit json: the top row's analysis under its own layout.
    let mut e = base.to_vec();
    e.extend(["--emit", "json", "--top", "1", "--layouts", "auto"]);
    let v = rank_json(&e);
    assert_eq!(v["strategies"][0]["layout"], "auto");
    let text = v["emitted"].to_string();
    let p = v["strategies"][0]["placements"].as_object().unwrap();
    assert!(text.contains("\"tp\""), "{text}");
    assert!(!p.is_empty());
    // The table: a layout column, the legend.
    let out = symshard().arg("rank").args(&args).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let head = text.lines().find(|l| l.starts_with("rank")).unwrap();
    assert!(head.contains(" layout "), "{head}");
    assert!(
        text.contains("  auto  ") || text.contains(" auto "),
        "{text}"
    );
    assert!(text.contains("annotated"), "{text}");
    assert!(
        text.contains("layout: the tensor-parallel layout"),
        "{text}"
    );
    assert!(text.contains("auto layouts ("), "{text}");
}

/// `--layouts annotated` prices what `rank` priced before: no auto row and no search; an
/// unknown value is a usage error (exit code 2).
#[test]
fn layouts_flag() {
    let v = rank_json(&[
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--layouts",
        "annotated",
        "--top",
        "20",
    ]);
    for r in v["strategies"].as_array().unwrap() {
        assert_eq!(r["layout"], "annotated");
    }
    assert!(v.get("auto_layouts").is_none());
    let both = rank_json(&[
        "gpt3-125m",
        "--devices",
        "8",
        "--set",
        "L=2",
        "--top",
        "20",
        "--layouts",
        "both",
    ]);
    assert!(
        both["evaluated"].as_u64().unwrap() > v["evaluated"].as_u64().unwrap(),
        "both layouts price more strategies"
    );
    symshard()
        .args([
            "rank",
            "gpt3-125m",
            "--devices",
            "8",
            "--layouts",
            "megatron",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--layouts"));
}

/// GPT-2 at its real width (hidden 768, 12 heads) exported by `torch.onnx.export` (TorchScript
/// exporter, symbolic batch and sequence; `tools/export_onnx_fixtures.py --wide-only`), with
/// no annotations: the import writes its hidden size and heads as symbols and its fused
/// query-key-value projection as one projection per piece, with PyTorch's own parameter and
/// FLOP counts (`reference.json`, from `model.parameters()` and `FlopCounterMode`; the exporter
/// writes the tied head as its own initializer, V·H more), and `rank` finds tensor parallelism
/// of its own: every GEMM of the layer split, well below replication, and no costlier than
/// Megatron-LM's layout written on the same graph by hand.
#[test]
fn an_imported_gpt2_gets_tensor_parallelism_of_its_own() {
    let dir = format!(
        "{}/tests/fixtures/onnx/exported",
        env!("CARGO_MANIFEST_DIR")
    );
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/reference.json")).unwrap())
            .unwrap();
    let want = &reference["models"]["gpt2_wide"];
    let out = std::env::temp_dir().join(format!("gpt2_wide_{}.yaml", std::process::id()));
    let o = symshard()
        .args([
            "import",
            "onnx",
            &format!("{dir}/gpt2_wide_ts_dynamic.onnx"),
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = out.to_string_lossy().to_string();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("roles: {batch: B, sequence: S, hidden: H, heads: NH}"),
        "{text}"
    );
    assert!(text.contains("# 2 fused projection(s)"), "{text}");
    // PyTorch's numbers at the exported input, 2 sequences of 32 tokens.
    let cost = json(&[
        "cost", &path, "--set", "B=2", "--set", "S=32", "--format", "json",
    ]);
    let params = Rational::from_str(cost["params"].as_str().unwrap()).unwrap();
    // V·H of the exported configuration (tools/export_onnx_fixtures.py, `wide`: vocab_size
    // 50257, n_embd 768).
    let untied_head = 50257 * 768;
    assert_eq!(
        params,
        Rational::from_integer((want["params"].as_i64().unwrap() + untied_head).into())
    );
    let flops = Rational::from_str(cost["flops"]["forward"]["matmul"].as_str().unwrap()).unwrap();
    assert_eq!(
        flops,
        Rational::from_integer(want["matmul_flops"].as_i64().unwrap().into())
    );
    let sets = ["B=8", "S=1024"];
    // At most this percentage of replication: regression bounds above the 64 % and 47 %
    // measured (README), not accuracy claims.
    for (tp, most) in [(2u64, 70), (4, 50)] {
        let knobs = format!("tp={tp},pp=1,mbs=8,recompute=none,zero=0,sp=off");
        let (auto, kind) = top(&path, &sets, &tp.to_string(), &knobs, "auto");
        assert_eq!(kind, "auto");
        let (replicated, _) = top(&path, &sets, &tp.to_string(), &knobs, "annotated");
        assert!(
            &auto * Rational::from_integer(100.into())
                < &replicated * Rational::from_integer(most.into()),
            "tp {tp}: auto {auto}, replicated {replicated}"
        );
    }
    // Megatron-LM's layout written on the imported graph by hand (the query, key and value
    // projections and the MLP's first GEMM split by columns, the attention by heads, both
    // output projections by rows): the auto rows cost no more.
    let megatron: &[(&str, &str)] = &[
        ("attn_c_attn_Gemm_piece1", "n"),
        ("attn_c_attn_Gemm_piece2", "n"),
        ("attn_c_attn_Gemm_piece3", "n"),
        ("attn_Split_0", "h"),
        ("attn_Split_1", "h"),
        ("attn_Split_2", "h"),
        ("attn_Reshape", "n"),
        ("attn_Reshape_1", "n"),
        ("attn_Reshape_2", "n"),
        ("attn_Transpose", "n"),
        ("attn_Transpose_1", "n"),
        ("attn_Transpose_2", "n"),
        ("attn_MatMul", "b"),
        ("attn_Mul", "b"),
        ("attn_Add", "b"),
        ("attn_Softmax", "b"),
        ("attn_Dropout", "b"),
        ("attn_MatMul_1", "b"),
        ("attn_Transpose_3", "m"),
        ("attn_Reshape_3", "c"),
        ("attn_c_proj_Reshape", "h"),
        ("attn_c_proj_Gemm", "k"),
        ("mlp_c_fc_Gemm", "n"),
        ("mlp_c_fc_Reshape_1", "h"),
        ("mlp_act_Mul", "h"),
        ("mlp_act_Pow", "h"),
        ("mlp_act_Mul_1", "h"),
        ("mlp_act_Add", "h"),
        ("mlp_act_Mul_2", "h"),
        ("mlp_act_Tanh", "h"),
        ("mlp_act_Add_1", "h"),
        ("mlp_act_Mul_3", "h"),
        ("mlp_c_proj_Reshape", "h"),
        ("mlp_c_proj_Gemm", "k"),
    ];
    let mut annotated = String::new();
    let mut marked = 0;
    for line in text.lines() {
        let op = megatron
            .iter()
            .find(|(op, _)| line.contains(&format!("name: model_transformer_h_0_{op}, op:")));
        match op {
            Some((_, index)) => {
                annotated.push_str(&line.replacen(", doc:", &format!(", tp: {index}, doc:"), 1));
                marked += 1;
            }
            None => annotated.push_str(line),
        }
        annotated.push('\n');
    }
    assert_eq!(marked, megatron.len());
    let marked_path =
        std::env::temp_dir().join(format!("gpt2_wide_tp_{}.yaml", std::process::id()));
    std::fs::write(&marked_path, annotated).unwrap();
    let marked_path = marked_path.to_string_lossy().to_string();
    for tp in [2u64, 4] {
        let knobs = format!("tp={tp},pp=1,mbs=8,recompute=none,zero=0,sp=off");
        let (auto, _) = top(&path, &sets, &tp.to_string(), &knobs, "auto");
        let (meg, kind) = top(&marked_path, &sets, &tp.to_string(), &knobs, "annotated");
        assert_eq!(kind, "annotated");
        assert!(
            auto <= meg,
            "tp {tp}: auto {auto} > Megatron on the import {meg}"
        );
    }
    let _ = std::fs::remove_file(&marked_path);
    let v = rank_json(&[
        &path,
        "--devices",
        "4",
        "--set",
        "B=8",
        "--set",
        "S=1024",
        "--fix",
        "tp=4,pp=1,mbs=8,recompute=none,zero=0,sp=off",
        "--layouts",
        "auto",
        "--top",
        "1",
    ]);
    let p = v["strategies"][0]["placements"].as_object().unwrap();
    for op in [
        "model_transformer_h_0_attn_c_attn_Gemm_piece1",
        "model_transformer_h_0_attn_c_attn_Gemm_piece2",
        "model_transformer_h_0_attn_c_attn_Gemm_piece3",
        "model_transformer_h_0_attn_MatMul",
        "model_transformer_h_0_mlp_c_fc_Gemm",
        "model_transformer_h_0_mlp_c_proj_Gemm",
    ] {
        assert!(p.get(op).is_some_and(|x| x != "none"), "{op}: {p:?}");
    }
    let _ = std::fs::remove_file(&out);
}
