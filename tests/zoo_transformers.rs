//! Known-answer tests of the shipped transformer models: exact parameter counts against the
//! published counts (each test names its source), and hand-derived forward FLOPs of one layer.
//!
//! Counting conventions: trained parameters only, each tied tensor once, buffers (causal masks,
//! rotary `inv_freq`) not counted; a multiply-add is 2 FLOPs and matmul-like FLOPs are what
//! PyTorch's FLOP counter counts (`torch.utils.flop_counter.FlopCounterMode`, PyTorch docs:
//! matmul-like operators only).

use num_bigint::BigInt;
use num_traits::Signed;
use symshard::model::{model_cost, op_costs, Model, ModelLoader};
use symshard::sym::{Poly, Rational};

fn load(name: &str) -> Model {
    ModelLoader::embedded()
        .expect("shipped rules load")
        .resolve(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn int(n: i64) -> Rational {
    Rational::from_integer(BigInt::from(n))
}

/// The model's parameter count under its own values.
fn params(name: &str) -> Rational {
    let model = load(name);
    model_cost(&model)
        .params
        .eval(&model.values)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn assert_params(name: &str, expected: i64) {
    assert_eq!(params(name), int(expected), "{name}");
}

/// GPT-3 (Brown et al. 2020, Table 2.1) publishes only rounded sizes: the count must be the
/// exact one derived from the architecture, and within 2% of the paper's figure.
fn assert_gpt3(name: &str, exact: i64, nominal: i64) {
    assert_params(name, exact);
    let rel = (int(exact) - int(nominal)) / int(nominal);
    let limit = Rational::new(BigInt::from(2), BigInt::from(100));
    assert!(
        rel.abs() < limit,
        "{name}: {exact} is {rel} away from the paper's {nominal}"
    );
}

/// Forward FLOPs (matmul-like) of one copy of block `block`, with `set` overriding the model's
/// values.
fn block_forward_matmul(model: &Model, block: &str, set: &[(&str, i64)]) -> Rational {
    let names: Vec<&str> = model
        .blocks
        .iter()
        .find(|b| b.name == block)
        .unwrap_or_else(|| panic!("no block `{block}`"))
        .ops()
        .map(|o| o.name.as_str())
        .collect();
    let total: Poly = op_costs(model)
        .into_iter()
        .filter(|o| names.contains(&o.name.as_str()))
        .map(|o| o.forward.matmul)
        .sum();
    let mut values = model.values.clone();
    for (k, v) in set {
        values.insert(k.to_string(), int(*v));
    }
    total.eval(&values).unwrap()
}

// ---------------------------------------------------------------------------------- GPT-2

/// HF `GPT2Model.from_pretrained("gpt2").num_parameters()` = 124,439,808 (lm_head tied to wte).
#[test]
fn gpt2_124m_params() {
    assert_params("gpt2-124m", 124_439_808);
}

/// HF `AutoModel.from_pretrained("gpt2-xl")` parameter count 1,557,611,200 (lm_head tied).
#[test]
fn gpt2_1_5b_params() {
    assert_params("gpt2-1.5b", 1_557_611_200);
}

// ---------------------------------------------------------------------------------- GPT-3
// Exact counts derived from Table 2.1's architecture: V·d + 2048·d + L·(12d² + 13d) + 2d with
// V = 50257; the paper's n_params are rounded.

/// Table 2.1 "GPT-3 Small": 125M; L 12, d 768.
#[test]
fn gpt3_125m_params() {
    assert_gpt3("gpt3-125m", 125_226_240, 125_000_000);
}

/// Table 2.1 "GPT-3 Medium": 350M; L 24, d 1024.
#[test]
fn gpt3_350m_params() {
    assert_gpt3("gpt3-350m", 355_871_744, 350_000_000);
}

/// Table 2.1 "GPT-3 Large": 760M; L 24, d 1536.
#[test]
fn gpt3_760m_params() {
    assert_gpt3("gpt3-760m", 760_300_032, 760_000_000);
}

/// Table 2.1 "GPT-3 XL": 1.3B; L 24, d 2048.
#[test]
fn gpt3_1_3b_params() {
    assert_gpt3("gpt3-1.3b", 1_315_723_264, 1_300_000_000);
}

/// Table 2.1 "GPT-3 2.7B": L 32, d 2560.
#[test]
fn gpt3_2_7b_params() {
    assert_gpt3("gpt3-2.7b", 2_651_553_280, 2_700_000_000);
}

/// Table 2.1 "GPT-3 6.7B": L 32, d 4096.
#[test]
fn gpt3_6_7b_params() {
    assert_gpt3("gpt3-6.7b", 6_658_404_352, 6_700_000_000);
}

/// Table 2.1 "GPT-3 13B": L 40, 40 heads of d_head 128, so d_model 5120 (the printed 5140 does
/// not divide into 40 heads).
#[test]
fn gpt3_13b_params() {
    assert_gpt3("gpt3-13b", 12_853_386_240, 13_000_000_000);
}

/// Table 2.1 "GPT-3 175B": L 96, d 12288.
#[test]
fn gpt3_175b_params() {
    assert_gpt3("gpt3-175b", 174_604_259_328, 175_000_000_000);
}

// ---------------------------------------------------------------------------------- BERT

/// HF `BertModel.from_pretrained("bert-base-uncased").num_parameters()` = 109,482,240 (with the
/// pooler, without the pre-training heads); keras-hub `bert_base_en_uncased` params 109482240.
#[test]
fn bert_base_params() {
    assert_params("bert-base", 109_482_240);
}

/// HF `BertModel.from_pretrained("bert-large-uncased")` = 335,141,888; keras-hub
/// `bert_large_en_uncased` params 335141888.
#[test]
fn bert_large_params() {
    assert_params("bert-large", 335_141_888);
}

// ---------------------------------------------------------------------------------- T5

/// HF `T5ForConditionalGeneration.from_pretrained("t5-base").num_parameters()` = 222,903,552
/// (lm_head tied to the shared embedding, two relative-bias tables); keras-hub `t5_base` params
/// 222903552.
#[test]
fn t5_base_params() {
    assert_params("t5-base", 222_903_552);
}

// ---------------------------------------------------------------------------------- Llama

/// HF Hub `meta-llama/Llama-2-7b-hf` safetensors F16 6,738,415,616 (its F32 2,048 are the
/// rotary `inv_freq` buffers, 32 × 64).
#[test]
fn llama2_7b_params() {
    assert_params("llama2-7b", 6_738_415_616);
}

/// HF Hub `meta-llama/Llama-2-70b-hf` safetensors.total 68,976,653,312 less 80 × 64 `inv_freq`
/// buffers = 68,976,648,192.
#[test]
fn llama2_70b_params() {
    assert_params("llama2-70b", 68_976_648_192);
}

/// HF Hub `meta-llama/Meta-Llama-3-8B` safetensors.total 8,030,261,248.
#[test]
fn llama3_8b_params() {
    assert_params("llama3-8b", 8_030_261_248);
}

/// HF Hub `meta-llama/Llama-3.1-70B` safetensors.total 70,553,706,496 (Meta-Llama-3-70B has the
/// same tensor shapes).
#[test]
fn llama3_70b_params() {
    assert_params("llama3-70b", 70_553_706_496);
}

/// HF Hub `meta-llama/Llama-3.1-405B` safetensors.total 405,853,388,800 (8 key/value heads).
#[test]
fn llama3_405b_params() {
    assert_params("llama3-405b", 405_853_388_800);
}

// ---------------------------------------------------------------------------------- FLOPs

/// One Llama-2-7B decoder layer forward at B = 1, S = 4096 (T = B·S tokens, H = 4096, F = 11008,
/// 32 heads = 32 key/value heads, so the grouped-query factors are 1):
///   q, k, v, o projections   4 · 2·T·H·H      = 8·T·H²
///   gate, up, down           3 · 2·T·H·F      = 6·T·H·F
///   QKᵀ and PV               2 · 2·B·S²·H     = 4·B·S²·H
/// total 8·T·H² + 6·T·H·F + 4·B·S²·H = 1,932,735,283,200, derived by hand from the layer's
/// shapes (HF LlamaDecoderLayer).
#[test]
fn llama2_7b_layer_forward_flops() {
    let model = load("llama2-7b");
    let layer = block_forward_matmul(&model, "layer", &[("B", 1), ("S", 4096)]);
    assert_eq!(layer, int(1_932_735_283_200));
    // The whole model: L layers and the untied head 2·T·H·V (the embedding lookup and the loss
    // are not matmul-like).
    let cost = model_cost(&model);
    let mut values = model.values.clone();
    values.insert("B".into(), int(1));
    values.insert("S".into(), int(4096));
    let head = 2 * 4096_i64 * 4096 * 32000;
    assert_eq!(
        cost.forward.matmul.eval(&values).unwrap(),
        int(32 * 1_932_735_283_200 + head)
    );
}

/// One Llama-3-8B decoder layer forward at B = 1, S = 8192 with grouped-query attention
/// (T = B·S, H = 4096, NH = 32 query heads, KV = 8 key/value heads, D = 128, F = 14336):
///   q and o projections      2 · 2·T·H·(NH·D)
///   k and v projections      2 · 2·T·H·(KV·D)
///   QKᵀ and PV               2 · 2·B·S²·(NH·D)   (every query head still scores every key)
///   gate, up, down           3 · 2·T·H·F
/// = 4·T·H·NH·D + 4·T·H·KV·D + 4·B·S²·NH·D + 6·T·H·F = 4,672,924,418,048.
#[test]
fn llama3_8b_layer_forward_flops() {
    let model = load("llama3-8b");
    let layer = block_forward_matmul(&model, "layer", &[("B", 1), ("S", 8192)]);
    let (t, b, s, h, nh, kv, d, f) = (8192_i64, 1_i64, 8192_i64, 4096_i64, 32, 8, 128, 14336);
    let expected = 4 * t * h * nh * d + 4 * t * h * kv * d + 4 * b * s * s * nh * d + 6 * t * h * f;
    assert_eq!(expected, 4_672_924_418_048);
    assert_eq!(layer, int(expected));
}

/// One GPT-2 124M block forward at B = 1, S = 1024 (T = B·S, d = 768, f = 4d):
///   QKV, attention output, MLP in and out   24·T·d²
///   QKᵀ and PV                              4·B·S²·d
/// = 17,716,740,096, derived by hand from the block's shapes (HF GPT2Block); bias adds are
/// elementwise, not matmul-like.
#[test]
fn gpt2_124m_layer_forward_flops() {
    let model = load("gpt2-124m");
    let layer = block_forward_matmul(&model, "layer", &[("B", 1), ("S", 1024)]);
    assert_eq!(layer, int(17_716_740_096));
}
