//! `symshard calibrate nccl-tests`: link tiers fitted from nccl-tests logs, written as a
//! calibration table.

use crate::calib::Calibration;
use crate::diag::Source;
use crate::error::Error;
use crate::timeline::nccl::{calibrate, fit, parse_log, to_yaml};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Arguments of `calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// What to calibrate from.
    #[command(subcommand)]
    pub from: CalibrateFrom,
}

/// Sources of measurements.
#[derive(Debug, Subcommand)]
pub enum CalibrateFrom {
    /// nccl-tests `all_reduce_perf` logs: one host measures the intra-node tier, several hosts
    /// the inter-node tier.
    NcclTests(NcclArgs),
}

/// Arguments of `calibrate nccl-tests`.
#[derive(Debug, Args)]
pub struct NcclArgs {
    /// Logs of `all_reduce_perf`.
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    /// The calibration table to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// The table whose other numbers are kept (a file or a shipped name).
    #[arg(long, default_value = crate::calib::REFERENCE)]
    pub base: String,
    /// The new table's name (default: the output file's stem).
    #[arg(long)]
    pub name: Option<String>,
}

/// Runs `calibrate`.
pub fn run(args: CalibrateArgs) -> Result<(), Error> {
    let CalibrateFrom::NcclTests(a) = args.from;
    let base = Calibration::resolve(&a.base)?;
    let mut logs = Vec::new();
    for p in &a.logs {
        let text = std::fs::read_to_string(p).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        logs.push(parse_log(p, &text)?);
    }
    let name = a.name.clone().unwrap_or_else(|| {
        a.output
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "measured".into())
    });
    let (intra, inter) = fit(&logs, &base)?;
    let c = calibrate(&logs, &base, &name)?;
    let text = to_yaml(&c);
    // The written table must load as any other.
    Calibration::load(&Source::new(&a.output, text.clone()))?;
    std::fs::write(&a.output, &text).map_err(|source| Error::Io {
        path: a.output.clone(),
        source,
    })?;
    for (tier, f) in [("intra-node", intra), ("inter-node", inter)] {
        match f {
            Some(f) => println!(
                "{tier}: α = {:.3} µs, β = {:.1} GB/s ({} rows)",
                f.latency * 1e6,
                f.bandwidth / 1e9,
                f.rows
            ),
            None => println!("{tier}: no log, kept from `{}`", base.name),
        }
    }
    println!("wrote {}", a.output.display());
    Ok(())
}
