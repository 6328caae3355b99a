//! Interleaved pipelines that count the embedding and the loss as layers of the split
//! (Megatron-Core's `--account-for-embedding-in-pipeline-split` and
//! `--account-for-loss-in-pipeline-split`), as Llama 3 405B trained: 126 layers on 16 stages
//! of 8 chunks, the first and last stages one layer short (Grattafiori et al. 2024, "The Llama 3
//! Herd of Models", arXiv:2407.21783, §3.3.2).

mod common;

use common::{json, refused, stdout};

const LAYOUT: &[&str] = &[
    "llama3-405b",
    "--tp",
    "8",
    "--pp",
    "16",
    "--dp",
    "8",
    "--schedule",
    "interleaved-1f1b",
    "--chunks",
    "8",
    "--micro-batch-size",
    "1",
    "--sequence-parallel",
    "--recompute",
    "full",
];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    let mut a = vec!["cost"];
    a.extend_from_slice(LAYOUT);
    a.extend_from_slice(extra);
    a.extend(["--format", "json"]);
    a
}

/// Stage 0's and stage 15's blocks, as `cost` lists them.
fn ends(v: &serde_json::Value) -> (String, String) {
    let stages = v["per_device"]["stages"].as_array().unwrap();
    let items = |s: &serde_json::Value| {
        s["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| format!("{}×{}", i[0].as_str().unwrap(), i[1]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    (items(&stages[0]), items(&stages[stages.len() - 1]))
}

#[test]
fn the_layout_llama3_405b_trained_with_is_priced() {
    // Without the accounting, 126 layers do not divide over 16 × 8 chunks: refused, saying
    // which flags state the real layout.
    let err = refused(&with(&[])[..]);
    assert!(
        err.contains("126 layers divisible by pp × chunks = 128"),
        "{err}"
    );
    assert!(
        err.contains("--account-for-embedding-in-pipeline-split"),
        "{err}"
    );
    let v = json(&with(&[
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ]));
    // Device 0 holds the embedding and 7 layers (its first chunk holds only the embedding),
    // device 15 holds 7 layers and the head.
    let (first, last) = ends(&v);
    assert_eq!(first, "embed×1 layer×7");
    assert_eq!(last, "layer×7 head×1");
    assert!(v["per_device"]["strategy"]
        .as_str()
        .unwrap()
        .contains("account=embedding+loss"));
}

#[test]
fn the_file_the_knob_string_and_the_flags_agree() {
    let flags = json(&with(&[
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ]));
    let dir = std::env::temp_dir().join(format!("symshard-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "tp: 8\npp: 16\ndp: 8\nschedule: interleaved-1f1b\nchunks: 8\nmicro_batch_size: 1\nsequence_parallel: true\nrecompute: full\npipeline_split: {embedding: true, loss: true}\n",
    )
    .unwrap();
    let from_file = json(&[
        "cost",
        "llama3-405b",
        "--strategy",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(from_file["per_device"], flags["per_device"]);
    // The knob string `rank` prints round-trips.
    let knobs = flags["per_device"]["strategy"]
        .as_str()
        .unwrap()
        .to_string();
    let from_knobs = json(&[
        "cost",
        "llama3-405b",
        "--strategy",
        &knobs,
        "--format",
        "json",
    ]);
    assert_eq!(from_knobs["per_device"], flags["per_device"]);
    // An unknown part is refused with what is accepted.
    let err = refused(&[
        "cost",
        "llama3-405b",
        "--strategy",
        "tp=8,pp=16,account=head",
    ]);
    assert!(
        err.contains("embedding, loss, embedding+loss or none"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rank_searches_it_and_emits_megatron_flags_that_state_it() {
    let text = stdout(&[
        "rank",
        "llama3-405b",
        "--devices",
        "8192",
        "--fix",
        "tp=8,pp=16,schedule=interleaved-1f1b,chunks=8,sp=on,account=embedding+loss",
        "--emit",
        "megatron",
    ]);
    assert!(
        text.contains("--account-for-embedding-in-pipeline-split"),
        "{text}"
    );
    assert!(
        text.contains("--account-for-loss-in-pipeline-split"),
        "{text}"
    );
    // (126 + 2) layers over 16 stages of 8 virtual stages: one layer per virtual stage
    // (megatron/training/arguments.py at the pinned commit adds one layer for each).
    assert!(
        text.contains("--num-layers-per-virtual-pipeline-stage 1 "),
        "{text}"
    );
    assert!(!text.contains("warning"), "{text}");
}

#[test]
fn the_timeline_runs_the_same_placement() {
    let mut a = vec!["timeline"];
    a.extend_from_slice(LAYOUT);
    a.extend([
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--calib",
        "h100-sxm",
        "--format",
        "json",
    ]);
    let v = json(&a);
    assert!(v["iteration_seconds"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["strategy"]
        .as_str()
        .unwrap()
        .contains("account=embedding+loss"));
}
