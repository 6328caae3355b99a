//! Precision pairs in `validate`: one run measured in bf16 and in an FP8 recipe, the ratio of
//! their step times measured and predicted (what the precision model alone is judged on).

mod common;

use common::{symshard, temp_dir};
use serde_json::Value;

/// `validate FILES…` as text, and each row's predicted value by `FILE / ROW` from its JSON.
fn validate(dir: &std::path::Path, files: &[&str]) -> (String, Vec<(String, f64)>) {
    let run = |json: bool| {
        let mut c = symshard();
        c.current_dir(dir).arg("validate").args(files);
        if json {
            c.args(["--format", "json"]);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let doc: Value = serde_json::from_str(&run(true)).unwrap();
    let mut predicted = Vec::new();
    for f in doc.as_array().unwrap() {
        for r in f["rows"].as_array().unwrap() {
            predicted.push((
                format!(
                    "{} / {}",
                    f["name"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                ),
                r["predicted"].as_f64().unwrap(),
            ));
        }
    }
    (run(false), predicted)
}

/// The pair lines under the table: (run, precision, measured, predicted, difference).
fn pairs(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with("precision pairs"))
        .skip(2)
        .take_while(|l| !l.trim_start().starts_with("mean |difference|"))
        .map(|l| {
            let (run, rest) = l.trim().split_once("  ").unwrap();
            let mut cells = vec![run.to_string()];
            cells.extend(rest.split_whitespace().map(str::to_string));
            cells
        })
        .collect()
}

/// A bf16 file and an FP8 file of the same run (gpt3-125m on 8 H100s, dp 8), and an FP8 row of
/// another batch that has no bf16 partner: one pair, its measured ratio the published values'
/// and its predicted ratio the two predictions'.
#[test]
fn a_run_in_bf16_and_fp8_makes_a_pair() {
    let dir = temp_dir("validate-pairs");
    let file = |name: &str, rows: &str| {
        std::fs::write(
            dir.join(name),
            format!("source: test\nmachine: h100-sxm\nsettings: none\nbound: 0.9\nruns:\n{rows}"),
        )
        .unwrap();
    };
    file(
        "b.yaml",
        "  - {name: run, model: gpt3-125m, set: {B: 64}, strategy: {dp: 8, microbatches: 1}, published: 0.40}\n",
    );
    file(
        "f.yaml",
        "  - {name: run fp8, model: gpt3-125m, set: {B: 64}, strategy: {precision: fp8, dp: 8, microbatches: 1}, published: 0.30}\n  \
         - {name: other batch, model: gpt3-125m, set: {B: 128}, strategy: {precision: fp8, dp: 8, microbatches: 1}, published: 0.5}\n",
    );
    let (text, predicted) = validate(&dir, &["b.yaml", "f.yaml"]);
    let got = pairs(&text);
    assert_eq!(got.len(), 1, "{text}");
    let p = &got[0];
    assert_eq!(
        (p[0].as_str(), p[1].as_str()),
        ("f / run fp8", "fp8"),
        "{text}"
    );
    let of = |name: &str| predicted.iter().find(|(n, _)| n == name).unwrap().1;
    let want = of("f / run fp8") / of("b / run");
    assert_eq!(p[2], format!("{:.3}", 0.30 / 0.40), "{text}");
    assert_eq!(p[3], format!("{want:.3}"), "{text}");
    assert_eq!(p[4], format!("{:+.1}", 100.0 * (want - 0.75)), "{text}");
    assert!(text.contains("within 5 points in"), "{text}");
}

/// The shipped DGX Cloud tables (NVIDIA dgxc-benchmarking READMEs, the same runs in BF16 and
/// FP8: validation/nvidia-dgxc-h100.yaml and nvidia-dgxc-h100-fp8.yaml) pair row by row, and
/// each measured ratio is the two files' published step times'.
#[test]
fn the_shipped_bf16_and_fp8_tables_pair_row_by_row() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (bf16, fp8) = (
        "validation/nvidia-dgxc-h100.yaml",
        "validation/nvidia-dgxc-h100-fp8.yaml",
    );
    let (text, _) = validate(root, &[bf16, fp8]);
    let got = pairs(&text);
    let published = |path: &str| -> Vec<(String, f64)> {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(root.join(path)).unwrap()).unwrap();
        doc["runs"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    r["published"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let base = published(bf16);
    let low = published(fp8);
    assert_eq!(
        got.len(),
        low.len(),
        "every FP8 row has its bf16 row: {text}"
    );
    for (name, t) in &low {
        let b = base
            .iter()
            .find(|(n, _)| Some(n.as_str()) == name.strip_prefix("fp8 "))
            .unwrap()
            .1;
        let line = got
            .iter()
            .find(|p| p[0] == format!("nvidia-dgxc-h100-fp8 / {name}"))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        assert_eq!(line[2], format!("{:.3}", t / b), "{name}");
    }
}
