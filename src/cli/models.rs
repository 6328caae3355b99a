//! `symshard models`: the user's models (by name from `./models` and `SYMSHARD_MODEL_PATH`), the
//! shipped models and the families.

use super::output::print_json;
use super::Format;
use crate::embedded;
use crate::error::Error;
use crate::model::ModelLoader;
use clap::Args;
use serde::Serialize;

/// Arguments of `models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Serialize)]
struct Row {
    /// Where it comes from: `shipped`, or the file a user's model is read from.
    source: String,
    name: String,
    family: Option<String>,
    params: String,
    doc: String,
}

/// Runs `models`.
pub fn run(args: ModelsArgs) -> Result<(), Error> {
    let loader = ModelLoader::embedded()?;
    let mut rows = Vec::new();
    let row = |m: crate::model::Model, source: String| {
        let params = crate::model::model_cost(&m)
            .params
            .eval(&m.values)
            .map(|p| p.to_integer().to_string())
            .unwrap_or_else(|_| "-".into());
        Row {
            source,
            name: m.name,
            family: m.family,
            params,
            doc: m.doc,
        }
    };
    // Users' models by name (`./models`, then `SYMSHARD_MODEL_PATH`), as `resolve` finds them.
    let mut seen = std::collections::BTreeSet::new();
    for dir in crate::model::user_model_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let Some(stem) = file.file_stem().map(|s| s.to_string_lossy().to_string()) else {
                continue;
            };
            let Ok(src) = crate::diag::Source::read(&file) else {
                continue;
            };
            // The repository's own copies of the shipped models are the shipped models.
            if embedded::MODELS
                .iter()
                .any(|(s, text)| *s == stem && *text == src.text)
                || !seen.insert(stem.clone())
            {
                continue;
            }
            match loader.load(&src) {
                Ok(m) => rows.push(row(m, file.display().to_string())),
                Err(e) => rows.push(Row {
                    source: file.display().to_string(),
                    name: stem,
                    family: None,
                    params: "-".into(),
                    doc: format!("does not load: {e}"),
                }),
            }
        }
    }
    for (stem, text) in embedded::MODELS {
        let src = crate::diag::Source::new(embedded::display_path("models", stem), *text);
        let shadowed = seen.contains(*stem);
        let mut r = row(loader.load(&src)?, "shipped".into());
        if shadowed {
            r.source = "shipped (shadowed)".into();
        }
        rows.push(r);
    }
    match args.format {
        Format::Json => print_json(&rows),
        Format::Table => {
            for r in &rows {
                println!(
                    "{:<16} {:<10} {:>18}  {}{}",
                    r.name,
                    r.family.as_deref().unwrap_or("graph"),
                    super::units::text(&r.params, super::units::count),
                    r.doc,
                    if r.source == "shipped" {
                        String::new()
                    } else {
                        format!("  [{}]", r.source)
                    }
                );
            }
            println!();
            println!(
                "families: {}",
                loader.family_names().collect::<Vec<_>>().join(", ")
            );
            Ok(())
        }
    }
}
