//! `versus::lattice`: the lattice of symbol values two strategies run on (the sizes their
//! splits must divide), found by evaluating them.

use symshard::search::versus::{lattice, Lattice};
use symshard::sym::Rational;

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
