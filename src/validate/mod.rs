//! Validation against published measurements: each file of `validation/` names a source (a paper
//! table), the machine it ran on, the settings it states or that had to be chosen, and one row
//! per measurement (model, symbol values, strategy, what was measured, the published value).
//! [`run_file`] predicts every row with the shipped calibration table and reports the errors.
//! Nothing here feeds back into a calibration table: the tables cite datasheets and
//! microbenchmarks, and these files only judge them.

pub mod fit;
pub mod independence;
pub mod places;

use crate::calib::stack::StackProfile;
use crate::calib::Calibration;
use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::model::{symbol_value, AttentionMode, LossMode, ModelLoader, MAX_TRAIN_METRICS};
use crate::parallel::Layout;
use crate::strategy::StrategyFile;
use crate::timeline::{plan_strategy, time_plan, time_summary, Pass, TimingPlan};
use num_traits::ToPrimitive;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// Seconds per training step.
    #[default]
    IterationSeconds,
    /// Milliseconds of one transformer layer's forward pass (one micro-batch).
    LayerForwardMs,
    /// Milliseconds of one transformer layer's backward pass, recomputation included.
    LayerBackwardMs,
}

impl Measure {
    /// Its unit.
    pub fn unit(self) -> &'static str {
        match self {
            Measure::IterationSeconds => "s",
            _ => "ms",
        }
    }
}

/// One published measurement.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Run {
    name: String,
    model: String,
    #[serde(default)]
    set: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    attention: Option<String>,
    #[serde(default)]
    loss: Option<String>,
    #[serde(default)]
    train_metrics: Option<u32>,
    #[serde(default)]
    dropout: Option<bool>,
    /// What selective recomputation recomputes (Megatron-Core's `--recompute-modules`).
    #[serde(default)]
    recompute_modules: Option<Vec<String>>,
    strategy: StrategyFile,
    #[serde(default)]
    measure: Measure,
    published: f64,
    #[serde(default)]
    bound: Option<f64>,
    /// Settings no source states: each item is another plausible value of them, written as
    /// the row's own fields (`strategy` and `set` merged key by key into the row's); the row is
    /// predicted at its own settings and at each item, and judged on the interval.
    #[serde(default)]
    band: Vec<serde_yaml::Value>,
}

/// A validation file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidationFile {
    source: String,
    machine: String,
    /// The software stack the measurements ran (`megatron`, `pytorch-fsdp`, …): a label that
    /// [`by_stack`] groups the errors by.
    #[serde(default)]
    stack: Option<String>,
    settings: String,
    bound: f64,
    /// Whether the measurements are independent of the machine's calibration numbers: `false`
    /// where the same publication supplied one of them ([`independence`]).
    #[serde(default = "independent_by_default")]
    independent: bool,
    /// With `independent: false`: which numbers of the table share the source, and how.
    #[serde(default)]
    shares: Option<String>,
    runs: Vec<Run>,
}

fn independent_by_default() -> bool {
    true
}

/// Whether a stack profile was fitted on a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowSet {
    /// In the profile's declared fit set: in sample.
    Fit,
    /// Not in it: a test of the profile.
    Test,
}

impl RowSet {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            RowSet::Fit => "fit",
            RowSet::Test => "test",
        }
    }
}

/// The stem of a file name (`validation/x.yaml` → `x`), as fit sets name files.
fn name_of(name: &str) -> &str {
    std::path::Path::new(name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(name)
}

/// One row's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RowOutcome {
    /// The row's name.
    pub name: String,
    /// What was measured.
    pub measure: Measure,
    /// Predicted value.
    pub predicted: f64,
    /// Published value.
    pub published: f64,
    /// predicted ÷ published − 1; for a row with a band, how far the published value lies
    /// outside the band's interval (predicted ÷ published − 1 at the nearer end; 0 inside).
    pub error: f64,
    /// The interval of the predictions over the row's band (its own settings and each
    /// plausible alternative), where the row has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<(f64, f64)>,
    /// The largest |error| accepted.
    pub bound: f64,
    /// With a stack profile: whether the profile was fitted on this row or it tests it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<RowSet>,
    /// Whether the device memory fits the strategy (on the file's machine).
    pub fits: bool,
    /// For a row with a band: how many of its settings (its own and each alternative) fit the
    /// device memory, and how many there are. A run that trained fits at one of them at least.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band_fits: Option<(usize, usize)>,
    /// The model's batch and sequence symbols with their values in this row (`B = 8`,
    /// `S = 2048`), for the table's header or column.
    #[serde(skip)]
    pub batch_and_sequence: Vec<String>,
    /// What the row's step does and on how many devices, but for the batch: the model, its
    /// symbol values other than the batch, the device count and the measure. Rows with the same
    /// work differ only in how it is laid out and batched, so their measurements per sample
    /// rank those layouts ([`sweeps`]).
    #[serde(skip)]
    pub work: String,
    /// The batch (samples per step, or per micro-batch for a layer's pass).
    #[serde(skip)]
    pub batch: f64,
    /// The precision the row was timed in (its own settings'): rows of the same work and batch
    /// in bf16 and in an FP8 or FP4 recipe make a [`PrecisionPair`].
    #[serde(skip)]
    pub precision: crate::strategy::Precision,
}

/// One file's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FileOutcome {
    /// Its name (file stem).
    pub name: String,
    /// The publication.
    pub source: String,
    /// The calibration table used.
    pub machine: String,
    /// The software stack the measurements ran, where the file names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// The stack profile added to the predictions (`--stack`); absent: profile-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_profile: Option<String>,
    /// The settings, stated and chosen.
    pub settings: String,
    /// Whether the rows are independent of the calibration numbers they judge; rows that are
    /// not are left out of the headline figures ([`by_stack`], [`by_device`]).
    pub independent: bool,
    /// What a file that is not independent shares with its machine's table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares: Option<String>,
    /// The accelerator (the first word of the table's device name: `A100`, `H100`), which
    /// [`by_device`] groups the errors by.
    pub device: String,
    /// The rows.
    pub rows: Vec<RowOutcome>,
    /// Mean |error|.
    pub mean_abs_error: f64,
    /// Largest |error|.
    pub max_abs_error: f64,
    /// How the predictions rank the layouts of each sweep of the file ([`sweeps`]).
    pub sweeps: Vec<SweepOutcome>,
    /// Where the table borrows the bf16 matmul curve for a low-precision recipe a row runs
    /// ([`Calibration::borrowed_gemm_curve`]), once each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub borrowed_curves: Vec<String>,
}

impl FileOutcome {
    /// Rows whose |error| exceeds their bound.
    pub fn beyond_bound(&self) -> impl Iterator<Item = &RowOutcome> {
        self.rows.iter().filter(|r| r.error.abs() > r.bound)
    }
}

/// The shipped validation files: (stem, source).
pub fn shipped() -> Vec<(String, Source)> {
    embedded::VALIDATIONS
        .iter()
        .map(|(stem, text)| {
            (
                stem.to_string(),
                Source::new(embedded::display_path("validation", stem), *text),
            )
        })
        .collect()
}

fn yaml_number(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Predicts every row of a validation file.
pub fn run_file(name: &str, src: &Source) -> Result<FileOutcome> {
    run_file_with(name, src, None)
}

/// The `stack:` label a validation file names, if any (after checking the file parses).
pub fn file_stack(src: &Source) -> Result<Option<String>> {
    Ok(src.parse::<ValidationFile>()?.stack)
}

/// Predicts every row of a validation file, with a stack profile added to its machine's
/// seconds where one is given (the rows are then marked fit or test by its declared fit set).
pub fn run_file_with(
    name: &str,
    src: &Source,
    stack: Option<&StackProfile>,
) -> Result<FileOutcome> {
    let file: ValidationFile = src.parse()?;
    if let Some(stack) = file.stack.as_deref().filter(|s| !crate::calib::is_label(s)) {
        return Err(src.error_at(
            &["stack"],
            format!("`{stack}`: a stack is a label: a lower-case letter, then lower-case letters, digits and hyphens (megatron, pytorch-fsdp)"),
        ));
    }
    let mut calib = Calibration::resolve(&file.machine)
        .map_err(|e| src.error_at(&["machine"], e.to_string()))?;
    calib.stack = stack.cloned();
    check_independence(src, &file, &calib)?;
    let mut rows = Vec::new();
    let mut loader = ModelLoader::embedded()?;
    let raw: serde_yaml::Value = src.parse()?;
    let stem = name_of(name).to_owned();
    let mut precisions = Vec::new();
    for (i, mut run) in file.runs.into_iter().enumerate() {
        let idx = i.to_string();
        let at = |field: &str, msg: String| src.error_at(&["runs", &idx, field], msg);
        if !(run.published.is_finite() && run.published > 0.0) {
            return Err(at("published", "must be a positive number".into()));
        }
        let band = std::mem::take(&mut run.band);
        let (name, measure, published, bound) =
            (run.name.clone(), run.measure, run.published, run.bound);
        let own = predict(run, &mut loader, &calib, src, &idx)?;
        precisions.push(own.precision);
        let (lo, hi, fitting) = {
            let mut band_run = |j: usize, alt: &serde_yaml::Value| {
                let other = band_item(&raw, i, alt).map_err(|e| {
                    src.error_at(&["runs", &idx, "band"], format!("band item {}: {e}", j + 1))
                })?;
                predict(other, &mut loader, &calib, src, &idx)
            };
            band_range(&own, &band, &mut band_run)?
        };
        let error = if band.is_empty() {
            own.predicted / published - 1.0
        } else if published < lo {
            lo / published - 1.0
        } else if published > hi {
            hi / published - 1.0
        } else {
            0.0
        };
        rows.push(RowOutcome {
            precision: own.precision,
            batch_and_sequence: own.batch_and_sequence,
            work: own.work,
            batch: own.batch,
            set: stack.map(|s| {
                if s.fitted_on(&stem, &name) {
                    RowSet::Fit
                } else {
                    RowSet::Test
                }
            }),
            name,
            measure,
            predicted: own.predicted,
            published,
            error,
            band: (!band.is_empty()).then_some((lo, hi)),
            bound: bound.unwrap_or(file.bound),
            fits: own.fits,
            band_fits: (!band.is_empty()).then_some((fitting, band.len() + 1)),
        });
    }
    let n = rows.len().max(1) as f64;
    let mean = rows.iter().map(|r| r.error.abs()).sum::<f64>() / n;
    let max = rows.iter().map(|r| r.error.abs()).fold(0.0, f64::max);
    let sweeps = sweeps(&rows);
    Ok(FileOutcome {
        name: name.to_string(),
        source: file.source,
        machine: calib.name.clone(),
        stack: file.stack,
        stack_profile: stack.map(|s| s.describe()),
        settings: file.settings,
        independent: file.independent,
        shares: file.shares,
        device: calib
            .device
            .name
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string(),
        rows,
        mean_abs_error: mean,
        max_abs_error: max,
        sweeps,
        borrowed_curves: calib.borrowed_gemm_curves(precisions),
    })
}

/// Refuses a file whose declaration of independence does not hold: one that shares a
/// publication with a number of its machine's table ([`independence::shared_with`]) but says it
/// is independent, and `independent: false` without saying what is shared.
fn check_independence(src: &Source, file: &ValidationFile, calib: &Calibration) -> Result<()> {
    let shared = independence::shared_with(&file.source, calib);
    match (file.independent, file.shares.as_deref().map(str::trim)) {
        (true, None) if !shared.is_empty() => {
            let list: Vec<String> = shared
                .iter()
                .map(|s| format!("{} (cited by `{}`)", s.identifier, s.number))
                .collect();
            Err(src.error_at(
                &["source"],
                format!(
                    "the measurements' source shares a publication with numbers of `{}`: {}; its rows do not test those numbers independently: say `independent: false` and what they share (`shares:`)",
                    calib.name,
                    list.join(", ")
                ),
            ))
        }
        (true, Some(_)) => Err(src.error_at(
            &["shares"],
            "`shares:` belongs to a file that says `independent: false`",
        )),
        (false, None) | (false, Some("")) => Err(src.error_at(
            &["independent"],
            "`independent: false` needs `shares:`: which numbers of the machine's table come from the same publication as the rows, and how",
        )),
        _ => Ok(()),
    }
}

/// One row predicted at its settings.
struct Predicted {
    predicted: f64,
    fits: bool,
    /// The precision it was timed in.
    precision: crate::strategy::Precision,
    batch_and_sequence: Vec<String>,
    work: String,
    batch: f64,
}

/// The least and the most of a row's predictions, its own and each band item's
/// (`predict_item`), and how many of them fit.
fn band_range(
    own: &Predicted,
    band: &[serde_yaml::Value],
    predict_item: &mut dyn FnMut(usize, &serde_yaml::Value) -> Result<Predicted>,
) -> Result<(f64, f64, usize)> {
    let (mut lo, mut hi, mut fitting) = (own.predicted, own.predicted, usize::from(own.fits));
    for (j, alt) in band.iter().enumerate() {
        let p = predict_item(j, alt)?;
        lo = lo.min(p.predicted);
        hi = hi.max(p.predicted);
        fitting += usize::from(p.fits);
    }
    Ok((lo, hi, fitting))
}

/// A row as it runs: its model with the row's settings, the sizes it sets, its strategy and its
/// knobs at the model's global batch.
pub(crate) struct RowSetup {
    pub(crate) model: crate::model::Model,
    pub(crate) values: crate::sym::Bindings,
    pub(crate) strategy: crate::strategy::StrategyArgs,
    pub(crate) knobs: crate::strategy::Knobs,
    pub(crate) batch: crate::sym::Rational,
}

/// Sets `run` (row `idx` of `src`) up: its model, sizes, strategy and knobs.
fn row_setup(run: Run, loader: &mut ModelLoader, src: &Source, idx: &str) -> Result<RowSetup> {
    let at = |field: &str, msg: String| src.error_at(&["runs", idx, field], msg);
    configure_loader(&run, loader, &at)?;
    let model = loader
        .resolve(&run.model)
        .map_err(|e| at("model", e.to_string()))?;
    let mut values = model.values.clone();
    for (sym, v) in &run.set {
        if !model.symbols.contains_key(sym) {
            return Err(at(
                "set",
                format!("model `{}` has no symbol `{sym}`", model.name),
            ));
        }
        let text = yaml_number(v).ok_or_else(|| at("set", format!("`{sym}` must be a number")))?;
        let value = symbol_value(&crate::model::spec::SymbolValue {
            value: text,
            source: None,
            assumed: false,
        })
        .map_err(|m| at("set", format!("`{sym}`: {m}")))?;
        values.insert(sym.clone(), value);
    }
    let strategy = run.strategy.resolve(src, &["runs", idx, "strategy"])?;
    let batch = model
        .batch_value(&values)
        .cloned()
        .unwrap_or_else(|| crate::sym::Rational::from_integer(1.into()));
    let knobs = strategy
        .knobs_for_batch(&batch)
        .map_err(|e| at("strategy", e.to_string()))?;
    Ok(RowSetup {
        model,
        values,
        strategy,
        knobs,
        batch,
    })
}

/// Predicts `run` (row `idx` of `src`) on `calib`.
fn predict(
    run: Run,
    loader: &mut ModelLoader,
    calib: &Calibration,
    src: &Source,
    idx: &str,
) -> Result<Predicted> {
    let at = |field: &str, msg: String| src.error_at(&["runs", idx, field], msg);
    let measure_of = run.measure;
    let RowSetup {
        model,
        values,
        strategy,
        knobs,
        batch,
    } = row_setup(run, loader, src, idx)?;
    let layout = Layout {
        sequence_parallel: knobs.sequence_parallel,
        tp_overrides: strategy.splits,
    };
    let on = crate::calib::MachineRef::whole(calib).nodes_of(strategy.gpus_per_node);
    let (plan, evaluation) = plan_strategy(&model, &values, &knobs, &layout, on)
        .map_err(|e| at("strategy", e.to_string()))?;
    let predicted = measure(&plan, calib, measure_of).map_err(|e| at("measure", e.to_string()))?;
    let batch_and_sequence = [model.batch.as_deref(), model.roles.sequence.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(|k| values.get(k).map(|v| format!("{k} = {v}")))
        .collect();
    let work = format!(
        "{} {} on {} devices, {:?}",
        model.name,
        values
            .iter()
            .filter(|(k, _)| model.batch.as_deref() != Some(k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        knobs.devices(),
        measure_of
    );
    Ok(Predicted {
        predicted,
        fits: evaluation.feasible,
        precision: knobs.precision,
        batch_and_sequence,
        work,
        batch: batch.to_f64().unwrap_or(1.0),
    })
}

/// Sets the loader's attention, loss, training metrics, dropout and recompute modules as the row
/// states them.
fn configure_loader(
    run: &Run,
    loader: &mut ModelLoader,
    at: &dyn Fn(&str, String) -> Error,
) -> Result<()> {
    loader.attention = match &run.attention {
        Some(a) => Some(AttentionMode::from_name(a).ok_or_else(|| {
            at(
                "attention",
                format!("`{a}`: expected eager, flash or flash-causal"),
            )
        })?),
        None => None,
    };
    loader.loss = match &run.loss {
        Some(l) => <LossMode as clap::ValueEnum>::from_str(l, false)
            .map_err(|_| at("loss", format!("`{l}`: expected fp32 or fused")))?,
        None => LossMode::default(),
    };
    loader.train_metrics = match run.train_metrics {
        Some(n) if n > MAX_TRAIN_METRICS => {
            return Err(at(
                "train_metrics",
                format!("{n}: at most {MAX_TRAIN_METRICS} evaluations of the loss per micro-batch"),
            ))
        }
        n => n.unwrap_or(0),
    };
    loader.dropout = run.dropout;
    loader.recompute_modules = match &run.recompute_modules {
        Some(names) => Some(
            names
                .iter()
                .map(|n| {
                    crate::model::RecomputeModule::parse(n).map_err(|m| at("recompute_modules", m))
                })
                .collect::<Result<_>>()?,
        ),
        None => None,
    };
    Ok(())
}

/// Row `i` of the file `raw` with a band item `alt` merged in: its fields replace the row's,
/// `strategy` and `set` key by key; the item itself has no band.
fn band_item(
    raw: &serde_yaml::Value,
    i: usize,
    alt: &serde_yaml::Value,
) -> std::result::Result<Run, String> {
    use serde_yaml::Value;
    let mut row = raw
        .get("runs")
        .and_then(|r| r.get(i))
        .cloned()
        .ok_or("no such row")?;
    let (Value::Mapping(row_map), Value::Mapping(alt_map)) = (&mut row, alt) else {
        return Err("a band item is a mapping of the row's fields".into());
    };
    row_map.remove("band");
    for (k, v) in alt_map {
        let nested = matches!(k.as_str(), Some("strategy" | "set"));
        match (row_map.get_mut(k), v) {
            (Some(Value::Mapping(inner)), Value::Mapping(over)) if nested => {
                for (kk, vv) in over {
                    inner.insert(kk.clone(), vv.clone());
                }
            }
            _ => {
                row_map.insert(k.clone(), v.clone());
            }
        }
    }
    serde_yaml::from_value(row).map_err(|e| e.to_string())
}

/// The errors of the independent rows of one group of sources: one software stack, one
/// accelerator, or all of them.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    /// The group's name: a stack's label (`unstated` for sources that name none), a device, or
    /// `all`.
    pub group: String,
    /// Sources.
    pub sources: usize,
    /// Rows.
    pub rows: usize,
    /// Mean |error|.
    pub mean_abs_error: f64,
    /// Mean signed error: below zero, the predictions run fast on the whole.
    pub mean_error: f64,
    /// The median of the signed errors (the middle row, or the mean of the two middle rows).
    pub median_error: f64,
    /// The most negative error (the fastest prediction against its measurement).
    pub min_error: f64,
    /// The most positive error.
    pub max_error: f64,
}

/// Groups the rows of the independent files of `outcomes` by `key`, in order of first
/// appearance (files that are not independent are left out: [`FileOutcome::independent`]; so
/// are the rows a stack profile was fitted on, [`RowSet::Fit`]).
fn group_errors(
    outcomes: &[FileOutcome],
    key: impl Fn(&FileOutcome) -> String,
) -> Vec<GroupSummary> {
    // (group, sources, the rows' errors), in order of first appearance.
    let mut groups: Vec<(String, usize, Vec<f64>)> = Vec::new();
    for o in outcomes.iter().filter(|o| o.independent) {
        // A stack profile's fit rows are in sample: its test rows are what is judged.
        let errors: Vec<f64> = o
            .rows
            .iter()
            .filter(|r| r.set != Some(RowSet::Fit))
            .map(|r| r.error)
            .collect();
        if errors.is_empty() {
            continue;
        }
        let group = key(o);
        let at = match groups.iter().position(|(g, _, _)| *g == group) {
            Some(i) => i,
            None => {
                groups.push((group, 0, Vec::new()));
                groups.len() - 1
            }
        };
        groups[at].1 += 1;
        groups[at].2.extend(errors);
    }
    groups
        .into_iter()
        .filter(|(_, _, errors)| !errors.is_empty())
        .map(|(group, sources, mut errors)| {
            errors.sort_by(f64::total_cmp);
            let n = errors.len();
            let median = if n % 2 == 1 {
                errors[n / 2]
            } else {
                (errors[n / 2 - 1] + errors[n / 2]) / 2.0
            };
            GroupSummary {
                group,
                sources,
                rows: n,
                mean_abs_error: errors.iter().map(|e| e.abs()).sum::<f64>() / n as f64,
                mean_error: errors.iter().sum::<f64>() / n as f64,
                median_error: median,
                min_error: errors[0],
                max_error: errors[n - 1],
            }
        })
        .collect()
}

/// The independent rows' errors by the stack their file names.
pub fn by_stack(outcomes: &[FileOutcome]) -> Vec<GroupSummary> {
    group_errors(outcomes, |o| {
        o.stack.clone().unwrap_or_else(|| "unstated".into())
    })
}

/// The independent rows' errors by the accelerator they ran on.
pub fn by_device(outcomes: &[FileOutcome]) -> Vec<GroupSummary> {
    group_errors(outcomes, |o| o.device.clone())
}

/// The independent rows' errors, all together: the headline.
pub fn headline(outcomes: &[FileOutcome]) -> Option<GroupSummary> {
    group_errors(outcomes, |_| "all".into()).pop()
}

/// The value a row measures, predicted from a plan.
fn measure(plan: &TimingPlan, calib: &Calibration, m: Measure) -> Result<f64> {
    match m {
        Measure::IterationSeconds => Ok(time_summary(plan, calib)?.iteration_seconds),
        Measure::LayerForwardMs | Measure::LayerBackwardMs => {
            let pass = if m == Measure::LayerForwardMs {
                Pass::Forward
            } else {
                Pass::Backward
            };
            let item = plan
                .items
                .iter()
                .position(|&b| plan.blocks[b].layer)
                .ok_or_else(|| Error::Usage("the model has no repeated layer to time".into()))?;
            let tl = time_plan(plan, calib)?;
            // Wall time from the layer's first event of the pass to its last, as a timer around
            // the layer measures it (overlapped collectives count only where they extend it).
            let (mut lo, mut hi) = (f64::MAX, f64::MIN);
            for e in tl
                .sim
                .events
                .iter()
                .filter(|e| e.item == Some(item) && e.pass == pass && e.microbatch == Some(0))
            {
                lo = lo.min(e.start);
                hi = hi.max(e.end());
            }
            let seconds = if hi > lo { hi - lo } else { 0.0 };
            Ok(seconds * 1e3)
        }
    }
}

/// Rows of one file with the same work ([`RowOutcome::work`]): at least [`MIN_SWEEP`] layouts
/// or micro-batch sizes of one model, sequence and device count, each measured. What `rank` is
/// for is their order, so the predictions are judged on it too: by the time per sample (the
/// value over the row's batch), which orders rows of one batch as their times do.
pub const MIN_SWEEP: usize = 3;

/// How the predictions order one sweep's layouts against the measurements.
#[derive(Debug, Clone, Serialize)]
pub struct SweepOutcome {
    /// The sweep's first row and its size (`"1.7B 32 GPUs and 3 more"`).
    pub name: String,
    /// Its rows.
    pub rows: usize,
    /// Kendall's τ-b between the predicted and the published values (1: the same order; −1:
    /// reversed; ties in either counted as τ-b counts them).
    pub tau: f64,
    /// The row measured fastest.
    pub measured_best: String,
    /// Its place in the predicted order (1 = predicted fastest).
    pub predicted_place: usize,
}

/// The sweeps among `rows`, in order of their first row.
pub fn sweeps(rows: &[RowOutcome]) -> Vec<SweepOutcome> {
    let mut groups: Vec<(&str, Vec<&RowOutcome>)> = Vec::new();
    for r in rows {
        match groups.iter_mut().find(|(w, _)| *w == r.work) {
            Some((_, g)) => g.push(r),
            None => groups.push((&r.work, vec![r])),
        }
    }
    groups
        .into_iter()
        .filter(|(_, g)| g.len() >= MIN_SWEEP)
        .map(|(_, g)| {
            let predicted: Vec<f64> = g.iter().map(|r| r.predicted / r.batch).collect();
            let published: Vec<f64> = g.iter().map(|r| r.published / r.batch).collect();
            let best = (0..g.len())
                .min_by(|&a, &b| published[a].total_cmp(&published[b]))
                .unwrap_or(0);
            let place = 1 + predicted.iter().filter(|&&p| p < predicted[best]).count();
            SweepOutcome {
                name: format!("{} and {} more", g[0].name, g.len() - 1),
                rows: g.len(),
                tau: kendall_tau_b(&predicted, &published),
                measured_best: g[best].name.clone(),
                predicted_place: place,
            }
        })
        .collect()
}

/// One run measured in bf16 and in a low-precision recipe (FP8 or FP4): the step time in that
/// precision over the bf16 one, as measured and as predicted. It tests the precision model
/// directly: what the recipe changes (GEMM rates, casts, FP8 weights and their gathers),
/// with everything else about the run the same.
#[derive(Debug, Clone, Serialize)]
pub struct PrecisionPair {
    /// The bf16 row, `FILE / ROW`.
    pub bf16: String,
    /// The other row, `FILE / ROW`.
    pub other: String,
    /// The other row's precision.
    pub precision: String,
    /// Its published value over the bf16 row's.
    pub measured: f64,
    /// Its predicted value over the bf16 row's.
    pub predicted: f64,
}

impl PrecisionPair {
    /// Predicted less measured ratio, in points (hundredths).
    pub fn difference_points(&self) -> f64 {
        100.0 * (self.predicted - self.measured)
    }
}

/// The precision pairs of `outcomes`: rows on the same machine with the same work and batch
/// ([`RowOutcome::work`]), one in bf16 and one in an FP8 or FP4 recipe, across files (a
/// publication's bf16 and FP8 tables are two files). A group with other than one bf16 row
/// makes no pair.
pub fn precision_pairs(outcomes: &[FileOutcome]) -> Vec<PrecisionPair> {
    use crate::strategy::Precision;
    type Group<'a> = Vec<(&'a FileOutcome, &'a RowOutcome)>;
    let mut groups: BTreeMap<(String, String, u64), Group<'_>> = BTreeMap::new();
    for o in outcomes {
        for r in &o.rows {
            let key = (o.machine.clone(), r.work.clone(), r.batch.to_bits());
            groups.entry(key).or_default().push((o, r));
        }
    }
    let mut pairs = Vec::new();
    for rows in groups.values() {
        let bf16: Vec<_> = rows
            .iter()
            .filter(|(_, r)| r.precision == Precision::Bf16)
            .collect();
        let [(bo, br)] = bf16.as_slice() else {
            continue;
        };
        let low = rows
            .iter()
            .filter(|(_, r)| !matches!(r.precision, Precision::Bf16 | Precision::Autocast));
        for (o, r) in low {
            pairs.push(PrecisionPair {
                bf16: format!("{} / {}", bo.name, br.name),
                other: format!("{} / {}", o.name, r.name),
                precision: r.precision.to_string(),
                measured: r.published / br.published,
                predicted: r.predicted / br.predicted,
            });
        }
    }
    pairs
}

/// Kendall's τ-b of two equally long samples: (concordant − discordant) pairs over the square
/// root of the product of the pairs untied in each; 0 where either sample is all ties.
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> f64 {
    let (mut concordant, mut discordant, mut tied_x, mut tied_y, mut pairs) =
        (0i64, 0i64, 0i64, 0i64, 0i64);
    for i in 0..x.len() {
        for j in i + 1..x.len() {
            pairs += 1;
            let dx = x[i].total_cmp(&x[j]);
            let dy = y[i].total_cmp(&y[j]);
            match (dx, dy) {
                (std::cmp::Ordering::Equal, std::cmp::Ordering::Equal) => {
                    tied_x += 1;
                    tied_y += 1;
                }
                (std::cmp::Ordering::Equal, _) => tied_x += 1,
                (_, std::cmp::Ordering::Equal) => tied_y += 1,
                _ if dx == dy => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let denominator = (((pairs - tied_x) * (pairs - tied_y)) as f64).sqrt();
    if denominator == 0.0 {
        0.0
    } else {
        (concordant - discordant) as f64 / denominator
    }
}
