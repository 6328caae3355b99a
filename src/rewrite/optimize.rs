//! Communication optimisation of a tensor-parallel layer: saturate its program with the laws and
//! the collective algebra, then extract the cheapest equivalent program under exact costs.
//!
//! On a Megatron-LM transformer layer this finds sequence parallelism by itself: the all-reduce
//! after each row-parallel linear becomes a reduce-scatter and an all-gather, and the dropout,
//! residual add and layernorm between them run on 1/t of the rows.

use super::analysis::{DistAnalysis, DistEGraph, Meta};
use super::cost::{NodeCost, Weights};
use super::extract::extract;
use super::lang::Dist;
use super::program::{
    block_analysis, block_program, block_program_in, boundary_shard, render, show_placement,
    Program,
};
use super::run::{rewrites, Limits, RunStats};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::parallel::Layout;
use crate::sym::{Bindings, Poly, Rational};
use egg::{EGraph, Id, RecExpr};
use serde::Serialize;
use std::collections::BTreeMap;

/// Settings of an optimisation.
#[derive(Debug, Clone, Default)]
pub struct OptimizeOptions {
    /// Bounds of the run.
    pub limits: Limits,
    /// How communication, compute and memory weigh against each other.
    pub weights: Weights,
    /// Analyse `repeat LAYERS layer` instead of one layer (identical layers share one e-class).
    pub layers: Option<u64>,
}

/// Costs of a program per device, as formulas and as exact values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostReport {
    /// The formulas.
    pub formulas: NodeCost,
    /// FLOPs computed by one device, exactly.
    pub compute: String,
    /// Bytes one device sends, exactly.
    pub comm: String,
    /// Bytes of activations one device keeps for the backward pass, exactly.
    pub activation: String,
}

/// Where one model operator's output lives before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpPlacement {
    /// The operator.
    pub op: String,
    /// Its placement in the tensor-parallel program.
    pub before: String,
    /// Its placement in the optimised program.
    pub after: String,
}

/// What an optimisation found.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizeReport {
    /// The model.
    pub model: String,
    /// The block analysed.
    pub block: String,
    /// The tensor-parallel degree.
    pub tp: u64,
    /// Identical layers analysed together (`repeat`), if asked.
    pub layers: Option<u64>,
    /// The tensor-parallel program, one line per node.
    pub before: String,
    /// The optimised program.
    pub after: String,
    /// Costs before.
    pub before_cost: CostReport,
    /// Costs after.
    pub after_cost: CostReport,
    /// Before minus after.
    pub saving: CostReport,
    /// Operators whose placement changed.
    pub moved: Vec<OpPlacement>,
    /// How the run ended.
    pub run: RunStats,
}

fn exact(p: &Poly, values: &Bindings) -> Result<String> {
    let v: Rational = p
        .eval(values)
        .map_err(|e| Error::Usage(format!("cannot evaluate `{p}`: {e} (bind it with --set)")))?;
    Ok(if v.is_integer() {
        v.to_integer().to_string()
    } else {
        v.to_string()
    })
}

fn cost_report(c: NodeCost, values: &Bindings) -> Result<CostReport> {
    Ok(CostReport {
        compute: exact(&c.compute, values)?,
        comm: exact(&c.comm, values)?,
        activation: exact(&c.activation, values)?,
        formulas: c,
    })
}

/// Optimises the `layer` block of `model` (else its first repeated block) at tensor-parallel
/// degree `tp`, with costs evaluated under `values`.
pub fn optimize_layer(model: &Model, tp: u64, values: &Bindings) -> Result<OptimizeReport> {
    optimize_layer_with(model, tp, values, &OptimizeOptions::default())
}

/// [`optimize_layer`] with explicit options.
pub fn optimize_layer_with(
    model: &Model,
    tp: u64,
    values: &Bindings,
    opts: &OptimizeOptions,
) -> Result<OptimizeReport> {
    optimize_in(model, tp, values, None, opts)
}

/// [`optimize_layer_with`] on the program of the layer under `layout` (an auto layout's
/// placements, say): the collectives that layout's splits call for are the communication the
/// laws may make cheaper.
pub fn optimize_layout(
    model: &Model,
    tp: u64,
    values: &Bindings,
    layout: &Layout,
    opts: &OptimizeOptions,
) -> Result<OptimizeReport> {
    optimize_in(model, tp, values, Some(layout), opts)
}

/// Whether `op` sums over an index (a linear, a batched matmul).
fn contracts(op: &crate::model::OpNode) -> bool {
    op.rule
        .indices
        .iter()
        .any(|i| i.kind == crate::rules::IndexKind::ReduceSum)
}

/// The block `optimize` analyses: the first repeated block.
pub fn layer_block(model: &Model) -> Result<usize> {
    model
        .first_repeated_block()
        .ok_or_else(|| Error::Usage(format!("model `{}` has no repeated block", model.name)))
}

fn optimize_in(
    model: &Model,
    tp: u64,
    values: &Bindings,
    layout: Option<&Layout>,
    opts: &OptimizeOptions,
) -> Result<OptimizeReport> {
    if tp < 2 {
        return Err(Error::Usage(format!(
            "--tp {tp}: a layer that is not split has no tensor-parallel communication to optimise (give --tp 2 or more)"
        )));
    }
    // The degrees `cost` accepts, and no others (once every symbol is bound: the pricing below
    // reports an unbound one).
    let knobs = crate::strategy::Knobs {
        tp,
        ..crate::strategy::Knobs::data_parallel(1)
    };
    let b = crate::parallel::evaluate::microbatch_bindings(model, values, &knobs);
    let default = Layout::default();
    let analysis = crate::parallel::analyse(model, layout.unwrap_or(&default));
    if model.symbols.keys().all(|s| values.contains_key(s)) {
        crate::parallel::evaluate::check_divisibility(model, &analysis, &b, &knobs)?;
    }
    let bi = layer_block(model)?;
    let size = Poly::from_bigint(tp.into());
    let ctx = block_analysis(model, &model.blocks[bi], "tp", size);
    let (mut program, mut whole) = match layout {
        Some(l) => {
            // The layer run whole, beside the layout's program: the laws split its operators
            // every way (the layout's split is one of them), which is what lets the extraction
            // leave the layout's choice for another.
            // Contractions (an index summed over: linears, batched matmuls) keep the layout's
            // split there: the laws price the forward pass only, and moving a contraction's
            // split moves its weights, whose gradient reduction the backward pays.
            let mut free = l.clone();
            for o in model.blocks[bi].ops() {
                if !contracts(o) {
                    free.tp_overrides.insert(o.name.clone(), "none".to_string());
                }
            }
            let none = free;
            let edge = boundary_shard(model, bi, l);
            (
                block_program_in(model, bi, &ctx, "tp", l, edge)?,
                Some(block_program_in(model, bi, &ctx, "tp", &none, edge)?),
            )
        }
        None => (block_program(model, bi, &ctx, "tp")?, None),
    };
    if let Some(n) = opts.layers {
        program = program.repeat(n);
        whole = whole.map(|w| w.repeat(n));
    }
    let mut report = optimize_program_beside(&ctx, &program, whole.as_ref(), values, opts)?;
    report.model = model.name.clone();
    report.block = model.blocks[bi].name.clone();
    report.tp = tp;
    report.layers = opts.layers;
    Ok(report)
}

/// Saturates `program` (bounded) and extracts its cheapest equivalent.
pub fn optimize_program(
    ctx: &DistAnalysis,
    program: &Program,
    values: &Bindings,
    opts: &OptimizeOptions,
) -> Result<OptimizeReport> {
    optimize_program_beside(ctx, program, None, values, opts)
}

/// [`optimize_program`] with `whole`, the same computation with no operator split, added to the
/// e-graph as equal to `program` (both end with the output whole on every device).
fn optimize_program_beside(
    ctx: &DistAnalysis,
    program: &Program,
    whole: Option<&Program>,
    values: &Bindings,
    opts: &OptimizeOptions,
) -> Result<OptimizeReport> {
    let before_cost = ctx.program_cost(&program.expr)?;
    // Every symbol must have a value before costs can be compared.
    cost_report(before_cost.clone(), values)?;
    let mut egraph: DistEGraph = EGraph::new(ctx.clone());
    let mut root = egraph.add_expr(&program.expr);
    let ids = egraph
        .lookup_expr_ids(&program.expr)
        .ok_or_else(|| Error::Internal("program not in its own e-graph".into()))?;
    let mut whole_ops: BTreeMap<Id, String> = BTreeMap::new();
    if let Some(w) = whole {
        let r = egraph.add_expr(&w.expr);
        let wids = egraph
            .lookup_expr_ids(&w.expr)
            .ok_or_else(|| Error::Internal("program not in its own e-graph".into()))?;
        for (id, name) in &w.labels {
            whole_ops.insert(wids[usize::from(*id)], name.clone());
        }
        egraph.union(root, r);
        egraph.rebuild();
        root = egraph.find(root);
    }
    let runner = opts.limits.runner(egraph).run(&rewrites(&program.rules)?);
    let run = RunStats::of(&runner);
    let egraph = &runner.egraph;
    let (_, after, classes) = extract(egraph, root, values, opts.weights.clone());
    let after_cost = ctx.program_cost(&after)?;

    // Each model operator's class, and the classes of its shards.
    let mut ops: BTreeMap<Id, (String, Option<usize>)> = BTreeMap::new();
    let labelled = program
        .labels
        .iter()
        .map(|(id, name)| (ids[usize::from(*id)], name))
        .chain(whole_ops.iter().map(|(id, name)| (*id, name)));
    for (id, name) in labelled {
        let class = egraph.find(id);
        ops.insert(class, (name.clone(), None));
        for d in 0..rank(&egraph[class].data) {
            if let Some(s) = lookup_shard(egraph, class, d) {
                ops.entry(s).or_insert_with(|| (name.clone(), Some(d)));
            }
        }
    }
    let mut after_ops: BTreeMap<Id, (String, Option<usize>)> = classes
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((Id::from(i), ops.get(c)?.clone())))
        .collect();
    // An operator computed on shards and gathered along `d`: the shards are that operator too.
    for (id, node) in after.items().rev() {
        if let (Dist::AllGather([x, d, _]), Some((name, None))) = (node, after_ops.get(&id)) {
            if matches!(after[*x], Dist::Op(_)) && !after_ops.contains_key(x) {
                let d = match after[*d] {
                    Dist::Num(d) => usize::try_from(d).ok(),
                    _ => None,
                };
                after_ops.insert(*x, (name.clone(), d));
            }
        }
    }
    let after_labels = shard_labels(&after_ops);
    let after_names = after_ops
        .into_iter()
        .map(|(id, (name, _))| (id, name))
        .collect();
    let moved = moved_ops(ctx, program, &after, &after_names);
    let saving = NodeCost {
        compute: &before_cost.compute - &after_cost.compute,
        comm: &before_cost.comm - &after_cost.comm,
        activation: &before_cost.activation - &after_cost.activation,
    };
    Ok(OptimizeReport {
        model: String::new(),
        block: String::new(),
        tp: 0,
        layers: None,
        before: render(ctx, &program.expr, &program.labels),
        after: render(ctx, &after, &after_labels),
        before_cost: cost_report(before_cost, values)?,
        after_cost: cost_report(after_cost, values)?,
        saving: cost_report(saving, values)?,
        moved,
        run,
    })
}

/// Each extracted node's label: its operator's name, and which dimension it is a shard of.
fn shard_labels(ops: &BTreeMap<Id, (String, Option<usize>)>) -> BTreeMap<Id, String> {
    ops.iter()
        .map(|(id, (name, d))| {
            let text = match d {
                Some(d) => format!("{name}, a shard of dimension {d}"),
                None => name.clone(),
            };
            (*id, text)
        })
        .collect()
}

fn rank(m: &Meta) -> usize {
    m.tensor().map(|t| t.shape.len()).unwrap_or(0)
}

fn lookup_shard(egraph: &DistEGraph, class: Id, d: usize) -> Option<Id> {
    let axis = egraph.analysis.mesh.axes().first()?.0.clone();
    let d = egraph.lookup(Dist::Num(d as u64))?;
    let a = egraph.lookup(super::analysis::axis_leaf(&axis))?;
    egraph.lookup(Dist::Shard([class, d, a]))
}

/// Operators computed on a different placement after optimisation.
fn moved_ops(
    ctx: &DistAnalysis,
    before: &Program,
    after: &RecExpr<Dist>,
    after_ops: &BTreeMap<Id, String>,
) -> Vec<OpPlacement> {
    let op_placements = |expr: &RecExpr<Dist>, labels: &BTreeMap<Id, String>| {
        let metas = ctx.program_meta(expr);
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for (id, node) in expr.items() {
            if let (Dist::Op(_), Some(op)) = (node, labels.get(&id)) {
                out.insert(op.clone(), show_placement(ctx, &metas[usize::from(id)]));
            }
        }
        out
    };
    let b = op_placements(&before.expr, &before.labels);
    let a = op_placements(after, after_ops);
    let mut out = Vec::new();
    for op in before.labels.values() {
        if let (Some(pb), Some(pa)) = (b.get(op), a.get(op)) {
            if pb != pa {
                out.push(OpPlacement {
                    op: op.clone(),
                    before: pb.clone(),
                    after: pa.clone(),
                });
            }
        }
    }
    out
}
