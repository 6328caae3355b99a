//! `symshard optimize`: cheaper communication for a tensor-parallel layer, found by rewriting.

use super::output::print_json;
use super::{Format, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::rewrite::{optimize_layer_with, OptimizeOptions, Weights};
use crate::strategy::Tier;
use clap::Args;

/// Arguments of `optimize`.
#[derive(Debug, Args)]
pub struct OptimizeArgs {
    /// A model file, a shipped model's name (see `symshard models`).
    pub model: String,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub tp: u64,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// A calibration table (file or shipped name) whose intra-node balance weighs wire bytes
    /// against FLOPs (default: the reference machine).
    #[arg(long, value_name = "CALIB")]
    pub calib: Option<String>,
    /// Analyse this many identical layers at once (`repeat N layer`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub layers: Option<u64>,
    /// Optimise the layer as the per-operator search lays it out at `--tp` (the `auto` layout
    /// `rank` prices) instead of as the family's `tp:` marks do: what an imported graph, which
    /// has no marks, needs for any communication to appear.
    #[arg(long)]
    pub auto: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `optimize`.
pub fn run(args: OptimizeArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let calib = Calibration::resolve_or_reference(args.calib.as_deref())?;
    let opts = OptimizeOptions {
        layers: args.layers,
        weights: Weights {
            flops_per_wire_byte: calib.balance(Tier::Intra),
            ..Weights::default()
        },
        ..OptimizeOptions::default()
    };
    let r = if args.auto {
        let auto = crate::search::auto::auto_tp_layout(
            &model,
            &values,
            args.tp,
            &calib,
            calib.gpus_per_node(),
        )?;
        let layout = crate::parallel::Layout {
            sequence_parallel: false,
            tp_overrides: auto.placements,
        };
        let opts = OptimizeOptions {
            weights: crate::search::egraph::variant_weights(),
            ..opts
        };
        crate::rewrite::optimize::optimize_layout(&model, args.tp, &values, &layout, &opts)?
    } else {
        optimize_layer_with(&model, args.tp, &values, &opts)?
    };
    if args.format == Format::Json {
        return print_json(&r);
    }
    let layers = r.layers.map(|n| format!(" ×{n}")).unwrap_or_default();
    println!(
        "model {}{}, block `{}`{layers}, tp {}, on {} — e-graph {} after {} iterations: {} e-nodes, {} e-classes, {:.3} s",
        r.model,
        crate::units::batch_and_sequence(&model, &values),
        r.block,
        r.tp,
        calib.name,
        r.run.stop_reason,
        r.run.iterations,
        r.run.egraph_nodes,
        r.run.egraph_classes,
        r.run.seconds
    );
    print_costs(&r);
    println!();
    println!("saving as formulas:");
    println!("  FLOPs       {}", r.saving.formulas.compute);
    println!("  activations {}", r.saving.formulas.activation);
    if !r.moved.is_empty() {
        println!();
        println!("{:<20} {:<20} {:<20}", "operator", "before", "after");
        for m in &r.moved {
            println!("{:<20} {:<20} {:<20}", m.op, m.before, m.after);
        }
    }
    println!();
    println!("before:");
    print!("{}", r.before);
    println!();
    println!("after:");
    print!("{}", r.after);
    Ok(())
}

/// The before, after and saving table of an optimisation, per device.
fn print_costs(r: &crate::rewrite::optimize::OptimizeReport) {
    println!();
    println!(
        "{:<28} {:>22} {:>22} {:>22}",
        "per device", "before", "after", "saving"
    );
    type Show = fn(&crate::sym::Rational) -> String;
    let rows: [(&str, &String, &String, &String, Show); 3] = [
        (
            "wire bytes",
            &r.before_cost.comm,
            &r.after_cost.comm,
            &r.saving.comm,
            super::units::bytes,
        ),
        (
            "FLOPs (forward)",
            &r.before_cost.compute,
            &r.after_cost.compute,
            &r.saving.compute,
            super::units::flops,
        ),
        (
            "activation bytes saved",
            &r.before_cost.activation,
            &r.after_cost.activation,
            &r.saving.activation,
            super::units::bytes,
        ),
    ];
    for (what, b, a, s, f) in rows {
        let (b, a, s) = (
            super::units::text(b, f),
            super::units::text(a, f),
            super::units::text(s, f),
        );
        println!("{what:<28} {b:>22} {a:>22} {s:>22}");
    }
    if !super::units::exact() {
        println!("{}", super::units::UNITS_LEGEND);
    }
}
