//! Where `rank` places the layouts of published runs (`symshard validate --places`): the ranking
//! question beside the step-time error. Each step-time row of eight devices or more is ranked on
//! its own model, sizes, device count and machine, with the run's software settings fixed for
//! every layout (its precision, overlaps, FP8 weights, recomputation, sequence parallelism and
//! pipeline split) and the whole device memory usable, as validation judges a row's fit (a
//! layout that trained fitted). The place is that of the first ranked row with the published
//! degrees (dp, tp, pp, cp, ep), ZeRO stage, chunk count and, where the row states it, its
//! micro-batch count. A published layout far down the list, or outside the rows ranked, is one
//! that the model's mechanisms do not favour although a team chose it.

use super::{row_setup, Measure, RowSetup, ValidationFile};
use crate::api::{Headroom, Machine, RankOptions};
use crate::diag::Source;
use crate::error::Result;
use crate::model::ModelLoader;
use crate::search::Steer;
use crate::strategy::{partial_node_size, Knobs};
use serde::Serialize;

/// How many rows each ranking lists: a published layout below them is "not placed".
pub const TOP: usize = 100;

/// Rows with fewer devices are not ranked: every layout of so few is a small search.
pub const LEAST_DEVICES: u64 = 8;

/// Where one published layout is ranked.
#[derive(Debug, Clone, Serialize)]
pub struct Place {
    /// The validation file's stem.
    pub file: String,
    /// The row's name.
    pub row: String,
    /// The published layout as a strategy string.
    pub published: String,
    /// Its place (1 is first); `None` below the first [`TOP`] rows.
    pub place: Option<usize>,
    /// Its simulated seconds per step, where placed.
    pub seconds: Option<f64>,
    /// The first row's strategy and simulated seconds.
    pub first: Option<(String, f64)>,
    /// Why the layout was not ranked, where it was not: the stack profile named does not run
    /// it (its `supports:`), or `rank` refused the search.
    pub refused: Option<String>,
}

/// The places of the published layouts of the file `src` (named `name`), ranked on the stack
/// profile `stack` names (`None`: profile-free); none where `model_parallel_only` and no row of
/// the file has tensor or pipeline parallelism.
pub fn places(
    name: &str,
    src: &Source,
    stack: Option<&str>,
    model_parallel_only: bool,
) -> Result<Vec<Place>> {
    let file: ValidationFile = src.parse()?;
    let raw: serde_yaml::Value = src.parse()?;
    if model_parallel_only && !has_model_parallel_row(&raw) {
        return Ok(Vec::new());
    }
    let mut loader = ModelLoader::embedded()?;
    let mut base = Machine::named(&file.machine)?;
    if let Some(s) = stack {
        base = base.with_stack(s)?;
    }
    let mut out = Vec::new();
    for (i, run) in file.runs.into_iter().enumerate() {
        if run.measure != Measure::IterationSeconds {
            continue;
        }
        let row = run.name.clone();
        // Whether the row states its micro-batches: otherwise any count is its layout.
        let strategy = &raw["runs"][i]["strategy"];
        let counted =
            !strategy["microbatches"].is_null() || !strategy["micro_batch_size"].is_null();
        let setup = row_setup(run, &mut loader, src, &i.to_string())?;
        let k = &setup.knobs;
        if k.devices() < LEAST_DEVICES {
            continue;
        }
        let per_node = setup
            .strategy
            .gpus_per_node
            .unwrap_or_else(|| gpus_per_node(base.gpus_per_node(), k.devices()));
        let machine = base.clone().with_gpus_per_node(per_node)?;
        let published = k.describe(Some(&setup.batch));
        let ranked = match machine
            .calibration()
            .stack_supports()
            .map(|s| (s, s.refuses(k)))
        {
            Some((s, Some(what))) => Err(format!("--stack {} does not run {what}", s.profile)),
            _ => rank_row(&setup, &machine).map_err(|e| format!("rank refused: {e}")),
        };
        let mut place = Place {
            file: name.to_string(),
            row,
            published,
            place: None,
            seconds: None,
            first: None,
            refused: None,
        };
        match ranked {
            Err(why) => place.refused = Some(why),
            Ok(rows) => {
                let seconds = |i: usize| rows[i].seconds.unwrap_or(f64::NAN);
                let at = rows
                    .iter()
                    .position(|r| same_layout(&r.evaluation.knobs, k, counted));
                place.place = at.map(|i| i + 1);
                place.seconds = at.map(seconds);
                place.first = rows
                    .first()
                    .map(|r| (r.evaluation.knobs.describe(Some(&setup.batch)), seconds(0)));
            }
        }
        out.push(place);
    }
    Ok(out)
}

/// The rows `rank` lists for a row's model, sizes and devices on `machine`: by simulated
/// seconds, the first [`TOP`], the whole device memory usable, the run's settings fixed.
fn rank_row(setup: &RowSetup, machine: &Machine) -> Result<Vec<crate::search::RankedRow>> {
    let k = &setup.knobs;
    let opts = RankOptions::builder(k.devices())
        .machine(machine.clone())
        .by_seconds(true)
        .top(TOP)
        .headroom(Headroom::parse("0%")?)
        .max_chunks(k.virtual_chunks().max(crate::search::DEFAULT_MAX_CHUNKS))
        .constraints(settings(k))
        .build()?;
    let (search, _) = crate::api::search_options(&setup.model, &setup.values, machine, &opts)?;
    let ranked = crate::search::rank(&setup.model, &setup.values, machine.calibration(), &search)?;
    Ok(ranked.rows)
}

/// Devices per node for a row whose strategy states none: the machine's where the devices fill
/// whole nodes, else the part of each node a job uses ([`partial_node_size`]: 64 of a 72-GPU
/// NVL72 rack).
fn gpus_per_node(machine: u64, devices: u64) -> u64 {
    if devices.is_multiple_of(machine) {
        machine
    } else {
        partial_node_size(devices, machine).unwrap_or(machine)
    }
}

/// The run's software settings, fixed for every layout ranked: its precision, recomputation,
/// sequence parallelism and pipeline split, and the overlaps and FP8 weights it turns on.
fn settings(k: &Knobs) -> Steer {
    let split = k.pipeline_split;
    Steer {
        precision: Some(k.precision),
        recompute: Some(k.recompute),
        sequence_parallel: Some(k.sequence_parallel),
        tp_comm_overlap: k.overlap.tp_comm.then_some(true),
        overlap_param_gather: k.overlap.param_gather.then_some(true),
        overlap_grad_reduce: (!k.overlap.grad_reduce).then_some(false),
        fp8_params: k.fp8_params.then_some(true),
        pipeline_split: (split.embedding || split.loss).then_some(split),
        ..Steer::default()
    }
}

/// Whether a validation file (`raw`) has a row with tensor or pipeline parallelism.
fn has_model_parallel_row(raw: &serde_yaml::Value) -> bool {
    let runs = raw["runs"].as_sequence().map(Vec::as_slice).unwrap_or(&[]);
    runs.iter().any(|r| {
        ["tp", "pp"]
            .iter()
            .any(|k| r["strategy"][*k].as_u64().is_some_and(|d| d > 1))
    })
}

/// Whether a ranked row has the published layout: its degrees, ZeRO stage and chunks, and its
/// micro-batch count where the row states one (`counted`).
fn same_layout(r: &Knobs, published: &Knobs, counted: bool) -> bool {
    (r.dp, r.tp, r.pp, r.cp, r.ep)
        == (
            published.dp,
            published.tp,
            published.pp,
            published.cp,
            published.ep,
        )
        && r.zero == published.zero
        && r.virtual_chunks() == published.virtual_chunks()
        && (!counted || r.microbatches == published.microbatches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_per_node_fill_what_they_can() {
        assert_eq!(gpus_per_node(8, 64), 8);
        // 256 GPUs of 72-GPU NVLink domains: 64 of each.
        assert_eq!(gpus_per_node(72, 256), 64);
    }
}
