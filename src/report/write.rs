//! The report of a ranking: one self-contained HTML file with the ranking, its cost
//! components, memory versus time, and the top strategy's timeline, memory and formulas.
//!
//! Every number in the report comes from the commands' own documents (`rank`, `cost
//! --symbolic` and `timeline` of the top strategy, computed by the same functions in this
//! process, the rows passed as typed strategies) and the timeline's Gantt chart;
//! [`crate::report::html`] only lays them out.

use crate::api::{Asked, Loaded, Model, RankDetail, RankOptions, Resolved};
use crate::calib::Calibration;
use crate::error::Error;
use crate::report::ReportInput;
use crate::search::RankedRow;
use serde_json::Value;
use std::path::Path;

/// A ranked row as a strategy on the ranking's machine: its knobs and layout, on the devices
/// per node and the usable memory (after headroom, in whole bytes) the ranking used.
fn strategy_of(row: &RankedRow, ranked: &RankDetail) -> Resolved {
    let knobs = row.evaluation.knobs.clone();
    Resolved {
        layout: row.parallel_layout(),
        knobs,
        calib: ranked.calib.clone(),
        gpus_per_node: ranked.search.gpus_per_node,
        memory: ranked.search.memory.floor(),
    }
}

/// Writes the report of `model` ranked as `opts` ask (with the Pareto frontier the chart draws)
/// to `output`, its header naming `command`; `name` names the model in errors and is not
/// overwritten. Returns the bytes written.
pub fn write_report(
    model: &Model,
    name: &str,
    opts: &RankOptions,
    command: &str,
    output: &Path,
) -> Result<usize, Error> {
    write_report_loaded(&model.load()?, name, opts, command, output, &mut |_, _| {})
}

/// [`write_report`] of a loaded model, `progress` told how many of the mesh shapes are ranked.
pub(crate) fn write_report_loaded(
    loaded: &Loaded,
    name: &str,
    opts: &RankOptions,
    command: &str,
    output: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize, Error> {
    let (result, ranked) = crate::api::rank_loaded(loaded, opts, progress)?;
    let ranking = serde_json::to_value(&result)
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    let (model, values) = (&ranked.model, &ranked.values);
    let rows = &ranked.result.rows;
    let top = rows
        .first()
        .ok_or_else(|| Error::Usage(format!("no strategy of {name} to report")))?;
    let st = strategy_of(top, &ranked);
    let ask = Asked {
        bound: &loaded.bound,
        symbolic: true,
        per_op: false,
    };
    let totals = crate::model::model_cost(model);
    let (cost, _) =
        crate::api::cost_document(model, values, &totals, &ask, Some(&st), &ranked.rules)?;
    let cost = serde_json::to_value(&cost)
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    let (timeline, gantt) = top_timeline(model, values, &st)?;
    // Each row's communication by collective kind and tier, for the stacked bars.
    let comm_parts: Vec<Value> = rows
        .iter()
        .map(|r| comm_parts(&r.evaluation, &ranked.calib))
        .collect();
    // The top row again, with the formulas of its amounts.
    let (_, e) = st.evaluate(model, values, None)?;
    let top_formulas = top_formulas(model, values, &e);
    let html = crate::report::html(&ReportInput {
        command: command.to_string(),
        rank: &ranking,
        cost: &cost,
        timeline: &timeline,
        gantt_svg: &gantt,
        capacity_bytes: &ranked.search.memory,
        comm_parts: &Value::Array(comm_parts),
        top_formulas: &Value::Array(top_formulas),
        partial_domains: result
            .partial_domains
            .as_ref()
            .map(|p| p.sentence(result.devices)),
    })?;
    crate::diag::write_output(output, html.as_bytes(), &[Path::new(name)])?;
    Ok(html.len())
}

/// The top strategy's timeline summary (as JSON) and its Gantt chart.
fn top_timeline(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    st: &Resolved,
) -> Result<(Value, String), Error> {
    let (plan, _) =
        crate::timeline::plan_strategy(model, values, &st.knobs, &st.layout, st.machine())?;
    let timed = crate::timeline::time_plan(&plan, &st.calib)?;
    let title = format!(
        "{} · {} · {} · {:.3} s per step",
        timed.summary.model,
        timed.summary.strategy,
        timed.summary.calibration,
        timed.summary.iteration_seconds
    );
    let gantt = crate::timeline::gantt_svg(&timed.plan, &timed.sim, &title);
    let timeline = serde_json::to_value(&timed.summary)
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    Ok((timeline, gantt))
}

/// A row's communication by collective kind and tier, for the stacked bars.
fn comm_parts(e: &crate::parallel::Evaluation, calib: &Calibration) -> Value {
    let parts: Vec<Value> = crate::parallel::breakdown::comm_by_kind(e, calib)
        .iter()
        .map(|p| {
            serde_json::json!({
                "kind": p.kind.name(),
                "tier": p.tier,
                "cost": crate::units::exact_text(&p.cost),
            })
        })
        .collect();
    Value::Array(parts)
}

/// The top strategy's per-device amounts, with the formulas `compare` derives for them (the
/// relative cost's parts with the calibration's balances), and why an amount has none where
/// it cannot be a polynomial.
fn top_formulas(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    e: &crate::parallel::Evaluation,
) -> Vec<Value> {
    let layer_kinds = model
        .blocks
        .iter()
        .filter(|b| b.repeat != crate::sym::Poly::one())
        .count();
    crate::search::versus::compare(values, e, e)
        .iter()
        .map(|c| {
            let why = c.formula_a.is_none().then(|| {
                crate::search::versus::structural_gap(
                    c.group,
                    &c.name,
                    &e.knobs,
                    layer_kinds,
                    !num_traits::Zero::is_zero(&e.relative.kernels),
                    !num_traits::Zero::is_zero(&e.relative.hidden),
                )
            });
            serde_json::json!({
                "group": c.group,
                "name": c.name,
                "value": crate::units::exact_text(&c.a),
                "formula": c.formula_a.as_ref().map(ToString::to_string),
                "why": why.flatten(),
            })
        })
        .collect()
}
