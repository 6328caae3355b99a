//! [`timeline`]: one training step of a strategy simulated on a machine.

use super::{Machine, Model, Strategy};
use crate::error::Error;
use crate::timeline::{
    gantt_svg, judged_against, plan_strategy, time_plan, time_summary, Summary, TimingPlan,
};
use std::path::PathBuf;

/// What is timed: a model under a strategy, or an analysis saved by `symshard analyze -o`.
// Built once per request: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum TimelineInput {
    /// A model and a strategy.
    Model {
        /// The model, its sizes and settings.
        model: Model,
        /// The strategy.
        strategy: Strategy,
    },
    /// A saved analysis (its strategy and sizes are fixed).
    Analysis(PathBuf),
}

/// What [`timeline`] is asked.
#[derive(Debug, Clone)]
pub struct TimelineRequest {
    /// What to time.
    pub input: TimelineInput,
    /// The machine to time it on.
    pub machine: Machine,
    /// Also draw the step as an SVG Gantt chart.
    pub svg: bool,
}

/// A simulated training step (seconds as `f64`).
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Its figures: seconds per step, throughput, MFU, bubble, memory, busy seconds per
    /// stream. Its JSON is `symshard timeline --format json`'s.
    pub summary: Summary,
    /// The SVG Gantt chart, where asked for.
    pub svg: Option<String>,
    /// Warnings and notes (`warning: …`, `note: …`), as the command line prints them.
    pub warnings: Vec<String>,
}

/// Simulates one training step. A strategy that does not fit in memory is simulated all the
/// same, with a warning in [`Timeline::warnings`].
pub fn timeline(req: &TimelineRequest) -> Result<Timeline, Error> {
    let (out, notes) = crate::diag::capture_notes(|| timeline_in_full(req, false));
    let mut t = out?.0;
    t.warnings = notes;
    Ok(t)
}

/// [`timeline`] with the plan, and with `events` (or an SVG asked for) every event of the
/// step (for traces).
pub(crate) fn timeline_in_full(
    req: &TimelineRequest,
    events: bool,
) -> Result<(Timeline, TimingPlan, Option<crate::timeline::Timeline>), Error> {
    let plan = plan_of(&req.input, &req.machine)?;
    let calib = req.machine.calibration();
    let usable = req.machine.usable_memory()?;
    if !events && !req.svg {
        let summary = judged_against(time_summary(&plan, calib)?, &plan, &usable);
        let out = Timeline {
            summary,
            svg: None,
            warnings: Vec::new(),
        };
        return Ok((out, plan, None));
    }
    let mut tl = time_plan(&plan, calib)?;
    tl.summary = judged_against(tl.summary, &plan, &usable);
    let svg = req.svg.then(|| {
        let title = format!(
            "{} · {} · {} · {:.3} s per step",
            tl.summary.model,
            tl.summary.strategy,
            tl.summary.calibration,
            tl.summary.iteration_seconds
        );
        gantt_svg(&tl.plan, &tl.sim, &title)
    });
    let out = Timeline {
        summary: tl.summary.clone(),
        svg,
        warnings: Vec::new(),
    };
    Ok((out, plan, Some(tl)))
}

/// The timing plan of `input` on `machine`.
pub(crate) fn plan_of(input: &TimelineInput, machine: &Machine) -> Result<TimingPlan, Error> {
    let (model, strategy) = match input {
        TimelineInput::Analysis(path) => {
            if machine.given_gpus_per_node().is_some() {
                return Err(Error::Usage(
                    "a saved analysis already fixes the strategy and symbols: only --calib applies"
                        .into(),
                ));
            }
            return TimingPlan::load(path);
        }
        TimelineInput::Model { model, strategy } => (model, strategy),
    };
    let loaded = model.load()?;
    let (model, values) = (&loaded.model, &loaded.values);
    let st = strategy.resolve_for(machine, model, values)?;
    // Devices per node the strategy fixes (the machine's given, else the file's); else the
    // plan takes the table's wherever it is timed.
    let gpn = machine.given_gpus_per_node().or_else(|| {
        strategy
            .file
            .as_ref()
            .and_then(|p| crate::strategy::load_strategy(p).ok())
            .and_then(|s| s.gpus_per_node)
    });
    let on = crate::calib::MachineRef::of(&st.calib, &st.memory).nodes_of(gpn);
    let (plan, e) = plan_strategy(model, values, &st.knobs, &st.layout, on)?;
    if let Some(why) = &e.reason {
        crate::diag::note(format!(
            "warning: {} does not fit in memory: {}",
            e.knobs.describe(model.batch_value(values)),
            why.describe()
        ));
    }
    Ok(plan)
}
