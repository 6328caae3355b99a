//! One transformer layer's tensor-parallel layouts side by side: the family's Megatron-LM
//! annotations, the exact per-operator optimum, and D-Rec's recursive bisection — all priced
//! by the same exact model of cost (FLOP-equivalents per device).

use super::drec::drec;
use super::problem::{Axis, Choice, Problem};
use super::sp::{solve, solve_within};
use crate::calib::Calibration;
use crate::model::Model;
use crate::sym::{Bindings, Rational};
use serde::Serialize;
use std::collections::BTreeMap;

/// One layout of the layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutRow {
    /// How it was found.
    pub method: String,
    /// Its exact cost, FLOP-equivalents per device for the whole batch.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub cost: Rational,
    /// Per operator: the cut on each axis (`index:atom`, or `-` for replicated).
    pub choices: BTreeMap<String, String>,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    /// Block analysed.
    pub block: String,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Layouts, cheapest first where known.
    pub rows: Vec<LayoutRow>,
    /// Notes on what could not be computed.
    pub notes: Vec<String>,
}

/// The family's annotated (`tp:`) layout: the annotated index cut on a feature atom, the rest
/// replicated.
pub fn annotated(model: &Model, bi: usize, p: &Problem) -> Vec<Choice> {
    let ann: BTreeMap<&str, Option<&str>> = model.blocks[bi]
        .ops()
        .map(|o| (o.name.as_str(), o.tp.as_deref()))
        .collect();
    p.ops
        .iter()
        .map(|o| {
            let i = ann.get(o.name.as_str()).copied().flatten();
            let cut = i.and_then(|i| {
                o.cuts
                    .iter()
                    .position(|c| c.index == i && c.atom != "B" && c.atom != "S")
            });
            vec![cut; p.axes.len()]
        })
        .collect()
}

fn labels(p: &Problem, a: &[Choice]) -> BTreeMap<String, String> {
    p.ops
        .iter()
        .zip(a)
        .filter(|(o, _)| !o.is_source())
        .map(|(o, c)| {
            let cuts: Vec<String> = c
                .iter()
                .map(|x| match x {
                    Some(k) => format!("{}:{}", o.cuts[*k].index, o.cuts[*k].atom),
                    None => "-".into(),
                })
                .collect();
            (o.name.clone(), cuts.join(" "))
        })
        .collect()
}

/// Leaves the batch to data parallelism: a tensor-parallel axis may cut anything but `B`.
/// (Cutting the batch over it is data parallelism with replicated weights, which the memory
/// limit, not priced here, usually rules out.)
fn without_batch(mut p: Problem) -> Problem {
    for o in &mut p.ops {
        o.cuts.retain(|c| c.atom != "B");
    }
    p
}

/// Compares the layouts of `model`'s repeated layer at tensor-parallel degree `tp`.
pub fn compare_layer(
    model: &Model,
    values: &Bindings,
    tp: u64,
    calib: &Calibration,
    gpus_per_node: u64,
) -> Result<LayerReport, String> {
    if tp < 2 {
        return Err("--tp must be at least 2 to compare layouts".into());
    }
    let bi = model
        .blocks
        .iter()
        .position(|b| b.name == "layer")
        .or_else(|| {
            model
                .blocks
                .iter()
                .position(|b| b.repeat != crate::sym::Poly::one())
        })
        .ok_or_else(|| format!("model `{}` has no repeated layer", model.name))?;
    let empty = BTreeMap::new();
    let one = without_batch(Problem::from_block(
        model,
        bi,
        values,
        Problem::tp_axis(tp, gpus_per_node, calib),
        &empty,
    )?);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let meg = annotated(model, bi, &one);
    if let Ok(c) = one.cost(&meg) {
        rows.push(LayoutRow {
            method: "annotated (Megatron-LM)".into(),
            cost: c,
            choices: labels(&one, &meg),
        });
    }
    let best = solve(&one)?;
    rows.push(LayoutRow {
        method: format!("exact, one axis of {tp}"),
        cost: best.cost.clone(),
        choices: labels(&one, &best.assignment),
    });
    // D-Rec bisects the devices: log2(tp) binary axes on the same tier.
    if tp.is_power_of_two() {
        let tier = one.axes[0].kappa.clone();
        let axes: Vec<Axis> = (0..tp.trailing_zeros())
            .map(|i| Axis {
                name: format!("tp{i}"),
                size: 2,
                kappa: tier.clone(),
            })
            .collect();
        let bin = without_batch(Problem::from_block(model, bi, values, axes, &empty)?);
        let d = drec(&bin)?;
        rows.push(LayoutRow {
            method: format!("D-Rec, {} halvings", tp.trailing_zeros()),
            cost: d.cost.clone(),
            choices: labels(&bin, &d.assignment),
        });
        match solve_within(&bin, Some(&d.cost)) {
            Ok(Some(s)) => rows.push(LayoutRow {
                method: "exact, same halvings".into(),
                cost: s.cost.clone(),
                choices: labels(&bin, &s.assignment),
            }),
            Ok(None) => notes.push("no layout on the halvings beats D-Rec's".into()),
            Err(e) => notes.push(format!("exact search on the halvings gave up: {e}")),
        }
    } else {
        notes.push(format!("D-Rec needs a power-of-two degree, not {tp}"));
    }
    rows.sort_by(|a, b| a.cost.cmp(&b.cost));
    Ok(LayerReport {
        block: model.blocks[bi].name.clone(),
        tp,
        rows,
        notes,
    })
}
