//! `symshard cost`: parameters, FLOPs and activation memory of a model, exact.

use super::output::{print_json, print_table};
use super::strategy_args::StrategyFlags;
use super::units;
use super::{Format, SymbolArgs};
use crate::api::{Cost, CostDetail, CostRequest, DeviceCost, DeviceOp, OpCost};
use crate::error::Error;
use crate::parallel::Evaluation;
use crate::sym::{Bindings, Rational};
use clap::Args;
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

/// `cost`'s request of the command line's arguments.
fn request(args: &CostArgs) -> Result<CostRequest, Error> {
    // Checked even without a strategy, which alone would read it: a flag given is never ignored
    // in silence.
    if let Some(g) = args.strategy.gpus_per_node {
        crate::strategy::check_gpus_per_node(g).map_err(super::strategy_args::machine_error)?;
    }
    let (strategy, machine) = if args.strategy.given() {
        (
            Some(args.strategy.strategy()?),
            Some(args.strategy.machine()?),
        )
    } else {
        if let Some(note) = args.strategy.unused_machine_flags()? {
            eprintln!("{note}");
        }
        (None, None)
    };
    Ok(CostRequest {
        model: args.symbols.model(&args.model),
        strategy,
        machine,
        symbolic: args.symbolic,
        per_op: args.per_op,
    })
}

/// Runs `cost`.
pub fn run(args: CostArgs) -> Result<(), Error> {
    let (out, detail) = crate::api::cost_in_full(&request(&args)?)?;
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            print_model(&out, &detail, &args)?;
            if let (Some(pd), Some(d)) = (&out.per_device, &detail.device) {
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

/// Evaluates `p` under `b` as exact text, or prints the formula when symbolic.
pub fn show(p: &crate::sym::Poly, b: &Bindings, symbolic: bool) -> Result<String, Error> {
    if symbolic {
        return Ok(p.to_string());
    }
    let v = p
        .eval(b)
        .map_err(|e| Error::Usage(format!("cannot evaluate: {e} (bind it with --set)")))?;
    Ok(v.to_string())
}

/// `--per-op`'s table of the model's operators.
fn print_op_rows(rows: &[OpCost]) {
    println!();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.rule.clone(),
                r.repeat.to_string(),
                units::text(&r.params.to_string(), units::count),
                units::text(&r.forward.to_string(), units::flops),
                units::text(&r.backward.to_string(), units::flops),
                units::text(&r.activations.to_string(), units::bytes),
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
fn print_model(out: &Cost, detail: &CostDetail, args: &CostArgs) -> Result<(), Error> {
    let (model, cost, values) = (&detail.model, &detail.totals, &detail.values);
    if let Some(line) = assumed_line(&texts(&out.assumed_sizes)) {
        println!("{line}");
    }
    println!(
        "model {}{} — {}",
        model.name,
        units::batch_and_sequence(model, values),
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
    let n = |s: &crate::api::Quantity| units::text(&s.to_string(), units::count);
    let f = |s: &crate::api::Quantity| units::text(&s.to_string(), units::flops);
    let b = |s: &crate::api::Quantity| units::text(&s.to_string(), units::bytes);
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
            units::text(&show(&total, values, false)?, units::flops)
        );
    }
    println!("activations saved (bytes)     {}", b(&out.activations));
    Ok(())
}

/// Exact values as text.
fn texts(m: &BTreeMap<String, Rational>) -> BTreeMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
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

/// Prints the per-device summary of `cost`: totals, each stage, the collectives and, where asked
/// for, every operator.
fn print_device(pd: &DeviceCost, e: &Evaluation, machine: &(String, Rational), legend: &str) {
    print_device_totals(pd, e, machine);
    print_stages(pd, &e.knobs);
    print_collectives(pd, e);
    print_links(e, &machine.0);
    if let Some(rows) = &pd.per_op {
        print_per_op(rows, legend);
    }
}

/// Prints where the strategy runs, then the busiest device's FLOPs, point-to-point bytes and
/// memory by kind, and whether it fits.
fn print_device_totals(pd: &DeviceCost, e: &Evaluation, machine: &(String, Rational)) {
    let (calib, capacity) = machine;
    println!();
    println!(
        "per device, {} on {} devices ({} per node) of {}, {} usable per device",
        pd.strategy,
        e.mesh.devices,
        e.mesh.gpus_per_node,
        calib,
        units::bytes_rounded(capacity)
    );
    println!(
        "  compute FLOPs per step      {}  ({}, one device, with recomputation)",
        units::flops(&pd.flops),
        if e.knobs.dualpipe() {
            "busiest rank: its two stages"
        } else {
            "busiest stage"
        }
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
    if !num_traits::Zero::is_zero(&pd.grad_sum_bytes) {
        println!(
            "    of which gradient sum     {}  (dualpipe: the rank's copies' gradients added to its mirror's before the optimizer step)",
            units::bytes(&pd.grad_sum_bytes)
        );
    }
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

/// Prints each pipeline stage's blocks, FLOPs and memory; under DualPipe each row is the rank
/// that runs the stage and its mirror, under ZB-V the rank that holds two chunks, and it says
/// so.
fn print_stages(pd: &DeviceCost, k: &crate::strategy::Knobs) {
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
    if k.dualpipe() {
        println!(
            "    dualpipe: row s is rank s, which runs stage s (the blocks shown) and stage pp − 1 − s, half the micro-batches through each; FLOPs and memory are the rank's"
        );
    } else if k.v_placed() {
        println!(
            "    {}: row s is rank s, which holds chunks s and 2·pp − 1 − s of the 2·pp (the blocks shown are both); every micro-batch runs through each",
            k.schedule
        );
    }
}

/// Prints the busiest stage's collectives (under DualPipe its rank's, both stages'; none on
/// axes of 1), with a note on context parallelism's where it is used.
fn print_collectives(pd: &DeviceCost, e: &Evaluation) {
    println!(
        "  collectives ({}; bytes per rank per call, ring traffic; none on axes of 1)",
        if e.knobs.dualpipe() {
            "busiest rank: its two stages, half the micro-batches through each"
        } else {
            "busiest stage"
        }
    );
    if e.knobs.cp > 1 {
        println!(
            "    (context parallelism: weight gradients on dp reduce over dp × cp = {} ranks; cp sends are the ring of keys and values)",
            e.knobs.replicas()
        );
    }
    if e.knobs.recompute == crate::strategy::Recompute::Full {
        println!(
            "    (calls per step: full recomputation runs each layer's forward collectives again before its backward)"
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

/// Where each parallel dimension's groups run, on a table that describes its topology (a
/// torus, fully connected nodes, oversubscribed scale-out).
fn print_links(e: &Evaluation, machine: &str) {
    let Ok(calib) = crate::calib::Calibration::resolve(machine) else {
        return;
    };
    if let Some(t) = &calib.topology {
        let items = t.placements(&e.mesh);
        if !items.is_empty() {
            println!("  links ({machine}): {}", items.join("; "));
        }
    }
}

/// Prints every operator's splits, FLOPs, parameters and saved bytes (`--per-op`), then the
/// legend of the units.
fn print_per_op(rows: &[DeviceOp], legend: &str) {
    println!();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.block.clone(),
                r.name.clone(),
                r.dp_split.clone().unwrap_or_else(|| "-".into()),
                r.tp_split.clone().unwrap_or_else(|| "-".into()),
                units::flops(&r.forward),
                units::flops(&r.backward),
                units::count(&r.params),
                units::bytes(&r.saved),
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
