//! `symshard cost`: parameters, FLOPs and activation memory of a model, exact.

use super::output::{print_json, print_table};
use super::strategy_args::{Resolved, StrategyFlags};
use super::units;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::{model_cost, op_costs, ModelCost};
use crate::parallel::Evaluation;
use crate::rules::RuleSet;
use crate::sym::{Bindings, Poly, Rational};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;

/// Arguments of `cost`.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// A model file, a shipped model's name (see `symshard models`).
    pub model: String,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// Print formulas in the model's symbols instead of numbers.
    #[arg(long)]
    pub symbolic: bool,
    /// Also list every operator's cost.
    #[arg(long)]
    pub per_op: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub strategy: StrategyFlags,
}

#[derive(Serialize)]
struct Pass {
    matmul: String,
    other: String,
}

#[derive(Serialize)]
struct Flops {
    forward: Pass,
    backward: Pass,
}

#[derive(Serialize)]
struct Memory {
    activations: String,
}

#[derive(Serialize)]
struct OpRow {
    name: String,
    rule: String,
    repeat: String,
    params: String,
    forward: String,
    backward: String,
    class: crate::rules::FlopClass,
    activations: String,
}

#[derive(Serialize)]
struct CostJson {
    model: String,
    /// Sizes at the model file's placeholders (defaults marked `assumed`) that `--set` did not
    /// give, with their values: the numbers are for a size nobody chose.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    assumed_sizes: BTreeMap<String, String>,
    /// The symbols `--set` changed, with their values: `model` alone no longer describes them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    overrides: BTreeMap<String, String>,
    /// The settings that change how its operators run (attention, loss, training metrics,
    /// dropout).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    settings: BTreeMap<String, String>,
    symbols: BTreeMap<String, String>,
    params: String,
    flops: Flops,
    memory: Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_op: Option<Vec<OpRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_device: Option<PerDevice>,
}

#[derive(Serialize)]
struct PerDevice {
    strategy: String,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    flops: crate::sym::Rational,
    comm: Vec<CommJson>,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    p2p_bytes: crate::sym::Rational,
    memory: crate::parallel::Memory,
    feasible: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<crate::parallel::Infeasible>,
    stages: Vec<crate::parallel::evaluate::Stage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_op: Option<Vec<DeviceOpRow>>,
}

#[derive(Serialize)]
struct CommJson {
    collective: crate::rules::CollectiveKind,
    axis: crate::strategy::AxisKind,
    tier: crate::strategy::Tier,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    bytes: crate::sym::Rational,
    count: u64,
    op: String,
    tensor: String,
}

#[derive(Serialize)]
struct DeviceOpRow {
    block: String,
    name: String,
    dp_split: Option<String>,
    tp_split: Option<String>,
    forward: String,
    backward: String,
    params: String,
    saved: String,
}

/// Evaluates `p` under `b` as exact text, or prints the formula when symbolic.
pub fn show(p: &Poly, b: &Bindings, symbolic: bool) -> Result<String, Error> {
    if symbolic {
        return Ok(p.to_string());
    }
    let v = p
        .eval(b)
        .map_err(|e| Error::Usage(format!("cannot evaluate: {e} (bind it with --set)")))?;
    Ok(if v.is_integer() {
        v.to_integer().to_string()
    } else {
        v.to_string()
    })
}

/// Runs `cost`.
pub fn run(args: CostArgs) -> Result<(), Error> {
    // Checked even without a strategy, which alone would read it: a flag given is never ignored
    // in silence.
    if let Some(g) = args.strategy.gpus_per_node {
        crate::strategy::check_gpus_per_node(g).map_err(super::strategy_args::machine_error)?;
    }
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let cost: ModelCost = model_cost(&model);
    let st = if args.strategy.given() {
        Some(args.strategy.resolve_for(&model, &values)?)
    } else {
        if let Some(note) = args.strategy.unused_machine_flags()? {
            eprintln!("{note}");
        }
        None
    };
    let ask = Asked {
        set: &args.symbols.set,
        symbolic: args.symbolic,
        per_op: args.per_op,
    };
    let (out, device) = document(&model, &values, &cost, &ask, st.as_ref(), &loader.rules)?;
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            print_model(&out, &model, &cost, &values, &args)?;
            if let (Some(pd), Some(d)) = (&out.per_device, &device) {
                print_device(pd, &d.evaluation, &d.machine, &d.legend);
            }
            if let Some(rows) = &out.per_op {
                print_op_rows(rows);
            }
            if !args.symbolic && !units::exact() {
                println!("{}", units::UNITS_LEGEND);
            }
            Ok(())
        }
    }
}

/// What a `cost` document is asked to show.
pub struct Asked<'a> {
    /// The `--set` bindings given (sizes not given are named as assumed).
    pub set: &'a [String],
    /// Formulas instead of numbers.
    pub symbolic: bool,
    /// Each operator's row.
    pub per_op: bool,
}

/// `cost`'s document for `model` at `values`: its totals, and with a strategy `st` the busiest
/// device's (with the table's [`Device`] beside it).
fn document(
    model: &crate::model::Model,
    values: &Bindings,
    cost: &ModelCost,
    ask: &Asked<'_>,
    st: Option<&Resolved>,
    rules: &RuleSet,
) -> Result<(CostJson, Option<Device>), Error> {
    let s = |p: &Poly| show(p, values, ask.symbolic);
    let per_op = if ask.per_op {
        Some(op_rows(model, &s)?)
    } else {
        None
    };
    let overrides: BTreeMap<String, String> = values
        .iter()
        .filter(|(k, v)| model.values.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    // Formulas alone (no strategy to evaluate) hold at every size.
    let assumed_sizes = if ask.symbolic && st.is_none() {
        BTreeMap::new()
    } else {
        assumed_sizes(model, ask.set, values)
    };
    let mut out = CostJson {
        model: model.name.clone(),
        assumed_sizes,
        overrides,
        settings: crate::timeline::setting_map(model),
        symbols: values
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        params: s(&cost.params)?,
        flops: Flops {
            forward: Pass {
                matmul: s(&cost.forward.matmul)?,
                other: s(&cost.forward.other)?,
            },
            backward: Pass {
                matmul: s(&cost.backward.matmul)?,
                other: s(&cost.backward.other)?,
            },
        },
        memory: Memory {
            activations: s(&cost.activations)?,
        },
        per_op,
        per_device: None,
    };
    let device = match st {
        Some(st) => {
            let (json, device) = per_device(st, ask.per_op, model, values, rules)?;
            out.per_device = Some(json);
            Some(device)
        }
        None => None,
    };
    Ok((out, device))
}

/// `cost`'s JSON document (as `--format json` prints it) of `model` under the strategy `st`.
pub fn json(
    model: &crate::model::Model,
    values: &Bindings,
    ask: &Asked<'_>,
    st: &Resolved,
    rules: &RuleSet,
) -> Result<serde_json::Value, Error> {
    let (out, _) = document(model, values, &model_cost(model), ask, Some(st), rules)?;
    serde_json::to_value(&out).map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))
}

/// The model's operators, each with its totals, shown by `s`.
fn op_rows(
    model: &crate::model::Model,
    s: &dyn Fn(&Poly) -> Result<String, Error>,
) -> Result<Vec<OpRow>, Error> {
    op_costs(model)
        .into_iter()
        .map(|o| {
            Ok(OpRow {
                name: o.name,
                rule: o.rule,
                repeat: s(&o.repeat)?,
                params: s(&o.params)?,
                forward: s(&o.forward.total())?,
                backward: s(&o.backward.total())?,
                class: o.class,
                activations: s(&o.activations)?,
            })
        })
        .collect()
}

/// What the table of a strategy's busiest device needs beside its JSON.
struct Device {
    evaluation: Evaluation,
    /// The calibration's name and the device memory.
    machine: (String, Rational),
    /// With `--per-op`: what the split columns mean.
    legend: String,
}

/// Evaluates the strategy `st` on the busiest device.
fn per_device(
    st: &Resolved,
    per_op: bool,
    model: &crate::model::Model,
    values: &Bindings,
    rules: &RuleSet,
) -> Result<(PerDevice, Device), Error> {
    let (analysis, e) = st.evaluate(model, values, None)?;
    let machine = (st.calib.name.clone(), st.memory.clone());
    let legend = if per_op {
        split_legend(&analysis, rules)
    } else {
        String::new()
    };
    let b = crate::parallel::evaluate::microbatch_bindings(model, values, &st.knobs);
    let ev = |p: &Poly| show(p, &b, false);
    let per_op = if per_op {
        let mut rows = Vec::new();
        for blk in &analysis.blocks {
            for o in &blk.ops {
                rows.push(DeviceOpRow {
                    block: blk.name.clone(),
                    name: o.name.clone(),
                    dp_split: o.plan.dp.clone(),
                    tp_split: o.plan.tp.as_ref().map(|(i, t)| format!("{i} ({t:?})")),
                    forward: ev(&o.forward)?,
                    backward: ev(&o.backward)?,
                    params: ev(&o.params)?,
                    saved: ev(&o.saved)?,
                });
            }
        }
        Some(rows)
    } else {
        None
    };
    let json = PerDevice {
        strategy: e.knobs.describe(model.batch_value(values)),
        flops: e.flops.clone(),
        comm: e
            .comm
            .iter()
            .map(|c| CommJson {
                collective: c.collective,
                axis: c.axis,
                tier: c.tier,
                bytes: c.bytes.clone(),
                count: c.count,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
            })
            .collect(),
        p2p_bytes: e.p2p_bytes.clone(),
        memory: e.memory.clone(),
        feasible: e.feasible,
        reason: e.reason.clone(),
        stages: e.stages.clone(),
        per_op,
    };
    Ok((
        json,
        Device {
            evaluation: e,
            machine,
            legend,
        },
    ))
}

/// `--per-op`'s table of the model's operators.
fn print_op_rows(rows: &[OpRow]) {
    println!();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.rule.clone(),
                r.repeat.clone(),
                units::text(&r.params, units::count),
                units::text(&r.forward, units::flops),
                units::text(&r.backward, units::flops),
                units::text(&r.activations, units::bytes),
            ]
        })
        .collect();
    print_table(
        "",
        "<<",
        &[
            "operator",
            "rule",
            "×",
            "params",
            "forward FLOPs",
            "backward FLOPs",
            "saved bytes",
        ],
        &rows,
    );
    println!("×: times the operator runs per forward pass (its `repeat`); saved bytes: activations kept for the backward pass");
}

/// The model's totals: parameters, FLOPs and saved activations, under a header with the model,
/// B and S.
fn print_model(
    out: &CostJson,
    model: &crate::model::Model,
    cost: &ModelCost,
    values: &Bindings,
    args: &CostArgs,
) -> Result<(), Error> {
    if let Some(line) = assumed_line(&out.assumed_sizes) {
        println!("{line}");
    }
    println!(
        "model {}{} — {}",
        model.name,
        batch_and_sequence(model, values),
        model.doc
    );
    if let Some(line) = units::settings_line(&out.settings) {
        println!("{line}");
    }
    if let Some(note) = model.roles.inference_note() {
        println!("{note}");
    }
    if !out.overrides.is_empty() {
        let set: Vec<String> = out
            .overrides
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("changed by --set {}", set.join(" "));
    }
    let syms: Vec<String> = out
        .symbols
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("symbols {}", syms.join(" "));
    println!();
    // Formulas (`--symbolic`) print as they are; numbers with units.
    let n = |s: &str| units::text(s, units::count);
    let f = |s: &str| units::text(s, units::flops);
    let b = |s: &str| units::text(s, units::bytes);
    println!("parameters                    {}", n(&out.params));
    println!(
        "forward FLOPs   matmul-like   {}",
        f(&out.flops.forward.matmul)
    );
    println!(
        "                other         {}",
        f(&out.flops.forward.other)
    );
    println!(
        "backward FLOPs  matmul-like   {}",
        f(&out.flops.backward.matmul)
    );
    println!(
        "                other         {}",
        f(&out.flops.backward.other)
    );
    if !args.symbolic {
        let total = cost.forward.total() + cost.backward.total();
        println!(
            "training step FLOPs           {}",
            f(&show(&total, values, false)?)
        );
    }
    println!(
        "activations saved (bytes)     {}",
        b(&out.memory.activations)
    );
    Ok(())
}

/// The model's assumed sizes (defaults its file marks `assumed`: placeholders for sizes its
/// source does not give) that no `--set` in `set` (`SYM=VALUE`) chose, with their values.
pub fn assumed_sizes(
    model: &crate::model::Model,
    set: &[String],
    values: &Bindings,
) -> BTreeMap<String, String> {
    let chosen: Vec<&str> = set
        .iter()
        .filter_map(|s| s.split_once('=').map(|(k, _)| k.trim()))
        .collect();
    model
        .assumed
        .iter()
        .filter(|s| !chosen.contains(&s.as_str()))
        .filter_map(|s| Some((s.clone(), values.get(s)?.to_string())))
        .collect()
}

/// The first line of a result at assumed sizes: which, and how to give them.
pub fn assumed_line(assumed: &BTreeMap<String, String>) -> Option<String> {
    if assumed.is_empty() {
        return None;
    }
    let at: Vec<String> = assumed.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    let set: Vec<String> = assumed.keys().map(|k| format!("--set {k}=…")).collect();
    let at = at.join(", ");
    let what = if assumed.len() == 1 {
        format!("an assumed size {at} (a placeholder in the model file, whose source gives none, not a size anyone chose)")
    } else {
        format!("assumed sizes {at} (placeholders in the model file, whose source gives none, not sizes anyone chose)")
    };
    Some(format!(
        "warning: at {what}; give yours with {}",
        set.join(" ")
    ))
}

/// `" (B = 512, S = 2048)"`: the global batch and sequence length of a model's values, under
/// the model's names for them (its `batch` and `sequence` roles), those it has.
pub fn batch_and_sequence(model: &crate::model::Model, values: &Bindings) -> String {
    named_values(
        [model.batch.as_deref(), model.roles.sequence.as_deref()]
            .into_iter()
            .flatten(),
        |k| values.get(k).map(|v| v.to_string()),
    )
}

/// `" (B = 512, S = 2048)"`: each of `names` that has a value, with it; empty when none has.
pub fn named_values<'a>(
    names: impl IntoIterator<Item = &'a str>,
    value: impl Fn(&str) -> Option<String>,
) -> String {
    let parts: Vec<String> = names
        .into_iter()
        .filter_map(|k| value(k).map(|v| format!("{k} = {v}")))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// Prints the per-device summary of `cost`: totals, each stage, the collectives and, where asked
/// for, every operator.
fn print_device(pd: &PerDevice, e: &Evaluation, machine: &(String, Rational), legend: &str) {
    print_device_totals(pd, e, machine);
    print_stages(pd);
    print_collectives(pd, e);
    if let Some(rows) = &pd.per_op {
        print_per_op(rows, legend);
    }
}

/// Prints where the strategy runs, then the busiest device's FLOPs, point-to-point bytes and
/// memory by kind, and whether it fits.
fn print_device_totals(pd: &PerDevice, e: &Evaluation, machine: &(String, Rational)) {
    let (calib, capacity) = machine;
    println!();
    println!(
        "per device, {} on {} devices ({} per node) of {}, {} per device",
        pd.strategy,
        e.mesh.devices,
        e.mesh.gpus_per_node,
        calib,
        units::bytes_rounded(capacity)
    );
    println!(
        "  compute FLOPs per step      {}  (busiest stage, one device, with recomputation)",
        units::flops(&pd.flops)
    );
    if pd.stages.len() > 1 {
        let all: Rational = pd.stages.iter().map(|s| &s.flops).sum();
        println!(
            "                              {}  (all {} stages, one device each)",
            units::flops(&all),
            pd.stages.len()
        );
    }
    println!(
        "  point-to-point bytes        {}",
        units::bytes(&pd.p2p_bytes)
    );
    println!(
        "  memory  weights             {}",
        units::bytes(&pd.memory.params)
    );
    println!(
        "          gradients           {}",
        units::bytes(&pd.memory.grads)
    );
    println!(
        "          optimizer state     {}",
        units::bytes(&pd.memory.optimizer)
    );
    println!(
        "          activations         {}",
        units::bytes(&pd.memory.activations)
    );
    println!(
        "          total               {}{}",
        units::bytes(&pd.memory.total),
        if pd.feasible {
            String::new()
        } else {
            format!(
                "  (does not fit: {})",
                pd.reason
                    .as_ref()
                    .map(crate::parallel::Infeasible::describe)
                    .unwrap_or_default()
            )
        }
    );
}

/// Prints each pipeline stage's blocks, FLOPs and memory.
fn print_stages(pd: &PerDevice) {
    println!("  stages");
    let stages: Vec<Vec<String>> = pd
        .stages
        .iter()
        .map(|s| {
            let items: Vec<String> = s.items.iter().map(|(b, c)| format!("{b}×{c}")).collect();
            vec![
                s.stage.to_string(),
                items.join(" "),
                units::flops(&s.flops),
                units::bytes(&s.memory.total),
            ]
        })
        .collect();
    print_table("    ", "<<", &["", "blocks", "FLOPs", "memory"], &stages);
}

/// Prints the busiest stage's collectives (none on axes of 1), with a note on context
/// parallelism's where it is used.
fn print_collectives(pd: &PerDevice, e: &Evaluation) {
    println!(
        "  collectives (busiest stage; bytes per rank per call, ring traffic; none on axes of 1)"
    );
    if e.knobs.cp > 1 {
        println!(
            "    (context parallelism: weight gradients on dp reduce over dp × cp = {} ranks; cp sends are the ring of keys and values)",
            e.knobs.replicas()
        );
    }
    let comm: Vec<Vec<String>> = pd
        .comm
        .iter()
        .filter(|c| !num_traits::Zero::is_zero(&c.bytes))
        .map(|c| {
            vec![
                c.collective.name().to_string(),
                c.axis.name().to_string(),
                c.tier.to_string(),
                units::bytes(&c.bytes),
                units::count(&Rational::from_integer(c.count.into())),
                c.op.clone(),
            ]
        })
        .collect();
    print_table(
        "    ",
        "<<<>><",
        &["collective", "axis", "tier", "bytes/call", "calls", "where"],
        &comm,
    );
}

/// Prints every operator's splits, FLOPs, parameters and saved bytes (`--per-op`), then the
/// legend of the units.
fn print_per_op(rows: &[DeviceOpRow], legend: &str) {
    println!();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.block.clone(),
                r.name.clone(),
                r.dp_split.clone().unwrap_or_else(|| "-".into()),
                r.tp_split.clone().unwrap_or_else(|| "-".into()),
                units::text(&r.forward, units::flops),
                units::text(&r.backward, units::flops),
                units::text(&r.params, units::count),
                units::text(&r.saved, units::bytes),
            ]
        })
        .collect();
    print_table(
        "  ",
        "<<<<",
        &[
            "block",
            "operator",
            "dp",
            "tp",
            "forward FLOPs",
            "backward FLOPs",
            "params",
            "saved bytes",
        ],
        &table,
    );
    println!("  {legend}");
}

/// The legend of the per-operator `dp` and `tp` columns: what each index letter shown stands
/// for, as the operators' rules document it.
fn split_legend(analysis: &crate::parallel::Analysis, rules: &RuleSet) -> String {
    let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in analysis.blocks.iter().flat_map(|b| &b.ops) {
        let letters = o.plan.dp.iter().chain(o.plan.tp.iter().map(|(i, _)| i));
        for letter in letters {
            let doc = rules
                .get(&o.rule)
                .and_then(|r| r.indices.iter().find(|i| &i.name == letter))
                .and_then(|i| i.doc.clone())
                .unwrap_or_else(|| format!("an index of `{}`", o.rule));
            let e = docs.entry(letter.clone()).or_default();
            if !e.contains(&doc) {
                e.push(doc);
            }
        }
    }
    let letters: Vec<String> = docs
        .iter()
        .map(|(l, d)| format!("{l} = {}", d.join(" | ")))
        .collect();
    format!(
        "dp, tp: the index of the operator's rule split across data- or tensor-parallel ranks (`symshard explain RULE` lists a rule's indices), with what the tensor-parallel split cuts (Batch, Seq, Feature); -: not split\n  index letters: {}",
        letters.join("; ")
    )
}
