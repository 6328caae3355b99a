//! Hybrid parallelism: layouts, the symbolic analysis of a model under a layout, and the
//! evaluation of a strategy's per-device cost.

pub mod analysis;
pub mod breakdown;
pub mod evaluate;
pub mod layout;
pub mod moe;

pub use analysis::{analyse, Analysis, BlockAnalysis, Comm, OpAnalysis, DP, TP};
pub use evaluate::{evaluate, CommRow, Evaluation, Memory, RelativeCost};
pub use layout::{plan, Layout, OpPlan, Place, Tag};

use crate::calib::Calibration;
use crate::error::Error;
use crate::model::Model;
use crate::strategy::{check_knobs, Knobs};
use crate::sym::{Bindings, Rational};

/// Analyses and evaluates one strategy of `model` at `values` (its symbol values).
pub fn evaluate_strategy(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    calib: &Calibration,
    gpus_per_node: u64,
    memory: &Rational,
) -> Result<(Analysis, Evaluation), Error> {
    check_knobs(knobs).map_err(Error::Usage)?;
    check_model_limits(model, values, knobs).map_err(Error::Usage)?;
    check_overrides(model, layout).map_err(|(_, m)| Error::Usage(m))?;
    let analysis = analyse(model, layout);
    let b = evaluate::microbatch_bindings(values, knobs);
    evaluate::check_divisibility(model, &analysis, &b, knobs).map_err(Error::Usage)?;
    let numbers = evaluate::block_numbers(&analysis, &b).map_err(Error::Usage)?;
    let e = evaluate(
        model,
        &analysis,
        &numbers,
        knobs,
        calib,
        gpus_per_node,
        memory,
    )
    .map_err(Error::Usage)?;
    Ok((analysis, e))
}

/// Checks per-operator overrides: each names an operator of the model and a splittable index of
/// its rule, or `none`.
pub fn check_overrides(model: &Model, layout: &Layout) -> Result<(), (String, String)> {
    overrides_ok(model, layout)
}

fn overrides_ok(model: &Model, layout: &Layout) -> Result<(), (String, String)> {
    for (op, index) in &layout.tp_overrides {
        let node = model
            .ops()
            .map(|(_, n)| n)
            .find(|n| &n.name == op)
            .ok_or_else(|| {
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

/// Checks a strategy against the model's sizes: the batch divides over data parallelism and
/// micro-batches.
pub fn check_model_limits(model: &Model, values: &Bindings, k: &Knobs) -> Result<(), String> {
    if let Some(b) = values.get("B") {
        let per = b / Rational::from_integer((k.dp * k.microbatches).into());
        if !per.is_integer() || per < Rational::from_integer(1.into()) {
            return Err(format!(
                "batch B = {b} is not divisible by dp × microbatches = {} × {}",
                k.dp, k.microbatches
            ));
        }
        if k.ep > 1 {
            moe::check_expert_parallel(model, values, k.dp, k.ep)?;
        }
    } else if k.dp > 1 || k.microbatches > 1 {
        return Err(format!(
            "model `{}` has no batch symbol B to split",
            model.name
        ));
    }
    Ok(())
}
