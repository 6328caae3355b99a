//! The per-operator split search: the exact solver against exhaustive enumeration on random
//! chains and series-parallel graphs built from the shipped rules, D-Rec never better than the
//! optimum, table composition by repeated squaring, the placement canonicalisation, and the
//! tensor-parallel layouts of the shipped models.

use proptest::prelude::*;
use std::collections::BTreeMap;
use symshard::calib::Calibration;
use symshard::model::{Model, ModelLoader};
use symshard::rules::RuleSet;
use symshard::search::drec::{drec, gap_suite};
use symshard::search::exhaustive::exhaustive;
use symshard::search::problem::{synthetic, Axis, Problem, Shape};
use symshard::search::sp::{
    best_tp_layout, overrides, solve, solve_bounded, solve_reference, table, Search, Table,
};
use symshard::sym::{Poly, Rational};

fn rules() -> RuleSet {
    RuleSet::embedded().expect("shipped rules load")
}

fn calib() -> Calibration {
    Calibration::reference().expect("reference calibration")
}

fn model(name: &str) -> Model {
    ModelLoader::embedded()
        .expect("shipped models load")
        .resolve(name)
        .expect("model resolves")
}

fn axes(sizes: &[u64]) -> Vec<Axis> {
    let c = calib();
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let tier = if i == 0 && sizes.len() > 1 {
                symshard::strategy::Tier::Inter
            } else {
                symshard::strategy::Tier::Intra
            };
            Axis::on_tier(&format!("a{i}"), n, tier, &c)
        })
        .collect()
}

fn shape(sp: bool) -> Shape {
    if sp {
        Shape::SeriesParallel
    } else {
        Shape::Chain
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// On one axis the exact solver finds exhaustive enumeration's optimum, and its layout
    /// costs what it says.
    #[test]
    fn exact_equals_exhaustive_one_axis(seed in 0u64..1_000_000, size in 2usize..=5,
                                        sp in any::<bool>(), p in prop::sample::select(vec![2u64, 4])) {
        let prob = synthetic(&rules(), seed, size, shape(sp), axes(&[p])).unwrap();
        let e = exhaustive(&prob).unwrap();
        let s = solve(&prob).unwrap();
        prop_assert_eq!(&s.cost, &e.cost, "{}", prob);
        prop_assert_eq!(prob.cost(&s.assignment).unwrap(), s.cost);
    }

    /// D-Rec's layout is valid, priced exactly, and never better than the optimum, on two and
    /// four devices.
    #[test]
    fn drec_never_beats_the_optimum(seed in 0u64..1_000_000, size in 2usize..=8,
                                    sp in any::<bool>(), k in 1u32..=2) {
        let prob = synthetic(&rules(), seed, size, shape(sp), Axis::bisection(k, 8, &calib())).unwrap();
        let d = drec(&prob).unwrap();
        prop_assert_eq!(prob.cost(&d.assignment).unwrap(), d.cost.clone());
        let s = solve(&prob).unwrap();
        prop_assert!(d.cost >= s.cost, "D-Rec {} < optimum {}", d.cost, s.cost);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Over two mesh axes (one inter-node) the exact solver still matches enumeration.
    #[test]
    fn exact_equals_exhaustive_two_axes(seed in 0u64..1_000_000, size in 2usize..=3) {
        let prob = synthetic(&rules(), seed, size, Shape::Chain, axes(&[2, 2])).unwrap();
        let e = exhaustive(&prob).unwrap();
        let s = solve(&prob).unwrap();
        prop_assert_eq!(s.cost, e.cost);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Pricing choices once up to a permutation of equal axes (two or three halvings of one
    /// tier) changes nothing: the solver equals the plain one, and both equal enumeration
    /// where it is small enough.
    #[test]
    fn shared_pricing_equals_plain(seed in 0u64..1_000_000, size in 2usize..=4,
                                   sp in any::<bool>(), k in 2u32..=3) {
        let prob = synthetic(&rules(), seed, size, shape(sp), Axis::bisection(k, 8, &calib())).unwrap();
        let s = solve(&prob).unwrap();
        let r = solve_reference(&prob).unwrap();
        prop_assert_eq!(&s.cost, &r.cost, "{}", prob);
        prop_assert_eq!(prob.cost(&s.assignment).unwrap(), s.cost.clone());
        if k == 2 && size <= 3 {
            prop_assert_eq!(&exhaustive(&prob).unwrap().cost, &s.cost);
        }
    }

    /// A beam keeps a valid layout no cheaper than the optimum and a lower bound no dearer:
    /// lower ≤ optimum ≤ found, and with room for every state it is exact.
    #[test]
    fn beam_brackets_the_optimum(seed in 0u64..1_000_000, size in 3usize..=8,
                                 sp in any::<bool>(), width in 1usize..=6) {
        let prob = synthetic(&rules(), seed, size, shape(sp), Axis::bisection(2, 8, &calib())).unwrap();
        let opt = solve(&prob).unwrap();
        let b = solve_bounded(&prob, &Search { beam: Some(width), ..Search::default() }, &mut |_, _| {}).unwrap();
        let found = b.solution.clone().unwrap();
        prop_assert_eq!(prob.cost(&found.assignment).unwrap(), found.cost.clone());
        prop_assert!(found.cost >= opt.cost);
        match &b.lower {
            Some(lo) => prop_assert!(*lo <= opt.cost, "lower {} > optimum {}", lo, opt.cost),
            None => prop_assert_eq!(&found.cost, &opt.cost),
        }
        let wide = solve_bounded(&prob, &Search { beam: Some(1 << 20), ..Search::default() }, &mut |_, _| {}).unwrap();
        prop_assert!(wide.exact());
        prop_assert_eq!(wide.solution.unwrap().cost, opt.cost.clone());
        // Guided by D-Rec's layout, even a beam of one state does no worse than D-Rec.
        let d = drec(&prob).unwrap();
        let g = solve_bounded(&prob, &Search { beam: Some(1), guide: Some(d.assignment), ..Search::default() }, &mut |_, _| {}).unwrap();
        let gs = g.solution.unwrap();
        prop_assert!(gs.cost <= d.cost && gs.cost >= opt.cost);
    }
}

/// A layer feeding itself, solved in one pass carrying the block input's placement (a beam
/// wide enough to drop nothing), equals one programme per input placement; so does the exact
/// solver with shared pricing (one axis of 2 and 4).
#[test]
fn pinned_cycle_equals_one_run_per_placement() {
    let m = model("gpt3-125m");
    let bi = m.blocks.iter().position(|b| b.name == "layer").unwrap();
    for tp in [2u64, 4] {
        let p = Problem::from_block(&m, bi, &m.values, axes(&[tp]), &BTreeMap::new()).unwrap();
        assert!(p.cycle.is_some());
        let r = solve_reference(&p).unwrap();
        let s = solve(&p).unwrap();
        assert_eq!(s.cost, r.cost, "{}", p);
        let wide = Search {
            beam: Some(1 << 22),
            ..Search::default()
        };
        let b = solve_bounded(&p, &wide, &mut |_, _| {}).unwrap();
        assert!(b.exact());
        let found = b.solution.unwrap();
        assert_eq!(found.cost, r.cost, "{}", p);
        assert_eq!(p.cost(&found.assignment).unwrap(), found.cost);
    }
}

/// `repeat(T, L)` by squaring equals `L`-fold sequential composition, entry by entry.
#[test]
fn repeat_by_squaring_equals_sequential_composition() {
    let m = model("gpt3-125m");
    let bi = m.blocks.iter().position(|b| b.name == "layer").unwrap();
    let p = Problem::from_block(&m, bi, &m.values, axes(&[2]), &BTreeMap::new()).unwrap();
    let (s, e) = p.cycle.unwrap();
    let t = table(&p, s, e).unwrap();
    let sq = t.square();
    let mut seq = sq.clone();
    for l in 1..=6u64 {
        let r = t.repeat(l);
        assert_eq!(r.rows, seq.rows);
        for row in &r.rows {
            for col in &r.cols {
                assert_eq!(r.get(row, col), seq.get(row, col), "L = {l}, {row} → {col}");
            }
        }
        seq = seq.then(&sq);
    }
    assert_eq!(t.repeat(0), Table::identity(&sq.rows));
}

/// A layer feeding itself: the table's best diagonal entry is the cyclic optimum.
#[test]
fn table_diagonal_is_the_cyclic_optimum() {
    let m = model("gpt3-125m");
    let bi = m.blocks.iter().position(|b| b.name == "layer").unwrap();
    let p = Problem::from_block(&m, bi, &m.values, axes(&[4]), &BTreeMap::new()).unwrap();
    let (s, e) = p.cycle.unwrap();
    let t = table(&p, s, e).unwrap();
    let opt = solve(&p).unwrap();
    assert_eq!(t.min_cycle(), Some(opt.cost.clone()));
    assert_eq!(p.cost(&opt.assignment).unwrap(), opt.cost);
}

/// Parallel composition adds, and the identity is neutral.
#[test]
fn table_algebra() {
    let r = |n: i64| Some(Rational::from_integer(n.into()));
    let labels = vec!["R".to_string(), "S(B#0)".to_string()];
    let a = Table {
        rows: labels.clone(),
        cols: labels.clone(),
        cost: vec![vec![r(1), r(5)], vec![None, r(2)]],
    };
    let b = Table {
        rows: labels.clone(),
        cols: labels.clone(),
        cost: vec![vec![r(3), r(1)], vec![r(4), None]],
    };
    assert_eq!(a.then(&Table::identity(&labels)), a);
    assert_eq!(Table::identity(&labels).then(&a), a);
    let ab = a.then(&b);
    assert_eq!(ab.cost, vec![vec![r(4), r(2)], vec![r(6), None]]);
    let s = a.par(&b).unwrap();
    assert_eq!(s.cost, vec![vec![r(4), r(6)], vec![None, None]]);
    assert_eq!(ab.min(), r(2));
}

fn atom_names(p: &Problem, f: &str) -> Vec<String> {
    p.atoms(&Poly::parse(f).unwrap())
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// The canonicalisation: product factors, heads-major hidden size, grouped-query heads, sums.
#[test]
fn atoms_of_extents() {
    let gpt = model("gpt3-125m");
    let p = Problem::new("gpt", Vec::new(), gpt.values.clone(), 2, &gpt.roles);
    assert_eq!(atom_names(&p, "B*S"), ["B", "S"]);
    assert_eq!(atom_names(&p, "H"), ["NH", "H/NH"]);
    assert_eq!(atom_names(&p, "H/NH"), ["H/NH"]);
    assert_eq!(atom_names(&p, "B*NH*S"), ["B", "NH", "S"]);
    assert_eq!(atom_names(&p, "S*S"), ["S", "S"]);
    assert!(atom_names(&p, "1").is_empty());
    let llama = model("llama3-8b");
    let p = Problem::new("llama", Vec::new(), llama.values.clone(), 2, &llama.roles);
    assert_eq!(atom_names(&p, "NH*D"), ["D", "KV", "NH/KV"]);
    assert_eq!(atom_names(&p, "H"), ["KV", "NH/KV", "D"]);
    let vit = model("vit-b16");
    let p = Problem::new("vit", Vec::new(), vit.values.clone(), 2, &vit.roles);
    assert_eq!(atom_names(&p, "B*(S^2/P^2 + 1)"), ["B", "1 + S^2/P^2"]);
    // By role, not by name: llama3-8b's symbols renamed, the same atoms renamed.
    let mut roles = llama.roles.clone();
    let mut values = llama.values.clone();
    for (from, to, slot) in [
        ("H", "Wd", &mut roles.hidden),
        ("NH", "Qh", &mut roles.heads),
        ("D", "Hdim", &mut roles.head_dim),
        ("KV", "Gq", &mut roles.kv_heads),
    ] {
        let v = values.remove(from).unwrap();
        values.insert(to.into(), v);
        *slot = Some(to.into());
    }
    let p = Problem::new("renamed", Vec::new(), values, 2, &roles);
    assert_eq!(atom_names(&p, "Qh*Hdim"), ["Hdim", "Gq", "Qh/Gq"]);
    assert_eq!(atom_names(&p, "Wd"), ["Gq", "Qh/Gq", "Hdim"]);
}

/// The solver's layout of a GPT layer is never worse than Megatron-LM's in the same model of
/// cost, and Megatron's layout needs no conversion between the heads-split attention and the
/// feature-split projections (the canonicalisation matches them).
#[test]
fn solver_beats_or_matches_megatron() {
    let m = model("gpt3-125m");
    let bi = m.blocks.iter().position(|b| b.name == "layer").unwrap();
    for tp in [2u64, 4] {
        let p = Problem::from_block(&m, bi, &m.values, axes(&[tp]), &BTreeMap::new()).unwrap();
        let meg = symshard::search::compare::annotated(&m, bi, &p);
        let q = p.ops.iter().position(|o| o.name == "q_proj").unwrap();
        let scores = p.ops.iter().position(|o| o.name == "scores").unwrap();
        let qp = p.price(q, &meg[q]).unwrap();
        let sp = p.price(scores, &meg[scores]).unwrap();
        assert_eq!(
            qp.out[0],
            sp.needs[0].as_ref().unwrap()[0].want,
            "q_proj's column split is the scores' head split"
        );
        let mc = p.cost(&meg).unwrap();
        let best = solve(&p).unwrap();
        assert!(best.cost <= mc, "tp={tp}: {} > Megatron {}", best.cost, mc);
    }
}

/// With the tensor-parallel axis cutting feature atoms only (the batch and the sequence left to
/// data and context parallelism), the exact solver still costs no more than the annotated
/// Megatron-LM layout on GPT and Llama layers, and its layout indeed cuts neither.
#[test]
fn feature_only_solver_matches_or_beats_megatron() {
    use symshard::search::compare::{annotated, tensor_only};
    let c = calib();
    for (name, tp) in [("gpt3-125m", 4u64), ("llama3-8b", 8)] {
        let m = model(name);
        let bi = m.blocks.iter().position(|b| b.name == "layer").unwrap();
        let p = tensor_only(
            &m,
            Problem::from_block(
                &m,
                bi,
                &m.values,
                Problem::tp_axis(tp, 8, &c),
                &BTreeMap::new(),
            )
            .unwrap(),
            false,
        );
        let meg = annotated(&m, bi, &p);
        let mc = p.cost(&meg).unwrap();
        let best = solve(&p).unwrap();
        assert!(
            best.cost <= mc,
            "{name} tp={tp}: {} > Megatron {}",
            best.cost,
            mc
        );
        for (o, ch) in p.ops.iter().zip(&best.assignment) {
            for k in ch.iter().flatten() {
                let atom = &o.cuts[*k].atom;
                assert!(
                    atom != "B" && atom != "S",
                    "{name}: `{}` cuts {atom}",
                    o.name
                );
            }
        }
    }
}

/// `best_tp_layout` gives every operator of every block a choice, replicates everything on
/// one device, and costs less per device as devices are added.
#[test]
fn best_tp_layout_of_gpt() {
    let m = model("gpt3-125m");
    let c = calib();
    let (one, c1) = best_tp_layout(&m, &m.values, 1, &c, 8).unwrap();
    let n_ops: usize = m.blocks.iter().map(|b| b.ops().count()).sum();
    assert_eq!(one.len(), n_ops);
    assert!(one.values().all(Option::is_none));
    let (four, c4) = best_tp_layout(&m, &m.values, 4, &c, 8).unwrap();
    assert_eq!(four.len(), n_ops);
    assert!(c4 < c1);
    let o = overrides(&four);
    assert!(o.values().all(|v| !v.is_empty()));
    assert!(best_tp_layout(&m, &m.values, 0, &c, 8).is_err());
}

/// The D-Rec gap table: D-Rec against the exact optimum over the same binary axes, and the
/// exact optimum with one axis of all the devices. Slow in debug builds; run with
/// `cargo test --release --test search_props -- --ignored --nocapture`.
#[test]
#[ignore]
fn drec_gap_table() {
    let rows = gap_suite(&calib()).unwrap();
    let f = |r: &Option<Rational>| {
        r.as_ref()
            .and_then(num_traits::ToPrimitive::to_f64)
            .map(|v| format!("{v:.4e}"))
            .unwrap_or_else(|| "—".into())
    };
    println!("| problem | devices | ops | D-Rec | exact | gap % | single axis |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.devices,
            r.ops,
            f(&Some(r.drec.clone())),
            f(&r.exact),
            r.gap_percent()
                .map(|g| format!("{g:.2}"))
                .unwrap_or_else(|| "—".into()),
            f(&r.single_axis)
        );
        if let Some(e) = &r.exact {
            assert!(r.drec >= *e, "{}: D-Rec beats the optimum", r.name);
        }
    }
}
