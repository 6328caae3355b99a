//! `crossover` without `--step`: the lattice of symbol values both strategies run on (the sizes
//! their splits must divide), chosen by evaluating them, stated, and searched; a `--step` that
//! does not fit it refused with the one that does.

use serde_json::Value;
use symshard::search::versus::{lattice, Lattice};
use symshard::sym::Rational;

mod common;
use common::{json, refused, symshard};

const DP: &str = "dp=64,mbs=1,zero=1";
const TP: &str = "dp=8,tp=8,mbs=1,sp,zero=1";
/// 32-way data parallelism with two-way tensor (and sequence) parallelism: the micro-batch's
/// B·S = 32·S tokens split 64 ways, so S must be even.
const TP2: &str = "dp=32,tp=2,sp,mbs=1,zero=1";
/// 32-way data parallelism with context parallelism 2: each sequence is cut into 2·cp = 4
/// chunks, so S must be divisible by 4.
const CP2: &str = "dp=32,cp=2,mbs=1,zero=1";

/// `crossover llama3-8b A B --in S` with `extra` arguments, as JSON.
fn crossover(a: &str, b: &str, extra: &[&str]) -> Value {
    let mut args = vec!["crossover", "llama3-8b", a, b, "--in", "S"];
    args.extend(extra);
    args.extend(["--format", "json"]);
    json(&args)
}

/// The answer's intervals: (from, to, winner).
fn spans(c: &Value) -> Vec<(String, String, String)> {
    c["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let text = |k: &str| i[k].as_str().unwrap_or("").to_string();
            (text("from"), text("to"), text("winner"))
        })
        .collect()
}

#[test]
fn crossover_without_from_chooses_the_lattice_the_strategies_need() {
    // Both without --from and --step: until now refused (the strategies run only at every 4th
    // S); now searched on the multiples of 4 and said so.
    let c = crossover(TP2, CP2, &["--to", "16384"]);
    assert_eq!(c["step"], "4");
    assert_eq!(c["from"], "4");
    assert_eq!(c["to"], "16384");
    let reason = c["step_reason"].as_str().unwrap();
    assert!(
        reason.contains("A needs S divisible by 2")
            && reason.contains("B needs S divisible by 4")
            && reason.contains("2·cp = 4 does not divide"),
        "{reason}"
    );
    // The same answer as with the step given: cp = 2 beats tp = 2 from S = 4108 on.
    let given = crossover(TP2, CP2, &["--from", "4", "--to", "16384", "--step", "4"]);
    assert_eq!(spans(&c), spans(&given));
    assert_eq!(c["pieces"], given["pieces"]);
    assert_eq!(c["boundaries"], given["boundaries"]);
    assert_eq!(
        spans(&c),
        vec![
            ("4".into(), "4104".into(), "A".into()),
            ("4108".into(), "16384".into(), "B".into())
        ]
    );
    assert_eq!(given["step_reason"], "--step 4, as given");
}

#[test]
fn crossover_table_says_which_values_it_examined_and_why() {
    let out = symshard()
        .args([
            "crossover",
            "llama3-8b",
            DP,
            TP,
            "--in",
            "S",
            "--to",
            "1024",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("examined S = "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with(
            "examined S = 8, 16, 24, … 1024 (multiples of 8: A runs at every S, B needs S \
             divisible by 8 — at S = 7, B cannot run: dp × tp = 64 does not divide"
        ),
        "{line}"
    );
}

#[test]
fn crossover_states_what_each_strategy_needs_and_finds_the_given_steps_answer() {
    // Data parallelism runs at every S; 8-way tensor and sequence parallelism with dp = 8 splits
    // the micro-batch's 8·S tokens 64 ways. B − A changes sign at S ≈ 52.12: B is cheaper up to
    // 48, A from 56 on, as with --step 8 given.
    let c = crossover(DP, TP, &["--to", "4096"]);
    assert_eq!(c["step"], "8");
    assert_eq!(c["from"], "8");
    let reason = c["step_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("A runs at every S, B needs S divisible by 8"),
        "{reason}"
    );
    let given = crossover(DP, TP, &["--from", "8", "--to", "4096", "--step", "8"]);
    assert_eq!(spans(&c), spans(&given));
    assert_eq!(
        spans(&c),
        vec![
            ("8".into(), "48".into(), "B".into()),
            ("56".into(), "4096".into(), "A".into())
        ]
    );
}

#[test]
fn crossover_rounds_from_up_onto_the_lattice() {
    let c = crossover(DP, TP, &["--from", "100", "--to", "1000"]);
    assert_eq!(
        (c["from"].as_str(), c["step"].as_str()),
        (Some("104"), Some("8"))
    );
    assert_eq!(c["to"], "1000");
    let reason = c["step_reason"].as_str().unwrap();
    assert!(reason.contains("--from 100 rounded up"), "{reason}");
    // A --to below the lattice's first value leaves nothing, and says where the lattice starts.
    let e = refused(&["crossover", "llama3-8b", DP, TP, "--in", "S", "--to", "5"]);
    assert!(
        e.contains("lattice is 8") && e.contains("divisible by 8"),
        "{e}"
    );
}

#[test]
fn crossover_with_a_step_that_does_not_fit_names_the_step_that_does() {
    for (from, step, want) in [
        (None, "6", "give --from 8 --step 8"),
        (Some("1"), "8", "give --from 8 --step 8"),
        (Some("100"), "1", "give --from 104 --step 8"),
    ] {
        let mut args = vec![
            "crossover",
            "llama3-8b",
            DP,
            TP,
            "--in",
            "S",
            "--step",
            step,
        ];
        if let Some(f) = from {
            args.extend(["--from", f]);
        }
        let e = refused(&args);
        assert!(
            e.contains(want) && e.contains("B needs S divisible by 8"),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn crossover_names_the_strategy_no_value_lets_run() {
    // 16-way tensor parallelism cannot split Llama 3 8B's 8 key-value heads, whatever S is.
    let e = refused(&[
        "crossover",
        "llama3-8b",
        DP,
        "tp=16,dp=4,mbs=1",
        "--in",
        "S",
    ]);
    assert!(
        e.contains("B cannot run at any S") && e.contains("does not divide `k_rope`"),
        "{e}"
    );
}

/// An evaluator that runs where `ok` says and is refused elsewhere with the value in its error.
fn runs_where(ok: impl Fn(u64) -> bool) -> impl FnMut(&Rational) -> Result<Rational, String> {
    move |x: &Rational| {
        let v: u64 = x.to_integer().try_into().unwrap();
        if ok(v) {
            Ok(x.clone())
        } else {
            Err(format!("refused at {v}"))
        }
    }
}

#[test]
fn lattice_of_two_divisibility_rules_is_their_lcm() {
    let mut a = runs_where(|v| v % 4 == 0);
    let mut b = runs_where(|v| v % 6 == 0);
    let l = lattice(&mut a, &mut b, 4096);
    assert_eq!(
        l.both,
        Some(Lattice {
            step: 12,
            first: 12
        })
    );
    assert_eq!(l.a.lattice, Some(Lattice { step: 4, first: 4 }));
    assert_eq!(l.b.lattice, Some(Lattice { step: 6, first: 6 }));
    // What rules the other values out: the largest value below each lattice refused.
    assert_eq!(l.a.refusal.as_ref().map(|r| r.value), Some(3));
    assert_eq!(l.b.refusal.as_ref().map(|r| r.value), Some(5));
}

#[test]
fn lattice_of_a_threshold_is_every_value_from_it() {
    let mut a = runs_where(|v| v >= 5);
    let mut b = runs_where(|_| true);
    let l = lattice(&mut a, &mut b, 4096);
    assert_eq!(l.both, Some(Lattice { step: 1, first: 5 }));
    assert_eq!(l.b.refusal, None);
}

#[test]
fn lattice_of_a_step_longer_than_the_first_values_is_found() {
    // Nothing runs among the first 64 values: the scan goes on.
    let mut a = runs_where(|v| v % 96 == 0);
    let mut b = runs_where(|v| v % 2 == 0);
    let l = lattice(&mut a, &mut b, 4096);
    assert_eq!(
        l.both,
        Some(Lattice {
            step: 96,
            first: 96
        })
    );
}

#[test]
fn lattice_without_multiples_that_all_run_is_none() {
    // Odd values only: no step's multiples all run.
    let mut a = runs_where(|v| v % 2 == 1);
    let mut b = runs_where(|_| true);
    let l = lattice(&mut a, &mut b, 4096);
    assert_eq!(l.both, None);
    assert!(!l.a.never);
    // A rule the symbol does not enter: refused alike everywhere, and the scan stops early.
    let mut a = |_: &Rational| -> Result<Rational, String> { Err("never".into()) };
    let mut b = runs_where(|_| true);
    let l = lattice(&mut a, &mut b, 4096);
    assert_eq!(l.both, None);
    assert!(l.a.never);
    assert_eq!(l.scanned, symshard::search::versus::LATTICE_WINDOW);
}

#[test]
fn the_library_solves_the_crossover_the_command_line_prints() {
    // The typed request (what the Python package calls) against the command line's JSON: the
    // same document, field for field.
    let side = |s: &str, what: &str| symshard::CompareSide::parse(s, what).unwrap();
    let req = symshard::CrossoverRequest {
        model: symshard::Model::named("llama3-8b"),
        spec: symshard::CrossoverSpec {
            a: side(TP2, "strategy A"),
            b: side(CP2, "strategy B"),
            symbol: "S".into(),
            from: None,
            to: Some(16384),
            step: None,
            machine: symshard::Machine::reference().unwrap(),
        },
    };
    let got = serde_json::to_value(symshard::crossover(&req).unwrap()).unwrap();
    assert_eq!(got, crossover(TP2, CP2, &["--to", "16384"]));
    // Refusals name the options as the caller writes them.
    let mut bad = req.clone();
    bad.spec.step = Some(0);
    let e = symshard::crossover(&bad).unwrap_err().to_string();
    assert_eq!(e, "--step must be at least 1");
    bad.spec.machine = bad.spec.machine.spelled(symshard::Spelling::Python);
    let e = symshard::crossover(&bad).unwrap_err().to_string();
    assert_eq!(e, "step must be at least 1");
    bad.spec.step = None;
    bad.spec.from = Some(20000);
    let e = symshard::crossover(&bad).unwrap_err().to_string();
    assert_eq!(e, "start 20000 is above stop 16384: nothing to examine");
}
