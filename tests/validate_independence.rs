//! Validation rows that share a publication with a number of their machine's calibration table
//! are not independent of it: they say so, and the headline figures leave them out.

mod common;

use common::{refused_in, symshard, temp_dir};

/// A file of one row (gpt3-125m on a100-80gb, dp 8) whose header lines are `head` (after
/// `source`, which is `source`).
fn file(name: &str, source: &str, head: &str) -> std::path::PathBuf {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("v.yaml"),
        format!(
            "source: \"{source}\"\nmachine: a100-80gb\nsettings: none\nbound: 0.9\n{head}runs:\n  - name: s\n    \
             model: gpt3-125m\n    strategy: {{dp: 8, microbatches: 1}}\n    published: 1\n"
        ),
    )
    .unwrap();
    dir
}

// a100-80gb's attention rates cite Dao 2023, FlashAttention-2 (arXiv:2307.08691).
const SHARED: &str = "Dao 2023, FlashAttention-2 (arXiv:2307.08691v2), Table 1";

#[test]
fn a_source_shared_with_the_table_must_be_declared() {
    let dir = file("indep-undeclared", SHARED, "");
    let err = refused_in(&dir, &["validate", "v.yaml"]);
    assert!(err.contains("v.yaml:1:"), "{err}");
    assert!(err.contains("arXiv:2307.08691"), "{err}");
    assert!(err.contains("device.efficiency.attention"), "{err}");
    assert!(err.contains("independent: false"), "{err}");
}

#[test]
fn not_independent_needs_what_is_shared() {
    let dir = file("indep-no-shares", SHARED, "independent: false\n");
    let err = refused_in(&dir, &["validate", "v.yaml"]);
    assert!(err.contains("v.yaml:5:"), "{err}");
    assert!(err.contains("needs `shares:`"), "{err}");
    // `shares:` on an independent file is refused too.
    let dir = file(
        "indep-stray-shares",
        "test",
        "shares: the attention curve\n",
    );
    let err = refused_in(&dir, &["validate", "v.yaml"]);
    assert!(err.contains("v.yaml:5:"), "{err}");
}

#[test]
fn rows_that_are_not_independent_leave_the_headline() {
    let shared = file(
        "indep-declared",
        SHARED,
        "independent: false\nshares: the attention curve\n",
    );
    let out = symshard()
        .current_dir(&shared)
        .args(["validate", "v.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "not independent of the table (left out of the headline figures): the attention curve"
        ),
        "{text}"
    );
    // Its only row is left out, so there is no headline and no group row.
    assert!(!text.contains("headline:"), "{text}");
    assert!(!text.contains("  A100 "), "{text}");
    // The same row from an independent source is the headline.
    let free = file("indep-free", "test", "");
    let out = symshard()
        .current_dir(&free)
        .args(["validate", "v.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("over 1 independent rows of 1 sources"),
        "{text}"
    );
    assert!(text.contains("  A100 "), "{text}");
}

#[test]
fn shipped_files_that_share_a_source_say_so() {
    // Both Dao 2023 Table 1 files measure the kernels whose rates a100-80gb takes from the
    // same paper.
    let out = symshard()
        .args(["validate", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dependent: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["independent"] == false)
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        dependent,
        [
            "dao2023-table1-flash-attention-2",
            "dao2023-table1-flash-attention"
        ]
    );
}
