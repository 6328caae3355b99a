//! One point of a sweep: the fastest layout by simulated seconds (`rank --calib … --top 1`),
//! its timeline's throughput and MFU, its memory, and what a trillion tokens cost in GPU-hours,
//! energy and dollars.

use super::spec::{base_name, Loaded};
use crate::api::PointSearch;
use crate::calib::Calibration;
use crate::error::Error;
use crate::model::Model;
use crate::search::RankedRow;
use crate::sym::Rational;
use num_traits::ToPrimitive;
use serde::{Deserialize, Serialize};

/// Where a point sits in the grid: an index into each axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// Its number: the rows are written in this order.
    pub index: u64,
    /// Model, machine, devices, precision, batch and sequence, each an index into its list.
    pub at: [usize; 6],
}

/// The axes in the order of [`Point::at`], as rows and summaries name them.
pub const AXES: [&str; 6] = [
    "model",
    "machine",
    "devices",
    "precision",
    "batch",
    "sequence",
];

/// One row of a sweep's output: a point, and its best layout or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The point's number.
    pub point: u64,
    /// The model, as the spec names it.
    pub model: String,
    /// The machine (a what-if machine's name ends in `+what-if(…)`).
    pub machine: String,
    /// A what-if machine's changes; absent for a table as shipped.
    pub what_if: Option<String>,
    /// Devices.
    pub devices: u64,
    /// Mixed precision.
    pub precision: String,
    /// Global batch (samples per step), where the model has one.
    pub batch: Option<u64>,
    /// Sequence length, where the model has one.
    pub sequence: Option<u64>,
    /// Whether the point has a layout that fits in memory.
    pub feasible: bool,
    /// Why it has none, or why it could not be searched.
    pub reason: Option<String>,
    /// The best layout's family: its degrees above 1 (`dp+tp+pp`; `single` for none).
    pub family: Option<String>,
    /// The best layout as one string (`rank`'s strategy).
    pub strategy: Option<String>,
    /// Its knobs.
    pub dp: Option<u64>,
    /// Tensor-parallel degree.
    pub tp: Option<u64>,
    /// Pipeline-parallel degree.
    pub pp: Option<u64>,
    /// Context-parallel degree.
    pub cp: Option<u64>,
    /// Expert-parallel degree.
    pub ep: Option<u64>,
    /// Micro-batch size.
    pub micro_batch_size: Option<u64>,
    /// Micro-batches per step.
    pub microbatches: Option<u64>,
    /// Pipeline schedule (`none` without a pipeline).
    pub schedule: Option<String>,
    /// Model chunks per device (interleaved schedule).
    pub chunks: Option<u64>,
    /// Sequence parallelism.
    pub sequence_parallel: Option<bool>,
    /// Recomputation.
    pub recompute: Option<String>,
    /// ZeRO stage.
    pub zero: Option<u64>,
    /// Tensor-parallel layout (`annotated` or `auto`).
    pub layout: Option<String>,
    /// Simulated seconds per step (the ranking's).
    #[serde(with = "float")]
    pub seconds_per_step: Option<f64>,
    /// Tokens per second (the timeline's).
    #[serde(with = "float")]
    pub tokens_per_second: Option<f64>,
    /// Model FLOPs utilisation (the timeline's: model FLOP/s per device over the bf16 peak).
    #[serde(with = "float")]
    pub mfu: Option<f64>,
    /// Memory per device of the busiest device, whole bytes (rounded up).
    pub memory_per_device_bytes: Option<u64>,
    /// Usable memory per device (after headroom), whole bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Whether the best layout fits.
    pub fits: Option<bool>,
    /// GPU-hours per 10¹² tokens: devices × seconds per step ÷ tokens per step × 10¹² ÷ 3600.
    #[serde(with = "float")]
    pub gpu_hours_per_trillion_tokens: Option<f64>,
    /// The device's TDP in watts, from the table.
    #[serde(with = "float")]
    pub tdp_watts: Option<f64>,
    /// Joules per step at TDP: devices × TDP × seconds (an upper bound).
    #[serde(with = "float")]
    pub energy_per_step_joules: Option<f64>,
    /// Megawatt-hours per 10¹² tokens at TDP (an upper bound).
    #[serde(with = "float")]
    pub energy_mwh_per_trillion_tokens: Option<f64>,
    /// Dollars per GPU-hour, from the spec.
    #[serde(with = "float")]
    pub price_per_gpu_hour: Option<f64>,
    /// Dollars per step.
    #[serde(with = "float")]
    pub cost_per_step_dollars: Option<f64>,
    /// Dollars per 10¹² tokens.
    #[serde(with = "float")]
    pub cost_per_trillion_tokens_dollars: Option<f64>,
    /// What is missing from a feasible row (`no TDP in table`, `no price given`).
    pub note: Option<String>,
    /// The stack profile the best layout's seconds include (the spec's `stack`; under `auto`
    /// the profile of the stack that layout assumes); absent: profile-free.
    #[serde(default)]
    pub stack_profile: Option<String>,
}

/// Floats in the journal as Rust prints them (the shortest text that reads back as the same
/// float), so that a resumed sweep writes the same bits.
mod float {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match x {
            Some(x) => s.serialize_str(&x.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        let t: Option<String> = Option::deserialize(d)?;
        t.map(|t| t.parse::<f64>().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The family of a layout: its degrees above 1, in the order dp, tp, pp, cp, ep.
pub fn family(k: &crate::strategy::Knobs) -> String {
    let parts: Vec<&str> = [
        ("dp", k.dp),
        ("tp", k.tp),
        ("pp", k.pp),
        ("cp", k.cp),
        ("ep", k.ep),
    ]
    .iter()
    .filter(|(_, d)| *d > 1)
    .map(|(n, _)| *n)
    .collect();
    if parts.is_empty() {
        "single".into()
    } else {
        parts.join("+")
    }
}

fn whole(r: &Rational) -> Option<u64> {
    crate::units::whole_bytes(r).to_integer().to_u64()
}

impl Loaded {
    /// The row of one point: never an error (a point that cannot be searched says why).
    pub fn evaluate(&self, p: &Point) -> Row {
        let model = &self.models[p.at[0]];
        let calib = &self.machines[p.at[1]];
        let mut row = self.blank_row(p, model, calib);
        if let Err(e) = self.fill(p, model, calib, &mut row) {
            row.feasible = false;
            row.reason = Some(e.to_string());
        }
        row
    }

    /// The point's coordinates, before any search.
    fn blank_row(&self, p: &Point, model: &Model, calib: &Calibration) -> Row {
        let size = |v: &Option<Vec<u64>>, k: usize, sym: Option<&String>| match v {
            Some(v) => Some(v[p.at[k]]),
            None => sym
                .and_then(|s| model.values.get(s))
                .and_then(|r| r.to_integer().to_u64()),
        };
        Row {
            point: p.index,
            model: self.spec.models[p.at[0]].clone(),
            machine: calib.name.clone(),
            what_if: calib.what_if.as_ref().map(|w| w.describe()),
            devices: self.spec.devices[p.at[2]],
            precision: self.precisions[p.at[3]].clone(),
            batch: size(&self.spec.batch, 4, model.batch.as_ref()),
            sequence: size(&self.spec.sequence, 5, model.roles.sequence.as_ref()),
            feasible: false,
            reason: None,
            family: None,
            strategy: None,
            dp: None,
            tp: None,
            pp: None,
            cp: None,
            ep: None,
            micro_batch_size: None,
            microbatches: None,
            schedule: None,
            chunks: None,
            sequence_parallel: None,
            recompute: None,
            zero: None,
            layout: None,
            seconds_per_step: None,
            tokens_per_second: None,
            mfu: None,
            memory_per_device_bytes: None,
            memory_limit_bytes: None,
            fits: None,
            gpu_hours_per_trillion_tokens: None,
            tdp_watts: None,
            energy_per_step_joules: None,
            energy_mwh_per_trillion_tokens: None,
            price_per_gpu_hour: None,
            cost_per_step_dollars: None,
            cost_per_trillion_tokens_dollars: None,
            note: None,
            stack_profile: None,
        }
    }

    /// `--set` items for the point's swept batch and sequence.
    pub(super) fn sets(&self, p: &Point, model: &Model) -> Result<Vec<String>, Error> {
        Ok(self
            .set_values(p, model)?
            .into_iter()
            .map(|(sym, v)| format!("{sym}={v}"))
            .collect())
    }

    /// The point's swept batch and sequence: each model symbol and its value.
    pub(super) fn set_values(&self, p: &Point, model: &Model) -> Result<Vec<(String, u64)>, Error> {
        let mut set = Vec::new();
        let axes = [
            ("batch", &self.spec.batch, 4, model.batch.as_ref()),
            (
                "sequence",
                &self.spec.sequence,
                5,
                model.roles.sequence.as_ref(),
            ),
        ];
        for (what, list, k, sym) in axes {
            if let Some(v) = list {
                let sym = sym.ok_or_else(|| {
                    Error::Usage(format!(
                        "model `{}` has no {what} symbol to set",
                        model.name
                    ))
                })?;
                set.push((sym.clone(), v[p.at[k]]));
            }
        }
        Ok(set)
    }

    /// Searches the point and fills the row with the best layout and its figures.
    fn fill(
        &self,
        p: &Point,
        model: &Model,
        calib: &Calibration,
        row: &mut Row,
    ) -> Result<(), Error> {
        let mut fix = self.fix.clone();
        fix.push(format!("precision={}", row.precision));
        let search = PointSearch {
            model: &row.model,
            devices: row.devices,
            set: self.sets(p, model)?,
            fix,
            max: self.max.clone(),
            headroom: self.spec.headroom.clone(),
        };
        let (values, opts) = search.options(model, calib)?;
        row.memory_limit_bytes = whole(&opts.memory.floor());
        let result = crate::search::rank(model, &values, calib, &opts)?;
        let batch = model
            .batch_value(&values)
            .cloned()
            .unwrap_or_else(|| Rational::from_integer(1.into()));
        let Some(top) = result.rows.first() else {
            row.reason = Some("no strategy to rank".into());
            return Ok(());
        };
        knobs_into(row, top, &batch);
        if !top.evaluation.feasible {
            row.reason =
                crate::api::nothing_fits_line(&result, &opts.memory, &batch).or_else(|| {
                    top.evaluation
                        .reason
                        .as_ref()
                        .map(crate::parallel::Infeasible::describe)
                });
            return Ok(());
        }
        row.feasible = true;
        row.seconds_per_step = top.seconds;
        row.stack_profile = calib
            .profile_for(&top.evaluation.knobs)
            .map(|s| s.name.clone());
        let layout = top.parallel_layout();
        let memory = opts.memory.floor();
        let on = crate::calib::MachineRef::new(calib, opts.gpus_per_node, &memory);
        let (plan, _) =
            crate::timeline::plan_strategy(model, &values, &top.evaluation.knobs, &layout, on)?;
        let summary = crate::timeline::time_summary(&plan, calib)?;
        row.tokens_per_second = Some(summary.tokens_per_second);
        row.mfu = Some(summary.mfu);
        self.costs(row, calib, plan.tokens.to_f64());
        Ok(())
    }

    /// GPU-hours, energy and dollars per trillion tokens, where the table and spec allow.
    fn costs(&self, row: &mut Row, calib: &Calibration, tokens: Option<f64>) {
        let (Some(t), Some(tokens)) = (row.seconds_per_step, tokens) else {
            return;
        };
        let n = row.devices as f64;
        let steps_per_trillion = 1e12 / tokens;
        row.gpu_hours_per_trillion_tokens = Some(n * t * steps_per_trillion / 3600.0);
        let mut notes = Vec::new();
        match calib.device.tdp.as_ref().and_then(|w| w.value.to_f64()) {
            Some(w) => {
                let joules = n * w * t;
                row.tdp_watts = Some(w);
                row.energy_per_step_joules = Some(joules);
                row.energy_mwh_per_trillion_tokens = Some(joules * steps_per_trillion / 3.6e9);
            }
            None => notes.push("no TDP in table"),
        }
        let prices = &self.spec.price_per_gpu_hour;
        match prices
            .get(&calib.name)
            .or_else(|| prices.get(base_name(calib)))
        {
            Some(&price) => {
                row.price_per_gpu_hour = Some(price);
                row.cost_per_step_dollars = Some(n * t / 3600.0 * price);
                row.cost_per_trillion_tokens_dollars =
                    row.gpu_hours_per_trillion_tokens.map(|h| h * price);
            }
            None => notes.push("no price given"),
        }
        row.note = (!notes.is_empty()).then(|| notes.join("; "));
    }
}

/// The best row's knobs, memory and whether it fits.
fn knobs_into(row: &mut Row, top: &RankedRow, batch: &Rational) {
    let e = &top.evaluation;
    let k = &e.knobs;
    row.family = Some(family(k));
    row.strategy = Some(k.describe(Some(batch)));
    row.dp = Some(k.dp);
    row.tp = Some(k.tp);
    row.pp = Some(k.pp);
    row.cp = Some(k.cp);
    row.ep = Some(k.ep);
    row.micro_batch_size = k.micro_batch_size(batch);
    row.microbatches = Some(k.microbatches);
    row.schedule = Some(k.schedule_name());
    row.chunks = Some(k.chunks);
    row.sequence_parallel = Some(k.sequence_parallel);
    row.recompute = Some(k.recompute.to_string());
    row.zero = Some(u64::from(k.zero));
    row.layout = Some(top.layout.kind.name().to_string());
    row.memory_per_device_bytes = whole(&e.memory.total);
    row.fits = Some(e.feasible);
}
