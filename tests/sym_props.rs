//! Property and unit tests of the exact symbolic algebra.

use std::cmp::Ordering;

use num_bigint::BigInt;
use num_traits::Signed;
use proptest::prelude::*;
use symshard::sym::{crossovers, Bindings, Monomial, ParseError, Poly, Rational, SymError};

const SYMS: [&str; 4] = ["a", "b", "p", "q"];

fn rat(n: i64, d: i64) -> Rational {
    Rational::new(n.into(), d.into())
}

fn p(text: &str) -> Poly {
    Poly::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn bindings_of(pairs: &[(&str, Rational)]) -> Bindings {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn rational() -> impl Strategy<Value = Rational> {
    (-6i64..=6, 1i64..=4).prop_map(|(n, d)| rat(n, d))
}

fn nonzero_rational() -> impl Strategy<Value = Rational> {
    (1i64..=5, any::<bool>(), 1i64..=3).prop_map(|(n, neg, d)| rat(if neg { -n } else { n }, d))
}

fn monomial() -> impl Strategy<Value = Monomial> {
    prop::collection::vec(-3i32..=3, SYMS.len())
        .prop_map(|es| Monomial::from_exponents(SYMS.iter().copied().zip(es)))
}

fn poly() -> impl Strategy<Value = Poly> {
    prop::collection::vec((rational(), monomial()), 0..5)
        .prop_map(|terms| terms.into_iter().map(|(c, m)| Poly::monomial(c, m)).sum())
}

fn single_term() -> impl Strategy<Value = Poly> {
    (nonzero_rational(), monomial()).prop_map(|(c, m)| Poly::monomial(c, m))
}

fn bindings() -> impl Strategy<Value = Bindings> {
    prop::collection::vec(nonzero_rational(), SYMS.len()).prop_map(|vs| {
        SYMS.iter()
            .map(|s| s.to_string())
            .zip(vs)
            .collect::<Bindings>()
    })
}

/// Symbol values from tiny fractions to 10^30: the 128-bit fast path of `eval` answers the
/// small ones and must fall back exactly on the others.
fn wide_bindings() -> impl Strategy<Value = Bindings> {
    let value = prop_oneof![
        nonzero_rational(),
        (1u32..=30, any::<bool>(), 1i64..=7).prop_map(|(k, neg, d)| {
            let n = BigInt::from(10).pow(k) * if neg { -1 } else { 1 };
            Rational::new(n, d.into())
        }),
    ];
    prop::collection::vec(value, SYMS.len()).prop_map(|vs| {
        SYMS.iter()
            .map(|s| s.to_string())
            .zip(vs)
            .collect::<Bindings>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Evaluation with the checked 128-bit fast path equals evaluation in arbitrary precision,
    /// in the same lowest terms (the fast path builds its fraction without reducing it again).
    #[test]
    fn fast_evaluation_is_exact(x in poly(), big in 0u32..=40, b in wide_bindings()) {
        let x = &x * &Poly::constant(Rational::from_integer(BigInt::from(10).pow(big)));
        let parts = |r: Rational| (r.numer().clone(), r.denom().clone());
        prop_assert_eq!(x.eval(&b).map(parts), x.eval_exact(&b).map(parts));
    }

    #[test]
    fn addition_is_commutative_and_associative(x in poly(), y in poly(), z in poly()) {
        prop_assert_eq!(&x + &y, &y + &x);
        prop_assert_eq!((&x + &y) + &z, &x + (&y + &z));
    }

    #[test]
    fn multiplication_is_commutative_and_associative(x in poly(), y in poly(), z in poly()) {
        prop_assert_eq!(&x * &y, &y * &x);
        prop_assert_eq!((&x * &y) * &z, &x * (&y * &z));
    }

    #[test]
    fn multiplication_distributes(x in poly(), y in poly(), z in poly()) {
        prop_assert_eq!(&x * (&y + &z), &x * &y + &x * &z);
        prop_assert_eq!((&x - &y) * &z, &x * &z - &y * &z);
    }

    #[test]
    fn inverses_and_identities(x in poly(), y in poly()) {
        prop_assert!((&x + -&x).is_zero());
        prop_assert!((&x - &x).is_zero());
        prop_assert_eq!(&x + Poly::zero(), x.clone());
        prop_assert_eq!(&x * Poly::one(), x.clone());
        prop_assert!((&x * Poly::zero()).is_zero());
        prop_assert_eq!(-(-x.clone()), x.clone());
        let mut acc = x.clone();
        acc += &y;
        acc -= y.clone();
        prop_assert_eq!(&acc, &x);
        acc *= Poly::int(2);
        prop_assert_eq!(acc, Poly::int(2) * x.clone());
        prop_assert_eq!(x.clone() + y.clone(), [x.clone(), y.clone()].iter().sum::<Poly>());
        prop_assert_eq!(&x * &y, [x, y].into_iter().product::<Poly>());
    }

    #[test]
    fn display_parses_back(x in poly()) {
        let text = x.to_string();
        prop_assert_eq!(Poly::parse(&text), Ok(x.clone()), "text: {}", text);
        let json = serde_json::to_string(&x).unwrap();
        prop_assert_eq!(serde_json::from_str::<Poly>(&json).unwrap(), x);
    }

    #[test]
    fn evaluation_is_a_ring_homomorphism(x in poly(), y in poly(), b in bindings()) {
        let (ex, ey) = (x.eval(&b).unwrap(), y.eval(&b).unwrap());
        prop_assert_eq!((&x + &y).eval(&b).unwrap(), &ex + &ey);
        prop_assert_eq!((&x - &y).eval(&b).unwrap(), &ex - &ey);
        prop_assert_eq!((&x * &y).eval(&b).unwrap(), &ex * &ey);
    }

    #[test]
    fn partial_binding_then_eval(x in poly(), b in bindings()) {
        let partial: Bindings = b.iter().filter(|(k, _)| k.as_str() < "p")
            .map(|(k, v)| (k.clone(), v.clone())).collect();
        let bound = x.bind(&partial).unwrap();
        prop_assert!(bound.symbols().iter().all(|s| s.as_str() >= "p"));
        prop_assert_eq!(bound.eval(&b).unwrap(), x.eval(&b).unwrap());
    }

    #[test]
    fn substitute_then_eval(x in poly(), v in poly(), m in single_term(), b in bindings()) {
        for value in [&v, &m] {
            match x.substitute("p", value) {
                Ok(s) => {
                    let mut extended = b.clone();
                    extended.insert("p".into(), value.eval(&b).unwrap());
                    prop_assert_eq!(s.eval(&b).unwrap(), x.eval(&extended).unwrap());
                }
                Err(e) => {
                    prop_assert!(x.degree_in("p").0 < 0);
                    prop_assert!(!value.is_monomial());
                    let expected = matches!(
                        e,
                        SymError::NegativePowerOfSum { .. } | SymError::DivisionByZero { .. }
                    );
                    prop_assert!(expected, "unexpected error {:?}", e);
                }
            }
        }
    }

    #[test]
    fn cmp_under_agrees_with_eval(x in poly(), y in poly(), b in bindings()) {
        let expected = x.eval(&b).unwrap().cmp(&y.eval(&b).unwrap());
        prop_assert_eq!(x.cmp_under(&y, &b).unwrap(), expected);
        prop_assert_eq!(x.cmp_under(&x, &b).unwrap(), Ordering::Equal);
    }

    #[test]
    fn powers_and_division(x in poly(), m in single_term(), k in 0i32..4) {
        let by_product: Poly = std::iter::repeat_n(&x, k as usize).product();
        prop_assert_eq!(x.pow(k).unwrap(), by_product);
        prop_assert_eq!(m.pow(-k).unwrap() * m.pow(k).unwrap(), Poly::one());
        prop_assert_eq!((&x * &m).checked_div(&m).unwrap(), x);
    }

    #[test]
    fn parser_never_panics_on_text(s in "\\PC*") {
        let _ = Poly::parse(&s);
    }

    #[test]
    fn parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = Poly::parse(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn parser_never_panics_on_formula_like_text(s in "[-+*/^()0-9abp. ]{0,40}") {
        if let Err(e) = Poly::parse(&s) {
            prop_assert!(e.column >= 1 && e.column <= s.chars().count() + 1);
        }
    }
}

#[test]
fn known_parses() {
    assert_eq!(p("2*m*n*k/p").to_string(), "2*k*m*n/p");
    assert_eq!(p("0.125*x"), Poly::monomial(rat(1, 8), Monomial::var("x")));
    assert_eq!(p("(a+b)^2").to_string(), "a^2 + 2*a*b + b^2");
    assert_eq!(p("2*b*k*n*(1 - 1/p)").to_string(), "2*b*k*n - 2*b*k*n/p");
    assert_eq!(p("3/2*x*y + x^2 - 1").to_string(), "x^2 + 3/2*x*y - 1");
    assert_eq!(p("b*n/(p*p)").to_string(), "b*n/p^2");
    assert_eq!(p("3/(2*p*q^2)").to_string(), "3/2/(p*q^2)");
    assert_eq!(p("1/p").to_string(), "1/p");
    assert_eq!(p("0 - x").to_string(), "-x");
    assert_eq!(p("x - x").to_string(), "0");
    assert_eq!(p("14/6").to_string(), "7/3");
    assert_eq!(p("-7/3 + 0*y").to_string(), "-7/3");
    assert_eq!(p("  x  ^  2 "), p("x*x"));
}

#[test]
fn exponent_and_unary_minus_rules() {
    assert_eq!(p("p^-1"), p("1/p"));
    assert_eq!(p("p^(-2)"), p("1/(p*p)"));
    assert_eq!(p("x^2^3"), p("x^8"));
    assert_eq!(p("2^-1"), Poly::constant(rat(1, 2)));
    assert_eq!(p("-x^2"), -p("x*x"));
    assert_eq!(p("--x"), p("x"));
    assert_eq!(p("2*-x"), p("-2*x"));
    assert_eq!(p("x^0"), Poly::one());
    assert_eq!(p("a - b - c"), p("a - (b + c)"));
    assert_eq!(p("a/b/c"), p("a/(b*c)"));
}

#[test]
fn big_numbers_are_exact() {
    let big = BigInt::from(10).pow(30);
    assert_eq!(p("10^30"), Poly::from_bigint(big.clone()));
    assert_eq!(p("10^30").as_integer(), Some(big.clone()));
    assert_eq!(
        p("1000000000000000000000000000000 * 2"),
        Poly::from_bigint(big * 2)
    );
    assert_eq!(p("2^1000").to_string().len(), 302);
    assert_eq!(p("1/3").as_integer(), None);
}

fn err(text: &str) -> ParseError {
    Poly::parse(text).expect_err(text)
}

#[test]
fn parse_errors_report_columns() {
    let cases: &[(&str, usize, &str, &str)] = &[
        ("", 1, "", "empty"),
        ("   ", 1, "", "empty"),
        ("x + * y", 5, "*", "expected"),
        ("(a+b", 5, "", "never closed"),
        ("a+b)", 4, ")", "unmatched"),
        ("a b", 3, "b", "unexpected token"),
        ("2x", 2, "x", "unexpected token"),
        ("x^y", 3, "y", "integer"),
        ("x^1.5", 3, "1.5", "integer"),
        ("x^(1+1)", 5, "+", "expected ')'"),
        ("x^1001", 3, "1001", "exceeds 1000"),
        ("x^2^10", 5, "10", "exceeds 1000"),
        ("x/0", 3, "0", "division by zero"),
        ("x/(a-a)", 3, "(", "division by zero"),
        ("x/(p+1)", 3, "(", "not a monomial"),
        ("(p+1)^-1", 6, "^", "negative power"),
        ("0^-1", 2, "^", "division by zero"),
        ("x + é", 5, "é", "unexpected character"),
        ("1. + x", 1, "1.", "malformed number"),
        ("x +", 4, "", "end of input"),
    ];
    for &(text, column, token, message) in cases {
        let e = err(text);
        assert_eq!((e.column, e.token.as_str()), (column, token), "{text}: {e}");
        assert!(e.message.contains(message), "{text}: {e}");
        assert!(e.to_string().ends_with(&format!("at column {column}")));
    }
}

#[test]
fn nesting_is_capped() {
    let ok = format!("{}x{}", "(".repeat(200), ")".repeat(200));
    assert_eq!(p(&ok), p("x"));
    let deep = format!("{}x{}", "(".repeat(100_000), ")".repeat(100_000));
    let e = err(&deep);
    assert_eq!(e.column, 257);
    assert!(e.message.contains("nested deeper"));
    let deep_exponent = format!("x^{}2", "(".repeat(10_000));
    assert!(err(&deep_exponent).message.contains("nested deeper"));
    assert_eq!(p(&format!("{}x", "-".repeat(100_000))), p("x"));
}

#[test]
fn huge_expansions_are_rejected() {
    let e = err("(a+b+c+d+e+f)^1000");
    assert!(e.message.contains("too large"), "{e}");
    assert!(err("((9^1000)^1000)^1000").message.contains("too large"));
    assert!(err("((x^1000)^1000)^1000").message.contains("too large"));
}

#[test]
fn evaluation_errors() {
    let x = p("b*n/p + a");
    let b = bindings_of(&[("n", rat(2, 1))]);
    assert_eq!(x.eval(&b), Err(SymError::Unbound { symbol: "a".into() }));
    let zero_p = bindings_of(&[("p", rat(0, 1))]);
    let e = x.bind(&zero_p).unwrap_err();
    assert_eq!(
        e,
        SymError::DivisionByZero {
            symbol: Some("p".into())
        }
    );
    assert!(e.to_string().contains("`p`"));
    assert_eq!(p("p^2 + a").bind(&zero_p), Ok(p("a")));
    let e = x.checked_div(&p("p+1")).unwrap_err();
    assert!(matches!(e, SymError::NonMonomialDivisor { ref divisor } if divisor == "p + 1"));
    assert!(e.to_string().contains("p + 1"));
    assert_eq!(
        x.checked_div(&Poly::zero()),
        Err(SymError::DivisionByZero { symbol: None })
    );
    assert!(matches!(
        p("a+b").pow(-1),
        Err(SymError::NegativePowerOfSum { .. })
    ));
    assert!(matches!(
        p("1/p").substitute("p", &p("a+b")),
        Err(SymError::NegativePowerOfSum { .. })
    ));
    assert_eq!(
        p("1/p").substitute("p", &Poly::zero()),
        Err(SymError::DivisionByZero {
            symbol: Some("p".into())
        })
    );
    assert_eq!(p("p^2").substitute("p", &p("a+b")), Ok(p("(a+b)^2")));
}

#[test]
fn accessors() {
    let x = p("3*a^2/p + a - 2/p^3 + 5");
    assert_eq!(x.degree_in("p"), (-3, 0));
    assert_eq!(x.degree_in("a"), (0, 2));
    assert_eq!(x.degree_in("z"), (0, 0));
    assert_eq!(p("a^2*b").degree_in("a"), (2, 2));
    assert_eq!(
        x.symbols().into_iter().collect::<Vec<_>>(),
        vec!["a".to_string(), "p".to_string()]
    );
    assert!(!x.is_constant() && !x.is_monomial());
    assert_eq!(Poly::zero().as_constant(), Some(rat(0, 1)));
    assert_eq!(p("7/3").as_constant(), Some(rat(7, 3)));
    assert_eq!(x.terms().count(), 4);
    let m = Monomial::from_exponents([("a", 2), ("p", -1)]);
    assert_eq!((m.degree(), m.exponent("p"), m.exponent("z")), (1, -1, 0));
    assert_eq!(m.iter().collect::<Vec<_>>(), vec![("a", 2), ("p", -1)]);
    assert!(Monomial::one().is_one() && !Monomial::var("a").is_one());
    assert_eq!("a*b".parse::<Poly>(), Ok(p("b*a")));
}

#[test]
fn serde_accepts_strings_and_numbers() {
    assert_eq!(serde_json::to_string(&p("2*m/p")).unwrap(), "\"2*m/p\"");
    assert_eq!(serde_json::from_str::<Poly>("\"2*m\"").unwrap(), p("2*m"));
    assert_eq!(serde_json::from_str::<Poly>("4").unwrap(), Poly::int(4));
    assert_eq!(serde_json::from_str::<Poly>("-4").unwrap(), Poly::int(-4));
    assert_eq!(serde_json::from_str::<Poly>("0.1").unwrap(), p("1/10"));
    assert!(serde_json::from_str::<Poly>("\"x/(p+1)\"").is_err());
}

#[test]
fn crossover_of_square_root_of_two() {
    let none = Bindings::new();
    let roots = crossovers(&p("x^2"), &p("2"), "x", &none, &rat(0, 1), &rat(4, 1)).unwrap();
    assert_eq!(roots.len(), 1);
    let err = (&roots[0] - rat(141_421_356, 100_000_000)).abs();
    assert!(err < rat(1, 100_000_000), "{}", roots[0]);
    assert!((&roots[0] * &roots[0] - rat(2, 1)).abs() < rat(1, 1_000_000_000));
}

#[test]
fn crossovers_with_poles_fixed_symbols_and_repeated_roots() {
    let none = Bindings::new();
    let r = crossovers(&p("x"), &p("1/x"), "x", &none, &rat(-2, 1), &rat(2, 1)).unwrap();
    assert_eq!(r, vec![rat(-1, 1), rat(1, 1)]);
    let fixed = bindings_of(&[("a", rat(4, 1))]);
    let r = crossovers(&p("a*x"), &p("2"), "x", &fixed, &rat(0, 1), &rat(1, 1)).unwrap();
    assert_eq!(r, vec![rat(1, 2)]);
    let r = crossovers(
        &p("(x-1)^2*x"),
        &Poly::zero(),
        "x",
        &none,
        &rat(-4, 1),
        &rat(4, 1),
    );
    assert_eq!(r.unwrap(), vec![rat(0, 1), rat(1, 1)]);
    let r = crossovers(
        &p("x^2 + 1"),
        &Poly::zero(),
        "x",
        &none,
        &rat(-3, 1),
        &rat(3, 1),
    );
    assert_eq!(r.unwrap(), vec![]);
    let r = crossovers(
        &p("x - 1"),
        &Poly::zero(),
        "x",
        &none,
        &rat(1, 1),
        &rat(1, 1),
    );
    assert_eq!(r.unwrap(), vec![rat(1, 1)]);
    let r = crossovers(&p("a*x"), &p("2"), "x", &none, &rat(0, 1), &rat(1, 1));
    assert_eq!(r, Err(SymError::Unbound { symbol: "a".into() }));
    let r = crossovers(&p("x"), &p("x"), "x", &none, &rat(0, 1), &rat(1, 1));
    assert_eq!(r.unwrap(), vec![]);
}

#[test]
fn long_literals_are_capped() {
    let ok = "9".repeat(20_000);
    assert_eq!(p(&ok).as_integer().unwrap().to_string(), ok);
    let e = err(&format!("x + {}", "9".repeat(20_001)));
    assert_eq!(e.column, 5);
    assert!(e.message.contains("longer than"));
}
