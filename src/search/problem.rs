//! A per-operator split search problem: the operators of one block (a DAG), a mesh of axes, for
//! every operator the ways of cutting its indices over each axis, every choice priced exactly
//! from [`rules::split::derive`](crate::rules::split::derive), and every edge priced by the
//! redistribution it needs, forward and backward, all in FLOP-equivalents (DESIGN §3).
//!
//! # What a shard cuts
//!
//! Operators read one logical tensor through differently shaped views: a linear's output
//! `[B*S, H]` is read by the attention scores as `[B, NH, 1, S, H/NH]`. Placements are therefore
//! compared by the *model dimension* a shard cuts, never by a rule's dimension number:
//!
//! * The extent of an index (its binding, a formula in the model's symbols) is split into
//!   **atoms**: a monomial without negative exponents gives one atom per symbol factor
//!   (`B*S` → `B`, `S`; `S^2` → `S`, `S`); a monomial with a negative exponent is one atom
//!   (`H/NH`, the head dimension); a sum gives its monomial content, atom by atom, and its
//!   remaining factor as one atom (`B*(S^2/P^2 + 1)` → `B`, `1 + S^2/P^2`). Constants are not
//!   atoms, except in a graph whose every size is a number, where a size is one atom and a
//!   shard is keyed by the period of the atom it cuts (see [`Problem::with_numeric_atoms`]).
//! * Two symbols are **decomposed** heads-major, the way attention lays them out: the hidden
//!   size `H` becomes `NH` then the head dimension (`D` when the model binds `D` with
//!   `H = NH·D`, else the atom `H/NH`), provided `NH` divides `H`; in a grouped-query model the
//!   query heads `NH` become `KV` then `NH/KV`, provided `KV` divides `NH`. A contiguous cut of
//!   `H` into `p` parts with `p | NH` is exactly a cut of the heads, so `q_proj`'s output split
//!   on its features and the scores split on their heads hold the same data.
//! * A tensor view lists its atoms dimension by dimension; a repeated atom is numbered by
//!   occurrence (`S#0` the queries, `S#1` the keys of a score matrix). The **key** of a shard is
//!   the atom it cuts with its occurrence number, e.g. `NH#0`.
//! * Cutting an index over an axis means choosing one atom of its extent; the axis size (times
//!   the sizes of the other axes cutting the same atom) must divide the atom's value.
//! * An edge whose producer and consumer views hold different atom multisets (a broadcast, a
//!   split) is *incompatible*: a shard on one side never equals a shard on the other, so any
//!   sharded placement is redistributed. This is conservative, never optimistic.
//!
//! The soundness assumption is that views of one tensor list equal atoms in the same order
//! (the shipped families reshape but never permute two dimensions of one symbol).
//!
//! # Costs
//!
//! A choice gives each mesh axis one cut (or none: replicate). Its cost is the forward and
//! backward FLOPs per device plus `κ_axis` × the wire bytes of the collectives the law table
//! requires, except those that edges resolve (the all-reduce of a partial output and the
//! reduction of an input gradient). Edges are priced per producer, the way
//! [`analyse`](crate::parallel::analyse) prices them: each distinct placement the consumers
//! read costs one conversion from the producer's placement (`Partial→Replicate` all-reduce,
//! `Partial→Shard` reduce-scatter, `Shard→Replicate` all-gather, `Shard→Shard'` all-to-all,
//! `Replicate→*` free); in the backward pass partial input gradients are summed locally and
//! reduced once, and each distinct sharded gradient placement is converted once. Conversions on
//! one axis move the tensor as sharded by the producer's other axes. An output nobody reads that
//! is still partial pays its all-reduce.

use super::error::SearchError;
use crate::calib::Calibration;
use crate::model::{Model, OpNode, Producer};
use crate::rules::law::CollectiveKind;
use crate::rules::rule::tensor_bytes;
use crate::rules::split::{derive, AxisSplit, Placement};
use crate::rules::{OpRule, Tensor};
use crate::strategy::{Mesh, Tier};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, ToPrimitive, Zero};
use petgraph::graph::NodeIndex;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

/// One mesh axis of a search problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Its name (used in labels).
    pub name: String,
    /// Devices along it.
    pub size: u64,
    /// Machine balance of its link tier: FLOP-equivalents per byte.
    pub kappa: Rational,
}

impl Axis {
    /// An axis of `size` devices on `tier` of `calib`.
    pub fn on_tier(name: &str, size: u64, tier: Tier, calib: &Calibration) -> Axis {
        Axis {
            name: name.to_string(),
            size,
            kappa: calib.balance(tier),
        }
    }

    /// The `k` binary axes of a recursive bisection of `2^k` devices in nodes of
    /// `gpus_per_node`: the first halving separates the most distant devices, so it is
    /// inter-node whenever the halves lie on different nodes.
    pub fn bisection(k: u32, gpus_per_node: u64, calib: &Calibration) -> Vec<Axis> {
        (0..k)
            .map(|r| {
                let stride = 1u64 << (k - 1 - r);
                let tier = if stride >= gpus_per_node.max(1) {
                    Tier::Inter
                } else {
                    Tier::Intra
                };
                Axis::on_tier(&format!("h{r}"), 2, tier, calib)
            })
            .collect()
    }
}

/// Where a tensor lives along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AxisPlace {
    /// Whole on every device of the axis.
    Replicate,
    /// Whole size, awaiting a sum.
    Partial,
    /// Cut along the atom with this key (see [`Problem::key_name`]).
    Shard(u32),
}

/// One way of cutting an operator over one axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cut {
    /// The rule index cut (empty for a source's placement).
    pub index: String,
    /// The atom of the index's extent it cuts.
    pub atom: String,
    /// Which atom of the index's extent (0-based).
    occurrence: usize,
    /// The atom's value.
    value: u64,
    /// For sources: the placement this cut gives.
    place: AxisPlace,
}

impl Cut {
    /// The placement a source's cut gives (`Replicate` for an operator's cut).
    pub fn place(&self) -> AxisPlace {
        self.place
    }

    /// The value of the atom it cuts: the product of the axes cutting it must divide it.
    pub fn value(&self) -> u64 {
        self.value
    }
}

/// An operator's bindings: rule index or parameter → formula in the model's symbols.
type Bind = BTreeMap<String, Poly>;

/// The views made while building a problem, by (rule, tensor position, bindings): the
/// operators of one kind share theirs. Keyed by the addresses of the rule and bindings, which
/// it keeps alive.
#[derive(Default)]
struct Views(HashMap<(usize, usize, usize), SharedView>);

/// A view made, with the rule and bindings it was made of.
type SharedView = (Arc<OpRule>, Arc<Bind>, Arc<View>);

/// A tensor view: the key of every atom occurrence of every index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct View {
    /// Index → keys of its atoms in this view (None where the index's extent differs here).
    by_index: BTreeMap<String, Vec<Option<u32>>>,
    /// Sorted atom names, to compare views.
    multiset: Vec<String>,
}

/// One index of a rule tensor, as a view sees it.
struct ViewDim<'a> {
    index: &'a str,
    /// Whether the index is a dimension of its own here (its extent not a formula in others).
    own: bool,
    /// The atoms of its extent.
    atoms: Vec<(String, Poly)>,
}

/// What an operator is.
#[derive(Debug, Clone)]
enum Kind {
    Rule {
        rule: Arc<OpRule>,
        bind: Arc<Bind>,
        /// Per input: a parameter tied to another operator's (its gradient is reduced there).
        tied: Vec<bool>,
    },
    /// A tensor entering the problem with a chosen placement: the block input, or an operator
    /// of another block.
    Source,
}

/// An operator input.
#[derive(Debug, Clone)]
pub struct Input {
    /// The rule's input name.
    pub name: String,
    /// The producing operator in the problem, if any (parameters and graph inputs have none).
    pub from: Option<usize>,
    /// Whether a gradient flows back to the producer.
    pub grad: bool,
    view: Arc<View>,
}

/// One operator of a problem.
#[derive(Debug, Clone)]
pub struct Op {
    /// Its name.
    pub name: String,
    kind: Kind,
    /// Inputs, in the rule's order.
    pub inputs: Vec<Input>,
    /// The cuts available on every axis.
    pub cuts: Vec<Cut>,
    /// Whole output bytes.
    pub out_bytes: Rational,
    out_view: Arc<View>,
    /// If set, the only choice allowed (a fixed source).
    only: Option<Vec<Option<usize>>>,
    /// Whether a partial output nobody reads must still be all-reduced.
    pub terminal: bool,
}

impl Op {
    /// Whether it is a source (no rule).
    pub fn is_source(&self) -> bool {
        matches!(self.kind, Kind::Source)
    }

    /// The rule's name (`source` for sources).
    pub fn rule_name(&self) -> &str {
        match &self.kind {
            Kind::Rule { rule, .. } => &rule.name,
            Kind::Source => "source",
        }
    }
}

/// A choice of one operator: a cut (index into [`Op::cuts`]) or none, per axis.
pub type Choice = Vec<Option<usize>>;

/// A choice for every operator.
pub type Assignment = Vec<Choice>;

/// What a consumer needs of one input on one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Need {
    /// The placement the forward pass reads.
    pub want: AxisPlace,
    /// The placement of the gradient it sends back (None: no gradient).
    pub grad: Option<AxisPlace>,
}

/// A choice, priced.
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    /// FLOP-equivalents of the operator itself.
    pub cost: Rational,
    /// Output placement per axis.
    pub out: Vec<AxisPlace>,
    /// Per input with a producer in the problem: what it needs per axis.
    pub needs: Vec<Option<Vec<Need>>>,
}

/// One conversion paid once per producer: on `axis`, forward (`grad == false`) to `place`, or
/// backward from `place`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Facility {
    /// The axis.
    pub axis: usize,
    /// Backward (a gradient arriving as `place`) rather than forward (read as `place`).
    pub grad: bool,
    /// The placement.
    pub place: AxisPlace,
}

/// The facilities a consumer's needs of one input open.
pub fn facilities(needs: &[Need]) -> impl Iterator<Item = Facility> + '_ {
    needs.iter().enumerate().flat_map(|(axis, n)| {
        let f = Facility {
            axis,
            grad: false,
            place: n.want,
        };
        let b = n.grad.map(|place| Facility {
            axis,
            grad: true,
            place,
        });
        std::iter::once(f).chain(b)
    })
}

/// The operators anything reads, model-wide: (block, node).
fn read_anywhere(model: &Model) -> std::collections::BTreeSet<(usize, NodeIndex)> {
    let mut read: std::collections::BTreeSet<(usize, NodeIndex)> = Default::default();
    for (b, blk) in model.blocks.iter().enumerate() {
        for n in blk.ops() {
            for (_, prod) in &n.inputs {
                match prod {
                    Producer::Op { block, node } => {
                        read.insert((*block, *node));
                    }
                    Producer::BlockInput => {
                        if let Some(o) = blk.output {
                            read.insert((b, o));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    read
}

/// A search problem.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Its name.
    pub name: String,
    /// Operators (not necessarily in topological order).
    pub ops: Vec<Op>,
    /// The mesh axes.
    pub axes: Vec<Axis>,
    /// Symbol values.
    pub values: Bindings,
    /// Bytes of a compute element.
    pub dtype_bytes: u32,
    /// For a repeated block: (source standing for the block input, operator producing the block
    /// output); the two must have the same placement.
    pub cycle: Option<(usize, usize)>,
    /// κ_hbm, FLOP-equivalents per byte of HBM traffic: what the memory-bound (not matmul-like)
    /// operators' bytes cost, as the relative cost prices them (zero: FLOPs only).
    pub hbm_kappa: Rational,
    /// Whether a loss over the logits runs as separate fp32 passes (the model's
    /// [`crate::model::LossMode::Fp32`]) and its evaluations as training metrics per
    /// micro-batch: bytes the loss moves beyond its own, priced with the rest at κ_hbm.
    pub loss_passes: (bool, u32),
    keys: Vec<String>,
    key_ids: HashMap<String, u32>,
    decomp: BTreeMap<String, Vec<(String, Poly)>>,
    /// Whether a number is an atom (a graph whose every size is a number; see
    /// [`Problem::with_numeric_atoms`]).
    numeric: bool,
}

/// How a source may be placed.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceMode {
    /// Any shard or replicate on each axis.
    Free,
    /// Any placement, partial included (a boundary whose producer may leave a partial sum).
    FreeOrPartial,
    /// Exactly these placements, by label per axis (`R`, `P`, `S(atom#n)`).
    Fixed(Vec<String>),
}

fn eval(p: &Poly, b: &Bindings) -> Result<Rational, SearchError> {
    Ok(p.eval(b)?)
}

fn positive_int(r: &Rational) -> Option<u64> {
    (r.is_integer() && *r > Rational::zero())
        .then(|| r.to_integer().to_u64())
        .flatten()
}

impl Problem {
    /// An empty problem over `axes` with symbol `values`. The model's roles say how the
    /// hidden size splits into heads and head dimensions, and the heads into key/value groups,
    /// for the per-operator search to cut at head boundaries.
    pub fn new(
        name: &str,
        axes: Vec<Axis>,
        values: Bindings,
        dtype_bytes: u32,
        roles: &crate::model::Roles,
    ) -> Problem {
        let mut decomp = BTreeMap::new();
        let int = |s: &str| values.get(s).and_then(positive_int);
        let role = |r: &Option<String>| r.clone().filter(|s| values.contains_key(s));
        let (hidden, heads) = (role(&roles.hidden), role(&roles.heads));
        let (head_dim, kv) = (role(&roles.head_dim), role(&roles.kv_heads));
        if let (Some(hs), Some(ns)) = (&hidden, &heads) {
            if let (Some(h), Some(nh)) = (int(hs), int(ns)) {
                if h % nh == 0 {
                    let hd = match head_dim.as_ref().and_then(|d| Some((d, int(d)?))) {
                        Some((ds, d)) if d * nh == h => (ds.clone(), Poly::symbol(ds)),
                        _ => {
                            let p = Poly::symbol(hs)
                                .checked_div(&Poly::symbol(ns))
                                .unwrap_or_else(|_| Poly::symbol(hs));
                            (p.to_string(), p)
                        }
                    };
                    decomp.insert(hs.clone(), vec![(ns.clone(), Poly::symbol(ns)), hd]);
                }
            }
        }
        if let (Some(ns), Some(ks)) = (&heads, &kv) {
            if let (Some(nh), Some(k)) = (int(ns), int(ks)) {
                if nh % k == 0 {
                    let p = Poly::symbol(ns)
                        .checked_div(&Poly::symbol(ks))
                        .unwrap_or_else(|_| Poly::symbol(ns));
                    decomp.insert(
                        ns.clone(),
                        vec![(ks.clone(), Poly::symbol(ks)), (p.to_string(), p)],
                    );
                }
            }
        }
        Problem {
            name: name.to_string(),
            ops: Vec::new(),
            axes,
            values,
            dtype_bytes,
            cycle: None,
            hbm_kappa: Rational::zero(),
            loss_passes: (false, 0),
            keys: Vec::new(),
            key_ids: HashMap::new(),
            decomp,
            numeric: false,
        }
    }

    /// The problem of a graph whose every size is a number (an ONNX export without dynamic
    /// axes): an extent that is a number of at least 2 is an atom of its own, and a view whose
    /// atoms are all numbers keys each atom by its *period*, the elements of its dimension and
    /// of every dimension inside it. A contiguous cut into `p` parts of an atom of period `T`
    /// (with `p` dividing the atom) gives device `j` the elements whose flat position modulo
    /// `T` lies in the `j`-th of `p` equal blocks, whatever the view: the hidden size 64 of a
    /// `[64, 64]` projection output cut in 4 holds the same data as the 4 heads of its
    /// `[64, 4, 16]` reshape cut in 4, and the two share one key. Views of one tensor are
    /// compared by their element count (a reshape keeps the order of the elements).
    /// Which dimension is a batch is not needed: a cut costs what the index kinds of its
    /// operator say.
    pub fn with_numeric_atoms(mut self) -> Problem {
        self.numeric = true;
        self
    }

    /// The name of a shard key, `atom#occurrence` (`@period#0` in a graph of numbers).
    pub fn key_name(&self, key: u32) -> &str {
        self.keys
            .get(key as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    fn intern(&mut self, name: String) -> u32 {
        if let Some(&k) = self.key_ids.get(&name) {
            return k;
        }
        let k = self.keys.len() as u32;
        self.keys.push(name.clone());
        self.key_ids.insert(name, k);
        k
    }

    /// The atoms of an extent formula, in order (see the module documentation).
    pub fn atoms(&self, p: &Poly) -> Vec<(String, Poly)> {
        let mut out = Vec::new();
        if p.is_constant() {
            if self.numeric && p.as_constant().as_ref().and_then(positive_int) >= Some(2) {
                out.push((p.to_string(), p.clone()));
            }
            return out;
        }
        let terms: Vec<_> = p.terms().collect();
        if terms.len() == 1 {
            let m = terms[0].0;
            if m.iter().any(|(_, e)| e < 0) {
                let mono = Poly::monomial(Rational::one(), m.clone());
                out.push((mono.to_string(), mono));
                return out;
            }
            for (s, e) in m.iter() {
                for _ in 0..e {
                    self.push_symbol(s, &mut out);
                }
            }
            return out;
        }
        let mut rest = p.clone();
        for s in p.symbols() {
            let e = terms.iter().map(|(m, _)| m.exponent(&s)).min().unwrap_or(0);
            if e > 0 {
                for _ in 0..e {
                    self.push_symbol(&s, &mut out);
                }
                if let Ok(q) = Poly::symbol(&s).pow(e).and_then(|d| rest.checked_div(&d)) {
                    rest = q;
                }
            }
        }
        if !rest.is_constant() {
            // Drop a numeric content so that `2*x + 2` and `x + 1` name one atom.
            out.push((rest.to_string(), rest));
        }
        out
    }

    fn push_symbol(&self, s: &str, out: &mut Vec<(String, Poly)>) {
        match self.decomp.get(s) {
            Some(parts) => {
                for (name, poly) in parts {
                    if name != s && self.decomp.contains_key(name.as_str()) {
                        self.push_symbol(name, out);
                    } else {
                        out.push((name.clone(), poly.clone()));
                    }
                }
            }
            None => out.push((s.to_string(), Poly::symbol(s))),
        }
    }

    /// The view of rule tensor `t` of an operator bound by `bind`.
    fn view(&mut self, t: &Tensor, bind: &BTreeMap<String, Poly>) -> Result<View, SearchError> {
        let mut dims = Vec::new();
        for i in t.indices() {
            let extent = t.extent(i);
            let formula = extent
                .substitute_all(bind)
                .map_err(|why| SearchError::Extent {
                    index: i.to_string(),
                    why,
                })?;
            dims.push(ViewDim {
                index: i,
                own: extent == Poly::symbol(i),
                atoms: self.atoms(&formula),
            });
        }
        if let Some(v) = self.numeric_view(&dims) {
            return Ok(v);
        }
        let mut v = View::default();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for ViewDim { index, own, atoms } in dims {
            let mut keys = Vec::new();
            for (name, _) in atoms {
                let n = seen.entry(name.clone()).or_insert(0);
                let key = format!("{name}#{n}");
                *n += 1;
                v.multiset.push(name);
                keys.push(own.then(|| self.intern(key)));
            }
            v.by_index.insert(index.to_string(), keys);
        }
        v.multiset.sort();
        Ok(v)
    }

    /// The view of a tensor whose atoms are all numbers, in a problem of numeric atoms: each
    /// atom keyed by its period (`@T#0`), the tensor compared by its element count (see
    /// [`Problem::with_numeric_atoms`]). None where that does not apply.
    fn numeric_view(&mut self, dims: &[ViewDim]) -> Option<View> {
        if !self.numeric {
            return None;
        }
        let values = dims
            .iter()
            .flat_map(|d| &d.atoms)
            .map(|(_, p)| p.as_constant().as_ref().and_then(positive_int))
            .collect::<Option<Vec<u64>>>()?;
        let mut period = values.iter().try_fold(1u64, |acc, v| acc.checked_mul(*v))?;
        let mut v = View {
            multiset: vec![format!("{period} elements")],
            ..View::default()
        };
        let mut value = values.into_iter();
        for d in dims {
            let mut keys = Vec::new();
            for _ in &d.atoms {
                keys.push(d.own.then(|| self.intern(format!("@{period}#0"))));
                period /= value.next()?;
            }
            v.by_index.insert(d.index.to_string(), keys);
        }
        Some(v)
    }

    /// A view whose shards match no other tensor's (an incompatible edge).
    fn foreign(&mut self, v: &View, tag: &str) -> View {
        let mut f = v.clone();
        for (i, keys) in f.by_index.iter_mut() {
            for (n, k) in keys.iter_mut().enumerate() {
                if k.is_some() {
                    *k = Some(self.intern(format!("?{tag}.{i}#{n}")));
                }
            }
        }
        f
    }

    /// Adds an operator applying `rule` with `bind`; `inputs` gives, per rule input, its
    /// producer in the problem (None for parameters, buffers and graph inputs); `tied` marks
    /// parameters owned by another operator. Returns its position.
    pub fn add_rule_op(
        &mut self,
        name: &str,
        rule: impl Into<Arc<OpRule>>,
        bind: impl Into<Arc<Bind>>,
        inputs: &[Option<usize>],
        tied: &[bool],
    ) -> Result<usize, SearchError> {
        let (rule, bind) = (rule.into(), bind.into());
        self.add_shared_rule_op(name, rule, bind, inputs, tied, &mut Views::default())
    }

    /// The view of tensor `k` of `rule` (its output for `usize::MAX`) bound by `bind`, made
    /// once per kind of operator.
    fn shared_view(
        &mut self,
        views: &mut Views,
        rule: &Arc<OpRule>,
        k: usize,
        bind: &Arc<Bind>,
    ) -> Result<Arc<View>, SearchError> {
        let key = (Arc::as_ptr(rule) as usize, k, Arc::as_ptr(bind) as usize);
        if let Some((_, _, v)) = views.0.get(&key) {
            return Ok(v.clone());
        }
        let t = if k == usize::MAX {
            &rule.output
        } else {
            &rule.inputs[k]
        };
        let v = Arc::new(self.view(t, bind)?);
        views.0.insert(key, (rule.clone(), bind.clone(), v.clone()));
        Ok(v)
    }

    /// [`Problem::add_rule_op`] with the views of earlier operators of its kind.
    fn add_shared_rule_op(
        &mut self,
        name: &str,
        rule: Arc<OpRule>,
        bind: Arc<Bind>,
        inputs: &[Option<usize>],
        tied: &[bool],
        views: &mut Views,
    ) -> Result<usize, SearchError> {
        if inputs.len() != rule.inputs.len() {
            return Err(SearchError::InputCount {
                op: name.into(),
                given: inputs.len(),
                rule: rule.name.clone(),
                expected: rule.inputs.len(),
            });
        }
        let out_view = self.shared_view(views, &rule, usize::MAX, &bind)?;
        let out_bytes = eval(
            &tensor_bytes(&rule.output, self.dtype_bytes).substitute_all(&bind)?,
            &self.values,
        )?;
        let mut ins = Vec::new();
        for (k, t) in rule.inputs.iter().enumerate() {
            let from = inputs[k];
            if let Some(p) = from {
                if p >= self.ops.len() {
                    return Err(SearchError::UnknownProducer {
                        op: name.into(),
                        input: t.name.clone(),
                        producer: p,
                    });
                }
            }
            let mut view = self.shared_view(views, &rule, k, &bind)?;
            if let Some(p) = from {
                if self.ops[p].out_view.multiset != view.multiset {
                    view = Arc::new(self.foreign(&view, &format!("{name}.{}", t.name)));
                }
            }
            ins.push(Input {
                name: t.name.clone(),
                from,
                grad: t.grad && !t.param,
                view,
            });
        }
        let mut cuts = Vec::new();
        for ix in rule.indices.iter().filter(|i| i.kind.law().splittable) {
            let Some(b) = bind.get(&ix.name) else {
                continue;
            };
            for (occurrence, (atom, poly)) in self.atoms(b).into_iter().enumerate() {
                let Some(value) = eval(&poly, &self.values)
                    .ok()
                    .and_then(|v| positive_int(&v))
                else {
                    continue;
                };
                if value >= 2 {
                    cuts.push(Cut {
                        index: ix.name.clone(),
                        atom,
                        occurrence,
                        value,
                        place: AxisPlace::Replicate,
                    });
                }
            }
        }
        let mut tied_v = tied.to_vec();
        tied_v.resize(rule.inputs.len(), false);
        self.ops.push(Op {
            name: name.to_string(),
            kind: Kind::Rule {
                rule,
                bind,
                tied: tied_v,
            },
            inputs: ins,
            cuts,
            out_bytes,
            out_view,
            only: None,
            terminal: true,
        });
        Ok(self.ops.len() - 1)
    }

    /// Adds a source: a tensor shaped like the output of `rule` bound by `bind`, entering with
    /// a placement chosen as `mode` says. Returns its position.
    pub fn add_source(
        &mut self,
        name: &str,
        rule: &OpRule,
        bind: &BTreeMap<String, Poly>,
        mode: SourceMode,
    ) -> Result<usize, SearchError> {
        let out_view = Arc::new(self.view(&rule.output, bind)?);
        let out_bytes = eval(
            &tensor_bytes(&rule.output, self.dtype_bytes).substitute_all(bind)?,
            &self.values,
        )?;
        let mut cuts = Vec::new();
        for (i, keys) in &out_view.by_index {
            let b = bind.get(i).cloned().unwrap_or_else(|| Poly::symbol(i));
            for (occurrence, ((atom, poly), key)) in
                self.atoms(&b).into_iter().zip(keys).enumerate()
            {
                let (Some(key), Some(value)) = (
                    key,
                    eval(&poly, &self.values)
                        .ok()
                        .and_then(|v| positive_int(&v)),
                ) else {
                    continue;
                };
                if value >= 2 {
                    cuts.push(Cut {
                        index: i.clone(),
                        atom,
                        occurrence,
                        value,
                        place: AxisPlace::Shard(*key),
                    });
                }
            }
        }
        if mode != SourceMode::Free {
            cuts.push(Cut {
                index: String::new(),
                atom: "partial".into(),
                occurrence: 0,
                value: u64::MAX,
                place: AxisPlace::Partial,
            });
        }
        let only = match &mode {
            SourceMode::Fixed(labels) => {
                if labels.len() != self.axes.len() {
                    return Err(SearchError::SourceLabels {
                        name: name.into(),
                        labels: labels.len(),
                    });
                }
                let mut choice = Vec::new();
                for l in labels {
                    let c = match l.as_str() {
                        "R" => None,
                        _ => {
                            let found = cuts.iter().position(|c| self.place_label(c.place) == *l);
                            Some(found.ok_or_else(|| SearchError::SourcePlacement {
                                name: name.into(),
                                label: l.clone(),
                            })?)
                        }
                    };
                    choice.push(c);
                }
                Some(choice)
            }
            _ => None,
        };
        self.ops.push(Op {
            name: name.to_string(),
            kind: Kind::Source,
            inputs: Vec::new(),
            cuts,
            out_bytes,
            out_view,
            only,
            terminal: false,
        });
        Ok(self.ops.len() - 1)
    }

    /// The label of one axis placement: `R`, `P` or `S(atom#n)`.
    pub fn place_label(&self, p: AxisPlace) -> String {
        match p {
            AxisPlace::Replicate => "R".into(),
            AxisPlace::Partial => "P".into(),
            AxisPlace::Shard(k) => format!("S({})", self.key_name(k)),
        }
    }

    /// The label of a placement on every axis, `|`-separated.
    pub fn label(&self, p: &[AxisPlace]) -> String {
        p.iter()
            .map(|&x| self.place_label(x))
            .collect::<Vec<_>>()
            .join("|")
    }

    /// Whether `choice` is allowed for operator `op`: a fixed source's one choice, and every
    /// cut atom divisible by the product of the axes cutting it.
    pub fn valid(&self, op: usize, choice: &[Option<usize>]) -> bool {
        let o = &self.ops[op];
        if choice.len() != self.axes.len() {
            return false;
        }
        if let Some(only) = &o.only {
            return only.as_slice() == choice;
        }
        let mut per: BTreeMap<usize, u64> = BTreeMap::new();
        for (a, c) in choice.iter().enumerate() {
            if let Some(c) = c {
                let Some(cut) = o.cuts.get(*c) else {
                    return false;
                };
                if o.is_source() && cut.place == AxisPlace::Partial {
                    continue;
                }
                let e = per.entry(*c).or_insert(1);
                *e = e.saturating_mul(self.axes[a].size);
                if cut.value % *e != 0 {
                    return false;
                }
            }
        }
        // Cuts of different atoms of one index divide the index's extent, a product of atoms.
        true
    }

    /// Turns a repeated block's problem into a standalone one: the source standing for the
    /// block input becomes a free input (shard or replicate, no partial sum) and the block
    /// output an output like any other.
    pub fn open_cycle(&mut self) {
        if let Some((s, e)) = self.cycle.take() {
            self.ops[s].cuts.retain(|c| c.place != AxisPlace::Partial);
            self.ops[e].terminal = true;
        }
    }

    /// The one choice a fixed source allows.
    pub fn choices_fixed(&self, op: usize) -> Option<&Choice> {
        self.ops.get(op).and_then(|o| o.only.as_ref())
    }

    /// Every valid choice of `op`: all combinations of a cut or none per axis, in order (the
    /// first axis most significant; none before the first cut before the second …).
    pub fn choices(&self, op: usize) -> Vec<Choice> {
        let mut out = Vec::new();
        self.each_choice(op, &mut |c| {
            out.push(c.to_vec());
            true
        });
        out
    }

    /// How many valid choices `op` has, if at most `most`: counted without listing them, so
    /// that a search can refuse a problem whose choices would not fit in memory (an operator
    /// with c cuts over k axes has up to (c + 1)^k).
    pub fn count_choices(&self, op: usize, most: usize) -> Option<usize> {
        let mut n = 0usize;
        self.each_choice(op, &mut |_| {
            n += 1;
            n <= most
        });
        (n <= most).then_some(n)
    }

    /// Visits the valid choices of `op` in the order of [`Problem::choices`] until `visit`
    /// returns false.
    fn each_choice(&self, op: usize, visit: &mut dyn FnMut(&[Option<usize>]) -> bool) {
        let o = &self.ops[op];
        if let Some(only) = &o.only {
            visit(only);
            return;
        }
        let mut choice = Vec::with_capacity(self.axes.len());
        let mut product = vec![1u64; o.cuts.len()];
        self.extend_choice(o, &mut choice, &mut product, visit);
    }

    /// Extends a valid prefix of a choice by one axis, depth first; false once `visit` said
    /// stop. A prefix whose cut no longer divides its atom is not extended: later axes only
    /// multiply the product each atom must be divisible by, so no extension is valid (the
    /// test of [`Problem::valid`], applied axis by axis).
    fn extend_choice(
        &self,
        o: &Op,
        choice: &mut Choice,
        product: &mut [u64],
        visit: &mut dyn FnMut(&[Option<usize>]) -> bool,
    ) -> bool {
        let a = choice.len();
        if a == self.axes.len() {
            return visit(choice);
        }
        for opt in std::iter::once(None).chain((0..o.cuts.len()).map(Some)) {
            let mut before = None;
            if let Some(c) = opt {
                let cut = &o.cuts[c];
                // A source's partial placement divides nothing.
                if !(o.is_source() && cut.place == AxisPlace::Partial) {
                    let e = product[c].saturating_mul(self.axes[a].size);
                    if !cut.value.is_multiple_of(e) {
                        continue;
                    }
                    before = Some(product[c]);
                    product[c] = e;
                }
            }
            choice.push(opt);
            let go = self.extend_choice(o, choice, product, visit);
            choice.pop();
            if let (Some(c), Some(b)) = (opt, before) {
                product[c] = b;
            }
            if !go {
                return false;
            }
        }
        true
    }

    /// The axis position of a split axis name (`x3` → 3).
    fn axis_of(name: &str) -> Option<usize> {
        name.strip_prefix('x')?.parse().ok()
    }

    /// Prices one choice of one operator exactly.
    pub fn price(&self, op: usize, choice: &[Option<usize>]) -> Result<Priced, SearchError> {
        let o = &self.ops[op];
        if !self.valid(op, choice) {
            return Err(SearchError::InvalidChoice {
                op: o.name.clone(),
                choice: format!("{choice:?}"),
            });
        }
        let (rule, bind, tied) = match &o.kind {
            Kind::Source => {
                let out = choice
                    .iter()
                    .map(|c| c.map_or(AxisPlace::Replicate, |c| o.cuts[c].place))
                    .collect();
                return Ok(Priced {
                    cost: Rational::zero(),
                    out,
                    needs: Vec::new(),
                });
            }
            Kind::Rule { rule, bind, tied } => (rule, bind, tied),
        };
        let mut splits = Vec::new();
        let mut cut_of = Vec::new();
        for (a, c) in choice.iter().enumerate() {
            if let Some(c) = c {
                let cut = &o.cuts[*c];
                splits.push(AxisSplit {
                    index: cut.index.clone(),
                    axis: format!("x{a}"),
                    size: Poly::int(self.axes[a].size as i64),
                });
                cut_of.push((a, cut));
            }
        }
        let entry = derive(rule, &splits, self.dtype_bytes).map_err(|e| SearchError::Derive {
            op: o.name.clone(),
            why: e.reason,
        })?;
        let f = |p: &Poly| -> Result<Rational, SearchError> {
            let m = p.substitute_all(bind)?;
            eval(&m, &self.values)
        };
        let mut cost = f(&entry.forward.compute)? + f(&entry.backward.compute)?;
        cost += self.hbm_cost(&o.name, rule, &splits, &f)?;
        cost += self.collective_cost(rule, tied, &entry, &f)?;
        let (out, needs) = self.placements(op, &cut_of, &entry);
        Ok(Priced { cost, out, needs })
    }

    /// A memory-bound operator's HBM traffic per device under `splits`, forward and backward,
    /// at κ_hbm (zero for a matmul or without κ_hbm); `f` evaluates a formula of the rule.
    fn hbm_cost(
        &self,
        op: &str,
        rule: &OpRule,
        splits: &[AxisSplit],
        f: &dyn Fn(&Poly) -> Result<Rational, SearchError>,
    ) -> Result<Rational, SearchError> {
        let mut cost = Rational::zero();
        if rule.class == crate::rules::FlopClass::Matmul || self.hbm_kappa.is_zero() {
            return Ok(cost);
        }
        let shares = || splits.iter().map(|s| (s.index.as_str(), s.size.clone()));
        let mut moved = vec![
            rule.io_bytes(self.dtype_bytes),
            rule.backward_io_bytes(self.dtype_bytes),
        ];
        if rule.fp32_passes {
            let (fp32, metrics) = self.loss_passes;
            let (f, b) = rule.loss_pass_bytes(self.dtype_bytes, fp32, metrics);
            moved.push((f + b, Poly::zero()));
        }
        for (r, w) in moved {
            let per = crate::parallel::analysis::per_device_bytes(&r, &w, shares())
                .map_err(|why| SearchError::Derive { op: op.into(), why })?;
            cost += &self.hbm_kappa * f(&per)?;
        }
        Ok(cost)
    }

    /// The collectives of a split entry at each axis's κ, except those the edges resolve: the
    /// all-reduce of a partial output and the reduction of an input gradient (a parameter's
    /// stays, unless it is tied to another operator's, which reduces it).
    fn collective_cost(
        &self,
        rule: &OpRule,
        tied: &[bool],
        entry: &crate::rules::split::SplitEntry,
        f: &dyn Fn(&Poly) -> Result<Rational, SearchError>,
    ) -> Result<Rational, SearchError> {
        let kappa = |name: &str| -> Result<&Rational, SearchError> {
            Self::axis_of(name)
                .and_then(|a| self.axes.get(a))
                .map(|a| &a.kappa)
                .ok_or_else(|| SearchError::UnknownAxis(name.into()))
        };
        let mut cost = Rational::zero();
        for c in &entry.forward.collectives {
            if c.kind == CollectiveKind::AllReduce && c.tensor == rule.output.name {
                continue;
            }
            cost += kappa(&c.axis)? * f(&c.wire_bytes)?;
        }
        for c in &entry.backward.collectives {
            let k = rule
                .inputs
                .iter()
                .position(|t| format!("d{}", t.name) == c.tensor);
            match k {
                Some(k) if rule.inputs[k].param && !tied[k] => {}
                Some(_) => continue,
                None => {}
            }
            cost += kappa(&c.axis)? * f(&c.wire_bytes)?;
        }
        Ok(cost)
    }

    /// Where operator `op`'s split entry, with the cut `cut_of` chose on each axis, leaves its
    /// output, and what it needs of each input (and its gradient) on each axis.
    fn placements(
        &self,
        op: usize,
        cut_of: &[(usize, &Cut)],
        entry: &crate::rules::split::SplitEntry,
    ) -> (Vec<AxisPlace>, Vec<Option<Vec<Need>>>) {
        let o = &self.ops[op];
        let key_in = |v: &View, index: &str, occurrence: usize| -> AxisPlace {
            match v.by_index.get(index).and_then(|k| k.get(occurrence)) {
                Some(Some(k)) => AxisPlace::Shard(*k),
                // The index's extent differs in this tensor: a shard of something else.
                _ => AxisPlace::Shard(u32::MAX - op as u32),
            }
        };
        let n_axes = self.axes.len();
        let place = |v: &View, placements: &[Placement]| -> Vec<AxisPlace> {
            let mut out = vec![AxisPlace::Replicate; n_axes];
            for (n, (a, cut)) in cut_of.iter().enumerate() {
                out[*a] = match placements.get(n) {
                    Some(Placement::Partial(_)) => AxisPlace::Partial,
                    Some(Placement::Shard(_)) => key_in(v, &cut.index, cut.occurrence),
                    _ => AxisPlace::Replicate,
                };
            }
            out
        };
        let out = place(&o.out_view, &entry.forward.outputs[0].placements);
        let mut needs = Vec::new();
        for (k, input) in o.inputs.iter().enumerate() {
            if input.from.is_none() {
                needs.push(None);
                continue;
            }
            let want = place(&input.view, &entry.forward.inputs[k].placements);
            let dname = format!("d{}", input.name);
            let grad = if input.grad {
                entry
                    .backward
                    .outputs
                    .iter()
                    .find(|t| t.tensor == dname)
                    .map(|t| place(&input.view, &t.placements))
            } else {
                None
            };
            needs.push(Some(
                (0..n_axes)
                    .map(|a| Need {
                        want: want[a],
                        grad: grad.as_ref().map(|g| g[a]),
                    })
                    .collect(),
            ));
        }
        (out, needs)
    }

    /// A class per operator such that operators of one class price every choice alike: the
    /// same rule (one name is one rule within a model, whose loader resolves names in one
    /// registry), bindings, tied inputs, cuts, fixed choice and tensor views, and the same
    /// inputs read from producers in the problem. A graph of thousands of identical operators
    /// is then priced once per class instead of once per operator (see [`Problem::price`]:
    /// nothing else of the operator enters its price, except a placement of an index whose
    /// extent differs, which names the operator; [`Problem::shares_price`] tells such a price
    /// apart).
    pub fn price_classes(&self) -> Vec<usize> {
        type Key<'a> = (
            Option<(&'a str, &'a BTreeMap<String, Poly>, &'a [bool])>,
            &'a [Cut],
            &'a Option<Vec<Option<usize>>>,
            Vec<(&'a str, bool, bool, &'a View)>,
            &'a View,
        );
        let mut ids: HashMap<Key, usize> = HashMap::new();
        self.ops
            .iter()
            .map(|o| {
                let kind = match &o.kind {
                    Kind::Rule { rule, bind, tied } => {
                        Some((rule.name.as_str(), &**bind, tied.as_slice()))
                    }
                    Kind::Source => None,
                };
                let inputs: Vec<_> = o
                    .inputs
                    .iter()
                    .map(|i| (i.name.as_str(), i.from.is_some(), i.grad, &*i.view))
                    .collect();
                let key = (kind, o.cuts.as_slice(), &o.only, inputs, &*o.out_view);
                let next = ids.len();
                *ids.entry(key).or_insert(next)
            })
            .collect()
    }

    /// Whether a price of one operator holds for every operator of its class (see
    /// [`Problem::price_classes`]): it names no placement particular to the operator (a shard
    /// of an index whose extent differs in a tensor is keyed by the operator).
    pub fn shares_price(&self, pr: &Priced) -> bool {
        let ours = |x: &AxisPlace| match x {
            AxisPlace::Shard(k) => (*k as usize) < self.keys.len(),
            _ => true,
        };
        pr.out.iter().all(ours)
            && pr
                .needs
                .iter()
                .flatten()
                .flatten()
                .all(|n| ours(&n.want) && n.grad.as_ref().is_none_or(ours))
    }

    /// The cost of one conversion on `axis` of producer `op`'s output placed `x`, from `from`
    /// to `to` (zero when nothing moves).
    pub fn conversion(
        &self,
        op: usize,
        x: &[AxisPlace],
        axis: usize,
        from: AxisPlace,
        to: AxisPlace,
    ) -> Rational {
        use AxisPlace::*;
        let kind = match (from, to) {
            (f, t) if f == t => return Rational::zero(),
            (Partial, Replicate) => CollectiveKind::AllReduce,
            (Partial, Shard(_)) => CollectiveKind::ReduceScatter,
            (Shard(_), Replicate) => CollectiveKind::AllGather,
            (Shard(_), Shard(_)) => CollectiveKind::AllToAll,
            _ => return Rational::zero(),
        };
        let mut group = self.ops[op].out_bytes.clone();
        for (b, p) in x.iter().enumerate() {
            if b != axis && matches!(p, Shard(_)) {
                group /= Rational::from_integer(self.axes[b].size.into());
            }
        }
        let n = Rational::from_integer(self.axes[axis].size.into());
        let frac = (&n - Rational::one()) / &n;
        let factor = if kind == CollectiveKind::AllReduce {
            Rational::from_integer(2.into())
        } else {
            Rational::one()
        };
        &self.axes[axis].kappa * factor * frac * group
    }

    /// The cost of one facility of producer `op` placed `x`.
    pub fn facility_cost(&self, op: usize, x: &[AxisPlace], f: Facility) -> Rational {
        let xa = x[f.axis];
        if f.grad {
            let target = if xa == AxisPlace::Partial {
                AxisPlace::Replicate
            } else {
                xa
            };
            self.conversion(op, x, f.axis, f.place, target)
        } else {
            self.conversion(op, x, f.axis, xa, f.place)
        }
    }

    /// What a partial output nobody reads costs to finish.
    pub fn terminal_cost(&self, op: usize, x: &[AxisPlace]) -> Rational {
        let mut c = Rational::zero();
        if !self.ops[op].terminal || self.cycle.is_some_and(|(_, e)| e == op) {
            return c;
        }
        for (a, p) in x.iter().enumerate() {
            if *p == AxisPlace::Partial {
                c += self.conversion(op, x, a, AxisPlace::Partial, AxisPlace::Replicate);
            }
        }
        c
    }

    /// Consumers of each operator: (consumer, input position).
    pub fn consumers(&self) -> Vec<Vec<(usize, usize)>> {
        let mut c = vec![Vec::new(); self.ops.len()];
        for (v, o) in self.ops.iter().enumerate() {
            for (k, i) in o.inputs.iter().enumerate() {
                if let Some(p) = i.from {
                    c[p].push((v, k));
                }
            }
        }
        c
    }

    /// The exact cost of a full assignment: operators, edges (per producer, distinct
    /// conversions once) and unfinished partial outputs. Errors on an invalid choice or a
    /// broken cycle.
    pub fn cost(&self, a: &[Choice]) -> Result<Rational, SearchError> {
        if a.len() != self.ops.len() {
            return Err(SearchError::ChoiceCount {
                choices: a.len(),
                ops: self.ops.len(),
            });
        }
        let priced: Vec<Priced> = (0..a.len())
            .map(|v| self.price(v, &a[v]))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&Priced> = priced.iter().collect();
        self.cost_of(&refs)
    }

    /// The exact cost of priced choices, one per operator (see [`Problem::cost`]).
    pub fn cost_of(&self, priced: &[&Priced]) -> Result<Rational, SearchError> {
        if let Some((s, e)) = self.cycle {
            if priced[s].out != priced[e].out {
                return Err(SearchError::BoundaryDiffers);
            }
        }
        let mut total: Rational = priced.iter().map(|p| p.cost.clone()).sum();
        for (p, cons) in self.consumers().iter().enumerate() {
            let x = &priced[p].out;
            let mut open: Vec<Facility> = Vec::new();
            for &(v, k) in cons {
                if let Some(needs) = &priced[v].needs[k] {
                    for f in facilities(needs) {
                        if !open.contains(&f) {
                            open.push(f);
                        }
                    }
                }
            }
            for f in open {
                total += self.facility_cost(p, x, f);
            }
            if cons.is_empty() {
                total += self.terminal_cost(p, x);
            }
        }
        Ok(total)
    }

    /// A readable form of one choice: `index:atom` per axis, `-` for none.
    pub fn choice_label(&self, op: usize, c: &[Option<usize>]) -> String {
        let o = &self.ops[op];
        c.iter()
            .map(|x| match x {
                Some(i) if o.is_source() => self.place_label(o.cuts[*i].place),
                Some(i) => format!("{}:{}", o.cuts[*i].index, o.cuts[*i].atom),
                None => "-".into(),
            })
            .collect::<Vec<_>>()
            .join("|")
    }

    /// The same problem with memory-bound operators' HBM bytes priced at `kappa` (the
    /// machine's κ_hbm), as the relative cost prices them.
    pub fn with_hbm_balance(mut self, kappa: Rational) -> Problem {
        self.hbm_kappa = kappa;
        self
    }

    /// The problem of block `bi` of `model` at `values` over `axes`. A block that reads its own
    /// input (a repeated layer) gets a source standing for it, placed as the block's output
    /// (`cycle`); operators of other blocks become fixed sources placed as `known` says (by
    /// label per axis; replicated where unknown).
    pub fn from_block(
        model: &Model,
        bi: usize,
        values: &Bindings,
        axes: Vec<Axis>,
        known: &BTreeMap<String, Vec<String>>,
    ) -> Result<Problem, SearchError> {
        let block = model.blocks.get(bi).ok_or_else(|| SearchError::NoBlock {
            model: model.name.clone(),
            block: bi,
        })?;
        let n_axes = axes.len();
        let mut p = Problem::new(
            &format!("{}/{}", model.name, block.name),
            axes,
            values.clone(),
            model.dtype_bytes,
            &model.roles,
        );
        if model.symbols.is_empty() {
            p = p.with_numeric_atoms();
        }
        p.loss_passes = (
            model.loss == crate::model::LossMode::Fp32,
            model.train_metrics,
        );
        let read = read_anywhere(model);
        let mut places = Places {
            model,
            bi,
            known,
            n_axes,
            pos: BTreeMap::new(),
            sources: BTreeMap::new(),
            entry: None,
        };
        // Operators of one kind share their bindings and views.
        let mut binds: HashMap<&Bind, Arc<Bind>> = HashMap::new();
        let mut views = Views::default();
        for &n in &block.order {
            let node: &OpNode = &block.graph[n];
            let mut inputs = Vec::new();
            let mut tied = Vec::new();
            for (_, prod) in &node.inputs {
                tied.push(matches!(prod, Producer::Tied(_)));
                inputs.push(places.input(&mut p, node, prod)?);
            }
            let bind = binds
                .entry(&node.bind)
                .or_insert_with(|| Arc::new(node.bind.clone()))
                .clone();
            let v = p.add_shared_rule_op(
                &node.name,
                node.rule.clone(),
                bind,
                &inputs,
                &tied,
                &mut views,
            )?;
            p.ops[v].terminal = !read.contains(&(bi, n));
            places.pos.insert(n, v);
        }
        if let (Some(s), Some(o)) = (places.entry, block.output) {
            p.cycle = Some((s, places.pos[&o]));
        }
        Ok(p)
    }

    /// The tensor-parallel axis of `tp` devices of a mesh in nodes of `gpus_per_node`.
    pub fn tp_axis(tp: u64, gpus_per_node: u64, calib: &Calibration) -> Vec<Axis> {
        if tp <= 1 {
            return Vec::new();
        }
        let mesh = Mesh::new(tp, 1, 1, gpus_per_node.max(1));
        // κ as the evaluation prices tensor-parallel bytes: a group spanning nodes as the
        // hierarchical ring it runs as.
        let kappa = crate::parallel::evaluate::axis_kappa(
            mesh.axis(crate::strategy::AxisKind::Tp),
            &|t: Tier| calib.balance(t),
        );
        vec![Axis {
            name: "tp".to_string(),
            size: tp,
            kappa,
        }]
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} operators over axes {:?}",
            self.name,
            self.ops.len(),
            self.axes.iter().map(|a| a.size).collect::<Vec<_>>()
        )?;
        for (v, o) in self.ops.iter().enumerate() {
            let ins: Vec<String> = o
                .inputs
                .iter()
                .map(|i| match i.from {
                    Some(p) => format!("{}={}", i.name, self.ops[p].name),
                    None => format!("{}=·", i.name),
                })
                .collect();
            writeln!(
                f,
                "  {v}: {} ({}) [{}] {} cuts",
                o.name,
                o.rule_name(),
                ins.join(", "),
                o.cuts.len()
            )?;
        }
        Ok(())
    }
}

/// A small deterministic generator (SplitMix64) for synthetic problems.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// The shape of a synthetic graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One operator after another.
    Chain,
    /// Series and parallel compositions: branches from one tensor joined by an addition.
    SeriesParallel,
}

/// A synthetic problem of about `size` operators from the shipped rules (`linear`, `matmul`,
/// `gelu`, `layernorm`, `softmax`, `add`) over rows `B*S` and features `H` or `F`, with
/// power-of-two symbol values drawn from `seed` (sizes where compute and communication
/// compete).
pub fn synthetic(
    rules: &crate::rules::RuleSet,
    seed: u64,
    size: usize,
    shape: Shape,
    axes: Vec<Axis>,
) -> Result<Problem, SearchError> {
    let mut rng = SplitMix::new(seed);
    let mut pick = |choices: &[i64]| choices[rng.below(choices.len() as u64) as usize];
    let mut values = Bindings::new();
    for (s, opts) in [
        ("B", &[2i64, 4, 8, 16][..]),
        ("S", &[256, 512, 1024, 2048]),
        ("H", &[512, 1024, 2048]),
        ("F", &[1024, 2048, 4096, 8192]),
    ] {
        values.insert(s.to_string(), Rational::from_integer(pick(opts).into()));
    }
    // The synthetic graphs name their symbols conventionally.
    let roles = crate::model::Roles {
        hidden: Some("H".into()),
        heads: Some("NH".into()),
        head_dim: Some("D".into()),
        kv_heads: Some("KV".into()),
        ..Default::default()
    };
    let mut p = Problem::new(&format!("synthetic-{seed}"), axes, values, 2, &roles);
    let mut g = Gen {
        rules,
        rng: SplitMix::new(seed ^ 0x5EED),
        n: 0,
    };
    let first = g.unary(&mut p, None, "H", 0)?;
    let target = size.max(1);
    match shape {
        Shape::Chain => {
            let mut cur = first;
            while p.ops.len() < target {
                cur = g.unary(&mut p, Some(cur.0), cur.1, 0)?;
            }
        }
        Shape::SeriesParallel => {
            let mut cur = first;
            while p.ops.len() < target {
                cur = g.sp(&mut p, cur, target, 2)?;
            }
        }
    }
    Ok(p)
}

struct Gen<'a> {
    rules: &'a crate::rules::RuleSet,
    rng: SplitMix,
    n: usize,
}

impl Gen<'_> {
    fn rule(&self, name: &str) -> Result<OpRule, SearchError> {
        self.rules
            .get(name)
            .cloned()
            .ok_or_else(|| SearchError::NoRule(name.into()))
    }

    fn name(&mut self, rule: &str) -> String {
        self.n += 1;
        format!("{rule}{}", self.n)
    }

    /// One operator reading `from` (features `feat`), returning (op, output features).
    fn unary(
        &mut self,
        p: &mut Problem,
        from: Option<usize>,
        feat: &'static str,
        force: u64,
    ) -> Result<(usize, &'static str), SearchError> {
        let rows = Poly::parse("B*S")?;
        let kind = if force > 0 {
            force
        } else {
            1 + self.rng.below(5)
        };
        let other = if feat == "H" { "F" } else { "H" };
        let (rule, bind, out): (&str, Vec<(&str, Poly)>, &'static str) = match kind {
            1 => (
                "linear",
                vec![
                    ("b", rows),
                    ("k", Poly::symbol(feat)),
                    ("n", Poly::symbol(other)),
                ],
                other,
            ),
            2 => (
                "matmul",
                vec![
                    ("b", rows),
                    ("k", Poly::symbol(feat)),
                    ("n", Poly::symbol(feat)),
                ],
                feat,
            ),
            3 => ("gelu", vec![("b", rows), ("h", Poly::symbol(feat))], feat),
            4 => (
                "layernorm",
                vec![("b", rows), ("h", Poly::symbol(feat))],
                feat,
            ),
            _ => (
                "softmax",
                vec![("b", rows), ("n", Poly::symbol(feat))],
                feat,
            ),
        };
        let r = self.rule(rule)?;
        let bind: BTreeMap<String, Poly> =
            bind.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let inputs: Vec<Option<usize>> = r
            .inputs
            .iter()
            .map(|t| if t.param { None } else { from })
            .collect();
        let name = self.name(rule);
        let v = p.add_rule_op(&name, r.clone(), bind, &inputs, &[])?;
        Ok((v, out))
    }

    /// A series or parallel composition after `cur`.
    fn sp(
        &mut self,
        p: &mut Problem,
        cur: (usize, &'static str),
        target: usize,
        depth: u32,
    ) -> Result<(usize, &'static str), SearchError> {
        let room = target.saturating_sub(p.ops.len());
        if depth == 0 || room < 3 || self.rng.below(2) == 0 {
            return self.unary(p, Some(cur.0), cur.1, 0);
        }
        // Parallel: a residual (identity branch) or two branches, joined by an addition.
        let feat = cur.1;
        let branch = |g: &mut Self, p: &mut Problem| -> Result<usize, SearchError> {
            let kind = 2 + g.rng.below(4);
            let mut b = g.unary(p, Some(cur.0), feat, kind)?;
            if g.rng.below(2) == 0 && p.ops.len() + 2 < target {
                b = g.sp(p, b, target, depth - 1)?;
            }
            if b.1 != feat {
                b = g.unary(p, Some(b.0), b.1, 1)?;
            }
            Ok(b.0)
        };
        let left = branch(self, p)?;
        let right = if self.rng.below(2) == 0 {
            cur.0
        } else {
            branch(self, p)?
        };
        let r = self.rule("add")?;
        let bind: BTreeMap<String, Poly> = [
            ("b".to_string(), Poly::parse("B*S")?),
            ("h".to_string(), Poly::symbol(feat)),
        ]
        .into_iter()
        .collect();
        let name = self.name("add");
        let v = p.add_rule_op(&name, r.clone(), bind, &[Some(left), Some(right)], &[])?;
        Ok((v, feat))
    }
}

/// Where [`Problem::from_block`] has placed what block `bi` reads: its own operators, the
/// sources standing for other blocks' outputs, and the source for the block's input.
struct Places<'a> {
    model: &'a Model,
    bi: usize,
    known: &'a BTreeMap<String, Vec<String>>,
    n_axes: usize,
    pos: BTreeMap<NodeIndex, usize>,
    sources: BTreeMap<(usize, NodeIndex), usize>,
    entry: Option<usize>,
}

impl Places<'_> {
    /// The operator of `p` that `node` reads as `prod`, adding a source the first time
    /// another block's output or the block's input is read; none for a graph input.
    fn input(
        &mut self,
        p: &mut Problem,
        node: &OpNode,
        prod: &Producer,
    ) -> Result<Option<usize>, SearchError> {
        let block = &self.model.blocks[self.bi];
        Ok(match prod {
            Producer::Op { block: b, node: pn } if *b == self.bi => Some(
                *self
                    .pos
                    .get(pn)
                    .ok_or_else(|| SearchError::NotYetPlaced(node.name.clone()))?,
            ),
            Producer::Op { block: b, node: pn } => {
                if let Some(s) = self.sources.get(&(*b, *pn)) {
                    return Ok(Some(*s));
                }
                let other = &self.model.blocks[*b].graph[*pn];
                let mode = match self.known.get(&other.name) {
                    Some(l) => SourceMode::Fixed(l.clone()),
                    None => SourceMode::Fixed(vec!["R".to_string(); self.n_axes]),
                };
                let s = p.add_source(&other.name, &other.rule, &other.bind, mode)?;
                self.sources.insert((*b, *pn), s);
                Some(s)
            }
            Producer::BlockInput => match (block.output, self.entry) {
                (Some(_), Some(s)) => Some(s),
                (Some(o), None) => {
                    let out = &block.graph[o];
                    let s = p.add_source("in", &out.rule, &out.bind, SourceMode::FreeOrPartial)?;
                    self.entry = Some(s);
                    Some(s)
                }
                (None, _) => None,
            },
            _ => None,
        })
    }
}
