//! `symshard models`: the user's models (by name from `./models` and `SYMSHARD_MODEL_PATH`), the
//! shipped models and the families.

use super::output::print_json;
use super::Format;
use crate::error::Error;
use crate::model::ModelLoader;
use clap::Args;

/// Arguments of `models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `models`.
pub fn run(args: ModelsArgs) -> Result<(), Error> {
    let loader = ModelLoader::embedded()?;
    let rows = crate::api::models()?;
    match args.format {
        Format::Json => print_json(&rows),
        Format::Table => {
            for r in &rows {
                println!(
                    "{:<16} {:<10} {:>18}  {}{}",
                    r.name,
                    r.family.as_deref().unwrap_or("graph"),
                    super::units::text(
                        &r.params.as_ref().map_or("-".into(), |p| p.to_string()),
                        super::units::count
                    ),
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
