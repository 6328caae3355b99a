//! `symshard audit`: every derived split cost against brute-force counting on small shapes.

use super::output::print_json;
use super::Format;
use crate::audit::{self, Report};
use crate::diag::Source;
use crate::error::Error;
use crate::rules::{load_rule, OpRule, RuleSet};
use clap::Args;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Arguments of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Rule files (or names of shipped rules); every shipped rule when none is given. A file's
    /// name need not match the rule's.
    #[arg(value_name = "RULE_FILES")]
    pub rules: Vec<String>,
    /// Print only the checks that fail (and the summary): the default for tables; for JSON,
    /// drops the passing checks.
    #[arg(long, conflicts_with = "verbose")]
    pub failures: bool,
    /// Print every check, passing or not (tables show only the failures by default).
    #[arg(long, short)]
    pub verbose: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `audit`. Exits with status 1 when a check fails, after printing the report.
pub fn run(args: AuditArgs) -> Result<(), Error> {
    let set = RuleSet::embedded()?;
    let rules: Vec<OpRule> = if args.rules.is_empty() {
        set.iter().cloned().collect()
    } else {
        args.rules
            .iter()
            .map(|r| load(&set, r))
            .collect::<Result<_, _>>()?
    };
    let mut report = audit::audit(&rules)?;
    let table = args.format == Format::Table;
    if args.failures || (table && !args.verbose) {
        report.keep_failures();
    }
    match args.format {
        Format::Json => print_json(&report)?,
        Format::Table => print!("{}", render(&report)),
    }
    if !report.passed() {
        let _ = std::io::stdout().flush();
        return Err(Error::Check(
            "the audit found failures (see the table above)".into(),
        ));
    }
    Ok(())
}

/// A rule file, or a shipped rule by name.
fn load(set: &RuleSet, arg: &str) -> Result<OpRule, Error> {
    let path = Path::new(arg);
    if path.is_file() {
        return load_rule(&Source::read(path)?, None);
    }
    if arg.ends_with(".yaml") || arg.ends_with(".yml") {
        return Err(Error::Usage(format!("rule file `{arg}` does not exist")));
    }
    set.resolve(arg)
}

/// The report's checks as a table (none when all were filtered out), then one line per refused
/// case and the summary.
pub fn render(report: &Report) -> String {
    let header = [
        "rule", "split", "mesh", "pass", "quantity", "derived", "counted", "verdict",
    ];
    let rows: Vec<[String; 8]> = report
        .checks
        .iter()
        .map(|c| {
            [
                c.rule.clone(),
                c.split.clone(),
                c.mesh.clone(),
                c.pass.to_string(),
                c.quantity.clone(),
                c.derived.clone(),
                c.counted.clone(),
                c.verdict.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &[&str]| {
        let mut out = String::new();
        for (k, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if k + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = w - cell.chars().count();
                let _ = write!(out, "{cell}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(s, "{}", out.trim_end());
    };
    if !rows.is_empty() {
        line(&mut s, &header);
    }
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut s, &cells);
    }
    for r in &report.refused {
        let _ = writeln!(
            s,
            "refused: {} split {} on {}: {}",
            r.rule, r.split, r.mesh, r.reason
        );
    }
    let count = |x: usize| super::units::tally(x as u64);
    let _ = writeln!(s, "audit: {}", report.long_summary(count));
    s
}
