//! Ranking by simulated seconds: strategies simulated in the order of a lower bound on their
//! step time, until the bound of the next exceeds the slowest row kept; the Pareto frontier and
//! the stability of the order under the machine's balance.

use super::*;

/// What the relative-cost search hands to the search by seconds.
pub(super) struct SecondsSearch<'a> {
    pub(super) variants: &'a Variants,
    pub(super) cache: &'a Cache,
    pub(super) estimates: &'a [(Cand, Estimate)],
    pub(super) kappa: &'a (dyn Fn(Tier) -> f64 + Sync),
    pub(super) evaluated: usize,
    pub(super) feasible: usize,
    pub(super) rejected: Rejections,
    pub(super) start: Instant,
}

/// A strategy simulated: its seconds per step and its exact evaluation.
pub(super) type Simulated = Option<(f64, Evaluation)>;

/// A strategy tried by the search by seconds: whether it was priced and fits (what the search
/// counts as simulated), and its simulation where the timeline ran.
pub(super) type Attempt = (bool, Simulated);

/// How the search by seconds tries a strategy, noting its failures in the context's log.
pub(super) type TryFn<'a> = dyn Fn(&Cand, &Ctx) -> Attempt + Sync + 'a;

/// Rows found by seconds: (seconds, evaluation, layout variant).
pub(super) type TimedRows = Vec<(f64, Evaluation, usize)>;

/// Strategies simulated: (strategy, seconds, exact memory).
pub(super) type Sims = Vec<(Cand, f64, Rational)>;

/// The fastest strategies by simulated seconds, exactly: every strategy that fits gets a
/// closed-form lower bound of its simulated time ([`crate::timeline::bound`]); they are
/// simulated in the order of their bounds until the next bound exceeds the `top`-th best time
/// found, so no strategy left unsimulated can be among the rows shown, whatever `top` is.
pub(super) fn rank_by_seconds(
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
        simulated: simulated.into_inner(),
        balance_range,
        search_seconds: search.start.elapsed().as_secs_f64(),
        pareto,
        smallest,
        cheapest,
        // Failures, the auto layouts and the e-graph's are filled in by the caller.
        ..RankResult::default()
    })
}

/// The rates a strategy is timed at, by the key of [`bound_rates_key`]: under per-row profiles
/// each stack's, otherwise the table's (one key, so no chains are built twice). Paced for the
/// fewest devices any strategy uses: the slowest of more devices is slower, so the bounds stay
/// below every simulation.
pub(super) fn bound_rates(
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
pub(super) fn bound_rates_key(calib: &Calibration, k: &Knobs) -> Option<Stack> {
    calib.per_row.is_some().then(|| Stack::of(k))
}

/// The key of a strategy's chains. The chains depend on the ZeRO stage only through the
/// gradient buffer a backward adds to (the whole one, or under ZeRO ≥ 2 the device's shard),
/// so the key tells those apart; and on whether the schedule splits the backward (ZB-H1's
/// weight passes are chains of their own).
pub(super) fn chain_key(calib: &Calibration, c: &Cand) -> ChainKey {
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
pub(super) fn bound_chains(
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
pub(super) type PartitionKey = (NumbersKey, u64, Recompute, Schedule, u64, u64);

/// Block copies on each virtual stage ([`crate::timeline::bound::virtual_stages`]).
pub(super) type StageCounts = Vec<Vec<(usize, u64)>>;

/// The virtual stages of the strategy `c` with its blocks' `numbers` and chains `ch`; None
/// where its pipeline cannot be partitioned (noted in the context's log).
pub(super) fn bound_stages(
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
pub(super) fn bounded_in_order<'c>(
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
pub(super) fn simulate_in_order(
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
pub(super) type Ahead = (Attempt, FailureLog);

/// `attempt` of `k` noting its failures in a log of its own.
pub(super) fn try_apart(attempt: &TryFn, k: &Cand, opts: &Ctx) -> Ahead {
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
pub(super) fn simulate_ahead(
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
pub(super) fn insert_row<E: Borrow<Evaluation>>(
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
pub(super) fn keep_top_groups<E: Borrow<Evaluation>>(
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
pub(super) fn pareto_by_seconds(
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
pub(super) fn stability(
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
