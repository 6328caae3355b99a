//! A validation row whose unstated setting is a band: predicted at its own settings and at each
//! plausible alternative, judged on the interval.

mod common;

use common::{refused_in, symshard, temp_dir};

/// A file of one row (gpt3-125m on a100-80gb, dp 8), published value `published`, with `band`.
fn file(name: &str, published: f64, band: &str) -> std::path::PathBuf {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("v.yaml"),
        format!(
            "source: test\nmachine: a100-80gb\nsettings: none\nbound: 0.5\nruns:\n  - name: s\n    \
             model: gpt3-125m\n    strategy: {{dp: 8, microbatches: 1}}\n    published: {published}\n    band: {band}\n"
        ),
    )
    .unwrap();
    dir
}

fn row(dir: &std::path::Path) -> serde_json::Value {
    let out = symshard()
        .current_dir(dir)
        .args(["validate", "v.yaml", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["rows"][0].clone()
}

#[test]
fn a_band_is_the_interval_of_its_predictions() {
    // The row at one micro-batch, and at 8 (the band's other value): 8 micro-batches of 1/8 of
    // the batch run the same FLOPs in smaller kernels, so the two predictions differ.
    let band = "[{strategy: {microbatches: 8}}]";
    let dir = file("band-inside", 1.0, band);
    let r = row(&dir);
    let (lo, hi) = (
        r["band"][0].as_f64().unwrap(),
        r["band"][1].as_f64().unwrap(),
    );
    assert!(lo < hi, "{r}");
    let own = r["predicted"].as_f64().unwrap();
    assert!(own == lo || own == hi, "{r}");
    // Published inside the interval: no error.
    let mid = (lo + hi) / 2.0;
    let r = row(&file("band-mid", mid, band));
    assert_eq!(r["error"].as_f64().unwrap(), 0.0, "{r}");
    // Below it: the error at the nearer end, the lower one.
    let below = lo * 0.9;
    let r = row(&file("band-below", below, band));
    let e = r["error"].as_f64().unwrap();
    assert!((e - (lo / below - 1.0)).abs() < 1e-12, "{r}");
    // Above it: at the upper end.
    let above = hi * 1.2;
    let r = row(&file("band-above", above, band));
    let e = r["error"].as_f64().unwrap();
    assert!((e - (hi / above - 1.0)).abs() < 1e-12, "{r}");
}

#[test]
fn a_bad_band_item_names_the_row() {
    let dir = file("band-bad", 1.0, "[{strategy: {dp: 8, widgets: 3}}]");
    let err = refused_in(&dir, &["validate", "v.yaml"]);
    assert!(err.contains("v.yaml:"), "{err}");
    assert!(err.contains("band") && err.contains("item 1"), "{err}");
    assert!(err.contains("widgets"), "{err}");
}

/// A run that trained fit its GPUs: every shipped row that times whole training steps fits the
/// device memory at its own settings or at one of its band's. (Rows that time one layer's pass,
/// Korthikanti et al. 2022 Table 4, time a layer of a model that was not trained that way.)
#[test]
fn every_shipped_training_run_fits_at_one_of_its_settings() {
    let v = common::json(&["validate", "--format", "json"]);
    let mut checked = 0;
    for f in v.as_array().unwrap() {
        for r in f["rows"].as_array().unwrap() {
            if r["measure"] != "iteration-seconds" {
                continue;
            }
            checked += 1;
            let somewhere = r["band_fits"][0].as_u64().is_some_and(|n| n > 0);
            assert!(
                r["fits"] == true || somewhere,
                "{} / {}: fits at none of its settings ({r})",
                f["name"],
                r["name"]
            );
        }
    }
    assert!(checked > 100, "only {checked} rows checked");
}

#[test]
fn a_band_counts_the_settings_that_fit() {
    // gpt3-125m on 8 A100s: one micro-batch of 256 sequences of 2048 does not fit 80 GB, 32
    // micro-batches of 8 do.
    let dir = temp_dir("band-fits");
    std::fs::write(
        dir.join("v.yaml"),
        "source: test\nmachine: a100-80gb\nsettings: none\nbound: 0.9\nruns:\n  - name: s\n    \
         model: gpt3-125m\n    set: {B: 256, S: 2048}\n    strategy: {dp: 8, microbatches: 1}\n    \
         published: 1\n    band: [{strategy: {microbatches: 32}}]\n",
    )
    .unwrap();
    let r = row(&dir);
    assert_eq!(r["fits"], false, "{r}");
    assert_eq!(r["band_fits"], serde_json::json!([1, 2]), "{r}");
    let table = common::run_on_file(&dir, "v.yaml", &["validate"]);
    assert!(table.contains("fits at 1 of 2 band settings"), "{table}");
}
