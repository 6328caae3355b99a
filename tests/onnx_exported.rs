//! ONNX files exported by PyTorch itself (tools/export_onnx_fixtures.py: transformers' GPT-2,
//! BERT, ViT, ResNet-18, MobileNetV2 and EfficientNet-B0 layouts at a reduced size, in training
//! mode, by `torch.onnx.export` with the dynamo exporter and with the TorchScript exporter).
//! Every file either imports with 100 % coverage and PyTorch's own numbers (parameters,
//! `FlopCounterMode`'s forward matmul FLOPs, recorded in `reference.json` by the same script),
//! or is refused, naming its root causes: never a silent shortfall.

use serde_json::Value;
use std::path::{Path, PathBuf};
use symshard::diag::Source;
use symshard::import::{import_onnx, OnnxOptions};
use symshard::model::{model_cost, ModelLoader};
use symshard::sym::{Bindings, Poly, Rational};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/onnx/exported")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(dir().join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn int(v: &Value) -> Rational {
    Rational::from_integer(v.as_i64().unwrap().into())
}

/// Parameters and forward matmul FLOPs of an imported file (shapes are static in these exports).
fn counts(file: &str) -> Result<(Rational, Rational), String> {
    let out = import_onnx(&dir().join(file), &OnnxOptions::default(), &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    assert!(out.unmapped.is_empty(), "{file}: {:?}", out.unmapped);
    let m = ModelLoader::embedded()
        .unwrap()
        .load(&Source::new(format!("{file}.yaml"), out.yaml.clone()))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let c = model_cost(&m);
    let none = Bindings::new();
    Ok((
        c.params.eval(&none).unwrap(),
        c.forward.matmul.eval(&none).unwrap(),
    ))
}

/// The dynamo exporter's files import completely. Forward matmul FLOPs equal PyTorch's counter
/// on every model. Parameters equal `model.parameters()` except where the exporter itself
/// removed them from the graph: each batch normalisation folded into the convolution before it
/// (its 2·C weight and bias become that convolution's C bias: C fewer), and BERT's token-type
/// lookup by constant indices folded into a constant (its table absent from the file).
#[test]
fn dynamo_exports_import_with_pytorchs_numbers() {
    let r = reference();
    for (name, m) in r["models"].as_object().unwrap() {
        // `gpt2_wide` is exported by the TorchScript exporter only (tests/rank_auto.rs).
        if m["files"].get("dynamo").is_none() {
            assert_eq!(name, "gpt2_wide");
            continue;
        }
        let (params, flops) =
            counts(&format!("{name}_dynamo.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            flops,
            int(&m["matmul_flops"]),
            "{name}: forward matmul FLOPs"
        );
        let folded = int(&m["batchnorm_channels"]) + int(&m["token_type_params"]);
        assert_eq!(params, int(&m["params"]) - folded, "{name}: parameters");
    }
}

/// The TorchScript exporter (no shapes of intermediate tensors) keeps batch normalisation as a
/// node in training mode, and writes TensorFlow-style padding as a Pad whose amounts it computes
/// by reshaping, reversing and transposing constants (MobileNetV2) or as `auto_pad` SAME_UPPER
/// (EfficientNet-B0): the CNNs import with PyTorch's exact parameters and FLOPs.
#[test]
fn torchscript_cnns_import_exactly() {
    let r = reference();
    for name in ["resnet18", "mobilenet_v2", "efficientnet_b0"] {
        let m = &r["models"][name];
        let (params, flops) =
            counts(&format!("{name}_ts.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(params, int(&m["params"]), "{name}: parameters");
        assert_eq!(
            flops,
            int(&m["matmul_flops"]),
            "{name}: forward matmul FLOPs"
        );
    }
}

/// The TorchScript exporter traces transformers' attention masks and index tensors from the
/// fixed shapes (GPT-2's causal and padding mask: LessOrEqual, And, Gather, Where; BERT's
/// token-type ids and ViT's class-token broadcast: Equal, Where, GatherElements, Expand): computed
/// from constants alone, they are folded into constants, and the files import completely with
/// PyTorch's forward matmul FLOPs. Parameters are PyTorch's, except that this exporter writes
/// GPT-2's tied head as an initializer of its own (the transposed token embedding), which the
/// file does not tie: V·H = 1000·64 more (tools/export_onnx_fixtures.py: vocab_size 1000,
/// n_embd 64).
#[test]
fn torchscript_transformers_import_completely() {
    let r = reference();
    for (name, untied_head) in [("gpt2", 1000 * 64), ("bert", 0), ("vit", 0)] {
        let m = &r["models"][name];
        let file = format!("{name}_ts.onnx");
        let (params, flops) = counts(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            flops,
            int(&m["matmul_flops"]),
            "{name}: forward matmul FLOPs"
        );
        assert_eq!(
            params,
            int(&m["params"]) + Rational::from_integer(untied_head.into()),
            "{name}: parameters"
        );
        let out = import_onnx(&dir().join(&file), &OnnxOptions::default(), &mut |_, _| {}).unwrap();
        assert!(out.coverage.complete, "{name}");
        // The token ids index the embedding: no input is taken as a mask.
        assert!(out.mask_inputs.is_empty(), "{name}");
        assert_eq!(out.mapped, out.nodes, "{name}");
        // The folded nodes are said in the model file, by type.
        assert!(
            out.yaml
                .contains("computed from constants and shapes alone"),
            "{name}:\n{}",
            out.yaml
        );
    }
}

/// The same exporter with symbolic input sizes (`dynamic_axes`: batch, and sequence for the text
/// models): the masks, indices and sizes it traces are computed from the input's shape, which
/// the import evaluates as formulas (a size is at least 1, so `S` is never a broadcast's `-1`).
/// The files import completely with the batch and sequence as the symbols B and S, and at the
/// exported sizes (`input` in reference.json) give the fixed-size files' numbers.
#[test]
fn torchscript_dynamic_exports_import_with_symbols() {
    let r = reference();
    for (name, untied_head) in [("gpt2", 1000 * 64), ("bert", 0), ("vit", 0)] {
        let m = &r["models"][name];
        let file = format!("{name}_ts_dynamic.onnx");
        let out = import_onnx(&dir().join(&file), &OnnxOptions::default(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(out.unmapped.is_empty(), "{name}: {:?}", out.unmapped);
        assert_eq!(out.mapped, out.nodes, "{name}");
        assert!(!out.fixed_sizes, "{name}");
        assert!(
            !out.yaml.contains("exported without dynamic axes"),
            "{name}"
        );
        // The fixed-size export of the same model says what its numbers rule out.
        let fixed = import_onnx(
            &dir().join(format!("{name}_ts.onnx")),
            &OnnxOptions::default(),
            &mut |_, _| {},
        )
        .unwrap();
        assert!(fixed.fixed_sizes, "{name}");
        assert!(
            fixed.yaml.contains(
                "# Every size of this graph is a number (it was exported without dynamic axes)"
            ),
            "{name}"
        );
        let syms: Vec<&str> = out.symbols.iter().map(|(s, _)| s.as_str()).collect();
        let want: &[&str] = if name == "vit" { &["B"] } else { &["B", "S"] };
        assert_eq!(syms, want, "{name}");
        let model = ModelLoader::embedded()
            .unwrap()
            .load(&Source::new(format!("{file}.yaml"), out.yaml.clone()))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = model_cost(&model);
        let input = m["input"].as_array().unwrap();
        // The model's own values (the hidden size and heads the import writes as symbols),
        // and the exported sizes for the symbolic dimensions.
        let mut at = model.values.clone();
        at.insert("B".into(), int(&input[0]));
        if name != "vit" {
            at.insert("S".into(), int(&input[1]));
        }
        assert_eq!(
            c.forward.matmul.eval(&at).unwrap(),
            int(&m["matmul_flops"]),
            "{name}: forward matmul FLOPs"
        );
        assert_eq!(
            c.params.eval(&at).unwrap(),
            int(&m["params"]) + Rational::from_integer(untied_head.into()),
            "{name}: parameters"
        );
        // The same as the fixed-size file.
        let (p, f) = counts(&format!("{name}_ts.onnx")).unwrap();
        assert_eq!(
            (
                c.params.eval(&at).unwrap(),
                c.forward.matmul.eval(&at).unwrap()
            ),
            (p, f)
        );
    }
}

/// Coverage of an export with symbolic sizes counts what the fixed-size export of the same
/// model counts: its parameters (GPT-2's 230,144: PyTorch's 166,144 in reference.json and the
/// untied head's V·H = 1000·64), which no size changes, and FLOPs as formulas in B and S that at
/// the exported sizes (`input` in reference.json, B = 2, S = 32) are the fixed file's. Nothing
/// is unmapped, so 100 % holds at every size; it is said where it holds.
#[test]
fn a_symbolic_export_reports_its_parameters_in_coverage() {
    let r = reference();
    for (name, untied_head, basis) in [
        ("gpt2", 1000 * 64, "least at any B, S ≥ 1"),
        ("bert", 0, "least at any B, S ≥ 1"),
        ("vit", 0, "least at any B ≥ 1"),
    ] {
        let m = &r["models"][name];
        let import = |file: String| {
            import_onnx(&dir().join(file), &OnnxOptions::default(), &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .coverage
        };
        let dynamic = import(format!("{name}_ts_dynamic.onnx"));
        let fixed = import(format!("{name}_ts.onnx"));
        let params = int(&m["params"]) + Rational::from_integer(untied_head.into());
        assert_eq!(dynamic.mapped_params, params.to_string(), "{name}");
        assert_eq!(dynamic.mapped_params, fixed.mapped_params, "{name}");
        assert_eq!(
            (dynamic.params_percent, dynamic.flops_percent),
            (Some(100.0), Some(100.0)),
            "{name}"
        );
        assert!(dynamic.complete, "{name}");
        assert_eq!(dynamic.basis, basis, "{name}");
        assert_eq!(fixed.basis, "exact", "{name}");
        let input = m["input"].as_array().unwrap();
        let mut at = Bindings::new();
        at.insert("B".into(), int(&input[0]));
        at.insert("S".into(), int(&input[1]));
        let flops: Poly = dynamic.mapped_flops.parse().unwrap();
        assert!(!flops.is_constant(), "{name}: {flops}");
        assert_eq!(
            flops.eval(&at).unwrap().to_string(),
            fixed.mapped_flops,
            "{name}: forward FLOPs at B = 2, S = 32"
        );
        assert_eq!(dynamic.unmapped_flops.as_deref(), Some("0"), "{name}");
    }
}

/// GPT-2's folded mask still costs its work on the data: the additive mask is added to every
/// score, one operation per element of [B, heads, S, S] = [2, 4, 32, 32] in each of the 2 layers
/// (tools/export_onnx_fixtures.py: n_layer 2, n_head 4, S 32, B 2), which the import writes as
/// one layer repeated twice.
#[test]
fn torchscript_gpt2_mask_is_added_to_the_scores() {
    let out = import_onnx(
        &dir().join("gpt2_ts.onnx"),
        &OnnxOptions::default(),
        &mut |_, _| {},
    )
    .unwrap();
    let adds: Vec<&str> = out
        .yaml
        .lines()
        .filter(|l| l.contains("attn/Add`") && l.contains("op: scale"))
        .collect();
    assert_eq!(adds.len(), 1, "{}", out.yaml);
    assert!(out.yaml.contains("repeat: 2"), "{}", out.yaml);
    for l in adds {
        assert!(l.contains("bind: {b: 256, h: 32}"), "{l}");
    }
    assert!(out.yaml.contains("LessOrEqual ×1"), "{}", out.yaml);
}

/// A node of the traced mask turned into an operator without a rule (the op_type field of each
/// `Equal` node rewritten to `IsInf`, same length, in the file's bytes): nothing is folded past
/// it, the import is refused naming it, and `--allow-partial` imports it below 100 %.
#[test]
fn an_unsupported_mask_operator_is_refused_not_dropped() {
    let bytes = std::fs::read(dir().join("gpt2_ts.onnx")).unwrap();
    // NodeProto.op_type is field 4, length-delimited: tag 0x22, then the length.
    let (from, to) = (b"\x22\x05Equal", b"\x22\x05IsInf");
    let mut edited = bytes.clone();
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= edited.len() {
        if &edited[i..i + from.len()] == from {
            edited[i..i + from.len()].copy_from_slice(to);
            hits += 1;
        }
        i += 1;
    }
    assert_eq!(hits, 1, "one Equal node in the GPT-2 export");
    let tmp = std::env::temp_dir().join(format!("symshard-isinf-{}.onnx", std::process::id()));
    std::fs::write(&tmp, &edited).unwrap();
    let e = import_onnx(&tmp, &OnnxOptions::default(), &mut |_, _| {})
        .map(|_| ())
        .expect_err("refused");
    let e = e.to_string();
    assert!(e.contains("below 99 %") && e.contains("IsInf"), "{e}");
    let opts = OnnxOptions {
        allow_partial: true,
        ..OnnxOptions::default()
    };
    let out = import_onnx(&tmp, &opts, &mut |_, _| {}).unwrap();
    assert!(!out.coverage.complete);
    assert!(out.unmapped.iter().any(|u| u.op_type == "IsInf" && u.root));
    assert!(out.coverage.flops_percent.is_none_or(|f| f < 100.0));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_symshard"))
        .args(["import", "onnx"])
        .arg(&tmp)
        .arg("-o")
        .arg(std::env::temp_dir().join(format!("symshard-isinf-{}.yaml", std::process::id())))
        .output()
        .unwrap();
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("IsInf"));
    let _ = std::fs::remove_file(&tmp);
}

/// The attention mask as a second graph input, as a model serving padded batches is exported
/// (tools/export_onnx_fixtures.py, `*_mask.onnx`: `attention_mask`, int64 [2, 32], GPT-2 and
/// BERT, by the dynamo exporter and by the TorchScript exporter with fixed and with symbolic
/// sizes). What the graph computes from the mask alone (casts, index arithmetic, GatherND,
/// And, Where: integer and boolean work, no FLOPs) makes no operator and is said in the model
/// file; its addition to the scores is mapped, one operation per score. The files import
/// completely with the unmasked files' numbers: PyTorch's forward matmul FLOPs (which the
/// script checks equal with and without the mask), and parameters as in the tests above (the
/// dynamo exporter folds BERT's token-type lookup, the TorchScript one unties GPT-2's head).
#[test]
fn attention_mask_inputs_import_with_pytorchs_numbers() {
    let r = reference();
    // GPT-2's untied head: V·H = 1000·64 (tools/export_onnx_fixtures.py: vocab_size 1000,
    // n_embd 64).
    for (name, untied_head) in [("gpt2", 1000 * 64), ("bert", 0)] {
        let m = &r["models"][name];
        let input = m["input"].as_array().unwrap();
        for kind in ["dynamo_mask", "ts_mask", "ts_dynamic_mask"] {
            let file = m["files"][kind].as_str().unwrap();
            let out = import_onnx(&dir().join(file), &OnnxOptions::default(), &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(out.unmapped.is_empty(), "{file}: {:?}", out.unmapped);
            assert_eq!(out.mapped, out.nodes, "{file}");
            assert!(out.coverage.complete, "{file}");
            assert_eq!(out.mask_inputs, ["attention_mask"], "{file}");
            assert!(
                out.yaml.contains(
                    "# Integer input `attention_mask` indexes no table: it is taken as a mask"
                ),
                "{file}:\n{}",
                out.yaml
            );
            // No model input for the mask: nothing of the model reads it.
            assert!(!out.yaml.contains("    attention_mask:"), "{file}");
            let model = ModelLoader::embedded()
                .unwrap()
                .load(&Source::new(format!("{file}.yaml"), out.yaml.clone()))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let c = model_cost(&model);
            let mut at = model.values.clone();
            if kind == "ts_dynamic_mask" {
                at.insert("B".into(), int(&input[0]));
                at.insert("S".into(), int(&input[1]));
            }
            assert_eq!(
                c.forward.matmul.eval(&at).unwrap(),
                int(&m["matmul_flops"]),
                "{file}: forward matmul FLOPs"
            );
            let want = if kind == "dynamo_mask" {
                int(&m["params"]) - int(&m["token_type_params"])
            } else {
                int(&m["params"]) + Rational::from_integer(untied_head.into())
            };
            assert_eq!(c.params.eval(&at).unwrap(), want, "{file}: parameters");
            if kind == "ts_mask" {
                // The mask added to the scores: [B, heads, S, S] = [2, 4, 32, 32] (the script's
                // batch 2, n_head 4, sequence 32), one layer written once and repeated twice.
                let add = if name == "gpt2" {
                    "attn/Add`"
                } else {
                    "attention/self/Add`"
                };
                let adds: Vec<&str> = out
                    .yaml
                    .lines()
                    .filter(|l| l.contains(add) && l.contains("op: scale"))
                    .collect();
                assert_eq!(adds.len(), 1, "{file}:\n{}", out.yaml);
                assert!(adds[0].contains("bind: {b: 256, h: 32}"), "{}", adds[0]);
            }
        }
    }
}
