//! The brute-force audit of derived split costs.
//!
//! For every split a rule allows, on small meshes (`plan`), the audit picks small concrete sizes,
//! enumerates the operator's iteration space point by point, gives each point to the device that
//! computes it, and counts per device what the derivation ([`crate::rules::split`]) predicts:
//! FLOPs, the placement of every tensor read and written, the elements several devices contribute
//! to (partial results and their all-reduce), the normalised rows spanning devices (statistics
//! all-reduce) and the elements a device needs from its neighbours (halo exchange). The counting
//! ([`count`]) never reads the derivation; [`compare`] puts the two side by side, and every
//! quantity must be exactly equal.
//!
//! Counting conventions are the rules' own: an einsum term costs `(inputs − 1)` multiplies per
//! point plus one add when it sums an index; terms are added with one add per output element;
//! explicit FLOP formulas are spread evenly over the iteration space; bytes are the tensor's
//! element size (2 for the compute type) and 4 per statistic; per-rank wire bytes of an all-reduce
//! are `2(n − 1)/n` of its size.

mod compare;
mod count;
mod infer;
mod plan;
mod space;
mod tally;
mod window;

pub use compare::{compare, derived_key, number, ring_all_reduce, Check, Pass, Verdict};
pub use count::{
    count, CollectiveKey, Counted, CountedCollective, CountedPlacement, PassCount, TensorCount,
    STATISTIC_BYTES,
};
pub use plan::{case, cases, Case, Split, AXIS_NAMES, BUDGET, PAIR_MESHES, SINGLE_MESHES};
pub use window::{Geometry, GEOMETRIES};

use crate::error::Result;
use crate::rules::split::derive;
use crate::rules::OpRule;
use serde::Serialize;

/// Bytes of a compute element the audit assumes (bf16).
pub const DTYPE_BYTES: u32 = 2;

/// A case the derivation refuses although the law table allows its indices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The rule.
    pub rule: String,
    /// The split.
    pub split: String,
    /// Devices per axis.
    pub mesh: String,
    /// The derivation's reason.
    pub reason: String,
}

/// The audit of a set of rules.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Rules audited.
    pub rules: usize,
    /// Splits audited: distinct (rule, split indices) pairs over all meshes and geometries.
    pub splits: usize,
    /// Cases (rule, split, mesh, window geometry) audited.
    pub cases: usize,
    /// Quantities compared.
    pub checked: usize,
    /// Number of checks that fail: derived and counted differ, or agree on a negative amount.
    pub mismatches: usize,
    /// The checks (all of them, unless filtered with [`Report::keep_failures`]).
    pub checks: Vec<Check>,
    /// Cases the derivation refused.
    pub refused: Vec<Refused>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }

    /// `N checks, M mismatches`.
    pub fn summary(&self) -> String {
        format!("{} checks, {} mismatches", self.checked, self.mismatches)
    }

    /// Every count: rules, splits, cases, checks, mismatches, each written by `count`.
    pub fn long_summary(&self, count: impl Fn(usize) -> String) -> String {
        format!(
            "{} rules, {} splits, {} cases, {} checks, {} mismatches",
            count(self.rules),
            count(self.splits),
            count(self.cases),
            count(self.checked),
            count(self.mismatches)
        )
    }

    /// Drops the checks that passed (the counts stay).
    pub fn keep_failures(&mut self) {
        self.checks.retain(|c| c.verdict != Verdict::Ok);
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.verdict != Verdict::Ok)
    }
}

/// Audits every case of every rule.
pub fn audit<'a>(rules: impl IntoIterator<Item = &'a OpRule>) -> Result<Report> {
    let mut report = Report {
        rules: 0,
        splits: 0,
        cases: 0,
        checked: 0,
        mismatches: 0,
        checks: Vec::new(),
        refused: Vec::new(),
    };
    for rule in rules {
        report.rules += 1;
        for case in cases(rule)? {
            match audit_case(rule, &case)? {
                Ok(checks) => {
                    report.cases += 1;
                    report.checks.extend(checks);
                }
                Err(refused) => report.refused.push(refused),
            }
        }
    }
    report.checked = report.checks.len();
    let splits: std::collections::BTreeSet<(&str, &str)> = report
        .checks
        .iter()
        .map(|c| (c.rule.as_str(), c.split.as_str()))
        .collect();
    report.splits = splits.len();
    report.mismatches = report.failures().count();
    Ok(report)
}

/// Derives, counts and compares one case; `Err(Refused)` when the derivation refuses the split.
pub fn audit_case(rule: &OpRule, case: &Case) -> Result<Result<Vec<Check>, Refused>> {
    let entry = match derive(rule, &case.axis_splits(), DTYPE_BYTES) {
        Ok(e) => e,
        Err(e) => {
            return Ok(Err(Refused {
                rule: rule.name.clone(),
                split: case.split_label(),
                mesh: case.mesh_label(),
                reason: e.reason,
            }))
        }
    };
    let counted = count(rule, case)?;
    let mut checks = compare(case, &entry, &counted)?;
    checks.extend(io_checks(rule, case, &counted)?);
    Ok(Ok(checks))
}

/// The bytes each pass's kernels read and write on one device: the rule's formulas
/// ([`OpRule::io_bytes`], [`OpRule::backward_io_bytes`]) with every split index divided by its
/// devices, as analyses and timelines use them, against brute force. A rule that states its
/// forward bytes itself (`io:`) is checked in the backward pass only.
///
/// Two kinds of case are left out, because the enumeration cannot see what the formulas count or
/// the other way round: a tensor with a stated extent (`extents:`, e.g. concatenation), whose
/// elements beyond the iteration space brute force never visits; and a split of a window index,
/// where each device also reads its neighbours' halo rows, which the per-device formulas leave
/// out (the halo exchange itself is checked as a collective).
fn io_checks(rule: &OpRule, case: &Case, counted: &count::Counted) -> Result<Vec<Check>> {
    use crate::sym::Poly;
    let tensors = || rule.inputs.iter().chain([&rule.output]).chain(&rule.saved);
    let extents = tensors().any(|t| !t.extents.is_empty());
    let halo = case
        .splits
        .iter()
        .any(|s| tensors().any(|t| case.window(&t.name, &s.index).is_some()));
    if extents || halo {
        return Ok(Vec::new());
    }
    let b = case.bindings();
    let per_device = |(r, w): (Poly, Poly)| -> Result<crate::sym::Rational> {
        let splits = case
            .splits
            .iter()
            .map(|s| (s.index.as_str(), Poly::int(i64::from(s.devices))));
        let p = crate::parallel::analysis::per_device_bytes(&r, &w, splits)
            .map_err(crate::error::Error::Usage)?;
        p.eval(&b).map_err(|e| {
            rule.error_at(
                &["io"],
                format!(
                    "rule `{}`: bytes formula `{p}` at the audit's sizes: {e}",
                    rule.name
                ),
            )
        })
    };
    let sizes: Vec<String> = case.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut out = Vec::new();
    let mut passes = Vec::new();
    if rule.io.is_none() {
        passes.push((Pass::Forward, rule.io_bytes(DTYPE_BYTES), &counted.forward));
    }
    passes.push((
        Pass::Backward,
        rule.backward_io_bytes(DTYPE_BYTES),
        &counted.backward,
    ));
    for (pass, formula, count) in passes {
        let derived = number(&per_device(formula)?);
        out.push(Check::new(
            case,
            &sizes.join(" "),
            pass,
            "HBM bytes read and written per device".into(),
            derived,
            count.io_bytes.to_string(),
        ));
    }
    Ok(out)
}
