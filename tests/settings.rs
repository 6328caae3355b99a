//! The settings that change how a model's operators run (attention, the loss's kernels, training
//! metrics, dropout) are stated under each header and in JSON, so a reader of any output knows
//! what was timed.

mod common;

use symshard::model::{AttentionMode, LossMode, ModelLoader};

fn settings(loader: ModelLoader, model: &str) -> Vec<(&'static str, String)> {
    loader.resolve(model).unwrap().settings()
}

fn pairs(p: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    p.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

#[test]
fn a_model_states_its_attention_loss_metrics_and_dropout() {
    let plain = ModelLoader::embedded().unwrap();
    assert_eq!(
        settings(plain, "gpt3-125m"),
        pairs(&[("attention", "eager"), ("loss", "fp32"), ("dropout", "on")])
    );
    let asked = ModelLoader::embedded()
        .unwrap()
        .with_attention(Some(AttentionMode::FlashCausal))
        .with_loss(LossMode::Fused)
        .with_train_metrics(2)
        .with_dropout(Some(false));
    assert_eq!(
        settings(asked, "gpt3-125m"),
        pairs(&[
            ("attention", "flash-causal"),
            ("loss", "fused"),
            ("train-metrics", "2"),
            ("dropout", "off"),
        ])
    );
    // Llama's graph has no dropout operator: nothing to say about dropout, even when asked.
    let off = ModelLoader::embedded().unwrap().with_dropout(Some(false));
    assert_eq!(
        settings(off, "llama3-8b"),
        pairs(&[("attention", "flash"), ("loss", "fp32")])
    );
}

const FLAGS: [&str; 8] = [
    "--attention",
    "flash-causal",
    "--loss",
    "fused",
    "--train-metrics",
    "2",
    "--dropout",
    "off",
];

fn with_flags(args: &[&str]) -> Vec<String> {
    args.iter()
        .chain(FLAGS.iter())
        .map(|s| s.to_string())
        .collect()
}

fn stdout(args: &[String]) -> String {
    let out = common::symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const LINE: &str = "settings: attention flash-causal, dropout off, loss fused, train-metrics 2";

#[test]
fn timeline_rank_compare_and_cost_print_the_settings_under_their_header() {
    let timeline = stdout(&with_flags(&["timeline", "gpt3-125m", "--dp", "8"]));
    assert_eq!(timeline.lines().nth(1), Some(LINE), "{timeline}");
    let rank = stdout(&with_flags(&["rank", "gpt3-125m", "--devices", "8"]));
    assert_eq!(rank.lines().nth(1), Some(LINE), "{rank}");
    let compare = stdout(&with_flags(&["compare", "gpt3-125m", "dp=8", "dp=4,tp=2"]));
    assert_eq!(compare.lines().nth(1), Some(LINE), "{compare}");
    let cost = stdout(&with_flags(&["cost", "gpt3-125m"]));
    assert_eq!(cost.lines().nth(1), Some(LINE), "{cost}");
    // The defaults are stated too.
    let plain = stdout(&[
        "timeline".into(),
        "gpt3-125m".into(),
        "--dp".into(),
        "8".into(),
    ]);
    assert_eq!(
        plain.lines().nth(1),
        Some("settings: attention eager, dropout on, loss fp32"),
        "{plain}"
    );
}

#[test]
fn json_carries_the_settings_and_a_saved_analysis_keeps_them_for_timeline_and_port() {
    let expected = serde_json::json!({
        "attention": "flash-causal",
        "dropout": "off",
        "loss": "fused",
        "train-metrics": "2",
    });
    let args = with_flags(&["timeline", "gpt3-125m", "--dp", "8", "--format", "json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(common::json(&args)["settings"], expected);
    let args = with_flags(&["rank", "gpt3-125m", "--devices", "8", "--format", "json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(common::json(&args)["settings"], expected);

    let dir = common::temp_dir("settings-saved");
    let saved = dir.join("a.json");
    let mut analyze = with_flags(&["analyze", "gpt3-125m", "--dp", "8"]);
    analyze.extend(["-o".into(), saved.to_string_lossy().into_owned()]);
    stdout(&analyze);
    let table = stdout(&["timeline".into(), saved.to_string_lossy().into_owned()]);
    assert_eq!(table.lines().nth(1), Some(LINE), "{table}");
    let port = stdout(&[
        "port".into(),
        saved.to_string_lossy().into_owned(),
        "--calib".into(),
        "a100-80gb".into(),
        "--calib".into(),
        "h100-sxm".into(),
    ]);
    assert_eq!(port.lines().nth(1), Some(LINE), "{port}");
}
