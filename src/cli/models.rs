//! `symshard models`: the shipped models and families.

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
    name: String,
    family: Option<String>,
    params: String,
    doc: String,
}

/// Runs `models`.
pub fn run(args: ModelsArgs) -> Result<(), Error> {
    let loader = ModelLoader::embedded()?;
    let mut rows = Vec::new();
    for (stem, _) in embedded::MODELS {
        let m = loader.resolve(stem)?;
        let params = crate::model::model_cost(&m)
            .params
            .eval(&m.values)
            .map(|p| p.to_integer().to_string())
            .unwrap_or_else(|_| "-".into());
        rows.push(Row {
            name: m.name,
            family: m.family,
            params,
            doc: m.doc,
        });
    }
    match args.format {
        Format::Json => print_json(&rows),
        Format::Table => {
            for r in &rows {
                println!(
                    "{:<16} {:<10} {:>16}  {}",
                    r.name,
                    r.family.as_deref().unwrap_or("graph"),
                    r.params,
                    r.doc
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
