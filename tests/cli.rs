//! Command-line contract: help, JSON that parses, exit code 2 with file and line for bad input.

use predicates::prelude::*;

mod common;
use common::{json, symshard};

#[test]
fn every_subcommand_has_help() {
    for sub in [
        "explain",
        "cost",
        "rank",
        "models",
        "audit",
        "timeline",
        "analyze",
        "port",
        "calibrate",
        "import",
        "optimize",
        "layout",
        "machines",
    ] {
        symshard()
            .args([sub, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage"));
    }
    symshard().arg("--help").assert().success();
}

#[test]
fn explain_json_parses() {
    let v = json(&["explain", "linear", "--format", "json"]);
    assert_eq!(v["rule"]["name"], "linear");
    assert!(v["split_table"]["entries"].as_array().unwrap().len() >= 6);
    let v = json(&["explain", "--list", "--format", "json"]);
    assert!(v.as_array().unwrap().len() >= 25);
    json(&["explain", "--laws", "--format", "json"]);
}

#[test]
fn cost_json_fields() {
    let v = json(&["cost", "gpt2-124m", "--format", "json"]);
    // 124,439,808: Hugging Face GPT2Model.num_parameters().
    assert_eq!(v["params"], "124439808");
    for path in [
        ["flops", "forward", "matmul"],
        ["flops", "forward", "other"],
        ["flops", "backward", "matmul"],
        ["flops", "backward", "other"],
    ] {
        let s = v[path[0]][path[1]][path[2]].as_str().unwrap();
        assert!(s.parse::<u128>().is_ok(), "{s}");
    }
    assert!(v["memory"]["activations"]
        .as_str()
        .unwrap()
        .parse::<u128>()
        .is_ok());
    let v = json(&[
        "cost",
        "gpt2-124m",
        "--tp",
        "2",
        "--dp",
        "4",
        "--format",
        "json",
    ]);
    let pd = &v["per_device"];
    assert!(pd["comm"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["collective"].is_string()
            && c["bytes"].is_string()
            && c["count"].is_u64()
            && c["tier"].is_string()
            && c["axis"].is_string()));
    for k in ["params", "grads", "optimizer", "activations", "total"] {
        assert!(pd["memory"][k].is_string());
    }
    let v = json(&["cost", "llama2-7b", "--symbolic", "--format", "json"]);
    assert!(v["params"].as_str().unwrap().contains('H'));
}

#[test]
fn rank_json_fields() {
    let v = json(&[
        "rank",
        "gpt2-124m",
        "--devices",
        "16",
        "--top",
        "5",
        "--format",
        "json",
    ]);
    let rows = v["strategies"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        for k in [
            "rank",
            "dp",
            "tp",
            "pp",
            "microbatches",
            "schedule",
            "sequence_parallel",
            "recompute",
            "zero",
            "relative_cost",
            "memory_per_device",
            "feasible",
        ] {
            assert!(!r[k].is_null(), "{k}");
        }
        let devices =
            r["dp"].as_u64().unwrap() * r["tp"].as_u64().unwrap() * r["pp"].as_u64().unwrap();
        assert_eq!(devices, 16);
    }
    assert!(v["search_seconds"].is_f64());
    symshard()
        .args(["rank", "gpt2-124m", "--devices", "16", "--emit", "megatron"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--tensor-model-parallel-size"));
}

#[test]
fn bad_rule_file_is_exit_2_with_location() {
    let dir = std::env::temp_dir().join(format!("symshard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("myop.yaml");
    std::fs::write(&path, "name: myop\ndoc: d\nindices:\n  b: map\n  k: reduce-product\ninputs:\n  x: [b, k]\noutput: [b]\n").unwrap();
    symshard()
        .args(["explain", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("myop.yaml:5:6")
                .and(predicate::str::contains("reduce-product")),
        );
}

#[test]
fn bad_model_file_is_exit_2_with_location() {
    symshard()
        .args(["cost", "tests/fixtures/models/fail-shape-mismatch.yaml"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("fail-shape-mismatch.yaml:")
                .and(predicate::str::contains("shape mismatch")),
        );
}

#[test]
fn bad_values_are_exit_2() {
    for args in [
        vec!["cost", "gpt2-124m", "--set", "Q=3"],
        vec!["cost", "gpt2-124m", "--set", "B=-3"],
        vec!["cost", "gpt2-124m", "--set", "B"],
        vec!["cost", "gpt2-124m", "--tp", "5"],
        vec!["cost", "gpt2-124m", "--dp", "0"],
        vec!["cost", "nonexistent-model"],
        vec!["rank", "gpt2-124m", "--devices", "0"],
        vec!["rank", "gpt2-124m", "--devices", "99999999999"],
        vec!["explain", "no_such_rule"],
        vec!["cost", "gpt2-124m", "--schedule", "zigzag", "--pp", "2"],
    ] {
        symshard()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("error"));
    }
}

/// `--set` takes a comma-separated list, as `--fix`, `--max` and `--with` do: one flag binds
/// what two do, and a bad entry of the list is refused as a lone one is.
#[test]
fn set_takes_a_comma_separated_list() {
    let one = json(&[
        "cost",
        "gpt2-124m",
        "--set",
        "B=8,S=512",
        "--format",
        "json",
    ]);
    let two = json(&[
        "cost",
        "gpt2-124m",
        "--set",
        "B=8",
        "--set",
        "S=512",
        "--format",
        "json",
    ]);
    assert_eq!(one, two);
    let default = json(&["cost", "gpt2-124m", "--format", "json"]);
    assert_ne!(one, default);
    symshard()
        .args(["cost", "gpt2-124m", "--set", "B=8,Q=3"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("Q"));
}

#[test]
fn strategy_files() {
    let v = json(&[
        "cost",
        "gpt3-175b",
        "--strategy",
        "tests/fixtures/strategies/megatron-175b.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(
        v["per_device"]["strategy"],
        // B = 1536 (gpt3-175b) over dp = 8 and 192 micro-batches: micro-batch size 1.
        "dp=8 tp=8 pp=16 mbs=1 interleaved-1f1b(v=2) sp=on recompute=selective zero=1"
    );
    for (file, line, what) in [
        (
            "fail-unknown-field.yaml",
            ":3:1:",
            "unknown field `pipeline`",
        ),
        ("fail-zero-tp.yaml", ":2:1:", "at least 1"),
        ("fail-schedule.yaml", ":3:1:", "zigzag"),
        ("fail-chunks.yaml", ":4:1:", "interleaved"),
    ] {
        symshard()
            .args([
                "cost",
                "gpt2-124m",
                "--strategy",
                &format!("tests/fixtures/strategies/{file}"),
            ])
            .assert()
            .code(2)
            .stderr(
                predicate::str::contains(format!("{file}{line}"))
                    .and(predicate::str::contains(what)),
            );
    }
}

#[test]
fn layout_compares_annotated_exact_and_drec() {
    let v = json(&["layout", "gpt3-125m", "--tp", "4", "--format", "json"]);
    let rows = v["rows"].as_array().unwrap();
    let method = |m: &str| {
        rows.iter()
            .find(|r| r["method"].as_str().unwrap().starts_with(m))
            .unwrap()
    };
    let cost = |r: &serde_json::Value| {
        r["cost"]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap_or_else(|_| {
                let (a, b) = r["cost"].as_str().unwrap().split_once('/').unwrap();
                a.parse::<f64>().unwrap() / b.parse::<f64>().unwrap()
            })
    };
    let exact = cost(method("exact, one axis"));
    let annotated = cost(method("annotated"));
    assert!(exact <= annotated);
    assert!(method("D-Rec").is_object());
    symshard()
        .args(["layout", "gpt3-125m", "--tp", "1"])
        .assert()
        .code(2);
}

/// A 1×1 convolution of stride 2 split along its output rows needs no halo (its kernel − stride
/// formula is negative): no collective is ever priced below zero bytes.
#[test]
fn no_negative_halo() {
    let v = json(&[
        "cost",
        "resnet50",
        "--strategy",
        "tests/fixtures/strategies/resnet-split-rows.yaml",
        "--format",
        "json",
    ]);
    let comm = v["per_device"]["comm"].as_array().unwrap();
    assert!(comm
        .iter()
        .any(|c| c["op"] == "s2b1_down" && c["collective"] == "halo-exchange"));
    assert!(comm
        .iter()
        .all(|c| !c["bytes"].as_str().unwrap().starts_with('-')));
}

#[test]
fn bad_split_override_points_into_the_strategy_file() {
    let dir = std::env::temp_dir().join(format!("symshard-override-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.yaml");
    std::fs::write(&path, "tp: 2\nsplits:\n  fc_in: zz\n").unwrap();
    symshard()
        .args(["cost", "gpt2-124m", "--strategy", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("s.yaml:3:3").and(predicate::str::contains("no index `zz`")),
        );
}

fn table(args: &[&str]) -> String {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The value printed after `label` on the line that starts with it.
fn after<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` in:\n{text}"))
        .trim()
}

#[test]
fn cost_tables_round_with_units_and_exact_prints_the_json_numbers() {
    let v = json(&["cost", "gpt3-175b", "--format", "json"]);
    // 174,604,259,328 parameters; 1,128,659,346,020,892,672 forward matmul FLOPs (exact, as JSON
    // keeps them).
    assert_eq!(v["params"], "174604259328");
    let fwd: u128 = v["flops"]["forward"]["matmul"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let text = table(&["cost", "gpt3-175b"]);
    assert!(
        text.starts_with("model gpt3-175b (B = 1536, S = 2048)"),
        "{text}"
    );
    assert_eq!(after(&text, "parameters"), "174,604,259,328");
    let shown = after(&text, "forward FLOPs   matmul-like");
    assert_eq!(shown, format!("{:.3} EFLOP", fwd as f64 / 1e18));
    assert!(
        after(&text, "activations saved (bytes)").ends_with(" TB"),
        "{text}"
    );
    assert!(text.contains("1 GB = 10⁹ bytes"), "{text}");
    let exact = table(&["cost", "gpt3-175b", "--exact"]);
    assert_eq!(after(&exact, "parameters"), "174604259328");
    assert_eq!(
        after(&exact, "forward FLOPs   matmul-like"),
        v["flops"]["forward"]["matmul"].as_str().unwrap()
    );
    assert_eq!(
        after(&exact, "activations saved (bytes)"),
        v["memory"]["activations"].as_str().unwrap()
    );
    assert!(!exact.contains("1 GB = 10⁹ bytes"), "{exact}");
}

#[test]
fn per_operator_splits_have_a_legend_of_their_index_letters() {
    let text = table(&["cost", "gpt3-1.3b", "--dp", "2", "--tp", "2", "--per-op"]);
    assert!(
        text.contains("per device, dp=2 tp=2") && text.contains("devices (8 per node) of dgx-h100"),
        "{text}"
    );
    let letters = after(&text, "  index letters:");
    // The embedding splits its vocabulary `v` under tensor parallelism, linears their rows `b`
    // under data parallelism (operator_rules/embedding.yaml, linear.yaml).
    assert!(letters.contains("v = vocabulary"), "{letters}");
    assert!(letters.contains("b = rows"), "{letters}");
    assert!(text.contains("v (Feature)"), "{text}");
}

#[test]
fn headers_state_b_s_and_the_machine_and_rank_explains_its_columns() {
    let text = table(&["rank", "gpt3-125m", "--devices", "8", "--top", "2"]);
    assert!(
        text.contains("mbs: micro-batch size") && text.contains("zero: ZeRO stage"),
        "{text}"
    );
    assert!(
        text.contains(" PFLOP ") || text.contains(" TFLOP "),
        "{text}"
    );
    let text = table(&["timeline", "gpt3-125m", "--dp", "8", "--calib", "a100-80gb"]);
    let header = text.lines().next().unwrap();
    for want in ["B = ", "S = 2048", "a100-80gb", "8 devices, 8 per node"] {
        assert!(header.contains(want), "{want}: {header}");
    }
    let text = table(&["layout", "gpt3-125m", "--tp", "2"]);
    let header = text.lines().next().unwrap();
    for want in ["B = ", "S = 2048", "dgx-h100", "8 devices per node"] {
        assert!(header.contains(want), "{want}: {header}");
    }
}

/// A strategy file may give the micro-batch size as users and Megatron-LM say it; it means the
/// same as `--micro-batch-size`, and a file giving both size and count is refused at its line.
#[test]
fn strategy_files_take_a_micro_batch_size() {
    let dir = std::env::temp_dir().join(format!("symshard-mbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mbs.yaml");
    std::fs::write(
        &file,
        "dp: 8\npp: 2\nmicro_batch_size: 2\nschedule: interleaved-1f1b\nchunks: 2\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let from_file = json(&["cost", "gpt3-1.3b", "--strategy", f, "--format", "json"]);
    let from_flags = json(&[
        "cost",
        "gpt3-1.3b",
        "--dp",
        "8",
        "--pp",
        "2",
        "--micro-batch-size",
        "2",
        "--schedule",
        "interleaved-1f1b",
        "--chunks",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(from_file["per_device"], from_flags["per_device"]);
    // The flags still win over the file.
    let flagged = json(&[
        "cost",
        "gpt3-1.3b",
        "--strategy",
        f,
        "--micro-batch-size",
        "4",
        "--format",
        "json",
    ]);
    assert_ne!(flagged["per_device"], from_file["per_device"]);
    std::fs::write(&file, "dp: 8\nmicrobatches: 4\nmicro_batch_size: 2\n").unwrap();
    symshard()
        .args(["cost", "gpt3-1.3b", "--strategy", f])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("mbs.yaml:3:").and(predicate::str::contains("not both")));
    // A size the batch does not divide into is refused, naming the file.
    std::fs::write(&file, "dp: 8\nmicro_batch_size: 5\n").unwrap();
    symshard()
        .args(["cost", "gpt3-1.3b", "--strategy", f])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("mbs.yaml").and(predicate::str::contains("micro_batch_size")),
        );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stability sentence of `rank`: by relative cost it says where the top row stays first;
/// ranked by simulated seconds it is about the printed #1's relative cost, and says so, and says
/// when that range leaves out the table's own balance (×1), where the row leads by seconds
/// only. The sentence and the JSON's range agree on which case holds.
#[test]
fn the_stability_sentence_says_what_it_measures() {
    let ratio = |s: &str| -> f64 {
        let (n, d) = s.split_once('/').unwrap_or((s, "1"));
        n.parse::<f64>().unwrap() / d.parse::<f64>().unwrap()
    };
    for (model, devices, calib) in [
        ("llama3-8b", "64", Some("h100-sxm")),
        ("gpt3-175b", "1024", Some("a100-80gb")),
        ("gpt3-175b", "1024", None),
    ] {
        let mut args = vec!["rank", model, "--devices", devices, "--top", "3"];
        if let Some(c) = calib {
            args.extend(["--calib", c]);
        }
        let v = json(&[args.as_slice(), &["--format", "json"]].concat());
        let range = &v["balance_range"];
        let lo = ratio(range[0].as_str().unwrap());
        let hi = range[1].as_str().map(ratio).unwrap_or(f64::INFINITY);
        let out = symshard().args(&args).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text
            .lines()
            .find(|l| l.contains("while every κ is scaled") || l.contains("for every κ scaled"))
            .unwrap_or_else(|| panic!("{args:?}: no stability sentence\n{text}"));
        let note = "not at the table's own κ (×1)";
        match calib {
            None => {
                assert!(line.starts_with("the top strategy stays first"), "{line}");
                assert!(!line.contains(note), "{line}");
            }
            Some(_) => {
                assert!(
                    line.starts_with("by relative cost the top row is first"),
                    "{line}"
                );
                assert_eq!(
                    line.contains(note),
                    !(lo <= 1.0 && 1.0 <= hi),
                    "{args:?}: range {lo}…{hi}: {line}"
                );
            }
        }
    }
}

/// A strategy that does not fit says so as data in JSON (what its fullest device needs and what
/// a device has, exact bytes) and in words, with units, in the table.
#[test]
fn infeasibility_is_need_and_have() {
    // GPT-3 175B unsplit over 8 A100s: every device holds every weight.
    let args = [
        "cost",
        "gpt3-175b",
        "--strategy",
        "dp=8,microbatches=1",
        "--calib",
        "a100-80gb",
    ];
    let v = json(&[&args[..], &["--format", "json"]].concat());
    let reason = &v["per_device"]["reason"];
    let need: u128 = reason["need"].as_str().unwrap().parse().unwrap();
    let have: u128 = reason["have"].as_str().unwrap().parse().unwrap();
    // 80 GB less the default 10 % headroom.
    assert_eq!(have, 72_000_000_000);
    assert!(need > have, "{reason}");
    assert_eq!(v["per_device"]["feasible"], false);
    let table = common::stdout(&args);
    assert!(table.contains("more than the 72.0 GB usable"), "{table}");
}

/// Under full recomputation the collectives table counts each layer's forward collectives
/// twice (the forward runs again before the backward) and says so; without it, once.
#[test]
fn the_collectives_table_counts_the_forward_again_under_full_recomputation() {
    let calls = |recompute: &str| -> (String, u64) {
        let text = common::stdout(&[
            "cost",
            "gpt3-175b",
            "--tp",
            "8",
            "--pp",
            "8",
            "--dp",
            "16",
            "--recompute",
            recompute,
        ]);
        let row = text
            .lines()
            .find(|l| l.trim_end().ends_with("fc_out→resid_dropout2"))
            .unwrap_or_else(|| panic!("{text}"));
        // The calls column stands before the last (where).
        let calls = row
            .split_whitespace()
            .rev()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        (text, calls)
    };
    let (plain, once) = calls("none");
    let (full, twice) = calls("full");
    // gpt3-175b's 96 layers over pp = 8: 12 layers on the busiest stage, and one micro-batch
    // (the model file's global batch of 1,536, from Narayanan et al. SC'21 Table 1, over
    // dp = 16, and no micro-batch size given).
    assert_eq!((once, twice), (12, 24));
    let note = "full recomputation runs each layer's forward collectives again";
    assert!(full.contains(note) && !plain.contains(note), "{full}");
}
