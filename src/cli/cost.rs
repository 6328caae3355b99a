//! `symshard cost`: parameters, FLOPs and activation memory of a model, exact.

use super::output::print_json;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::{model_cost, op_costs, ModelCost, ModelLoader};
use crate::sym::{Bindings, Poly};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;

/// Arguments of `cost`.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// A model file, a shipped model's name (see `symshard models`).
    pub model: String,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// Print formulas in the model's symbols instead of numbers.
    #[arg(long)]
    pub symbolic: bool,
    /// Also list every operator's cost.
    #[arg(long)]
    pub per_op: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Serialize)]
struct Pass {
    matmul: String,
    other: String,
}

#[derive(Serialize)]
struct Flops {
    forward: Pass,
    backward: Pass,
}

#[derive(Serialize)]
struct Memory {
    activations: String,
}

#[derive(Serialize)]
struct OpRow {
    name: String,
    rule: String,
    repeat: String,
    params: String,
    forward: String,
    backward: String,
    class: crate::rules::FlopClass,
    activations: String,
}

#[derive(Serialize)]
struct CostJson {
    model: String,
    symbols: BTreeMap<String, String>,
    params: String,
    flops: Flops,
    memory: Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_op: Option<Vec<OpRow>>,
}

/// Evaluates `p` under `b` as exact text, or prints the formula when symbolic.
pub fn show(p: &Poly, b: &Bindings, symbolic: bool) -> Result<String, Error> {
    if symbolic {
        return Ok(p.to_string());
    }
    let v = p
        .eval(b)
        .map_err(|e| Error::Usage(format!("cannot evaluate: {e} (bind it with --set)")))?;
    Ok(if v.is_integer() {
        v.to_integer().to_string()
    } else {
        v.to_string()
    })
}

/// Runs `cost`.
pub fn run(args: CostArgs) -> Result<(), Error> {
    let loader = ModelLoader::embedded()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let cost: ModelCost = model_cost(&model);
    let s = |p: &Poly| show(p, &values, args.symbolic);
    let per_op = if args.per_op {
        let mut rows = Vec::new();
        for o in op_costs(&model) {
            rows.push(OpRow {
                name: o.name,
                rule: o.rule,
                repeat: s(&o.repeat)?,
                params: s(&o.params)?,
                forward: s(&o.forward.total())?,
                backward: s(&o.backward.total())?,
                class: o.class,
                activations: s(&o.activations)?,
            });
        }
        Some(rows)
    } else {
        None
    };
    let out = CostJson {
        model: model.name.clone(),
        symbols: values
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        params: s(&cost.params)?,
        flops: Flops {
            forward: Pass {
                matmul: s(&cost.forward.matmul)?,
                other: s(&cost.forward.other)?,
            },
            backward: Pass {
                matmul: s(&cost.backward.matmul)?,
                other: s(&cost.backward.other)?,
            },
        },
        memory: Memory {
            activations: s(&cost.activations)?,
        },
        per_op,
    };
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            println!("model {} — {}", model.name, model.doc);
            let syms: Vec<String> = out
                .symbols
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("symbols {}", syms.join(" "));
            println!();
            println!("parameters                    {}", out.params);
            println!("forward FLOPs   matmul-like   {}", out.flops.forward.matmul);
            println!("                other         {}", out.flops.forward.other);
            println!(
                "backward FLOPs  matmul-like   {}",
                out.flops.backward.matmul
            );
            println!("                other         {}", out.flops.backward.other);
            if !args.symbolic {
                let total = cost.forward.total() + cost.backward.total();
                println!("training step FLOPs           {}", s(&total)?);
            }
            println!("activations saved (bytes)     {}", out.memory.activations);
            if let Some(rows) = &out.per_op {
                println!();
                println!(
                    "{:<16} {:<15} {:>6} {:>14} {:>22} {:>22} {:>18}",
                    "operator",
                    "rule",
                    "×",
                    "params",
                    "forward FLOPs",
                    "backward FLOPs",
                    "saved bytes"
                );
                for r in rows {
                    println!(
                        "{:<16} {:<15} {:>6} {:>14} {:>22} {:>22} {:>18}",
                        r.name, r.rule, r.repeat, r.params, r.forward, r.backward, r.activations
                    );
                }
            }
            Ok(())
        }
    }
}
