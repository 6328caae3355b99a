//! `rank`: every mesh shape of N devices, micro-batch counts, schedules, sequence parallelism,
//! recomputation and ZeRO stages, each priced exactly; feasible strategies first, by relative
//! cost.

use super::auto::{auto_tp_layout, same_as_annotated, AutoLayout};
use super::egraph::{egraph_layout, EGraphLayout};
use super::error::{Failed, FailureLog, Rejection, Rejections, SearchError};
use super::steer::Steer;
use crate::calib::stack::Stack;
use crate::calib::{Calibration, MachineRef};
use crate::model::Model;
use crate::parallel::evaluate::{
    block_numbers_summed, block_sums, check_divisibility, estimate_variants, evaluate_with,
    layer_count, microbatch_bindings, BlockNumbers, Estimate,
};
use crate::parallel::{analyse, check_model_limits, Analysis, Evaluation, Layout};
use crate::strategy::Tier;
use crate::strategy::{Knobs, Mesh, Precision, Recompute, Schedule, MAX_DEVICES};
use crate::sym::{Bindings, Rational};
use num_traits::{One, ToPrimitive};
use rayon::prelude::*;
use serde::Serialize;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Instant;

mod by_cost;
mod by_seconds;
mod jobs;
mod variants;
use by_cost::*;
pub use by_seconds::*;
use jobs::*;
use variants::*;

/// What to search.
#[derive(Debug, Clone)]
pub struct RankOptions {
    /// Devices.
    pub devices: u64,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// Rows to return.
    pub top: usize,
    /// Device memory in bytes.
    pub memory: Rational,
    /// Largest micro-batch count tried (default 512, `api::DEFAULT_MAX_MICROBATCHES`).
    pub max_microbatches: u64,
    /// Order the shown rows by simulated seconds per step on the calibration's machine (the
    /// strategies are still screened by relative cost first).
    pub seconds: bool,
    /// Most model chunks per device tried under the interleaved schedule (every count from 2
    /// up to this that divides the layers per stage).
    pub max_chunks: u64,
    /// Knobs fixed or capped by the user.
    pub steer: Steer,
    /// Also return the memory-versus-cost (or, ranking by seconds, memory-versus-time) Pareto
    /// frontier of the strategies that fit.
    pub pareto: bool,
    /// Which tensor-parallel layouts to price.
    pub layouts: Layouts,
}

/// Which tensor-parallel layouts `rank` prices for each degree tp > 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Layouts {
    /// The family's annotated (`tp:`) layout only: Megatron-LM's for the shipped transformers,
    /// everything replicated for a model without annotations.
    Annotated,
    /// The per-operator search's layout only.
    Auto,
    /// Both, ranked together (the auto layout is left out where it is the annotated one).
    #[default]
    Both,
}

/// Which layout a row uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutKind {
    /// The family's `tp:` annotations (at tp = 1, where no layout splits anything, every row
    /// is this).
    Annotated,
    /// The per-operator search's layout for the row's tensor-parallel degree.
    Auto,
    /// The auto layout as the e-graph pass rewrites it (operators moved to the cheapest
    /// equivalent placements the laws prove, [`super::egraph`]).
    EGraph,
}

impl LayoutKind {
    /// The name shown in tables.
    pub fn name(self) -> &'static str {
        match self {
            LayoutKind::Annotated => "annotated",
            LayoutKind::Auto => "auto",
            LayoutKind::EGraph => "auto+e-graph",
        }
    }
}

/// The layout of a row: its kind and, for the auto layout, the per-operator placements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowLayout {
    /// Which layout.
    pub kind: LayoutKind,
    /// The auto layout (placements and how it was found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoLayout>,
}

impl RowLayout {
    /// The annotated layout.
    pub fn annotated() -> RowLayout {
        RowLayout {
            kind: LayoutKind::Annotated,
            auto: None,
        }
    }

    /// The tensor-parallel overrides the layout applies (none for the annotated one).
    pub fn overrides(&self) -> BTreeMap<String, String> {
        self.auto
            .as_ref()
            .map(|a| a.placements.clone())
            .unwrap_or_default()
    }
}

/// Default for [`RankOptions::max_chunks`]: more chunks than this shrink the layers per
/// virtual stage below what keeps GEMMs and point-to-point messages efficient on the models
/// shipped, and multiply the search space.
pub const DEFAULT_MAX_CHUNKS: u64 = 8;

impl Default for RankOptions {
    fn default() -> Self {
        RankOptions {
            devices: 8,
            gpus_per_node: 8,
            top: 10,
            memory: Rational::from_integer(80_000_000_000u64.into()),
            max_microbatches: 512,
            seconds: false,
            max_chunks: DEFAULT_MAX_CHUNKS,
            steer: Steer::default(),
            pareto: false,
            layouts: Layouts::default(),
        }
    }
}

/// One ranked strategy.
#[derive(Debug, Clone, Serialize)]
pub struct RankedRow {
    /// 1-based rank.
    pub rank: usize,
    /// The evaluation.
    pub evaluation: Evaluation,
    /// Simulated seconds per training step, when ranking in seconds.
    pub seconds: Option<f64>,
    /// Other strategies with exactly the same cost (and seconds) and memory: the knobs in which
    /// they differ do not matter here.
    pub alike: Vec<Knobs>,
    /// The tensor-parallel layout.
    pub layout: RowLayout,
}

impl RankedRow {
    /// The row's layout as the evaluation takes it: its sequence parallelism and its
    /// tensor-parallel overrides.
    pub fn parallel_layout(&self) -> crate::parallel::Layout {
        crate::parallel::Layout {
            sequence_parallel: self.evaluation.knobs.sequence_parallel,
            tp_overrides: self.layout.overrides(),
        }
    }
}

/// The result of a search.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RankResult {
    /// Ranked rows (feasible first).
    pub rows: Vec<RankedRow>,
    /// Strategies evaluated.
    pub evaluated: usize,
    /// Feasible among them.
    pub feasible: usize,
    /// Strategies rejected before pricing, by kind and reason.
    pub rejected: Rejections,
    /// Strategies that passed the screen but could not be priced exactly or simulated.
    pub failed: Failed,
    /// Strategies simulated to find the fastest (ranking in seconds).
    pub simulated: usize,
    /// Range of the factor λ scaling every κ over which the top strategy stays first.
    #[serde(skip)]
    pub balance_range: Option<(Rational, Option<Rational>)>,
    /// Seconds spent.
    pub search_seconds: f64,
    /// The Pareto frontier of memory against cost (or seconds), smallest memory first, when
    /// asked for.
    pub pareto: Vec<RankedRow>,
    /// When no strategy fits: the strategy with the smallest memory footprint, and its layout.
    pub smallest: Option<(Evaluation, RowLayout)>,
    /// The cheapest strategy regardless of memory, when none fits.
    pub cheapest: Option<Evaluation>,
    /// The auto layouts priced, one per tensor-parallel degree (placements, how they were
    /// found).
    pub auto_layouts: Vec<AutoLayout>,
    /// Degrees whose auto layout could not be found, and why.
    pub auto_failed: BTreeMap<u64, SearchError>,
    /// Degrees whose auto layout is the annotated one (priced once, as annotated).
    pub auto_same: Vec<u64>,
    /// Seconds spent finding the auto layouts.
    pub auto_seconds: f64,
    /// The e-graph's variants of the auto layouts, one per degree where the extraction moved
    /// an operator.
    pub egraph_layouts: Vec<EGraphLayout>,
    /// Degrees whose e-graph pass failed, and why.
    pub egraph_failed: BTreeMap<u64, String>,
}

/// A row's identity for grouping: strategies with equal keys differ only in knobs that do not
/// matter.
fn same(a: &Evaluation, sa: Option<f64>, b: &Evaluation, sb: Option<f64>) -> bool {
    sa == sb
        && a.feasible == b.feasible
        && a.relative.total == b.relative.total
        && a.memory.total == b.memory.total
}

/// How rows of equal cost and memory are told apart and ordered: the annotated layout first,
/// then the auto layouts by degree (each degree's auto layout is its own).
fn layout_key(kind: LayoutKind, e: &Evaluation) -> (LayoutKind, u64) {
    match kind {
        LayoutKind::Annotated => (kind, 0),
        LayoutKind::Auto | LayoutKind::EGraph => (kind, e.knobs.tp),
    }
}

/// A priced row: the evaluation, its simulated seconds (ranking in seconds) and its layout.
type Priced = (Evaluation, Option<f64>, RowLayout);

/// Groups sorted rows whose cost, seconds, memory and layout kind are equal and keeps the first
/// `top` groups.
fn group(rows: Vec<Priced>, top: usize) -> Vec<RankedRow> {
    grouped(rows, |out, _, _| out.len() < top)
}

/// Sorted rows with equal ones (adjacent) joined into one group; a row that starts a new group
/// is kept when `keep` says so given the groups so far.
fn grouped(
    rows: Vec<Priced>,
    keep: impl Fn(&[RankedRow], &Evaluation, Option<f64>) -> bool,
) -> Vec<RankedRow> {
    let mut out: Vec<RankedRow> = Vec::new();
    for (e, t, layout) in rows {
        if let Some(g) = out.last_mut().filter(|g| {
            same(&g.evaluation, g.seconds, &e, t)
                && layout_key(g.layout.kind, &g.evaluation) == layout_key(layout.kind, &e)
        }) {
            g.alike.push(e.knobs);
            continue;
        }
        if keep(&out, &e, t) {
            out.push(RankedRow {
                rank: out.len() + 1,
                evaluation: e,
                seconds: t,
                alike: Vec::new(),
                layout,
            });
        }
    }
    out
}

/// Evaluated blocks of one (dp, tp, micro-batches, sequence-parallel, cp) choice, or why not.
type Numbers = Result<Vec<BlockNumbers>, crate::strategy::StrategyError>;

/// The key of [`Numbers`]: (dp, tp, micro-batches, sequence parallelism, cp, layout variant).
type NumbersKey = (u64, u64, u64, bool, u64, usize);

/// The cache of evaluated blocks.
type Cache = BTreeMap<NumbersKey, Numbers>;

/// What a strategy's timing chains depend on: its blocks' numbers, its expert-parallel degree,
/// whether its gradients are sharded, whether its schedule splits the backward, and the stack
/// whose rates it is timed with (`None`: the table's, for every strategy, unless rows are
/// priced per stack).
type ChainKey = (NumbersKey, u64, bool, bool, Option<Stack>);

fn numbers_key(c: &Cand) -> NumbersKey {
    let k = &c.k;
    (k.dp, k.tp, k.microbatches, k.sequence_parallel, k.cp, c.v)
}

/// One unit of the search's pricing, in the order the search meets it.
enum Job {
    /// A mesh shape or strategy set aside, and why.
    Reject(Rejection),
    /// A mesh shape's strategies with this micro-batch count (in `base`) and layout variant.
    Price {
        /// The strategy's mesh, micro-batches and sequence parallelism; every other knob is
        /// varied.
        base: Knobs,
        /// Index into [`Variants`].
        v: usize,
        /// Samples per data-parallel rank.
        per_dp: u64,
    },
}

/// What pricing a [`Job::Price`] gives: its blocks' numbers under their cache key, and each
/// strategy's estimate or why it was set aside, in order.
type JobPriced = (
    NumbersKey,
    Numbers,
    Vec<Result<(Cand, Estimate), Rejection>>,
);

/// A strategy as the search holds it: its knobs and its layout variant.
#[derive(Debug, Clone, PartialEq)]
struct Cand {
    k: Knobs,
    /// Index into [`Variants`].
    v: usize,
}

/// Fewest tokens of each sequence a context-parallel rank keeps for `rank` to try cp > 1
/// unasked: shorter slices leave each ring step too little attention work to hide the key and
/// value exchange behind. Published Megatron-Core runs go down to 4,096: NVIDIA's Llama 3.1
/// pre-training recipes run cp = 2 at 8,192 tokens for 8B, 70B and 405B (NVIDIA/dgxc-benchmarking,
/// llama3.1/README_8b.md at 143b90dd, README_70b.md and README_405b.md at 8f5cbb37), as NeMo's
/// Llama 3 70B recipe does by default (NVIDIA/NeMo, nemo/collections/llm/recipes/llama3_70b.py,
/// `trainer`: `context_parallelism = 2`); Llama 3's long-context stage ran cp = 16 at 131,072
/// tokens, 8,192 per rank (Grattafiori et al. 2024, "The Llama 3 Herd of Models", §3.3.2,
/// arXiv:2407.21783).
pub const MIN_CP_TOKENS: u64 = 4096;

/// Largest context-parallel degree `rank` tries unasked.
pub const MAX_CP: u64 = 32;

fn reject(rejected: &mut Rejections, why: impl Into<Rejection>) {
    rejected.add(&why.into());
}

/// Ranks the strategies of `model` on `opts.devices` devices.
pub fn rank(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &RankOptions,
) -> Result<RankResult, SearchError> {
    rank_with_progress(model, values, calib, opts, &mut |_, _| {})
}

/// [`rank`], reporting (mesh shapes done, mesh shapes in all) as it goes.
pub fn rank_with_progress(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &RankOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<RankResult, SearchError> {
    // A precision the machine cannot run refuses the search, not each strategy; `any` searches
    // those it runs.
    let precisions = if opts.steer.any_precision {
        Precision::SEARCHED
            .into_iter()
            .filter(|p| crate::parallel::check_precision(calib, *p).is_ok())
            .collect()
    } else {
        let p = opts.steer.precision.unwrap_or_default();
        crate::parallel::check_precision(calib, p)?;
        vec![p]
    };
    let failures = FailureLog::default();
    let ctx = Ctx {
        opts,
        failures: &failures,
        precisions,
    };
    let mut result = search(model, values, calib, &ctx, progress)?;
    result.failed = failures.summary();
    Ok(result)
}

/// The options of one search, with the log of the strategies it could not price.
struct Ctx<'a> {
    opts: &'a RankOptions,
    failures: &'a FailureLog,
    /// The precisions searched: the one fixed (bf16 by default), or under `precision=any`
    /// every one the machine runs.
    precisions: Vec<Precision>,
}

impl std::ops::Deref for Ctx<'_> {
    type Target = RankOptions;
    fn deref(&self) -> &RankOptions {
        self.opts
    }
}

/// [`rank_with_progress`]'s search: the layouts to price (`Variants::new`, `auto_layouts`), the
/// jobs of every mesh shape (`jobs`), each priced in floating point (`Pricer::price_job`), the
/// estimates in order (`in_order`), then the shown rows priced exactly, by relative cost
/// (`rank_by_cost`) or by seconds (`rank_by_seconds`).
fn search(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<RankResult, SearchError> {
    let start = Instant::now();
    check_devices(opts)?;
    let mut variants = Variants::new(model, values)?;
    opts.steer.check_devices(opts.devices)?;
    let meshes = mesh_shapes(model, values, opts);
    let auto = auto_layouts(model, values, calib, opts, &meshes, &mut variants)?;
    let batch = model
        .batch_value(values)
        .cloned()
        .unwrap_or_else(Rational::one);
    let jobs = jobs(model, values, opts, &meshes, &variants, &auto, &batch);
    let pricer = Pricer::new(model, values, calib, opts, &variants);
    let mut cache: Cache = BTreeMap::new();
    let mut rejected = Rejections::default();
    let mut estimates: Vec<(Cand, Estimate)> = Vec::new();
    // In chunks, so that progress is reported as the shapes are done.
    let chunk = (jobs.len() / 32).max(64);
    for part in jobs.chunks(chunk) {
        let priced: Vec<Option<JobPriced>> = part
            .par_iter()
            .map(|(_, job)| match job {
                Job::Reject(_) => None,
                Job::Price { base, v, per_dp } => Some(pricer.price_job(base, *v, *per_dp)),
            })
            .collect();
        for ((_, job), p) in part.iter().zip(priced) {
            if let Job::Reject(why) = job {
                reject(&mut rejected, why.clone());
            }
            let Some((key, numbers, out)) = p else {
                continue;
            };
            cache.entry(key).or_insert(numbers);
            for x in out {
                match x {
                    Ok(e) => estimates.push(e),
                    Err(why) => reject(&mut rejected, why),
                }
            }
        }
        if let Some((done, _)) = part.last() {
            progress(*done, meshes.len());
        }
    }
    if estimates.is_empty() && !opts.steer.is_free() {
        return Err(no_strategy(opts, &rejected));
    }
    let evaluated = estimates.len();
    let (estimates, feasible) = in_order(estimates, &opts.memory);
    let found = Found {
        variants: &variants,
        cache: &cache,
        estimates: &estimates,
    };
    let kappa = |t: Tier| pricer.kappa.of(t);
    let mut r = if opts.seconds {
        rank_by_seconds(
            model,
            values,
            calib,
            opts,
            SecondsSearch {
                variants: &variants,
                cache: &cache,
                estimates: &estimates,
                kappa: &kappa,
                evaluated,
                feasible,
                rejected,
                start,
            },
        )?
    } else {
        rank_by_cost(
            model, calib, opts, &found, evaluated, feasible, rejected, start,
        )
    };
    r.auto_layouts = variants.autos.into_values().collect();
    r.auto_failed = auto.failed;
    r.auto_same = auto.same;
    r.auto_seconds = auto.seconds;
    r.egraph_layouts = variants.egraphs.into_values().collect();
    r.egraph_failed = auto.egraph_failed;
    Ok(r)
}

/// Refuses no devices and absurdly many.
fn check_devices(opts: &RankOptions) -> Result<(), SearchError> {
    if opts.devices == 0 {
        return Err(SearchError::NoDevices);
    }
    if opts.devices > MAX_DEVICES {
        return Err(SearchError::AbsurdDevices {
            devices: opts.devices,
            most: MAX_DEVICES,
        });
    }
    Ok(())
}

/// Why a steered search found nothing: the three commonest reasons.
fn no_strategy(opts: &Ctx, rejected: &Rejections) -> SearchError {
    let by_message = rejected.by_message();
    let mut why: Vec<(&String, &usize)> = by_message.iter().collect();
    why.sort_by(|a, b| b.1.cmp(a.1));
    let why: Vec<String> = why
        .iter()
        .take(3)
        .map(|(w, n)| format!("{n}× {w}"))
        .collect();
    SearchError::NoStrategy {
        devices: opts.devices,
        steer: opts.steer.to_string(),
        rejected: why.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::RelativeCost;

    fn top(flop: i64, bytes: i64) -> RelativeCost {
        RelativeCost {
            flop_part: Rational::from_integer(flop.into()),
            byte_part: Rational::from_integer(bytes.into()),
            ..RelativeCost::default()
        }
    }

    /// A strategy that beats the top one once κ is scaled past 2 bounds the interval there; one
    /// with the top's line up to float rounding (its knobs do not matter) bounds nothing, where
    /// before its rounding noise set the bound (at exactly 1 on llama3-8b, 64 devices).
    #[test]
    fn stability_ignores_the_tops_twins() {
        let t = top(1_000_000, 100_000);
        // Cheaper in bytes, dearer in FLOPs: equal at λ = 2.
        let other = (1_100_000.0, 50_000.0);
        let (_, hi) = stability(&t, &[other]);
        assert_eq!(hi, Some(Rational::from_integer(2.into())));
        let twin = (1_000_000.0 + 1e-10, 100_000.0 - 1e-10);
        let (lo, hi) = stability(&t, &[twin]);
        assert_eq!((lo, hi), (Rational::from_integer(0.into()), None));
        let (_, hi) = stability(&t, &[twin, other]);
        assert_eq!(hi, Some(Rational::from_integer(2.into())));
    }
}
