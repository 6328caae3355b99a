//! `compare`, `rank --why` and `crossover`: two strategies side by side with exact differences,
//! and where one stops beating the other, checked by evaluating both strategies again.

use proptest::prelude::*;
use serde_json::Value;
use std::cmp::Ordering;
use symshard::calib::MachineRef;
use symshard::search::versus::{crossover, fit_laurent, sign_runs, Winner};
use symshard::sym::{Bindings, Poly, Rational};

mod common;
use common::{json, refused, symshard};

fn q(v: &Value) -> Rational {
    v.as_str().unwrap().parse().unwrap()
}

fn int(v: i64) -> Rational {
    Rational::from_integer(v.into())
}

/// The component `group`/`name` of a comparison: (A, B).
fn component(c: &Value, group: &str, name: &str) -> (Rational, Rational) {
    let row = c["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == group && r["name"] == name)
        .unwrap_or_else(|| panic!("no component {group}/{name}"));
    (q(&row["a"]), q(&row["b"]))
}

const DP: &str = "dp=64,mbs=1,zero=1";
const TP: &str = "dp=8,tp=8,mbs=1,sp,zero=1";
const PP: &str = "pp=4,dp=16,mbs=1,zero=1";

/// Relative costs (A, B) of two strategies by `compare` at sequence length `s`.
fn compared_at(a: &str, b: &str, s: i64) -> (Rational, Rational) {
    let set = format!("S={s}");
    let c = json(&[
        "compare",
        "llama3-8b",
        a,
        b,
        "--set",
        &set,
        "--plateau",
        "--format",
        "json",
    ]);
    component(&c, "relative cost", "total")
}

/// Checks every row of a comparison: B − A is the difference, and each formula evaluates at the
/// comparison's symbol values to its row's number exactly. Returns the names of the rows with
/// a formula on both sides.
fn checked_formulas(c: &Value) -> Vec<String> {
    let mut values = Bindings::new();
    for (k, v) in c["symbols"].as_object().unwrap() {
        values.insert(k.clone(), q(v));
    }
    let mut both = Vec::new();
    for row in c["components"].as_array().unwrap() {
        let (a, b) = (q(&row["a"]), q(&row["b"]));
        assert_eq!(q(&row["difference"]), &b - &a, "{row}");
        for (side, want) in [("formula_a", &a), ("formula_b", &b)] {
            if let Some(f) = row.get(side) {
                let p = Poly::parse(f.as_str().unwrap()).unwrap();
                assert_eq!(&p.eval(&values).unwrap(), want, "{row}");
            }
        }
        if let Some(d) = row.get("formula_difference") {
            let p = Poly::parse(d.as_str().unwrap()).unwrap();
            assert_eq!(p.eval(&values).unwrap(), &b - &a, "{row}");
            both.push(row["name"].as_str().unwrap().to_string());
        }
    }
    both
}

#[test]
fn formulas_under_context_and_expert_parallelism_reproduce_the_numbers() {
    // Context parallelism divides the operators' tokens by cp (the formulas bind it with the
    // other mesh sizes), passes keys and values around its ring, and ZeRO shards over dp × cp.
    let c = json(&[
        "compare",
        "llama3-8b",
        "tp=8,dp=8,mbs=1,sp,zero=1",
        "tp=4,cp=2,dp=8,mbs=1,sp,zero=1",
        "--format",
        "json",
    ]);
    let rows = checked_formulas(&c);
    for want in [
        "compute FLOPs",
        "forward FLOPs",
        "all-gather on tp (intra-node) bytes/step",
        "send-recv on cp (intra-node) bytes/step",
        "optimizer state",
    ] {
        assert!(rows.iter().any(|r| r == want), "{want}: {rows:?}");
    }
    // The ring's bytes per step on a cp rank, derived by hand: cp − 1 = 1 send of keys and
    // values forward and 2 backward, in each of the 32 layers (Llama 3 8B, Meta's
    // config.json: num_hidden_layers 32), each send 2 tensors × 2 bytes × B/dp sequences (over
    // the micro-batches of the step) × S/cp tokens × KV/tp heads × D: 3·32·4/(8·2·4) = 6.
    let ring = c["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "send-recv on cp (intra-node) bytes/step")
        .unwrap();
    assert_eq!(ring["formula_a"], "0");
    assert_eq!(
        Poly::parse(ring["formula_b"].as_str().unwrap()).unwrap(),
        Poly::parse("6*B*D*KV*S").unwrap()
    );
    // Under expert parallelism the compute formulas are kept (each checked as above).
    let c = json(&[
        "compare",
        "mixtral-8x7b",
        "tp=2,ep=8,dp=8,mbs=1,sp,zero=1",
        "tp=2,ep=4,dp=8,mbs=1,sp,zero=1",
        "--format",
        "json",
    ]);
    let rows = checked_formulas(&c);
    assert!(rows.iter().any(|r| r == "compute FLOPs"), "{rows:?}");
}

#[test]
fn compare_rows_are_exact_and_formulas_reproduce_them() {
    let c = json(&["compare", "llama3-8b", DP, TP, "--format", "json"]);
    assert_eq!(c["a"]["devices"], 64);
    assert!(c["b"]["strategy"].as_str().unwrap().contains("tp=8"));
    let formulas = checked_formulas(&c).len() * 2;
    assert!(formulas >= 10, "only {formulas} formulas");
    // The parts of the relative cost add up to its total on both sides.
    let total = component(&c, "relative cost", "total");
    let mut sum = (int(0), int(0));
    for part in [
        "compute",
        "kernels",
        "intra-node communication",
        "inter-node communication",
        "bubble",
        "hidden data-parallel traffic",
    ] {
        let (a, b) = component(&c, "relative cost", part);
        sum.0 += a;
        sum.1 += b;
    }
    assert_eq!(sum, total);
    // Tensor parallelism moves activations on the tensor-parallel group; data parallelism
    // moves none there.
    let (a, b) = component(
        &c,
        "communication",
        "all-gather on tp (intra-node) bytes/step",
    );
    assert_eq!(a, int(0));
    assert!(b > int(0));
    // Memory: weights are split eight ways by tensor parallelism.
    let (wa, wb) = component(&c, "memory", "weights");
    assert!(wb < wa);
    assert_eq!(c["cheaper"], "A");
    let wins: Vec<&str> = c["wins_on"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect();
    assert!(wins.contains(&"intra-node communication"), "{wins:?}");
}

#[test]
fn compare_takes_a_strategy_file_and_a_pasted_rank_row() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/strategies/megatron-175b.yaml"
    );
    // The file's knobs written as `rank` prints them: the same strategy, so every difference is
    // zero.
    let row =
        "dp=8 tp=8 pp=16 microbatches=192 interleaved-1f1b(v=2) sp=on recompute=selective zero=1";
    let c = json(&["compare", "gpt3-175b", file, row, "--format", "json"]);
    for r in c["components"].as_array().unwrap() {
        assert_eq!(r["difference"], "0", "{r}");
    }
    assert_eq!(c["cheaper"], "equal");
}

#[test]
fn knob_strings_take_overlaps_as_rank_prints_them() {
    // The relative cost credits the data-parallel overlaps only: with ZeRO 1 the weight gather
    // after the optimizer step runs under the next forward (`param-gather`); the
    // tensor-parallel collectives' overlap with their GEMMs changes the timeline alone.
    let c = json(&[
        "compare",
        "llama3-8b",
        TP,
        "dp=8,tp=8,mbs=1,sp,zero=1 overlap=tp-comm,param-gather",
        "--calib",
        "a100-80gb",
        "--format",
        "json",
    ]);
    assert_eq!(c["cheaper"], "B");
    let hidden = c["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == "relative cost" && r["name"] == "hidden data-parallel traffic")
        .unwrap();
    assert_eq!(
        hidden["difference"],
        c["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["group"] == "relative cost" && r["name"] == "total")
            .unwrap()["difference"]
    );
    let t = |s: &str| c[s]["seconds"]["iteration_seconds"].as_f64().unwrap();
    // Pipelining the tensor-parallel collectives with their GEMMs shortens the step.
    assert!(t("b") < t("a"), "{} {}", t("a"), t("b"));
    assert!(c["b"]["strategy"]
        .as_str()
        .unwrap()
        .contains("overlap=tp-comm,param-gather"));
}

#[test]
fn compare_with_a_calibration_adds_seconds() {
    let c = json(&[
        "compare",
        "llama3-8b",
        DP,
        TP,
        "--calib",
        "a100-80gb",
        "--format",
        "json",
    ]);
    for side in ["a", "b"] {
        let s = &c[side]["seconds"];
        let t = s["iteration_seconds"].as_f64().unwrap();
        assert!(t > 0.0);
        assert!(s["busy"]["compute"].as_f64().unwrap() <= t);
    }
    // Only tensor parallelism keeps the tensor-parallel stream busy.
    assert_eq!(c["a"]["seconds"]["busy"]["tp_comm"].as_f64().unwrap(), 0.0);
    assert!(c["b"]["seconds"]["busy"]["tp_comm"].as_f64().unwrap() > 0.0);
}

#[test]
fn rank_why_compares_the_first_two_rows() {
    let r = json(&[
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--top",
        "3",
        "--why",
        "--format",
        "json",
    ]);
    let why = &r["why"];
    assert_eq!(why["a"]["strategy"], r["strategies"][0]["strategy"]);
    assert_eq!(why["b"]["strategy"], r["strategies"][1]["strategy"]);
    let (a, b) = component(why, "relative cost", "total");
    assert_eq!(a, q(&r["strategies"][0]["relative_cost"]));
    assert_eq!(b, q(&r["strategies"][1]["relative_cost"]));
    assert!(a <= b);
    assert!(!why["wins_on"].as_array().unwrap().is_empty());
    let out = symshard()
        .args([
            "rank",
            "llama3-8b",
            "--devices",
            "64",
            "--top",
            "2",
            "--why",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("why #1 and not #2"), "{text}");
    assert!(text.contains("A is cheaper by"), "{text}");
}

/// The crossover's answer, checked: at the last value of each interval and the first of the
/// next, and one step beyond each, `compare` (a separate evaluation of both strategies) agrees on
/// who is cheaper; the boundary costs it reports are exactly `compare`'s.
fn check_crossover(a: &str, b: &str, from: i64, to: i64, step: i64) -> Value {
    let (f, t, s) = (from.to_string(), to.to_string(), step.to_string());
    let c = json(&[
        "crossover",
        "llama3-8b",
        a,
        b,
        "--in",
        "S",
        "--from",
        &f,
        "--to",
        &t,
        "--step",
        &s,
        "--format",
        "json",
    ]);
    let intervals = c["intervals"].as_array().unwrap();
    let winner = |x: &Rational| {
        intervals
            .iter()
            .find(|i| &q(&i["from"]) <= x && x <= &q(&i["to"]))
            .unwrap()["winner"]
            .clone()
    };
    for pair in intervals.windows(2) {
        let last: i64 = pair[0]["to"].as_str().unwrap().parse().unwrap();
        let next: i64 = pair[1]["from"].as_str().unwrap().parse().unwrap();
        assert_eq!(next, last + step, "intervals leave a gap");
        for x in [last - step, last, next, next + step] {
            if x < from || x > to {
                continue;
            }
            let (ca, cb) = compared_at(a, b, x);
            let expected = match ca.cmp(&cb) {
                Ordering::Less => "A",
                Ordering::Greater => "B",
                Ordering::Equal => "equal",
            };
            assert_eq!(winner(&int(x)), expected, "S = {x}: A {ca}, B {cb}");
            if x == last || x == next {
                let bd = c["boundaries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|bd| q(&bd["value"]) == int(x))
                    .unwrap();
                assert_eq!((q(&bd["a"]), q(&bd["b"])), (ca.clone(), cb.clone()));
                // The piece's polynomials give the same numbers.
                let mut v = Bindings::new();
                v.insert("S".into(), int(x));
                if let Some(p) = c["pieces"].as_array().unwrap().iter().find(|p| {
                    q(&p["from"]) <= int(x) && int(x) <= q(&p["to"]) && p.get("a").is_some()
                }) {
                    let pa = Poly::parse(p["a"].as_str().unwrap()).unwrap();
                    let pb = Poly::parse(p["b"].as_str().unwrap()).unwrap();
                    assert_eq!(pa.eval(&v).unwrap(), ca);
                    assert_eq!(pb.eval(&v).unwrap(), cb);
                }
            }
        }
    }
    c
}

#[test]
fn crossover_tensor_against_data_parallelism_in_the_sequence_length() {
    // Llama 3 8B, global batch 2048, 64 devices: at short sequences the data-parallel gradient
    // all-reduce over 64 ranks costs more than tensor parallelism's activation traffic, which
    // grows with S; data parallelism wins from S = 64 on (root ≈ 52.12; 425.4 when the
    // all-reduce was priced as one ring over the inter-node links rather than as the
    // hierarchical ring that runs 8/9 of its bytes inside the nodes). What overlapping the
    // gradient reduction with the backward saves is the smaller of the two, so the costs are
    // polynomials piecewise: once both backwards outlast their reductions, the difference is
    // linear in S.
    let c = check_crossover(DP, TP, 16, 16384, 16);
    let spans: Vec<(String, String, String)> = c["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["from"].as_str().unwrap().to_string(),
                i["to"].as_str().unwrap().to_string(),
                i["winner"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        spans,
        vec![
            ("16".into(), "48".into(), "B".into()),
            ("64".into(), "16384".into(), "A".into())
        ]
    );
    assert_eq!(c["piecewise"], true);
    let pieces = c["pieces"].as_array().unwrap();
    let last = pieces.last().unwrap()["difference"].as_str().unwrap();
    assert_eq!(Poly::parse(last).unwrap().degree_in("S"), (0, 1));
}

#[test]
fn crossover_pipeline_against_data_parallelism_is_piecewise() {
    // Four pipeline stages against pure data parallelism: the pipeline partition changes with S
    // (the embedding, the head and the loss's fp32 passes over Llama 3's 128,256-entry
    // vocabulary weigh more or less against a layer), so the costs are polynomials only
    // piecewise. Below S = 1024 the two are within 1.2 % of each other and the winner changes
    // with the partition: B at 128, A at 256–512, B at 640–896; A from 1024 on. (Before the
    // loss's passes were priced at κ_hbm the winner changed once, between 256 and 384; before
    // the gradient reduction over 64 ranks was priced as the hierarchical ring that runs most of
    // its bytes inside the nodes, between 2688 and 2816.)
    let c = check_crossover(DP, PP, 128, 65536, 128);
    assert_eq!(c["piecewise"], true);
    let intervals = c["intervals"].as_array().unwrap();
    let got: Vec<(&str, &str, &str)> = intervals
        .iter()
        .map(|i| {
            (
                i["from"].as_str().unwrap(),
                i["to"].as_str().unwrap(),
                i["winner"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("128", "128", "B"),
            ("256", "512", "A"),
            ("640", "896", "B"),
            ("1024", "65536", "A")
        ]
    );
}

#[test]
fn crossover_context_against_pipeline_parallelism_in_the_sequence_length() {
    // Llama 3 8B on 64 devices, tp 4 and dp 8 in both: the second factor of 2 as two pipeline
    // stages (A) or as context parallelism 2 (B). The ring (every layer's keys and values)
    // costs more than the pipeline's sends at short sequences; but the busiest pipeline stage
    // holds more than half of the layers (the partition weighs the head against them), and
    // attention's work on them grows with S², while context parallelism halves every layer's
    // evenly, plus the pipeline's bubble. Each micro-batch also adds its weight gradients to
    // the fp32 gradient buffer (8 bytes per local parameter, priced at κ_hbm): context
    // parallelism keeps every layer's weights on each rank, so it pays twice the pipeline's
    // per micro-batch, a term that does not grow with S, and so in its optimizer step once a
    // step. The loss's fp32 passes over the vocabulary (priced at κ_hbm) sit on the pipeline's
    // last stage, whose partition moves layers off it to balance them. Context parallelism wins
    // from S = 19688 on (the difference's root ≈ 19681.0; 11536.2 before the loss's passes
    // were priced, 11711.8 without what overlapping the gradient reduction with the backward
    // saves, 12046.8 with the gradient reduction priced as one ring over the inter-node links,
    // 12036.6 before the optimizer step was priced, 3632 before the gradient accumulation was).
    let a = "tp=4,pp=2,dp=8,mbs=1,sp,zero=1";
    let b = "tp=4,cp=2,dp=8,mbs=1,sp,zero=1";
    let c = check_crossover(a, b, 1024, 24576, 8);
    let intervals = c["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 2, "{intervals:?}");
    assert_eq!(intervals[0]["winner"], "A");
    assert_eq!(intervals[0]["to"], "19680");
    assert_eq!(intervals[1]["from"], "19688");
    assert_eq!(intervals[1]["winner"], "B");
}

#[test]
fn errors_name_what_is_wrong() {
    let e = refused(&["compare", "llama3-8b", "dp=64,foo=2", TP]);
    assert!(
        e.contains("strategy A") && e.contains("unknown knob `foo`"),
        "{e}"
    );
    let e = refused(&["compare", "llama3-8b", DP, "dp=8,tp=8,mbs=one"]);
    assert!(
        e.contains("strategy B") && e.contains("`one` is not a whole number"),
        "{e}"
    );
    let e = refused(&["compare", "llama3-8b", DP, "dp=8,tp=8,zig"]);
    assert!(e.contains("`zig`"), "{e}");
    // Invalid for the model: 16-way tensor parallelism cannot split 8 key-value heads.
    let e = refused(&["compare", "llama3-8b", DP, "tp=16,dp=4,mbs=1"]);
    assert!(
        e.contains("strategy B") && e.contains("does not divide"),
        "{e}"
    );
    let e = refused(&["compare", "llama3-8b", "missing.yaml", TP]);
    assert!(e.contains("missing.yaml"), "{e}");
    let e = refused(&["crossover", "llama3-8b", DP, TP, "--in", "Q"]);
    assert!(e.contains("no symbol `Q`") && e.contains("S"), "{e}");
    let e = refused(&["crossover", "llama3-8b", DP, TP, "--in", "S", "--from", "0"]);
    assert!(e.contains("--from"), "{e}");
    let e = refused(&[
        "crossover",
        "llama3-8b",
        DP,
        "tp=16,dp=4,mbs=1",
        "--in",
        "S",
    ]);
    assert!(
        e.contains("B cannot run") && e.contains("does not divide"),
        "{e}"
    );
    // Tensor and data parallelism with sequence parallelism split the micro-batch's B·S tokens
    // 64 ways: at step 1 the strategies run only at every 8th value, and the error says which
    // step to give (without --step, crossover chooses it: tests/crossover_lattice.rs).
    let e = refused(&[
        "crossover",
        "llama3-8b",
        DP,
        TP,
        "--in",
        "S",
        "--from",
        "100",
        "--to",
        "1000",
        "--step",
        "1",
    ]);
    assert!(e.contains("--from 104 --step 8"), "{e}");
}

fn eval_at(p: &Poly, x: &Rational) -> Rational {
    let mut b = Bindings::new();
    b.insert("x".into(), x.clone());
    p.eval(&b).unwrap()
}

/// A Laurent polynomial in x from integer coefficients of x^lo, x^(lo+1), ….
fn laurent(lo: i32, coeffs: &[i64]) -> Poly {
    let mut text = String::from("0");
    for (i, c) in coeffs.iter().enumerate() {
        text.push_str(&format!(" + ({c})*x^({})", lo + i as i32));
    }
    Poly::parse(&text).unwrap()
}

#[test]
fn roots_of_known_polynomials() {
    // (x − 3)(x − 7)(x − 12)/x: roots exactly at grid points, sign + − + − from x = 1.
    let p = Poly::parse("(x-3)*(x-7)*(x-12)/x").unwrap();
    let runs = sign_runs(&p, "x", &int(1), &int(1), 20).unwrap();
    let signs: Vec<Ordering> = runs.iter().map(|r| r.2).collect();
    use Ordering::*;
    assert_eq!(
        signs,
        vec![Less, Equal, Greater, Equal, Less, Equal, Greater]
    );
    assert_eq!(runs[1], (2, 2, Equal));
    assert_eq!(runs[3], (6, 6, Equal));
    assert_eq!(runs[5], (11, 11, Equal));
    // x² − 2 on x = 1, 2, …: irrational root √2, sign changes between 1 and 2.
    let p = Poly::parse("x^2 - 2").unwrap();
    assert_eq!(
        sign_runs(&p, "x", &int(1), &int(1), 5).unwrap(),
        vec![(0, 0, Less), (1, 4, Greater)]
    );
    // A double root (x − 5)² touches zero without a sign change.
    let p = Poly::parse("(x-5)^2").unwrap();
    assert_eq!(
        sign_runs(&p, "x", &int(1), &int(1), 9).unwrap(),
        vec![(0, 3, Greater), (4, 4, Equal), (5, 8, Greater)]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For random integer-coefficient Laurent polynomials, the sign runs are exact: every grid
    /// value has its run's sign (checked by exact evaluation) and neighbouring runs differ, so
    /// every reported boundary is a verified sign change.
    #[test]
    fn sign_runs_are_exact(
        lo in -2i32..=0,
        coeffs in proptest::collection::vec(-40i64..=40, 1..6),
        x0 in 1i64..30,
        step in 1i64..5,
        count in 1u64..150,
    ) {
        let p = laurent(lo, &coeffs);
        let runs = sign_runs(&p, "x", &int(x0), &int(step), count).unwrap();
        let mut next = 0u64;
        for (i, (from, to, sign)) in runs.iter().enumerate() {
            prop_assert_eq!(*from, next);
            prop_assert!(to >= from);
            for k in *from..=*to {
                let x = int(x0 + step * k as i64);
                prop_assert_eq!(eval_at(&p, &x).cmp(&Rational::from_integer(0.into())), *sign);
            }
            if i > 0 {
                prop_assert_ne!(runs[i - 1].2, *sign);
            }
            next = to + 1;
        }
        prop_assert_eq!(next, count);
    }

    /// The crossover of two random polynomials evaluated exactly names, at every grid value,
    /// the strategy that is cheaper there, and its fitted pieces are the polynomials themselves.
    #[test]
    fn crossover_matches_pointwise_comparison(
        ca in proptest::collection::vec(-30i64..=30, 1..5),
        cb in proptest::collection::vec(-30i64..=30, 1..5),
        count in 1u64..120,
    ) {
        let (pa, pb) = (laurent(-1, &ca), laurent(-1, &cb));
        let ev = |p: Poly| move |x: &Rational| -> Result<Rational, String> { Ok(eval_at(&p, x)) };
        let (mut fa, mut fb) = (ev(pa.clone()), ev(pb.clone()));
        let c = crossover("x", &int(1), &int(1), count, (-1, 3), &mut fa, &mut fb).unwrap();
        for k in 1..=count as i64 {
            let x = int(k);
            let want = match eval_at(&pa, &x).cmp(&eval_at(&pb, &x)) {
                Ordering::Less => Winner::A,
                Ordering::Greater => Winner::B,
                Ordering::Equal => Winner::Equal,
            };
            let got = c.intervals.iter().find(|i| i.from <= x && x <= i.to).unwrap();
            prop_assert_eq!(&got.winner, &want);
        }
        for p in &c.pieces {
            if let (Some(a), Some(b)) = (&p.a, &p.b) {
                prop_assert_eq!(a, &pa);
                prop_assert_eq!(b, &pb);
            }
        }
    }

    /// Fitting recovers a Laurent polynomial exactly from as many values as it has exponents.
    #[test]
    fn fit_is_exact(lo in -2i32..=0, coeffs in proptest::collection::vec(-50i64..=50, 1..6)) {
        let p = laurent(lo, &coeffs);
        let pts: Vec<(Rational, Rational)> = (1..=coeffs.len() as i64)
            .map(|k| (int(k), eval_at(&p, &int(k))))
            .collect();
        prop_assert_eq!(fit_laurent("x", lo, &pts), p);
    }
}

/// `compare` gives the relative cost's parts formulas in the model's symbols with the
/// calibration's balances: for GPT-3 175B as a 1F1B pipeline (dp=8 tp=8 pp=16, 32 micro-batches,
/// 1024 devices) and without a pipeline (GPT-3 1.3B, dp=8 tp=2), every formula evaluates at the
/// model's values to the evaluation's exact number, the compute, communication, point-to-point,
/// bubble-fraction and memory rows have one, and the total has one exactly when there is no
/// bubble to take a maximum over.
#[test]
fn compare_gives_the_relative_cost_formulas_that_reproduce_the_evaluation() {
    use symshard::calib::Calibration;
    use symshard::model::ModelLoader;
    use symshard::parallel::{evaluate_strategy, Layout};
    use symshard::strategy::{Knobs, Recompute, Schedule};
    let calib = Calibration::reference().unwrap();
    for (name, dp, tp, pp, m) in [("gpt3-175b", 8, 8, 16, 32), ("gpt3-1.3b", 8, 2, 1, 4)] {
        let model = ModelLoader::embedded().unwrap().resolve(name).unwrap();
        let values = model.values.clone();
        let k = Knobs {
            dp,
            tp,
            pp,
            microbatches: m,
            schedule: if pp > 1 {
                Schedule::OneFOneB
            } else {
                Knobs::data_parallel(1).schedule
            },
            recompute: Recompute::Selective,
            zero: 1,
            ..Knobs::data_parallel(1)
        };
        let (_, e) = evaluate_strategy(
            &model,
            &values,
            &k,
            &Layout::default(),
            MachineRef::new(&calib, 8, &int(1_000_000_000_000)),
        )
        .unwrap();
        let rows = symshard::search::versus::compare(&values, &e, &e);
        let formula = |group: &str, name: &str| {
            let c = rows
                .iter()
                .find(|c| c.group == group && c.name == name)
                .unwrap_or_else(|| panic!("{name}: no row {group}/{name}"));
            c.formula_a.clone()
        };
        for c in &rows {
            if let Some(f) = &c.formula_a {
                assert_eq!(
                    f.eval(&values).unwrap(),
                    c.a,
                    "{name}: {}/{}",
                    c.group,
                    c.name
                );
            }
        }
        let r = &e.relative;
        let busiest = e.stages.iter().find(|s| s.flops == e.flops).unwrap();
        for (group, row, want) in [
            (
                "compute",
                "HBM traffic (FLOP-equivalents)",
                &busiest.hbm_cost,
            ),
            ("communication", "point-to-point bytes/step", &e.p2p_bytes),
            ("pipeline", "bubble fraction", &e.bubble_fraction),
            ("relative cost", "compute", &r.compute),
            ("relative cost", "intra-node communication", &r.comm_intra),
            ("relative cost", "inter-node communication", &r.comm_inter),
            ("memory", "activations", &e.memory.activations),
            ("memory", "total", &e.memory.total),
        ] {
            let f = formula(group, row).unwrap_or_else(|| panic!("{name}: no formula for {row}"));
            assert_eq!(&f.eval(&values).unwrap(), want, "{name}: {group}/{row}");
        }
        // The reference table prices kernels below the plateau and their launches: a number,
        // with no formula, so the total has none; at the plateau it has one, without a bubble.
        assert!(r.kernels > int(0), "{name}");
        assert!(formula("relative cost", "kernels").is_none(), "{name}");
        assert!(formula("relative cost", "total").is_none(), "{name}");
        let flat = calib.at_plateau();
        let big = int(1_000_000_000_000);
        let (_, e) = evaluate_strategy(
            &model,
            &values,
            &k,
            &Layout::default(),
            MachineRef::new(&flat, 8, &big),
        )
        .unwrap();
        assert_eq!(e.relative.kernels, int(0), "{name}");
        let rows = symshard::search::versus::compare(&values, &e, &e);
        let total = rows
            .iter()
            .find(|c| c.group == "relative cost" && c.name == "total")
            .and_then(|c| c.formula_a.clone());
        if pp == 1 {
            assert_eq!(
                total.unwrap().eval(&values).unwrap(),
                e.relative.total,
                "{name}"
            );
        } else {
            assert!(total.is_none(), "{name}");
            assert!(e.relative.bubble > int(0));
        }
        // At the plateau every kernel's term is zero, and so is its formula.
        let kernels = rows
            .iter()
            .find(|c| c.group == "relative cost" && c.name == "kernels")
            .and_then(|c| c.formula_a.clone());
        assert_eq!(kernels, Some(Poly::zero()), "{name}");
    }
}

/// The command prices both sides on its calibration table, so the relative cost's parts come
/// with formulas too (no pipeline here); the kernel term is read from the table's curves and has
/// none, so neither has the total, which `--plateau` (every kernel at the matmul plateau) gives.
#[test]
fn the_command_gives_the_relative_cost_its_formulas() {
    for plateau in [false, true] {
        let mut args = vec![
            "compare",
            "llama3-8b",
            "dp=64,mbs=1,zero=1",
            "dp=8,tp=8,mbs=1,sp,zero=1",
            "--format",
            "json",
        ];
        if plateau {
            args.push("--plateau");
        }
        let v = json(&args);
        let rows = v["components"].as_array().unwrap();
        let row = |name: &str| {
            rows.iter()
                .find(|r| r["group"] == "relative cost" && r["name"] == name)
                .unwrap_or_else(|| panic!("no relative cost row {name}"))
        };
        for name in [
            "compute",
            "intra-node communication",
            "inter-node communication",
        ] {
            assert!(
                row(name)["formula_difference"].is_string(),
                "{name}: {}",
                row(name)
            );
        }
        let kernels = q(&row("kernels")["a"]);
        assert_eq!(kernels == int(0), plateau, "{}", row("kernels"));
        // A number read from the table's curves has no formula; at the plateau it is zero.
        assert_eq!(
            row("kernels")["formula_difference"].is_string(),
            plateau,
            "{}",
            row("kernels")
        );
        assert_eq!(
            row("total")["formula_difference"].is_string(),
            plateau,
            "{}",
            row("total")
        );
    }
}

#[test]
fn crossover_context_parallelism_two_against_one_in_the_sequence_length() {
    // Llama 3 8B on 64 devices, dp 32 in both; the remaining factor of 2 as tensor parallelism
    // with sequence parallelism (cp = 1, A) or as context parallelism (cp = 2, B). Tensor
    // parallelism moves each layer's whole hidden activations (H wide) in its all-gathers and
    // reduce-scatters; the ring moves keys and values, KV·D = 1024 wide under grouped-query
    // attention: both grow linearly with S, the ring more slowly. Tensor parallelism halves the
    // weights, their gradients' traffic and buffers, which do not grow with S. So cp = 2 starts
    // beating cp = 1 once the sequence is long enough: from S = 4108 on (every 4th length runs
    // both; the difference's root ≈ 4104.0 with what overlapping the gradient reduction saves,
    // 4194.0 without it; 5970.2 with the gradient reduction, over twice the weights without
    // tensor parallelism, priced as one ring over the inter-node links, and 5940.4 before the
    // optimizer step was priced).
    let a = "dp=32,tp=2,sp,mbs=1,zero=1";
    let b = "dp=32,cp=2,mbs=1,zero=1";
    let c = check_crossover(a, b, 1024, 16384, 4);
    let intervals = c["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 2, "{intervals:?}");
    assert_eq!(intervals[0]["winner"], "A");
    assert_eq!(intervals[0]["to"], "4104");
    assert_eq!(intervals[1]["from"], "4108");
    assert_eq!(intervals[1]["winner"], "B");
}
