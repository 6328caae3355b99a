//! The e-graph as a pass over a tensor-parallel layout: the layer's program under the layout
//! (with the collectives its splits call for) is saturated beside the same layer with every
//! operator that contracts nothing left whole, the cheapest equivalent program is extracted, and
//! the operators it places differently become per-operator overrides of the layout — a layout
//! variant the strategy evaluation prices like any other.

use super::auto::AutoLayout;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::parallel::layout::{sequence_index, Layout, SEQ_SHARD};
use crate::rewrite::optimize::{layer_block, optimize_layout};
use crate::rewrite::{OptimizeOptions, Weights};
use crate::rules::IndexKind;
use crate::sym::{Bindings, Rational};
use serde::Serialize;
use std::collections::BTreeMap;

/// A layout the e-graph derived from another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EGraphLayout {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// The layout's per-operator overrides (as `Layout::tp_overrides`; `seq-shard` where an
    /// operator moved to sequence shards).
    pub placements: BTreeMap<String, String>,
    /// The operators that moved: `op: before → after` in the e-graph's placements.
    pub moved: Vec<String>,
    /// How the run ended (`saturated`, or the limit it hit).
    pub stop: String,
    /// E-nodes at the end.
    pub egraph_nodes: usize,
    /// Wire bytes per device of one layer's forward pass at the full batch that the extracted
    /// program no longer sends, as the e-graph prices them (the forward pass only).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub layer_wire_bytes_saved: Rational,
    /// Communication bytes per device per step the variant saves against the auto layout, as
    /// the strategy evaluation prices both (forward and backward, every block) at `tp` alone
    /// (dp = pp = 1, one micro-batch): the figure the rows' prices rest on. Always positive: a
    /// variant the evaluation does not find cheaper is dropped.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub step_comm_bytes_saved: Rational,
}

/// Communication bytes per device per step of `layout` at tensor parallelism `tp` alone, as the
/// strategy evaluation prices them (on the reference machine, whose rates do not enter bytes).
fn step_comm_bytes(model: &Model, values: &Bindings, tp: u64, layout: &Layout) -> Result<Rational> {
    let calib = crate::calib::Calibration::reference()?;
    let mut knobs = crate::strategy::Knobs::data_parallel(1);
    knobs.tp = tp;
    let unlimited = Rational::from_integer(0.into());
    let machine = crate::calib::MachineRef::new(&calib, calib.gpus_per_node().max(tp), &unlimited);
    let (_, e) =
        crate::parallel::evaluate_strategy_with(model, values, &knobs, layout, machine, false)?;
    let comm: Rational = e
        .comm
        .iter()
        .map(|c| &c.bytes * Rational::from_integer(c.count.into()))
        .sum();
    Ok(comm + e.p2p_bytes)
}

/// The extraction's weights for a layout variant. The laws price the forward pass only: a
/// program that computes more per device to send less would replicate work whose weights'
/// gradients the backward pass then reduces, unseen. So a FLOP outweighs any wire byte an
/// elementwise operator's input can cost to move (at most 16: an all-reduce of an 8-byte
/// element sends it twice), and the pass keeps the layout's division of work and looks for less
/// communication within it; saved activation bytes break what ties remain.
pub fn variant_weights() -> Weights {
    Weights {
        flops_per_wire_byte: Rational::new(1.into(), 64.into()),
        flops_per_saved_byte: Rational::new(1.into(), 4096.into()),
    }
}

/// The e-graph's variant of the auto layout `auto` of `model` (its repeated layer rewritten,
/// the other blocks as `auto` places them), or `None` when the extraction keeps the layout.
pub fn egraph_layout(
    model: &Model,
    values: &Bindings,
    auto: &AutoLayout,
) -> Result<Option<EGraphLayout>> {
    let layout = Layout {
        sequence_parallel: false,
        tp_overrides: auto.placements.clone(),
    };
    let opts = OptimizeOptions {
        weights: variant_weights(),
        ..OptimizeOptions::default()
    };
    let report = optimize_layout(model, auto.tp, values, &layout, &opts)?;
    let saved: Rational = report
        .saving
        .comm
        .parse::<Rational>()
        .map_err(|e| Error::Internal(format!("saving `{}`: {e}", report.saving.comm)))?;
    // A program that sends no less is no variant: the pass is for communication.
    if saved <= Rational::from_integer(0.into()) {
        return Ok(None);
    }
    let bi = layer_block(model)?;
    let block = &model.blocks[bi];
    let mut placements = auto.placements.clone();
    let mut moved = Vec::new();
    for m in &report.moved {
        let Some(op) = block.ops().find(|o| o.name == m.op) else {
            continue;
        };
        // Contractions keep the layout's split (their weights' gradients are not priced here).
        if op
            .rule
            .indices
            .iter()
            .any(|i| i.kind == IndexKind::ReduceSum)
        {
            continue;
        }
        let split = if m.after == "whole" {
            Some("none".to_string())
        } else {
            shard_dim(&m.after)
                .and_then(|d| op.rule.output.dims.get(d))
                .and_then(|dim| dim.first())
                .map(|i| match sequence_index(op, model) {
                    Some(s) if &s == i => SEQ_SHARD.to_string(),
                    _ => i.clone(),
                })
        };
        let Some(split) = split else { continue };
        if placements.get(&m.op) != Some(&split) {
            placements.insert(m.op.clone(), split);
            moved.push(format!("{}: {} → {}", m.op, m.before, m.after));
        }
    }
    if moved.is_empty() {
        return Ok(None);
    }
    let checked = Layout {
        sequence_parallel: false,
        tp_overrides: placements.clone(),
    };
    crate::parallel::check_overrides(model, &checked).map_err(|(op, why)| {
        Error::Internal(format!("the e-graph's layout places `{op}` wrongly: {why}"))
    })?;
    // The e-graph prices one layer's forward pass; the evaluation prices the step. A variant
    // that is not cheaper there is no variant.
    let before = step_comm_bytes(model, values, auto.tp, &layout)?;
    let after = step_comm_bytes(model, values, auto.tp, &checked)?;
    if after >= before {
        return Ok(None);
    }
    Ok(Some(EGraphLayout {
        step_comm_bytes_saved: before - after,
        tp: auto.tp,
        placements,
        moved,
        stop: report.run.stop_reason.clone(),
        egraph_nodes: report.run.egraph_nodes,
        layer_wire_bytes_saved: saved,
    }))
}

/// `d` of a one-axis placement `Shard(d)@tp`.
fn shard_dim(placement: &str) -> Option<usize> {
    placement
        .strip_prefix("Shard(")?
        .split(')')
        .next()?
        .parse()
        .ok()
}
