//! A reference interpreter for distributed programs on a simulated mesh: every device's local
//! tensor, collectives executed literally, operators by their standard numeric definitions
//! (`kernels.rs`). Placements are tracked here independently of the library's analysis.

use super::kernels;
use super::tensor::T;
use egg::{Language, RecExpr};
use std::collections::{BTreeMap, HashMap};
use symshard::rewrite::Dist;
use symshard::rules::{IndexKind, OpRule, Placement, ReduceOp};

/// A mesh of named axes; devices are numbered row-major over the axes.
#[derive(Debug, Clone)]
pub struct SimMesh {
    pub axes: Vec<(String, usize)>,
}

impl SimMesh {
    pub fn devices(&self) -> usize {
        self.axes.iter().map(|(_, p)| p).product()
    }

    fn stride(&self, n: usize) -> usize {
        self.axes[n + 1..].iter().map(|(_, p)| p).product()
    }

    pub fn coord(&self, dev: usize, n: usize) -> usize {
        dev / self.stride(n) % self.axes[n].1
    }

    /// The devices that differ from `dev` only along axis `n`, in order along `n`.
    pub fn group(&self, dev: usize, n: usize) -> Vec<usize> {
        let base = dev - self.coord(dev, n) * self.stride(n);
        (0..self.axes[n].1)
            .map(|c| base + c * self.stride(n))
            .collect()
    }

    pub fn axis(&self, name: &str) -> Result<usize, String> {
        self.axes
            .iter()
            .position(|(a, _)| a == name)
            .ok_or_else(|| format!("no axis `{name}`"))
    }
}

/// A distributed value: a local tensor per device and a placement per axis.
#[derive(Debug, Clone)]
pub struct DVal {
    pub locals: Vec<T>,
    pub layout: Vec<Placement>,
}

/// A node's value.
#[derive(Debug, Clone)]
pub enum Val {
    Leaf(Dist),
    Tensor(DVal),
}

impl Val {
    pub fn tensor(&self) -> Result<&DVal, String> {
        match self {
            Val::Tensor(t) => Ok(t),
            Val::Leaf(l) => Err(format!("`{l}` is not a tensor")),
        }
    }
}

/// Everything one operator application needs: its rule, global extents, which index each axis
/// splits and which stat / window indices exchange statistics or halos on which axis.
pub struct OpCtx<'a> {
    pub rule: &'a OpRule,
    pub ext: BTreeMap<String, usize>,
    /// Index → the axis that splits it.
    pub split: BTreeMap<String, usize>,
    /// Index → the axis its statistics or halo cross.
    pub marks: BTreeMap<String, usize>,
    pub mesh: &'a SimMesh,
}

impl OpCtx<'_> {
    pub fn devices(&self) -> usize {
        self.mesh.devices()
    }

    pub fn e(&self, name: &str) -> usize {
        self.ext.get(name).copied().unwrap_or(1)
    }

    /// This device's extent of index `i`.
    pub fn local(&self, i: &str) -> usize {
        match self.split.get(i) {
            Some(&n) => self.e(i) / self.mesh.axes[n].1,
            None => self.e(i),
        }
    }

    /// The global position of this device's first element along index `i`.
    pub fn offset(&self, dev: usize, i: &str) -> usize {
        match self.split.get(i) {
            Some(&n) => self.mesh.coord(dev, n) * self.local(i),
            None => 0,
        }
    }

    /// Combines per-device partial statistics over the axes on which `indices` are marked.
    pub fn reduce(
        &self,
        indices: &[&str],
        mut vals: Vec<T>,
        op: ReduceOp,
    ) -> Result<Vec<T>, String> {
        for i in indices {
            let Some(&n) = self.marks.get(*i) else {
                continue;
            };
            let before = vals.clone();
            for (dev, v) in vals.iter_mut().enumerate() {
                let group = self.mesh.group(dev, n);
                let mut acc = before[group[0]].clone();
                for &g in &group[1..] {
                    acc = acc.zip(&before[g], |a, b| match op {
                        ReduceOp::Sum => a + b,
                        ReduceOp::Max => a.max(b),
                    })?;
                }
                *v = acc;
            }
        }
        Ok(vals)
    }

    /// Per device, the local input widened by its neighbours' rows along dimension `d` when the
    /// window index `i` exchanges halos, with the global row of its first row.
    pub fn halo(&self, vals: &[T], d: usize, i: &str) -> Result<Vec<(T, usize)>, String> {
        let mut out = Vec::new();
        for (dev, v) in vals.iter().enumerate() {
            let chunk = v.shape[d];
            match (self.split.get(i), self.marks.get(i)) {
                (None, _) => out.push((v.clone(), 0)),
                (Some(&n), None) => out.push((v.clone(), self.mesh.coord(dev, n) * chunk)),
                (Some(_), Some(&n)) => {
                    let c = self.mesh.coord(dev, n);
                    let group = self.mesh.group(dev, n);
                    let lo = c.saturating_sub(1);
                    let hi = (c + 1).min(group.len() - 1);
                    let parts: Vec<T> = (lo..=hi).map(|k| vals[group[k]].clone()).collect();
                    out.push((T::concat(&parts, d)?, lo * chunk));
                }
            }
        }
        Ok(out)
    }
}

/// The interpreter: rules, mesh and the global value of every named input.
pub struct Interp<'a> {
    pub rules: &'a BTreeMap<String, OpRule>,
    pub mesh: SimMesh,
    pub env: HashMap<String, T>,
}

impl Interp<'_> {
    pub fn eval(&self, expr: &RecExpr<Dist>) -> Result<Val, String> {
        let mut vals: Vec<Val> = Vec::new();
        for (_, node) in expr.items() {
            let kids: Vec<&Val> = node
                .children()
                .iter()
                .map(|c| &vals[usize::from(*c)])
                .collect();
            let v = self.eval_node(node, &kids)?;
            vals.push(v);
        }
        vals.pop().ok_or_else(|| "empty program".to_string())
    }

    fn num(v: &Val) -> Result<usize, String> {
        match v {
            Val::Leaf(Dist::Num(n)) => Ok(*n as usize),
            other => Err(format!("expected a number, got {other:?}")),
        }
    }

    fn axis(&self, v: &Val) -> Result<usize, String> {
        match v {
            Val::Leaf(Dist::Name(s)) => self.mesh.axis(s.as_str()),
            other => Err(format!("expected an axis, got {other:?}")),
        }
    }

    /// Each device's value combined with its group's along axis `n`.
    fn combine(&self, x: &DVal, n: usize, op: ReduceOp) -> Result<Vec<T>, String> {
        let mut out = Vec::new();
        for dev in 0..self.mesh.devices() {
            let group = self.mesh.group(dev, n);
            let mut acc = x.locals[group[0]].clone();
            for &g in &group[1..] {
                acc = acc.zip(&x.locals[g], |a, b| match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Max => a.max(b),
                })?;
            }
            out.push(acc);
        }
        Ok(out)
    }

    fn gather(&self, x: &DVal, n: usize, d: usize) -> Result<Vec<T>, String> {
        (0..self.mesh.devices())
            .map(|dev| {
                let parts: Vec<T> = self
                    .mesh
                    .group(dev, n)
                    .iter()
                    .map(|g| x.locals[*g].clone())
                    .collect();
                T::concat(&parts, d)
            })
            .collect()
    }

    fn chunk(&self, locals: &[T], n: usize, d: usize) -> Result<Vec<T>, String> {
        let p = self.mesh.axes[n].1;
        (0..self.mesh.devices())
            .map(|dev| locals[dev].chunk(d, p, self.mesh.coord(dev, n)))
            .collect()
    }

    pub fn eval_node(&self, node: &Dist, kids: &[&Val]) -> Result<Val, String> {
        if node.is_leaf() {
            return Ok(Val::Leaf(node.clone()));
        }
        let tensor = |k: usize| kids[k].tensor();
        let with = |x: &DVal, n: usize, want: Placement, locals: Vec<T>, to: Placement| {
            if x.layout[n] != want {
                return Err(format!("{node}: needs {want}, found {}", x.layout[n]));
            }
            let mut layout = x.layout.clone();
            layout[n] = to;
            Ok(Val::Tensor(DVal { locals, layout }))
        };
        use Placement::{Partial, Replicate, Shard};
        let sum = Partial(ReduceOp::Sum);
        match node {
            Dist::Tensor(_) => {
                let Val::Leaf(Dist::Name(name)) = kids[0] else {
                    return Err("tensor without a name".into());
                };
                let t = self
                    .env
                    .get(name.as_str())
                    .ok_or_else(|| format!("no value for `{name}`"))?;
                Ok(Val::Tensor(DVal {
                    locals: vec![t.clone(); self.mesh.devices()],
                    layout: vec![Replicate; self.mesh.axes.len()],
                }))
            }
            Dist::Shard(_) => {
                let (x, d, n) = (tensor(0)?, Self::num(kids[1])?, self.axis(kids[2])?);
                with(x, n, Replicate, self.chunk(&x.locals, n, d)?, Shard(d))
            }
            Dist::Replicate(_) => {
                let (x, n) = (tensor(0)?, self.axis(kids[1])?);
                with(x, n, Replicate, x.locals.clone(), Replicate)
            }
            Dist::Partial(_) => {
                let (x, n) = (tensor(0)?, self.axis(kids[1])?);
                let locals = (0..self.mesh.devices())
                    .map(|dev| match self.mesh.coord(dev, n) {
                        0 => x.locals[dev].clone(),
                        _ => x.locals[dev].map(|_| 0.0),
                    })
                    .collect();
                with(x, n, Replicate, locals, sum)
            }
            Dist::AllReduce(_) | Dist::AllReduceMax(_) => {
                let (x, n) = (tensor(0)?, self.axis(kids[1])?);
                let op = match node {
                    Dist::AllReduce(_) => ReduceOp::Sum,
                    _ => ReduceOp::Max,
                };
                with(x, n, Partial(op), self.combine(x, n, op)?, Replicate)
            }
            Dist::ReduceScatter(_) => {
                let (x, d, n) = (tensor(0)?, Self::num(kids[1])?, self.axis(kids[2])?);
                let summed = self.combine(x, n, ReduceOp::Sum)?;
                with(x, n, sum, self.chunk(&summed, n, d)?, Shard(d))
            }
            Dist::AllGather(_) => {
                let (x, d, n) = (tensor(0)?, Self::num(kids[1])?, self.axis(kids[2])?);
                with(x, n, Shard(d), self.gather(x, n, d)?, Replicate)
            }
            Dist::AllToAll(_) => {
                let x = tensor(0)?;
                let (i, j, n) = (
                    Self::num(kids[1])?,
                    Self::num(kids[2])?,
                    self.axis(kids[3])?,
                );
                let whole = self.gather(x, n, i)?;
                with(x, n, Shard(i), self.chunk(&whole, n, j)?, Shard(j))
            }
            Dist::Send(_) | Dist::Recv(_) => Ok(Val::Tensor(tensor(0)?.clone())),
            Dist::Seq(_) => Ok(Val::Tensor(tensor(1)?.clone())),
            Dist::Op(_) => self.op(kids),
            other => Err(format!("the interpreter does not run `{other}`")),
        }
    }

    fn op(&self, kids: &[&Val]) -> Result<Val, String> {
        let (
            Val::Leaf(Dist::Name(name)),
            Val::Leaf(Dist::Extents(ext)),
            Val::Leaf(Dist::Marks(marks)),
        ) = (kids[0], kids[1], kids[2])
        else {
            return Err("malformed op".into());
        };
        let rule = self
            .rules
            .get(name.as_str())
            .ok_or_else(|| format!("no rule `{name}`"))?;
        let mut extents = BTreeMap::new();
        for (k, v) in &ext.0 {
            let c =
                v.0.as_integer()
                    .ok_or_else(|| format!("extent `{k}` is not a number"))?;
            extents.insert(k.clone(), usize::try_from(c).map_err(|e| e.to_string())?);
        }
        let ins: Vec<&DVal> = kids[3..]
            .iter()
            .map(|v| v.tensor())
            .collect::<Result<_, _>>()?;
        let mut split = BTreeMap::new();
        for n in 0..self.mesh.axes.len() {
            for (k, x) in ins.iter().enumerate() {
                if let Placement::Shard(d) = x.layout[n] {
                    split.insert(rule.inputs[k].dims[d][0].clone(), n);
                }
            }
        }
        let mut mk = BTreeMap::new();
        for (i, a) in &marks.0 {
            mk.insert(i.clone(), self.mesh.axis(a)?);
        }
        let ctx = OpCtx {
            rule,
            ext: extents,
            split,
            marks: mk,
            mesh: &self.mesh,
        };
        let locals: Vec<Vec<T>> = ins.iter().map(|x| x.locals.clone()).collect();
        let out = kernels::run(&ctx, &locals)?;
        let mut layout = vec![Placement::Replicate; self.mesh.axes.len()];
        for (i, &n) in &ctx.split {
            layout[n] = match rule.output.position(i) {
                Some(d) => Placement::Shard(d),
                None => match rule.index(i).map(|x| x.kind) {
                    Some(IndexKind::ReduceSum) => Placement::Partial(ReduceOp::Sum),
                    Some(IndexKind::ReduceMax) => Placement::Partial(ReduceOp::Max),
                    _ => Placement::Replicate,
                },
            };
        }
        Ok(Val::Tensor(DVal {
            locals: out,
            layout,
        }))
    }

    /// The global tensor a distributed value stands for.
    pub fn denote(&self, x: &DVal) -> Result<T, String> {
        let mut vals: Vec<Option<T>> = x.locals.iter().cloned().map(Some).collect();
        for (n, p) in x.layout.iter().enumerate() {
            let mut next = vec![None; vals.len()];
            for dev in 0..vals.len() {
                if self.mesh.coord(dev, n) != 0 || vals[dev].is_none() {
                    continue;
                }
                let group: Vec<T> = self
                    .mesh
                    .group(dev, n)
                    .iter()
                    .map(|g| vals[*g].clone().ok_or("missing piece"))
                    .collect::<Result<_, _>>()?;
                next[dev] = Some(match p {
                    Placement::Shard(d) => T::concat(&group, *d)?,
                    Placement::Partial(op) => {
                        let mut acc = group[0].clone();
                        for g in &group[1..] {
                            acc = acc.zip(g, |a, b| match op {
                                ReduceOp::Sum => a + b,
                                ReduceOp::Max => a.max(b),
                            })?;
                        }
                        acc
                    }
                    Placement::Replicate => {
                        if group.iter().any(|g| !g.close(&group[0], 1e-9)) {
                            return Err("a replicated value differs between devices".into());
                        }
                        group[0].clone()
                    }
                });
            }
            vals = next;
        }
        vals.into_iter()
            .next()
            .flatten()
            .ok_or_else(|| "no value".to_string())
    }
}
