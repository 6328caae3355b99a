//! `rank`: every mesh shape of N devices, micro-batch counts, schedules, sequence parallelism,
//! recomputation and ZeRO stages, each priced exactly; feasible strategies first, by relative
//! cost.

use crate::calib::Calibration;
use crate::model::Model;
use crate::parallel::evaluate::{
    block_numbers, check_divisibility, evaluate, microbatch_bindings, BlockNumbers,
};
use crate::parallel::{analyse, check_model_limits, Analysis, Evaluation, Layout};
use crate::strategy::Tier;
use crate::strategy::{Knobs, Recompute, Schedule, MAX_DEVICES};
use crate::sym::{Bindings, Rational};
use num_traits::{One, Zero};
use serde::Serialize;
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
    /// Largest micro-batch count tried.
    pub max_microbatches: u64,
}

/// One ranked strategy.
#[derive(Debug, Clone, Serialize)]
pub struct RankedRow {
    /// 1-based rank.
    pub rank: usize,
    /// The evaluation.
    pub evaluation: Evaluation,
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
    /// Strategies rejected before pricing, by reason.
    pub rejected: BTreeMap<String, usize>,
    /// Range of the factor λ scaling every κ over which the top strategy stays first.
    #[serde(skip)]
    pub balance_range: Option<(Rational, Option<Rational>)>,
    /// Seconds spent.
    pub search_seconds: f64,
}

/// Evaluated blocks of one (dp, tp, micro-batches, sequence-parallel) choice, or why not.
type Numbers = Result<Vec<BlockNumbers>, String>;

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

fn reject(map: &mut BTreeMap<String, usize>, why: String) {
    // Group reasons by their first words so the summary stays short.
    let key: String = why
        .split(" = ")
        .next()
        .unwrap_or(&why)
        .chars()
        .take(60)
        .collect();
    *map.entry(key).or_insert(0) += 1;
}

/// Ranks the strategies of `model` on `opts.devices` devices.
pub fn rank(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &RankOptions,
) -> Result<RankResult, String> {
    let start = Instant::now();
    if opts.devices == 0 {
        return Err("--devices must be at least 1".into());
    }
    if opts.devices > MAX_DEVICES {
        return Err(format!(
            "--devices {} is absurd (more than {MAX_DEVICES})",
            opts.devices
        ));
    }
    let layouts: Vec<Layout> = [false, true]
        .into_iter()
        .map(|sp| Layout {
            sequence_parallel: sp,
            ..Layout::default()
        })
        .collect();
    let analyses: Vec<Analysis> = layouts.iter().map(|l| analyse(model, l)).collect();
    let batch = values.get("B").cloned().unwrap_or_else(Rational::one);
    let mut rejected = BTreeMap::new();
    let mut evals: Vec<Evaluation> = Vec::new();
    let mut cache: BTreeMap<(u64, u64, u64, bool), Numbers> = BTreeMap::new();
    for tp in divisors(opts.devices) {
        for pp in divisors(opts.devices / tp) {
            let dp = opts.devices / tp / pp;
            let per_dp = &batch / Rational::from_integer(dp.into());
            if !per_dp.is_integer() {
                reject(&mut rejected, format!("batch not divisible by dp = {dp}"));
                continue;
            }
            let mbs: Vec<u64> = divisors(per_dp.to_integer().try_into().unwrap_or(1))
                .into_iter()
                .filter(|m| {
                    *m <= opts.max_microbatches
                        && (pp == 1
                            || *m >= pp
                            || *m == per_dp.to_integer().try_into().unwrap_or(1))
                })
                .collect();
            for m in mbs {
                for (sp, analysis) in [false, true].into_iter().zip(&analyses) {
                    if sp && tp == 1 {
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
                    };
                    if let Err(e) = check_model_limits(model, values, &base) {
                        reject(&mut rejected, e);
                        continue;
                    }
                    let numbers = cache.entry((dp, tp, m, sp)).or_insert_with(|| {
                        let b = microbatch_bindings(values, &base);
                        check_divisibility(model, analysis, &b, &base)?;
                        block_numbers(analysis, &b)
                    });
                    let numbers = match numbers {
                        Ok(n) => n.clone(),
                        Err(e) => {
                            reject(&mut rejected, e.clone());
                            continue;
                        }
                    };
                    let schedules: Vec<(Schedule, u64)> = if pp == 1 {
                        vec![(Schedule::OneFOneB, 1)]
                    } else {
                        vec![
                            (Schedule::Gpipe, 1),
                            (Schedule::OneFOneB, 1),
                            (Schedule::Interleaved, 2),
                        ]
                    };
                    for (schedule, chunks) in schedules {
                        for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                            let zeros: &[u8] = if dp > 1 { &[0, 1, 2, 3] } else { &[0] };
                            for &zero in zeros {
                                let k = Knobs {
                                    schedule,
                                    chunks,
                                    recompute,
                                    zero,
                                    ..base.clone()
                                };
                                match evaluate(
                                    model,
                                    analysis,
                                    &numbers,
                                    &k,
                                    calib,
                                    opts.gpus_per_node,
                                    &opts.memory,
                                ) {
                                    Ok(e) => evals.push(e),
                                    Err(e) => reject(&mut rejected, e),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let evaluated = evals.len();
    evals.sort_by(|a, b| {
        b.feasible
            .cmp(&a.feasible)
            .then(a.relative.total.cmp(&b.relative.total))
    });
    let feasible = evals.iter().filter(|e| e.feasible).count();
    let balance_range = (feasible > 0).then(|| stability(&evals[..feasible]));
    let rows = evals
        .into_iter()
        .take(opts.top)
        .enumerate()
        .map(|(i, evaluation)| RankedRow {
            rank: i + 1,
            evaluation,
        })
        .collect();
    Ok(RankResult {
        rows,
        evaluated,
        feasible,
        rejected,
        balance_range,
        search_seconds: start.elapsed().as_secs_f64(),
    })
}

/// The interval of λ ≥ 0 (every κ scaled by λ) over which the first strategy stays cheapest:
/// cost_i(λ) = flop_i + λ·byte_i, exact.
fn stability(evals: &[Evaluation]) -> (Rational, Option<Rational>) {
    let top = &evals[0].relative;
    let mut lo = Rational::zero();
    let mut hi: Option<Rational> = None;
    for e in &evals[1..] {
        let o = &e.relative;
        let dc = &top.byte_part - &o.byte_part;
        let df = &o.flop_part - &top.flop_part;
        if dc > Rational::zero() {
            let bound = &df / &dc;
            hi = Some(match hi {
                Some(h) if h < bound => h,
                _ => bound,
            });
        } else if dc < Rational::zero() {
            let bound = &df / &dc;
            if bound > lo {
                lo = bound;
            }
        }
    }
    (lo, hi)
}

/// κ of each tier at a λ.
pub fn scaled_balance(calib: &Calibration, lambda: &Rational) -> (Rational, Rational) {
    (
        calib.balance(Tier::Intra) * lambda,
        calib.balance(Tier::Inter) * lambda,
    )
}
