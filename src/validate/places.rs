//! Where `rank` places the layouts of published runs (`symshard validate --places`): the ranking
//! question beside the step-time error. Each step-time row of eight devices or more is ranked on
//! its own model, sizes, device count and machine, with the run's software settings fixed for
//! every layout (its precision, overlaps, FP8 weights, recomputation, sequence parallelism and
//! pipeline split) and the whole device memory usable, as validation judges a row's fit (a
//! layout that trained fitted). The place is that of the first ranked row with the published
//! degrees (dp, tp, pp, cp, ep), ZeRO stage, chunk count and, where the row states it, its
//! micro-batch count. A published layout far down the list, or outside the rows ranked, is one
//! that the model's mechanisms do not favour although a team chose it.

use super::{row_setup, Measure, ValidationFile};
use crate::api::{Headroom, Machine, RankOptions};
use crate::diag::Source;
use crate::error::Result;
use crate::model::ModelLoader;
use crate::strategy::Knobs;
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
/// profile `stack` names (`None`: profile-free).
pub fn places(name: &str, src: &Source, stack: Option<&str>) -> Result<Vec<Place>> {
    let file: ValidationFile = src.parse()?;
    let raw: serde_yaml::Value = src.parse()?;
    let mut loader = ModelLoader::embedded()?;
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
        let mut machine = Machine::named(&file.machine)?;
        if let Some(s) = stack {
            machine = machine.with_stack(s)?;
        }
        let per_node = gpus_per_node(
            setup.strategy.gpus_per_node,
            machine.gpus_per_node(),
            k.devices(),
        );
        machine = machine.with_gpus_per_node(per_node)?;
        let opts = RankOptions::builder(k.devices())
            .machine(machine.clone())
            .by_seconds(true)
            .top(TOP)
            .headroom(Headroom::parse("0%")?)
            .max_chunks(k.virtual_chunks().max(crate::search::DEFAULT_MAX_CHUNKS))
            .fix_text(&settings(k))
            .build()?;
        let published = k.describe(Some(&setup.batch));
        let supports = machine
            .calibration()
            .stack
            .as_ref()
            .and_then(|p| p.supports.as_ref());
        if let Some(why) = supports.and_then(|s| Some((s, s.refuses(k)?))) {
            out.push(Place {
                file: name.to_string(),
                row,
                published,
                place: None,
                seconds: None,
                first: None,
                refused: Some(format!("--stack {} does not run {}", why.0.profile, why.1)),
            });
            continue;
        }
        let ranked = crate::api::search_options(&setup.model, &setup.values, &machine, &opts)
            .and_then(|(search, _)| {
                crate::search::rank(&setup.model, &setup.values, machine.calibration(), &search)
                    .map_err(crate::Error::from)
            });
        let rows = match ranked {
            Ok(r) => r.rows,
            Err(e) => {
                out.push(Place {
                    file: name.to_string(),
                    row,
                    published,
                    place: None,
                    seconds: None,
                    first: None,
                    refused: Some(format!("rank refused: {e}")),
                });
                continue;
            }
        };
        let at = rows
            .iter()
            .position(|r| same_layout(&r.evaluation.knobs, k, counted));
        let seconds = |i: usize| rows[i].seconds.unwrap_or(f64::NAN);
        out.push(Place {
            file: name.to_string(),
            row,
            published,
            place: at.map(|i| i + 1),
            seconds: at.map(seconds),
            first: rows
                .first()
                .map(|r| (r.evaluation.knobs.describe(Some(&setup.batch)), seconds(0))),
            refused: None,
        });
    }
    Ok(out)
}

/// Devices per node for a row: as its strategy states; else the machine's where they fill
/// whole nodes; else the most that divide the devices (a run on NVL72 racks of 64 GPUs each,
/// as MLPerf's GB200 systems list "4x NVIDIA GB200 NVL72" for 256 GPUs).
fn gpus_per_node(stated: Option<u64>, machine: u64, devices: u64) -> u64 {
    match stated {
        Some(n) => n,
        None if devices.is_multiple_of(machine) => machine,
        None => (1..=machine)
            .rev()
            .find(|n| devices.is_multiple_of(*n))
            .unwrap_or(1),
    }
}

/// The run's software settings as `--fix` items, held for every layout ranked.
fn settings(k: &Knobs) -> String {
    let mut fix = vec![
        format!("precision={}", k.precision),
        format!("recompute={}", k.recompute),
        format!("sp={}", if k.sequence_parallel { "on" } else { "off" }),
    ];
    let overlap: Vec<&str> = [
        (k.overlap.tp_comm, "tp-comm"),
        (k.overlap.param_gather, "param-gather"),
        (!k.overlap.grad_reduce, "no-grad-reduce"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if !overlap.is_empty() {
        fix.push(format!("overlap={}", overlap.join("+")));
    }
    if k.fp8_params {
        fix.push("fp8-params=on".into());
    }
    let split = k.pipeline_split;
    let counted: Vec<&str> = [(split.embedding, "embedding"), (split.loss, "loss")]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
    if !counted.is_empty() {
        fix.push(format!("account={}", counted.join("+")));
    }
    fix.join(",")
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
        assert_eq!(gpus_per_node(Some(4), 8, 64), 4);
        assert_eq!(gpus_per_node(None, 8, 64), 8);
        // 256 GPUs of 72-GPU NVLink domains: 64 of each.
        assert_eq!(gpus_per_node(None, 72, 256), 64);
        assert_eq!(gpus_per_node(None, 72, 7), 7);
    }
}
