//! `symshard calibrate`: a calibration table with numbers measured on the user's machine —
//! link tiers and bus-bandwidth curves from nccl-tests logs (`nccl-tests`), the matmul
//! efficiency curve from a GEMM sweep (`gemm`), a software stack's profile from measured step
//! times (`--from-runs`).

use crate::calib::{gemm, Calibration};
use crate::diag::Source;
use crate::error::Error;
use crate::sym::Rational;
use crate::timeline::nccl::{calibrate, fit, parse_log_as, to_yaml, NcclTest};
use clap::{Args, Subcommand};
use num_traits::ToPrimitive;
use std::path::{Path, PathBuf};

/// Arguments of `calibrate`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CalibrateArgs {
    /// What to calibrate from.
    #[command(subcommand)]
    pub from: Option<CalibrateFrom>,
    /// A software stack's profile from measured step times: a validation file (every row that
    /// measures seconds per step is fitted), or a fit-set file naming validation files and
    /// their rows. Writes the profile (`-o`) and reports each parameter with its uncertainty,
    /// and the error with each source left out in turn.
    #[arg(long, value_name = "RUNS.yaml", requires = "output")]
    pub from_runs: Option<PathBuf>,
    /// The stack profile to write (with --from-runs).
    #[arg(short, long, value_name = "STACK.yaml")]
    pub output: Option<PathBuf>,
}

/// Sources of measurements.
#[derive(Debug, Subcommand)]
pub enum CalibrateFrom {
    /// nccl-tests logs: one host measures the intra-node tier, several hosts the inter-node
    /// tier. `all_reduce_perf` logs fit latency and bandwidth; every log gives a bus-bandwidth
    /// curve for its collective.
    NcclTests(NcclArgs),
    /// A GEMM sweep (CSV `m,n,k,seconds[,dtype]`, as `tools/gemm_sweep.py` writes it): the
    /// matmul efficiency curve against the FLOPs of one GEMM.
    Gemm(GemmArgs),
}

/// Arguments of `calibrate nccl-tests`.
#[derive(Debug, Args)]
pub struct NcclArgs {
    /// Logs of `all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`
    /// or `sendrecv_perf`.
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    /// The collective of logs that do not name their test (newer nccl-tests print
    /// `# Collective test starting: NAME`); all-reduce when absent.
    #[arg(long, value_enum)]
    pub collective: Option<NcclTest>,
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

/// Arguments of `calibrate gemm`.
#[derive(Debug, Args)]
pub struct GemmArgs {
    /// The sweep: a CSV with a header naming `m`, `n`, `k`, `seconds` (and optionally `dtype`;
    /// only bf16 and fp16 rows are used); `#` starts a comment line.
    pub sweep: PathBuf,
    /// The calibration table to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// The table whose other numbers are kept, and whose bf16 peak the efficiencies are of
    /// (a file or a shipped name).
    #[arg(long, default_value = crate::calib::REFERENCE)]
    pub base: String,
    /// The new table's name (default: the output file's stem).
    #[arg(long)]
    pub name: Option<String>,
}

/// Runs `calibrate`.
pub fn run(args: CalibrateArgs) -> Result<(), Error> {
    match (args.from, args.from_runs, args.output) {
        (Some(CalibrateFrom::NcclTests(a)), _, _) => nccl_tests(a),
        (Some(CalibrateFrom::Gemm(a)), _, _) => gemm_sweep(a),
        (None, Some(runs), Some(output)) => super::stack_fit::run(&runs, &output),
        _ => Err(Error::Usage(
            "calibrate: give `nccl-tests`, `gemm`, or --from-runs RUNS.yaml -o STACK.yaml".into(),
        )),
    }
}

fn read(path: &Path) -> Result<String, Error> {
    crate::diag::read_text(path)
}

/// The table's name: `--name`, else the output file's stem.
fn table_name(name: Option<String>, output: &Path) -> String {
    name.unwrap_or_else(|| {
        output
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "measured".into())
    })
}

/// Writes a table after checking that it loads as any other.
fn write_table(c: &Calibration, output: &Path, inputs: &[&Path]) -> Result<(), Error> {
    let text = to_yaml(c);
    Calibration::load(&Source::new(output, text.clone()))?;
    super::output::write_output(output, text.as_bytes(), inputs)
}

fn float(r: &Rational) -> f64 {
    r.to_f64().unwrap_or(0.0)
}

fn nccl_tests(a: NcclArgs) -> Result<(), Error> {
    let base = Calibration::resolve(&a.base)?;
    let mut logs = Vec::new();
    for p in &a.logs {
        logs.push(parse_log_as(p, &read(p)?, a.collective)?);
    }
    let name = table_name(a.name, &a.output);
    let (intra, inter) = fit(&logs, &base)?;
    let c = calibrate(&logs, &base, &name)?;
    let inputs: Vec<&Path> = a.logs.iter().map(PathBuf::as_path).collect();
    write_table(&c, &a.output, &inputs)?;
    for (tier, f) in [("intra-node", intra), ("inter-node", inter)] {
        match f {
            Some(f) => println!(
                "{tier}: α = {:.3} µs, β = {:.1} GB/s ({} rows)",
                f.latency * 1e6,
                f.bandwidth / 1e9,
                f.rows
            ),
            None => println!(
                "{tier}: no all_reduce_perf log, α and β kept from `{}`",
                base.name
            ),
        }
    }
    for (tier, link, old) in [
        ("intra-node", &c.tiers.intra, &base.tiers.intra),
        ("inter-node", &c.tiers.inter, &base.tiers.inter),
    ] {
        for (kind, curve) in &link.busbw {
            if old.busbw.get(kind) != Some(curve) {
                println!(
                    "{tier}: {kind} busbw {:.1}–{:.1} GB/s over {} sizes",
                    float(&curve.min()) / 1e9,
                    float(&curve.max()) / 1e9,
                    curve.points.len()
                );
            }
        }
    }
    println!("wrote {}", a.output.display());
    Ok(())
}

fn gemm_sweep(a: GemmArgs) -> Result<(), Error> {
    let base = Calibration::resolve(&a.base)?;
    let sweep = gemm::parse_sweep(&a.sweep, &read(&a.sweep)?)?;
    let name = table_name(a.name, &a.output);
    let c = gemm::calibrate(&sweep, &base, &name)?;
    write_table(&c, &a.output, &[a.sweep.as_path()])?;
    let skipped = if sweep.skipped > 0 {
        format!(" ({} rows of other dtypes skipped)", sweep.skipped)
    } else {
        String::new()
    };
    let e = &c.device.efficiency;
    let fp8 = e.matmul_fp8.as_ref();
    for (label, rows, curve) in [
        ("matmul efficiency", sweep.rows.len(), Some(&e.matmul)),
        ("fp8 matmul efficiency", sweep.fp8_rows.len(), fp8),
    ] {
        let Some(m) = curve.filter(|_| rows > 0) else {
            continue;
        };
        println!(
            "{label}: {} points from {rows} rows{skipped}",
            m.points.len()
        );
        if let (Some((x0, y0)), Some((x1, y1))) = (m.points.first(), m.points.last()) {
            println!(
                "  {:.3} of peak at {:.2e} FLOPs per GEMM … {:.3} at {:.2e}",
                float(y0),
                float(x0),
                float(y1),
                float(x1)
            );
        }
    }
    println!("wrote {}", a.output.display());
    Ok(())
}
