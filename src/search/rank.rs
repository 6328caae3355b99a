//! `rank`: every mesh shape of N devices, micro-batch counts, schedules, sequence parallelism,
//! recomputation and ZeRO stages, each priced exactly; feasible strategies first, by relative
//! cost.

use super::auto::{auto_tp_layout, same_as_annotated, AutoLayout};
use super::egraph::{egraph_layout, EGraphLayout};
use super::error::{Failed, FailureLog, Rejection, Rejections, SearchError};
use super::steer::Steer;
use crate::calib::stack::Stack;
use crate::calib::Calibration;
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
#[derive(Debug, Clone, Serialize)]
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

/// One layout the search prices: sequence parallelism on or off, the annotated layout or a
/// degree's auto layout, analysed and bound once.
struct Variant {
    /// Sequence parallelism.
    sp: bool,
    /// Whether it is an auto layout (the auto layout of the strategy's degree: the layouts are
    /// symbolic in the degree, so degrees whose searches agree share one).
    auto: bool,
    /// Whether sequence parallelism changes anything (it splits the operators the layout
    /// replicates; an auto layout may replicate none).
    sp_matters: bool,
    /// Whether it is the e-graph's variant of an auto layout.
    egraph: bool,
    analysis: Analysis,
    sums: Vec<crate::parallel::evaluate::BlockSums>,
}

/// The layouts priced.
struct Variants {
    list: Vec<Variant>,
    /// The auto layout of each degree.
    autos: BTreeMap<u64, AutoLayout>,
    /// The e-graph's variant of each degree's auto layout.
    egraphs: BTreeMap<u64, EGraphLayout>,
}

impl Variants {
    fn analysis(&self, c: &Cand) -> &Analysis {
        &self.list[c.v].analysis
    }

    fn kind(&self, v: usize) -> LayoutKind {
        if self.list[v].egraph {
            LayoutKind::EGraph
        } else if self.list[v].auto {
            LayoutKind::Auto
        } else {
            LayoutKind::Annotated
        }
    }

    fn key(&self, v: usize, e: &Evaluation) -> (LayoutKind, u64) {
        layout_key(self.kind(v), e)
    }

    fn layout(&self, v: usize, tp: u64) -> RowLayout {
        if self.list[v].egraph {
            return RowLayout {
                kind: LayoutKind::EGraph,
                auto: self
                    .autos
                    .get(&tp)
                    .zip(self.egraphs.get(&tp))
                    .map(|(a, e)| AutoLayout {
                        placements: e.placements.clone(),
                        ..a.clone()
                    }),
            };
        }
        match self.list[v].auto {
            true => RowLayout {
                kind: LayoutKind::Auto,
                auto: self.autos.get(&tp).cloned(),
            },
            false => RowLayout::annotated(),
        }
    }
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

/// The context-parallel degrees worth trying for `devices / tp` devices: 1, and every divisor
/// up to [`MAX_CP`] that keeps 2·cp dividing S and at least [`MIN_CP_TOKENS`] tokens per rank
/// (a degree fixed by `--fix cp=` needs only the first and the model's checks).
fn context_degrees(model: &Model, values: &Bindings, left: u64, steer: &Steer) -> Vec<u64> {
    let seq = model
        .roles
        .sequence
        .as_ref()
        .and_then(|s| values.get(s))
        .filter(|s| s.is_integer())
        .and_then(|s| s.to_integer().to_u64());
    divisors(left)
        .into_iter()
        .filter(|&cp| {
            if !steer.cp.allows(cp) {
                return false;
            }
            if cp == 1 {
                return true;
            }
            let asked = steer.cp.fixed == Some(cp);
            let Some(seq) = seq else { return asked };
            // A degree asked for is kept so that, if the model refuses it, the search says why.
            asked
                || (cp <= MAX_CP
                    && seq / cp >= MIN_CP_TOKENS
                    && crate::parallel::check_context_parallel(model, values, cp).is_ok())
        })
        .collect()
}

fn divisors(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (1..=n)
        .take_while(|d| d * d <= n)
        .filter(|d| n.is_multiple_of(*d))
        .collect();
    let big: Vec<u64> = v
        .iter()
        .rev()
        .map(|d| n / d)
        .filter(|d| d * d != n)
        .collect();
    v.extend(big);
    v
}

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

impl Variants {
    /// The annotated layout, without and with sequence parallelism.
    fn new(model: &Model, values: &Bindings) -> Result<Variants, SearchError> {
        let none = BTreeMap::new();
        Ok(Variants {
            list: vec![
                Variant::new(model, values, false, &none, false)?,
                Variant::new(model, values, true, &none, false)?,
            ],
            autos: BTreeMap::new(),
            egraphs: BTreeMap::new(),
        })
    }
}

impl Variant {
    /// A layout analysed once: its context-parallel analysis (at p_cp = 1 it evaluates exactly
    /// as the plain one), each block's per-operator polynomials summed once, for every (dp, tp,
    /// micro-batch) choice. Every symbol the search does not vary is bound (all but the batch,
    /// which micro-batching divides, and the vocabulary, which tensor parallelism may pad).
    fn new(
        model: &Model,
        values: &Bindings,
        sp: bool,
        overrides: &BTreeMap<String, String>,
        auto: bool,
    ) -> Result<Variant, SearchError> {
        let mut fixed = values.clone();
        if let Some(b) = &model.batch {
            fixed.remove(b);
        }
        if let Some(v) = &model.roles.vocab {
            fixed.remove(v);
        }
        let layout = Layout {
            sequence_parallel: sp,
            tp_overrides: overrides.clone(),
        };
        let off = Layout {
            sequence_parallel: false,
            ..layout.clone()
        };
        let sp_matters = !auto
            || model.ops().any(|(_, n)| {
                crate::parallel::plan(n, &layout, model) != crate::parallel::plan(n, &off, model)
            });
        analyse(model, &layout)
            .without_split_entries()
            .into_context_parallel()
            .into_bound(&fixed)
            .map_err(SearchError::from)
            .map(|analysis| Variant {
                sp,
                auto,
                sp_matters,
                egraph: false,
                sums: block_sums(&analysis),
                analysis,
            })
    }
}

/// Every mesh shape (tp, cp, pp) of `opts.devices`, context-parallel degrees as
/// [`context_degrees`] allows them.
fn mesh_shapes(model: &Model, values: &Bindings, opts: &Ctx) -> Vec<(u64, u64, u64)> {
    divisors(opts.devices)
        .into_iter()
        .flat_map(|tp| {
            context_degrees(model, values, opts.devices / tp, &opts.steer)
                .into_iter()
                .flat_map(move |cp| {
                    divisors(opts.devices / tp / cp)
                        .into_iter()
                        .map(move |pp| (tp, cp, pp))
                })
        })
        .collect()
}

/// The auto layouts of a search: per degree, its variants (without and with sequence
/// parallelism), and the degrees whose search failed or found the annotated layout.
#[derive(Default)]
struct AutoVariants {
    /// Per degree: the variants of its auto layout.
    variants: BTreeMap<u64, [usize; 2]>,
    /// Degrees whose search failed, and why.
    failed: BTreeMap<u64, SearchError>,
    /// Degrees whose auto layout is the annotated one.
    same: Vec<u64>,
    /// Per degree: the variant of the e-graph's rewrite of its auto layout.
    egraph: BTreeMap<u64, usize>,
    /// Degrees whose e-graph pass failed, and why.
    egraph_failed: BTreeMap<u64, String>,
    /// Seconds spent.
    seconds: f64,
}

/// The auto layout of every tensor-parallel degree a mesh allowed by the steering uses, found
/// once per degree (in parallel) and analysed with and without sequence parallelism into
/// `variants`.
fn auto_layouts(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    meshes: &[(u64, u64, u64)],
    variants: &mut Variants,
) -> Result<AutoVariants, SearchError> {
    let auto_start = Instant::now();
    let steer = &opts.steer;
    let mut auto = AutoVariants::default();
    let (auto_failed, auto_same, auto_variants) =
        (&mut auto.failed, &mut auto.same, &mut auto.variants);
    let variant = |sp: bool, overrides: &BTreeMap<String, String>, auto: bool| {
        Variant::new(model, values, sp, overrides, auto)
    };
    if opts.layouts != Layouts::Annotated {
        let mut tps: Vec<u64> = meshes
            .iter()
            .filter(|&&(tp, cp, pp)| {
                tp > 1 && steer.allows_mesh(opts.devices / tp / pp / cp, tp, pp)
            })
            .map(|m| m.0)
            .collect();
        tps.sort_unstable();
        tps.dedup();
        let found: Vec<(u64, Result<AutoLayout, SearchError>)> = tps
            .par_iter()
            .map(|&tp| {
                (
                    tp,
                    auto_tp_layout(model, values, tp, calib, opts.gpus_per_node),
                )
            })
            .collect();
        let mut kept: Vec<AutoLayout> = Vec::new();
        for (tp, a) in found {
            match a {
                Err(e) => {
                    auto_failed.insert(tp, e);
                }
                Ok(a)
                    if opts.layouts == Layouts::Both && same_as_annotated(model, &a.placements) =>
                {
                    auto_same.push(tp)
                }
                Ok(a) => {
                    let layout = Layout {
                        sequence_parallel: false,
                        tp_overrides: a.placements.clone(),
                    };
                    match crate::parallel::check_overrides(model, &layout) {
                        Ok(()) => kept.push(a),
                        Err((op, why)) => {
                            auto_failed.insert(tp, SearchError::Override { op, why });
                        }
                    }
                }
            }
        }
        // Degrees whose searches agree share the analyses (symbolic in the degree).
        let mut distinct: Vec<&BTreeMap<String, String>> = Vec::new();
        for a in &kept {
            if !distinct.contains(&&a.placements) {
                distinct.push(&a.placements);
            }
        }
        let built: Vec<Result<(Variant, Variant), SearchError>> = distinct
            .par_iter()
            .map(|p| Ok((variant(false, p, true)?, variant(true, p, true)?)))
            .collect();
        let base = variants.list.len();
        for b in built {
            let (off, on) = b?;
            variants.list.push(off);
            variants.list.push(on);
        }
        for a in &kept {
            if let Some(i) = distinct.iter().position(|p| **p == a.placements) {
                auto_variants.insert(a.tp, [base + 2 * i, base + 2 * i + 1]);
            }
        }
        egraph_variants(model, values, &kept, variants, &mut auto)?;
        variants.autos = kept.into_iter().map(|a| (a.tp, a)).collect();
    }
    auto.seconds = auto_start.elapsed().as_secs_f64();
    Ok(auto)
}

/// The e-graph pass over each degree's auto layout, once per degree (in parallel, not per
/// strategy): each layout it rewrites becomes one more variant, without sequence parallelism
/// (the variant places the operators that sequence parallelism would move itself).
fn egraph_variants(
    model: &Model,
    values: &Bindings,
    kept: &[AutoLayout],
    variants: &mut Variants,
    auto: &mut AutoVariants,
) -> Result<(), SearchError> {
    let found: Vec<(u64, crate::error::Result<Option<EGraphLayout>>)> = kept
        .par_iter()
        .map(|a| (a.tp, egraph_layout(model, values, a)))
        .collect();
    for (tp, e) in found {
        match e {
            Ok(Some(e)) => {
                let mut v = Variant::new(model, values, false, &e.placements, true)?;
                v.egraph = true;
                auto.egraph.insert(tp, variants.list.len());
                variants.list.push(v);
                variants.egraphs.insert(tp, e);
            }
            Ok(None) => {}
            Err(why) => {
                auto.egraph_failed.insert(tp, why.to_string());
            }
        }
    }
    Ok(())
}

/// The jobs of a search, in order: each mesh shape's (micro-batch count, layout variant) to
/// price, or why a shape or strategy is set aside. They are priced in parallel and merged in
/// this order, so the ranking and its rejections are those of one pass in order.
fn jobs(
    model: &Model,
    values: &Bindings,
    opts: &Ctx,
    meshes: &[(u64, u64, u64)],
    variants: &Variants,
    auto: &AutoVariants,
    batch: &Rational,
) -> Vec<(usize, Job)> {
    let steer = &opts.steer;
    let (auto_variants, auto_failed) = (&auto.variants, &auto.failed);
    // A fixed micro-batch size or count overrides the cap on the count.
    let cap_microbatches = steer.mbs.fixed.is_none() && steer.microbatches.fixed.is_none();
    let mut jobs: Vec<(usize, Job)> = Vec::new();
    for (done, &(tp, cp, pp)) in meshes.iter().enumerate() {
        let dp = opts.devices / tp / pp / cp;
        if !steer.allows_mesh(dp, tp, pp) {
            continue;
        }
        let per_dp = batch / Rational::from_integer(dp.into());
        if !per_dp.is_integer() {
            jobs.push((done, Job::Reject(Rejection::BatchNotDivisible { dp })));
            continue;
        }
        let per_dp: u64 = per_dp.to_integer().try_into().unwrap_or(1);
        let mbs: Vec<u64> = divisors(per_dp)
            .into_iter()
            .filter(|m| {
                (!cap_microbatches || *m <= opts.max_microbatches)
                    && (pp == 1 || *m >= pp || *m == per_dp)
                    && steer.microbatches.allows(*m)
                    && steer.mbs.allows(per_dp / *m)
            })
            .collect();
        // The layouts of this degree: the annotated one (and, at tp = 1, the only one), the
        // auto one.
        let mut vs: Vec<usize> = Vec::new();
        if tp == 1 || opts.layouts != Layouts::Auto {
            vs.extend([0, 1]);
        }
        if let Some(a) = auto_variants.get(&tp) {
            vs.extend(a);
        }
        vs.extend(auto.egraph.get(&tp));
        if vs.is_empty() {
            let why = match auto_failed.get(&tp) {
                Some(e) => Rejection::NoAutoLayout {
                    tp,
                    why: Box::new(e.clone()),
                },
                None => Rejection::AutoIsAnnotated { tp },
            };
            jobs.push((done, Job::Reject(why)));
            continue;
        }
        for m in mbs {
            for &v in &vs {
                let Variant { sp, sp_matters, .. } = &variants.list[v];
                let sp = *sp;
                if sp && tp == 1 {
                    continue;
                }
                // Sequence parallelism that splits nothing more is the same strategy as none:
                // priced once, unless asked for.
                if sp && !sp_matters && steer.sequence_parallel != Some(true) {
                    continue;
                }
                if steer.sequence_parallel.is_some_and(|x| x != sp) {
                    continue;
                }
                let base = Knobs {
                    dp,
                    tp,
                    pp,
                    microbatches: m,
                    schedule: Schedule::OneFOneB,
                    chunks: 1,
                    sequence_parallel: sp,
                    recompute: Recompute::None,
                    zero: 0,
                    ep: 1,
                    cp,
                    overlap: Default::default(),
                    precision: Precision::Bf16,
                    pipeline_split: steer.pipeline_split.unwrap_or_default(),
                    fp8_params: false,
                    fp8_dispatch: false,
                    node_dispatch: false,
                };
                if let Err(e) = check_model_limits(model, values, &base) {
                    jobs.push((done, Job::Reject(e.into())));
                    continue;
                }
                for &precision in &opts.precisions {
                    let base = Knobs {
                        precision,
                        ..base.clone()
                    };
                    jobs.push((done, Job::Price { base, v, per_dp }));
                }
            }
        }
    }
    jobs
}

/// What pricing a search's jobs in floating point needs.
struct Pricer<'a> {
    model: &'a Model,
    values: &'a Bindings,
    opts: &'a Ctx<'a>,
    variants: &'a Variants,
    kernels: crate::parallel::kernels::KernelEfficiency,
    has_experts: bool,
    /// κ of each tier, as floats.
    kappa: Kappa,
    kappa_hbm: f64,
    overlap: f64,
}

/// κ of the intra- and inter-node tiers, as floats.
#[derive(Clone, Copy)]
struct Kappa {
    intra: f64,
    inter: f64,
}

impl Kappa {
    fn of(&self, t: Tier) -> f64 {
        match t {
            Tier::Intra => self.intra,
            Tier::Inter => self.inter,
        }
    }
}

impl<'a> Pricer<'a> {
    fn new(
        model: &'a Model,
        values: &'a Bindings,
        calib: &Calibration,
        opts: &'a Ctx<'a>,
        variants: &'a Variants,
    ) -> Pricer<'a> {
        Pricer {
            model,
            values,
            opts,
            variants,
            kernels: crate::parallel::kernels::KernelEfficiency::of(calib),
            has_experts: !crate::parallel::moe::moe_sites(model).is_empty(),
            kappa: Kappa {
                intra: calib.balance(Tier::Intra).to_f64().unwrap_or(f64::MAX),
                inter: calib.balance(Tier::Inter).to_f64().unwrap_or(f64::MAX),
            },
            kappa_hbm: calib.hbm_balance().to_f64().unwrap_or(f64::MAX),
            overlap: calib.overlap_saving().to_f64().unwrap_or(1.0),
        }
    }

    /// A [`Job::Price`]: its blocks' numbers, and every schedule, expert degree, recomputation
    /// and ZeRO stage of it the steering allows, estimated.
    fn price_job(&self, base: &Knobs, v: usize, per_dp: u64) -> JobPriced {
        let (model, values, variants, opts) = (self.model, self.values, self.variants, self.opts);
        let (steer, kernels, has_experts) = (&opts.steer, &self.kernels, self.has_experts);
        let (kappa_hbm, overlap) = (self.kappa_hbm, self.overlap);
        let kappa = |t: Tier| self.kappa.of(t);
        let Variant { analysis, sums, .. } = &variants.list[v];
        let (dp, pp, m, cp) = (base.dp, base.pp, base.microbatches, base.cp);
        let key = numbers_key(&Cand { k: base.clone(), v });
        let b = microbatch_bindings(model, values, base);
        let numbers = check_divisibility(model, analysis, &b, base)
            .and_then(|()| block_numbers_summed(analysis, sums, &b, kernels));
        let mut out: Vec<Result<(Cand, Estimate), Rejection>> = Vec::new();
        let Ok(numbers_ok) = &numbers else {
            if let Err(e) = &numbers {
                out.push(Err(e.clone().into()));
            }
            return (key, numbers, out);
        };
        let mut schedules: Vec<(Schedule, u64)> = if pp == 1 {
            vec![(Schedule::OneFOneB, 1)]
        } else {
            vec![(Schedule::Gpipe, 1), (Schedule::OneFOneB, 1)]
        };
        // ZB-H1 only where asked for (`--fix schedule=zb-h1`): the default search stays the
        // schedules Megatron-LM runs.
        if pp > 1 && steer.schedule == Some(Schedule::ZeroBubbleH1) {
            schedules.push((Schedule::ZeroBubbleH1, 1));
        }
        // DualPipe likewise only under `--fix schedule=dualpipe`, and only where it runs (pp
        // even, micro-batches even and at least 2·pp).
        if pp > 1
            && steer.schedule == Some(Schedule::DualPipe)
            && Schedule::DualPipe.refuses(pp, m).is_none()
        {
            schedules.push((Schedule::DualPipe, 1));
        }
        // ZB-V likewise only under `--fix schedule=zb-v`; where its 2·pp chunks do not divide
        // the layers, pricing refuses it and the refusal is counted with its reason.
        if pp > 1 && steer.schedule == Some(Schedule::ZeroBubbleV) {
            schedules.push((Schedule::ZeroBubbleV, 1));
        }
        // DualPipeV likewise only under `--fix schedule=dualpipev`; pricing refuses fewer than
        // 2·pp micro-batches and layers its 2·pp chunks do not divide, each counted with its
        // reason.
        if pp > 1 && steer.schedule == Some(Schedule::DualPipeV) {
            schedules.push((Schedule::DualPipeV, 1));
        }
        // Interleaving: every chunk count the layers allow (layers divisible by pp × chunks;
        // with the embedding or the loss counted as layers where `--fix account=` says so), up
        // to the cap; the micro-batch count must be a multiple of pp (Narayanan et al. SC'21).
        if pp > 1 && m.is_multiple_of(pp) {
            let layers = layer_count(model, numbers_ok) + base.pipeline_split.extra();
            let per_stage = layers / pp;
            let most = steer.chunks.fixed.unwrap_or(opts.max_chunks);
            for v in 2..=most.min(per_stage) {
                if per_stage.is_multiple_of(v) && layers.is_multiple_of(pp * v) {
                    schedules.push((Schedule::Interleaved, v));
                }
            }
        }
        // Expert parallelism for mixture-of-experts models: every degree dividing the data- and
        // context-parallel ranks (the expert-parallel groups are drawn from them) and the
        // experts.
        let eps: Vec<u64> = if has_experts {
            divisors(dp * cp)
                .into_iter()
                .filter(|&ep| {
                    steer.ep.allows(ep)
                        && crate::parallel::moe::check_expert_parallel(model, values, dp, cp, ep)
                            .is_ok()
                })
                .collect()
        } else {
            vec![1]
        };
        let mut batch_knobs: Vec<Knobs> = Vec::new();
        for &ep in &eps {
            for &(schedule, chunks) in &schedules {
                for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                    let zeros: &[u8] = if dp * cp > 1 { &[0, 1, 2, 3] } else { &[0] };
                    for &zero in zeros {
                        let mut k = Knobs {
                            schedule,
                            chunks,
                            recompute,
                            zero,
                            ep,
                            ..base.clone()
                        };
                        k.overlap = steer.overlap_for(&k);
                        k.fp8_params = steer.fp8_params_for(&k);
                        k.fp8_dispatch = steer.fp8_dispatch_for(&k);
                        // Node by node where the expert-parallel group spreads evenly over
                        // its nodes (else the flat all-to-all, as `cost` would refuse it).
                        k.node_dispatch = steer.node_dispatch_for(&k)
                            && Mesh::of(&k, opts.gpus_per_node).ep_even(k.ep);
                        if !steer.allows(&k, per_dp / m) {
                            continue;
                        }
                        if let Err(e) = crate::strategy::check_knobs(&k) {
                            out.push(Err(e.into()));
                            continue;
                        }
                        batch_knobs.push(k);
                    }
                }
            }
        }
        let priced = estimate_variants(
            model,
            numbers_ok,
            &batch_knobs,
            &kappa,
            kappa_hbm,
            overlap,
            opts.gpus_per_node,
        );
        for (k, e) in batch_knobs.into_iter().zip(priced) {
            out.push(e.map(|e| (Cand { k, v }, e)).map_err(Rejection::from));
        }
        (key, numbers, out)
    }
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

/// Whether an estimate fits in `memory` (bytes), with a floating-point margin.
fn fits_in(e: &Estimate, cap: f64) -> bool {
    e.memory <= cap * (1.0 + 1e-9)
}

/// The estimates in order: those that fit first, then by cost, memory and their first order;
/// and how many fit.
fn in_order(estimates: Vec<(Cand, Estimate)>, memory: &Rational) -> (Vec<(Cand, Estimate)>, usize) {
    let cap = memory.to_f64().unwrap_or(f64::MAX);
    let fits = |e: &Estimate| fits_in(e, cap);
    // Sorted by small keys (ties in their first order), then moved into that order once.
    let mut order: Vec<(bool, f64, f64, usize)> = estimates
        .iter()
        .enumerate()
        .map(|(i, (_, e))| (!fits(e), e.total, e.memory, i))
        .collect();
    order.par_sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.total_cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    let mut slots: Vec<Option<(Cand, Estimate)>> = estimates.into_iter().map(Some).collect();
    let estimates: Vec<(Cand, Estimate)> = order
        .iter()
        .filter_map(|&(.., i)| slots[i].take())
        .collect();
    let feasible = estimates.iter().filter(|(_, e)| fits(e)).count();
    (estimates, feasible)
}

/// What the floating-point pass of a search found: the layouts, the evaluated blocks and the
/// estimates in order.
struct Found<'a> {
    variants: &'a Variants,
    cache: &'a Cache,
    estimates: &'a [(Cand, Estimate)],
}

/// Ranking by relative cost: every strategy that could be among the shown rows (a relative
/// margin of 1e-6 around the last one) and every strategy whose memory is within 1e-6 of the
/// capacity priced exactly, so that the shown order and feasibility are exact.
#[allow(clippy::too_many_arguments)]
fn rank_by_cost(
    model: &Model,
    calib: &Calibration,
    opts: &Ctx,
    found: &Found<'_>,
    evaluated: usize,
    feasible: usize,
    rejected: Rejections,
    start: Instant,
) -> RankResult {
    let (variants, cache, estimates) = (found.variants, found.cache, found.estimates);
    let cap = opts.memory.to_f64().unwrap_or(f64::MAX);
    let fits = |e: &Estimate| fits_in(e, cap);
    // Enough rows for `top` groups: strategies with the same floating-point cost and memory
    // are candidates for one group.
    let mut pool = 0;
    let mut keys = 0;
    let mut prev: Option<(bool, f64, f64)> = None;
    for (_, e) in estimates {
        let key = (fits(e), e.total, e.memory);
        if prev != Some(key) {
            if keys == opts.top {
                break;
            }
            keys += 1;
            prev = Some(key);
        }
        pool += 1;
    }
    let last = estimates
        .get(pool.min(estimates.len()).saturating_sub(1))
        .map(|(_, e)| e.total)
        .unwrap_or(0.0);
    let mut candidates: Vec<&Cand> = Vec::new();
    for (i, (k, e)) in estimates.iter().enumerate() {
        let shown = i < pool || (fits(e) && e.total <= last * (1.0 + 1e-6));
        let borderline = (e.memory - cap).abs() <= cap * 1e-6;
        if shown || borderline {
            candidates.push(k);
        }
    }
    // Priced in parallel, kept in order.
    let priced: Vec<Option<(Evaluation, usize)>> = candidates
        .par_iter()
        .map(|c| price(model, variants, cache, c, calib, opts).map(|(e, _, _)| (e, c.v)))
        .collect();
    let mut evals: Vec<(Evaluation, usize)> = priced.into_iter().flatten().collect();
    // Feasible first, cheapest first; ties go to the smaller memory footprint, then to the
    // annotated layout.
    evals.sort_by(|(a, va), (b, vb)| {
        b.feasible
            .cmp(&a.feasible)
            .then(a.relative.total.cmp(&b.relative.total))
            .then(a.memory.total.cmp(&b.memory.total))
            .then(variants.key(*va, a).cmp(&variants.key(*vb, b)))
    });
    let balance_range = evals.first().filter(|(e, _)| e.feasible).map(|(top, tv)| {
        let others: Vec<(f64, f64)> = estimates
            .iter()
            .filter(|(c, e)| fits(e) && (c.k != top.knobs || c.v != *tv))
            .map(|(_, e)| (e.flop_part, e.byte_part))
            .collect();
        stability(&top.relative, &others)
    });
    let nothing_fits = !evals.first().is_some_and(|(e, _)| e.feasible);
    let rows = group(
        evals
            .into_iter()
            .map(|(e, v)| {
                let l = variants.layout(v, e.knobs.tp);
                (e, None, l)
            })
            .collect(),
        opts.top,
    );
    let pareto = if opts.pareto {
        pareto_by_cost(model, variants, cache, estimates, calib, opts)
    } else {
        Vec::new()
    };
    let (smallest, cheapest) = if nothing_fits {
        smallest_footprint(model, variants, cache, estimates, calib, opts)
    } else {
        (None, None)
    };
    RankResult {
        rows,
        evaluated,
        feasible,
        rejected,
        failed: Failed::default(),
        simulated: 0,
        balance_range,
        search_seconds: start.elapsed().as_secs_f64(),
        pareto,
        smallest,
        cheapest,
        auto_layouts: Vec::new(),
        auto_failed: BTreeMap::new(),
        auto_same: Vec::new(),
        auto_seconds: 0.0,
        egraph_layouts: Vec::new(),
        egraph_failed: BTreeMap::new(),
    }
}

/// When nothing fits: the strategy with the smallest memory footprint and the cheapest one,
/// priced exactly (every strategy within 10⁻⁶ of the smallest estimate is priced).
fn smallest_footprint(
    model: &Model,
    variants: &Variants,
    cache: &Cache,
    estimates: &[(Cand, Estimate)],
    calib: &Calibration,
    opts: &Ctx,
) -> (Option<(Evaluation, RowLayout)>, Option<Evaluation>) {
    let least = estimates
        .iter()
        .map(|(_, e)| e.memory)
        .fold(f64::MAX, f64::min);
    let smallest = estimates
        .iter()
        .filter(|(_, e)| e.memory <= least * (1.0 + 1e-6))
        .filter_map(|(k, _)| price(model, variants, cache, k, calib, opts).map(|x| (x.0, k.v)))
        .min_by(|(a, va), (b, vb)| {
            a.memory
                .total
                .cmp(&b.memory.total)
                .then(a.relative.total.cmp(&b.relative.total))
                .then(variants.key(*va, a).cmp(&variants.key(*vb, b)))
        })
        .map(|(e, v)| {
            let l = variants.layout(v, e.knobs.tp);
            (e, l)
        });
    let cheapest = estimates
        .iter()
        .min_by(|a, b| a.1.total.total_cmp(&b.1.total))
        .and_then(|(k, _)| price(model, variants, cache, k, calib, opts).map(|x| x.0));
    (smallest, cheapest)
}

/// The memory-versus-relative-cost Pareto frontier of the strategies that fit: screened in
/// floating point (with a 10⁻⁶ margin), then priced and decided exactly.
fn pareto_by_cost(
    model: &Model,
    variants: &Variants,
    cache: &Cache,
    estimates: &[(Cand, Estimate)],
    calib: &Calibration,
    opts: &Ctx,
) -> Vec<RankedRow> {
    let cap = opts.memory.to_f64().unwrap_or(f64::MAX);
    let mut by_memory: Vec<&(Cand, Estimate)> = estimates
        .iter()
        .filter(|(_, e)| e.memory <= cap * (1.0 + 1e-6))
        .collect();
    by_memory.sort_by(|a, b| {
        a.1.memory
            .total_cmp(&b.1.memory)
            .then(a.1.total.total_cmp(&b.1.total))
    });
    let mut best = f64::MAX;
    let mut evals: Vec<Priced> = Vec::new();
    for (k, e) in by_memory {
        if e.total <= best * (1.0 + 1e-6) {
            best = best.min(e.total);
            if let Some((ev, _, _)) = price(model, variants, cache, k, calib, opts) {
                if ev.feasible {
                    let l = variants.layout(k.v, ev.knobs.tp);
                    evals.push((ev, None, l));
                }
            }
        }
    }
    frontier(evals)
}

/// The exact frontier: sorted by memory, each row strictly cheaper (faster) than every row
/// with less memory; equal rows grouped.
fn frontier(mut rows: Vec<Priced>) -> Vec<RankedRow> {
    let score = |e: &Evaluation, t: Option<f64>| -> (Option<f64>, Rational) {
        (t, e.relative.total.clone())
    };
    rows.sort_by(|(a, ta, _), (b, tb, _)| {
        a.memory
            .total
            .cmp(&b.memory.total)
            .then(ta.unwrap_or(0.0).total_cmp(&tb.unwrap_or(0.0)))
            .then(a.relative.total.cmp(&b.relative.total))
    });
    grouped(rows, |out, e, t| {
        let dominated = out.last().is_some_and(|g| {
            let (gt, gc) = score(&g.evaluation, g.seconds);
            match (gt, t) {
                (Some(a), Some(b)) => a <= b,
                _ => gc <= e.relative.total,
            }
        });
        !dominated
    })
}

/// Prices strategy `k` exactly, with the analysis and block numbers it was screened with.
fn price<'a>(
    model: &Model,
    variants: &'a Variants,
    cache: &'a Cache,
    c: &Cand,
    calib: &Calibration,
    opts: &Ctx,
) -> Option<(Evaluation, &'a Analysis, &'a [BlockNumbers])> {
    let analysis = variants.analysis(c);
    let numbers = match cache.get(&numbers_key(c)) {
        Some(Ok(numbers)) => numbers,
        Some(Err(e)) => {
            opts.failures.note(label(c), e.to_string());
            return None;
        }
        None => {
            opts.failures
                .note(label(c), "its blocks were not evaluated".into());
            return None;
        }
    };
    let e = evaluate_with(
        model,
        analysis,
        numbers,
        &c.k,
        calib,
        opts.gpus_per_node,
        &opts.memory,
        true,
    );
    let e = opts.failures.keep(|| label(c), e)?;
    Some((e, analysis, numbers))
}

/// A strategy as the failure log names it.
fn label(c: &Cand) -> String {
    format!("{} (layout variant {})", c.k.describe(None), c.v)
}

/// What the relative-cost search hands to the search by seconds.
struct SecondsSearch<'a> {
    variants: &'a Variants,
    cache: &'a Cache,
    estimates: &'a [(Cand, Estimate)],
    kappa: &'a (dyn Fn(Tier) -> f64 + Sync),
    evaluated: usize,
    feasible: usize,
    rejected: Rejections,
    start: Instant,
}

/// A strategy simulated: its seconds per step and its exact evaluation.
type Simulated = Option<(f64, Evaluation)>;

/// A strategy tried by the search by seconds: whether it was priced and fits (what the search
/// counts as simulated), and its simulation where the timeline ran.
type Attempt = (bool, Simulated);

/// How the search by seconds tries a strategy, noting its failures in the context's log.
type TryFn<'a> = dyn Fn(&Cand, &Ctx) -> Attempt + Sync + 'a;

/// Rows found by seconds: (seconds, evaluation, layout variant).
type TimedRows = Vec<(f64, Evaluation, usize)>;

/// Strategies simulated: (strategy, seconds, exact memory).
type Sims = Vec<(Cand, f64, Rational)>;

/// The fastest strategies by simulated seconds, exactly: every strategy that fits gets a
/// closed-form lower bound of its simulated time ([`crate::timeline::bound`]); they are
/// simulated in the order of their bounds until the next bound exceeds the `top`-th best time
/// found, so no strategy left unsimulated can be among the rows shown, whatever `top` is.
fn rank_by_seconds(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    search: SecondsSearch,
) -> Result<RankResult, SearchError> {
    let cap = opts.memory.to_f64().unwrap_or(f64::MAX);
    let variants = search.variants;
    let bounded = bounded_in_order(model, values, calib, opts, &search);
    let attempt = |k: &Cand, ctx: &Ctx| -> Attempt {
        let Some((e, analysis, numbers)) = price(model, variants, search.cache, k, calib, ctx)
        else {
            return (false, None);
        };
        if !e.feasible {
            return (false, None);
        }
        let t = crate::timeline::iteration_seconds(model, analysis, numbers, &e, values, calib);
        (true, ctx.failures.keep(|| label(k), t).map(|t| (t, e)))
    };
    let simulated = std::sync::atomic::AtomicUsize::new(0);
    let simulate = |k: &Cand| -> Simulated {
        let (counted, sim) = attempt(k, opts);
        if counted {
            simulated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        sim
    };
    let (found, sims, counted) = simulate_in_order(&bounded, &attempt, opts, variants);
    simulated.fetch_add(counted, std::sync::atomic::Ordering::Relaxed);
    let balance_range = found.first().map(|(_, top, tv)| {
        let fits = |e: &Estimate| e.memory <= cap * (1.0 + 1e-9);
        let others: Vec<(f64, f64)> = search
            .estimates
            .iter()
            .filter(|(c, e)| fits(e) && (c.k != top.knobs || c.v != *tv))
            .map(|(_, e)| (e.flop_part, e.byte_part))
            .collect();
        stability(&top.relative, &others)
    });
    let pareto = if opts.pareto {
        let reprice = |k: &Cand| price(model, variants, search.cache, k, calib, opts).map(|x| x.0);
        pareto_by_seconds(&bounded, sims, &simulate, &reprice, variants)
    } else {
        Vec::new()
    };
    let (smallest, cheapest) = if found.is_empty() {
        smallest_footprint(model, variants, search.cache, search.estimates, calib, opts)
    } else {
        (None, None)
    };
    let rows = group(
        found
            .into_iter()
            .map(|(t, e, v)| {
                let l = variants.layout(v, e.knobs.tp);
                (e, Some(t), l)
            })
            .collect(),
        opts.top,
    );
    Ok(RankResult {
        rows,
        evaluated: search.evaluated,
        feasible: search.feasible,
        rejected: search.rejected,
        failed: Failed::default(),
        simulated: simulated.into_inner(),
        balance_range,
        search_seconds: search.start.elapsed().as_secs_f64(),
        pareto,
        smallest,
        cheapest,
        auto_layouts: Vec::new(),
        auto_failed: BTreeMap::new(),
        auto_same: Vec::new(),
        auto_seconds: 0.0,
        egraph_layouts: Vec::new(),
        egraph_failed: BTreeMap::new(),
    })
}

/// The rates a strategy is timed at, by the key of [`bound_rates_key`]: under per-row profiles
/// each stack's, otherwise the table's (one key, so no chains are built twice). Paced for the
/// fewest devices any strategy uses: the slowest of more devices is slower, so the bounds stay
/// below every simulation.
fn bound_rates(
    calib: &Calibration,
    search: &SecondsSearch<'_>,
) -> BTreeMap<Option<Stack>, crate::timeline::Rates> {
    let fewest = search.estimates.iter().map(|(c, _)| c.k.devices()).min();
    let keys: Vec<Option<Stack>> = match calib.per_row {
        Some(_) => Stack::ALL.into_iter().map(Some).collect(),
        None => vec![None],
    };
    keys.into_iter()
        .map(|key| {
            let profile = key.map_or(calib.stack.as_ref(), |s| calib.profile_on(s));
            let r = crate::timeline::Rates::with_profile(calib, profile);
            (key, r.paced(fewest.unwrap_or(1)).into_owned())
        })
        .collect()
}

/// The key of a strategy's rates in [`bound_rates`].
fn bound_rates_key(calib: &Calibration, k: &Knobs) -> Option<Stack> {
    calib.per_row.is_some().then(|| Stack::of(k))
}

/// The key of a strategy's chains. The chains depend on the ZeRO stage only through the
/// gradient buffer a backward adds to (the whole one, or under ZeRO ≥ 2 the device's shard),
/// so the key tells those apart; and on whether the schedule splits the backward (ZB-H1's
/// weight passes are chains of their own).
fn chain_key(calib: &Calibration, c: &Cand) -> ChainKey {
    (
        numbers_key(c),
        c.k.ep,
        c.k.shards_gradients(),
        c.k.schedule.splits_backward(),
        bound_rates_key(calib, &c.k),
    )
}

/// The chains of every (blocks, expert-parallel degree, gradient sharding) a strategy that
/// fits under `cap` uses, from the first such strategy in order, built in parallel.
fn bound_chains(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    search: &SecondsSearch<'_>,
    rates: &BTreeMap<Option<Stack>, crate::timeline::Rates>,
    cap: f64,
) -> BTreeMap<ChainKey, Option<crate::timeline::bound::Chains>> {
    let mut first: BTreeMap<ChainKey, &Cand> = BTreeMap::new();
    for (c, e) in search.estimates {
        if e.memory <= cap * (1.0 + 1e-6) {
            first.entry(chain_key(calib, c)).or_insert(c);
        }
    }
    let first: Vec<(&ChainKey, &&Cand)> = first.iter().collect();
    let built: Vec<Option<crate::timeline::bound::Chains>> = first
        .par_iter()
        .map(|(key, c)| {
            let Some(Ok(numbers)) = search.cache.get(&key.0) else {
                return None;
            };
            let chains = crate::timeline::bound::chains(
                model,
                search.variants.analysis(c),
                numbers,
                values,
                &c.k,
                &rates[&key.4],
                opts.gpus_per_node,
            );
            opts.failures.keep(|| label(c), chains)
        })
        .collect();
    first.iter().map(|(key, _)| **key).zip(built).collect()
}

/// The key of a strategy's virtual stages: the partition depends on neither the ZeRO stage nor
/// (interleaved) the partition search, so the strategies that differ only there share it, and
/// the virtual stages follow from the partition, the schedule and the chunks.
type PartitionKey = (NumbersKey, u64, Recompute, Schedule, u64, u64);

/// Block copies on each virtual stage ([`crate::timeline::bound::virtual_stages`]).
type StageCounts = Vec<Vec<(usize, u64)>>;

/// The virtual stages of the strategy `c` with its blocks' `numbers` and chains `ch`; None
/// where its pipeline cannot be partitioned (noted in the context's log).
fn bound_stages(
    model: &Model,
    opts: &Ctx,
    search: &SecondsSearch<'_>,
    kappa_hbm: f64,
    (c, numbers, ch): (&Cand, &[BlockNumbers], &crate::timeline::bound::Chains),
) -> Option<StageCounts> {
    let k = &c.k;
    let partition = if k.virtual_chunks() > 1 {
        Vec::new()
    } else {
        let partition = crate::parallel::evaluate::pipeline_stage_counts(
            model,
            numbers,
            k,
            search.kappa,
            kappa_hbm,
            opts.gpus_per_node,
        );
        opts.failures.keep(|| label(c), partition)?
    };
    let repeats: Vec<u64> = numbers.iter().map(|n| n.repeat).collect();
    crate::timeline::bound::virtual_stages(ch, &repeats, &partition, k).map(|s| s.into_owned())
}

/// Every strategy that fits (with a margin) and its lower bound of the simulated seconds, in
/// the order of the bounds: (bound, strategy, memory estimate).
fn bounded_in_order<'c>(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    search: &SecondsSearch<'c>,
) -> Vec<(f64, &'c Cand, f64)> {
    use crate::timeline::bound::{lower_bound, Chains};
    let rates = bound_rates(calib, search);
    let kappa_hbm = calib.hbm_balance().to_f64().unwrap_or(f64::MAX);
    let cap = opts.memory.to_f64().unwrap_or(f64::MAX);
    let chain_cache = bound_chains(model, values, calib, opts, search, &rates, cap);
    // The strategies to bound, with the keys of their chains and virtual stages, and the first
    // strategy of each virtual-stage key.
    let mut todo: Vec<(&Cand, f64, ChainKey, PartitionKey)> = Vec::new();
    let mut first_of: std::collections::HashMap<PartitionKey, (&Cand, &[BlockNumbers], &Chains)> =
        std::collections::HashMap::new();
    for (c, e) in search.estimates {
        // A margin keeps every strategy the exact pricing may find feasible.
        if e.memory > cap * (1.0 + 1e-6) {
            continue;
        }
        let k = &c.k;
        let key = numbers_key(c);
        let ckey = chain_key(calib, c);
        // Built above for every strategy this loop reaches.
        let (Some(Ok(numbers)), Some(Some(ch))) = (search.cache.get(&key), chain_cache.get(&ckey))
        else {
            continue;
        };
        let pkey = (key, k.pp, k.recompute, k.schedule, k.chunks, k.ep);
        first_of.entry(pkey).or_insert((c, numbers, ch));
        todo.push((c, e.memory, ckey, pkey));
    }
    // The virtual stages of each key, in parallel.
    let keys: Vec<_> = first_of.into_iter().collect();
    let partitions: std::collections::HashMap<PartitionKey, Option<StageCounts>> = keys
        .par_iter()
        .map(|&(pkey, first)| (pkey, bound_stages(model, opts, search, kappa_hbm, first)))
        .collect();
    todo.retain(|(_, _, _, pkey)| partitions.get(pkey).is_some_and(Option::is_some));
    // The bounds themselves, in parallel and in order.
    let bounded_all: Vec<Option<(f64, &Cand, f64)>> = todo
        .par_iter()
        .map(|&(c, memory, ckey, pkey)| {
            let ch = chain_cache.get(&ckey)?.as_ref()?;
            let stages = partitions.get(&pkey)?.as_ref()?;
            Some((
                lower_bound(ch, stages, &c.k, &rates[&ckey.4], opts.gpus_per_node),
                c,
                memory,
            ))
        })
        .collect();
    let mut bounded: Vec<(f64, &Cand, f64)> = bounded_all.into_iter().flatten().collect();
    bounded.sort_by(|a, b| a.0.total_cmp(&b.0));
    bounded
}

/// Simulates the `bounded` strategies in the order of their bounds, a batch of one per thread
/// at a time, until the `top` groups are found and the next bound exceeds the last of them.
/// Returns the rows of the first `top` groups, sorted by (seconds, cost, memory, layout), and
/// every strategy simulated: (strategy, seconds, exact memory).
///
/// The simulations themselves run ahead ([`simulate_ahead`]), each thread taking the next
/// strategy as soon as it is done with one; the batches are then replayed over their results,
/// so what is shown and counted is the batches', whatever the threads' timing.
fn simulate_in_order(
    bounded: &[(f64, &Cand, f64)],
    attempt: &TryFn,
    opts: &Ctx,
    variants: &Variants,
) -> (TimedRows, Sims, usize) {
    let top = opts.top;
    let mut ahead = simulate_ahead(bounded, attempt, opts, variants);
    let mut found = TimedRows::new();
    let mut sims = Sims::new();
    let mut counted = 0;
    // Rows of the first `top` groups found so far, sorted by (seconds, cost, memory) so that
    // equal rows are adjacent; `groups` counts them.
    let mut groups = 0usize;
    // Simulated in batches of one strategy per thread, in the order of their bounds: a batch
    // may simulate a few strategies the sequential order would have skipped, which changes
    // nothing shown (their bound, so their time, is above the last row's).
    let batch = rayon::current_num_threads().max(1);
    let mut next = 0;
    while next < bounded.len() {
        if groups == top && found.last().is_some_and(|(t, _, _)| bounded[next].0 > *t) {
            break;
        }
        let end = (next + batch).min(bounded.len());
        // What ran ahead stopped no earlier than this order does (it knew at most as many
        // rows), but it may stop inside a batch: the rest of the batch is simulated here.
        let missing: Vec<(usize, Ahead)> = (next..end)
            .filter(|&i| ahead[i].is_none())
            .collect::<Vec<usize>>()
            .into_par_iter()
            .map(|i| (i, try_apart(attempt, bounded[i].1, opts)))
            .collect();
        for (i, tried) in missing {
            ahead[i] = Some(tried);
        }
        for (i, tried) in ahead.iter_mut().enumerate().take(end).skip(next) {
            let k = bounded[i].1;
            let Some(((was_counted, sim), log)) = tried.take() else {
                continue;
            };
            // Only the strategies this order tries are counted and their failures noted.
            opts.failures.merge(log);
            counted += usize::from(was_counted);
            if let Some((t, e)) = sim {
                sims.push((k.clone(), t, e.memory.total.clone()));
                groups = insert_row(&mut found, (t, e, k.v), top, variants);
            }
        }
        next = end;
    }
    (found, sims, counted)
}

/// A strategy tried ahead of the search's order, with the failures it noted apart.
type Ahead = (Attempt, FailureLog);

/// `attempt` of `k` noting its failures in a log of its own.
fn try_apart(attempt: &TryFn, k: &Cand, opts: &Ctx) -> Ahead {
    let log = FailureLog::default();
    let ctx = Ctx {
        opts: opts.opts,
        failures: &log,
        precisions: opts.precisions.clone(),
    };
    let tried = attempt(k, &ctx);
    (tried, log)
}

/// Tries `bounded` in the order of their bounds on every thread, each taking the next strategy
/// as it finishes one, until the `top` groups of the rows it has are found and the next bound
/// exceeds the last of them. It knows at most the rows the sequential order knows at the same
/// strategy, so its last row is no earlier than that order's and it stops no sooner. Returns
/// each strategy's attempt, `None` where it made none; failures are noted apart, for the
/// search's order to keep those of the strategies it tries.
fn simulate_ahead(
    bounded: &[(f64, &Cand, f64)],
    attempt: &TryFn,
    opts: &Ctx,
    variants: &Variants,
) -> Vec<Option<Ahead>> {
    use std::sync::{Mutex, OnceLock};
    let top = opts.top;
    // Each attempt, written once by the thread that made it; the rows found so far refer to
    // them.
    let done: Vec<OnceLock<Ahead>> = (0..bounded.len()).map(|_| OnceLock::new()).collect();
    // The next strategy to take, the rows of the first `top` groups found so far, and how many
    // groups they hold.
    type Found<'e> = (usize, Vec<(f64, &'e Evaluation, usize)>, usize);
    let shared: Mutex<Found> = Mutex::new((0, Vec::new(), 0));
    let lock = || {
        shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let work = || loop {
        let i = {
            let mut sh = lock();
            let (i, last) = (sh.0, sh.1.last().map(|(t, _, _)| *t));
            if i >= bounded.len() || (sh.2 == top && last.is_some_and(|t| bounded[i].0 > t)) {
                return;
            }
            sh.0 += 1;
            i
        };
        let k = bounded[i].1;
        let ((_, sim), _) = done[i].get_or_init(|| try_apart(attempt, k, opts));
        if let Some((t, e)) = sim {
            let mut sh = lock();
            sh.2 = insert_row(&mut sh.1, (*t, e, k.v), top, variants);
        }
    };
    rayon::scope(|s| {
        for _ in 0..rayon::current_num_threads().max(1) {
            s.spawn(|_| work());
        }
    });
    drop(shared);
    done.into_iter().map(OnceLock::into_inner).collect()
}

/// Inserts a simulated row into `found` (sorted by seconds, cost, memory and layout, equal rows
/// adjacent) and keeps the first `top` groups once there are that many rows; returns how many
/// groups `found` holds (0 before then, as the search counts them).
fn insert_row<E: Borrow<Evaluation>>(
    found: &mut Vec<(f64, E, usize)>,
    (t, e, v): (f64, E, usize),
    top: usize,
    variants: &Variants,
) -> usize {
    let at = found.partition_point(|(x, f, fv)| {
        let (f, e) = (f.borrow(), e.borrow());
        x.total_cmp(&t)
            .then(f.relative.total.cmp(&e.relative.total))
            .then(f.memory.total.cmp(&e.memory.total))
            .then(variants.key(*fv, f).cmp(&variants.key(v, e)))
            != std::cmp::Ordering::Greater
    });
    found.insert(at, (t, e, v));
    if found.len() >= top {
        keep_top_groups(found, top, variants)
    } else {
        0
    }
}

/// Keeps the rows of the first `top` groups of `found` (equal rows are adjacent); returns how
/// many groups it holds.
fn keep_top_groups<E: Borrow<Evaluation>>(
    found: &mut Vec<(f64, E, usize)>,
    top: usize,
    variants: &Variants,
) -> usize {
    let mut groups = 0;
    let mut keep = found.len();
    for i in 0..found.len() {
        let (a, b) = (&found[i - i.min(1)], &found[i]);
        let (ea, eb) = (a.1.borrow(), b.1.borrow());
        let new_group = i == 0
            || !same(ea, Some(a.0), eb, Some(b.0))
            || variants.key(a.2, ea) != variants.key(b.2, eb);
        if new_group {
            if groups == top {
                keep = i;
                break;
            }
            groups += 1;
        }
    }
    found.truncate(keep);
    groups
}

/// The memory-versus-seconds frontier: in the order of memory, a strategy is simulated unless
/// one with no more memory is already at least as fast as its lower bound (`sims`: those
/// simulated so far; `reprice`: a simulated strategy's evaluation again).
fn pareto_by_seconds(
    bounded: &[(f64, &Cand, f64)],
    mut sims: Sims,
    simulate: &dyn Fn(&Cand) -> Simulated,
    reprice: &dyn Fn(&Cand) -> Option<Evaluation>,
    variants: &Variants,
) -> Vec<RankedRow> {
    let mut by_memory: Vec<&(f64, &Cand, f64)> = bounded.iter().collect();
    by_memory.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.total_cmp(&b.0)));
    let mut rows: Vec<Priced> = Vec::new();
    for &&(bound, k, mem) in &by_memory {
        let beaten = sims
            .iter()
            .any(|(_, t, m)| m.to_f64().unwrap_or(f64::MAX) <= mem * (1.0 - 1e-6) && *t <= bound);
        if beaten {
            continue;
        }
        let known = sims.iter().position(|(x, _, _)| x == k);
        let sim = match known {
            Some(i) => match reprice(k) {
                Some(e) => Some((sims[i].1, e)),
                None => continue,
            },
            None => simulate(k),
        };
        let Some((t, e)) = sim else { continue };
        if known.is_none() {
            sims.push((k.clone(), t, e.memory.total.clone()));
        }
        let l = variants.layout(k.v, e.knobs.tp);
        rows.push((e, Some(t), l));
    }
    frontier(rows)
}

/// The interval of λ ≥ 0 (every κ scaled by λ) over which the first strategy stays cheapest:
/// cost_i(λ) = flop_i + λ·byte_i (what overlap hides is linear in λ only while the same side of
/// its minimum binds, so near a switch the bounds are as good as that line). The others are compared through their floating-point
/// estimates, so the bounds are as precise as those; a strategy whose line is the top's to
/// within that precision (the same costs, reached with knobs that do not matter) ties at every
/// λ and bounds nothing.
fn stability(
    top: &crate::parallel::RelativeCost,
    others: &[(f64, f64)],
) -> (Rational, Option<Rational>) {
    let tf = top.flop_part.to_f64().unwrap_or(0.0);
    let tb = top.byte_part.to_f64().unwrap_or(0.0);
    let tol = 1e-9 * (tf.abs() + tb.abs());
    let mut lo = 0.0f64;
    let mut hi: Option<f64> = None;
    for &(of, ob) in others {
        let dc = tb - ob;
        let df = of - tf;
        if dc.abs() <= tol && df.abs() <= tol {
            continue;
        }
        if dc > 0.0 {
            let bound = df / dc;
            hi = Some(hi.map_or(bound, |h: f64| h.min(bound)));
        } else if dc < 0.0 {
            lo = lo.max(df / dc);
        }
    }
    let q = |x: f64| Rational::from_float(x).unwrap_or_default();
    (q(lo.max(0.0)), hi.map(|h| q(h.max(0.0))))
}

/// κ of each tier at a λ.
pub fn scaled_balance(calib: &Calibration, lambda: &Rational) -> (Rational, Rational) {
    (
        calib.balance(Tier::Intra) * lambda,
        calib.balance(Tier::Inter) * lambda,
    )
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
