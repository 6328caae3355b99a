//! What the library knows before anything is priced: [`models`], the models a name resolves to,
//! and [`explain`], an operator rule with its FLOPs, bytes and derived split table.

use crate::embedded;
use crate::error::Error;
use crate::model::ModelLoader;
use crate::rules::split::{split_table, SplitTable};
use crate::rules::{OpRule, RuleSet};
use num_bigint::BigInt;
use serde::Serialize;
use std::path::Path;

/// One model [`models`] lists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEntry {
    /// Where it comes from: `shipped`, `shipped (shadowed)` where a user's model of the same
    /// name wins, or the file a user's model is read from.
    pub source: String,
    /// The name `resolve` takes.
    pub name: String,
    /// The family it instantiates; `None` for a graph.
    pub family: Option<String>,
    /// Its parameters at its own sizes; `None` where they cannot be counted (a file that does not
    /// load, or sizes it leaves free); decimal text in JSON, `-` where `None`.
    #[serde(serialize_with = "whole_or_dash")]
    pub params: Option<BigInt>,
    /// Its description, or why its file does not load.
    pub doc: String,
}

fn whole_or_dash<S: serde::Serializer>(n: &Option<BigInt>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(
        &n.as_ref()
            .map_or_else(|| "-".to_string(), |n| n.to_string()),
    )
}

/// The models a name resolves to, in the order `resolve` looks: the user's (`./models`, then
/// `SYMSHARD_MODEL_PATH`), then the shipped ones. A user's file that does not load is listed with
/// the reason as its `doc`; the repository's own copies of shipped models are the shipped models.
pub fn models() -> Result<Vec<ModelEntry>, Error> {
    let loader = ModelLoader::embedded()?;
    let entry = |m: crate::model::Model, source: String| {
        let params = crate::model::model_cost(&m)
            .params
            .eval(&m.values)
            .ok()
            .map(|p| p.to_integer());
        ModelEntry {
            source,
            name: m.name,
            family: m.family,
            params,
            doc: m.doc,
        }
    };
    let mut rows = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for dir in crate::model::user_model_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let Some(stem) = file.file_stem().map(|s| s.to_string_lossy().to_string()) else {
                continue;
            };
            let Ok(src) = crate::diag::Source::read(&file) else {
                continue;
            };
            if embedded::MODELS
                .iter()
                .any(|(s, text)| *s == stem && *text == src.text)
                || !seen.insert(stem.clone())
            {
                continue;
            }
            rows.push(match loader.load(&src) {
                Ok(m) => entry(m, file.display().to_string()),
                Err(e) => ModelEntry {
                    source: file.display().to_string(),
                    name: stem,
                    family: None,
                    params: None,
                    doc: format!("does not load: {e}"),
                },
            });
        }
    }
    for (stem, text) in embedded::MODELS {
        let src = crate::diag::Source::new(embedded::display_path("models", stem), *text);
        let mut r = entry(loader.load(&src)?, "shipped".into());
        if seen.contains(*stem) {
            r.source = "shipped (shadowed)".into();
        }
        rows.push(r);
    }
    Ok(rows)
}

/// An operator rule as a person auditing it reads it: the rule, its FLOPs and bytes as formulas
/// in its indices, and the split table derived from its laws.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The validated rule.
    pub rule: OpRule,
    /// FLOPs of the forward and the backward pass.
    pub flops: ExplainedFlops,
    /// Bytes at the asked element size.
    pub bytes: ExplainedBytes,
    /// Every single-index and two-index split and what it costs.
    pub split_table: SplitTable,
    /// What loading the rules directory said (a rule replacing a shipped one of its name).
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// FLOPs of a rule, as formulas in its indices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainedFlops {
    /// The forward pass.
    pub forward: String,
    /// The backward pass.
    pub backward: String,
}

/// Bytes of a rule, as formulas in its indices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainedBytes {
    /// Read by the forward kernel.
    pub read: String,
    /// Written by the forward kernel.
    pub write: String,
    /// Kept for the backward pass.
    pub saved: String,
    /// Of parameters.
    pub params: String,
    /// Read by the backward pass (its gradient einsums, or its output gradient, saved tensors
    /// and parameters).
    pub backward_read: String,
    /// Written by the backward pass.
    pub backward_write: String,
    /// The backward's own kernel for vector-parameter gradients ("0" when there is none).
    pub param_grad_kernel: String,
    /// Bytes separate fp32 passes move beyond one fused kernel, forward and backward (a rule
    /// with `fp32_passes: true`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp32_passes: Option<[String; 2]>,
}

/// The rule `rule` names (a shipped rule's name, or a rule file), with the rules of `rules_dir`
/// loaded beside the shipped ones, explained at `dtype_bytes` bytes per element.
pub fn explain(
    rule: &str,
    rules_dir: Option<&Path>,
    dtype_bytes: u32,
) -> Result<Explanation, Error> {
    if !(1..=16).contains(&dtype_bytes) {
        return Err(Error::Usage(format!(
            "dtype_bytes must be from 1 to 16, not {dtype_bytes}"
        )));
    }
    let (set, notes) = rule_set(rules_dir)?;
    let rule = set.resolve(rule)?;
    let (read, write) = rule.io_bytes(dtype_bytes);
    let (backward_read, backward_write) = rule.backward_io_bytes(dtype_bytes);
    Ok(Explanation {
        flops: ExplainedFlops {
            forward: rule.forward_flops().to_string(),
            backward: rule.backward_flops().to_string(),
        },
        bytes: ExplainedBytes {
            read: read.to_string(),
            write: write.to_string(),
            saved: rule.saved_bytes(dtype_bytes).to_string(),
            params: (rule.param_elements() * crate::sym::Poly::int(dtype_bytes as i64)).to_string(),
            backward_read: backward_read.to_string(),
            backward_write: backward_write.to_string(),
            param_grad_kernel: rule.param_grad_kernel_bytes(dtype_bytes).0.to_string(),
            fp32_passes: rule.fp32_passes.then(|| {
                let (f, b) = rule.fp32_pass_bytes(dtype_bytes);
                [f.to_string(), b.to_string()]
            }),
        },
        split_table: split_table(&rule, dtype_bytes),
        rule,
        notes,
    })
}

/// The shipped rules with those of `dir` added, and what adding them said.
pub(crate) fn rule_set(dir: Option<&Path>) -> Result<(RuleSet, Vec<String>), Error> {
    let mut set = RuleSet::embedded()?;
    let notes = match dir {
        Some(d) => set.add_dir(d)?.iter().map(|r| r.to_string()).collect(),
        None => Vec::new(),
    };
    Ok((set, notes))
}

/// One shipped machine (calibration table) [`machines`] lists: the numbers that decide most of
/// what a layout costs on it, each as the table states it (exact), and its description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineEntry {
    /// The name `--calib` takes.
    pub name: String,
    /// The accelerator.
    pub device: String,
    /// Dense peak FLOP/s per device by number format (`bf16`, `fp8`, `fp4`, `fp32`, `int8`).
    #[serde(serialize_with = "crate::sym::ser_rational_map")]
    pub peak_flops: std::collections::BTreeMap<String, crate::sym::Rational>,
    /// HBM bytes per second per device.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub memory_bandwidth: crate::sym::Rational,
    /// HBM bytes per device.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub memory_capacity: crate::sym::Rational,
    /// Devices per node (the fast domain: NVLink, Infinity Fabric, the ICI slice).
    pub gpus_per_node: u64,
    /// Bytes per second per device and direction inside a node, as the datasheet rates it.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub intra_bandwidth: crate::sym::Rational,
    /// Bytes per second per device and direction across nodes, as the datasheet rates it.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub inter_bandwidth: crate::sym::Rational,
    /// How an all-reduce across nodes runs: `ring`, `tree`, or `nccl` (NCCL's choice per call).
    pub inter_algorithm: String,
    /// The table's description.
    pub doc: String,
}

/// The shipped machines, by name.
pub fn machines() -> Result<Vec<MachineEntry>, Error> {
    embedded::CALIBRATIONS
        .iter()
        .map(|(name, _)| {
            let c = crate::calib::Calibration::resolve(name)?;
            Ok(MachineEntry {
                name: c.name.clone(),
                device: c.device.name.clone(),
                peak_flops: c
                    .device
                    .peak_flops
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value.clone()))
                    .collect(),
                memory_bandwidth: c.device.memory_bandwidth.value.clone(),
                memory_capacity: c.device.memory_capacity.value.clone(),
                gpus_per_node: c.gpus_per_node(),
                intra_bandwidth: c.tiers.intra.bandwidth.value.clone(),
                inter_bandwidth: c.tiers.inter.bandwidth.value.clone(),
                inter_algorithm: c.tiers.inter.algorithm.clone(),
                doc: c.doc.clone(),
            })
        })
        .collect()
}

/// One number of a machine's table with where it comes from, as [`machine_sources`] lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourcedNumber {
    /// Where it sits in the table (`device.peak_flops.bf16`, `tiers.inter.latency`).
    pub path: String,
    /// The value as the table holds it: a number, or a curve's `(size, value)` points.
    pub value: String,
    /// Its source: a datasheet, a paper, a published measurement, or what was assumed and why.
    pub source: String,
}

/// Every number of a machine's table (a shipped name or a file, as `--calib` takes it) with its
/// source, by path.
pub fn machine_sources(
    name: &str,
) -> Result<(crate::calib::Calibration, Vec<SourcedNumber>), Error> {
    let c = crate::calib::Calibration::resolve(name)?;
    let tree = serde_json::to_value(&c)
        .map_err(|e| Error::Internal(format!("a calibration table as JSON: {e}")))?;
    let mut out = Vec::new();
    sourced_in(&tree, &mut Vec::new(), &mut out);
    Ok((c, out))
}

/// Collects every object of `v` that carries a `source`, with its path from the root: a number
/// or a curve (`value` or `points`), or a group whose plain fields share the source (a GEMM
/// tiling's tiles), whose own sourced fields are listed apart.
fn sourced_in(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<SourcedNumber>) {
    let children: Vec<(String, &serde_json::Value)> = match v {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(source)) = map.get("source") {
                let own = map.get("value").or_else(|| map.get("points"));
                let value = match own {
                    Some(x) => plain(x),
                    None => map
                        .iter()
                        .filter(|(k, x)| k.as_str() != "source" && !x.is_object())
                        .map(|(k, x)| format!("{k} {}", plain(x)))
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                out.push(SourcedNumber {
                    path: path.join("."),
                    value,
                    source: source.clone(),
                });
                if own.is_some() {
                    return;
                }
            }
            map.iter().map(|(k, x)| (k.clone(), x)).collect()
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| (i.to_string(), x))
            .collect(),
        _ => return,
    };
    for (k, child) in children {
        path.push(k);
        sourced_in(child, path, out);
        path.pop();
    }
}

/// A JSON value as plain text: exact numbers (`4/5`, `3350000000000`) as decimals, other strings
/// unquoted, arrays as `[a, b]`.
fn plain(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => match s.parse::<crate::sym::Rational>() {
            Ok(r) => crate::sym::float(&r).to_string(),
            Err(_) => s.clone(),
        },
        serde_json::Value::Array(items) => format!(
            "[{}]",
            items.iter().map(plain).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}
