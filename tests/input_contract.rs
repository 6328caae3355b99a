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
    type Load<'a> = Box<dyn Fn(&Source) -> Result<(), symshard::error::Error> + 'a>;
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
