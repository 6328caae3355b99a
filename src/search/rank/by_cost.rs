//! Ranking by relative cost: the screened strategies priced exactly in order until no
//! cheaper one can follow, the smallest footprint when nothing fits, the Pareto frontier.

use super::*;

/// Whether an estimate fits in `memory` (bytes), with a floating-point margin.
pub(super) fn fits_in(e: &Estimate, cap: f64) -> bool {
    e.memory <= cap * (1.0 + 1e-9)
}

/// The estimates in order: those that fit first, then by cost, memory and their first order;
/// and how many fit.
pub(super) fn in_order(
    estimates: Vec<(Cand, Estimate)>,
    memory: &Rational,
) -> (Vec<(Cand, Estimate)>, usize) {
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
pub(super) struct Found<'a> {
    pub(super) variants: &'a Variants,
    pub(super) cache: &'a Cache,
    pub(super) estimates: &'a [(Cand, Estimate)],
}

/// Ranking by relative cost: every strategy that could be among the shown rows (a relative
/// margin of 1e-6 around the last one) and every strategy whose memory is within 1e-6 of the
/// capacity priced exactly, so that the shown order and feasibility are exact.
#[allow(clippy::too_many_arguments)]
pub(super) fn rank_by_cost(
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
        balance_range,
        search_seconds: start.elapsed().as_secs_f64(),
        pareto,
        smallest,
        cheapest,
        // Nothing simulated; failures, the auto layouts and the e-graph's are the caller's.
        ..RankResult::default()
    }
}

/// When nothing fits: the strategy with the smallest memory footprint and the cheapest one,
/// priced exactly (every strategy within 10⁻⁶ of the smallest estimate is priced).
pub(super) fn smallest_footprint(
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
pub(super) fn pareto_by_cost(
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
pub(super) fn frontier(mut rows: Vec<Priced>) -> Vec<RankedRow> {
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
pub(super) fn price<'a>(
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
    let on = MachineRef::new(calib, opts.gpus_per_node, &opts.memory);
    let e = evaluate_with(model, analysis, numbers, &c.k, on, true);
    let e = opts.failures.keep(|| label(c), e)?;
    Some((e, analysis, numbers))
}

/// A strategy as the failure log names it.
pub(super) fn label(c: &Cand) -> String {
    format!("{} (layout variant {})", c.k.describe(None), c.v)
}
