//! The `symshard` command line: one file per subcommand, argument handling and printing only.

pub mod explain;
mod output;

use crate::error::Error;
use clap::{Parser, Subcommand};

/// Rank parallel training layouts by exact symbolic cost.
#[derive(Debug, Parser)]
#[command(name = "symshard", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show an operator rule: its indices and laws, FLOPs, and derived split table.
    Explain(explain::ExplainArgs),
}

/// Output format of every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// A readable table.
    #[default]
    Table,
    /// JSON for machines.
    Json,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Explain(args) => explain::run(args),
    }
}
