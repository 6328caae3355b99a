//! The shipped vision models against torchvision: exact parameter counts, forward FLOPs against
//! torchvision's `_ops` metadata, and one convolution's FLOPs derived by hand.

use symshard::model::{model_cost, op_costs, Model, ModelLoader};
use symshard::sym::{Bindings, Poly, Rational};

fn model(name: &str) -> Model {
    ModelLoader::embedded()
        .unwrap()
        .resolve(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn int(v: i64) -> Rational {
    Rational::from_integer(v.into())
}

fn params(name: &str) -> Rational {
    let m = model(name);
    model_cost(&m).params.eval(&m.values).unwrap()
}

/// The model's symbol values with one image (B = 1) at its default side (S = 224).
fn batch_of_one(m: &Model) -> Bindings {
    let mut values = m.values.clone();
    values.insert("B".into(), int(1));
    assert_eq!(values["S"], int(224), "{}: default image side", m.name);
    values
}

/// Forward matmul-like FLOPs (convolutions, linears, batched matmuls) at B = 1, halved: the
/// multiply-accumulates that torchvision's `_ops` counts.
fn forward_macs(name: &str) -> Rational {
    let m = model(name);
    let cost = model_cost(&m);
    cost.forward.matmul.eval(&batch_of_one(&m)).unwrap() / int(2)
}

/// `ours` within 1% of torchvision's `_ops` figure, given in GMACs as `thousandths / 1000`.
fn assert_within_1_percent(name: &str, ours: &Rational, gmacs_thousandths: i64) {
    let reference = int(gmacs_thousandths) * int(1_000_000);
    let ratio = ours / &reference;
    let off = if ratio > int(1) {
        &ratio - int(1)
    } else {
        int(1) - &ratio
    };
    assert!(
        off < Rational::new(1.into(), 100.into()),
        "{name}: {ours} MACs vs torchvision's {reference}: ratio {ratio}"
    );
}

// Parameter counts: torchvision weights meta["num_params"].

#[test]
fn vit_b16_parameters() {
    // torchvision ViT_B_16_Weights.IMAGENET1K_V1.meta["num_params"]
    assert_eq!(params("vit-b16"), int(86_567_656));
}

#[test]
fn resnet50_parameters() {
    // torchvision ResNet50_Weights.IMAGENET1K_V1.meta["num_params"] (V2 has the same)
    assert_eq!(params("resnet50"), int(25_557_032));
}

#[test]
fn vgg16_parameters() {
    // torchvision VGG16_Weights.IMAGENET1K_V1.meta["num_params"]
    assert_eq!(params("vgg16"), int(138_357_544));
}

#[test]
fn alexnet_parameters() {
    // torchvision AlexNet_Weights.IMAGENET1K_V1.meta["num_params"]
    assert_eq!(params("alexnet"), int(61_100_840));
}

#[test]
fn vit_b16_encoder_layer_parameters() {
    // One encoder layer: 2 layernorms 4·768, in_proj 3·768² + 3·768, out_proj 768² + 768,
    // MLP 2·768·3072 + 3072 + 768 = 12·768² + 13·768 = 7,087,872.
    let m = model("vit-b16");
    let layer: Poly = op_costs(&m)
        .into_iter()
        .filter(|op| op.repeat == Poly::parse("L").unwrap())
        .map(|op| op.params)
        .sum();
    assert_eq!(layer.eval(&m.values).unwrap(), int(7_087_872));
}

// Forward FLOPs against torchvision's `_ops` metadata (GFLOPS in its docs), which counts
// multiply-accumulates of convolutions and linears — and, for ViT, of the attention matmuls —
// for one 224 × 224 image. Our matmul-like FLOPs count a multiply-add as 2, so half of them must
// be within 1% of torchvision's figure. The exact MAC counts are the sums over the layer shapes.

#[test]
fn resnet50_forward_flops_match_torchvision() {
    // torchvision ResNet50_Weights.IMAGENET1K_V1.meta["_ops"] = 4.089
    let macs = forward_macs("resnet50");
    assert_eq!(macs, int(4_089_184_256));
    assert_within_1_percent("resnet50", &macs, 4_089);
}

#[test]
fn vgg16_forward_flops_match_torchvision() {
    // torchvision VGG16_Weights.IMAGENET1K_V1.meta["_ops"] = 15.47
    let macs = forward_macs("vgg16");
    assert_eq!(macs, int(15_470_264_320));
    assert_within_1_percent("vgg16", &macs, 15_470);
}

#[test]
fn alexnet_forward_flops_match_torchvision() {
    // torchvision AlexNet_Weights.IMAGENET1K_V1.meta["_ops"] = 0.714
    let macs = forward_macs("alexnet");
    assert_eq!(macs, int(714_188_480));
    assert_within_1_percent("alexnet", &macs, 714);
}

#[test]
fn vit_b16_forward_flops_match_torchvision() {
    // torchvision ViT_B_16_Weights.IMAGENET1K_V1.meta["_ops"] = 17.564
    // Patch convolution 768·3·16·16·196, per layer 197·12·768² (linears) + 2·197²·768
    // (scores and context), head 768·1000.
    let macs = forward_macs("vit-b16");
    assert_eq!(
        macs,
        int(768 * 3 * 16 * 16 * 196
            + 12 * (197 * 12 * 768 * 768 + 2 * 197 * 197 * 768)
            + 768 * 1000)
    );
    assert_eq!(macs, int(17_563_828_224));
    assert_within_1_percent("vit-b16", &macs, 17_564);
}

#[test]
fn resnet50_conv1_flops_by_hand() {
    // conv1: 7×7 kernel, 3 → 64 channels, stride 2, 112 × 112 outputs, one image:
    // 2 · 64 · 3 · 7 · 7 · 112 · 112 = 236,027,904 FLOPs forward, all matmul-like.
    let m = model("resnet50");
    let conv1 = op_costs(&m)
        .into_iter()
        .find(|op| op.name == "conv1")
        .expect("resnet50 has conv1");
    let values = batch_of_one(&m);
    assert_eq!(conv1.rule, "conv2d");
    assert_eq!(conv1.repeat, Poly::one());
    assert_eq!(
        conv1.forward.matmul.eval(&values).unwrap(),
        int(2 * 64 * 3 * 7 * 7 * 112 * 112)
    );
    assert_eq!(conv1.forward.other.eval(&values).unwrap(), int(0));
    assert_eq!(conv1.params.eval(&values).unwrap(), int(64 * 3 * 7 * 7));
}
