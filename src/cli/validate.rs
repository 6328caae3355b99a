//! `symshard validate`: every shipped published measurement (or the files given) predicted with
//! the shipped calibration tables, with the errors per row and per source.

use super::output::print_json;
use super::units;
use super::Format;
use crate::calib::stack::{FitSummary as StackFit, PerRow, StackProfile};
use crate::diag::Source;
use crate::error::Error;
use crate::validate::{
    by_device, by_stack, file_stack, headline, run_file, run_file_with, shipped, FileOutcome,
    GroupSummary, RowOutcome, RowSet,
};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Validation files (YAML); default: the shipped ones (`validation/`).
    pub files: Vec<PathBuf>,
    /// A software stack's profile (a file or a shipped name, `stacks/`) added to the files whose
    /// `stack:` is the profile's label (every file for a profile with none); their rows are
    /// reported as fit rows (the profile's declared fit set) and test rows, and the test rows
    /// are the headline. `auto`: each file on the shipped profile labelled with its stack
    /// (as `rank` prices each row). Default: none, profile-free.
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
    /// Instead of the step-time errors, where `rank` places each published layout: every
    /// step-time row of 8 devices or more is ranked on its model, sizes, devices and machine
    /// (by simulated seconds, the first 100 rows, the whole device memory usable, the run's
    /// precision, overlaps, recomputation, sequence parallelism and pipeline split fixed for
    /// every layout), and the first row with its degrees, ZeRO stage, chunks and (where stated)
    /// micro-batches is its place. Default files: the shipped ones with a tensor- or
    /// pipeline-parallel row.
    #[arg(long)]
    pub places: bool,
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
    if args.places {
        return places(
            &sources,
            args.files.is_empty(),
            args.stack.as_deref(),
            args.format,
        );
    }
    // `auto`: each file on the shipped profile labelled with its stack; `none`: none.
    let profiles: Vec<StackProfile> = match args.stack.as_deref() {
        None | Some(crate::calib::STACK_NONE) => Vec::new(),
        Some(crate::calib::STACK_AUTO) => PerRow::shipped()?.profiles().cloned().collect(),
        Some(a) => vec![StackProfile::resolve(a)?],
    };
    let mut outcomes: Vec<FileOutcome> = Vec::new();
    // With a profile: the same rows profile-free, to show what it changes; by the profile's
    // place in `profiles`.
    let mut applied: Vec<Vec<(usize, FileOutcome)>> = vec![Vec::new(); profiles.len()];
    for (name, src) in &sources {
        // A profile without a label applies to every file (the shipped ones all have one).
        let label = file_stack(src).ok().flatten();
        let applies = profiles
            .iter()
            .position(|p| p.label.is_none() || p.label == label);
        outcomes.push(run_file_with(name, src, applies.map(|i| &profiles[i]))?);
        if let Some(i) = applies {
            applied[i].push((outcomes.len() - 1, run_file(name, src)?));
        }
    }
    match args.format {
        Format::Json => print_json(&outcomes)?,
        Format::Table => {
            print_table(&outcomes);
            for (p, files) in profiles.iter().zip(&applied) {
                let with: Vec<&FileOutcome> = files.iter().map(|(i, _)| &outcomes[*i]).collect();
                let free: Vec<&FileOutcome> = files.iter().map(|(_, f)| f).collect();
                print_split(p, &with, &free);
            }
        }
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
        if let Some(p) = &o.stack_profile {
            println!("  stack profile: {p}");
        }
        for line in &o.borrowed_curves {
            println!("  {line}");
        }
        if let Some(shares) = o.shares.as_deref().filter(|_| !o.independent) {
            println!("  not independent of the table (left out of the headline figures): {shares}");
        }
        let column = shared.is_none();
        let split = o.rows.iter().any(|r| r.set.is_some());
        let mut head = vec!["run"];
        if split {
            head.push("set");
        }
        if column {
            head.push("B, S");
        }
        head.extend(["predicted", "published", "error", "memory"]);
        let rows: Vec<Vec<String>> = o
            .rows
            .iter()
            .map(|r| {
                let mut row = vec![r.name.clone()];
                if let Some(set) = r.set {
                    row.push(set.name().to_string());
                }
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
                    memory(r),
                ]);
                row
            })
            .collect();
        let align = match (split, column) {
            (true, true) => "<<<>>><",
            (true, false) => "<<>>><",
            (false, true) => "<<>>><",
            (false, false) => "<>>><",
        };
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
    print_precision_pairs(outcomes);
    print_groups(outcomes);
}

/// The memory column: whether the row's strategy fits; for a row with a band, at how many of
/// its settings.
fn memory(r: &RowOutcome) -> String {
    match r.band_fits {
        Some((0, _)) => "fits at none of its band".into(),
        Some((n, of)) if n < of => format!("fits at {n} of {of} band settings"),
        Some(_) => "fits".into(),
        None if r.fits => "fits".into(),
        None => "does not fit".into(),
    }
}

/// The headline, and the errors by software stack and by accelerator: independent rows only.
fn print_groups(outcomes: &[FileOutcome]) {
    let left_out: Vec<&FileOutcome> = outcomes.iter().filter(|o| !o.independent).collect();
    // With a stack profile, the rows it was fitted on (of independent files) are in sample.
    let fitted = outcomes
        .iter()
        .filter(|o| o.independent)
        .flat_map(|o| &o.rows)
        .filter(|r| r.set == Some(RowSet::Fit))
        .count();
    let test = if fitted > 0 { "test " } else { "" };
    if let Some(all) = headline(outcomes) {
        let rows_left: usize = left_out.iter().map(|o| o.rows.len()).sum();
        println!(
            "headline: mean |error| {:.1} %, signed mean {:+.1} %, max |error| {:.1} % over {} independent {}rows of {} sources{}{}",
            100.0 * all.mean_abs_error,
            100.0 * all.mean_error,
            100.0 * all.max_error.abs().max(all.min_error.abs()),
            units::tally(all.rows as u64),
            test,
            all.sources,
            match fitted {
                0 => String::new(),
                n => format!(
                    "; the {} rows a stack profile was fitted on left out (in sample)",
                    units::tally(n as u64)
                ),
            },
            match rows_left {
                0 => String::new(),
                n => format!(
                    "; {} rows of {} sources that share a publication with their machine's table left out ({})",
                    units::tally(n as u64),
                    left_out.len(),
                    left_out.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        );
        println!();
    }
    if outcomes.iter().any(|o| o.stack.is_some()) {
        println!("by stack (the software the measurements ran; independent {test}rows)");
        print_group_table("stack", &by_stack(outcomes));
        println!();
    }
    println!("by accelerator (independent {test}rows)");
    print_group_table("device", &by_device(outcomes));
}

fn print_group_table(what: &str, groups: &[GroupSummary]) {
    let head = [
        what,
        "sources",
        "rows",
        "mean |error|",
        "signed mean",
        "median error",
        "range",
    ];
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|s| {
            vec![
                s.group.clone(),
                s.sources.to_string(),
                units::tally(s.rows as u64),
                format!("{:.1} %", 100.0 * s.mean_abs_error),
                format!("{:+.1} %", 100.0 * s.mean_error),
                format!("{:+.1} %", 100.0 * s.median_error),
                format!(
                    "{:+.1} % to {:+.1} %",
                    100.0 * s.min_error,
                    100.0 * s.max_error
                ),
            ]
        })
        .collect();
    super::output::print_table("  ", "<>>>>>>", &head, &rows);
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

/// How the predictions move with the precision: each run measured in bf16 and in an FP8 or FP4
/// recipe, the ratio of their step times measured and predicted.
fn print_precision_pairs(outcomes: &[FileOutcome]) {
    let pairs = crate::validate::precision_pairs(outcomes);
    if pairs.is_empty() {
        return;
    }
    println!(
        "precision pairs (one run measured in bf16 and in another precision: that precision's step time over bf16's, measured and predicted; difference: predicted less measured, in points)"
    );
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|p| {
            vec![
                p.other.clone(),
                p.precision.clone(),
                format!("{:.3}", p.measured),
                format!("{:.3}", p.predicted),
                format!("{:+.1}", p.difference_points()),
            ]
        })
        .collect();
    let head = [
        "run (against its bf16 row)",
        "precision",
        "measured",
        "predicted",
        "difference",
    ];
    super::output::print_table("  ", "<<>>>", &head, &rows);
    let diffs: Vec<f64> = pairs.iter().map(|p| p.difference_points().abs()).collect();
    let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
    let max = diffs.iter().copied().fold(0.0, f64::max);
    let within = diffs.iter().filter(|d| **d <= 5.0).count();
    println!(
        "  mean |difference| {mean:.1} points, max {max:.1}; within 5 points in {within} of {} pairs\n",
        pairs.len()
    );
}

/// With a stack profile: the rows it applies to, fit and test apart, against the same rows
/// profile-free (`free`, one per file it applies to, in order); the test rows first, as the
/// headline. Errors as the table's (a row with a band: outside its band).
fn print_split(p: &StackProfile, applied: &[&FileOutcome], free: &[&FileOutcome]) {
    println!("stack profile {}", p.describe());
    // (set, error with the profile, error without); a test row only from a file independent of
    // its machine's table (the headline leaves the others out, as `validate`'s own does).
    let errors: Vec<(Option<RowSet>, f64, f64)> = applied
        .iter()
        .zip(free)
        .flat_map(|(o, f)| {
            o.rows
                .iter()
                .zip(&f.rows)
                .filter(move |(r, _)| o.independent || r.set == Some(RowSet::Fit))
        })
        .map(|(r, f)| (r.set, r.error, f.error))
        .collect();
    if errors.is_empty() {
        let label = p.label.as_deref().unwrap_or("");
        println!("  applies to no row here (its label: `{label}`)");
        return;
    }
    for set in [RowSet::Test, RowSet::Fit] {
        let of: Vec<&(Option<RowSet>, f64, f64)> =
            errors.iter().filter(|e| e.0 == Some(set)).collect();
        if of.is_empty() {
            continue;
        }
        let n = of.len().max(1) as f64;
        let with = of.iter().map(|e| e.1.abs()).sum::<f64>() / n;
        let without = of.iter().map(|e| e.2.abs()).sum::<f64>() / n;
        println!(
            "  {} rows: mean |error| {:.1} % over {} (profile-free {:.1} %){}",
            set.name(),
            100.0 * with,
            units::tally(of.len() as u64),
            100.0 * without,
            match set {
                RowSet::Test => ": the headline",
                RowSet::Fit => ": in sample",
            }
        );
    }
    if let Some(f) = &p.fit {
        print_fit(f);
    }
}

/// The profile's own record of its fit (`calibrate --from-runs`): its error in sample and with
/// each source left out in turn, the gap the fidelity goal keeps within 2 points.
fn print_fit(f: &StackFit) {
    let Some(loo) = f.leave_one_out_error else {
        return;
    };
    let gap = 100.0 * (loo - f.in_sample_error);
    // A fit set of one source leaves its rows out one at a time instead.
    let what = if f.sources < 2 { "row" } else { "source" };
    let mut line = format!(
        "  its fit (calibrate, point predictions without bands): each {what} left out in turn {:.1} %, in sample {:.1} % ({gap:+.1} points)",
        100.0 * loo,
        100.0 * f.in_sample_error,
    );
    if !f.underdetermined.is_empty() {
        line += &format!(
            "; without {} fewer rows than parameters remain",
            f.underdetermined.join(", ")
        );
    }
    println!("{line}");
}

/// `validate --places`: the place of each published layout in `rank`'s order, on the stack
/// profiles `stack` names; of the files with a tensor- or pipeline-parallel row when
/// `model_parallel_only` (the shipped set).
fn places(
    sources: &[(String, Source)],
    model_parallel_only: bool,
    stack: Option<&str>,
    format: Format,
) -> Result<(), Error> {
    let mut all = Vec::new();
    for (name, src) in sources {
        all.extend(crate::validate::places::places(
            name,
            src,
            stack,
            model_parallel_only,
        )?);
    }
    match format {
        Format::Json => print_json(&all)?,
        Format::Table => print_places(&all, stack),
    }
    Ok(())
}

fn print_places(all: &[crate::validate::places::Place], stack: Option<&str>) {
    use crate::validate::places::TOP;
    println!(
        "where rank places the published layouts: by simulated seconds, the first {TOP} rows, the whole device memory usable, each run's settings fixed; {}",
        match stack.filter(|s| *s != crate::calib::STACK_NONE) {
            Some(s) => format!("on --stack {s}"),
            None => "profile-free".to_string(),
        }
    );
    let mut file = "";
    for p in all {
        if p.file != file {
            file = &p.file;
            println!("{file}");
        }
        let place = match (&p.refused, p.place, p.seconds) {
            (Some(why), ..) => format!("not ranked: {why}"),
            (None, Some(n), Some(s)) => format!("#{n} ({s:.3} s)"),
            _ => format!("not in the first {TOP}"),
        };
        let first = match &p.first {
            Some((k, s)) => format!("; #1 {k} ({s:.3} s)"),
            None if p.refused.is_none() => "; nothing ranked".to_string(),
            None => String::new(),
        };
        println!("  {}: published {}: {place}{first}", p.row, p.published);
    }
    let mut placed: Vec<usize> = all.iter().filter_map(|p| p.place).collect();
    placed.sort_unstable();
    let refused = all.iter().filter(|p| p.refused.is_some()).count();
    let ranked = all.len() - refused;
    let within = |n: usize| placed.iter().filter(|&&p| p <= n).count();
    let median = placed.get(placed.len().saturating_sub(1) / 2);
    println!(
        "{ranked} published layouts ranked: {} first, {} in the first 10, {} in the first {TOP}, {} below{}{}",
        within(1),
        within(10),
        placed.len(),
        ranked - placed.len(),
        median.map_or(String::new(), |m| format!("; median place of those placed #{m}")),
        if refused > 0 {
            format!("; {refused} not ranked (the --stack profile's stack does not run them, or rank refused)")
        } else {
            String::new()
        }
    );
}
