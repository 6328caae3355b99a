//! Stack profiles: the time a software stack adds that no microbenchmark publishes (a
//! framework's host work per step, its scheduler's gaps between micro-batches, the launch work
//! its Python and dispatcher add to every kernel). A profile is a declared empirical layer: at
//! most [`MAX_PARAMETERS`] parameters, each a number of seconds with a physical meaning, fitted
//! by `symshard calibrate --from-runs` on a fit set that the file names row by row, so that
//! `symshard validate` can report the rows it was fitted on apart from the rows that test it.
//!
//! By default (`--stack none`) the seconds are profile-free. `--stack auto` prices each
//! strategy's seconds on the shipped profile of the software stack it is assumed to run on
//! ([`Stack::of`]); `--stack NAME` every strategy on one profile.

use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::strategy::{Knobs, Precision, Schedule};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A software stack, named as the validation files' `stack:` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Stack {
    /// Megatron-LM or Megatron-Core (NeMo): tensor, pipeline, context or expert parallelism.
    #[serde(rename = "megatron")]
    Megatron,
    /// PyTorch's DistributedDataParallel: data parallelism alone, gradients not sharded.
    #[serde(rename = "pytorch-ddp")]
    PytorchDdp,
    /// PyTorch's FSDP (FSDP1, FSDP2, torchtitan): gradients and parameters sharded.
    #[serde(rename = "pytorch-fsdp")]
    PytorchFsdp,
}

impl Stack {
    /// The stack a row's knobs are most commonly run on: sharded gradients (ZeRO 2 or 3) as
    /// PyTorch's FSDP, else any model parallelism as Megatron, else plain data parallelism as
    /// DDP. An assumption, printed with every row, not a fact about the row.
    pub fn of(k: &Knobs) -> Stack {
        if k.zero >= 2 {
            Stack::PytorchFsdp
        } else if k.tp > 1 || k.pp > 1 || k.cp > 1 || k.ep > 1 {
            Stack::Megatron
        } else {
            Stack::PytorchDdp
        }
    }

    /// The label validation files use.
    pub fn label(self) -> &'static str {
        match self {
            Stack::Megatron => "megatron",
            Stack::PytorchDdp => "pytorch-ddp",
            Stack::PytorchFsdp => "pytorch-fsdp",
        }
    }

    /// Mean |error| of the shipped validation rows run on this stack, in tenths of a percent,
    /// as `symshard validate` prints it in its "by stack" table (the rows independent of their
    /// machine's calibration numbers) (tests/stack_ties.rs recomputes
    /// it from `validation/`, so it cannot go stale). Those rows are in sample: the error on
    /// runs the model has not seen is larger, so this is the least a lead must exceed.
    pub fn mean_abs_error_permille(self) -> u32 {
        match self {
            Stack::Megatron => 42,
            Stack::PytorchDdp => 88,
            Stack::PytorchFsdp => 139,
        }
    }

    /// [`Stack::mean_abs_error_permille`] as a fraction.
    pub fn mean_abs_error(self) -> f64 {
        self.error_as_priced(false)
    }

    /// The same with each row priced on its stack's shipped profile, as `symshard validate
    /// --stack auto` measures it: over the rows of files independent of their machine's table
    /// that the profile was not fitted on (its test rows; every row of a stack without a
    /// profile), in tenths of a percent. What `rank` compares a lead with when it prices each
    /// row on its stack's profile (`--stack auto`); tests/stack_ties.rs recomputes it.
    pub fn profiled_mean_abs_error_permille(self) -> u32 {
        match self {
            Stack::Megatron => 43,
            Stack::PytorchDdp => 52,
            Stack::PytorchFsdp => 54,
        }
    }

    /// The mean |error| a row's lead is compared with: [`Stack::profiled_mean_abs_error_permille`]
    /// where rows are priced on their stacks' profiles (`per_row`), else
    /// [`Stack::mean_abs_error_permille`]; as a fraction.
    pub fn error_as_priced(self, per_row: bool) -> f64 {
        let permille = if per_row {
            self.profiled_mean_abs_error_permille()
        } else {
            self.mean_abs_error_permille()
        };
        f64::from(permille) / 1000.0
    }

    /// The stack a validation file's `stack:` label names.
    pub fn from_label(label: &str) -> Option<Stack> {
        Stack::ALL.into_iter().find(|s| s.label() == label)
    }

    /// Every stack.
    pub const ALL: [Stack; 3] = [Stack::Megatron, Stack::PytorchDdp, Stack::PytorchFsdp];
}

/// The most parameters a profile may have.
pub const MAX_PARAMETERS: usize = 4;

/// A parameter of a profile: each is seconds added by the timeline at a named place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Param {
    /// Seconds once per training step, on every device after its optimizer step: the
    /// framework's host work outside the model's kernels (optimizer and scheduler launch,
    /// data loader, logging, the step's synchronisation).
    StepOverhead,
    /// Seconds before every forward and every backward of a micro-batch on each pipeline stage:
    /// the schedule's host gaps (Python between passes, waiting on its own launches).
    MicrobatchOverhead,
    /// Seconds added to every kernel on top of the calibration table's `kernel_overhead`:
    /// the stack's dispatch and launch work per kernel (an unfused kernel pays it once more).
    KernelOverhead,
}

impl Param {
    /// Every parameter, in file order.
    pub const ALL: [Param; 3] = [
        Param::StepOverhead,
        Param::MicrobatchOverhead,
        Param::KernelOverhead,
    ];

    /// Its name in files.
    pub fn name(self) -> &'static str {
        match self {
            Param::StepOverhead => "step_overhead",
            Param::MicrobatchOverhead => "microbatch_overhead",
            Param::KernelOverhead => "kernel_overhead",
        }
    }

    /// The parameter a file names.
    pub fn from_name(name: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.name() == name)
    }

    /// What it means, for reports and the files `calibrate` writes.
    pub fn meaning(self) -> &'static str {
        match self {
            Param::StepOverhead => "seconds per training step of host work outside the kernels",
            Param::MicrobatchOverhead => {
                "seconds before each forward and each backward of a micro-batch on a stage"
            }
            Param::KernelOverhead => "seconds per kernel beyond the calibration table's",
        }
    }

    /// The largest plausible value, in seconds: a larger one is a unit mistake.
    pub fn ceiling(self) -> f64 {
        match self {
            Param::StepOverhead => 60.0,
            Param::MicrobatchOverhead => 1.0,
            Param::KernelOverhead => 1e-3,
        }
    }

    /// A step for finite differences of the timeline, small against a typical value.
    pub fn probe(self) -> f64 {
        match self {
            Param::StepOverhead => 1.0,
            Param::MicrobatchOverhead => 1e-3,
            Param::KernelOverhead => 1e-5,
        }
    }
}

/// One file's rows of a fit set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRows {
    /// A validation file: a shipped stem (`narayanan2021-table1`) or a path (relative to the
    /// file that names it).
    pub file: String,
    /// The rows by name; every row that measures step seconds when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<String>>,
}

/// One parameter as a file states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamEntry {
    /// Seconds.
    pub value: f64,
    /// Its standard error from the fit, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<f64>,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub means: Option<String>,
}

/// How well the profile fits, as `calibrate --from-runs` measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitSummary {
    /// Rows fitted.
    pub rows: usize,
    /// Sources (files) they come from.
    pub sources: usize,
    /// Mean |predicted ÷ published − 1| over the fit rows, with the fitted profile.
    pub in_sample_error: f64,
    /// The same, each source's rows predicted by the profile fitted without them (each row
    /// left out in turn when the fit set has one source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave_one_out_error: Option<f64>,
    /// The sources (or rows) whose leaving out left fewer rows than parameters: the refit
    /// without them is underdetermined, so their part of the leave-one-out error measures the
    /// fit set's size more than the profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub underdetermined: Vec<String>,
}

/// A stack profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// Its name.
    pub name: String,
    /// What stack, which versions, and where its fit set comes from.
    pub doc: String,
    /// The `stack:` label of the validation files it applies to (`megatron`, `pytorch-fsdp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The rows it was fitted on: `validate --stack` reports them apart from the test rows.
    #[serde(default)]
    pub fit_set: Vec<FitRows>,
    /// The parameters, by name; absent ones are zero.
    pub parameters: BTreeMap<String, ParamEntry>,
    /// How well it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitSummary>,
    /// The layouts the stack runs; absent: every layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports: Option<SupportsFile>,
}

/// The knobs a `supports:` section may cap: the parallel degrees and the ZeRO stage.
pub const SUPPORT_KNOBS: [&str; 6] = ["dp", "tp", "pp", "cp", "ep", "zero"];

/// A profile's `supports:` section as a file states it: the layouts the software stack runs,
/// each limit with its public source, so that `rank --stack NAME` ranks only those.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupportsFile {
    /// Where the limits come from (a repository's history, release notes, documentation).
    pub source: String,
    /// The largest value of each knob it runs ([`SUPPORT_KNOBS`]; absent: any).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max: BTreeMap<String, u64>,
    /// The pipeline schedules it runs where pp > 1 (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedules: Option<Vec<String>>,
    /// The precisions it trains in (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precisions: Option<Vec<String>>,
}

/// The layouts a software stack runs, checked: `rank --stack NAME` ranks only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supports {
    /// The profile that states it.
    pub profile: String,
    /// Where the limits come from.
    pub source: String,
    /// The largest value of each knob, in [`SUPPORT_KNOBS`] order.
    pub max: Vec<(&'static str, u64)>,
    /// The pipeline schedules it runs where pp > 1 (`None`: any).
    pub schedules: Option<Vec<Schedule>>,
    /// The precisions it trains in (`None`: any).
    pub precisions: Option<Vec<Precision>>,
}

impl SupportsFile {
    /// Checks the section of profile `profile` read from `src` (at `supports:`): known knobs,
    /// schedules and precisions, none listed empty, and a ZeRO stage of at most 3.
    pub fn check(&self, profile: &str, src: &Source) -> Result<Supports> {
        let at = |path: &[&str], m: String| {
            let mut p = vec!["supports"];
            p.extend_from_slice(path);
            src.error_at(&p, m)
        };
        if self.source.trim().is_empty() {
            return Err(at(
                &["source"],
                "`source` must say where the limits come from".into(),
            ));
        }
        let mut max = Vec::new();
        for (name, v) in &self.max {
            let Some(knob) = SUPPORT_KNOBS.iter().find(|k| **k == name.as_str()) else {
                return Err(at(
                    &["max", name],
                    format!(
                        "unknown knob `{name}` (a stack's limits name {})",
                        SUPPORT_KNOBS.join(", ")
                    ),
                ));
            };
            let zero = *knob == "zero";
            if (zero && *v > 3) || (!zero && *v == 0) {
                let range = if zero { "0 to 3" } else { "at least 1" };
                return Err(at(
                    &["max", name],
                    format!("`{name}` = {v}: expected {range}"),
                ));
            }
            max.push((*knob, *v));
        }
        max.sort_by_key(|(k, _)| SUPPORT_KNOBS.iter().position(|n| n == k));
        let schedules = self
            .schedules
            .as_ref()
            .map(|names| {
                listed(names, "schedules", &at, |n| {
                    Schedule::from_name(n).ok_or_else(|| {
                        "gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe, dualpipev"
                            .to_string()
                    })
                })
            })
            .transpose()?;
        let precisions = self
            .precisions
            .as_ref()
            .map(|names| {
                listed(names, "precisions", &at, |n| {
                    Precision::from_name(n).ok_or_else(|| Precision::NAMES.to_string())
                })
            })
            .transpose()?;
        Ok(Supports {
            profile: profile.to_string(),
            source: self.source.clone(),
            max,
            schedules,
            precisions,
        })
    }
}

/// The values of a `supports:` list, each parsed by `parse` (which gives the known names when
/// it fails); an empty list is refused.
fn listed<T>(
    names: &[String],
    field: &str,
    at: &dyn Fn(&[&str], String) -> Error,
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    if names.is_empty() {
        return Err(at(
            &[field],
            format!("`{field}` lists nothing: leave it out to allow any"),
        ));
    }
    names
        .iter()
        .map(|n| {
            parse(n)
                .map_err(|known| at(&[field, n], format!("unknown value `{n}` (known: {known})")))
        })
        .collect()
}

impl Supports {
    /// What in knobs `k` the stack does not run (`zero = 3 (above 1)`, `the gpipe schedule`),
    /// the first in the section's order; `None` where it runs them.
    pub fn refuses(&self, k: &Knobs) -> Option<String> {
        if let Some((name, m)) = self.max.iter().find(|(n, m)| knob_value(k, n) > *m) {
            return Some(format!("{name} = {} (above {m})", knob_value(k, name)));
        }
        if k.pp > 1
            && self
                .schedules
                .as_ref()
                .is_some_and(|s| !s.contains(&k.schedule))
        {
            return Some(format!("the {} schedule", k.schedule));
        }
        if self
            .precisions
            .as_ref()
            .is_some_and(|p| !p.contains(&k.precision))
        {
            return Some(format!("precision {}", k.precision));
        }
        None
    }

    /// What it allows, as a header prints it: `zero ≤ 1, cp ≤ 1; schedules 1f1b,
    /// interleaved-1f1b; precision bf16`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.max.is_empty() {
            let caps: Vec<String> = self.max.iter().map(|(n, m)| format!("{n} ≤ {m}")).collect();
            parts.push(caps.join(", "));
        }
        if let Some(s) = &self.schedules {
            let names: Vec<String> = s.iter().map(|s| s.to_string()).collect();
            parts.push(format!("schedules {}", names.join(", ")));
        }
        if let Some(p) = &self.precisions {
            let names: Vec<String> = p.iter().map(|p| p.to_string()).collect();
            parts.push(format!("precision {}", names.join(", ")));
        }
        if parts.is_empty() {
            "every layout".to_string()
        } else {
            parts.join("; ")
        }
    }
}

/// The value of a [`SUPPORT_KNOBS`] knob in `k`.
pub fn knob_value(k: &Knobs, name: &str) -> u64 {
    match name {
        "dp" => k.dp,
        "tp" => k.tp,
        "pp" => k.pp,
        "cp" => k.cp,
        "ep" => k.ep,
        _ => u64::from(k.zero),
    }
}

/// A loaded, checked profile.
#[derive(Debug, Clone, PartialEq)]
pub struct StackProfile {
    /// Its name.
    pub name: String,
    /// The validation label it applies to.
    pub label: Option<String>,
    /// The rows it was fitted on (file stems, row names; `None`: every row of the file).
    pub fit_set: Vec<FitRows>,
    /// Seconds per parameter; zero for those the file leaves out.
    pub values: BTreeMap<Param, f64>,
    /// The layouts the stack runs (`None`: every layout).
    pub supports: Option<Supports>,
    /// How well it fits, as `calibrate --from-runs` recorded it (`None`: not recorded).
    pub fit: Option<FitSummary>,
}

impl StackProfile {
    /// A profile of the given values, nothing declared about its fit.
    pub fn of(name: &str, values: BTreeMap<Param, f64>) -> StackProfile {
        StackProfile {
            name: name.to_string(),
            label: None,
            fit_set: Vec::new(),
            values,
            supports: None,
            fit: None,
        }
    }

    /// The value of a parameter (zero when the profile leaves it out).
    pub fn get(&self, p: Param) -> f64 {
        self.values.get(&p).copied().unwrap_or(0.0)
    }

    /// Loads and checks a profile: at most [`MAX_PARAMETERS`] parameters, each known, finite,
    /// not negative and below its ceiling.
    pub fn load(src: &Source) -> Result<StackProfile> {
        let file: ProfileFile = src.parse()?;
        if file.parameters.len() > MAX_PARAMETERS {
            return Err(src.error_at(
                &["parameters"],
                format!(
                    "a profile has at most {MAX_PARAMETERS} parameters, this one has {}",
                    file.parameters.len()
                ),
            ));
        }
        if let Some(l) = file.label.as_deref().filter(|l| !super::is_label(l)) {
            return Err(src.error_at(
                &["label"],
                format!("`{l}`: a label is a lower-case letter, then lower-case letters, digits and hyphens"),
            ));
        }
        let mut values = BTreeMap::new();
        for (name, entry) in &file.parameters {
            let at = |m: String| src.error_at(&["parameters", name], m);
            let p = Param::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Param::ALL.iter().map(|p| p.name()).collect();
                at(format!(
                    "unknown parameter `{name}` (known: {})",
                    known.join(", ")
                ))
            })?;
            let v = entry.value;
            if !v.is_finite() || v < 0.0 {
                return Err(at(format!(
                    "`{name}` is seconds and must not be negative, not {v}"
                )));
            }
            if v > p.ceiling() {
                return Err(at(format!(
                    "`{name}` = {v} s is above {} s: a unit mistake?",
                    p.ceiling()
                )));
            }
            values.insert(p, v);
        }
        let supports = file
            .supports
            .as_ref()
            .map(|s| s.check(&file.name, src))
            .transpose()?;
        Ok(StackProfile {
            name: file.name,
            label: file.label,
            fit_set: file.fit_set,
            values,
            supports,
            fit: file.fit,
        })
    }

    /// The profile `--stack` names: a file, or a shipped name (`stacks/`).
    pub fn resolve(arg: &str) -> Result<StackProfile> {
        let path = Path::new(arg);
        if arg.ends_with(".yaml") || arg.ends_with(".yml") || path.is_file() {
            return StackProfile::load(&Source::read(path)?);
        }
        match embedded::STACKS.iter().find(|(s, _)| *s == arg) {
            Some((s, text)) => {
                StackProfile::load(&Source::new(embedded::display_path("stacks", s), *text))
            }
            None => {
                let names: Vec<&str> = embedded::STACKS.iter().map(|(s, _)| *s).collect();
                Err(Error::Usage(format!(
                    "unknown stack profile `{arg}` (shipped: {})",
                    names.join(", ")
                )))
            }
        }
    }

    /// Whether row `row` of the validation file `stem` is in the declared fit set.
    pub fn fitted_on(&self, stem: &str, row: &str) -> bool {
        self.fit_set.iter().any(|f| {
            Path::new(&f.file)
                .file_stem()
                .is_some_and(|s| s.to_string_lossy() == stem)
                && f.rows
                    .as_ref()
                    .is_none_or(|rows| rows.iter().any(|r| r == row))
        })
    }

    /// One line for outputs: its name and values.
    pub fn describe(&self) -> String {
        let values: Vec<String> = Param::ALL
            .iter()
            .filter(|p| self.get(**p) > 0.0)
            .map(|p| format!("{} {}", p.name(), seconds_text(self.get(*p))))
            .collect();
        if values.is_empty() {
            format!("{} (every parameter zero)", self.name)
        } else {
            format!("{} ({})", self.name, values.join(", "))
        }
    }
}

/// The profiles of `--stack auto`: each strategy's seconds are priced on the
/// shipped profile whose `label` is the stack the strategy is assumed to run on
/// ([`Stack::of`]); a stack no shipped profile is labelled for is priced profile-free.
#[derive(Debug, Clone, PartialEq)]
pub struct PerRow {
    profiles: BTreeMap<Stack, StackProfile>,
}

impl PerRow {
    /// The shipped profiles, by the stack their `label` names (refused if two name one stack).
    pub fn shipped() -> Result<PerRow> {
        let mut profiles: BTreeMap<Stack, StackProfile> = BTreeMap::new();
        for (name, _) in embedded::STACKS {
            let p = StackProfile::resolve(name)?;
            let Some(stack) = p.label.as_deref().and_then(Stack::from_label) else {
                continue;
            };
            if let Some(other) = profiles.get(&stack) {
                return Err(Error::Internal(format!(
                    "shipped stack profiles `{}` and `{}` are both labelled `{}`",
                    other.name,
                    p.name,
                    stack.label()
                )));
            }
            profiles.insert(stack, p);
        }
        Ok(PerRow { profiles })
    }

    /// The profile a strategy run on `stack` is priced on (none: profile-free).
    pub fn profile(&self, stack: Stack) -> Option<&StackProfile> {
        self.profiles.get(&stack)
    }

    /// Every profile, in the order of [`Stack::ALL`].
    pub fn profiles(&self) -> impl Iterator<Item = &StackProfile> {
        self.profiles.values()
    }

    /// What a header prints: each stack's profile, or that it is priced profile-free.
    pub fn describe(&self) -> String {
        let each: Vec<String> = Stack::ALL
            .iter()
            .map(|s| match self.profile(*s) {
                Some(p) => format!("{} rows on {}", s.label(), p.describe()),
                None => format!("{} rows profile-free", s.label()),
            })
            .collect();
        format!("per row (--stack auto): {}", each.join("; "))
    }
}

/// Seconds in the unit that reads best (`0.12 s`, `35 ms`, `4.1 µs`).
pub fn seconds_text(s: f64) -> String {
    if s == 0.0 {
        "0 s".to_string()
    } else if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} µs", s * 1e6)
    }
}
