//! Building distributed programs from model blocks, and printing them.
//!
//! A block becomes the Megatron-LM tensor-parallel program its `tp` annotations describe: an
//! operator with a `tp` index has it split on the tensor-parallel axis, every other operator runs
//! whole, and the placements in between are fixed with the collectives the law table calls for
//! (a row-parallel linear's partial sums are all-reduced before a replicated consumer).

use super::analysis::{axis_leaf, show, DistAnalysis, Mesh, Meta};
use super::error::RewriteError;
use super::lang::{Dim, DimMap, Dist, Extents, Marks, ShapeLit};
use super::laws::term_has;
use crate::error::{Error, Result};
use crate::model::{Block, Model, OpNode, Producer};
use crate::parallel::layout::{plan, Layout};
use crate::rules::{Dtype, IndexKind, OpRule, Placement, ReduceOp, Tensor};
use crate::sym::Poly;
use egg::{Id, Language, RecExpr, Symbol};
use std::collections::{BTreeMap, HashMap};

/// A program with the model operator each node computes, where it computes one.
#[derive(Debug, Clone)]
pub struct Program {
    /// The program; its last node is the root.
    pub expr: RecExpr<Dist>,
    /// Node → the model operator it computes.
    pub labels: BTreeMap<Id, String>,
    /// The rules its operators apply.
    pub rules: Vec<OpRule>,
}

impl Program {
    /// `(repeat n body)`: this program applied `n` times.
    pub fn repeat(&self, n: u64) -> Program {
        let mut expr = self.expr.clone();
        let body = expr.root();
        let count = expr.add(Dist::Num(n));
        expr.add(Dist::Repeat([count, body]));
        Program {
            expr,
            labels: self.labels.clone(),
            rules: self.rules.clone(),
        }
    }
}

/// The analysis a block's program is checked under: its rules, a one-axis mesh.
pub fn block_analysis(model: &Model, block: &Block, axis: &str, size: Poly) -> DistAnalysis {
    let mut rules: BTreeMap<String, OpRule> = BTreeMap::new();
    for op in block.ops() {
        rules.insert(op.rule.name.clone(), (*op.rule).clone());
    }
    DistAnalysis::new(
        rules.into_values(),
        Mesh::new([(axis.to_string(), size)]),
        model.dtype_bytes,
    )
}

struct Builder<'a> {
    ctx: &'a DistAnalysis,
    axis: String,
    expr: RecExpr<Dist>,
    memo: HashMap<Dist, Id>,
    metas: Vec<Meta>,
}

impl Builder<'_> {
    fn add(&mut self, n: Dist) -> Id {
        if let Some(id) = self.memo.get(&n) {
            return *id;
        }
        let metas = &self.metas;
        let m = self.ctx.infer(&n, |c| &metas[usize::from(c)]);
        let id = self.expr.add(n.clone());
        self.metas.push(m);
        self.memo.insert(n, id);
        id
    }

    fn placement(&self, x: Id) -> std::result::Result<(Vec<Poly>, Placement), RewriteError> {
        let t = self.metas[usize::from(x)].tensor()?;
        Ok((t.shape.clone(), t.placements[0]))
    }

    fn tensor(&mut self, name: &str, shape: &[Poly], dtype: Dtype) -> Id {
        let n = self.add(Dist::Name(Symbol::from(name)));
        let elem_bytes = match dtype {
            Dtype::Fixed(b) if b != self.ctx.compute_bytes => Some(b),
            _ => None,
        };
        let s = self.add(Dist::Shape(shape_lit(shape, elem_bytes)));
        self.add(Dist::Tensor([n, s]))
    }

    /// The block input `in`, split on dimension `shard` when the layout hands it over so.
    fn block_input(&mut self, shape: &[Poly], dtype: Dtype, shard: Option<usize>) -> Id {
        let n = self.add(Dist::Name(Symbol::from("in")));
        let mut lit = shape_lit(shape, None);
        if let Dtype::Fixed(b) = dtype {
            lit.elem_bytes = (b != self.ctx.compute_bytes).then_some(b);
        }
        lit.shard = shard.filter(|d| *d < shape.len());
        let s = self.add(Dist::Shape(lit));
        self.add(Dist::Tensor([n, s]))
    }

    /// `x` moved to placement `want` with the cheapest collective that does it.
    fn fix(
        &mut self,
        x: Id,
        cur: Placement,
        want: Placement,
    ) -> std::result::Result<Id, RewriteError> {
        use Placement::*;
        let a = self.add(axis_leaf(&self.axis));
        Ok(match (cur, want) {
            _ if cur == want => x,
            (Replicate, Shard(d)) => {
                let d = self.add(Dist::Num(d as u64));
                self.add(Dist::Shard([x, d, a]))
            }
            (Replicate, Partial(ReduceOp::Sum)) => self.add(Dist::Partial([x, a])),
            (Shard(d), Replicate) => {
                let d = self.add(Dist::Num(d as u64));
                self.add(Dist::AllGather([x, d, a]))
            }
            (Shard(i), Shard(j)) => {
                let (i, j) = (self.add(Dist::Num(i as u64)), self.add(Dist::Num(j as u64)));
                self.add(Dist::AllToAll([x, i, j, a]))
            }
            (Partial(ReduceOp::Sum), Replicate) => self.add(Dist::AllReduce([x, a])),
            (Partial(ReduceOp::Max), Replicate) => self.add(Dist::AllReduceMax([x, a])),
            (Partial(ReduceOp::Sum), Shard(d)) => {
                let d = self.add(Dist::Num(d as u64));
                self.add(Dist::ReduceScatter([x, d, a]))
            }
            (Shard(_), Partial(ReduceOp::Sum)) => {
                let r = self.fix(x, cur, Replicate)?;
                return self.fix(r, Replicate, want);
            }
            _ => {
                return Err(RewriteError::Unreachable {
                    from: cur,
                    to: want,
                })
            }
        })
    }

    /// `x` as a tensor of `shape` placed `want`: a view where the layout differs.
    fn coerce(
        &mut self,
        x: Id,
        want: Placement,
        shape: &[Poly],
    ) -> std::result::Result<Id, RewriteError> {
        let (have, mut cur) = self.placement(x)?;
        let mut x = x;
        if have != shape {
            let mut map = DimMap::default();
            match (cur, want) {
                (Placement::Shard(d), Placement::Shard(e)) => {
                    map.0.insert(d, e);
                }
                (Placement::Shard(_), _) => {
                    x = self.fix(x, cur, Placement::Replicate)?;
                }
                _ => {}
            }
            let s = self.add(Dist::Shape(shape_lit(shape, None)));
            let m = self.add(Dist::Layout(map));
            x = self.add(Dist::View([x, s, m]));
            cur = self.placement(x)?.1;
        }
        self.fix(x, cur, want)
    }
}

fn shape_lit(shape: &[Poly], elem_bytes: Option<u32>) -> ShapeLit {
    ShapeLit {
        dims: shape.iter().cloned().map(Dim).collect(),
        elem_bytes,
        shard: None,
    }
}

/// The placement an operator split on `tp` wants for input `k` on the tensor-parallel axis.
fn wanted(rule: &OpRule, t: &Tensor, k: usize, tp: Option<&str>) -> Placement {
    let Some(i) = tp else {
        return Placement::Replicate;
    };
    match t.position(i) {
        Some(d) => Placement::Shard(d),
        None if rule
            .index(i)
            .is_some_and(|x| x.kind == IndexKind::ReduceSum)
            && !term_has(rule, k, i) =>
        {
            Placement::Partial(ReduceOp::Sum)
        }
        None => Placement::Replicate,
    }
}

/// The tensor-parallel program of `block` on axis `axis` of `ctx`'s mesh: inputs, parameters and
/// the block input (`in`) whole on every device, the output whole again at the end.
pub fn block_program(model: &Model, bi: usize, ctx: &DistAnalysis, axis: &str) -> Result<Program> {
    build_program(model, bi, ctx, axis, None, &|op| op.tp.clone())
}

/// The dimension of the output of `model`'s block `bi` that `layout` splits on the
/// tensor-parallel axis: how the layer's output, hence the next layer's input, is handed over.
pub fn boundary_shard(model: &Model, bi: usize, layout: &Layout) -> Option<usize> {
    let block = model.blocks.get(bi)?;
    let out = block.output.or_else(|| block.order.last().copied())?;
    let op = &block.graph[out];
    let (i, _) = plan(op, layout, model).tp?;
    op.rule.output.position(&i)
}

/// [`block_program`] under `layout`: each operator split on the index its
/// [`plan`] gives the tensor-parallel axis (an auto layout's
/// placements, where the model has no `tp:` marks), so that the program carries the collectives
/// that layout prices. The block input arrives split on dimension `boundary` (as
/// [`boundary_shard`] gives it: the previous layer's output as the layout leaves it) and the
/// output leaves so, so that moving the input's split costs what the layout's evaluation charges.
pub fn block_program_in(
    model: &Model,
    bi: usize,
    ctx: &DistAnalysis,
    axis: &str,
    layout: &Layout,
    boundary: Option<usize>,
) -> Result<Program> {
    build_program(model, bi, ctx, axis, boundary, &|op| {
        plan(op, layout, model).tp.map(|(i, _)| i)
    })
}

fn build_program(
    model: &Model,
    bi: usize,
    ctx: &DistAnalysis,
    axis: &str,
    boundary: Option<usize>,
    tp_index: &dyn Fn(&OpNode) -> Option<String>,
) -> Result<Program> {
    let block = model
        .blocks
        .get(bi)
        .ok_or_else(|| Error::Internal(format!("model `{}` has no block {bi}", model.name)))?;
    let mut b = Builder {
        ctx,
        axis: axis.to_string(),
        expr: RecExpr::default(),
        memo: HashMap::new(),
        metas: Vec::new(),
    };
    let err = |op: &str, why: RewriteError| {
        Error::Usage(format!("block `{}`, operator `{op}`: {why}", block.name))
    };
    let mut values: HashMap<petgraph::graph::NodeIndex, Id> = HashMap::new();
    let mut labels = BTreeMap::new();
    let mut block_in: Option<Id> = None;
    for &node in &block.order {
        let op = &block.graph[node];
        let rule = &op.rule;
        let tp_owned = tp_index(op);
        let tp = tp_owned.as_deref();
        let mut kids = op_head(&mut b, op, tp, axis);
        let at = Producing {
            model,
            bi,
            values: &values,
            boundary,
        };
        for (k, (iname, _)) in op.inputs.iter().enumerate() {
            let t = &rule.inputs[k];
            let shape = op.shape(t);
            let x = at
                .tensor(&mut b, op, k, &shape, &mut block_in)
                .map_err(|why| err(&op.name, why))?;
            let x = b.coerce(x, wanted(rule, t, k, tp), &shape).map_err(|why| {
                err(
                    &op.name,
                    RewriteError::Input {
                        input: iname.to_string(),
                        why: Box::new(why),
                    },
                )
            })?;
            kids.push(x);
        }
        let id = b.add(Dist::Op(kids.into()));
        if let Meta::Invalid(why) = &b.metas[usize::from(id)] {
            return Err(err(&op.name, why.clone()));
        }
        values.insert(node, id);
        labels.insert(id, op.name.clone());
    }
    let out = block
        .output
        .or_else(|| block.order.last().copied())
        .and_then(|n| values.get(&n).copied())
        .ok_or_else(|| Error::Usage(format!("block `{}` has no operators", block.name)))?;
    let (shape, _) = b.placement(out).map_err(|why| err("output", why))?;
    let end = match boundary.filter(|d| *d < shape.len()) {
        Some(d) => Placement::Shard(d),
        None => Placement::Replicate,
    };
    let mut root = b
        .coerce(out, end, &shape)
        .map_err(|why| err("output", why))?;
    // Operators the output does not depend on still run: sequence them before it.
    let reach = reachable(&b.expr, root);
    for (&id, _) in labels.iter().filter(|(id, _)| !reach[usize::from(**id)]) {
        root = b.add(Dist::Seq([id, root]));
    }
    Ok(Program {
        expr: b.expr,
        labels,
        rules: ctx.rules().cloned().collect(),
    })
}

/// The first children of an operator's node: its rule's name, its extents, and the mark of a
/// statistics or halo index it is split on (`tp`, on `axis`).
fn op_head(b: &mut Builder, op: &OpNode, tp: Option<&str>, axis: &str) -> Vec<Id> {
    let rule = &op.rule;
    let mut kids = vec![
        b.add(Dist::Name(Symbol::from(rule.name.as_str()))),
        b.add(Dist::Extents(Extents(
            op.bind
                .iter()
                .map(|(k, v)| (k.clone(), Dim(v.clone())))
                .collect(),
        ))),
    ];
    let marks = match tp {
        Some(i)
            if rule
                .index(i)
                .is_some_and(|x| x.kind.law().finish.needs_mark()) =>
        {
            Marks::default().with(i, axis)
        }
        _ => Marks::default(),
    };
    kids.push(b.add(Dist::Marks(marks)));
    kids
}

/// Where the inputs of block `bi`'s operators come from while its program is built: the
/// values of the operators built so far, and the block input's split.
struct Producing<'a> {
    model: &'a Model,
    bi: usize,
    values: &'a HashMap<petgraph::graph::NodeIndex, Id>,
    boundary: Option<usize>,
}

impl Producing<'_> {
    /// The e-node of input `k` of `op` (of shape `shape`), read from its producer: an operator of this block
    /// built before it, a tensor of another block, a graph input, the block input (one e-node
    /// for every reader, in `block_in`), a parameter or buffer, or a tied parameter.
    fn tensor(
        &self,
        b: &mut Builder<'_>,
        op: &OpNode,
        k: usize,
        shape: &[Poly],
        block_in: &mut Option<Id>,
    ) -> std::result::Result<Id, RewriteError> {
        let (iname, producer) = &op.inputs[k];
        let t = &op.rule.inputs[k];
        Ok(match producer {
            Producer::Op {
                block: pb,
                node: pn,
            } if *pb == self.bi => *self
                .values
                .get(pn)
                .ok_or_else(|| RewriteError::InputLater(iname.to_string()))?,
            Producer::Op {
                block: pb,
                node: pn,
            } => {
                let p = self
                    .model
                    .blocks
                    .get(*pb)
                    .map(|blk| &blk.graph[*pn])
                    .ok_or_else(|| RewriteError::NoProducer(iname.to_string()))?;
                b.tensor(&p.name, &p.shape(&p.rule.output), p.rule.output.dtype)
            }
            Producer::GraphInput(name) => {
                let s = self
                    .model
                    .inputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_else(|| shape.to_vec());
                b.tensor(name, &s, t.dtype)
            }
            Producer::BlockInput => {
                *block_in.get_or_insert_with(|| b.block_input(shape, t.dtype, self.boundary))
            }
            Producer::Buffer | Producer::Param => {
                b.tensor(&format!("{}.{iname}", op.name), shape, t.dtype)
            }
            Producer::Tied(name) => b.tensor(name, shape, t.dtype),
        })
    }
}

fn reachable(expr: &RecExpr<Dist>, root: Id) -> Vec<bool> {
    let mut seen = vec![false; expr.len()];
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if !std::mem::replace(&mut seen[usize::from(id)], true) {
            todo.extend(expr[id].children().iter().copied());
        }
    }
    seen
}

/// How a placement list reads: `Shard(0)@tp`, or `whole` when replicated everywhere.
pub fn show_placement(ctx: &DistAnalysis, m: &Meta) -> String {
    let Ok(t) = m.tensor() else {
        return "invalid".into();
    };
    let parts: Vec<String> = t
        .placements
        .iter()
        .zip(ctx.mesh.axes())
        .filter(|(p, _)| **p != Placement::Replicate)
        .map(|(p, (a, _))| format!("{p}@{a}"))
        .collect();
    if parts.is_empty() {
        "whole".into()
    } else {
        parts.join(" ")
    }
}

fn arg(expr: &RecExpr<Dist>, id: Id) -> String {
    match &expr[id] {
        Dist::Tensor([name, _]) => expr[*name].to_string(),
        leaf if leaf.is_leaf() => leaf.to_string(),
        _ => format!("%{}", usize::from(id)),
    }
}

fn form(expr: &RecExpr<Dist>, node: &Dist, arg: &dyn Fn(Id) -> String) -> String {
    match node {
        Dist::Op(kids) if kids.len() >= 3 => {
            let marks = match &expr[kids[2]] {
                Dist::Marks(m) if !m.0.is_empty() => m.to_string(),
                _ => String::new(),
            };
            let ins: Vec<String> = kids[3..].iter().map(|&k| arg(k)).collect();
            format!("{}{marks}({})", expr[kids[0]], ins.join(", "))
        }
        other => {
            let name = other.to_string();
            let args: Vec<String> = other.children().iter().map(|&k| arg(k)).collect();
            format!("{name}({})", args.join(", "))
        }
    }
}

/// One line per computing node: `%12 = all_gather(%11, 0, tp)   [B*S, H] whole   # res2`.
pub fn render(ctx: &DistAnalysis, expr: &RecExpr<Dist>, labels: &BTreeMap<Id, String>) -> String {
    let metas = ctx.program_meta(expr);
    let mut out = String::new();
    for (id, node) in expr.items() {
        if node.is_leaf() || matches!(node, Dist::Tensor(_)) {
            continue;
        }
        let m = &metas[usize::from(id)];
        let shape = m.tensor().map(|t| show(&t.shape)).unwrap_or_default();
        let text = form(expr, node, &|k| arg(expr, k));
        let label = labels
            .get(&id)
            .map(|l| format!("   # {l}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "%{} = {text}   {shape} {}{label}\n",
            usize::from(id),
            show_placement(ctx, m)
        ));
    }
    out
}

/// The program as one nested expression: `all_gather(linear(x, shard(w, 1, a), ..), 1, a)`.
pub fn render_inline(expr: &RecExpr<Dist>) -> String {
    fn go(expr: &RecExpr<Dist>, id: Id) -> String {
        match &expr[id] {
            Dist::Tensor([name, _]) => expr[*name].to_string(),
            leaf if leaf.is_leaf() => leaf.to_string(),
            node => form(expr, node, &|k| go(expr, k)),
        }
    }
    go(expr, expr.root())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelLoader;

    #[test]
    fn a_gpt_layer_becomes_the_megatron_program() {
        let model = ModelLoader::embedded()
            .unwrap()
            .resolve("gpt2-124m")
            .unwrap();
        let bi = model.blocks.iter().position(|b| b.name == "layer").unwrap();
        let ctx = block_analysis(&model, &model.blocks[bi], "tp", Poly::symbol("t"));
        let p = block_program(&model, bi, &ctx, "tp").unwrap();
        let all_reduces = p
            .expr
            .as_ref()
            .iter()
            .filter(|n| matches!(n, Dist::AllReduce(_)))
            .count();
        assert_eq!(all_reduces, 2);
        let metas = ctx.program_meta(&p.expr);
        assert_eq!(show_placement(&ctx, metas.last().unwrap()), "whole");
        assert_eq!(p.labels.len(), model.blocks[bi].order.len());
        let text = render(&ctx, &p.expr, &p.labels);
        assert!(
            text.contains("= linear(") && text.contains("# out_proj"),
            "{text}"
        );
        assert!(render_inline(&p.expr).starts_with("add("));
    }
}
