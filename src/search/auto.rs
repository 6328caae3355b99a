//! Auto-sharding for `rank`: the per-operator tensor-parallel layout the series-parallel search
//! finds for a tensor-parallel degree, as `Layout::tp_overrides` that the strategy evaluation
//! prices like any annotated layout.

use super::compare::{annotated, search_for};
use super::error::SearchError;
use super::problem::Problem;
use super::sp::{solve_bounded, Narrowed};
use crate::calib::Calibration;
use crate::model::Model;
use crate::parallel::evaluate::microbatch_bindings;
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use num_traits::Zero;
use serde::Serialize;
use std::collections::BTreeMap;

/// The searched layout of a model at one tensor-parallel degree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoLayout {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Per operator: the rule index the tensor-parallel axis splits, `none` where the operator
    /// is replicated (as `Layout::tp_overrides`).
    pub placements: BTreeMap<String, String>,
    /// Whether every block was solved exactly (no state dropped by the beam).
    pub exact: bool,
    /// When a block's search kept a beam: the largest proven gap to that block's optimum, in
    /// percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap_percent: Option<f64>,
    /// When the search's work budget narrowed a block's beam and the beam then dropped states:
    /// how (the narrowest such block), so that the note says what was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub narrowed: Option<Narrowed>,
    /// The search's own cost of the layout (FLOP-equivalents per device for the whole batch,
    /// blocks times their repeats), before the strategy evaluation prices it with its knobs.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub search_cost: Rational,
}

impl AutoLayout {
    /// How the layout was found, in a few words.
    pub fn method(&self) -> String {
        let how = match &self.narrowed {
            Some(n) => format!(
                "bounded by the work budget ({} operators, up to {} tensors live: {} states kept per operator of the {} asked)",
                n.ops, n.live, n.beam, n.asked
            ),
            None => "bounded".into(),
        };
        match (self.exact, self.gap_percent) {
            (true, _) => "exact".into(),
            (false, Some(g)) => format!("{how}, gap ≤ {g:.1}%"),
            (false, None) => how,
        }
    }
}

/// Whether any operator of `model` carries a `tp:` annotation.
pub fn has_annotations(model: &Model) -> bool {
    model.ops().any(|(_, o)| o.tp.is_some())
}

/// The tensor-parallel layout of `model` at degree `tp > 1` found operator by operator: each
/// block's problem over one axis of `tp` devices (nodes of `gpus_per_node`, κ from `calib`),
/// cutting feature atoms only (the batch and the sequence stay with data, context and
/// sequence parallelism), solved exactly while its states stay within the search's limit and
/// with a beam (guided by the family's annotated layout, so never worse than it in the
/// search's terms) beyond. A repeated block feeds itself; a block reading an earlier block's
/// operators reads them as that block's layout placed them. The vocabulary is padded for `tp`
/// as the strategy evaluation pads it.
pub fn auto_tp_layout(
    model: &Model,
    values: &Bindings,
    tp: u64,
    calib: &Calibration,
    gpus_per_node: u64,
) -> Result<AutoLayout, SearchError> {
    if tp < 2 {
        return Err(SearchError::AutoNeedsTp);
    }
    let k = Knobs {
        tp,
        ..Knobs::data_parallel(1)
    };
    let mut vals = microbatch_bindings(model, values, &k);
    for s in [
        crate::parallel::analysis::DP,
        crate::parallel::analysis::TP,
        crate::parallel::analysis::CP,
    ] {
        vals.remove(s);
    }
    let axes = Problem::tp_axis(tp, gpus_per_node, calib);
    let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut placements = BTreeMap::new();
    let mut total = Rational::zero();
    let mut exact = true;
    let mut gap: Option<f64> = None;
    let mut narrowed: Option<Narrowed> = None;
    for (bi, block) in model.blocks.iter().enumerate() {
        let p = features_only(
            Problem::from_block(model, bi, &vals, axes.clone(), &known)?
                .with_hbm_balance(calib.hbm_balance()),
            model,
        );
        let guide = annotated(model, bi, &p);
        let guide = super::sp::cost_shared(&p, &guide).is_ok().then_some(guide);
        let b = solve_bounded(&p, &search_for(&p, None, guide), &mut |_, _| {})?;
        if !b.exact() {
            exact = false;
            if let Some(g) = b.gap_percent() {
                gap = Some(gap.map_or(g, |x: f64| x.max(g)));
            }
            if let Some(n) = &b.narrowed {
                if narrowed.as_ref().is_none_or(|m: &Narrowed| n.beam < m.beam) {
                    narrowed = Some(n.clone());
                }
            }
        }
        let s = b.solution.ok_or_else(|| SearchError::NoLayoutAt {
            problem: p.name.clone(),
            tp,
        })?;
        let repeat = block.repeat.eval(&vals)?;
        total += repeat * &s.cost;
        for (op, index) in super::sp::block_placements(&p, &s, &mut known)? {
            placements.insert(op, index.unwrap_or_else(|| "none".into()));
        }
    }
    Ok(AutoLayout {
        tp,
        placements,
        exact,
        gap_percent: gap,
        narrowed,
        search_cost: total,
    })
}

/// The operators of `p` cut feature atoms only (see
/// [`tensor_only`](super::compare::tensor_only)); sources keep their cuts, which the placements
/// of earlier blocks they are fixed to refer to (an earlier block's layout cuts features only,
/// and a repeated block's input must end placed as its output).
fn features_only(mut p: Problem, model: &Model) -> Problem {
    for o in &mut p.ops {
        if !o.is_source() {
            o.cuts
                .retain(|c| super::compare::is_feature(model, &c.atom, false));
        }
    }
    p
}

/// Whether `placements` splits every operator of `model` as its annotations do (the auto
/// layout is the annotated one).
pub fn same_as_annotated(model: &Model, placements: &BTreeMap<String, String>) -> bool {
    model.ops().all(|(_, o)| {
        let auto = placements
            .get(&o.name)
            .map(String::as_str)
            .unwrap_or("none");
        auto == o.tp.as_deref().unwrap_or("none")
    })
}
