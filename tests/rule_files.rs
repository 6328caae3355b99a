//! Data-driven tests: one test per shipped rule file (its derived split table and explanation
//! snapshotted), and one per `fail-*` fixture (its error text snapshotted).

mod common;

use common::{snapshot, yaml_files};

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::Path;
use symshard::diag::Source;
use symshard::rules::{load_rule, split_table};

fn check_rule(path: &Path) -> Result<(), Failed> {
    // Reported under a relative name so that snapshots do not depend on the checkout's place.
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let src = Source::new(format!("operator_rules/{stem}.yaml"), text);
    let rule = load_rule(&src, Some(&stem)).map_err(|e| Failed::from(e.to_string()))?;
    let table = split_table(&rule, 2);
    // The unsplit forward and backward must equal the rule's own FLOPs.
    if table.whole.forward.compute != rule.forward_flops() {
        return Err("unsplit forward compute differs from the rule's FLOPs".into());
    }
    if table.whole.backward.compute != rule.backward_flops() {
        return Err("unsplit backward compute differs from the rule's FLOPs".into());
    }
    let text = symshard::cli::explain::render(&rule, &table);
    snapshot(&format!("rule-{}", rule.name), text)
}

fn check_failure(path: &Path) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let src = Source::new(format!("fixtures/rules/{name}"), text);
    match load_rule(&src, None) {
        Ok(_) => Err(format!("{name} loaded, but it must fail").into()),
        Err(e) => {
            let msg = e.to_string();
            if !msg.starts_with(&format!("fixtures/rules/{name}:")) {
                return Err(format!("error does not name file:line:column: {msg}").into());
            }
            snapshot(&format!("fail-{}", name.trim_end_matches(".yaml")), msg)
        }
    }
}

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut trials = Vec::new();
    for p in yaml_files(&root.join("operator_rules")) {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        trials.push(Trial::test(format!("rule::{name}"), move || check_rule(&p)));
    }
    for p in yaml_files(&root.join("tests/fixtures/rules")) {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        trials.push(Trial::test(format!("fail::{name}"), move || {
            check_failure(&p)
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
