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
use symshard::sym::{Bindings, Rational};

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

/// What the TorchScript exporter writes for the transformers' attention masks (computed from the
/// input at run time: Equal, LessOrEqual, Where of computed tensors) has no rule yet: those
/// files are refused below 99 % coverage, naming the first unmapped nodes, instead of being
/// costed short.
#[test]
fn torchscript_exports_without_rules_are_refused_with_their_root_causes() {
    let cases = [
        ("gpt2_ts.onnx", "LessOrEqual"),
        ("bert_ts.onnx", "Equal"),
        ("vit_ts.onnx", "Equal"),
    ];
    for (file, cause) in cases {
        let e = counts(file).expect_err(file);
        assert!(e.contains("below 99 %"), "{file}: {e}");
        assert!(e.contains(cause), "{file}: {e}");
    }
}
