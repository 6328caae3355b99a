//! `layout` refuses, before any search, a tensor-parallel degree that the family's annotated
//! layout cannot use, and every per-operator search stays within a budget of priced choices:
//! a problem beyond it is refused (and `layout` says it skipped that search) instead of
//! growing without bound.

mod common;

use common::{json, refused};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use symshard::calib::Calibration;
use symshard::model::{Model, ModelLoader};
use symshard::search::error::SearchError;
use symshard::search::problem::{Axis, Choice, Problem};
use symshard::search::sp::{check_choice_budget, solve_bounded, Search, MAX_PRICED_CHOICES};
use symshard::sym::{Bindings, Rational};

fn model(name: &str) -> Model {
    ModelLoader::embedded()
        .expect("shipped models load")
        .resolve(name)
        .expect("model resolves")
}

fn layer(m: &Model) -> usize {
    m.blocks.iter().position(|b| b.name == "layer").unwrap()
}

/// GPT-3 175B has 96 attention heads (Brown et al. 2020, Table 2.1: n_heads = 96), which
/// neither 512 nor 1024 divides. Both degrees used to run the searches until they were killed
/// (beyond 8 GB at 512, 24 GB at 1024); they are refused at once, naming the degree, the heads
/// and the degrees that work.
#[test]
fn layout_refuses_tp_512_and_1024_on_gpt3_175b_at_once_for_its_96_heads() {
    for tp in ["512", "1024"] {
        let start = Instant::now();
        let err = refused(&["layout", "gpt3-175b", "--tp", tp]);
        assert!(start.elapsed() < Duration::from_secs(30), "{tp}: too slow");
        assert!(
            err.contains(&format!("--tp {tp} does not divide the 96 heads (`NH`)")),
            "{err}"
        );
        assert!(err.contains("annotated layout of block `layer`"), "{err}");
        assert!(
            err.contains("degrees it can use: 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96"),
            "{err}"
        );
    }
}

/// A degree that is not a power of two but divides the heads and the MLP is still compared
/// (the annotated row is there, D-Rec says why it is not).
#[test]
fn layout_keeps_a_degree_that_divides_every_annotated_cut() {
    let v = json(&["layout", "gpt3-175b", "--tp", "12", "--format", "json"]);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows
        .iter()
        .any(|r| r["method"].as_str().unwrap().starts_with("annotated")));
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains("D-Rec needs a power-of-two degree"));
}

/// With 1024 heads (a size set on the command line) tp = 1024 is accepted: ten halvings, whose
/// layer has far more choices than the budget. The search over them is skipped with a note
/// that says so; the one-axis search, the annotated layout and D-Rec are still reported.
#[test]
fn layout_skips_the_halvings_search_beyond_the_budget_and_says_so() {
    let start = Instant::now();
    let v = json(&[
        "layout",
        "gpt3-175b",
        "--set",
        "NH=1024",
        "--tp",
        "1024",
        "--format",
        "json",
    ]);
    assert!(start.elapsed() < Duration::from_secs(60));
    let methods: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    for m in ["annotated", "exact, one axis of 1024", "D-Rec, 10 halvings"] {
        assert!(methods.iter().any(|x| x.starts_with(m)), "{methods:?}");
    }
    assert!(!methods.iter().any(|x| x.contains("same halvings")));
    let note = v["notes"][0].as_str().unwrap();
    assert!(
        note.starts_with("the search on the 10 halvings was skipped"),
        "{note}"
    );
    assert!(note.contains("memory budget"), "{note}");
}

/// Every combination of a cut or none per axis, filtered by `Problem::valid`: what
/// `Problem::choices` listed before it stopped extending invalid prefixes.
fn brute_force(p: &Problem, v: usize) -> Vec<Choice> {
    let mut out: Vec<Choice> = vec![Vec::new()];
    for _ in &p.axes {
        out = out
            .into_iter()
            .flat_map(|c| {
                std::iter::once(None)
                    .chain((0..p.ops[v].cuts.len()).map(Some))
                    .map(move |x| {
                        let mut c = c.clone();
                        c.push(x);
                        c
                    })
            })
            .collect();
    }
    out.retain(|c| p.valid(v, c));
    out
}

/// The choices listed depth first, pruning prefixes that no longer divide their atom, are
/// the valid combinations in the same order, and counting them without listing agrees.
#[test]
fn choices_listed_and_counted_agree_with_every_valid_combination() {
    let m = model("gpt3-125m");
    let c = Calibration::reference().unwrap();
    let mixed = vec![
        Axis::on_tier("a", 2, symshard::strategy::Tier::Inter, &c),
        Axis::on_tier("b", 3, symshard::strategy::Tier::Intra, &c),
        Axis::on_tier("c", 2, symshard::strategy::Tier::Intra, &c),
    ];
    for axes in [Axis::bisection(3, 8, &c), mixed] {
        let p = Problem::from_block(&m, layer(&m), &m.values, axes, &BTreeMap::new()).unwrap();
        for v in 0..p.ops.len() {
            let listed = p.choices(v);
            assert_eq!(listed, brute_force(&p, v), "{}", p.ops[v].name);
            let n = listed.len();
            assert_eq!(p.count_choices(v, n), Some(n));
            assert_eq!(p.count_choices(v, usize::MAX), Some(n));
            if n > 0 {
                assert_eq!(p.count_choices(v, n - 1), None);
            }
        }
    }
}

/// GPT-3 175B's layer with 1024 heads over ten halvings has more choices than the budget: the
/// solver refuses it before pricing anything, naming the problem, its axes and the budget.
#[test]
fn solver_refuses_a_problem_beyond_the_choice_budget_before_pricing() {
    let m = model("gpt3-175b");
    let mut values: Bindings = m.values.clone();
    values.insert("NH".into(), Rational::from_integer(1024.into()));
    let c = Calibration::reference().unwrap();
    let p = Problem::from_block(
        &m,
        layer(&m),
        &values,
        Axis::bisection(10, 8, &c),
        &BTreeMap::new(),
    )
    .unwrap();
    let start = Instant::now();
    let e = check_choice_budget(&p).unwrap_err();
    assert!(
        matches!(&e, SearchError::TooManyChoices { axes: 10, limit, .. } if *limit == MAX_PRICED_CHOICES),
        "{e}"
    );
    assert_eq!(
        solve_bounded(&p, &Search::default(), &mut |_, _| {}).unwrap_err(),
        e
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(e
        .to_string()
        .starts_with("`gpt3-175b/layer` over 10 axes has more than 500000 operator choices"));
}
