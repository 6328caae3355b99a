//! The brute-force audit of derived split costs: every shipped rule passes, every deliberately
//! wrong rule under `tests/fixtures/audit/` is caught, and a derivation perturbed by hand is caught.

mod common;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;
use std::path::{Path, PathBuf};
use symshard::audit::{self, CollectiveKey, Geometry, Verdict};
use symshard::diag::Source;
use symshard::rules::law::CollectiveKind;
use symshard::rules::split::derive;
use symshard::rules::{load_rule, OpRule, RuleSet};
use symshard::sym::{Poly, Rational};

fn fixtures() -> Vec<PathBuf> {
    common::yaml_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit"))
}

fn fixture(stem: &str) -> OpRule {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit")
        .join(format!("{stem}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    load_rule(&Source::new(&path, text), None).unwrap()
}

fn shipped(name: &str) -> OpRule {
    RuleSet::embedded().unwrap().get(name).unwrap().clone()
}

fn checks(rule: &OpRule, splits: &[(&str, u32)], g: Option<Geometry>) -> Vec<audit::Check> {
    let case = audit::case(rule, splits, g)
        .unwrap()
        .expect("the split divides");
    audit::audit_case(rule, &case).unwrap().expect("derivable")
}

fn find<'a>(checks: &'a [audit::Check], pass: audit::Pass, quantity: &str) -> &'a audit::Check {
    checks
        .iter()
        .find(|c| c.pass == pass && c.quantity == quantity)
        .unwrap_or_else(|| panic!("no check `{quantity}` in {checks:#?}"))
}

#[test]
fn every_shipped_rule_passes() {
    let set = RuleSet::embedded().unwrap();
    let report = audit::audit(set.iter()).unwrap();
    let failures: Vec<_> = report.failures().take(20).collect();
    assert!(report.passed(), "{}: {failures:#?}", report.summary());
    assert_eq!(report.rules, set.len());
    assert!(report.refused.is_empty(), "{:#?}", report.refused);
    assert!(report.cases >= 700, "only {} cases", report.cases);
    assert!(report.checked >= 9000, "only {} checks", report.checked);
    // Every rule with a splittable index is exercised.
    for rule in set.iter() {
        let splittable = rule.indices.iter().any(|i| i.kind.law().splittable);
        let audited = report.checks.iter().any(|c| c.rule == rule.name);
        assert_eq!(splittable, audited, "rule {}", rule.name);
    }
}

#[test]
fn every_fail_fixture_mismatches() {
    let files = fixtures();
    assert!(files.len() >= 5);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("fail-"),
            "{name}: audit fixtures are fail-*"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let rule = load_rule(&Source::new(&path, text), None).unwrap_or_else(|e| {
            panic!("{name} must load (the audit, not the loader, rejects it): {e}")
        });
        let report = audit::audit([&rule]).unwrap();
        assert!(report.mismatches > 0, "{name}: {}", report.summary());
    }
}

/// A contraction index declared `stat`: brute force sees partial sums of the whole output.
#[test]
fn contraction_declared_stat_leaves_partial_sums() {
    let rule = fixture("fail-matmul-contraction-as-stat");
    let c = checks(&rule, &[("k", 4)], None);
    let y = find(&c, audit::Pass::Forward, "placement of y");
    assert_eq!(
        (y.derived.as_str(), y.counted.as_str()),
        ("Replicate", "Partial(sum)")
    );
    let ar = find(
        &c,
        audit::Pass::Forward,
        "all-reduce(sum) of y on axis a: bytes",
    );
    assert_eq!(ar.derived, "0");
    // b = 2, n = 5 elements of 2 bytes.
    assert_eq!(ar.counted, "20");
}

/// A contraction index declared `reduce-max`: the partial results await a sum.
#[test]
fn contraction_declared_max_awaits_a_sum() {
    let rule = fixture("fail-matmul-contraction-as-max");
    let c = checks(&rule, &[("k", 2)], None);
    let y = find(&c, audit::Pass::Forward, "placement of y");
    assert_eq!(
        (y.derived.as_str(), y.counted.as_str()),
        ("Partial(max)", "Partial(sum)")
    );
}

/// A halo formula that ignores the stride agrees with brute force at stride 1 only.
#[test]
fn halo_ignoring_the_stride_is_caught_at_stride_two() {
    let rule = fixture("fail-pool-halo-ignores-stride");
    let at = |stride, kernel| {
        let g = Geometry {
            stride,
            kernel,
            pad: (kernel - stride) / 2,
        };
        checks(&rule, &[("oh", 3)], Some(g))
    };
    assert!(at(1, 3).iter().all(|c| c.verdict == Verdict::Ok));
    let halo = find(
        &at(2, 4),
        audit::Pass::Forward,
        "halo of x on axis a: bytes",
    )
    .clone();
    assert_eq!(halo.verdict, Verdict::Mismatch);
    // Rows of x per device: derived kh − 1 = 3, counted kh − stride = 2.
    let d: i64 = halo.derived.parse().unwrap();
    let n: i64 = halo.counted.parse().unwrap();
    assert_eq!(2 * d, 3 * n);
}

/// The inner index of a merged dimension leaves strided, not block, pieces.
#[test]
fn inner_merged_index_is_not_a_block_shard() {
    let rule = fixture("fail-flatten-inner-index-as-map");
    let c = checks(&rule, &[("s", 2)], None);
    let y = find(&c, audit::Pass::Forward, "placement of y");
    assert_eq!(
        (y.derived.as_str(), y.counted.as_str()),
        ("Shard(1)", "Irregular")
    );
    // The outer index is a block shard.
    let c = checks(&rule, &[("c", 2)], None);
    assert!(c.iter().all(|c| c.verdict == Verdict::Ok), "{c:#?}");
}

/// An all-reduce priced at (n − 1)/n of its size (a reduce-scatter's factor) instead of the ring
/// all-reduce's 2(n − 1)/n is caught, forward (row-parallel output) and backward (data-parallel
/// weight gradient).
#[test]
fn all_reduce_with_the_wrong_factor_is_caught() {
    let rule = shipped("linear");
    for (index, pass) in [("k", audit::Pass::Forward), ("b", audit::Pass::Backward)] {
        let case = audit::case(&rule, &[(index, 4)], None).unwrap().unwrap();
        let counted = audit::count(&rule, &case).unwrap();
        let mut entry = derive(&rule, &case.axis_splits(), audit::DTYPE_BYTES).unwrap();
        let ok = audit::compare(&case, &entry, &counted).unwrap();
        assert!(ok.iter().all(|c| c.verdict == Verdict::Ok), "{ok:#?}");
        let collectives = match pass {
            audit::Pass::Forward => &mut entry.forward.collectives,
            audit::Pass::Backward => &mut entry.backward.collectives,
        };
        let c = collectives
            .iter_mut()
            .find(|c| c.kind == CollectiveKind::AllReduce)
            .unwrap();
        c.wire_bytes = CollectiveKind::ReduceScatter.wire_bytes(&c.size, &Poly::int(4));
        let checks = audit::compare(&case, &entry, &counted).unwrap();
        let bad: Vec<_> = checks
            .iter()
            .filter(|c| c.verdict == Verdict::Mismatch)
            .collect();
        assert_eq!(bad.len(), 1, "{bad:#?}");
        assert!(bad[0].quantity.ends_with("wire bytes per rank"));
        let d: Rational = bad[0].derived.parse().unwrap();
        let n: Rational = bad[0].counted.parse().unwrap();
        assert_eq!(d * Rational::from_integer(2.into()), n);
    }
}

/// A collective of the wrong size, or one brute force does not call for, is caught.
#[test]
fn wrong_or_extra_collectives_are_caught() {
    let rule = shipped("matmul");
    let case = audit::case(&rule, &[("n", 2)], None).unwrap().unwrap();
    let counted = audit::count(&rule, &case).unwrap();
    let entry = derive(&rule, &case.axis_splits(), audit::DTYPE_BYTES).unwrap();
    let mut halved = entry.clone();
    let c = &mut halved.backward.collectives[0];
    c.size = c.size.checked_div(&Poly::int(2)).unwrap();
    let bad = audit::compare(&case, &halved, &counted).unwrap();
    assert!(bad
        .iter()
        .any(|c| c.verdict == Verdict::Mismatch && c.quantity.ends_with(": bytes")));
    let mut extra = entry.clone();
    let mut c = extra.backward.collectives[0].clone();
    c.tensor = "dw".into();
    extra.backward.collectives.push(c);
    let bad = audit::compare(&case, &extra, &counted).unwrap();
    assert!(bad.iter().any(|c| c.verdict == Verdict::Mismatch
        && c.quantity == "all-reduce(sum) of dw on axis a: bytes"
        && c.counted == "0"));
}

/// Compute per device that charges the bias to every rank's share, or forgets the all-reduce's
/// partial output, is caught.
#[test]
fn wrong_compute_or_placement_is_caught() {
    let rule = shipped("linear");
    let case = audit::case(&rule, &[("k", 2)], None).unwrap().unwrap();
    let counted = audit::count(&rule, &case).unwrap();
    let entry = derive(&rule, &case.axis_splits(), audit::DTYPE_BYTES).unwrap();
    let mut split_bias = entry.clone();
    split_bias.forward.compute = Poly::parse("(2*b*k*n + b*n)/2").unwrap();
    let bad = audit::compare(&case, &split_bias, &counted).unwrap();
    let c = find(&bad, audit::Pass::Forward, "compute (FLOPs per device)");
    assert_eq!(c.verdict, Verdict::Mismatch);
    let mut sharded = entry.clone();
    sharded.forward.outputs[0].placements[0] = symshard::rules::Placement::Shard(1);
    let bad = audit::compare(&case, &sharded, &counted).unwrap();
    let c = find(&bad, audit::Pass::Forward, "placement of y");
    assert_eq!(
        (c.derived.as_str(), c.verdict),
        ("Shard(1)", Verdict::Mismatch)
    );
}

/// Brute force on its own reproduces known answers at the audit's sizes.
#[test]
fn counts_match_hand_computed_values() {
    // linear, k over 4: b = 2, k = 3·4, n = 5. Forward per device 2·b·(k/4)·n multiply-adds plus
    // the bias added once (b·n); the partial output is b·n elements of 2 bytes.
    let rule = shipped("linear");
    let case = audit::case(&rule, &[("k", 4)], None).unwrap().unwrap();
    assert_eq!(case.size("k"), 12);
    let c = audit::count(&rule, &case).unwrap();
    assert_eq!(
        audit::number(&c.forward.flops),
        (2 * 2 * 3 * 5 + 2 * 5).to_string()
    );
    let ar = &c.forward.collectives;
    assert_eq!(ar.len(), 1);
    assert_eq!(
        ar[0].key,
        CollectiveKey::Reduce {
            tensor: "y".into(),
            op: symshard::rules::ReduceOp::Sum
        }
    );
    assert_eq!(ar[0].size, 2 * 5 * 2);

    // softmax, n over 3: one fp32 statistic per row, two calls forward, one backward.
    let rule = shipped("softmax");
    let case = audit::case(&rule, &[("n", 3)], None).unwrap().unwrap();
    let c = audit::count(&rule, &case).unwrap();
    let stats = |p: &audit::PassCount| {
        p.collectives
            .iter()
            .map(|c| (c.size, c.calls))
            .collect::<Vec<_>>()
    };
    let b = case.size("b");
    assert_eq!(stats(&c.forward), vec![(4 * b, 2)]);
    assert_eq!(stats(&c.backward), vec![(4 * b, 1)]);

    // conv2d, oh over 3 at stride 1, kernel 3, pad 1: a middle device reads one row of x from
    // each neighbour, every image and input channel, the whole width.
    let rule = shipped("conv2d");
    let g = audit::GEOMETRIES[0];
    let case = audit::case(&rule, &[("oh", 3)], Some(g)).unwrap().unwrap();
    let c = audit::count(&rule, &case).unwrap();
    let halo = c
        .forward
        .collectives
        .iter()
        .find(|c| matches!(&c.key, CollectiveKey::Halo { tensor } if tensor == "x"))
        .unwrap();
    assert_eq!(
        halo.size,
        case.size("n") * case.size("ci") * case.size("ow") * 2 * 2
    );
}

#[test]
fn cli_audit_passes_on_shipped_rules() {
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["audit", "--failures"])
        .assert()
        .success()
        .stdout(contains(" 0 mismatches"));
}

#[test]
fn cli_audit_exits_1_on_a_wrong_rule() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit/fail-matmul-contraction-as-stat.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .arg("audit")
        .arg(path)
        .assert()
        .code(1)
        .stdout(contains("MISMATCH"));
}

#[test]
fn cli_audit_exits_2_on_bad_input() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rules/fail-unknown-kind.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .arg("audit")
        .arg(path)
        .assert()
        .code(2);
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["audit", "no-such-rule.yaml"])
        .assert()
        .code(2);
}

#[test]
fn cli_audit_json_parses() {
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .args(["audit", "linear", "softmax", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rules"], 2);
    assert_eq!(v["mismatches"], 0);
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(v["checked"].as_u64().unwrap() as usize, checks.len());
    assert!(checks
        .iter()
        .all(|c| c["verdict"] == "ok" && c["derived"] == c["counted"]));
}

#[test]
fn cli_audit_fails_a_rule_with_negative_flops() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/fail-negative-flops.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .arg("audit")
        .arg(path)
        .assert()
        .code(1)
        .stdout(contains("NEGATIVE"))
        .stdout(contains(": ok").not());
}

#[test]
fn cli_audit_prints_the_summary_and_failures_unless_verbose() {
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .arg("audit")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("audit: ")
            && text.contains(" rules, ")
            && text.contains(" splits, ")
            && text.contains(" 0 mismatches"),
        "{text}"
    );
    // Counts group thousands: the shipped rules make more than a thousand checks.
    let report = Command::cargo_bin("symshard")
        .unwrap()
        .args(["audit", "--failures", "--format", "json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let checked = report["checked"].as_u64().unwrap();
    assert!(checked >= 1000, "{checked}");
    let grouped = format!("{},{:03} checks", checked / 1000, checked % 1000);
    assert!(
        checked < 1_000_000 && text.contains(&grouped),
        "{grouped}: {text}"
    );
    let verbose = Command::cargo_bin("symshard")
        .unwrap()
        .args(["audit", "linear", "--verbose"])
        .output()
        .unwrap();
    let text = String::from_utf8(verbose.stdout).unwrap();
    assert!(
        text.lines().count() > 50 && text.contains("  ok\n"),
        "{text}"
    );
}

#[test]
fn kernel_bytes_match_hand_computed_values_and_refute_twice_the_forward() {
    // linear, n over 2 (column parallel): b, k, n at the audit's sizes, 2-byte elements.
    // Forward, one kernel: x[b,k] and w[k,n/2] and bias[n/2] read, y[b,n/2] written.
    // Backward, one kernel per gradient: dx reads dy[b,n/2] and w[k,n/2] and writes dx[b,k]
    // (a partial sum); dw reads dy and x[b,k] and writes dw[k,n/2]; dbias reads dy and writes
    // dbias[n/2].
    let rule = shipped("linear");
    let case = audit::case(&rule, &[("n", 2)], None).unwrap().unwrap();
    let (b, k, n) = (case.size("b"), case.size("k"), case.size("n") / 2);
    let c = audit::count(&rule, &case).unwrap();
    assert_eq!(c.forward.io_bytes, 2 * (b * k + k * n + n + b * n));
    let backward = 2 * ((b * n + k * n + b * k) + (b * n + b * k + k * n) + (b * n + n));
    assert_eq!(c.backward.io_bytes, backward);
    // The old convention (backward bytes = twice the forward's) is not what the kernels touch.
    assert_ne!(c.backward.io_bytes, 2 * c.forward.io_bytes);
    // And the audit compares the rule's formulas with these counts, pass by pass.
    let all = audit::audit_case(&rule, &case).unwrap().unwrap();
    for pass in [audit::Pass::Forward, audit::Pass::Backward] {
        let check = find(&all, pass, "HBM bytes read and written per device");
        assert_eq!(check.verdict, Verdict::Ok, "{check:?}");
    }
    let check = find(
        &all,
        audit::Pass::Backward,
        "HBM bytes read and written per device",
    );
    assert_eq!(check.counted, backward.to_string());
}

/// A user's rule whose window the audit cannot read is refused at its file, line and column,
/// naming the symbol: here the stride also sits in the kernel's place (`oh*stride + kh`).
#[test]
fn a_window_the_audit_cannot_read_names_the_rules_line() {
    let dir = common::temp_dir("audit-window-line");
    let text = std::fs::read_to_string("operator_rules/maxpool2d.yaml")
        .unwrap()
        .replace("name: maxpool2d", "name: pool_odd")
        .replace(
            "oh: \"(oh - 1)*stride + kh - 2*pad\"",
            "oh: \"oh*stride + kh\"",
        );
    assert!(text.contains("oh*stride + kh"));
    let line = text
        .lines()
        .position(|l| l.contains("oh*stride + kh"))
        .unwrap()
        + 1;
    std::fs::write(dir.join("pool_odd.yaml"), &text).unwrap();
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .current_dir(&dir)
        .args(["audit", "pool_odd.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pool_odd.yaml:{line}:")), "{err}");
    assert!(err.contains("`stride`"), "{err}");
}
