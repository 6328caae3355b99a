//! `symshard validate`: every shipped published measurement (or the files given) predicted with
//! the shipped calibration tables, with the errors per row and per source.

use super::output::print_json;
use super::units;
use super::Format;
use crate::diag::Source;
use crate::error::Error;
use crate::validate::{by_stack, run_file, shipped, FileOutcome};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Validation files (YAML); default: the shipped ones (`validation/`).
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `validate`: exit code 1 when a row's error exceeds its recorded bound.
pub fn run(args: ValidateArgs) -> Result<(), Error> {
    let sources: Vec<(String, Source)> = if args.files.is_empty() {
        shipped()
    } else {
        let mut v = Vec::new();
        for p in &args.files {
            let src = Source::read(p)?;
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            v.push((stem, src));
        }
        v
    };
    let mut outcomes: Vec<FileOutcome> = Vec::new();
    for (name, src) in &sources {
        outcomes.push(run_file(name, src)?);
    }
    match args.format {
        Format::Json => print_json(&outcomes)?,
        Format::Table => print_table(&outcomes),
    }
    let beyond: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.beyond_bound().map(move |r| {
                format!(
                    "{} / {}: {:+.1} % (bound {:.1} %)",
                    o.name,
                    r.name,
                    100.0 * r.error,
                    100.0 * r.bound
                )
            })
        })
        .collect();
    if beyond.is_empty() {
        Ok(())
    } else {
        Err(Error::Check(format!(
            "{} row(s) beyond their recorded bound:\n  {}",
            beyond.len(),
            beyond.join("\n  ")
        )))
    }
}

fn print_table(outcomes: &[FileOutcome]) {
    for o in outcomes {
        // B and S in the header when every row shares them, else a column.
        let shape = |r: &crate::validate::RowOutcome| r.batch_and_sequence.join(", ");
        let shared = o
            .rows
            .first()
            .map(shape)
            .filter(|first| o.rows.iter().all(|r| &shape(r) == first));
        let in_header = match &shared {
            Some(s) if !s.is_empty() => format!(" ({s})"),
            _ => String::new(),
        };
        println!("{} — {} on {}{in_header}", o.name, o.source, o.machine);
        let column = shared.is_none();
        let mut head = vec!["run"];
        if column {
            head.push("B, S");
        }
        head.extend(["predicted", "published", "error", "memory"]);
        let rows: Vec<Vec<String>> = o
            .rows
            .iter()
            .map(|r| {
                let mut row = vec![r.name.clone()];
                if column {
                    row.push(shape(r));
                }
                let predicted = match r.band {
                    Some((lo, hi)) => format!(
                        "{:.3} {} (band {:.3}–{:.3})",
                        r.predicted,
                        r.measure.unit(),
                        lo,
                        hi
                    ),
                    None => format!("{:.3} {}", r.predicted, r.measure.unit()),
                };
                row.extend([
                    predicted,
                    format!("{:.3} {}", r.published, r.measure.unit()),
                    format!("{:+.1}%", 100.0 * r.error),
                    if r.fits { "fits" } else { "does not fit" }.to_string(),
                ]);
                row
            })
            .collect();
        let align = if column { "<<>>><" } else { "<>>><" };
        super::output::print_table("  ", align, &head, &rows);
        println!(
            "  mean |error| {:.1} %, max |error| {:.1} % over {} rows{}\n",
            100.0 * o.mean_abs_error,
            100.0 * o.max_abs_error,
            units::tally(o.rows.len() as u64),
            if o.rows.iter().any(|r| r.band.is_some()) {
                " (a row with a band: its error is how far the published value lies outside the band, 0 inside)"
            } else {
                ""
            }
        );
    }
    print_sweeps(outcomes);
    // The errors by software stack, where the files name one.
    if outcomes.iter().any(|o| o.stack.is_some()) {
        println!("by stack (the software the measurements ran)");
        let head = [
            "stack",
            "sources",
            "rows",
            "mean |error|",
            "median error",
            "range",
        ];
        let rows: Vec<Vec<String>> = by_stack(outcomes)
            .into_iter()
            .map(|s| {
                vec![
                    s.stack,
                    s.sources.to_string(),
                    units::tally(s.rows as u64),
                    format!("{:.1} %", 100.0 * s.mean_abs_error),
                    format!("{:+.1} %", 100.0 * s.median_error),
                    format!(
                        "{:+.1} % to {:+.1} %",
                        100.0 * s.min_error,
                        100.0 * s.max_error
                    ),
                ]
            })
            .collect();
        super::output::print_table("  ", "<>>>>>", &head, &rows);
    }
}

/// How the predictions order the layouts of each sweep: Kendall's τ and where the measured
/// fastest layout is placed.
fn print_sweeps(outcomes: &[FileOutcome]) {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .flat_map(|o| {
            o.sweeps.iter().map(|s| {
                vec![
                    o.name.clone(),
                    s.name.clone(),
                    format!("{:+.2}", s.tau),
                    format!("{} (#{})", s.measured_best, s.predicted_place),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    println!(
        "layout order within sweeps (rows of one model, sequence and device count, by time per sample; τ: Kendall's τ-b of predicted against published; #: the measured fastest's place in the predicted order)"
    );
    let head = ["source", "sweep", "τ", "measured fastest (predicted place)"];
    super::output::print_table("  ", "<<><", &head, &rows);
    let n = rows.len() as f64;
    let mean_tau = outcomes
        .iter()
        .flat_map(|o| &o.sweeps)
        .map(|s| s.tau)
        .sum::<f64>()
        / n;
    let top3 = outcomes
        .iter()
        .flat_map(|o| &o.sweeps)
        .filter(|s| s.predicted_place <= 3)
        .count();
    println!(
        "  mean τ {mean_tau:+.2}; the measured fastest is in the predicted top 3 in {top3} of {} sweeps\n",
        rows.len()
    );
}
