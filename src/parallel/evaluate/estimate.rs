//! The floating-point screen: a strategy priced in `f64` from the same amounts as the exact
//! evaluation, enough to order thousands of strategies before the best are priced exactly.

use super::*;

/// What a stage of `group` takes from its blocks alone under `k` ([`StageParts`]).
pub(super) fn group_parts(
    plan: &Plan,
    group: &StageGroup,
    k: &Knobs,
    kap: &Kappas<f64>,
) -> StageParts {
    parts_of(plan, &group.counts, k, kap, k.microbatches as f64)
}

/// What a device running the blocks `counts` for `mf` micro-batches each takes from them
/// alone under `k` ([`StageParts`]).
pub(super) fn parts_of(
    plan: &Plan,
    counts: &[(usize, u64)],
    k: &Knobs,
    kap: &Kappas<f64>,
    mf: f64,
) -> StageParts {
    let c = BlockCost::stage(&plan.cf, counts);
    let hidden = c.dp_hidden_bound(&mf, kap, k);
    StageParts {
        compute: c.compute_time(&mf, kap, k),
        time: c.time(&mf, kap, k),
        dp: c.dp_traffic(k),
        edp: c.edp_traffic(k),
        hidden: hidden.0,
        hidden_by_compute: hidden.1,
        cost: c,
    }
}

/// Floating-point (time, time with data-parallel and point-to-point traffic, memory) of each
/// stage (`all`), for choosing which stages to price exactly, or of each stage that stands for
/// others ([`Plan::representatives`], in their order), for the screen, handed to `visit` in
/// order: the formulas of the exact pricing ([`StagePricer::price`]) on the costs as floats.
/// The stages a representative stands for have its time and at most its memory, so the maxima
/// over all stages are the maxima over the representatives. `parts`, when given, holds
/// [`group_parts`] of each group of the plan (shared by strategies that differ only in schedule
/// and chunks).
#[allow(clippy::too_many_arguments)]
pub(super) fn rough_each<N>(
    plan: &Plan,
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    all: bool,
    parts: Option<&[StageParts]>,
    mut visit: impl FnMut(RoughStage),
) {
    let full_recompute = full_layer_saved(numbers, layer_block, k, |n| n.approx.saved);
    let boundary =
        |s: usize| stage_boundary(plan, k, layer_block, s, |b| numbers[b].approx.boundary);
    // Under DualPipe a stage stands for its rank, whose stages another group may hold: every
    // stage is visited.
    let all = all || k.schedule.bidirectional();
    // What depends on a stage's blocks alone, computed once for each group of stages holding
    // the same copies: the same operations on the same values, so the same floats.
    let mut current: Option<(usize, StageParts)> = None;
    for (s, gi, group) in plan.representatives(all) {
        let own = match (current, parts) {
            (Some((g, x)), _) if g == gi => x,
            (_, Some(known)) => known[gi],
            _ => group_parts(plan, group, k, kap),
        };
        current = Some((gi, own));
        // The blocks the device runs, for how many micro-batches each, sending how much per
        // micro-batch, and its memory.
        let (parts, mf, p2p) = match dualpipe_rank(plan, k, s) {
            Some((m, counts)) => {
                // DualPipe: stages s and pp − 1 − s, half the micro-batches through each
                // ([`StagePricer::price`]).
                let half = k.microbatches as f64 / 2.0;
                let p2p = boundary(s) + boundary(m);
                (parts_of(plan, &counts, k, kap, half), half, p2p)
            }
            None => (own, k.microbatches as f64, boundary(s)),
        };
        let memory = plan
            .memory(&plan.cf, k, s, &own.cost, &full_recompute)
            .iter()
            .sum();
        let full = parts.time + kap.dp * parts.dp + kap.edp * parts.edp - parts.hidden
            + kap.p2p * (p2p * mf + parts.cost.grad_sum_bytes(k));
        visit(RoughStage {
            compute: parts.compute,
            hidden_flops: if parts.hidden_by_compute {
                parts.hidden
            } else {
                0.0
            },
            time: parts.time,
            full,
            memory,
            weight: parts.cost.weight * mf,
            dualpipe: if k.schedule.overlaps_chunks() {
                parts.cost.dualpipe_bubble(&mf, kap, k)
            } else {
                0.0
            },
        });
    }
}

/// A stage priced in floating point, for choosing.
#[derive(Debug, Clone, Copy)]
pub(super) struct RoughStage {
    /// Its compute per step (FLOPs and HBM bytes at κ_hbm).
    pub(super) compute: f64,
    /// What overlap saves where the compute, not the traffic, bounds it (a FLOP part).
    pub(super) hidden_flops: f64,
    /// What it runs per step apart from its gradient reduction and pipeline sends.
    pub(super) time: f64,
    /// The same with them.
    pub(super) full: f64,
    /// Memory per device.
    pub(super) memory: f64,
    /// Its weight-gradient FLOPs per step (what ZB-H1 defers into the bubble).
    pub(super) weight: f64,
    /// Its DualPipe bubble per step ([`BlockCost::dualpipe_bubble`]; zero under the other
    /// schedules).
    pub(super) dualpipe: f64,
}

/// What the floating-point pricing of a stage takes from its blocks alone (not from its place
/// in the pipeline): its compute, time, data-parallel bytes, weight, gradient and optimizer
/// state, and its summed costs.
#[derive(Debug, Clone, Copy)]
pub(super) struct StageParts {
    pub(super) compute: f64,
    pub(super) time: f64,
    pub(super) dp: f64,
    /// Of the data-parallel bytes, those over the ranks holding the same experts
    /// ([`BlockCost::edp_traffic`]).
    pub(super) edp: f64,
    /// The part of `dp` and `edp` at their κ that runs under compute ([`BlockCost::dp_hidden`]).
    pub(super) hidden: f64,
    /// Whether the compute it runs under, not the traffic, bounds `hidden`.
    pub(super) hidden_by_compute: bool,
    pub(super) cost: BlockCost<f64>,
}

/// A strategy priced in floating point: enough to order thousands of strategies quickly; the
/// ones shown are then priced exactly with [`evaluate_with`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimate {
    /// Relative cost.
    pub total: f64,
    /// Its FLOP part.
    pub flop_part: f64,
    /// Its κ × bytes part.
    pub byte_part: f64,
    /// Memory of the fullest device.
    pub memory: f64,
}

/// Prices a strategy in floating point (see [`Estimate`]).
pub fn estimate(
    model: &Model,
    numbers: &[BlockNumbers],
    k: &Knobs,
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    overlap: f64,
    gpus_per_node: u64,
) -> Result<Estimate, StrategyError> {
    estimate_variants(
        model,
        numbers,
        std::slice::from_ref(k),
        kappa,
        kappa_hbm,
        overlap,
        gpus_per_node,
    )
    .pop()
    .unwrap_or(Err(StrategyError::Nothing("strategy")))
}

/// [`estimate`] of several strategies that share dp, tp, pp and the micro-batch count and
/// differ in schedule, chunks, ZeRO stage, recomputation or expert parallelism: the pipeline
/// partition, which depends on none of the schedule, chunks and ZeRO stage, is computed once per
/// (recomputation, expert-parallel degree).
pub fn estimate_variants(
    model: &Model,
    numbers: &[BlockNumbers],
    ks: &[Knobs],
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    overlap: f64,
    gpus_per_node: u64,
) -> Vec<Result<Estimate, StrategyError>> {
    let layer_block = layer_blocks(model);
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    let mut memo = Shared::default();
    let links = |k: &Knobs| {
        let mesh = Mesh::of(k, gpus_per_node);
        let x = mesh_kappas(&mesh, k, kappa, kappa_hbm, overlap);
        (x, ep_share(numbers, k, &mesh))
    };
    ks.iter()
        .map(|k| {
            let mesh_key = (k.dp, k.tp, k.pp, k.cp, k.ep, k.node_dispatch);
            let (kap, share) = memo.kappas(mesh_key, || links(k));
            let v = k.virtual_chunks();
            k.check_interleaved_layers(layers)?;
            // The plain schedule's partition is balanced; interleaving places its chunks by
            // layer count ([`interleaved_groups`]), which for most models gives every chunk
            // count the same stages: a plan (and its group parts) is shared by the chunk counts
            // whose stages agree.
            let key = (k.recompute, k.ep, v > 1, k.v_placed(), share.clone());
            let groups = (v > 1).then(|| memo.chunk_group(numbers, &layer_block, k, v));
            let at = memo.plan(key, groups, || {
                plan_pipeline(numbers, &layer_block, k, &kap, &share)
            });
            let plan = memo.plans[at].1.as_mut().map_err(|e| e.clone())?;
            // A plan shared by chunk counts: this one's chunks.
            plan.v = v;
            if let Some(g) = groups {
                plan.chunks = memo.chunk_groups[g].1 .1.clone();
            }
            let overlap = [k.overlap.grad_reduce, k.overlap.param_gather];
            let parts_key = (at, k.zero, k.microbatches, mesh_key, overlap);
            let parts = match memo.parts.iter().position(|(x, _)| *x == parts_key) {
                Some(i) => i,
                None => {
                    let parts = plan
                        .groups
                        .iter()
                        .map(|g| group_parts(plan, g, k, &kap))
                        .collect();
                    memo.parts.push((parts_key, parts));
                    memo.parts.len() - 1
                }
            };
            let plan = memo.plans[at].1.as_ref().map_err(|e| e.clone())?;
            Ok(estimate_planned(
                plan,
                numbers,
                &layer_block,
                k,
                &kap,
                &memo.parts[parts].1,
            ))
        })
        .collect()
}

/// Per (recomputation, expert degree, interleaved, V-shaped, expert-parallel share): the
/// partitions.
type PlanKey = (Recompute, u64, bool, bool, Rational);
/// A mesh, keyed with whether its experts dispatch node by node, which sets their wire share.
type MeshKey = (u64, u64, u64, u64, u64, bool);
/// A plan's group parts: (plan, ZeRO stage, micro-batches, mesh, overlaps).
type PartsKey = (usize, u8, u64, MeshKey, [bool; 2]);

/// What [`estimate_variants`] computes once and shares between strategies: the partitions,
/// the interleaved stages of each (pp, chunks, V-shaped), the links' balances of each mesh and
/// each plan's group parts per ZeRO stage (the same for every schedule and chunk count).
#[derive(Default)]
struct Shared {
    plans: Vec<(PlanKey, Result<Plan, StrategyError>)>,
    chunk_groups: Vec<((u64, u64, bool), ChunkPlace)>,
    kaps: Vec<(MeshKey, (Kappas<f64>, Rational))>,
    parts: Vec<(PartsKey, Vec<StageParts>)>,
}

impl Shared {
    /// The links' balances and expert-parallel share of `key`'s mesh, from `of` the first time.
    fn kappas(
        &mut self,
        key: MeshKey,
        of: impl FnOnce() -> (Kappas<f64>, Rational),
    ) -> (Kappas<f64>, Rational) {
        match self.kaps.iter().find(|(x, _)| *x == key) {
            Some((_, x)) => x.clone(),
            None => {
                let x = of();
                self.kaps.push((key, x.clone()));
                x
            }
        }
    }

    /// Where the interleaved stages of `k` at `v` chunks are kept.
    fn chunk_group(
        &mut self,
        numbers: &[BlockNumbers],
        layer_block: &[bool],
        k: &Knobs,
        v: u64,
    ) -> usize {
        let at = (k.pp, v, k.v_placed());
        if let Some(i) = self.chunk_groups.iter().position(|(x, _)| *x == at) {
            return i;
        }
        // The layers divide (checked by the caller), so the placement exists.
        let g = interleaved_groups(
            numbers,
            layer_block,
            (k.pp as usize, v),
            k.schedule,
            k.pipeline_split,
        );
        let (groups, chunks) = g.unwrap_or_default();
        let place = (groups, std::sync::Arc::new(chunks));
        self.chunk_groups.push((at, place));
        self.chunk_groups.len() - 1
    }

    /// Where the partition of `key` (with the interleaved stages kept at `groups`) is kept, planned by
    /// `plan` the first time.
    fn plan(
        &mut self,
        key: PlanKey,
        groups: Option<usize>,
        plan: impl FnOnce() -> Result<Plan, StrategyError>,
    ) -> usize {
        let groups = groups.map(|g| &self.chunk_groups[g].1 .0);
        let same = |x: &PlanKey, p: &Result<Plan, StrategyError>| {
            *x == key && groups.is_none_or(|g| p.as_ref().is_ok_and(|p| p.groups == *g))
        };
        if let Some(i) = self.plans.iter().position(|(x, p)| same(x, p)) {
            return i;
        }
        self.plans.push((key, plan()));
        self.plans.len() - 1
    }
}

pub(super) fn estimate_planned(
    plan: &Plan,
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    parts: &[StageParts],
) -> Estimate {
    // The stage with the largest full time and the one with the largest time (the last of
    // equals, as `max_by` picks), and the largest memory, without collecting the stages.
    let mut busiest: Option<RoughStage> = None;
    let mut longest: Option<RoughStage> = None;
    let mut memory = 0.0f64;
    rough_each(
        plan,
        numbers,
        layer_block,
        k,
        kap,
        false,
        Some(parts),
        |x| {
            if busiest.is_none_or(|b| x.full.total_cmp(&b.full) != std::cmp::Ordering::Less) {
                busiest = Some(x);
            }
            if longest.is_none_or(|b| x.time.total_cmp(&b.time) != std::cmp::Ordering::Less) {
                longest = Some(x);
            }
            memory = memory.max(x.memory);
        },
    );
    let (Some(bs), Some(tm)) = (busiest, longest) else {
        return Estimate::default();
    };
    let mf = k.microbatches as f64;
    let frac = (k.pp - 1) as f64 / (mf * plan.v as f64);
    // ZB-H1 idles twice its weight gradients less ([`zb_h1_bubble`]).
    let deferred = if k.schedule.splits_backward() {
        2.0 * tm.weight
    } else {
        0.0
    };
    let (total, flop_part) = if k.schedule.overlaps_chunks() {
        // DualPipe's bubble ([`BlockCost::dualpipe_bubble`]), its FLOP part in the slowest
        // stage's own proportion.
        let share = if tm.time > 0.0 {
            tm.compute / tm.time
        } else {
            0.0
        };
        (
            bs.full + tm.dualpipe,
            bs.compute - bs.hidden_flops + tm.dualpipe * share,
        )
    } else {
        (
            bs.full + (tm.time - deferred) * frac,
            bs.compute - bs.hidden_flops + (tm.compute - deferred) * frac,
        )
    };
    Estimate {
        total,
        flop_part,
        byte_part: total - flop_part,
        memory,
    }
}
