//! `symshard report`: one self-contained HTML file with the ranking, its cost components, memory
//! versus time, and the top strategy's timeline, memory and formulas.
//!
//! The report is written by the library ([`crate::report::write_report`]); this module
//! reads the arguments and names the command in the report's header.

use super::rank::SearchArgs;
use super::SymbolArgs;
use crate::error::Error;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A model file or a shipped model's name.
    #[arg(required_unless_present = "sweep")]
    pub model: Option<String>,
    /// Devices to train on.
    #[arg(long, required_unless_present = "sweep")]
    pub devices: Option<u64>,
    /// Draw a sweep instead: the Parquet file `symshard sweep` wrote (seconds against devices
    /// per machine, the Pareto front of time against cost, the winning layout family over two
    /// swept axes).
    #[arg(long, value_name = "FILE.parquet", conflicts_with_all = ["model", "devices", "calib", "stack"])]
    pub sweep: Option<PathBuf>,
    /// Strategies to rank and show.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// The machine: a calibration table, a what-if change of it, a stack profile. With
    /// `--calib`, the report ranks by simulated seconds and times the top strategy on it.
    #[command(flatten)]
    pub machine: super::strategy_args::MachineArgs,
    /// The search's machine and constraints, as `rank` takes them.
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// The HTML file to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
}

/// The search the report ranks: `rank`'s, by relative cost on the reference machine unless
/// `--calib` is given, with the Pareto frontier the chart draws.
fn options(args: &ReportArgs, devices: u64) -> Result<crate::api::RankOptions, Error> {
    let machine = args.machine.machine(args.search.gpus_per_node)?;
    args.search
        .options(devices, machine, None)
        .by_seconds(args.machine.seconds())
        .top(args.top)
        .pareto(true)
        .build()
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<(), Error> {
    if let Some(sweep) = &args.sweep {
        return crate::sweep::report(sweep, &args.output);
    }
    let (Some(name), Some(devices)) = (args.model.clone(), args.devices) else {
        return Err(Error::Usage(
            "report: give a model and --devices, or --sweep RESULTS.parquet".into(),
        ));
    };
    let loaded = args.symbols.model(&name).load()?;
    let opts = options(&args, devices)?;
    let command = command_line(&args, &name, devices);
    let written = super::progress::ranking(|progress| {
        crate::report::write_report_loaded(&loaded, &name, &opts, &command, &args.output, progress)
    })?;
    eprintln!("wrote {} ({written} bytes)", args.output.display());
    Ok(())
}

/// The command line the report says it shows.
fn command_line(args: &ReportArgs, model: &str, devices: u64) -> String {
    let mut command = vec!["symshard report".to_string(), model.to_string()];
    command.push(format!("--devices {devices}"));
    command.extend(args.machine.to_args());
    let search = args.search.to_args();
    if !search.is_empty() {
        command.push(search.join(" "));
    }
    command.join(" ")
}
