//! `symshard explain`: what a person auditing an operator reads.

use super::output::print_json;
use super::Format;
use crate::error::Error;
use crate::rules::law::LAWS;
use crate::rules::split::{PassSplit, SplitEntry, SplitTable, TensorPlacement};
use crate::rules::{OpRule, RuleSet};
use clap::Args;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A rule name (see --list) or a path to a rule file.
    #[arg(required_unless_present_any = ["list", "laws"])]
    pub rule: Option<String>,
    /// List the shipped rules.
    #[arg(long)]
    pub list: bool,
    /// Print the law table every split table is derived from.
    #[arg(long)]
    pub laws: bool,
    /// Prove each split of the table from the laws (e-graph explanations).
    #[arg(long)]
    pub why: bool,
    /// Also load the rules in this directory (they replace shipped rules of the same name).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<PathBuf>,
    /// Bytes per element of the compute type (2 for bf16/fp16, 4 for fp32).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub dtype_bytes: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `explain`.
pub fn run(args: ExplainArgs) -> Result<(), Error> {
    if args.laws {
        return match args.format {
            Format::Json => print_json(&LAWS),
            Format::Table => {
                print!("{}", render_laws());
                Ok(())
            }
        };
    }
    if args.list || args.why {
        let (set, notes) = crate::api::rule_set(args.rules.as_deref())?;
        notes.iter().for_each(|n| eprintln!("{n}"));
        if args.list {
            return list(&set, args.format);
        }
        let rule = set.resolve(args.rule.as_deref().unwrap_or_default())?;
        let why = crate::rewrite::explain_why(&rule)?;
        return match args.format {
            Format::Json => print_json(&why),
            Format::Table => {
                for line in why.lines() {
                    println!("{line}");
                }
                Ok(())
            }
        };
    }
    let name = args.rule.as_deref().unwrap_or_default();
    let e = crate::api::explain(name, args.rules.as_deref(), args.dtype_bytes)?;
    e.notes.iter().for_each(|n| eprintln!("{n}"));
    match args.format {
        Format::Json => print_json(&e),
        Format::Table => {
            print!("{}", render(&e.rule, &e.split_table));
            Ok(())
        }
    }
}

fn list(set: &RuleSet, format: Format) -> Result<(), Error> {
    #[derive(Serialize)]
    struct Row<'a> {
        name: &'a str,
        class: crate::rules::FlopClass,
        signature: String,
        doc: &'a str,
    }
    let rows: Vec<Row> = set
        .iter()
        .map(|r| Row {
            name: &r.name,
            class: r.class,
            signature: signature(r),
            doc: &r.doc,
        })
        .collect();
    match format {
        Format::Json => print_json(&rows),
        Format::Table => {
            let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4);
            let s = rows
                .iter()
                .map(|r| r.signature.chars().count())
                .max()
                .unwrap_or(4);
            for r in &rows {
                let pad = s - r.signature.chars().count();
                println!(
                    "{:w$}  {}{}  {}",
                    r.name,
                    r.signature,
                    " ".repeat(pad),
                    r.doc
                );
            }
            Ok(())
        }
    }
}

fn dims(t: &crate::rules::Tensor) -> String {
    let d: Vec<String> = t.dims.iter().map(|g| g.join("*")).collect();
    format!("[{}]", d.join(", "))
}

/// `output[b, n] = f(x[b, k], w[k, n], …)`.
pub fn signature(r: &OpRule) -> String {
    let ins: Vec<String> = r
        .inputs
        .iter()
        .map(|t| format!("{}{}", t.name, dims(t)))
        .collect();
    format!(
        "{}{} = {}({})",
        "y",
        dims(&r.output),
        r.name,
        ins.join(", ")
    )
}

/// The law table as text.
pub fn render_laws() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<11} {:<55} {:<10} {:<26} finish",
        "kind", "law", "compute", "output"
    );
    for law in LAWS.iter() {
        let output = match law.output {
            crate::rules::law::OutputLaw::Shard => "Shard".to_string(),
            crate::rules::law::OutputLaw::Partial(op) => format!("Partial({op})"),
            crate::rules::law::OutputLaw::ShardOrReplicate => "Shard, or Replicate".to_string(),
        };
        let finish = match law.finish {
            crate::rules::law::Finish::Nothing => "nothing".to_string(),
            crate::rules::law::Finish::AllReduceOutput(crate::rules::ReduceOp::Sum) => {
                "all-reduce(sum) of the output, or reduce-scatter".to_string()
            }
            crate::rules::law::Finish::AllReduceOutput(op) => {
                format!("all-reduce({op}) of the output")
            }
            crate::rules::law::Finish::AllReduceStatistics => "all-reduce of statistics".into(),
            crate::rules::law::Finish::HaloExchange => "halo exchange".into(),
        };
        let compute = if !law.splittable {
            "—"
        } else if law.divides_compute {
            "÷ p"
        } else {
            "whole"
        };
        let _ = writeln!(
            s,
            "{:<11} {:<55} {:<10} {:<26} {}",
            law.kind.name(),
            law.statement,
            compute,
            if law.splittable { output } else { "—".into() },
            if law.splittable {
                finish
            } else {
                "cannot split".into()
            }
        );
    }
    s
}

fn placements(ps: &[TensorPlacement]) -> String {
    ps.iter()
        .map(|p| {
            if p.placements.is_empty() {
                return format!("{} whole", p.tensor);
            }
            let pl: Vec<String> = p.placements.iter().map(|x| x.to_string()).collect();
            format!("{} {}", p.tensor, pl.join("·"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_pass(s: &mut String, label: &str, pass: &PassSplit) {
    let _ = writeln!(s, "  {label:<9} compute  {}", pass.compute);
    let _ = writeln!(s, "            reads    {}", placements(&pass.inputs));
    let _ = writeln!(s, "            leaves   {}", placements(&pass.outputs));
    if pass.collectives.is_empty() {
        let _ = writeln!(s, "            comm     none");
    }
    for c in &pass.collectives {
        let op = c.op.map(|o| format!("({o})")).unwrap_or_default();
        let count = if c.count > 1 {
            format!(" ×{}", c.count)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "            comm     {}{op}{count} of {} on axis {}: {} bytes per rank",
            c.kind, c.tensor, c.axis, c.wire_bytes
        );
        if let Some(alt) = &c.alternative {
            let _ = writeln!(
                s,
                "                     or {} leaving {}: {} bytes per rank",
                alt.kind, alt.leaves, alt.wire_bytes
            );
        }
        let _ = writeln!(s, "                     why: {}", c.reason);
    }
}

fn split_label(e: &SplitEntry) -> String {
    if e.splits.is_empty() {
        return "unsplit".into();
    }
    e.splits
        .iter()
        .map(|s| format!("{} over {} ({})", s.index, s.axis, s.size))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a rule declares for the pricing beyond its formulas: the inputs a context-parallel ring
/// passes, the inputs that hold a router's logits, and its role.
fn declarations(s: &mut String, rule: &OpRule) {
    if !rule.ring.is_empty() {
        let _ = writeln!(
            s,
            "ring {}: passed from rank to rank under context parallelism",
            rule.ring.join(", ")
        );
    }
    if !rule.router.is_empty() {
        let _ = writeln!(
            s,
            "router {}: a router's logits; the linear layer that makes them stays in bf16 under \
             FP8 recipes",
            rule.router.join(", ")
        );
    }
    if let Some(role) = rule.role {
        let _ = writeln!(s, "role {}: {}", role.name(), role.meaning());
    }
}

/// The whole explanation of a rule as text.
pub fn render(rule: &OpRule, table: &SplitTable) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "rule {} — {}", rule.name, rule.doc);
    let _ = writeln!(s, "file {}", rule.file.display());
    let _ = writeln!(s, "  {}", signature(rule));
    let _ = writeln!(s);
    let _ = writeln!(s, "indices");
    let w = rule.indices.iter().map(|i| i.name.len()).max().unwrap_or(1);
    for i in &rule.indices {
        let extra = match i.kind {
            crate::rules::IndexKind::Stat => {
                format!(
                    " [{} stats forward, {} backward]",
                    i.stats, i.backward_stats
                )
            }
            crate::rules::IndexKind::Window => {
                format!(" [halo {}]", i.halo.clone().unwrap_or_default())
            }
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "  {:w$}  {:<10}  {:<42}  {}{}",
            i.name,
            i.kind.name(),
            i.kind.law().statement,
            i.doc.as_deref().unwrap_or(""),
            extra
        );
    }
    let _ = writeln!(s, "tensors");
    for t in &rule.inputs {
        let role = if t.param {
            "parameter"
        } else if t.grad {
            "input"
        } else {
            "input (no gradient)"
        };
        let _ = writeln!(s, "  {:<8} {:<24} {role}", t.name, dims(t));
    }
    let _ = writeln!(s, "  {:<8} {:<24} output", "y", dims(&rule.output));
    let (read, write) = rule.io_bytes(table.dtype_bytes);
    let _ = writeln!(s);
    let _ = writeln!(s, "FLOPs ({:?})", rule.class);
    let _ = writeln!(s, "  forward   {}", rule.forward_flops());
    let _ = writeln!(s, "  backward  {}", rule.backward_flops());
    let _ = writeln!(s, "bytes ({} per element)", table.dtype_bytes);
    let _ = writeln!(s, "  read      {read}");
    let _ = writeln!(s, "  written   {write}");
    let _ = writeln!(s, "  saved     {}", rule.saved_bytes(table.dtype_bytes));
    let (bread, bwrite) = rule.backward_io_bytes(table.dtype_bytes);
    let _ = writeln!(s, "  backward  read {bread}, written {bwrite}");
    let (own, _) = rule.param_grad_kernel_bytes(table.dtype_bytes);
    if !own.is_zero() {
        let what = if rule.param_grad_kernel {
            "the parameter gradients, a second pass over the output gradient and saved tensors"
        } else {
            "the gradients of parameters alone in their term (a bias), part of the above"
        };
        let _ = writeln!(s, "  own kernel {own}: {what}");
    }
    if rule.fp32_passes {
        let (fwd, bwd) = rule.fp32_pass_bytes(table.dtype_bytes);
        let _ = writeln!(
            s,
            "  fp32 passes forward +{fwd}, backward +{bwd}: what separate fp32 kernels move \
             beyond one fused kernel (timelines under --loss fp32, the default)"
        );
    }
    declarations(&mut s, rule);
    let _ = writeln!(s);
    let _ = writeln!(s, "split table (axis a has p_a devices, axis b has p_b)");
    for e in std::iter::once(&table.whole).chain(&table.entries) {
        let _ = writeln!(s, "{}", split_label(e));
        render_pass(&mut s, "forward", &e.forward);
        render_pass(&mut s, "backward", &e.backward);
        let _ = writeln!(s, "  saved     {} bytes per device", e.saved_bytes);
    }
    for u in &table.unsplittable {
        let _ = writeln!(s, "{} cannot be split: {}", u.index, u.reason);
    }
    s
}
