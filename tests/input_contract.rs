//! What the command line refuses, warns about and reports, one test per contract: sizes that are
//! not positive integers, pathological YAML, nonsensical strategies, lookups and exit codes.

use assert_cmd::Command;
use predicates::prelude::*;
use std::time::{Duration, Instant};
use symshard::diag::Source;
use symshard::model::ModelLoader;
use symshard::rules::load_rule;
use symshard::strategy::parse_strategy;

fn symshard() -> Command {
    Command::cargo_bin("symshard").unwrap()
}

/// A 200 KB document of nested flow sequences under `key`.
fn nested(prefix: &str) -> String {
    format!("{prefix}{}{}\n", "[".repeat(100_000), "]".repeat(100_000))
}

#[test]
fn deeply_nested_yaml_is_refused_at_once_for_every_kind() {
    let loader = ModelLoader::embedded().unwrap();
    type Load<'a> = Box<dyn Fn(&Source) -> Result<(), symshard::Error> + 'a>;
    let kinds: [(&str, Load); 3] = [
        ("rule", Box::new(|s| load_rule(s, None).map(|_| ()))),
        ("model", Box::new(|s| loader.load(s).map(|_| ()))),
        ("strategy", Box::new(|s| parse_strategy(s).map(|_| ()))),
    ];
    for (kind, load) in kinds {
        let src = Source::new("deep.yaml", nested("name: x\ndoc: "));
        let start = Instant::now();
        let err = load(&src).unwrap_err().to_string();
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "{kind}: {:?}",
            start.elapsed()
        );
        assert!(
            err.starts_with("deep.yaml:2:70: nested deeper than the 64 levels"),
            "{kind}: {err}"
        );
    }
}

#[test]
fn deeply_nested_yaml_files_are_exit_2_with_location() {
    let dir = std::env::temp_dir().join(format!("symshard-deep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("deep.yaml");
    std::fs::write(&path, nested("name: x\ndoc: ")).unwrap();
    let p = path.to_str().unwrap();
    for args in [
        vec!["explain", p],
        vec!["audit", p],
        vec!["cost", p],
        vec!["cost", "gpt2-124m", "--strategy", p],
    ] {
        let start = Instant::now();
        symshard()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("{p}:2:70: nested deeper")));
        assert!(start.elapsed() < Duration::from_secs(5), "{args:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sizes_must_be_positive_integers_at_binding() {
    for (set, says) in [
        ("S=1.5", "`S` = 3/2 at S = 3/2: not an integer"),
        ("L=2.5", "block `layer` repeat = `L` = 5/2"),
        ("S=2^-3", "= 1/8 at S = 1/8: not an integer"),
        (
            "NH=7",
            "operator `scores` index `d` = `H/NH` = 12288/7 at H = 12288, NH = 7: not an integer",
        ),
    ] {
        for cmd in ["cost", "rank", "optimize"] {
            let mut args = vec![cmd, "gpt3-175b", "--set", set];
            if cmd == "rank" {
                args.extend(["--devices", "8"]);
            }
            symshard()
                .args(&args)
                .assert()
                .code(2)
                .stderr(predicate::str::contains(says))
                .stderr(predicate::str::contains("panicked").not());
        }
    }
    // Integers that divide are fine.
    symshard()
        .args(["cost", "gpt3-175b", "--set", "NH=64", "--set", "S=1024"])
        .assert()
        .success();
}

#[test]
fn shipped_models_bind_integer_sizes() {
    let loader = ModelLoader::embedded().unwrap();
    for name in [
        "gpt3-1.3b",
        "gpt3-13b",
        "mixtral-8x7b",
        "resnet50",
        "alexnet",
    ] {
        let m = loader.resolve(name).unwrap();
        m.check_sizes(&m.values)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("symshard-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn explain_reports_a_broken_rule_file_before_its_name() {
    let dir = temp_dir("explain");
    let path = dir.join("linear.yaml");
    std::fs::write(
        &path,
        "name: other\ndoc: d\nindices: {b: mapp}\ninputs: {x: [b]}\noutput: [b]\n",
    )
    .unwrap();
    symshard()
        .args(["explain", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown index kind `mapp`"))
        .stderr(predicate::str::contains("differs from its file name").not());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_local_file_named_like_a_shipped_model_is_announced() {
    let dir = temp_dir("shadow");
    std::fs::write(dir.join("gpt2-124m"), "name: gpt2-124m\nfamily: gpt\n").unwrap();
    symshard()
        .current_dir(&dir)
        .args(["cost", "gpt2-124m"])
        .assert()
        .stderr(predicate::str::contains(
            "note: reading the file `gpt2-124m` in this directory, not the shipped model",
        ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_mistyped_name_gets_the_nearest_suggested() {
    symshard()
        .args(["cost", "GPT3-157B"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("(did you mean `gpt3-175b`?)"));
    symshard()
        .args(["explain", "lineer"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("(did you mean `linear`?)"));
}

#[cfg(unix)]
#[test]
fn a_non_utf8_argument_is_named() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"x\xff.yaml");
    symshard()
        .arg("cost")
        .arg(bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "argument 2, `x\u{fffd}.yaml`, is not valid UTF-8",
        ));
    symshard()
        .args(["rank", "gpt2-124m", "--devices"])
        .arg(bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("(the value of --devices)"));
}

#[test]
fn exit_codes_follow_the_readme() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains("### Exit codes"));
    // 2: rejected input, a missing file included, whatever the command.
    for args in [
        vec!["cost", "no-such-model.yaml"],
        vec!["audit", "no-such-rule.yaml"],
        vec!["explain", "no-such-rule.yaml"],
        vec!["cost", "gpt2-124m", "--strategy", "no-such-strategy.yaml"],
        vec!["cost", "gpt2-124m", "--tp", "7"],
    ] {
        symshard().args(&args).assert().code(2);
    }
    // 1: a file that exists but cannot be read (a directory).
    let dir = temp_dir("unreadable");
    let path = dir.join("model.yaml");
    std::fs::create_dir_all(&path).unwrap();
    symshard()
        .args(["cost", path.to_str().unwrap()])
        .assert()
        .code(1);
    std::fs::remove_dir_all(&dir).unwrap();
    // 0: nothing fits, but the ranking is the answer.
    symshard()
        .args(["rank", "gpt3-175b", "--devices", "8", "--top", "1"])
        .assert()
        .code(0);
}

#[test]
fn optimize_refuses_tp_1_and_degrees_cost_refuses() {
    symshard()
        .args(["optimize", "gpt3-175b", "--tp", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no tensor-parallel communication to optimise",
        ));
    for cmd in ["optimize", "cost"] {
        symshard()
            .args([cmd, "gpt3-175b", "--tp", "7"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("tp = 7 does not divide"));
    }
    symshard()
        .args(["optimize", "gpt2-124m", "--tp", "4"])
        .assert()
        .success()
        .stdout(predicate::str::contains("after:"));
}

#[test]
fn nonsensical_strategies_are_refused_by_every_command() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--dp", "8", "--gpus-per-node", "3"],
            "--gpus-per-node = 3 does not divide the 8 devices",
        ),
        (
            &["--schedule", "interleaved-1f1b"],
            "interleaved-1f1b needs pp > 1",
        ),
        (&["--zero", "3"], "`zero` = 3 needs dp > 1"),
        (
            &[
                "--pp",
                "4",
                "--microbatches",
                "1",
                "--schedule",
                "interleaved-1f1b",
            ],
            "`microbatches` = 1 must be a multiple of pp = 4",
        ),
    ];
    for (flags, says) in cases {
        for cmd in ["cost", "timeline", "analyze"] {
            let mut args = vec![cmd, "gpt2-124m"];
            args.extend_from_slice(flags);
            if cmd == "analyze" {
                args.extend(["-o", "/dev/null"]);
            }
            symshard()
                .args(&args)
                .assert()
                .code(2)
                .stderr(predicate::str::contains(says));
        }
    }
}

#[test]
fn strategy_files_are_held_to_the_same_rules() {
    for (text, says) in [
        (
            "dp: 8\ngpus_per_node: 3\n",
            "s.yaml:2:1: `gpus_per_node` = 3 does not divide",
        ),
        ("zero: 1\n", "s.yaml:1:1: `zero` = 1 needs dp > 1"),
        // The refusal points at the knob it is about.
        (
            "dp: 2\nsequence_parallel: true\n",
            "s.yaml:2:1: sequence parallelism needs tp > 1",
        ),
        (
            "dp: 2\ntp: 2\nchunks: 2\n",
            "s.yaml:3:1: `chunks` = 2 needs the interleaved-1f1b schedule",
        ),
    ] {
        let err = parse_strategy(&Source::new("s.yaml", text))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn tensor_parallelism_across_nodes_is_a_warning() {
    symshard()
        .args(["cost", "gpt2-124m", "--tp", "4", "--gpus-per-node", "2"])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "warning: tensor parallelism of tp = 4 spans nodes of 2 devices",
        ));
    symshard()
        .args(["cost", "gpt2-124m", "--tp", "4"])
        .assert()
        .success()
        .stderr(predicate::str::contains("warning").not());
}

#[test]
fn cost_per_op_shows_what_was_computed() {
    let run = |exact: bool| {
        let mut args = vec![
            "cost",
            "gpt3-175b",
            "--tp",
            "3",
            "--pp",
            "2",
            "--microbatches",
            "2",
            "--per-op",
        ];
        if exact {
            args.push("--exact");
        }
        let out = symshard().args(&args).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let collectives = |text: &str| -> Vec<String> {
        let table = text.split("collectives (busiest stage").nth(1).unwrap();
        table
            .lines()
            .skip(2)
            .take_while(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    let text = run(false);
    assert!(
        text.contains("bytes per rank per call, ring traffic"),
        "{text}"
    );
    assert!(text.contains("(busiest stage, one device"), "{text}");
    assert!(text.contains("(all 2 stages, one device each)"), "{text}");
    // Rounded with units: a per-rank share of a ring collective is no fraction.
    let rows = collectives(&text);
    assert!(!rows.is_empty(), "{text}");
    for line in &rows {
        assert!(!line.contains('/'), "{line}");
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert!(cells[4].ends_with('B'), "bytes without a unit: {line}");
    }
    // Exact: kind, axis, tier, bytes, calls, where — one cell each.
    let text = run(true);
    let rows = collectives(&text);
    assert!(
        rows.iter()
            .any(|l| l.split_whitespace().nth(1) == Some("tp")),
        "{text}"
    );
    for line in &rows {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells.len(), 6, "{line}");
        assert_ne!(
            cells[1], "dp",
            "a data-parallel collective at dp = 1: {line}"
        );
        assert_ne!(cells[3], "0", "an empty collective: {line}");
    }
}

#[test]
fn cost_json_names_the_overridden_symbols() {
    let out = symshard()
        .args([
            "cost",
            "gpt3-175b",
            "--set",
            "L=48",
            "--set",
            "NH=64",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"], "gpt3-175b");
    assert_eq!(v["overrides"], serde_json::json!({"L": "48", "NH": "64"}));
    let plain = symshard()
        .args(["cost", "gpt3-175b", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(v.get("overrides").is_none());
}

/// Users' models are found by name: `./models/NAME.yaml`, then the directories of
/// `SYMSHARD_MODEL_PATH`, then the shipped ones; `models` lists all three, and a user's file
/// that shadows a shipped model is announced.
#[test]
fn user_models_are_found_by_name() {
    let dir = temp_dir("model-path");
    let other = dir.join("elsewhere");
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let model = |name: &str| {
        format!(
            "name: {name}\nfamily: gpt\nsymbols:\n  L: {{value: 2}}\n  H: {{value: 256}}\n  NH: {{value: 4}}\n  F: {{value: 1024}}\n  V: {{value: 1000}}\n  P: {{value: 128}}\ndefaults:\n  B: {{value: 8}}\n  S: {{value: 128}}\n"
        )
    };
    std::fs::write(dir.join("models/mine.yaml"), model("mine")).unwrap();
    std::fs::write(other.join("theirs.yaml"), model("theirs")).unwrap();
    std::fs::write(dir.join("models/gpt2-124m.yaml"), model("gpt2-124m")).unwrap();
    let run = |args: &[&str]| {
        symshard()
            .current_dir(&dir)
            .env("SYMSHARD_MODEL_PATH", &other)
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["cost", "mine"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("model mine"));
    let o = run(&["cost", "theirs"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The user's gpt2-124m shadows the shipped one, with a note.
    let o = run(&["cost", "gpt2-124m"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("shadows the shipped model"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("L=2"));
    let o = run(&["models"]);
    let listing = String::from_utf8_lossy(&o.stdout).to_string();
    for want in ["mine", "theirs", "shipped (shadowed)", "llama3-8b"] {
        assert!(listing.contains(want), "{want} missing from:\n{listing}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--rules DIR` works on every command that takes a model: a rule of the user's own replaces
/// the shipped rule of its name in the model.
#[test]
fn user_rules_reach_the_model() {
    let dir = temp_dir("user-rules");
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("operator_rules/gelu.yaml"),
    )
    .unwrap();
    assert!(shipped.contains("flops: \"9*b*h\""));
    std::fs::write(
        dir.join("gelu.yaml"),
        shipped.replace("flops: \"9*b*h\"", "flops: \"90*b*h\""),
    )
    .unwrap();
    let other = |extra: &[&str]| -> u128 {
        let o = symshard()
            .args(["cost", "gpt2-124m", "--format", "json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["flops"]["forward"]["other"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let rules = dir.to_string_lossy().to_string();
    // gelu runs on 12 layers × B·S × 3072 elements: 81 more FLOPs each.
    let diff = other(&["--rules", &rules]) - other(&[]);
    assert_eq!(diff, 81 * 12 * 512 * 1024 * 3072);
    for cmd in ["rank", "timeline", "layout", "optimize"] {
        let o = symshard()
            .args([cmd, "gpt2-124m", "--rules", "/nonexistent-rules-dir"])
            .args(match cmd {
                "rank" => &["--devices", "8"][..],
                "layout" => &["--tp", "2"][..],
                _ => &[][..],
            })
            .output()
            .unwrap();
        assert_ne!(o.status.code(), Some(0), "{cmd}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("nonexistent-rules-dir"),
            "{cmd}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
