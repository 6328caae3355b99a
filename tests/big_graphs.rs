//! Large repeat-free graphs (thousands of operators in one block, as ONNX exports without
//! repeated layers give): `rank` finds their auto layouts within the search's work budget and
//! says so where the budget cut the search short, and a search too large for its budget even
//! keeping one state per operator is refused, not truncated silently.

use symshard::calib::Calibration;
use symshard::model::{Model, ModelLoader};
use symshard::parallel::{analyse, Layout};
use symshard::search::compare::search_for;
use symshard::search::problem::Problem;
use symshard::search::sp::{solve_bounded, Search, MAX_WORK};
use symshard::search::{rank, Layouts, RankOptions, SearchError};

/// A block of `branches` elementwise operators (gelu and relu in turn), each reading the graph
/// input, summed pairwise by `add` into one output: the fan-in shape whose pending partial sums
/// keep many tensors live at once.
fn fan_in_yaml(branches: usize) -> String {
    let mut s = String::from(
        "name: fanin\ngraph:\n  symbols:\n    T: tokens\n    H: hidden size\n  inputs:\n    x: {dims: [T, H]}\n  blocks:\n    - name: body\n      ops:\n",
    );
    let mut level: Vec<String> = Vec::new();
    for i in 0..branches {
        let op = if i % 2 == 0 { "gelu" } else { "relu" };
        s += &format!("        - {{name: f{i}, op: {op}, bind: {{b: T, h: H}}, in: {{x: x}}}}\n");
        level.push(format!("f{i}"));
    }
    let mut k = 0;
    while level.len() > 1 {
        let mut next = Vec::new();
        for pair in level.chunks(2) {
            match pair {
                [a, b] => {
                    s += &format!(
                        "        - {{name: s{k}, op: add, bind: {{b: T, h: H}}, in: {{x: {a}, other: {b}}}}}\n"
                    );
                    next.push(format!("s{k}"));
                    k += 1;
                }
                [a] => next.push(a.clone()),
                _ => {}
            }
        }
        level = next;
    }
    s + "symbols:\n  T: 8192\n  H: 4096\n"
}

/// A chain of `n` elementwise operators (gelu and relu in turn), each reading the one before.
fn chain_yaml(n: usize) -> String {
    let mut s = String::from(
        "name: chain\ngraph:\n  symbols:\n    T: tokens\n    H: hidden size\n  inputs:\n    x: {dims: [T, H]}\n  blocks:\n    - name: body\n      ops:\n",
    );
    let mut prev = "x".to_string();
    for i in 0..n {
        let op = if i % 2 == 0 { "gelu" } else { "relu" };
        s += &format!(
            "        - {{name: o{i}, op: {op}, bind: {{b: T, h: H}}, in: {{x: {prev}}}}}\n"
        );
        prev = format!("o{i}");
    }
    s + "symbols:\n  T: 8192\n  H: 4096\n"
}

fn load(yaml: &str, tag: &str) -> Model {
    let path = std::env::temp_dir().join(format!(
        "symshard-big-graphs-{tag}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, yaml).unwrap();
    let model = ModelLoader::embedded()
        .unwrap()
        .resolve(path.to_str().unwrap())
        .unwrap();
    let _ = std::fs::remove_file(&path);
    model
}

/// A fan-in of 1,000 operators keeps about ten partial sums live: the exact programme's states
/// grow as the placements to the power of that, so the search keeps a beam, and with a thousand
/// operators the work budget narrows it. `rank` on two devices still ranks the auto layout,
/// never costlier than the annotated one, and its note says the budget bounded the search.
#[test]
fn a_repeat_free_graph_of_thousands_of_operators_ranks_with_a_budget_note() {
    let model = load(&fan_in_yaml(500), "rank");
    assert!(model.ops().count() >= 999);
    let values = model.values.clone();
    let calib = Calibration::reference().unwrap();
    let opts = RankOptions {
        devices: 2,
        layouts: Layouts::Both,
        ..RankOptions::default()
    };
    let r = rank(&model, &values, &calib, &opts).unwrap();
    assert!(r.auto_failed.is_empty(), "{:?}", r.auto_failed);
    let auto = r.auto_layouts.iter().find(|a| a.tp == 2);
    // The auto layout is either priced (and then its note tells how it was found) or the
    // annotated one (everything replicated here), priced once.
    match auto {
        Some(a) => {
            let n = a.narrowed.as_ref().expect("the budget narrowed the beam");
            assert!(n.beam < n.asked && n.ops >= 999 && n.live >= 5, "{n:?}");
            assert!(!a.exact);
            assert!(
                a.method().contains("bounded by the work budget"),
                "{}",
                a.method()
            );
        }
        None => assert_eq!(r.auto_same, vec![2]),
    }
    assert!(!r.rows.is_empty());
}

/// The same fan-in searched directly: the budget narrows the beam in proportion (operators ×
/// choices × live tensors), the narrowed search is never worse than the guide it keeps, and a
/// budget that cannot hold even one state per operator refuses the search with the sizes that
/// exceed it.
#[test]
fn a_search_beyond_its_work_budget_narrows_its_beam_or_is_refused() {
    let model = load(&fan_in_yaml(300), "direct");
    let calib = Calibration::reference().unwrap();
    let axes = Problem::tp_axis(2, 8, &calib);
    let p = Problem::from_block(&model, 0, &model.values, axes, &Default::default()).unwrap();
    let s = search_for(&p, None, None);
    assert_eq!(s.budget, Some(MAX_WORK));
    let b = solve_bounded(&p, &s, &mut |_, _| {}).unwrap();
    let n = b.narrowed.clone().expect("narrowed");
    assert!(n.beam * n.ops * (n.live + 1) <= MAX_WORK);
    // A replicated layout is always valid; the narrowed search costs no more than it.
    let replicated: Vec<Vec<Option<usize>>> = vec![vec![None]; p.ops.len()];
    let base = p.cost(&replicated).unwrap();
    assert!(b.solution.unwrap().cost <= base);
    let tiny = Search {
        budget: Some(10),
        ..s
    };
    match solve_bounded(&p, &tiny, &mut |_, _| {}) {
        Err(SearchError::OverBudget { ops, budget, .. }) => {
            assert_eq!(budget, 10);
            assert!(ops >= 599);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The analysis of a graph of thousands of operators of a few kinds holds one set of formulas
/// per kind (its memory grows with the kinds, not the operators), through binding and context
/// parallelism too, and each operator keeps its own name.
#[test]
fn operators_of_one_kind_share_their_formulas() {
    let model = load(&chain_yaml(2000), "chain");
    assert_eq!(model.ops().count(), 2000);
    for sequence_parallel in [false, true] {
        let layout = Layout {
            sequence_parallel,
            ..Layout::default()
        };
        let a = analyse(&model, &layout);
        let kinds = a.distinct_formulas();
        // gelu and relu, and the first operator, which reads the graph input.
        assert!((2..=4).contains(&kinds), "{kinds} formula sets");
        let names: Vec<&str> = a.blocks[0].ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names[0], "o0");
        assert_eq!(names[1999], "o1999");
        let cp = a.context_parallel();
        assert_eq!(cp.distinct_formulas(), kinds);
        let bound = cp.bind(&model.values).unwrap();
        assert!(bound.distinct_formulas() <= kinds);
        assert!(bound.blocks[0].ops[1999].forward.is_constant());
    }
}
