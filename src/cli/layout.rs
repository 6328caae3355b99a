//! `symshard layout`: a layer's tensor-parallel layouts compared — the family's annotations, the
//! exact per-operator optimum and D-Rec.

use super::output::print_json;
use super::{Format, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::search::compare::compare_layer_with_progress;
use clap::Args;
use num_traits::ToPrimitive;

/// Arguments of `layout`.
#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: u64,
    /// Devices per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u64,
    /// A calibration table for the balance ratios (default: the reference machine).
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// Let the searches cut the sequence over the tensor-parallel axis too (context
    /// parallelism under another name: weights replicated over the axis, memory not priced).
    #[arg(long)]
    pub cut_sequence: bool,
    /// Also list every operator's choice.
    #[arg(long)]
    pub per_op: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `layout`.
pub fn run(args: LayoutArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let calib = Calibration::resolve_or_reference(args.calib.as_deref())?;
    crate::strategy::check_gpus_per_node(args.gpus_per_node)
        .map_err(super::strategy_args::machine_error)?;
    let pb = super::progress::bar(0, "searching");
    let report = compare_layer_with_progress(
        &model,
        &values,
        args.tp,
        &calib,
        args.gpus_per_node,
        args.cut_sequence,
        &mut |what, done, all| {
            pb.set_message(what.to_string());
            pb.set_length(all as u64);
            pb.set_position(done as u64);
        },
    );
    pb.finish_and_clear();
    let report = report?;
    match args.format {
        Format::Json => print_json(&report),
        Format::Table => {
            println!(
                "{}{} `{}` block at tp = {} on {} ({} devices per node), FLOP-equivalents per device",
                model.name,
                crate::units::batch_and_sequence(&model, &values),
                report.block,
                args.tp,
                calib.name,
                args.gpus_per_node
            );
            let best = report.rows.first().map(|r| r.cost.clone());
            for r in &report.rows {
                let gap = best
                    .as_ref()
                    .map(|b| ((&r.cost - b) / b).to_f64().unwrap_or(0.0) * 100.0)
                    .unwrap_or(0.0);
                println!(
                    "  {:<40} {:>14}  {:>+7.2}%",
                    r.method,
                    super::units::flops(&r.cost),
                    gap
                );
            }
            println!("  the last column: how much costlier than the cheapest layout");
            if !super::units::exact() {
                println!("  {}", super::units::UNITS_LEGEND);
            }
            for n in &report.notes {
                println!("  note: {n}");
            }
            if args.per_op {
                for r in &report.rows {
                    println!();
                    println!("  {}", r.method);
                    for (op, c) in &r.choices {
                        println!("    {op:<18} {c}");
                    }
                }
            }
            Ok(())
        }
    }
}
