//! `symshard import`: a Hugging Face config or an ONNX graph → a model file.

use super::{progress, Format};
use crate::diag::Source;
use crate::error::Error;
use crate::model::import::{import_hf, import_onnx, OnnxOptions};
use crate::model::ModelLoader;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

/// Arguments of `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// What to import.
    #[command(subcommand)]
    pub source: ImportSource,
}

/// The formats `import` reads.
#[derive(Debug, Subcommand)]
pub enum ImportSource {
    /// A Hugging Face config.json (its model_type one of gpt2, bert, t5, llama, mistral, mixtral,
    /// phi3, phi, qwen2, qwen3, qwen2_moe, qwen3_moe, gemma, gemma2, opt, falcon, gpt_neox,
    /// deepseek_v2, deepseek_v3).
    Hf(HfArgs),
    /// An ONNX model file.
    Onnx(OnnxArgs),
}

/// Arguments of `import hf`.
#[derive(Debug, Args)]
pub struct HfArgs {
    /// The config.json.
    pub config: PathBuf,
    /// Where to write the model file (standard output when absent).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The model's name (default: the output file's stem, else the config's).
    #[arg(long)]
    pub name: Option<String>,
}

/// Arguments of `import onnx`.
#[derive(Debug, Args)]
pub struct OnnxArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Where to write the model file (standard output when absent).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The model's name (default: the output file's stem, else the ONNX file's).
    #[arg(long)]
    pub name: Option<String>,
    /// The size of a symbolic dimension, by its ONNX name or model symbol (`--dim batch=8`).
    #[arg(long = "dim", value_name = "NAME=SIZE")]
    pub dims: Vec<String>,
    /// Fail (exit code 2) when some ONNX node cannot be mapped to an operator rule.
    #[arg(long)]
    pub strict: bool,
    /// Import even when the mapped operators cover less than 99 % of the FLOPs or parameters
    /// the graph implies (by default that fails with exit code 2).
    #[arg(long)]
    pub allow_partial: bool,
    /// Summary format: a table on standard error, or JSON on standard output (with the model
    /// file's text in its `yaml` field).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `import`.
pub fn run(args: ImportArgs) -> Result<(), Error> {
    match args.source {
        ImportSource::Hf(a) => {
            let name = a.name.clone().or_else(|| stem(a.output.as_deref()));
            let imported = import_hf(&a.config, name.as_deref())?;
            finish(&imported.yaml, a.output.as_deref(), &a.config)?;
            eprintln!(
                "imported {} (model_type {}) as family `{}`",
                imported.name, imported.model_type, imported.family
            );
            Ok(())
        }
        ImportSource::Onnx(a) => {
            let mut opts = OnnxOptions {
                name: a.name.clone().or_else(|| stem(a.output.as_deref())),
                allow_partial: a.allow_partial || a.strict,
                ..OnnxOptions::default()
            };
            for d in &a.dims {
                let (k, v) = d
                    .split_once('=')
                    .ok_or_else(|| Error::Usage(format!("--dim `{d}`: expected NAME=SIZE")))?;
                let v: u64 = v.trim().parse().ok().filter(|v| *v > 0).ok_or_else(|| {
                    Error::Usage(format!("--dim `{d}`: SIZE must be a positive integer"))
                })?;
                opts.dims.insert(k.trim().to_string(), v);
            }
            let pb = progress::bar(0, "mapping ONNX nodes");
            let imported = import_onnx(&a.model, &opts, &mut |done, total| {
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            });
            pb.finish_and_clear();
            let imported = imported?;
            for u in &imported.unmapped {
                let cause = if u.root { "root cause" } else { "downstream" };
                eprintln!(
                    "not mapped ({cause}): {} `{}`: {}",
                    u.op_type, u.name, u.reason
                );
            }
            if a.strict && !imported.unmapped.is_empty() {
                let n = imported.unmapped.len();
                return Err(Error::Usage(format!(
                    "{}: {n} ONNX nodes cannot be mapped (--strict)",
                    a.model.display()
                )));
            }
            let c = &imported.coverage;
            if a.format == Format::Json {
                if let Some(out) = &a.output {
                    finish(&imported.yaml, Some(out), &a.model)?;
                } else {
                    check(&imported.yaml, Path::new("<stdout>"))?;
                }
                let text = serde_json::to_string_pretty(&imported).map_err(|e| {
                    Error::Internal(format!("cannot write the import as JSON: {e}"))
                })?;
                println!("{text}");
            } else {
                finish(&imported.yaml, a.output.as_deref(), &a.model)?;
            }
            eprintln!(
                "imported {}: {} of {} ONNX nodes mapped, to {} operators; coverage {}, {}{}",
                imported.name,
                imported.mapped,
                imported.nodes,
                imported.operators,
                c.flops_text(),
                c.params_text(),
                crate::model::import::onnx::basis_note(c)
            );
            if !imported.assumed_sizes.is_empty() {
                let set: Vec<String> = imported
                    .assumed_sizes
                    .iter()
                    .map(|s| format!("--set {s}=…"))
                    .collect();
                eprintln!(
                    "note: no size given for {} (--dim): the model file assumes 1 (`assumed: true`), and `cost` and `rank` say so until {}",
                    imported.assumed_sizes.join(", "),
                    set.join(" ")
                );
            }
            if imported.fixed_sizes {
                eprintln!("note: {}", crate::model::import::onnx::FIXED_SIZES);
            }
            Ok(())
        }
    }
}

fn stem(p: Option<&Path>) -> Option<String> {
    p.and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().to_string())
}

/// Checks that the model file loads.
fn check(yaml: &str, shown: &Path) -> Result<(), Error> {
    ModelLoader::embedded()?.load(&Source::new(shown, yaml))?;
    Ok(())
}

/// Checks that the model file loads, then writes it.
fn finish(yaml: &str, output: Option<&Path>, input: &Path) -> Result<(), Error> {
    let shown = output.unwrap_or(Path::new("<stdout>"));
    check(yaml, shown)?;
    match output {
        Some(p) => super::output::write_output(p, yaml.as_bytes(), &[input]),
        None => {
            print!("{yaml}");
            Ok(())
        }
    }
}
