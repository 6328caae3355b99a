//! [`compare`]: two strategies of one model side by side, component by component, with the
//! differences exact (and as formulas in the model's symbols where they are sums of the
//! model's polynomials).

use super::{Machine, Model, Strategy};
use crate::calib::MachineRef;
use crate::error::Error;
use crate::parallel::{evaluate_strategy, Evaluation, Layout};
use crate::search::versus::{self, Component};
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use serde::Serialize;

/// One strategy to compare, with how it was given (named in the result and in errors).
#[derive(Debug, Clone)]
pub struct CompareSide {
    /// The strategy.
    pub strategy: Strategy,
    /// How it was given (a knob string, a file's name).
    pub given: String,
}

impl CompareSide {
    /// A strategy file (a path that exists, or one ending in `.yaml`/`.yml`) or a knob string
    /// (`tp=8,pp=4,mbs=1,sp`, as [`Strategy::from_knobs`] reads it); `what` names it in errors.
    pub fn parse(text: &str, what: &str) -> Result<CompareSide, Error> {
        let path = std::path::Path::new(text);
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        let strategy = if yaml || (path.is_file() && !text.contains('=')) {
            Strategy::from_file(path)
        } else {
            Strategy::from_knobs(text, what)?
        };
        Ok(CompareSide {
            strategy,
            given: text.to_string(),
        })
    }
}

/// What [`compare`] is asked.
#[derive(Debug, Clone)]
pub struct CompareRequest {
    /// The model, its sizes and settings.
    pub model: Model,
    /// Strategy A.
    pub a: CompareSide,
    /// Strategy B.
    pub b: CompareSide,
    /// The machine; `None`: the reference machine.
    pub machine: Option<Machine>,
    /// Also simulate each strategy's step (the command line does with `--calib` or `--stack`).
    pub seconds: bool,
    /// Price every kernel at the matmul plateau: the relative cost without its kernel term.
    pub plateau: bool,
}

/// Simulated seconds of one step.
#[derive(Debug, Clone, Serialize)]
pub struct StepSeconds {
    /// StepSeconds per training step.
    pub iteration_seconds: f64,
    /// Busy seconds per stream of the busiest device, by stream.
    pub busy: crate::timeline::Busy,
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ComparedStrategy {
    /// As given on the command line.
    pub given: String,
    /// The strategy as `rank` prints it.
    pub strategy: String,
    /// Devices it uses.
    pub devices: u64,
    /// Whether it fits in memory.
    pub fits: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::parallel::Infeasible>,
    /// With a calibration table: the timeline's seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<StepSeconds>,
}

/// A part of the relative cost and how much it differs.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// The part.
    pub part: String,
    /// FLOP-equivalents.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub amount: Rational,
}

/// A comparison, as `compare` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Model.
    pub model: String,
    /// Its symbols' values.
    pub symbols: std::collections::BTreeMap<String, String>,
    /// Calibration table of the balance ratios.
    pub calibration: String,
    /// The stack profile added to the seconds (`--stack`); absent: profile-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_profile: Option<String>,
    /// Strategy A.
    pub a: ComparedStrategy,
    /// Strategy B.
    pub b: ComparedStrategy,
    /// Components: A, B and B − A, exact.
    pub components: Vec<Component>,
    /// `A`, `B` or `equal`, by relative cost.
    pub cheaper: String,
    /// The parts of the relative cost on which the cheaper strategy spends less, largest first.
    pub wins_on: Vec<Part>,
    /// The parts on which it spends more.
    pub loses_on: Vec<Part>,
}

/// One strategy resolved and evaluated.
pub(crate) struct Evaluated {
    /// What was given.
    pub given: String,
    /// Its evaluation.
    pub evaluation: Evaluation,
    /// Simulated seconds, when asked.
    pub seconds: Option<StepSeconds>,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// Memory a strategy may fill on one device (the capacity less the headroom), bytes.
    pub memory: Rational,
}

/// Evaluates knobs (as `rank` ranks them: sequence parallelism as the knob says, the
/// tensor-parallel overrides of the row's layout, none for the annotated one) on `machine`.
pub(crate) fn evaluate_knobs(
    model: &crate::model::Model,
    values: &Bindings,
    knobs: &Knobs,
    machine: MachineRef,
    timed: bool,
    tp_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<Evaluated, Error> {
    let layout = Layout {
        sequence_parallel: knobs.sequence_parallel,
        tp_overrides: tp_overrides.clone(),
    };
    let (_, evaluation) = evaluate_strategy(model, values, knobs, &layout, machine)?;
    let seconds = if timed {
        Some(seconds_of(model, values, knobs, &layout, machine)?)
    } else {
        None
    };
    Ok(Evaluated {
        given: knobs.describe(model.batch_value(values)),
        evaluation,
        seconds,
        gpus_per_node: machine.gpus_per_node(),
        memory: machine.memory.clone(),
    })
}

fn seconds_of(
    model: &crate::model::Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    machine: MachineRef,
) -> Result<StepSeconds, Error> {
    let (plan, _) = crate::timeline::plan_strategy(model, values, knobs, layout, machine)?;
    let s = crate::timeline::time_summary(&plan, machine.calib)?;
    let busiest = s
        .devices
        .iter()
        .max_by(|x, y| x.busy.total().total_cmp(&y.busy.total()))
        .map(|d| d.busy)
        .ok_or_else(|| Error::Internal("the timeline has no devices".into()))?;
    Ok(StepSeconds {
        iteration_seconds: s.iteration_seconds,
        busy: busiest,
    })
}

/// One side resolved on `machine` and evaluated (at the plateau with `plateau`), with its
/// seconds when `timed`; errors name it (`strategy A `tp=7`: …`).
fn side(
    model: &crate::model::Model,
    values: &Bindings,
    s: &CompareSide,
    what: &str,
    machine: &Machine,
    req: &CompareRequest,
) -> Result<Evaluated, Error> {
    let st = s.strategy.resolve_for(machine, model, values)?;
    let named = |e: Error| match e {
        Error::Usage(m) => Error::Usage(format!("{what} `{}`: {m}", s.given)),
        Error::Strategy(e) => Error::Usage(format!("{what} `{}`: {e}", s.given)),
        other => other,
    };
    let priced = if req.plateau {
        st.calib.at_plateau()
    } else {
        st.calib.clone()
    };
    let (_, evaluation) = st.evaluate(model, values, Some(&priced)).map_err(named)?;
    let seconds = if req.seconds {
        let s = seconds_of(model, values, &st.knobs, &st.layout, st.machine());
        Some(s.map_err(named)?)
    } else {
        None
    };
    Ok(Evaluated {
        given: s.given.clone(),
        evaluation,
        seconds,
        gpus_per_node: st.gpus_per_node,
        memory: st.memory.clone(),
    })
}

/// What the command line prints beside a [`Comparison`].
pub(crate) struct CompareDetail {
    /// The model loaded.
    pub model: crate::model::Model,
    /// Its symbols' values.
    pub values: Bindings,
    /// Strategy A evaluated.
    pub a: Evaluated,
    /// Strategy B evaluated.
    pub b: Evaluated,
}

/// Two strategies of one model side by side: each component of their cost (exact, with B − A
/// as a formula where it has one), whether each fits, and with `seconds` their simulated steps.
/// Warnings and notes go to stderr.
pub fn compare(req: &CompareRequest) -> Result<Comparison, Error> {
    Ok(compare_in_full(req)?.0)
}

/// [`compare`] with what the command line's table needs.
pub(crate) fn compare_in_full(req: &CompareRequest) -> Result<(Comparison, CompareDetail), Error> {
    compare_loaded(req.model.load()?, req)
}

/// [`compare_in_full`] of a model loaded (`req.model` is not read).
pub(crate) fn compare_loaded(
    loaded: super::Loaded,
    req: &CompareRequest,
) -> Result<(Comparison, CompareDetail), Error> {
    let (model, values) = (loaded.model, loaded.values);
    let machine = match &req.machine {
        Some(m) => m.clone(),
        None => Machine::reference()?,
    };
    let a = side(&model, &values, &req.a, "strategy A", &machine, req)?;
    let b = side(&model, &values, &req.b, "strategy B", &machine, req)?;
    let calib = if req.plateau {
        machine.calibration().at_plateau()
    } else {
        machine.calibration().clone()
    };
    let c = comparison(&model, &values, &calib, &a, &b);
    Ok((
        c,
        CompareDetail {
            model,
            values,
            a,
            b,
        },
    ))
}

/// The comparison of two evaluated strategies.
pub(crate) fn comparison(
    model: &crate::model::Model,
    values: &Bindings,
    calib: &crate::calib::Calibration,
    a: &Evaluated,
    b: &Evaluated,
) -> Comparison {
    let calibration = calib.name.as_str();
    // With the table the strategies were priced on, so that the relative cost's parts get
    // formulas too.
    let components = versus::compare(values, &a.evaluation, &b.evaluation);
    let (_, gains, losses) = versus::verdict(&components);
    let total = |e: &Evaluated| e.evaluation.relative.total.clone();
    let cheaper = match total(a).cmp(&total(b)) {
        std::cmp::Ordering::Less => "A",
        std::cmp::Ordering::Greater => "B",
        std::cmp::Ordering::Equal => "equal",
    };
    let part = |v: Vec<(String, Rational)>| {
        v.into_iter()
            .map(|(part, amount)| Part { part, amount })
            .collect()
    };
    let side = |e: &Evaluated| ComparedStrategy {
        given: e.given.clone(),
        strategy: e.evaluation.knobs.describe(model.batch_value(values)),
        devices: e.evaluation.knobs.devices(),
        fits: e.evaluation.feasible,
        reason: e.evaluation.reason.clone(),
        seconds: e.seconds.clone(),
    };
    Comparison {
        model: model.name.clone(),
        symbols: values
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        calibration: calibration.to_string(),
        stack_profile: calib.stack_text(),
        a: side(a),
        b: side(b),
        components,
        cheaper: cheaper.into(),
        wins_on: part(gains),
        loses_on: part(losses),
    }
}
