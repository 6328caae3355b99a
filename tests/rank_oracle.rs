//! `rank` held to an exhaustive exact oracle on small cases: every strategy of the search space
//! is priced exactly here, independently of `rank`'s floating-point screen, and `rank`'s rows
//! must be the oracle's best, in the oracle's order, grouped as the oracle groups them; every
//! row `rank` lists is accepted by `cost` (exact evaluation) and by `timeline`. The space holds,
//! for each tensor-parallel degree, the annotated layout and the auto layout the per-operator
//! search finds for that degree (left out where it is the annotated one).

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::{Model, ModelLoader};
use symshard::parallel::evaluate::{
    block_numbers, check_divisibility, evaluate, microbatch_bindings,
};
use symshard::parallel::kernels::KernelEfficiency;
use symshard::parallel::plan;
use symshard::parallel::{analyse, check_model_limits, Analysis, Evaluation, Layout};
use symshard::search::auto::{auto_tp_layout, same_as_annotated};
use symshard::search::egraph::egraph_layout;
use symshard::search::{rank, LayoutKind, RankOptions};
use symshard::strategy::{check_knobs, Knobs, Recompute, Schedule};
use symshard::sym::{Bindings, Rational};
use symshard::timeline::{plan_strategy, time_summary};

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

fn layout(k: &Knobs, overrides: BTreeMap<String, String>) -> Layout {
    Layout {
        sequence_parallel: k.sequence_parallel,
        tp_overrides: overrides,
    }
}

/// A strategy the oracle priced, with its layout.
type Priced = (Evaluation, LayoutKind);

/// The search space as `rank` documents it, enumerated by brute force: every mesh shape of the
/// devices; every micro-batch count up to the cap that divides the per-replica batch (at least
/// pp of them unless the whole per-replica batch is one micro-batch); GPipe and 1F1B, and
/// interleaving with every chunk count up to the cap; sequence parallelism where tp > 1; every
/// recomputation; ZeRO 0–3 where dp > 1. Strategies the exact evaluation refuses are dropped.
fn oracle(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &RankOptions,
) -> Vec<Priced> {
    let batch: u64 = values["B"].to_integer().try_into().unwrap();
    let analyses = [false, true].map(|sp| {
        analyse(
            model,
            &Layout {
                sequence_parallel: sp,
                ..Layout::default()
            },
        )
    });
    let mut out = Vec::new();
    for tp in divisors(opts.devices) {
        // The layouts of this degree: the annotated one, and the auto one unless it is the
        // annotated one; sequence parallelism on the auto layout only where it splits more.
        let mut layouts: Vec<(LayoutKind, bool, Analysis)> = [false, true]
            .into_iter()
            .zip(analyses.clone())
            .map(|(sp, a)| (LayoutKind::Annotated, sp, a))
            .collect();
        if tp > 1 {
            let auto = auto_tp_layout(model, values, tp, calib, opts.gpus_per_node).unwrap();
            if !same_as_annotated(model, &auto.placements) {
                let on = Layout {
                    sequence_parallel: true,
                    tp_overrides: auto.placements.clone(),
                };
                let off = Layout {
                    sequence_parallel: false,
                    ..on.clone()
                };
                layouts.push((LayoutKind::Auto, false, analyse(model, &off)));
                if model
                    .ops()
                    .any(|(_, n)| plan(n, &on, model) != plan(n, &off, model))
                {
                    layouts.push((LayoutKind::Auto, true, analyse(model, &on)));
                }
                // The e-graph's variant of the auto layout, without sequence parallelism.
                if let Some(e) = egraph_layout(model, values, &auto).unwrap() {
                    let l = Layout {
                        sequence_parallel: false,
                        tp_overrides: e.placements,
                    };
                    layouts.push((LayoutKind::EGraph, false, analyse(model, &l)));
                }
            }
        }
        for pp in divisors(opts.devices / tp) {
            let dp = opts.devices / tp / pp;
            if !batch.is_multiple_of(dp) {
                continue;
            }
            let per_dp = batch / dp;
            for m in divisors(per_dp) {
                if m > opts.max_microbatches || (pp > 1 && m < pp && m != per_dp) {
                    continue;
                }
                let mut schedules = vec![(Schedule::OneFOneB, 1)];
                if pp > 1 {
                    schedules.push((Schedule::Gpipe, 1));
                    schedules.extend((2..=opts.max_chunks).map(|v| (Schedule::Interleaved, v)));
                }
                for &(schedule, chunks) in &schedules {
                    for (kind, sp, analysis) in &layouts {
                        let sp = *sp;
                        if sp && tp == 1 {
                            continue;
                        }
                        for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                            let zeros: &[u8] = if dp > 1 { &[0, 1, 2, 3] } else { &[0] };
                            for &zero in zeros {
                                let k = Knobs {
                                    schedule,
                                    chunks,
                                    sequence_parallel: sp,
                                    recompute,
                                    zero,
                                    tp,
                                    pp,
                                    microbatches: m,
                                    ..Knobs::data_parallel(dp)
                                };
                                if let Some(e) = exact(model, analysis, values, &k, calib, opts) {
                                    out.push((e, *kind));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // Feasible first, cheapest first, smaller memory first: the order `rank` promises.
    out.sort_by_key(key);
    out
}

/// The exact evaluation `cost` runs (`evaluate_strategy`'s steps, the analysis of each layout
/// computed once), or `None` where it refuses the strategy.
fn exact(
    model: &Model,
    a: &Analysis,
    values: &Bindings,
    k: &Knobs,
    calib: &Calibration,
    opts: &RankOptions,
) -> Option<Evaluation> {
    check_knobs(k).ok()?;
    check_model_limits(model, values, k).ok()?;
    let b = microbatch_bindings(model, values, k);
    check_divisibility(model, a, &b, k).ok()?;
    let numbers = block_numbers(a, &b, &KernelEfficiency::of(calib)).ok()?;
    evaluate(
        model,
        a,
        &numbers,
        k,
        MachineRef::new(calib, opts.gpus_per_node, &opts.memory),
    )
    .ok()
}

/// The order `rank` promises: feasible first, cheapest first, smaller memory first, the
/// annotated layout before the auto ones, auto layouts by degree (each degree's is its own).
fn key((e, kind): &Priced) -> (bool, Rational, Rational, LayoutKind, u64) {
    (
        !e.feasible,
        e.relative.total.clone(),
        e.memory.total.clone(),
        *kind,
        if matches!(*kind, LayoutKind::Auto | LayoutKind::EGraph) {
            e.knobs.tp
        } else {
            0
        },
    )
}

fn check(layers: u64, batch: u64, devices: u64, memory_gb: u64, top: usize) {
    let mut model: Model = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-125m")
        .unwrap();
    let int = |v: u64| Rational::from_integer(v.into());
    model.values.insert("L".into(), int(layers));
    model.values.insert("B".into(), int(batch));
    model.values.insert("S".into(), int(256));
    let values = model.values.clone();
    let calib = Calibration::reference().unwrap();
    let opts = RankOptions {
        devices,
        gpus_per_node: 4,
        top,
        memory: int(memory_gb * 1_000_000_000),
        max_microbatches: 8,
        max_chunks: 3,
        ..RankOptions::default()
    };
    let all = oracle(&model, &values, &calib, &opts);
    let got = rank(&model, &values, &calib, &opts).unwrap();
    let case = format!("L={layers} B={batch} N={devices} {memory_gb} GB");
    // The space `rank` prices is the oracle's.
    assert_eq!(got.evaluated, all.len(), "{case}: strategies priced");
    assert_eq!(
        got.feasible,
        all.iter().filter(|(e, _)| e.feasible).count(),
        "{case}: strategies that fit"
    );
    // Its rows are the oracle's first groups, in order, each with every strategy of its group.
    type Key = (bool, Rational, Rational, LayoutKind, u64);
    let mut groups: Vec<(Key, BTreeSet<String>)> = Vec::new();
    for p in &all {
        let e = &p.0;
        match groups.last_mut() {
            Some((k, g)) if *k == key(p) => {
                g.insert(e.knobs.to_string());
            }
            _ => {
                if groups.len() == top {
                    break;
                }
                groups.push((key(p), BTreeSet::from([e.knobs.to_string()])));
            }
        }
    }
    assert_eq!(got.rows.len(), groups.len(), "{case}: rows");
    for (row, (k, members)) in got.rows.iter().zip(&groups) {
        let kind = row.layout.kind;
        assert_eq!(
            &key(&(row.evaluation.clone(), kind)),
            k,
            "{case}: row {}",
            row.rank
        );
        // An auto row carries its degree's layout.
        match kind {
            LayoutKind::Auto | LayoutKind::EGraph => assert_eq!(
                row.layout.auto.as_ref().map(|a| a.tp),
                Some(row.evaluation.knobs.tp),
                "{case}: row {}",
                row.rank
            ),
            LayoutKind::Annotated => assert!(row.layout.auto.is_none()),
        }
        let listed: BTreeSet<String> = std::iter::once(&row.evaluation.knobs)
            .chain(&row.alike)
            .map(|k| k.to_string())
            .collect();
        assert_eq!(&listed, members, "{case}: row {}", row.rank);
        // What rank lists, cost and timeline accept.
        let k = &row.evaluation.knobs;
        let (plan, e) = plan_strategy(
            &model,
            &values,
            k,
            &layout(k, row.layout.overrides()),
            MachineRef::new(&calib, opts.gpus_per_node, &opts.memory),
        )
        .unwrap_or_else(|e| panic!("{case}: timeline refuses {k}: {e}"));
        assert_eq!(
            key(&(e, kind)),
            key(&(row.evaluation.clone(), kind)),
            "{case}: {k}"
        );
        time_summary(&plan, &calib).unwrap_or_else(|e| panic!("{case}: {k}: {e}"));
    }
}

#[test]
fn rank_equals_the_exhaustive_oracle_on_a_known_case() {
    check(4, 16, 8, 80, 6);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// On random small cases (layers, batch, devices, capacity), `rank` is the oracle's top.
    #[test]
    fn rank_equals_the_exhaustive_oracle(
        layers in prop::sample::select(vec![2u64, 3, 4, 6]),
        batch in prop::sample::select(vec![4u64, 6, 8, 16]),
        devices in prop::sample::select(vec![1u64, 2, 4, 6, 8]),
        memory_gb in prop::sample::select(vec![1u64, 2, 4, 80]),
        top in 1usize..8,
    ) {
        check(layers, batch, devices, memory_gb, top);
    }
}
