//! `symshard analyze`: a strategy's symbolic analysis, evaluated exactly and saved as JSON so
//! that `symshard timeline FILE.json` and `symshard port` can time it on any machine without
//! analysing again.

use super::strategy_args::StrategyFlags;
use super::timeline::plan_of;
use super::SymbolArgs;
use crate::error::Error;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// A model file, a shipped model's name.
    pub model: String,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    #[command(flatten)]
    pub strategy: StrategyFlags,
    /// Where to save the analysis (standard output when absent).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Runs `analyze`.
pub fn run(args: AnalyzeArgs) -> Result<(), Error> {
    if super::timeline::is_analysis(&args.model) {
        return Err(Error::Usage(format!(
            "`{}` is already an analysis; give a model",
            args.model
        )));
    }
    let plan = plan_of(&args.model, &args.symbols, &args.strategy)?;
    let text = plan.to_json();
    match &args.output {
        Some(p) => {
            let model = Path::new(&args.model);
            super::output::write_output(p, (text + "\n").as_bytes(), &[model])
        }
        None => {
            println!("{text}");
            Ok(())
        }
    }
}
