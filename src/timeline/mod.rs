//! Timelines: a strategy's exact per-device costs turned into seconds on one machine and laid
//! out in time. The plan ([`TimingPlan`]) holds what the symbolic analysis says per device and
//! micro-batch, exact and machine-independent; a calibration table turns each operator into a
//! roofline time and each collective into an α–β time ([`Rates`]); the event flow
//! ([`simulate`]) composes them layer → stage → device under the pipeline schedule. Out: a
//! summary ([`Summary`]), a Chrome trace ([`chrome_trace`]) and an SVG Gantt chart
//! ([`gantt_svg`]).

pub mod bound;
/// The machine's rates and the seconds of kernels and collectives ([`crate::machine`]).
pub use crate::machine as cost;
mod event;
pub mod nccl;
mod plan;
use crate::strategy::schedule;
mod sim;
mod svg;
mod trace;

pub use cost::{bus_factor, steps, KernelClass, LinkRate, PerCollective, Rates};
pub use plan::{
    build_plan, plan_blocks, setting_map, Axis, Collective, PlanBlock, PlanComm, PlanOp, Step,
    TimingPlan, FORMAT,
};
pub use schedule::{device_of, paired, program, Pass, PerPass, Task};
pub use sim::{
    block_held, grad_accumulation_bytes, optimizer_seconds, pass_chains, simulate, simulate_times,
    ChainSeconds, Event, PerStream, SimError, Simulation, Stream, What, BUCKET_BYTES,
};
pub use svg::gantt_svg;
pub use trace::{chrome_trace, write_chrome_trace, TraceDetail};

use crate::calib::{Calibration, MachineRef};
use crate::error::Result;
use crate::model::Model;
use crate::parallel::evaluate::{block_numbers, microbatch_bindings, BlockNumbers};
use crate::parallel::{Analysis, Evaluation, Layout};
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use num_traits::ToPrimitive;
use serde::Serialize;

/// Busy seconds of one device's streams.
pub type Busy = PerStream<f64>;

/// One representative device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    /// Device number (tensor-parallel rank 0, data-parallel rank 0 of its stage).
    pub id: u64,
    /// Pipeline rank.
    pub stage: usize,
    /// Busy seconds per stream.
    pub busy: Busy,
}

/// What a timeline says about one training step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Model.
    pub model: String,
    /// Strategy.
    pub strategy: String,
    /// The model's settings that change how its operators run (attention, loss, training
    /// metrics, dropout; [`crate::model::Model::settings`]), where it has any.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub settings: std::collections::BTreeMap<String, String>,
    /// Calibration table.
    pub calibration: String,
    /// The changes that derived a what-if machine from its table (`--with`), as one line;
    /// absent for a table as shipped or given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<String>,
    /// The stack profile the seconds include (`--stack`); absent: profile-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_profile: Option<String>,
    /// Devices in all.
    pub device_count: u64,
    /// Seconds per step.
    pub iteration_seconds: f64,
    /// Samples per second.
    pub samples_per_second: f64,
    /// Tokens per second.
    pub tokens_per_second: f64,
    /// Model FLOPs (no recomputation) per second per device, in TFLOP/s.
    pub model_tflops_per_device: f64,
    /// Model FLOPs utilisation: model FLOP/s per device over the peak bf16 FLOP/s.
    pub mfu: f64,
    /// The bubble (what `symshard` prints as the bubble): the share of the step (between 0 and 1)
    /// that the busiest device idles before the pipeline flushes, waiting for the stages before
    /// and after it; 0 without a pipeline, where a device's waits between passes are for its
    /// collectives (ZeRO 3's weight gathers), not for other stages.
    pub bubble_fraction: f64,
    /// What the compute seconds were multiplied by because a synchronous step runs at the pace
    /// of its slowest device: [`crate::machine::slowest_pace`] of the table's `pace_spread` and
    /// the device count; 1 without a spread or on one device.
    pub slowest_device_pace: f64,
    /// Whether the fullest device's memory fits the memory a strategy may fill
    /// ([`Summary::memory_limit`]; absent for analyses saved without their memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// Bytes a strategy may fill on one device: the capacity less the headroom
    /// ([`crate::calib::Calibration::usable_memory_bytes`], or the machine's as given).
    pub memory_limit: f64,
    /// Bytes of memory the fullest device needs (absent when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_device: Option<f64>,
    /// How devices are represented.
    pub representative: String,
    /// One device per pipeline stage.
    pub devices: Vec<DeviceSummary>,
}

/// A timed step: the plan, the events and the summary.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The plan it times.
    pub plan: TimingPlan,
    /// The simulation.
    pub sim: Simulation,
    /// The summary.
    pub summary: Summary,
}

fn f(r: &Rational) -> f64 {
    r.to_f64().unwrap_or(0.0)
}

/// Times a plan on a machine, keeping every event (for traces and charts).
pub fn time_plan(plan: &TimingPlan, calib: &Calibration) -> Result<Timeline> {
    timed(plan, calib, true)
}

/// Times a plan on a machine, keeping only the summary (no events).
pub fn time_summary(plan: &TimingPlan, calib: &Calibration) -> Result<Summary> {
    Ok(timed(plan, calib, false)?.summary)
}

/// The summary judged against `usable` bytes per device instead of the table's default.
pub fn judged_against(mut s: Summary, plan: &TimingPlan, usable: &Rational) -> Summary {
    s.fits = known_memory(plan).map(|m| m <= *usable);
    s.memory_limit = usable.to_f64().unwrap_or(f64::MAX);
    s
}

fn known_memory(plan: &TimingPlan) -> Option<Rational> {
    use num_traits::Zero;
    (!plan.memory_per_device.is_zero()).then(|| plan.memory_per_device.clone())
}

fn timed(plan: &TimingPlan, calib: &Calibration, keep: bool) -> Result<Timeline> {
    crate::parallel::check_precision(calib, plan.knobs.precision)?;
    // Under per-row profiles, with the strategy's own stack's.
    let rates = Rates::for_knobs(calib, &plan.knobs);
    let gpn = plan.gpus_per_node.unwrap_or_else(|| calib.gpus_per_node());
    // The numbers always come from the timing-only simulation (which adds a run's repeating
    // layers at once), so that a step has the same figures with or without its events; the
    // events, for traces and charts, from the simulation of every event (equal to 1e-9).
    let times = simulate_times(plan, &rates, gpn)?;
    let k = &plan.knobs;
    let per_stage = k.tp * k.cp * k.dp;
    let t = times.iteration;
    let devices = k.devices();
    let model_flops = f(&plan.model_flops) / t / devices as f64;
    let work = times.work.iter().cloned().fold(0.0, f64::max);
    let summary = Summary {
        model: plan.model.clone(),
        strategy: k.to_string(),
        settings: plan.settings.clone(),
        calibration: calib.name.clone(),
        what_if: calib.what_if.as_ref().map(|w| w.describe()),
        stack_profile: stack_profile_text(calib, &plan.knobs),
        device_count: devices,
        iteration_seconds: t,
        samples_per_second: f(&plan.samples) / t,
        tokens_per_second: f(&plan.tokens) / t,
        model_tflops_per_device: model_flops / 1e12,
        mfu: model_flops / rates.peak_flops,
        // Of the whole step, as `rank`'s bubble is a share of the whole relative cost.
        bubble_fraction: if k.pp > 1 && t > 0.0 {
            ((times.flush - work) / t).clamp(0.0, 1.0)
        } else {
            0.0
        },
        slowest_device_pace: crate::machine::slowest_pace(rates.pace_spread, devices),
        fits: known_memory(plan).map(|m| m <= calib.usable_memory_bytes()),
        memory_limit: f(&calib.usable_memory_bytes()),
        memory_per_device: known_memory(plan).map(|m| f(&m)),
        representative: format!(
            "one device per pipeline {}: its {} tensor-{}and data-parallel ranks are symmetric",
            if k.dualpipe() {
                "rank (under dualpipe rank s runs stages s and pp − 1 − s; the stage shown is s)"
            } else if k.v_placed() {
                if k.schedule.overlaps_chunks() {
                    "rank (under dualpipev rank s runs chunks s and 2·pp − 1 − s; the stage shown is s)"
                } else {
                    "rank (under zb-v rank s runs chunks s and 2·pp − 1 − s; the stage shown is s)"
                }
            } else {
                "stage"
            },
            per_stage,
            if k.cp > 1 { ", context- " } else { " " }
        ),
        devices: times
            .busy
            .iter()
            .enumerate()
            .map(|(s, b)| DeviceSummary {
                id: s as u64 * per_stage,
                stage: s,
                busy: *b,
            })
            .collect(),
    };
    let sim = if keep {
        simulate(plan, &rates, gpn)?
    } else {
        times
    };
    Ok(Timeline {
        plan: plan.clone(),
        sim,
        summary,
    })
}

/// Analyses, evaluates and plans a strategy on `machine`. The plan records the devices per node
/// only where `machine` was given them ([`MachineRef::given_gpus_per_node`]): timed on another
/// table, a plan that fixed none takes that table's.
pub fn plan_strategy(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    machine: MachineRef,
) -> Result<(TimingPlan, Evaluation)> {
    // The timeline reads numbers only: the fold without formulas.
    let (analysis, e) =
        crate::parallel::evaluate_strategy_with(model, values, knobs, layout, machine, false)?;
    let b = microbatch_bindings(model, values, knobs);
    // The plan takes its stages from the evaluation (whose partition weighed the kernel term)
    // and no kernel amounts from the blocks: they are not priced again here.
    let kernels = crate::parallel::kernels::KernelEfficiency::plateau();
    let numbers = block_numbers(&analysis, &b, &kernels)?;
    let plan = build_plan(
        model,
        &analysis,
        &numbers,
        &e,
        values,
        &b,
        knobs,
        machine.given_gpus_per_node(),
    )?;
    Ok((plan, e))
}

/// Seconds per training step of an evaluated strategy on `calib`, for ranking. `numbers` are
/// the analysis evaluated at the strategy's micro-batch bindings, `values` the model's symbol
/// values for the whole step; the mesh (devices per node) is the evaluation's.
pub fn iteration_seconds(
    model: &Model,
    analysis: &Analysis,
    numbers: &[BlockNumbers],
    evaluation: &Evaluation,
    values: &Bindings,
    calib: &Calibration,
) -> Result<f64, String> {
    let knobs = &evaluation.knobs;
    let b = microbatch_bindings(model, values, knobs);
    let gpn = evaluation.mesh.gpus_per_node;
    let plan = build_plan(
        model,
        analysis,
        numbers,
        evaluation,
        values,
        &b,
        knobs,
        Some(gpn),
    )
    .map_err(|e| e.to_string())?;
    let sim =
        simulate_times(&plan, &Rates::for_knobs(calib, knobs), gpn).map_err(|e| e.to_string())?;
    Ok(sim.iteration)
}

/// The stack profile a strategy of knobs `k` is timed with on `table`, as a timeline's header
/// names it (`None`: profile-free, no profile asked for).
pub fn stack_profile_text(table: &Calibration, k: &Knobs) -> Option<String> {
    if table.per_row.is_none() {
        let outside = table.stack_supports().filter(|s| s.refuses(k).is_some());
        return match outside {
            Some(s) => table.stack_text().map(|t| {
                format!(
                    "{t}; this stack does not run this layout (it runs {}: the profile's `supports:`), so its seconds are an extrapolation",
                    s.describe()
                )
            }),
            None => table.stack_text(),
        };
    }
    let stack = crate::calib::stack::Stack::of(k);
    let profile = table
        .profile_on(stack)
        .map_or_else(|| "profile-free".to_string(), |p| p.describe());
    Some(format!(
        "{profile}: the {} stack this strategy is assumed to run on (--stack auto)",
        stack.label()
    ))
}
