//! Inputs a user could give by mistake that must be refused with a clear message and the exit
//! code of their class (README, "Exit codes"): 2 for input, 1 for a failed check or a file the
//! system will not let symshard read or write, 3 for an internal failure. Never a panic, never
//! a silent success.

mod common;

use common::{refused, symshard, temp_dir};
use std::path::Path;
use symshard::Error;

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(rel)
        .display()
        .to_string()
}

#[test]
fn exit_codes_follow_one_convention_by_class() {
    assert_eq!(Error::Usage("x".into()).exit_code(), 2);
    assert_eq!(Error::Check("x".into()).exit_code(), 1);
    assert_eq!(Error::Internal("x".into()).exit_code(), 3);
    let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
    let io = |source| Error::Io {
        path: "f".into(),
        source,
    };
    assert_eq!(io(missing).exit_code(), 2);
    let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    assert_eq!(io(denied).exit_code(), 1);
}

#[test]
fn a_binary_file_is_refused_as_input_wherever_text_belongs() {
    let dir = temp_dir("hostile-binary");
    // Bytes that are not UTF-8 (0xff never occurs in UTF-8 text), after a valid first line.
    let bytes = b"name: x\n\xff\xfe\x00binary";
    for (name, args) in [
        ("model.yaml", vec!["cost"]),
        (
            "calib.yaml",
            vec!["cost", "gpt3-125m", "--dp", "8", "--calib"],
        ),
        ("config.json", vec!["import", "hf"]),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let p = path.display().to_string();
        let mut a = args.clone();
        a.push(&p);
        let e = refused(&a);
        assert!(e.contains(&format!("{p}:2:1")), "{a:?}: {e}");
        assert!(e.contains("not UTF-8"), "{a:?}: {e}");
    }
    // A binary file given as an ONNX model is refused the same way (exit code 2).
    let onnx = dir.join("model.onnx");
    std::fs::write(&onnx, b"\xff\xfe\x00 not protobuf").unwrap();
    refused(&["import", "onnx", &onnx.display().to_string()]);
}

#[test]
fn an_output_over_its_own_input_is_refused_and_the_input_kept() {
    let dir = temp_dir("hostile-self-output");
    let config = dir.join("self.json");
    let original = std::fs::read(fixture("tests/fixtures/hf/gpt2.json")).unwrap();
    std::fs::write(&config, &original).unwrap();
    let c = config.display().to_string();
    let e = refused(&["import", "hf", &c, "-o", &c]);
    assert!(
        e.contains("refusing to write") && e.contains("is the input"),
        "{e}"
    );
    assert_eq!(std::fs::read(&config).unwrap(), original);
    // The same file under another spelling of its path.
    let other = dir.join(".").join("self.json").display().to_string();
    refused(&["import", "hf", &c, "-o", &other]);
    assert_eq!(std::fs::read(&config).unwrap(), original);
}

#[test]
fn an_output_in_a_missing_folder_names_the_folder() {
    let dir = temp_dir("hostile-missing-folder");
    let out = dir.join("no-such-folder").join("model.yaml");
    let o = out.display().to_string();
    let config = fixture("tests/fixtures/hf/gpt2.json");
    let e = refused(&["import", "hf", &config, "-o", &o]);
    assert!(
        e.contains("the folder") && e.contains("no-such-folder"),
        "{e}"
    );
    assert!(e.contains("does not exist"), "{e}");
    let svg = dir.join("missing").join("step.svg").display().to_string();
    let e = refused(&[
        "timeline",
        "gpt3-125m",
        "--dp",
        "8",
        "--micro-batch-size",
        "1",
        "--calib",
        "a100-80gb",
        "--svg",
        &svg,
    ]);
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn an_absurd_calibration_peak_is_refused_not_timed_as_infinite() {
    let dir = temp_dir("hostile-absurd-peak");
    let table = std::fs::read_to_string(fixture("calibration/a100-80gb.yaml")).unwrap();
    let (line, _) = table
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with("bf16:"))
        .unwrap();
    let tiny: Vec<String> = table
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}bf16: {{value: 1e-300, source: a typo}}")
            } else {
                l.to_string()
            }
        })
        .collect();
    let path = dir.join("tiny.yaml");
    std::fs::write(&path, tiny.join("\n")).unwrap();
    let p = path.display().to_string();
    let e = refused(&[
        "timeline",
        "gpt3-125m",
        "--dp",
        "8",
        "--micro-batch-size",
        "1",
        "--calib",
        &p,
    ]);
    assert!(e.contains(&format!("{p}:{}:", line + 1)), "{e}");
    assert!(
        e.contains("device.peak_flops.bf16") && e.contains("absurd"),
        "{e}"
    );
}

#[test]
fn a_rules_folder_that_replaces_a_shipped_rule_says_so() {
    let dir = temp_dir("hostile-shadow-rule");
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::copy(fixture("operator_rules/gelu.yaml"), rules.join("gelu.yaml")).unwrap();
    let r = rules.display().to_string();
    let out = symshard()
        .args(["cost", "gpt3-125m", "--rules", &r])
        .output()
        .unwrap();
    assert!(out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("replaces the shipped rule `gelu`"), "{e}");
    let out = symshard()
        .args(["explain", "gelu", "--rules", &r])
        .output()
        .unwrap();
    assert!(out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("replaces the shipped rule `gelu`"), "{e}");
}

#[test]
fn a_rule_with_negative_flops_is_refused_by_cost_and_explain() {
    // tests/fixtures/audit/fail-negative-flops.yaml, which `audit` must report as failing, under
    // a file name that matches its rule name.
    let dir = temp_dir("hostile-negative-flops");
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    let text = std::fs::read_to_string(fixture("tests/fixtures/audit/fail-negative-flops.yaml"))
        .unwrap()
        .replace("name: negative_flops", "name: negflops");
    let file = rules.join("negflops.yaml");
    std::fs::write(&file, text).unwrap();
    let f = file.display().to_string();
    let e = refused(&["explain", &f]);
    assert!(e.contains("`flops` = -3*b*h is negative"), "{e}");
    assert!(e.contains(&format!("{f}:")), "{e}");
    let r = rules.display().to_string();
    let e = refused(&["cost", "gpt3-125m", "--rules", &r]);
    assert!(e.contains("is negative"), "{e}");
    // `audit` still reads it, and fails it.
    let out = symshard().args(["audit", &f]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn gpus_per_node_out_of_range_is_refused_even_without_a_strategy() {
    for g in ["0", "1025"] {
        let e = refused(&["cost", "gpt3-125m", "--gpus-per-node", g]);
        assert!(
            e.contains("--gpus-per-node") && e.contains("1 to 1024"),
            "{g}: {e}"
        );
    }
}

#[test]
fn machine_flags_are_checked_and_named_even_without_a_strategy() {
    // Bad values are refused as they are with a strategy.
    let e = refused(&["cost", "gpt3-125m", "--memory", "80Gb"]);
    assert!(e.contains("--memory") && e.contains("bits"), "{e}");
    let e = refused(&["cost", "gpt3-125m", "--calib", "no-such-table"]);
    assert!(e.contains("no-such-table"), "{e}");
    // Good ones are accepted, with a note that the model's totals do not read them.
    let out = symshard()
        .args([
            "cost",
            "gpt3-125m",
            "--memory",
            "40GB",
            "--calib",
            "a100-80gb",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--calib, --memory price a strategy's devices"),
        "{err}"
    );
}

#[test]
fn a_graph_without_operators_is_refused() {
    let dir = temp_dir("hostile-empty-graph");
    let head = "name: empty\ngraph:\n  symbols:\n    T: tokens\n    H: hidden size\n  inputs:\n    x: {dims: [T, H]}\n";
    let tail = "symbols:\n  T: 8\n  H: 16\n";
    for (name, blocks, what) in [
        ("no-blocks.yaml", "  blocks: []\n", "no blocks"),
        (
            "empty-block.yaml",
            "  blocks:\n    - name: body\n      ops: []\n",
            "block `body` has no operators",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, format!("{head}{blocks}{tail}")).unwrap();
        let p = path.display().to_string();
        for cmd in ["cost", "rank"] {
            let mut a = vec![cmd, p.as_str()];
            if cmd == "rank" {
                a.extend(["--devices", "8"]);
            }
            let e = refused(&a);
            assert!(
                e.contains(what) && e.contains(&format!("{p}:")),
                "{a:?}: {e}"
            );
        }
    }
}
