//! A sweep's spec file: the grid's axes (models, devices, machines, precisions, batch and
//! sequence) and the search constraints every point shares, checked against the shipped models
//! and tables with errors at the file's line and column.

use crate::calib::Calibration;
use crate::diag::Source;
use crate::error::{Error, Result};
use crate::model::{Model, ModelLoader};
use crate::search::Steer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most points one sweep may have.
pub const MAX_POINTS: usize = 1_000_000;

/// A list written as one item or several (`fix: zero=1` or `fix: [zero=1, pp=2]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One item.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Default for OneOrMany {
    fn default() -> OneOrMany {
        OneOrMany::Many(Vec::new())
    }
}

impl OneOrMany {
    /// The items.
    pub fn items(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// A machine of the grid: a table (a shipped name or a file), or a what-if machine derived from
/// one (`{calib: h100-sxm, with: "nvlink.bandwidth=x2"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MachineEntry {
    /// A table as it is.
    Table(String),
    /// A table with quantities changed.
    WhatIf(WhatIfEntry),
}

/// A what-if machine in a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatIfEntry {
    /// The table it is derived from.
    pub calib: String,
    /// The changes, as `--with` takes them.
    pub with: String,
}

impl MachineEntry {
    /// The table's name as written.
    fn table(&self) -> &str {
        match self {
            MachineEntry::Table(t) => t,
            MachineEntry::WhatIf(w) => &w.calib,
        }
    }

    /// The machine: the table, changed where the entry says.
    fn resolve(&self) -> Result<Calibration> {
        match self {
            MachineEntry::Table(t) => Calibration::resolve(t),
            MachineEntry::WhatIf(w) => Calibration::resolve(&w.calib)?.with_what_if(&w.with),
        }
    }
}

/// A sweep spec as its file writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Models: shipped names or files.
    pub models: Vec<String>,
    /// Device counts.
    pub devices: Vec<u64>,
    /// Machines: tables or what-if machines.
    pub machines: Vec<MachineEntry>,
    /// Mixed precisions (`bf16`, `fp8`, `autocast`); default: bf16.
    #[serde(default)]
    pub precisions: Option<Vec<String>>,
    /// Global batch sizes (samples per step); default: each model's own.
    #[serde(default)]
    pub batch: Option<Vec<u64>>,
    /// Sequence lengths; default: each model's own.
    #[serde(default)]
    pub sequence: Option<Vec<u64>>,
    /// Knobs fixed at every point, as `rank --fix` takes them.
    #[serde(default)]
    pub fix: OneOrMany,
    /// Knobs capped at every point, as `rank --max` takes them.
    #[serde(default)]
    pub max: OneOrMany,
    /// Memory kept free on each device, as `rank --headroom` takes it (default 10%).
    #[serde(default)]
    pub headroom: Option<String>,
    /// Stack profiles, as `rank --stack` takes them: `none` (the default, profile-free),
    /// `auto` (each point's layouts on the shipped profile of the stack each assumes), or a
    /// shipped profile's name or a file (every layout on that one).
    #[serde(default)]
    pub stack: Option<String>,
    /// Dollars per GPU-hour, by machine name (a what-if machine's full name, or the name of
    /// the table it is derived from).
    #[serde(default)]
    pub price_per_gpu_hour: BTreeMap<String, f64>,
}

/// A spec checked and resolved: the models loaded, the machines built.
pub struct Loaded {
    /// The spec as written.
    pub spec: Spec,
    /// The models, in the spec's order.
    pub models: Vec<Model>,
    /// The machines, in the spec's order.
    pub machines: Vec<Calibration>,
    /// The precisions, in order.
    pub precisions: Vec<String>,
    /// Knobs fixed at every point (`--fix` items).
    pub fix: Vec<String>,
    /// Knobs capped at every point (`--max` items).
    pub max: Vec<String>,
}

/// An error at item `i` of the list under `key`: its line in a block list (`- item`), else
/// the first place its text `word` stands in the list.
fn item_error(src: &Source, key: &str, i: usize, word: &str, message: String) -> Error {
    let index = i.to_string();
    let block = src.locate(&[key, &index]) != src.locate(&[key]);
    if block {
        src.error_at(&[key, &index], message)
    } else {
        src.error_at(&[key, word], message)
    }
}

/// Refuses an empty or repeated list, at its key.
fn check_list<T: PartialEq + std::fmt::Debug>(src: &Source, key: &str, v: &[T]) -> Result<()> {
    if v.is_empty() {
        return Err(src.error_at(&[key], format!("`{key}` needs at least one item")));
    }
    for (i, x) in v.iter().enumerate() {
        if v[..i].contains(x) {
            return Err(src.error_at(&[key], format!("`{key}` lists {x:?} twice")));
        }
    }
    Ok(())
}

/// Refuses a zero among sizes, at the item.
fn check_sizes(src: &Source, key: &str, v: &[u64]) -> Result<()> {
    check_list(src, key, v)?;
    if v.contains(&0) {
        return Err(src.error_at(&[key, "0"], format!("`{key}` must be positive, not 0")));
    }
    Ok(())
}

impl Loaded {
    /// Reads and checks a spec file.
    pub fn read(path: &std::path::Path) -> Result<Loaded> {
        Loaded::load(&Source::read(path)?)
    }

    /// Checks a spec: every list non-empty without repeats, the models and machines resolve,
    /// the constraints parse, prices name machines of the grid.
    pub fn load(src: &Source) -> Result<Loaded> {
        let spec: Spec = src.parse().map_err(untagged_message)?;
        check_list(src, "models", &spec.models)?;
        check_sizes(src, "devices", &spec.devices)?;
        check_list(src, "machines", &spec.machines)?;
        let precisions = spec
            .precisions
            .clone()
            .unwrap_or_else(|| vec!["bf16".into()]);
        check_list(src, "precisions", &precisions)?;
        for (key, v) in [("batch", &spec.batch), ("sequence", &spec.sequence)] {
            if let Some(v) = v {
                check_sizes(src, key, v)?;
            }
        }
        // As `rank` loads them with its default flags.
        let loader = ModelLoader::embedded()?
            .with_attention(None)
            .with_loss(crate::model::LossMode::default())
            .with_train_metrics(0)
            .with_dropout(None);
        let mut models = Vec::new();
        for (i, m) in spec.models.iter().enumerate() {
            let model = loader
                .resolve(m)
                .map_err(|e| item_error(src, "models", i, m, format!("model `{m}`: {e}")))?;
            models.push(model);
        }
        let mut machines = Vec::new();
        for (i, m) in spec.machines.iter().enumerate() {
            let c = m
                .resolve()
                .map_err(|e| item_error(src, "machines", i, m.table(), e.to_string()))?;
            let c = c
                .with_stack(spec.stack.as_deref())
                .map_err(|e| src.error_at(&["stack"], e.to_string()))?;
            machines.push(c);
        }
        let (fix, max) = constraints(src, &spec, &precisions)?;
        check_prices(src, &spec, &machines)?;
        let points = [
            models.len(),
            machines.len(),
            spec.devices.len(),
            precisions.len(),
            spec.batch.as_ref().map_or(1, Vec::len),
            spec.sequence.as_ref().map_or(1, Vec::len),
        ]
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .unwrap_or(usize::MAX);
        if points > MAX_POINTS {
            return Err(src.error_at(
                &[],
                format!("the grid has {points} points, more than the {MAX_POINTS} a sweep runs"),
            ));
        }
        Ok(Loaded {
            spec,
            models,
            machines,
            precisions,
            fix,
            max,
        })
    }
}

/// A clearer message for a machine that is neither a name nor a what-if mapping, and for
/// constraints that are neither a knob list nor a list of them.
fn untagged_message(e: Error) -> Error {
    let Error::Input { location, message } = e else {
        return e;
    };
    let message = if message.contains("untagged enum MachineEntry") {
        "a machine is a table's name (h100-sxm) or a what-if machine \
         ({calib: h100-sxm, with: \"nvlink.bandwidth=x2\"}) with only those keys"
            .to_string()
    } else if message.contains("untagged enum OneOrMany") {
        "`fix` and `max` are a knob list (zero=1,pp=2) or a list of them".to_string()
    } else {
        message
    };
    Error::Input { location, message }
}

/// The `fix` and `max` items, each checked as `rank` checks its flags; precisions checked as
/// `--fix precision=…` (and not fixed under `fix`, where `precisions` says it).
fn constraints(
    src: &Source,
    spec: &Spec,
    precisions: &[String],
) -> Result<(Vec<String>, Vec<String>)> {
    let (fix, max) = (spec.fix.items(), spec.max.items());
    let mut steer = Steer::default();
    for f in &fix {
        steer
            .fix(f, "fix")
            .map_err(|e| src.error_at(&["fix", f], e.to_string()))?;
        if f.split(',').any(|k| k.trim().starts_with("precision")) {
            return Err(src.error_at(
                &["fix", f],
                "give the precisions under `precisions`, not `fix`",
            ));
        }
    }
    for m in &max {
        steer
            .max(m, "max")
            .map_err(|e| src.error_at(&["max", m], e.to_string()))?;
    }
    for p in precisions {
        Steer::default()
            .fix(&format!("precision={p}"), "precisions")
            .map_err(|e| src.error_at(&["precisions", p], e.to_string()))?;
    }
    Ok((fix, max))
}

/// Each price names a machine of the grid (its full name or its table's) and is not negative.
fn check_prices(src: &Source, spec: &Spec, machines: &[Calibration]) -> Result<()> {
    for (name, price) in &spec.price_per_gpu_hour {
        let known = machines
            .iter()
            .any(|c| c.name == *name || base_name(c) == name);
        if !known {
            let names: Vec<&str> = machines.iter().map(|c| c.name.as_str()).collect();
            return Err(src.error_at(
                &["price_per_gpu_hour", name],
                format!(
                    "no machine `{name}` in the grid (its machines: {})",
                    names.join(", ")
                ),
            ));
        }
        if !price.is_finite() || *price < 0.0 {
            return Err(src.error_at(
                &["price_per_gpu_hour", name],
                format!("the price of `{name}` must be a number of dollars ≥ 0, not {price}"),
            ));
        }
    }
    Ok(())
}

/// The table a machine is derived from (its own name when it is not a what-if machine).
pub fn base_name(c: &Calibration) -> &str {
    c.what_if
        .as_ref()
        .map_or(c.name.as_str(), |w| w.base.as_str())
}
