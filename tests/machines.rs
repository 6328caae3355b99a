//! `symshard machines`: the shipped calibration tables at a glance, and one table's every number
//! with its source.

mod common;
use common::{json, symshard};
use predicates::prelude::*;

/// Every shipped table is listed once, with its datasheet peak as the table states it.
#[test]
fn every_shipped_machine_is_listed() {
    let rows = json(&["machines", "--format", "json"]);
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    let shipped: Vec<String> = std::fs::read_dir("calibration")
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "yaml").then(|| p.file_stem().unwrap().to_string_lossy().into())
        })
        .collect();
    assert_eq!(names.len(), shipped.len(), "{names:?}");
    for s in &shipped {
        assert!(names.contains(&s.as_str()), "{s} missing from {names:?}");
    }
    let h100 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "h100-sxm")
        .unwrap();
    // NVIDIA H100 Tensor Core GPU datasheet: 989 TFLOP/s dense BF16 and 1,979 FP8 (SXM).
    assert_eq!(h100["peak_flops"]["bf16"], "989000000000000");
    assert_eq!(h100["peak_flops"]["fp8"], "1979000000000000");
    assert_eq!(h100["gpus_per_node"], 8);
    assert_eq!(h100["inter_algorithm"], "nccl");
    let table = common::stdout(&["machines"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("h100-sxm ") && l.contains("989.0 TFLOP/s")),
        "{table}"
    );
    // --exact prints the table's numbers as it states them.
    let exact = common::stdout(&["--exact", "machines"]);
    assert!(
        exact.lines().any(|l| l.starts_with("h100-sxm ")
            && l.contains(" 989000000000000 ")
            && l.contains(" 80000000000 ")),
        "{exact}"
    );
}

/// A table's numbers each come with a non-empty source, and the datasheet ones say which
/// datasheet; a curve is listed with its points.
#[test]
fn a_machine_lists_every_number_with_its_source() {
    for m in [
        "h100-sxm",
        "a100-80gb",
        "gb200-nvl72",
        "tpu-v5p",
        "mi300x",
        "gaudi3",
    ] {
        let rows = json(&["machines", m, "--format", "json"]);
        let rows = rows.as_array().unwrap();
        assert!(rows.len() >= 10, "{m}: {}", rows.len());
        for r in rows {
            assert!(!r["source"].as_str().unwrap().trim().is_empty(), "{m}: {r}");
            assert!(!r["value"].as_str().unwrap().is_empty(), "{m}: {r}");
        }
        let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
        for p in [
            "device.peak_flops.bf16",
            "device.memory_bandwidth",
            "tiers.inter.latency",
        ] {
            assert!(paths.contains(&p), "{m}: {p} not in {paths:?}");
        }
    }
    let text = common::stdout(&["machines", "a100-80gb"]);
    assert!(
        text.contains("device.peak_flops.bf16 = 312000000000000"),
        "{text}"
    );
    assert!(
        text.contains("NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s dense BF16"),
        "{text}"
    );
    assert!(
        text.contains("device.efficiency.matmul = [[68719476736, 0.7827]"),
        "{text}"
    );
}

/// An unknown machine is refused with the names there are, exit 2.
#[test]
fn an_unknown_machine_is_refused() {
    symshard()
        .args(["machines", "h900"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("h900").and(predicate::str::contains("h100-sxm")));
}
