//! `symshard sweep SPEC.yaml -o results.parquet`: the fastest layout at every point of a grid,
//! written as Parquet and CSV, resumable from its journal.

use crate::cli::units;
use crate::error::Error;
use crate::sweep::{Loaded, SweepRun};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The spec: a YAML file of `models`, `devices`, `machines` (a table's name or `{calib:
    /// TABLE, with: "NAME=VALUE,…"}`), optional `precisions`, `batch`, `sequence`, `fix`,
    /// `max`, `headroom` and `price_per_gpu_hour` (see `sweeps/example.yaml`).
    pub spec: PathBuf,
    /// The Parquet file to write. The CSV goes beside it (`.csv`), and the journal of finished
    /// points (`.journal.jsonl`), from which a rerun resumes.
    #[arg(short = 'o', long, value_name = "FILE.parquet")]
    pub output: PathBuf,
    /// Points run at once (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub jobs: Option<u64>,
}

/// Runs `sweep`.
pub fn run(args: SweepArgs) -> Result<(), Error> {
    let sweep = SweepRun::open(&args.spec, &args.output)?;
    let resumed = sweep.resumed();
    let jobs = args
        .jobs
        .map_or_else(rayon::current_num_threads, |j| j as usize);
    let pb = crate::cli::progress::bar(sweep.points(), "sweep");
    pb.set_position(resumed as u64);
    let busy = AtomicU64::new(0);
    let start = Instant::now();
    sweep.run_local(jobs, &|took: Duration| {
        busy.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let wall = start.elapsed().as_secs_f64();
    let index = sweep.finish()?;
    let ran = index.rows() as usize - resumed;
    let timing = Timing {
        ran,
        resumed,
        jobs,
        wall,
        busy: busy.load(Ordering::Relaxed) as f64 / 1e6,
    };
    let [_, csv, journal] = sweep.files();
    let crossovers = sweep.loaded.crossovers(&index)?;
    print_summary(
        &args,
        &sweep.loaded,
        &index,
        &crossovers,
        &timing,
        csv,
        journal,
    );
    Ok(())
}

/// How long the points took.
struct Timing {
    ran: usize,
    resumed: usize,
    jobs: usize,
    wall: f64,
    busy: f64,
}

/// What the sweep did: points, time, infeasible points, files, crossovers.
fn print_summary(
    args: &SweepArgs,
    loaded: &Loaded,
    index: &crate::sweep::RowIndex,
    crossovers: &[crate::sweep::Crossover],
    t: &Timing,
    csv: &Path,
    journal: &Path,
) {
    println!(
        "sweep {}: {} points ({} run, {} from the journal) on {} worker{} in {:.2} s{}",
        args.spec.display(),
        units::tally(index.rows()),
        units::tally(t.ran as u64),
        units::tally(t.resumed as u64),
        t.jobs,
        if t.jobs == 1 { "" } else { "s" },
        t.wall,
        if t.ran > 0 {
            format!(
                ": {:.3} s per point per worker, {:.0} points per hour",
                t.busy / t.ran as f64,
                t.ran as f64 / t.wall * 3600.0
            )
        } else {
            String::new()
        }
    );
    for m in &loaded.machines {
        if let Some(w) = &m.what_if {
            println!("{}", w.line());
        }
    }
    if let Some((point, reason)) = index.first_infeasible() {
        println!(
            "{} infeasible (a row each, with its reason), e.g. point {point}: {reason}",
            units::tally(index.infeasible()),
        );
    }
    println!(
        "wrote {}, {} and {}",
        args.output.display(),
        csv.display(),
        journal.display()
    );
    if crossovers.is_empty() {
        println!(
            "no crossovers: the best layout family is the same between every two adjacent points"
        );
    } else {
        println!("crossovers (the best layout family changes between adjacent points):");
        for c in crossovers {
            println!("  {c}");
        }
    }
    println!("energy is at TDP (an upper bound); costs use the spec's price per GPU-hour");
}
