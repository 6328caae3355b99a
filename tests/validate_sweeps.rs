//! Rows of one model, sequence and device count are a sweep: `validate` judges the order of
//! their predictions against the measured order (Kendall's τ-b and the measured fastest's place).

mod common;

use common::{run_on_file, stdout, temp_dir};
use symshard::validate::kendall_tau_b;

#[test]
fn kendall_tau_b_counts_concordant_discordant_and_tied_pairs() {
    assert_eq!(kendall_tau_b(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
    assert_eq!(kendall_tau_b(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
    // One swapped pair of six: (5 − 1) / 6.
    let t = kendall_tau_b(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]);
    assert!((t - 4.0 / 6.0).abs() < 1e-12, "{t}");
    // A tie in y: 2 concordant, 0 discordant, 1 tied in y; τ-b = 2 / √(3 · 2).
    let t = kendall_tau_b(&[1.0, 2.0, 3.0], &[1.0, 2.0, 2.0]);
    assert!((t - 2.0 / 6f64.sqrt()).abs() < 1e-12, "{t}");
    // All ties: no order to compare.
    assert_eq!(kendall_tau_b(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), 0.0);
}

/// Three layouts of gpt3-125m on 8 GPUs (dp 8, tp 2 × dp 4, tp 4 × dp 2) and a fourth row on 16 GPUs,
/// with `published` step times for the first three.
fn sweep_file(name: &str, published: [f64; 3]) -> std::path::PathBuf {
    let dir = temp_dir(name);
    let [a, b, c] = published;
    std::fs::write(
        dir.join("v.yaml"),
        format!(
            "source: test\nmachine: a100-80gb\nsettings: none\nbound: 10\nruns:\n\
             - {{name: dp8, model: gpt3-125m, strategy: {{dp: 8, microbatches: 1}}, published: {a}}}\n\
             - {{name: tp2, model: gpt3-125m, strategy: {{dp: 4, tp: 2, microbatches: 1}}, published: {b}}}\n\
             - {{name: tp4, model: gpt3-125m, strategy: {{dp: 2, tp: 4, microbatches: 1}}, published: {c}}}\n\
             - {{name: dp16, model: gpt3-125m, strategy: {{dp: 16, microbatches: 1}}, published: 1}}\n"
        ),
    )
    .unwrap();
    dir
}

fn validate_json(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&run_on_file(
        dir,
        "v.yaml",
        &["validate", "--format", "json"],
    ))
    .unwrap()
}

#[test]
fn rows_of_one_model_and_device_count_are_judged_on_their_order() {
    // First the predicted order, read from a run whose published values are all equal.
    let v = validate_json(&sweep_file("sweep-order", [1.0, 1.0, 1.0]));
    let predicted: Vec<f64> = (0..3)
        .map(|i| v[0]["rows"][i]["predicted"].as_f64().unwrap())
        .collect();
    let sweeps = v[0]["sweeps"].as_array().unwrap();
    // The 16-GPU row is not part of the 8-GPU sweep, and a sweep needs three rows.
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    assert_eq!(sweeps[0]["rows"], 3);
    // Published values in the predicted order: τ = 1 and the fastest is predicted first.
    let v = validate_json(&sweep_file(
        "sweep-same",
        predicted.clone().try_into().unwrap(),
    ));
    let s = &v[0]["sweeps"][0];
    assert_eq!(s["tau"], 1.0);
    assert_eq!(s["predicted_place"], 1);
    // Published values in the reverse order: τ = −1, and the measured fastest is the one
    // predicted slowest, third of three.
    let reversed: Vec<f64> = predicted.iter().map(|p| 1.0 / p).collect();
    let v = validate_json(&sweep_file("sweep-reversed", reversed.try_into().unwrap()));
    let s = &v[0]["sweeps"][0];
    assert_eq!(s["tau"], -1.0);
    assert_eq!(s["predicted_place"], 3);
}

#[test]
fn validate_prints_the_sweeps_of_the_shipped_files() {
    let text = stdout(&["validate"]);
    assert!(text.contains("layout order within sweeps"), "{text}");
    assert!(text.contains("korthikanti2022-table4"), "{text}");
}
