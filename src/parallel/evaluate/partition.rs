//! The pipeline partition of one strategy, chosen in floating point: runs of equal blocks
//! packed into stages, the interleaved schedule's chunks, the stages each rank holds.

use super::*;

/// Splits items given as runs of equal times — (time, items) in order, as a model's blocks
/// and their copies — into exactly `pp` contiguous stages, minimising the largest stage time:
/// a binary search on the largest load with a greedy packing ([`pack_runs`]), then the stages
/// with most items split until there are `pp` (splitting never raises the largest load).
/// Returns the stage boundaries (item indices).
pub(super) fn partition_runs(runs: &[(f64, usize)], pp: usize) -> Option<Vec<usize>> {
    let n: usize = runs.iter().map(|r| r.1).sum();
    if pp == 0 || pp > n {
        return None;
    }
    if pp == 1 {
        return Some(vec![0, n]);
    }
    // Negative or undefined times break the run-wise packing's premise that loads grow: those
    // are packed item by item.
    let regular = runs.iter().all(|(x, _)| *x >= 0.0);
    let items: Vec<f64> = if regular {
        Vec::new()
    } else {
        runs.iter()
            .flat_map(|&(x, c)| std::iter::repeat_n(x, c))
            .collect()
    };
    let pack = |limit: f64, stop: usize, bounds: Option<&mut Vec<usize>>| {
        if regular {
            pack_runs(runs, limit, stop, bounds)
        } else {
            pack_items(&items, limit, stop, bounds)
        }
    };
    let mut lo = runs.iter().map(|r| r.0).fold(0.0, f64::max);
    // One stage holding everything, loaded as the packing loads it: this limit always fits.
    let mut hi = if regular {
        runs.iter()
            .fold(0.0, |l, &(x, c)| if c == 0 { l } else { l + c as f64 * x })
    } else {
        items.iter().sum::<f64>()
    };
    // Until `lo` and `hi` are adjacent floats: from there on a midpoint is one of them, and
    // (`lo` once shown not to fit) the search can no longer move.
    let mut lo_fails = false;
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if mid >= hi || (mid <= lo && lo_fails) {
            break;
        }
        if pack(mid, pp, None) <= pp {
            hi = mid;
        } else {
            lo = mid;
            lo_fails = true;
        }
    }
    let mut bounds = Vec::with_capacity(pp + 1);
    if pack(hi, usize::MAX, Some(&mut bounds)) > pp {
        return None;
    }
    while bounds.len() - 1 < pp {
        let s = (0..bounds.len() - 1).max_by_key(|&s| bounds[s + 1] - bounds[s])?;
        if bounds[s + 1] - bounds[s] < 2 {
            return None;
        }
        let mid = bounds[s] + (bounds[s + 1] - bounds[s]) / 2;
        bounds.insert(s + 1, mid);
    }
    Some(bounds)
}

/// The greedy packing of runs of equal times under `limit`: a stage ends before an item when
/// its load is positive and the item would take it over `limit`. A stage's load inside a run
/// is its load on entering plus whole multiples of the run's time, so the items a stage takes
/// from a run are found by binary search, and the stages started inside a run all hold the same
/// number of items (the first k ≥ 1 whose next item ends the stage), the last what is left: the
/// cost does not grow with the copies. Returns the number of stages (counting stops past
/// `stop`); with `bounds`, records each stage's first item and, last, the item count.
pub(super) fn pack_runs(
    runs: &[(f64, usize)],
    limit: f64,
    stop: usize,
    mut bounds: Option<&mut Vec<usize>>,
) -> usize {
    if let Some(b) = bounds.as_deref_mut() {
        b.push(0);
    }
    let mut stages = 1;
    let mut load = 0.0f64;
    let mut at = 0;
    for &(x, count) in runs {
        // The stage open when the run begins takes its items while they fit.
        let before = |i: usize| if i == 0 { load } else { load + i as f64 * x };
        let i = first_true(0, count, ((limit - load) / x).floor(), |m| {
            before(m) > 0.0 && load + (m + 1) as f64 * x > limit
        });
        if i == count {
            load = before(count);
            at += count;
            continue;
        }
        let per = first_true(1, count, (limit / x).floor(), |k| {
            k as f64 * x > 0.0 && (k + 1) as f64 * x > limit
        });
        let left = count - i;
        let new = left.div_ceil(per);
        if let Some(b) = bounds.as_deref_mut() {
            b.extend((0..new).map(|s| at + i + s * per));
        }
        stages += new;
        if stages > stop {
            return stages;
        }
        load = ((left - 1) % per + 1) as f64 * x;
        at += count;
    }
    if let Some(b) = bounds {
        b.push(at);
    }
    stages
}

/// The first `i` in `lo..hi` where `pred`, false and then true along the range, holds (`hi`
/// when it never does): the binary search's answer, found from `guess` in two probes when the
/// guess is at the boundary or next to it, by binary search within what the probes leave
/// otherwise.
pub(super) fn first_true(lo: usize, hi: usize, guess: f64, pred: impl Fn(usize) -> bool) -> usize {
    // Every index below `a` is false; `b` is `hi` or a true index.
    let (mut a, mut b) = (lo, hi);
    if guess.is_finite() {
        let g = (guess.max(0.0).min(hi as f64) as usize).clamp(lo, hi);
        if g < b {
            if pred(g) {
                b = g;
            } else {
                a = g + 1;
            }
        }
        if b == g && g > a {
            if pred(g - 1) {
                b = g - 1;
            } else {
                a = g;
            }
        } else if a == g + 1 && a < b {
            if pred(a) {
                b = a;
            } else {
                a += 1;
            }
        }
    }
    while a < b {
        let m = (a + b) / 2;
        if pred(m) {
            b = m;
        } else {
            a = m + 1;
        }
    }
    a
}

/// [`pack_runs`] item by item, for times that are negative or undefined.
pub(super) fn pack_items(
    t: &[f64],
    limit: f64,
    stop: usize,
    mut bounds: Option<&mut Vec<usize>>,
) -> usize {
    if let Some(b) = bounds.as_deref_mut() {
        b.push(0);
    }
    let mut stages = 1;
    let mut load = 0.0;
    for (i, &x) in t.iter().enumerate() {
        if load > 0.0 && load + x > limit {
            stages += 1;
            if stages > stop {
                return stages;
            }
            if let Some(b) = bounds.as_deref_mut() {
                b.push(i);
            }
            load = 0.0;
        }
        load += x;
    }
    if let Some(b) = bounds {
        b.push(t.len());
    }
    stages
}

/// The pipeline layout of one strategy, chosen in floating point.
pub(super) struct Plan {
    /// Per block, its costs as floats.
    pub(super) cf: Vec<BlockCost<f64>>,
    /// The stages, in order, as runs of consecutive stages that hold the same copies (a
    /// pipeline of equal layers has a few runs however many stages it has).
    pub(super) groups: Vec<StageGroup>,
    /// Pipeline stages.
    pub(super) stages: usize,
    /// Model chunks per device.
    pub(super) v: u64,
    /// With model chunks (interleaving, ZB-V), per rank how its chunks are held apart
    /// ([`rank_chunks`]); empty otherwise.
    pub(super) chunks: std::sync::Arc<RankChunks>,
}

/// Copies of each block on a stage or a chunk, in order.
pub(super) type Copies = Vec<(usize, u64)>;

/// An interleaved placement: the stages, and how each rank's chunks are held apart.
pub(super) type ChunkPlace = (Vec<StageGroup>, std::sync::Arc<RankChunks>);

/// Per pipeline rank, how its chunks are held apart ([`Plan::held_apart`]): each chunk's class,
/// in the rank's order, and the copies of each class (chunks of a class hold the same copies);
/// none where all its chunks hold the same copies.
pub(super) type RankChunks = Vec<Option<(Vec<usize>, Vec<Copies>)>>;

/// [`RankChunks`] of `chunks` (the copies on each chunk, in model order) over `p` ranks, each
/// rank's chunks where [`crate::strategy::schedule::rank_of`] places them.
pub(super) fn rank_chunks(chunks: &[Copies], schedule: Schedule, p: usize) -> RankChunks {
    let mut mine: Vec<Vec<&Copies>> = vec![Vec::new(); p];
    for (c, copies) in chunks.iter().enumerate() {
        mine[crate::strategy::schedule::rank_of(schedule, c, p)].push(copies);
    }
    mine.into_iter()
        .map(|mine| {
            if mine.iter().all(|x| *x == mine[0]) {
                return None;
            }
            let (mut firsts, mut class): (Vec<Copies>, Vec<usize>) = (Vec::new(), Vec::new());
            for x in mine {
                class.push(firsts.iter().position(|y| y == x).unwrap_or_else(|| {
                    firsts.push(x.clone());
                    firsts.len() - 1
                }));
            }
            Some((class, firsts))
        })
        .collect()
}

/// A stage's copies and the blocks whose boundaries it receives and sends ([`Plan::place`]).
pub(super) type StagePlace<'a> = (&'a [(usize, u64)], Option<usize>, Option<usize>);

/// Consecutive pipeline stages holding the same block copies.
#[derive(PartialEq)]
pub(super) struct StageGroup {
    /// The first of them.
    pub(super) first: usize,
    /// How many.
    pub(super) len: usize,
    /// Copies of each block on each of them, in order.
    pub(super) counts: Vec<(usize, u64)>,
}

impl Plan {
    /// The copies of each block on stage `s`, in order.
    pub(super) fn counts(&self, s: usize) -> &[(usize, u64)] {
        let g = self.groups.partition_point(|g| g.first <= s) - 1;
        &self.groups[g].counts
    }

    /// The parts whose memory rank `s` holds apart, as [`BlockCost::rank_memory`] takes them
    /// (`costs`: per block): under ZB-V its chunks s and 2·pp − 1 − s; interleaved, its chunks
    /// in order where they differ (the embedding's, the head's, an uneven split), none where
    /// they hold the same copies (priced as the rank's sum,
    /// [`in_flight`](crate::parallel::amount::in_flight)); under DualPipe its stage (`own`, summed) and
    /// the mirrored stage; none where the rank runs one stage.
    pub(super) fn held_apart<T: Amount>(
        &self,
        costs: &[BlockCost<T>],
        k: &Knobs,
        s: usize,
        own: &BlockCost<T>,
    ) -> Option<Apart<T>> {
        if !self.chunks.is_empty() {
            let (class, firsts) = self.chunks.get(s)?.as_ref()?;
            return Some(Apart {
                classes: firsts.iter().map(|x| BlockCost::stage(costs, x)).collect(),
                class: class.clone(),
                mirror: false,
            });
        }
        let mirror = BlockCost::stage(costs, self.counts(dualpipe_mirror(k, s)?));
        Some(Apart {
            classes: vec![own.clone(), mirror],
            class: vec![0, 1],
            mirror: true,
        })
    }

    /// Memory of the device that runs stage `s` (`c`: its summed costs; `costs`: per block):
    /// its parts held apart where it runs several ([`Plan::held_apart`]), else the stage whole.
    pub(super) fn memory<T: Amount>(
        &self,
        costs: &[BlockCost<T>],
        k: &Knobs,
        s: usize,
        c: &BlockCost<T>,
        full_layer_saved: &T,
    ) -> [T; 4] {
        match self.held_apart(costs, k, s, c) {
            Some(apart) => c.rank_memory(&apart, k, self.v, s, full_layer_saved),
            None => c.memory(k, self.v, s, full_layer_saved),
        }
    }

    /// The block of stage `s`'s last copy: the block whose output the stage sends on.
    pub(super) fn last_block(&self, s: usize) -> Option<usize> {
        if s >= self.stages {
            return None;
        }
        self.counts(s).last().map(|(b, _)| *b)
    }

    /// What stage `s`'s exact times depend on (of `pp` stages): its copies and the blocks whose
    /// boundaries it receives and sends.
    pub(super) fn place(&self, s: usize, pp: u64) -> StagePlace<'_> {
        let prev = if s > 0 { self.last_block(s - 1) } else { None };
        let next = if (s as u64) + 1 < pp {
            self.last_block(s)
        } else {
            None
        };
        (self.counts(s), prev, next)
    }

    /// Copies of each block on each stage, stage by stage.
    pub(super) fn stage_counts(&self) -> Vec<Vec<(usize, u64)>> {
        self.groups
            .iter()
            .flat_map(|g| std::iter::repeat_n(g.counts.clone(), g.len))
            .collect()
    }

    /// The stages that stand for all: of each group its first, its second and its last. A
    /// group's stages hold the same copies; its inner stages have neighbours holding them too,
    /// so they send and receive the same boundaries and differ only in the micro-batches in
    /// flight, which never grow with the stage index
    /// ([`in_flight`](crate::parallel::amount::in_flight)): the first holds the most.
    /// With `all`, every stage.
    pub(super) fn representatives(
        &self,
        all: bool,
    ) -> impl Iterator<Item = (usize, usize, &StageGroup)> + '_ {
        self.groups.iter().enumerate().flat_map(move |(gi, g)| {
            let n = if all { g.len } else { g.len.min(3) };
            (0..n).map(move |i| {
                let s = if all || i == 0 {
                    g.first + i
                } else if i + 1 == n {
                    g.first + g.len - 1
                } else {
                    g.first + 1
                };
                (s, gi, g)
            })
        })
    }
}

/// Each block's costs under `k`, as floats: the exact amounts converted once, combined by the
/// same [`BlockCost::of`] as the exact pricing (the expert view, which can fail, converted from
/// the exact one where the model has experts).
pub(super) fn rough_costs<N: Priced>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    share: &Rational,
) -> Vec<BlockCost<f64>> {
    numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let x = &n.approx;
            let e = if k.ep > 1 || !n.expert_params.is_zero() {
                expert_view(n, k, share)
                    .unwrap_or_default()
                    .map(|x| float(x.value()))
            } else {
                ExpertView {
                    dense: x.params,
                    experts: 0.0,
                    dp_grad: x.dp_grad,
                    expert_dp_grad: 0.0,
                    ep_bytes: 0.0,
                    fp8_weights: x.fp8_weights,
                    fp8_experts: 0.0,
                }
            };
            BlockCost::of(x, e, layer_block[bi], k.recompute, k.precision)
        })
        .collect()
}

pub(super) fn plan_pipeline<N: Priced>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    share: &Rational,
) -> Result<Plan, StrategyError> {
    let cf = rough_costs(numbers, layer_block, k, share);
    // The partition places block copies (a run of copies per block); without pipelining the
    // copies are only counted, so any number of layers is fine.
    let copies: u64 = numbers
        .iter()
        .map(|n| n.repeat)
        .fold(0u64, |a, r| a.saturating_add(r));
    if k.pp > 1 && copies > MAX_PIPELINED_LAYERS {
        return Err(StrategyError::TooManyLayers {
            copies,
            most: MAX_PIPELINED_LAYERS,
        });
    }
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    if k.pp > copies {
        return Err(StrategyError::TooManyStages {
            pp: k.pp,
            layers: copies,
        });
    }
    let v = k.virtual_chunks();
    // The activations in flight are counted from the interleaved order.
    crate::strategy::check_schedule_microbatches(k)?;
    k.check_interleaved_layers(layers)?;
    if k.pp == 1 {
        let counts = numbers
            .iter()
            .enumerate()
            .map(|(b, n)| (b, n.repeat))
            .collect();
        return Ok(Plan {
            cf,
            groups: vec![StageGroup {
                first: 0,
                len: 1,
                counts,
            }],
            stages: 1,
            v,
            chunks: Default::default(),
        });
    }
    if v > 1 {
        // Checked above: the layers divide evenly over the chunks.
        let (groups, chunks) = interleaved_groups(
            numbers,
            layer_block,
            (k.pp as usize, v),
            k.schedule,
            k.pipeline_split,
        )
        .ok_or_else(|| k.interleaved_layers(layers))?;
        return Ok(Plan {
            cf,
            groups,
            stages: k.pp as usize,
            v,
            chunks: std::sync::Arc::new(chunks),
        });
    }
    // Each block copy's time for one micro-batch, what the partition balances: a run of equal
    // times per block (blocks without copies hold no items).
    let (blocks, runs): (Vec<usize>, Vec<(f64, usize)>) = numbers
        .iter()
        .enumerate()
        .filter(|(_, n)| n.repeat > 0)
        .map(|(b, n)| (b, (cf[b].block_time(kap), n.repeat as usize)))
        .unzip();
    let bounds = partition_runs(&runs, k.pp as usize).ok_or(StrategyError::NoPartition)?;
    Ok(Plan {
        cf,
        groups: stage_groups(&blocks, &runs, &bounds),
        stages: bounds.len() - 1,
        v,
        chunks: Default::default(),
    })
}

/// Copies of each block on each stage, in order: the items of `runs` (one run of equal items
/// per block of `blocks`) cut at the partition's `bounds`; consecutive stages with the same
/// copies form one group.
pub(super) fn stage_groups(
    blocks: &[usize],
    runs: &[(f64, usize)],
    bounds: &[usize],
) -> Vec<StageGroup> {
    let mut groups: Vec<StageGroup> = Vec::new();
    let mut counts = Vec::new();
    let mut run = 0;
    let mut start = 0; // first item of `runs[run]`
    for (s, w) in bounds.windows(2).enumerate() {
        let (a, b) = (w[0], w[1]);
        counts.clear();
        while run < runs.len() && start + runs[run].1 <= a {
            start += runs[run].1;
            run += 1;
        }
        let (mut r, mut first) = (run, start);
        while r < runs.len() && first < b {
            let end = first + runs[r].1;
            let held = end.min(b) - first.max(a);
            if held > 0 {
                counts.push((blocks[r], held as u64));
            }
            first = end;
            r += 1;
        }
        match groups.last_mut() {
            Some(g) if g.counts == counts => g.len += 1,
            _ => groups.push(StageGroup {
                first: s,
                len: 1,
                counts: counts.clone(),
            }),
        }
    }
    groups
}

/// Block copies on each model chunk of the interleaved schedule, as Megatron-LM places them and
/// the timeline runs them: the layers split evenly over the `chunks`, the blocks before the first
/// layer (embeddings) on the first chunk and those after the last (the head) on the last. With
/// `split` counting the embedding or the loss as a layer ([`PipelineSplit`]), the split is of
/// the layers and those, so the first or last chunk holds one layer fewer. `None` when there
/// are no layers or they do not divide evenly.
pub fn interleaved_chunks(
    repeats: &[u64],
    layer_block: &[bool],
    chunks: u64,
    split: PipelineSplit,
) -> Option<Vec<Vec<(usize, u64)>>> {
    let layers: u64 = repeats
        .iter()
        .zip(layer_block)
        .filter(|(_, l)| **l)
        .map(|(r, _)| *r)
        .sum();
    let units = layers + split.extra();
    if layers == 0 || !units.is_multiple_of(chunks) {
        return None;
    }
    let per = units / chunks;
    let last = chunks as usize - 1;
    let mut out: Vec<Vec<(usize, u64)>> = vec![Vec::new(); chunks as usize];
    // Units of the split placed so far: the embedding's first, where it counts.
    let mut seen = u64::from(split.embedding);
    let mut placed = 0u64;
    let mut add = |c: usize, b: usize, n: u64| match out[c].last_mut() {
        Some((x, m)) if *x == b => *m += n,
        _ => out[c].push((b, n)),
    };
    for (b, &r) in repeats.iter().enumerate() {
        if layer_block[b] {
            let mut left = r;
            while left > 0 {
                let take = (per - seen % per).min(left);
                add(((seen / per) as usize).min(last), b, take);
                seen += take;
                placed += take;
                left -= take;
            }
        } else if placed == 0 {
            add(0, b, r);
        } else if placed < layers {
            add(((seen / per) as usize).min(last), b, r);
        } else {
            add(last, b, r);
        }
    }
    Some(out)
}

/// The stages of the interleaved schedule with `v` chunks per device ([`interleaved_chunks`];
/// stage `s` holds chunks `s`, `s + pp`, …, or under ZB-V chunks `s` and `2pp − 1 − s`:
/// [`rank_of`]), as runs of consecutive stages holding the same copies. No balancing moves a
/// layer to offset the head or the embeddings, so the stage that holds them is the busiest.
///
/// [`rank_of`]: crate::strategy::schedule::rank_of
pub(super) fn interleaved_groups<N>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    (pp, v): (usize, u64),
    schedule: Schedule,
    split: PipelineSplit,
) -> Option<(Vec<StageGroup>, RankChunks)> {
    let repeats: Vec<u64> = numbers.iter().map(|n| n.repeat).collect();
    let chunks = interleaved_chunks(&repeats, layer_block, pp as u64 * v, split)?;
    let mut held = vec![vec![0u64; numbers.len()]; pp];
    for (c, copies) in chunks.iter().enumerate() {
        for &(b, n) in copies {
            held[crate::strategy::schedule::rank_of(schedule, c, pp)][b] += n;
        }
    }
    let mut groups: Vec<StageGroup> = Vec::new();
    for (s, h) in held.iter().enumerate() {
        let counts: Vec<(usize, u64)> = h
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, c)| (b, *c))
            .collect();
        match groups.last_mut() {
            Some(g) if g.counts == counts => g.len += 1,
            _ => groups.push(StageGroup {
                first: s,
                len: 1,
                counts,
            }),
        }
    }
    Some((groups, rank_chunks(&chunks, schedule, pp)))
}

/// Whether each block of `model` is a repeated layer (what recomputation applies to).
pub(super) fn layer_blocks(model: &Model) -> Vec<bool> {
    model
        .blocks
        .iter()
        .map(|b| b.repeat != Poly::one())
        .collect()
}

/// The pipeline partition the exact evaluation of a strategy uses: the copies of each block on
/// each stage, in order (`kappa` the machine balance of each tier, as for [`estimate`]).
pub fn pipeline_stage_counts(
    model: &Model,
    numbers: &[BlockNumbers],
    k: &Knobs,
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    gpus_per_node: u64,
) -> Result<Vec<Vec<(usize, u64)>>, StrategyError> {
    let mesh = Mesh::of(k, gpus_per_node);
    let layer_block = layer_blocks(model);
    // The partition balances per-micro-batch time, in which no overlap is credited.
    let kap = mesh_kappas(&mesh, k, kappa, kappa_hbm, 1.0);
    let share = ep_share(numbers, k, &mesh);
    Ok(plan_pipeline(numbers, &layer_block, k, &kap, &share)?.stage_counts())
}

/// Under interleaving with `v` chunks a device holds `v` model chunks, each sending its output
/// forward and its input gradient back: 2·(v − 1) more layer-boundary exchanges per micro-batch
/// than the stage's own two (Narayanan et al. SC'21 §2.2: "the amount of communication also
/// increases by v"). The block whose boundary is exchanged, when there are such exchanges.
pub(super) fn interleaved_boundary(
    counts: &[(usize, u64)],
    layer_block: &[bool],
    v: u64,
) -> Option<usize> {
    if v <= 1 {
        return None;
    }
    counts.iter().map(|(b, _)| *b).find(|b| layer_block[*b])
}

/// Under DualPipe with more than one stage, the stage whose rank also runs stage `s`,
/// pp − 1 − s: the second of [`stage_ranks`](crate::strategy::schedule::stage_ranks).
pub(super) fn dualpipe_mirror(k: &Knobs, s: usize) -> Option<usize> {
    crate::strategy::schedule::stage_ranks(k.schedule, s, k.pp as usize).nth(1)
}

/// Under DualPipe, the rank that runs stage `s`: its mirrored stage ([`dualpipe_mirror`]) and
/// the blocks of both, copies of the same block added, in order of first appearance.
pub(super) fn dualpipe_rank(
    plan: &Plan,
    k: &Knobs,
    s: usize,
) -> Option<(usize, Vec<(usize, u64)>)> {
    let mirror = dualpipe_mirror(k, s)?;
    let (own, theirs) = (plan.counts(s), plan.counts(mirror));
    let mut counts: Vec<(usize, u64)> = Vec::with_capacity(own.len() + theirs.len());
    for &(b, n) in own.iter().chain(theirs) {
        match counts.iter_mut().find(|(c, _)| *c == b) {
            Some((_, m)) => *m += n,
            None => counts.push((b, n)),
        }
    }
    Some((mirror, counts))
}
