//! Running rewrites, always bounded.

use super::analysis::{DistAnalysis, DistEGraph};
use super::collective::collective_rewrites;
use super::error::RewriteError;
use super::lang::Dist;
use super::laws::{commute_rewrites, law_rewrites};
use crate::error::{Error, Result};
use crate::rules::OpRule;
use egg::{Rewrite, Runner, SimpleScheduler, StopReason};
use serde::Serialize;
use std::time::Duration;

/// The bounds every run has.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Most iterations.
    pub iterations: usize,
    /// Most e-nodes.
    pub nodes: usize,
    /// Most wall-clock time.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            iterations: 40,
            nodes: 100_000,
            time: Duration::from_secs(20),
        }
    }
}

impl Limits {
    /// A runner over `egraph` with these bounds and the simple scheduler (no rule is banned, so
    /// a run that ends saturated has applied every rewrite everywhere).
    pub fn runner(&self, egraph: DistEGraph) -> Runner<Dist, DistAnalysis> {
        Runner::new(egraph.analysis.clone())
            .with_egraph(egraph)
            .with_iter_limit(self.iterations)
            .with_node_limit(self.nodes)
            .with_time_limit(self.time)
            .with_scheduler(SimpleScheduler)
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStats {
    /// Why it stopped: `saturated`, or the limit it hit.
    pub stop_reason: String,
    /// Whether it saturated (every rewrite applied everywhere, nothing new).
    pub saturated: bool,
    /// Iterations run.
    pub iterations: usize,
    /// E-nodes at the end.
    pub egraph_nodes: usize,
    /// E-classes at the end.
    pub egraph_classes: usize,
    /// Seconds spent.
    pub seconds: f64,
    /// Rewrite results refused by the shape and placement check.
    pub rejected: usize,
    /// Merges of classes with different data (zero when every rewrite is sound).
    pub conflicts: usize,
}

impl RunStats {
    /// The statistics of a finished runner.
    pub fn of(runner: &Runner<Dist, DistAnalysis>) -> RunStats {
        let (stop_reason, saturated) = match &runner.stop_reason {
            Some(StopReason::Saturated) => ("saturated".to_string(), true),
            Some(StopReason::IterationLimit(n)) => (format!("iteration limit ({n})"), false),
            Some(StopReason::NodeLimit(n)) => (format!("e-node limit ({n})"), false),
            Some(StopReason::TimeLimit(s)) => (format!("time limit ({s} s)"), false),
            Some(StopReason::Other(why)) => (why.clone(), false),
            None => ("not run".to_string(), false),
        };
        RunStats {
            stop_reason,
            saturated,
            iterations: runner.iterations.len(),
            egraph_nodes: runner.egraph.total_number_of_nodes(),
            egraph_classes: runner.egraph.number_of_classes(),
            seconds: runner.iterations.iter().map(|i| i.total_time).sum(),
            rejected: runner.egraph.analysis.stats.rejected,
            conflicts: runner.egraph.analysis.stats.conflicts,
        }
    }
}

/// Every rewrite for programs over `rules`: their laws, their commuting rewrites and the
/// collective algebra.
pub fn rewrites<'a>(
    rules: impl IntoIterator<Item = &'a OpRule>,
) -> Result<Vec<Rewrite<Dist, DistAnalysis>>> {
    let mut out = collective_rewrites().map_err(built_in)?;
    for rule in rules {
        let wrap = |e| rule_rewrites(&rule.name, e);
        out.extend(law_rewrites(rule).map_err(wrap)?);
        out.extend(commute_rewrites(rule).map_err(wrap)?);
    }
    Ok(out)
}

/// The collective rewrites, which ship with symshard, failed to build: a bug, not bad input.
pub(crate) fn built_in(e: RewriteError) -> Error {
    Error::Internal(format!(
        "cannot build the built-in collective rewrites: {e}"
    ))
}

/// The rewrites of rule `name`'s laws failed to build: the rule file is at fault.
pub(crate) fn rule_rewrites(name: &str, e: RewriteError) -> Error {
    Error::Usage(format!("rule `{name}`: cannot build its rewrites: {e}"))
}
