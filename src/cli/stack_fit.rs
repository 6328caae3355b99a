//! `symshard calibrate --from-runs RUNS.yaml -o STACK.yaml`: a stack profile fitted on a
//! declared set of measured step times, with each parameter's uncertainty and the error with
//! each source left out in turn.

use super::output::{print_table, write_output};
use crate::calib::stack::{seconds_text, Param, StackProfile};
use crate::diag::Source;
use crate::error::Error;
use crate::validate::fit::{mean_abs, Fit, FitSet};
use std::path::Path;

/// Fits, writes and reports.
pub fn run(runs: &Path, output: &Path) -> Result<(), Error> {
    let name = output
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "measured".into());
    let set = FitSet::read(runs, &name)?;
    let fit = set.fit()?;
    let text = serde_yaml::to_string(&fit.file)
        .map_err(|e| Error::Internal(format!("a stack profile as YAML: {e}")))?;
    let text = format!(
        "# Written by `symshard calibrate --from-runs {}`.\n{text}",
        runs.display()
    );
    // It must load as any other profile.
    StackProfile::load(&Source::new(output, text.clone()))?;
    write_output(output, text.as_bytes(), &[runs])?;
    report(&fit);
    println!("wrote {}", output.display());
    Ok(())
}

fn report(fit: &Fit) {
    let sources = fit.file.fit.as_ref().map_or(0, |f| f.sources);
    println!(
        "stack profile {}: fitted on {} rows from {} source{}",
        fit.file.name,
        fit.rows.len(),
        sources,
        if sources == 1 { "" } else { "s" }
    );
    println!("parameters (± one standard error)");
    let rows: Vec<Vec<String>> = fit.params.iter().map(|p| param_row(fit, *p)).collect();
    print_table("  ", "<><", &["parameter", "value", "meaning"], &rows);
    println!("rows");
    let rows: Vec<Vec<String>> = fit
        .rows
        .iter()
        .map(|r| {
            vec![
                r.source.clone(),
                r.name.clone(),
                format!("{:.3} s", r.published),
                format!("{:.3} s", r.profile_free),
                format!("{:.3} s", r.fitted),
                format!("{:+.1}%", 100.0 * (r.fitted / r.published - 1.0)),
            ]
        })
        .collect();
    let head = [
        "source",
        "run",
        "published",
        "profile-free",
        "fitted",
        "error",
    ];
    print_table("  ", "<<>>>>", &head, &rows);
    let free = mean_abs(fit.rows.iter().map(|r| (r.published, r.profile_free)));
    let in_sample = mean_abs(fit.rows.iter().map(|r| (r.published, r.fitted)));
    println!(
        "in sample: mean |error| {:.1} % (profile-free {:.1} %)",
        100.0 * in_sample,
        100.0 * free
    );
    left_out(fit, in_sample);
}

fn param_row(fit: &Fit, p: Param) -> Vec<String> {
    let entry = fit.file.parameters.get(p.name());
    let value = entry.map_or(0.0, |e| e.value);
    let text = match (value > 0.0, entry.and_then(|e| e.uncertainty)) {
        (false, _) => "0 (at its bound: the rows ask for no more)".to_string(),
        (true, Some(u)) => format!("{} ± {}", seconds_text(value), seconds_text(u)),
        (true, None) => format!(
            "{} (uncertainty unknown: no more rows than parameters)",
            seconds_text(value)
        ),
    };
    vec![p.name().to_string(), text, p.meaning().to_string()]
}

fn left_out(fit: &Fit, in_sample: f64) {
    if fit.left_out.is_empty() {
        println!("left out in turn: nothing (a single row)");
        return;
    }
    let what = if fit.by_row { "row" } else { "source" };
    println!("each {what} left out, its rows predicted by the profile fitted on the rest");
    let rows: Vec<Vec<String>> = fit
        .left_out
        .iter()
        .map(|l| {
            let values: Vec<String> = fit
                .params
                .iter()
                .map(|p| format!("{} {}", p.name(), seconds_text(l.values[p])))
                .collect();
            let mut refit = values.join(", ");
            if l.underdetermined(fit.params.len()) {
                let rows = if l.kept == 1 { "row" } else { "rows" };
                refit += &format!(
                    " (underdetermined: {} {rows} for {} parameters)",
                    l.kept,
                    fit.params.len()
                );
            }
            vec![
                l.left_out.clone(),
                l.rows.len().to_string(),
                format!("{:.1} %", 100.0 * mean_abs(l.rows.iter().copied())),
                refit,
            ]
        })
        .collect();
    let head = [what, "rows", "mean |error|", "fitted without it"];
    print_table("  ", "<>><", &head, &rows);
    let loo = mean_abs(fit.left_out.iter().flat_map(|l| l.rows.iter().copied()));
    println!(
        "left out in turn: mean |error| {:.1} % (in sample {:.1} %, {:+.1} points)",
        100.0 * loo,
        100.0 * in_sample,
        100.0 * (loo - in_sample)
    );
    // The refits the profile records as underdetermined (`fit.underdetermined`).
    let short = fit
        .file
        .fit
        .as_ref()
        .map_or(&[][..], |f| &f.underdetermined[..]);
    if !short.is_empty() {
        println!(
            "  without {} the rest has fewer rows than parameters: that refit is one of many \
             that fit its rows equally well, and its error measures the fit set's size more \
             than the profile",
            short.join(", ")
        );
    }
}
