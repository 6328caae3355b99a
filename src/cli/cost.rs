//! `symshard cost`: parameters, FLOPs and activation memory of a model, exact.

use super::output::print_json;
use super::strategy_args::StrategyFlags;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::{model_cost, op_costs, ModelCost};
use crate::parallel::{evaluate_strategy, Evaluation};
use crate::sym::{Bindings, Poly};
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
    /// The symbols `--set` changed, with their values: `model` alone no longer describes them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    overrides: BTreeMap<String, String>,
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
    reason: Option<String>,
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
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let cost: ModelCost = model_cost(&model);
    let s = |p: &Poly| show(p, &values, args.symbolic);
    let per_op = if args.per_op {
        let mut rows = Vec::new();
        for o in op_costs(&model) {
            rows.push(OpRow {
                name: o.name,
                rule: o.rule,
                repeat: s(&o.repeat)?,
                params: s(&o.params)?,
                forward: s(&o.forward.total())?,
                backward: s(&o.backward.total())?,
                class: o.class,
                activations: s(&o.activations)?,
            });
        }
        Some(rows)
    } else {
        None
    };
    let overrides: BTreeMap<String, String> = values
        .iter()
        .filter(|(k, v)| model.values.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    let out = CostJson {
        model: model.name.clone(),
        overrides,
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
    let mut out = out;
    let mut eval: Option<Evaluation> = None;
    if args.strategy.given() {
        let st = args.strategy.resolve_for(&model, &values)?;
        let (analysis, e) = evaluate_strategy(
            &model,
            &values,
            &st.knobs,
            &st.layout,
            &st.calib,
            st.gpus_per_node,
            &st.memory,
        )?;
        let b = crate::parallel::evaluate::microbatch_bindings(&values, &st.knobs);
        let ev = |p: &Poly| show(p, &b, false);
        let per_op = if args.per_op {
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
        out.per_device = Some(PerDevice {
            strategy: e.knobs.describe(values.get("B")),
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
        });
        eval = Some(e);
    }
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            println!("model {} — {}", model.name, model.doc);
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
            println!("parameters                    {}", out.params);
            println!("forward FLOPs   matmul-like   {}", out.flops.forward.matmul);
            println!("                other         {}", out.flops.forward.other);
            println!(
                "backward FLOPs  matmul-like   {}",
                out.flops.backward.matmul
            );
            println!("                other         {}", out.flops.backward.other);
            if !args.symbolic {
                let total = cost.forward.total() + cost.backward.total();
                println!("training step FLOPs           {}", s(&total)?);
            }
            println!("activations saved (bytes)     {}", out.memory.activations);
            if let (Some(pd), Some(e)) = (&out.per_device, &eval) {
                print_device(pd, e);
            }
            if let Some(rows) = &out.per_op {
                println!();
                println!(
                    "{:<16} {:<15} {:>6} {:>14} {:>22} {:>22} {:>18}",
                    "operator",
                    "rule",
                    "×",
                    "params",
                    "forward FLOPs",
                    "backward FLOPs",
                    "saved bytes"
                );
                for r in rows {
                    println!(
                        "{:<16} {:<15} {:>6} {:>14} {:>22} {:>22} {:>18}",
                        r.name,
                        r.rule,
                        r.repeat,
                        int_text(&r.params),
                        int_text(&r.forward),
                        int_text(&r.backward),
                        int_text(&r.activations)
                    );
                }
            }
            Ok(())
        }
    }
}

/// An exact integer as itself; any other amount rounded to two decimals and marked `≈` (a
/// per-rank share of a ring collective, an average over stages). JSON keeps the exact fraction.
fn int(r: &crate::sym::Rational) -> String {
    if r.is_integer() {
        return r.to_integer().to_string();
    }
    let hundredths = (r * crate::sym::Rational::from_integer(100.into()))
        .round()
        .to_integer();
    let sign = if hundredths < 0.into() { "-" } else { "" };
    let h = num_traits::Signed::abs(&hundredths);
    let cents: num_bigint::BigInt = &h % 100;
    format!("≈{sign}{}.{cents:02}", &h / 100)
}

/// A number printed by [`show`] (an integer or an exact fraction), shown as [`int`] does.
fn int_text(s: &str) -> String {
    match s.parse::<crate::sym::Rational>() {
        Ok(r) => int(&r),
        Err(_) => s.to_string(),
    }
}

fn print_device(pd: &PerDevice, e: &Evaluation) {
    println!();
    println!(
        "per device, {} on {} devices ({} per node)",
        pd.strategy, e.mesh.devices, e.mesh.gpus_per_node
    );
    println!(
        "  compute FLOPs per step      {}  (busiest stage, one device, with recomputation)",
        int(&pd.flops)
    );
    if pd.stages.len() > 1 {
        let all: crate::sym::Rational = pd.stages.iter().map(|s| &s.flops).sum();
        println!(
            "                              {}  (all {} stages, one device each)",
            int(&all),
            pd.stages.len()
        );
    }
    println!("  point-to-point bytes        {}", int(&pd.p2p_bytes));
    println!("  memory  weights             {}", int(&pd.memory.params));
    println!("          gradients           {}", int(&pd.memory.grads));
    println!(
        "          optimizer state     {}",
        int(&pd.memory.optimizer)
    );
    println!(
        "          activations         {}",
        int(&pd.memory.activations)
    );
    println!(
        "          total               {}{}",
        int(&pd.memory.total),
        if pd.feasible {
            String::new()
        } else {
            format!(
                "  (does not fit: {})",
                pd.reason.clone().unwrap_or_default()
            )
        }
    );
    println!("  stages");
    for s in &pd.stages {
        let items: Vec<String> = s.items.iter().map(|(b, c)| format!("{b}×{c}")).collect();
        println!(
            "    {:<3} {:<40} FLOPs {}  memory {}",
            s.stage,
            items.join(" "),
            int(&s.flops),
            int(&s.memory.total)
        );
    }
    println!(
        "  collectives (busiest stage; bytes per rank per call, ring traffic; none on axes of 1)"
    );
    if e.knobs.cp > 1 {
        println!(
            "    (context parallelism: weight gradients on dp reduce over dp × cp = {} ranks; cp sends are the ring of keys and values)",
            e.knobs.replicas()
        );
    }
    println!(
        "    {:<15} {:<3} {:<11} {:>16} {:>7}  where",
        "collective", "axis", "tier", "bytes/call", "calls"
    );
    for c in pd
        .comm
        .iter()
        .filter(|c| !num_traits::Zero::is_zero(&c.bytes))
    {
        println!(
            "    {:<15} {:<3} {:<11} {:>16} {:>7}  {}",
            c.collective.name(),
            c.axis.name(),
            c.tier.to_string(),
            int(&c.bytes),
            c.count,
            c.op
        );
    }
    if let Some(rows) = &pd.per_op {
        println!();
        println!(
            "  {:<10} {:<16} {:<8} {:<16} {:>20} {:>20} {:>14} {:>16}",
            "block",
            "operator",
            "dp",
            "tp",
            "forward FLOPs",
            "backward FLOPs",
            "params",
            "saved bytes"
        );
        for r in rows {
            println!(
                "  {:<10} {:<16} {:<8} {:<16} {:>20} {:>20} {:>14} {:>16}",
                r.block,
                r.name,
                r.dp_split.as_deref().unwrap_or("-"),
                r.tp_split.as_deref().unwrap_or("-"),
                int_text(&r.forward),
                int_text(&r.backward),
                int_text(&r.params),
                int_text(&r.saved)
            );
        }
    }
}
