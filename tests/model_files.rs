//! Data-driven tests: one test per shipped model file (its parameters, FLOPs and activation
//! memory under the model's own values snapshotted), and one per `fail-*` model fixture (its
//! error text snapshotted).

mod common;

use common::{snapshot, yaml_files};

use libtest_mimic::{Arguments, Failed, Trial};
use std::fmt::Write as _;
use std::path::Path;
use symshard::diag::Source;
use symshard::model::{model_cost, ModelLoader};
use symshard::sym::{Bindings, Poly};

/// `p` under `values`, as an exact integer.
fn integer(what: &str, p: &Poly, values: &Bindings) -> Result<String, Failed> {
    let v = p
        .eval(values)
        .map_err(|e| format!("{what} cannot be evaluated: {e}"))?;
    if !v.is_integer() {
        return Err(format!("{what} is not an integer: {v}").into());
    }
    Ok(v.to_integer().to_string())
}

fn check_model(loader: &ModelLoader, path: &Path) -> Result<(), Failed> {
    // Reported under a relative name so that snapshots do not depend on the checkout's place.
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let src = Source::new(format!("models/{stem}.yaml"), text);
    let model = loader.load(&src).map_err(|e| Failed::from(e.to_string()))?;
    if model.name != stem {
        return Err(format!("model `{}` is in file `{stem}.yaml`", model.name).into());
    }
    // Every symbol has a value, and every value says where it comes from.
    for s in model.symbols.keys() {
        if !model.values.contains_key(s) {
            return Err(format!("symbol `{s}` has no value").into());
        }
        if !model.sources.contains_key(s) {
            return Err(format!("the value of `{s}` has no source").into());
        }
    }
    // The shipped (embedded) copy is the same model.
    let shipped = loader
        .resolve(&stem)
        .map_err(|e| Failed::from(format!("not shipped: {e}")))?;
    let cost = model_cost(&model);
    if model_cost(&shipped) != cost {
        return Err("the embedded copy of the model differs from the file".into());
    }
    let v = &model.values;
    let mut out = String::new();
    writeln!(out, "model {} — {}", model.name, model.doc).unwrap();
    writeln!(
        out,
        "family {}",
        model.family.as_deref().unwrap_or("(inline graph)")
    )
    .unwrap();
    let symbols: Vec<String> = v.iter().map(|(k, x)| format!("{k}={x}")).collect();
    writeln!(out, "symbols {}", symbols.join(" ")).unwrap();
    writeln!(out, "parameters formula  {}", cost.params).unwrap();
    let rows = [
        ("parameters", &cost.params),
        ("forward matmul-like", &cost.forward.matmul),
        ("forward other", &cost.forward.other),
        ("backward matmul-like", &cost.backward.matmul),
        ("backward other", &cost.backward.other),
        ("activations (bytes)", &cost.activations),
    ];
    for (what, p) in rows {
        writeln!(out, "{what:<21} {}", integer(what, p, v)?).unwrap();
    }
    snapshot(&format!("model-{stem}"), out)
}

/// The list of shipped families in an unknown-family message grows with every family added: the
/// snapshot keeps the message without it.
fn redact_known_families(msg: &str) -> String {
    match msg.find("(known: ") {
        Some(start) if msg.contains("unknown family") => {
            let end = msg[start..].find(')').map_or(msg.len(), |e| start + e + 1);
            format!(
                "{}(known: [shipped families]){}",
                &msg[..start],
                &msg[end..]
            )
        }
        _ => msg.to_string(),
    }
}

fn check_failure(loader: &ModelLoader, path: &Path) -> Result<(), Failed> {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let src = Source::new(format!("fixtures/models/{name}"), text);
    match loader.load(&src) {
        Ok(_) => Err(format!("{name} loaded, but it must fail").into()),
        Err(e) => {
            let msg = e.to_string();
            let prefix = format!("fixtures/models/{name}:");
            let position = msg.strip_prefix(&prefix).and_then(|rest| {
                let mut parts = rest.splitn(3, ':');
                let line = parts.next()?.parse::<usize>().ok()?;
                let column = parts.next()?.parse::<usize>().ok()?;
                parts.next().map(|_| (line, column))
            });
            if position.is_none() {
                return Err(format!("error does not name file:line:column: {msg}").into());
            }
            let stem = name.trim_end_matches(".yaml").trim_start_matches("fail-");
            snapshot(&format!("fail-model-{stem}"), redact_known_families(&msg))
        }
    }
}

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loader = std::sync::Arc::new(ModelLoader::embedded().expect("shipped rules load"));
    let mut trials = Vec::new();
    for p in yaml_files(&root.join("models")) {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let l = loader.clone();
        trials.push(Trial::test(format!("model::{name}"), move || {
            check_model(&l, &p)
        }));
    }
    for p in yaml_files(&root.join("tests/fixtures/models")) {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let l = loader.clone();
        trials.push(Trial::test(format!("fail::{name}"), move || {
            check_failure(&l, &p)
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
