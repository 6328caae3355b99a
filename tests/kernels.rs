//! How a step's small kernels run, as Megatron-LM and PyTorch run them: elementwise pairs that
//! Megatron-LM fuses into one kernel (the attention scores' scale inside the softmax, the
//! residual's dropout and add), and parameter gradients that run a kernel of their own (a bias's
//! reduction over rows, layer normalisation's second pass over its input and output gradient).

mod common;

use symshard::calib::Calibration;
use symshard::diag::Source;
use symshard::rules::{load_rule, RuleSet};
use symshard::strategy::Knobs;
use symshard::sym::{Poly, Rational};
use symshard::timeline::cost::KernelClass;
use symshard::timeline::{time_plan, PlanBlock, Rates, TimingPlan};

fn poly(s: &str) -> Poly {
    Poly::parse(s).unwrap()
}

#[test]
fn a_bias_gradient_and_layer_norm_parameters_run_a_kernel_of_their_own() {
    let set = RuleSet::embedded().unwrap();
    // y[b, n] = x·W + bias: the bias's gradient Σ_b dy[b, n] reads dy (2 bytes a value) and
    // writes [n]; the GEMMs' share of the backward bytes gives up exactly that.
    let (own, shared) = set.get("linear").unwrap().param_grad_kernel_bytes(2);
    assert_eq!(own, poly("2*b*n + 2*n"));
    assert_eq!(shared, own);
    // Layer normalisation reads dy and x again, with the fp32 mean and rstd it saved, to write
    // the gradients of gamma and beta; only those writes leave the input-gradient kernel.
    let (own, shared) = set.get("layernorm").unwrap().param_grad_kernel_bytes(2);
    assert_eq!(own, poly("4*b*h + 8*b + 4*h"));
    assert_eq!(shared, poly("4*h"));
    // No bias, no parameter: no kernel of its own.
    for name in ["matmul", "softmax", "gelu", "dropout"] {
        let (own, shared) = set.get(name).unwrap().param_grad_kernel_bytes(2);
        assert_eq!((own, shared), (Poly::zero(), Poly::zero()), "{name}");
    }
}

/// The error loading the rule file `text` (named `bad.yaml`), which must be refused.
fn rule_refusal(text: &str) -> String {
    load_rule(&Source::new("bad.yaml", text), None)
        .unwrap_err()
        .to_string()
}

/// The errors loading two rules that say `flag: true` (line 11) where it cannot apply: a linear
/// einsum (no explicit `flops`), and an elementwise rule with explicit `flops` and no parameter,
/// whose input is shaped as its output.
fn flag_refusals(flag: &str) -> [String; 2] {
    let einsum = format!(
        "name: bad\ndoc: d\nindices:\n  b: map\n  k: reduce-sum\n  n: map\n\
         inputs:\n  x: [b, k]\n  w: {{dims: [k, n], param: true}}\n\
         output: [b, n]\n{flag}: true\n"
    );
    let elementwise = format!(
        "name: bad\ndoc: d\nindices:\n  b: map\n  h: map\n\
         inputs:\n  x: [b, h]\noutput: [b, h]\nflops: \"b*h\"\n\
         backward_flops: \"b*h\"\n{flag}: true\n"
    );
    let errs = [rule_refusal(&einsum), rule_refusal(&elementwise)];
    for e in &errs {
        assert!(e.starts_with("bad.yaml:11:"), "{e}");
    }
    errs
}

#[test]
fn param_grad_kernel_is_refused_where_it_cannot_apply() {
    let [einsum, no_params] = flag_refusals("param_grad_kernel");
    assert!(einsum.contains("explicit `flops`"), "{einsum}");
    assert!(no_params.contains("parameter input"), "{no_params}");
}

/// One GPT-3 125M step on one device, eight micro-batches of one sequence, eager attention.
/// Its shapes (Brown et al. 2020, Table 2.1, as `models/gpt3-125m.yaml` gives them): 12 heads,
/// hidden 768, sequence 2048.
fn plan() -> (TimingPlan, Calibration) {
    plan_with(Knobs {
        microbatches: 8,
        ..Knobs::data_parallel(1)
    })
}

fn plan_with(knobs: Knobs) -> (TimingPlan, Calibration) {
    common::plan_on("gpt3-125m", &[("B", 8)], &knobs, "a100-80gb")
}

fn layer(plan: &TimingPlan) -> &PlanBlock {
    plan.blocks.iter().find(|b| b.layer).unwrap()
}

#[test]
fn megatron_fuses_the_scores_scale_into_the_softmax_and_the_dropout_into_the_add() {
    let (plan, _) = plan();
    let blk = layer(&plan);
    let op = |name: &str| blk.ops.iter().find(|o| o.name == name).unwrap();
    let r = |v: i64| Rational::from_integer(v.into());
    // One sequence of 2048 tokens; 12 heads; hidden 768; 2 bytes a value, 1 a dropout mask.
    let scores = r(12 * 2048 * 2048);
    let tokens = r(2048 * 768);
    // The scale runs inside the softmax kernel: it reads the scores and writes the
    // probabilities, once each, forward and backward (softmax backward reads its output and
    // the output gradient and writes the input gradient).
    let scale = op("scale");
    assert_eq!(scale.forward_bytes, r(0));
    assert_eq!(scale.forward_flops, r(0));
    assert_eq!(scale.backward_bytes, r(0));
    let softmax = op("attn_softmax");
    assert_eq!(softmax.forward_bytes, &scores * r(4));
    assert_eq!(softmax.backward_bytes, &scores * r(6));
    // The residual's dropout runs inside the add: read the branch and the residual, write the
    // sum and the mask. Backward, the add hands its output gradient to both inputs (no kernel)
    // and the dropout's backward reads it and the mask and writes the branch's gradient.
    for (dropout, add) in [("resid_dropout1", "res1"), ("resid_dropout2", "res2")] {
        assert_eq!(op(dropout).forward_bytes, r(0), "{dropout}");
        assert_eq!(op(dropout).backward_bytes, r(0), "{dropout}");
        assert_eq!(op(add).forward_bytes, &tokens * r(7), "{add}");
        assert_eq!(op(add).backward_bytes, &tokens * r(5), "{add}");
    }
    // The attention dropout feeds the context GEMM, not an add: it stays a kernel.
    assert!(op("attn_dropout").forward_bytes > r(0));
}

#[test]
fn parameter_gradients_add_their_kernels_to_each_backward() {
    let (plan, calib) = plan();
    let blk = layer(&plan);
    let r = |v: i64| Rational::from_integer(v.into());
    let op = |name: &str| blk.ops.iter().find(|o| o.name == name).unwrap();
    // The attention's query projection: dy [2048, 768] and dbias [768], 2 bytes each.
    assert_eq!(op("q_proj").param_grad_bytes, r(2 * 2048 * 768 + 2 * 768));
    // ln1: dy and x [2048, 768], mean and rstd [2048] in fp32, dgamma and dbeta [768].
    assert_eq!(
        op("ln1").param_grad_bytes,
        r(4 * 2048 * 768 + 8 * 2048 + 4 * 768)
    );
    assert_eq!(op("gelu").param_grad_bytes, r(0));
    // Each is one more memory-bound kernel in every backward of every micro-batch: the
    // compute stream is busier by exactly their seconds.
    let mut bare = plan.clone();
    for b in &mut bare.blocks {
        for o in &mut b.ops {
            o.param_grad_bytes = r(0);
        }
    }
    let rates = Rates::of(&calib);
    let mut expected: f64 = 0.0;
    for b in &plan.blocks {
        let copies = plan
            .items
            .iter()
            .filter(|&&i| plan.blocks[i].name == b.name)
            .count();
        for o in &b.ops {
            let bytes = num_traits::ToPrimitive::to_f64(&o.param_grad_bytes).unwrap();
            expected += copies as f64 * 8.0 * rates.op_seconds(0.0, bytes, KernelClass::Other, 1);
        }
    }
    assert!(expected > 0.0);
    let busy = |p: &TimingPlan| -> f64 {
        let t = time_plan(p, &calib).unwrap();
        t.summary.devices.iter().map(|d| d.busy.compute).sum()
    };
    let extra = busy(&plan) - busy(&bare);
    assert!(
        (extra - expected).abs() <= 1e-9 * expected.max(1e-12),
        "{extra} s against {expected} s"
    );
}

/// Under sequence parallelism a row-parallel layer's output is reduce-scattered over the
/// sequence and Megatron-LM adds its bias after that (`skip_bias_add`, then bias-dropout-add on
/// the shard), so its bias gradient reduces 1/tp of the rows; a column-parallel layer's bias
/// gradient reduces all rows of its own 1/tp of the columns, with or without it.
#[test]
fn under_sequence_parallelism_a_row_parallel_bias_gradient_reduces_the_shard() {
    let r = |v: i64| Rational::from_integer(v.into());
    let at = |sp: bool| {
        let (plan, _) = plan_with(Knobs {
            tp: 2,
            microbatches: 8,
            sequence_parallel: sp,
            ..Knobs::data_parallel(1)
        });
        let blk = layer(&plan).clone();
        let get = |name: &str| {
            blk.ops
                .iter()
                .find(|o| o.name == name)
                .unwrap()
                .param_grad_bytes
                .clone()
        };
        (get("out_proj"), get("fc_out"), get("q_proj"))
    };
    // One sequence of 2048 tokens, hidden 768, 2 bytes a value, tensor parallelism 2.
    let (out, fc_out, q) = at(false);
    assert_eq!(out, r(2 * 2048 * 768 + 2 * 768));
    assert_eq!(fc_out, r(2 * 2048 * 768 + 2 * 768));
    assert_eq!(q, r(2 * 2048 * 384 + 2 * 384));
    let (out, fc_out, q) = at(true);
    assert_eq!(out, r(2 * 1024 * 768 + 2 * 768));
    assert_eq!(fc_out, r(2 * 1024 * 768 + 2 * 768));
    assert_eq!(q, r(2 * 2048 * 384 + 2 * 384));
}

/// A tensor read by several operators gets a gradient from each, and autograd sums them before
/// its producer's backward: one kernel per extra reader, reading two gradients and writing one.
/// The projections Megatron-LM runs as one layer read their input once.
#[test]
fn autograd_sums_the_gradients_of_a_tensor_read_twice() {
    let r = |v: i64| Rational::from_integer(v.into());
    let (plan, _) = plan();
    let blk = layer(&plan);
    let op = |name: &str| blk.ops.iter().find(|o| o.name == name).unwrap();
    // The layer's input feeds ln1 and the residual add, res1 feeds ln2 and res2: one sum each,
    // charged to the reader that runs last backward (the normalisation). 2048 tokens × 768.
    let sum = r(3 * 2 * 2048 * 768);
    assert_eq!(op("ln1").fan_in_bytes, sum);
    assert_eq!(op("ln2").fan_in_bytes, sum);
    // ln1's output feeds query, key and value: one layer, no sum.
    for name in ["q_proj", "k_proj", "v_proj", "res1", "res2", "fc_in"] {
        assert_eq!(op(name).fan_in_bytes, r(0), "{name}");
    }
    // A plain residual add (Llama's, no dropout before it) runs no backward kernel. Llama 3 8B's
    // hidden size is 4096 (`models/llama3-8b.yaml`, from its Hugging Face config).
    let knobs = Knobs::data_parallel(1);
    let set = [("B", 1), ("S", 512)];
    let (plan, _) = common::plan_on("llama3-8b", &set, &knobs, "h100-sxm");
    let blk = layer(&plan);
    let op = |name: &str| blk.ops.iter().find(|o| o.name == name).unwrap();
    for add in ["res1", "res2"] {
        assert_eq!(op(add).backward_bytes, r(0), "{add}");
        assert_eq!(op(add).backward_flops, r(0), "{add}");
        assert!(op(add).forward_bytes > r(0), "{add}");
    }
    // Its gate and up projections are two layers reading one input: one sum, at the first.
    let hidden = r(2 * 512 * 4096);
    let first = ["gate_proj", "up_proj"]
        .into_iter()
        .find(|n| op(n).fan_in_bytes > r(0))
        .unwrap();
    assert_eq!(op(first).fan_in_bytes, &hidden * r(3));
}

/// The loss's bytes beyond one fused kernel's, per logit, as Megatron-LM computes it
/// (`vocab_parallel_cross_entropy(output.float(), labels)`): forward the cast to fp32 (2 + 4),
/// max (4), subtraction (4 + 4), exponential (4 + 4), sum (4) and division (4 + 4) less the
/// fused kernel's 2 + 2 = 34; backward the product with dloss (4 + 4) and the cast back (4 + 2)
/// less 2 + 2 = 10. In fp32 there are no casts: 32 − 8 = 24 and 8 − 8 = 0.
#[test]
fn the_loss_runs_as_fp32_passes_over_the_logits_unless_fused() {
    let set = RuleSet::embedded().unwrap();
    let ce = set.get("cross_entropy").unwrap();
    assert_eq!(ce.fp32_pass_bytes(2), (poly("34*t*v"), poly("10*t*v")));
    assert_eq!(ce.fp32_pass_bytes(4), (poly("24*t*v"), Poly::zero()));
    for name in ["softmax", "linear", "layernorm"] {
        let r = set.get(name).unwrap();
        assert_eq!(r.fp32_pass_bytes(2), (Poly::zero(), Poly::zero()), "{name}");
    }

    // In a plan: GPT-3 125M (vocabulary 50,257, GPT-2's tokenizer, as models/gpt3-125m.yaml
    // gives it) on one device, one sequence of 2048 per micro-batch: 2048 × 50257 logits.
    let knobs = Knobs {
        microbatches: 8,
        ..Knobs::data_parallel(1)
    };
    let loss_op = |mode: symshard::model::LossMode| {
        let loader = symshard::model::ModelLoader::embedded()
            .unwrap()
            .with_loss(mode);
        let (plan, _) =
            common::plan_with_loader(&loader, "gpt3-125m", &[("B", 8)], &knobs, "a100-80gb");
        let head = plan
            .blocks
            .iter()
            .find(|b| b.ops.iter().any(|o| o.name == "loss"))
            .unwrap();
        let op = head.ops.iter().find(|o| o.name == "loss").unwrap();
        (op.forward_bytes.clone(), op.backward_bytes.clone())
    };
    let (fused, fp32) = (
        loss_op(symshard::model::LossMode::Fused),
        loss_op(symshard::model::LossMode::Fp32),
    );
    let logits = Rational::from_integer((2048 * 50257).into());
    assert_eq!(
        &fp32.0 - &fused.0,
        &logits * Rational::from_integer(34.into())
    );
    assert_eq!(
        &fp32.1 - &fused.1,
        &logits * Rational::from_integer(10.into())
    );
}

#[test]
fn fp32_passes_are_refused_where_they_cannot_apply() {
    let [einsum, same_shape] = flag_refusals("fp32_passes");
    assert!(einsum.contains("`fp32_passes`"), "{einsum}");
    assert!(
        same_shape.contains("more dimensions than the output"),
        "{same_shape}"
    );
}

/// Seconds of a step of GPT-3 125M on 8 A100s with `extra` flags.
fn seconds_125m(extra: &[&str]) -> f64 {
    let mut args = vec![
        "timeline",
        "gpt3-125m",
        "--dp",
        "8",
        "--calib",
        "a100-80gb",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    common::json(&args)["iteration_seconds"].as_f64().unwrap()
}

#[test]
fn the_loss_mode_is_chosen_on_the_command_line_and_in_validation_rows() {
    let (default, fp32, fused) = (
        seconds_125m(&[]),
        seconds_125m(&["--loss", "fp32"]),
        seconds_125m(&["--loss", "fused"]),
    );
    assert_eq!(default, fp32);
    assert!(fused < fp32, "{fused} {fp32}");
    let e = common::refused(&["timeline", "gpt3-125m", "--dp", "8", "--loss", "bf16"]);
    assert!(e.contains("bf16") && e.contains("fused"), "{e}");

    let e = common::refused_validation_row("loss-mode-validation", "loss: half");
    assert!(
        e.contains("v.yaml:8:5:") && e.contains("`half`: expected fp32 or fused"),
        "{e}"
    );
}

/// Each training-metric evaluation of the loss, as Composer's trainer runs
/// `torch.nn.CrossEntropyLoss` under autocast after every micro-batch (composer/metrics/nlp.py,
/// composer/trainer/trainer.py), moves per logit the cast to fp32 (2 + 4) and the fp32
/// log-softmax (4 + 4): 14 bytes in bf16, 8 in fp32. It adds to the loss's forward only, under
/// either loss mode, and leaves the symbolic counts alone.
#[test]
fn training_metrics_add_unfused_passes_over_the_logits() {
    let set = RuleSet::embedded().unwrap();
    let ce = set.get("cross_entropy").unwrap();
    assert_eq!(ce.metric_pass_bytes(2), poly("14*t*v"));
    assert_eq!(ce.metric_pass_bytes(4), poly("8*t*v"));
    for name in ["softmax", "linear"] {
        assert_eq!(
            set.get(name).unwrap().metric_pass_bytes(2),
            Poly::zero(),
            "{name}"
        );
    }

    // GPT-3 125M (vocabulary 50,257) on one device, one sequence of 2048 per micro-batch.
    let knobs = Knobs {
        microbatches: 8,
        ..Knobs::data_parallel(1)
    };
    let loss_op = |mode: symshard::model::LossMode, metrics: u32| {
        let loader = symshard::model::ModelLoader::embedded()
            .unwrap()
            .with_loss(mode)
            .with_train_metrics(metrics);
        let (plan, _) =
            common::plan_with_loader(&loader, "gpt3-125m", &[("B", 8)], &knobs, "a100-80gb");
        let op = plan
            .blocks
            .iter()
            .flat_map(|b| b.ops.iter())
            .find(|o| o.name == "loss")
            .unwrap()
            .clone();
        (op.forward_bytes, op.backward_bytes, op.forward_flops)
    };
    let logits = Rational::from_integer((2048 * 50257).into());
    for mode in [
        symshard::model::LossMode::Fused,
        symshard::model::LossMode::Fp32,
    ] {
        let (none, two) = (loss_op(mode, 0), loss_op(mode, 2));
        assert_eq!(
            &two.0 - &none.0,
            &logits * Rational::from_integer(28.into()),
            "{mode:?}"
        );
        assert_eq!(two.1, none.1, "{mode:?}");
        assert_eq!(two.2, none.2, "{mode:?}");
    }
}

#[test]
fn training_metrics_are_chosen_on_the_command_line_and_in_validation_rows() {
    let (default, none, two) = (
        seconds_125m(&[]),
        seconds_125m(&["--train-metrics", "0"]),
        seconds_125m(&["--train-metrics", "2"]),
    );
    assert_eq!(default, none);
    assert!(two > none, "{two} {none}");
    let e = common::refused(&[
        "timeline",
        "gpt3-125m",
        "--dp",
        "8",
        "--train-metrics",
        "17",
    ]);
    assert!(e.contains("17") && e.contains("train-metrics"), "{e}");

    let e = common::refused_validation_row("train-metrics-validation", "train_metrics: 99");
    assert!(
        e.contains("v.yaml:8:5:") && e.contains("99: at most 16"),
        "{e}"
    );
}
