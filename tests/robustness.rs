//! No input can crash symshard: every loader and the formula parser, fed random bytes and
//! mutations of the real files, either succeeds or returns an error with a location, quickly.

use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};
use symshard::calib::Calibration;
use symshard::diag::Source;
use symshard::model::ModelLoader;
use symshard::rules::load_rule;
use symshard::strategy::parse_strategy;
use symshard::sym::Poly;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Rule,
    Model,
    Strategy,
    Calibration,
}

fn files(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v: Vec<(String, String)> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

const STRATEGY: &str = "dp: 8\ntp: 4\npp: 2\nmicrobatches: 16\nschedule: interleaved-1f1b\nchunks: 2\nsequence_parallel: true\nrecompute: selective\nzero: 1\nsplits: {fc_in: none}\n";

/// Loads `text` as `kind`; panics only if the loader panics or an error has no location.
fn check(kind: Kind, text: &str, loader: &ModelLoader) {
    let name = "input.yaml";
    let src = Source::new(name, text);
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| match kind {
        Kind::Rule => load_rule(&src, None).map(|_| ()),
        Kind::Model => loader.load(&src).map(|_| ()),
        Kind::Strategy => parse_strategy(&src).map(|_| ()),
        Kind::Calibration => Calibration::load(&src).map(|_| ()),
    }));
    let elapsed = start.elapsed();
    let result = result.unwrap_or_else(|_| panic!("{kind:?} loader panicked on:\n{text}"));
    assert!(
        elapsed < Duration::from_secs(5),
        "{kind:?} took {elapsed:?}"
    );
    if let Err(e) = result {
        let msg = e.to_string();
        assert!(
            msg.starts_with("input.yaml:"),
            "{kind:?} error without a location: {msg}\n--- input ---\n{text}"
        );
    }
}

fn corpus() -> Vec<(Kind, String)> {
    let mut v = Vec::new();
    for (_, t) in files("operator_rules") {
        v.push((Kind::Rule, t));
    }
    for (_, t) in files("models") {
        v.push((Kind::Model, t));
    }
    for (_, t) in files("calibration") {
        v.push((Kind::Calibration, t));
    }
    v.push((Kind::Strategy, STRATEGY.to_string()));
    v
}

/// One mutation of a YAML text.
fn mutate(text: &str, op: u8, at: usize, pick: u8) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len().max(1);
    let i = at % n;
    let replacements = ["1000000000000000000000000000000000000000", "-7", "0", "1e400", "ω∑☃", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "{a: {b: {c: {d: 1}}}}", "\"\"", "~", "2^999", "p_dp"];
    let mut out: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    match op % 6 {
        // Delete a line (a key).
        0 => {
            if !out.is_empty() {
                out.remove(i);
            }
        }
        // Duplicate a line (duplicate keys).
        1 => {
            if !out.is_empty() {
                let l = out[i].clone();
                out.insert(i, l);
            }
        }
        // Replace the value after a colon.
        2 => {
            if let Some(l) = out.get_mut(i) {
                if let Some(pos) = l.rfind(": ") {
                    l.truncate(pos + 2);
                    l.push_str(replacements[pick as usize % replacements.len()]);
                }
            }
        }
        // Replace a number anywhere in the line.
        3 => {
            if let Some(l) = out.get_mut(i) {
                if let Some(pos) = l.find(|c: char| c.is_ascii_digit()) {
                    let end = l[pos..]
                        .find(|c: char| !c.is_ascii_digit())
                        .map_or(l.len(), |e| pos + e);
                    l.replace_range(pos..end, replacements[pick as usize % 4]);
                }
            }
        }
        // Truncate the file.
        4 => {
            let cut = at.wrapping_mul(7919) % text.len().max(1);
            let mut c = cut;
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            return text[..c].to_string();
        }
        // Re-indent a line.
        _ => {
            if let Some(l) = out.get_mut(i) {
                l.insert_str(0, "   ");
            }
        }
    }
    out.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn mutated_real_files_never_crash(file in any::<usize>(), op in any::<u8>(), at in any::<usize>(), pick in any::<u8>()) {
        let corpus = corpus();
        let (kind, text) = &corpus[file % corpus.len()];
        let loader = ModelLoader::embedded().unwrap();
        check(*kind, &mutate(text, op, at, pick), &loader);
    }

    #[test]
    fn random_bytes_never_crash(bytes in proptest::collection::vec(any::<u8>(), 0..400), kind in 0u8..4) {
        let text = String::from_utf8_lossy(&bytes).to_string();
        let kind = [Kind::Rule, Kind::Model, Kind::Strategy, Kind::Calibration][kind as usize];
        let loader = ModelLoader::embedded().unwrap();
        check(kind, &text, &loader);
    }

    #[test]
    fn random_formulas_never_crash(text in "[a-z0-9+*/^() .-]{0,60}") {
        let start = Instant::now();
        let r = catch_unwind(|| Poly::parse(&text).map(|p| p.to_string()));
        prop_assert!(r.is_ok(), "parser panicked on {text:?}");
        prop_assert!(start.elapsed() < Duration::from_secs(5));
    }
}

/// Deep nesting is refused, not recursed into without bound.
#[test]
fn deep_nesting_is_an_error() {
    let loader = ModelLoader::embedded().unwrap();
    let deep = format!(
        "name: x\nfamily: gpt\nsymbols: {}1{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    check(Kind::Model, &deep, &loader);
    let deep_formula = format!("{}x{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(Poly::parse(&deep_formula).is_err());
}

/// Extreme but valid inputs give exact answers: symbols bound to 10^30 (no overflow).
#[test]
fn huge_symbols_are_exact() {
    let loader = ModelLoader::embedded().unwrap();
    let m = loader.resolve("gpt2-124m").unwrap();
    let mut v = m.values.clone();
    let big: symshard::sym::Rational = "1000000000000000000000000000000"
        .parse::<num_bigint::BigInt>()
        .unwrap()
        .into();
    v.insert("L".into(), big.clone());
    let params = symshard::model::model_cost(&m).params.eval(&v).unwrap();
    // Per layer 7,087,872 parameters (12·H² + 13·H with H = 768), plus the embeddings
    // (V·H + P·H) and the final layernorm (2·H): HF GPT2Model's layout.
    let per_layer = symshard::sym::Rational::from_integer(7_087_872i64.into());
    let rest =
        symshard::sym::Rational::from_integer((50257i64 * 768 + 1024 * 768 + 2 * 768).into());
    assert_eq!(params, per_layer * big + rest);
}
