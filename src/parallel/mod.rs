//! Hybrid parallelism: layouts, the symbolic analysis of a model under a layout, and the
//! evaluation of a strategy's per-device cost.

pub mod amount;
pub mod analysis;
pub mod breakdown;
pub mod evaluate;
pub mod kernels;
pub mod layout;
pub mod moe;
pub mod traced;

pub use analysis::{analyse, Analysis, BlockAnalysis, Comm, OpAnalysis, OpFormulas, Site, DP, TP};
pub use evaluate::{evaluate, CommRow, Evaluation, Infeasible, Memory, RelativeCost};
pub use layout::{plan, Layout, OpPlan, Place, Tag};

use crate::calib::{Calibration, MachineRef};
use crate::error::Error;
use crate::model::Model;
pub use crate::strategy::StrategyError;
use crate::strategy::{check_knobs, Knobs};
use crate::sym::{Bindings, Rational};

/// Analyses and evaluates one strategy of `model` at `values` (its symbol values), each amount
/// with its formula in the model's symbols ([`Evaluation::formulas`]).
pub fn evaluate_strategy(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    machine: MachineRef,
) -> Result<(Analysis, Evaluation), Error> {
    evaluate_strategy_with(model, values, knobs, layout, machine, true)
}

/// [`evaluate_strategy`], with the formulas only where `formulas` asks for them (the numbers
/// are the same either way; the timeline, which reads only numbers, leaves them out).
pub fn evaluate_strategy_with(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    machine: MachineRef,
    formulas: bool,
) -> Result<(Analysis, Evaluation), Error> {
    check_strategy(model, values, knobs)?;
    check_overrides(model, layout).map_err(|(_, m)| Error::Usage(m))?;
    let analysis = per_rank(analyse(model, layout), knobs);
    let e = evaluate_checked(model, &analysis, values, knobs, machine, formulas)?;
    Ok((analysis, e))
}

/// [`evaluate_strategy`] with the analysis of the strategy's layout already made
/// (`analyse(model, layout)`: it depends on neither the symbols' values nor the knobs, so one
/// analysis serves every value of a symbol; context parallelism is applied here).
pub fn evaluate_analysed(
    model: &Model,
    analysis: &Analysis,
    values: &Bindings,
    knobs: &Knobs,
    machine: MachineRef,
) -> Result<Evaluation, Error> {
    check_strategy(model, values, knobs)?;
    let cp_rank;
    let analysis = if knobs.cp > 1 {
        cp_rank = analysis.context_parallel();
        &cp_rank
    } else {
        analysis
    };
    evaluate_checked(model, analysis, values, knobs, machine, false)
}

/// The knobs' own checks and the model's limits on them.
fn check_strategy(model: &Model, values: &Bindings, knobs: &Knobs) -> Result<(), Error> {
    check_knobs(knobs)?;
    Ok(check_model_limits(model, values, knobs)?)
}

/// Everything about `knobs` that `model` refuses without a machine: the knobs' own checks, the
/// model's limits (batch, context and expert parallelism), more pipeline stages than blocks
/// to place, and splits that do not divide their index under `layout`. For a command to
/// refuse a strategy for a knob before it refuses the machine the knobs imply.
pub fn check_knobs_on_model(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
) -> Result<(), Error> {
    check_strategy(model, values, knobs)?;
    check_pipeline_stages(model, values, knobs.pp)?;
    let analysis = per_rank(analyse(model, layout), knobs);
    let b = evaluate::microbatch_bindings(model, values, knobs);
    evaluate::check_divisibility(model, &analysis, &b, knobs)?;
    Ok(())
}

/// Refuses more pipeline stages than block copies to place (the repeated layers and the blocks
/// around them, such as the embedding and the head: each stage holds one at least), as the
/// pipeline partition would. Repeat counts that do not evaluate to whole numbers are left to
/// the evaluation, which says why.
pub fn check_pipeline_stages(
    model: &Model,
    values: &Bindings,
    pp: u64,
) -> Result<(), StrategyError> {
    use num_traits::ToPrimitive;
    if pp <= 1 {
        return Ok(());
    }
    let mut copies = 0u64;
    for b in &model.blocks {
        let Some(n) = b
            .repeat
            .eval(values)
            .ok()
            .filter(|r| r.is_integer())
            .and_then(|r| r.to_integer().to_u64())
        else {
            return Ok(());
        };
        copies = copies.saturating_add(n);
    }
    if pp > copies {
        return Err(StrategyError::TooManyStages { pp, layers: copies });
    }
    Ok(())
}

/// The analysis one rank sees: a context-parallel rank's under cp > 1.
fn per_rank(analysis: Analysis, knobs: &Knobs) -> Analysis {
    if knobs.cp > 1 {
        analysis.into_context_parallel()
    } else {
        analysis
    }
}

/// Refuses a precision the machine of `calib` cannot run: FP8 where the table gives no FP8
/// peak ([`StrategyError::NoLowPrecisionPeak`]), a block-scaled format its tensor cores do not run
/// where the table does not list it ([`StrategyError::NoScaledFormat`]).
pub fn check_precision(
    calib: &Calibration,
    precision: crate::strategy::Precision,
) -> Result<(), crate::strategy::StrategyError> {
    if let Some(peak) = precision.gemm_peak() {
        if !calib.device.peak_flops.contains_key(peak) {
            return Err(crate::strategy::StrategyError::NoLowPrecisionPeak {
                table: calib.name.clone(),
                precision: precision.to_string(),
                peak,
            });
        }
    }
    if let Some(format) = precision.hardware_format() {
        let listed = calib.device.scaled_formats.as_ref();
        if !listed.is_some_and(|l| l.formats.iter().any(|f| f == format)) {
            return Err(crate::strategy::StrategyError::NoScaledFormat {
                table: calib.name.clone(),
                format: format.to_string(),
                listed: listed
                    .filter(|l| !l.formats.is_empty())
                    .map(|l| format!(" (it lists {})", l.formats.join(", ")))
                    .unwrap_or_default(),
            });
        }
    }
    Ok(())
}

/// Evaluates checked knobs on the analysis one rank sees; with `formulas`, each amount's
/// formula too ([`Evaluation::formulas`]).
fn evaluate_checked(
    model: &Model,
    analysis: &Analysis,
    values: &Bindings,
    knobs: &Knobs,
    machine: MachineRef,
    formulas: bool,
) -> Result<Evaluation, Error> {
    check_precision(machine.calib, knobs.precision)?;
    if knobs.fp8_dispatch && model.dtype_bytes != 2 {
        return Err(crate::strategy::StrategyError::from(
            crate::strategy::Unsupported::Fp8DispatchActivations {
                bytes: model.dtype_bytes,
            },
        )
        .into());
    }
    let mesh = || crate::strategy::Mesh::of(knobs, machine.gpus_per_node());
    if knobs.node_dispatch && !mesh().ep_even(knobs.ep) {
        return Err(crate::strategy::StrategyError::from(
            crate::strategy::Unsupported::NodeDispatchUneven {
                ep: knobs.ep,
                per_node: mesh().ep_axis(knobs.ep).per_node,
            },
        )
        .into());
    }
    let b = evaluate::microbatch_bindings(model, values, knobs);
    evaluate::check_divisibility(model, analysis, &b, knobs)?;
    let kernels = kernels::KernelEfficiency::of(machine.calib);
    let e = if formulas {
        let fix = traced::Fix::new(model, values, &b, knobs);
        let numbers = evaluate::block_numbers_traced(analysis, &b, &fix, &kernels)?;
        evaluate::evaluate_with(model, analysis, &numbers, knobs, machine, true)?
    } else {
        let numbers = evaluate::block_numbers(analysis, &b, &kernels)?;
        evaluate(model, analysis, &numbers, knobs, machine)?
    };
    Ok(e)
}

/// Checks per-operator overrides: each names an operator of the model and a splittable index of
/// its rule, or `none`.
pub fn check_overrides(model: &Model, layout: &Layout) -> Result<(), (String, String)> {
    overrides_ok(model, layout)
}

fn overrides_ok(model: &Model, layout: &Layout) -> Result<(), (String, String)> {
    // Operators by name (the first of a name, as a scan would find it), looked up once per
    // override: scanning the model for each made a layout of every operator quadratic.
    let mut by_name: std::collections::HashMap<&str, &crate::model::OpNode> = Default::default();
    if !layout.tp_overrides.is_empty() {
        for (_, n) in model.ops() {
            by_name.entry(n.name.as_str()).or_insert(n);
        }
    }
    for (op, index) in &layout.tp_overrides {
        let node = by_name.get(op.as_str()).copied().ok_or_else(|| {
            (
                op.clone(),
                format!(
                    "split override names `{op}`, which is not an operator of model `{}`",
                    model.name
                ),
            )
        })?;
        if index == "none" {
            continue;
        }
        if index == layout::SEQ_SHARD {
            if layout::sequence_index(node, model).is_none() {
                return Err((
                    op.clone(),
                    format!(
                        "split override `{op}: {index}`: `{op}` has no splittable index that binds the model's sequence{}",
                        model
                            .roles
                            .sequence
                            .as_deref()
                            .map(|s| format!(" `{s}`"))
                            .unwrap_or_else(|| " (the model names none: `roles: {sequence: …}`)".into())
                    ),
                ));
            }
            continue;
        }
        match node.rule.index(index) {
            Some(i) if i.kind.law().splittable => {}
            Some(i) => {
                return Err((
                    op.clone(),
                    format!(
                        "split override `{op}: {index}`: `{index}` is {} and cannot be split",
                        i.kind
                    ),
                ))
            }
            None => {
                let names: Vec<&str> = node.rule.indices.iter().map(|i| i.name.as_str()).collect();
                return Err((op.clone(), format!("split override `{op}: {index}`: rule `{}` has no index `{index}` (it has {})", node.rule.name, names.join(", "))));
            }
        }
    }
    Ok(())
}

/// Checks context parallelism against the model: it needs a sequence (the symbol of its
/// `sequence` role) and an attention operator (work quadratic in it), and 2·cp must divide it —
/// causal load balancing cuts every sequence into 2·cp chunks, rank i holding chunks i and
/// 2·cp − 1 − i (Megatron-Core's context-parallel design).
pub fn check_context_parallel(
    model: &Model,
    values: &Bindings,
    cp: u64,
) -> Result<(), StrategyError> {
    if cp <= 1 {
        return Ok(());
    }
    let Some((seq, s)) = model
        .roles
        .sequence
        .as_deref()
        .and_then(|q| values.get(q).map(|v| (q, v)))
    else {
        return Err(StrategyError::CpNoSequence {
            cp,
            model: model.name.clone(),
        });
    };
    // Attention: an operator whose rule declares a ring (its keys and values) and whose work
    // grows with S².
    let attention = model.ops().any(|(_, n)| {
        !n.rule.ring.is_empty() && n.model_formula(&n.rule.forward_flops()).degree_in(seq).1 >= 2
    });
    if !attention {
        return Err(StrategyError::CpNoAttention {
            cp,
            model: model.name.clone(),
        });
    }
    let chunks = Rational::from_integer((2 * cp).into());
    let per = s / &chunks;
    if !per.is_integer() || per < Rational::from_integer(1.into()) {
        return Err(StrategyError::CpSequence {
            cp,
            symbol: seq.to_string(),
            sequence: s.clone(),
        });
    }
    Ok(())
}

/// Checks a strategy against the model's sizes: the batch divides over data parallelism and
/// micro-batches; context parallelism fits the sequence.
pub fn check_model_limits(
    model: &Model,
    values: &Bindings,
    k: &Knobs,
) -> Result<(), StrategyError> {
    check_context_parallel(model, values, k.cp)?;
    if let Some((symbol, b)) = model
        .batch
        .as_ref()
        .and_then(|s| values.get(s).map(|b| (s, b)))
    {
        let per = b / Rational::from_integer((k.dp * k.microbatches).into());
        if !per.is_integer() || per < Rational::from_integer(1.into()) {
            return Err(StrategyError::BatchNotDivisible {
                symbol: symbol.clone(),
                batch: b.clone(),
                dp: k.dp,
                microbatches: k.microbatches,
            });
        }
        if k.ep > 1 {
            moe::check_expert_parallel(model, values, k.dp, k.cp, k.ep)?;
        }
    } else if k.dp > 1 || k.microbatches > 1 {
        return Err(StrategyError::NoBatch {
            model: model.name.clone(),
        });
    }
    Ok(())
}
