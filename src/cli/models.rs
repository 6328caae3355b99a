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
    doc: String,
}

/// Runs `models`.
pub fn run(args: ModelsArgs) -> Result<(), Error> {
    let loader = ModelLoader::embedded()?;
    let mut rows = Vec::new();
    for (stem, _) in embedded::MODELS {
        let m = loader.resolve(stem)?;
        rows.push(Row {
            name: m.name,
            family: m.family,
            doc: m.doc,
        });
    }
    match args.format {
        Format::Json => print_json(&rows),
        Format::Table => {
            for r in &rows {
                println!(
                    "{:<16} {:<8} {}",
                    r.name,
                    r.family.as_deref().unwrap_or("graph"),
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
