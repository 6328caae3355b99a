//! ONNX operators → shipped operator rules: each node becomes zero or more operators of the model
//! graph, its output shapes propagated as formulas. A node that cannot be mapped says why.

use super::onnx_pb::NodeProto;
use super::onnx_shape::{
    attr_int, attr_ints, attr_str, attr_tensor, axis, product, show, tensor_ints, tensor_shape,
    tensor_vals, Shape,
};
use crate::sym::Poly;
use std::collections::BTreeMap;

/// What an ONNX tensor name stands for.
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// A tensor of the model graph: a graph input or an operator's output.
    Act {
        /// Its name in the model file.
        name: String,
        /// Its shape.
        shape: Shape,
    },
    /// A constant: initializer, `Constant` output, or a view of one.
    Const {
        /// Its shape.
        shape: Shape,
        /// Its contents, row-major, when it is a small integer tensor: numbers, or formulas
        /// for the sizes a `Shape` node reads.
        vals: Option<Vec<Poly>>,
        /// The initializer it is (a view of), so that a second use as a parameter is tied.
        origin: Option<String>,
    },
    /// An output of a node that was not mapped and whose shape the file does not give.
    Unknown(String),
}

/// One operator of the model file.
#[derive(Debug, Clone)]
pub(super) struct Emit {
    /// Its name in the model file.
    pub name: String,
    /// The operator rule it applies.
    pub rule: &'static str,
    /// Rule index or parameter → size.
    pub bind: Vec<(&'static str, Poly)>,
    /// Rule input → the model tensor it reads.
    pub ins: Vec<(&'static str, String)>,
    /// Rule parameter → the `op.parameter` it shares.
    pub tied: Vec<(&'static str, String)>,
    /// The ONNX node it comes from.
    pub doc: String,
}

/// Why a node was not mapped.
pub(super) type Reason = String;

/// The state of a conversion.
#[derive(Default)]
pub(super) struct Mapper {
    /// ONNX tensor name → what it stands for.
    pub values: BTreeMap<String, Value>,
    /// The operators so far, in graph order.
    pub emitted: Vec<Emit>,
    /// Names in use in the model file (inputs, operators, the block).
    pub taken: std::collections::BTreeSet<String>,
    /// Initializer → the `op.slot` that owns it as a parameter.
    owners: BTreeMap<String, String>,
    /// The default-domain opset the graph imports.
    pub opset: i64,
    /// Constant index tensors read by table lookups, which become integer graph inputs: model
    /// name, shape and the node that reads them.
    pub const_inputs: Vec<(String, Shape, String)>,
    /// Tensors some node reads: an output outside it is ignored.
    pub read: std::collections::BTreeSet<String>,
    /// The nodes folded into constants (computed from constants and shapes alone): operator
    /// type and the elements of the output.
    pub folded: Vec<(String, Poly)>,
    /// Tensors computed from mask inputs alone (an attention mask given as a graph input, and
    /// what the graph makes of it without the data): shapes known, values not.
    pub mask_derived: std::collections::BTreeSet<String>,
    /// The nodes computed from mask inputs alone: operator type and the elements of the output.
    pub mask_nodes: Vec<(String, Poly)>,
    journal: Journal,
}

/// What the node being mapped has added, taken back if it turns out not to map.
#[derive(Default)]
struct Journal {
    emitted: usize,
    names: Vec<String>,
    owners: Vec<String>,
}

/// Leading, second-to-last and last dimensions' products: `[b, m, n]` of a rank ≥ 0 shape.
pub(super) fn split3(s: &[Poly]) -> (Poly, Poly, Poly) {
    let r = s.len();
    match r {
        0 => (Poly::one(), Poly::one(), Poly::one()),
        1 => (Poly::one(), Poly::one(), s[0].clone()),
        _ => (product(&s[..r - 2]), s[r - 2].clone(), s[r - 1].clone()),
    }
}

/// Rows and the last dimension: `[b, h]`.
pub(super) fn rows_last(s: &[Poly]) -> (Poly, Poly) {
    match s.split_last() {
        Some((last, rest)) => (product(rest), last.clone()),
        None => (Poly::one(), Poly::one()),
    }
}

impl Mapper {
    /// Starts mapping a node: what follows can be taken back by [`Mapper::rollback`].
    pub fn begin(&mut self) {
        self.journal = Journal {
            emitted: self.emitted.len(),
            ..Journal::default()
        };
    }

    /// Takes back the operators, names and parameter owners added since [`Mapper::begin`].
    pub fn rollback(&mut self) {
        let j = std::mem::take(&mut self.journal);
        self.emitted.truncate(j.emitted);
        for n in &j.names {
            self.taken.remove(n);
        }
        for o in &j.owners {
            self.owners.remove(o);
        }
    }

    /// A fresh model name for an operator, from the node's name or its type.
    pub fn alloc(&mut self, wanted: &str) -> String {
        let base = super::onnx_shape::identifier(wanted, "op");
        let base = if base == "in" {
            "in_".to_string()
        } else {
            base
        };
        let mut name = base.clone();
        let mut k = 2;
        while self.taken.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        self.journal.names.push(name.clone());
        name
    }

    /// Whether the initializer `init` is a parameter of a mapped operator.
    pub fn owns(&self, init: &str) -> bool {
        self.owners.contains_key(init)
    }

    /// Whether some node reads output `k` of `node`.
    pub(super) fn used(&self, node: &NodeProto, k: usize) -> bool {
        node.output
            .get(k)
            .is_some_and(|t| !t.is_empty() && self.read.contains(t))
    }

    pub(super) fn get(&self, node: &NodeProto, k: usize) -> Result<&Value, Reason> {
        let t = node.input.get(k).filter(|t| !t.is_empty());
        let t = t.ok_or_else(|| format!("input {k} is missing"))?;
        self.values
            .get(t)
            .ok_or_else(|| format!("input `{t}` is not known"))
    }

    pub(super) fn act(&self, node: &NodeProto, k: usize) -> Result<(String, Shape), Reason> {
        match self.get(node, k)? {
            Value::Act { name, shape } => Ok((name.clone(), shape.clone())),
            Value::Const { .. } => Err(format!(
                "input `{}` is a constant where a computed tensor is expected",
                node.input[k]
            )),
            Value::Unknown(why) => Err(why.clone()),
        }
    }

    pub(super) fn constant(
        &self,
        node: &NodeProto,
        k: usize,
    ) -> Result<(Shape, Option<String>), Reason> {
        match self.get(node, k)? {
            Value::Const { shape, origin, .. } => Ok((shape.clone(), origin.clone())),
            Value::Act { .. } => Err(format!(
                "input `{}` is computed where a weight (initializer) is expected",
                node.input[k]
            )),
            Value::Unknown(why) => Err(why.clone()),
        }
    }

    pub(super) fn set(&mut self, node: &NodeProto, k: usize, v: Value) {
        if let Some(t) = node.output.get(k).filter(|t| !t.is_empty()) {
            self.values.insert(t.clone(), v);
        }
    }

    /// Emits an operator and binds the node's first output to it.
    pub(super) fn emit(&mut self, node: &NodeProto, label: &str, mut e: Emit, shape: Shape) {
        e.doc = label.to_string();
        let name = e.name.clone();
        self.emitted.push(e);
        self.set(node, 0, Value::Act { name, shape });
    }

    pub(super) fn new_op(&mut self, node: &NodeProto, rule: &'static str) -> Emit {
        let wanted = match node.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => node.op_type().to_ascii_lowercase(),
        };
        Emit {
            name: self.alloc(&wanted),
            rule,
            bind: Vec::new(),
            ins: Vec::new(),
            tied: Vec::new(),
            doc: String::new(),
        }
    }

    /// Makes the initializer `origin` the parameter `slot` of `e`, or ties it to its owner.
    pub(super) fn param(&mut self, e: &mut Emit, slot: &'static str, origin: Option<String>) {
        let Some(o) = origin else { return };
        match self.owners.get(&o) {
            Some(owner) => e.tied.push((slot, owner.clone())),
            None => {
                self.journal.owners.push(o.clone());
                self.owners.insert(o, format!("{}.{slot}", e.name));
            }
        }
    }

    /// Maps one node; `Err` says why it cannot be. A node that reads a tensor computed from a
    /// mask input and yields constants (shapes known, values not) is recorded in
    /// [`Mapper::mask_nodes`] instead of [`Mapper::folded`]: its values change from step to step.
    pub fn node(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let from_mask =
            node.op_type() != "Shape" && node.input.iter().any(|t| self.mask_derived.contains(t));
        let folded = self.folded.len();
        self.dispatch(node, label)?;
        if from_mask {
            self.folded.truncate(folded);
            let mut elements = None;
            for o in &node.output {
                if let Some(Value::Const { shape, .. }) = self.values.get(o) {
                    elements.get_or_insert_with(|| product(shape));
                    self.mask_derived.insert(o.clone());
                }
            }
            if let Some(n) = elements {
                self.mask_nodes.push((node.op_type().to_string(), n));
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let domain = node.domain.as_deref().unwrap_or("");
        if !domain.is_empty() && domain != "ai.onnx" {
            return Err(format!("operator domain `{domain}` is not standard ONNX"));
        }
        if self.foldable(node) {
            return self.fold(node);
        }
        match node.op_type() {
            "Constant" => self.constant_node(node),
            "Identity" => {
                let v = self.get(node, 0)?.clone();
                self.set(node, 0, v);
                Ok(())
            }
            "Relu" => self.unary(node, label, "relu"),
            "Gelu" => self.unary(node, label, "gelu"),
            "Tanh" => self.unary(node, label, "tanh"),
            "Dropout" => self.unary(node, label, "dropout"),
            "Add" | "Mul" | "Sub" | "Div" if self.all_const(node) => self.const_arith(node),
            "Add" | "Mul" | "Sub" | "Div" => self.binary(node, label),
            "Sigmoid" => self.unary(node, label, "sigmoid"),
            "Erf" => self.unary(node, label, "erf"),
            "Sqrt" => self.unary(node, label, "sqrt"),
            "Clip" => self.unary(node, label, "clip"),
            "Pow" => self.pow(node, label),
            "Where" => self.masked_fill(node, label),
            "ReduceMean" => self.reduce_mean(node, label),
            "Shape" => self.shape_node(node),
            "Cast" => self.cast(node),
            "Range" => self.range(node),
            "ConstantOfShape" => self.constant_of_shape(node),
            "Expand" => self.expand(node, label),
            "Slice" => self.slice(node, label),
            "Concat" if self.all_const(node) => self.concat_const(node),
            "Gather" if matches!(self.get(node, 0), Ok(Value::Const { vals: None, .. })) => {
                self.gather(node, label)
            }
            "Gather" if matches!(self.get(node, 1), Ok(Value::Const { vals: Some(_), .. })) => {
                self.gather_const(node, label)
            }
            "MatMul" => self.matmul(node, label),
            "Gemm" => self.gemm(node, label),
            "Softmax" => self.softmax(node, label),
            "LayerNormalization" => self.layernorm(node, label),
            "Gather" => self.gather(node, label),
            "Conv" => self.conv(node, label),
            "MaxPool" | "AveragePool" => self.pool(node, label),
            "GlobalAveragePool" => self.global_pool(node, label),
            "BatchNormalization" => self.batchnorm(node, label),
            "Reshape" | "Flatten" | "Transpose" | "Squeeze" | "Unsqueeze" => self.view(node, label),
            "Concat" => self.concat(node, label),
            "Split" => self.split(node, label),
            "Pad" => self.pad(node, label),
            other => Err(format!("no rule for ONNX `{other}`")),
        }
    }

    /// Whether every input of the node is a constant (a shape computation).
    fn all_const(&self, node: &NodeProto) -> bool {
        !node.input.is_empty()
            && node
                .input
                .iter()
                .all(|t| matches!(self.values.get(t), Some(Value::Const { .. })))
    }

    fn constant_node(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let v = if let Some(t) = attr_tensor(node, "value") {
            let empty = tensor_ints(t).filter(|v| v.is_empty() && !t.dims.is_empty());
            let shape = match (tensor_shape(t), empty) {
                (Some(shape), _) => shape,
                // An empty integer list (the shape of a scalar): its length 0 is its shape.
                (None, Some(_)) => t.dims.iter().map(|&d| Poly::int(d)).collect(),
                (None, None) => return Err("a constant with an empty dimension".into()),
            };
            Value::Const {
                shape,
                vals: tensor_vals(t),
                origin: None,
            }
        } else if let Some(i) = attr_int(node, "value_int") {
            Value::Const {
                shape: vec![],
                vals: Some(vec![Poly::int(i)]),
                origin: None,
            }
        } else if let Some(v) = attr_ints(node, "value_ints") {
            Value::Const {
                shape: vec![Poly::int(v.len() as i64)],
                vals: Some(v.into_iter().map(Poly::int).collect()),
                origin: None,
            }
        } else {
            Value::Const {
                shape: vec![],
                vals: None,
                origin: None,
            }
        };
        self.set(node, 0, v);
        Ok(())
    }

    /// An elementwise operator of one input, `[b, h]` with `h` the last dimension.
    fn unary(&mut self, node: &NodeProto, label: &str, rule: &'static str) -> Result<(), Reason> {
        let (x, shape) = self.act(node, 0)?;
        if rule == "dropout" && self.used(node, 1) {
            return Err("the Dropout mask output is used".into());
        }
        let (b, h) = rows_last(&shape);
        let mut e = self.new_op(node, rule);
        e.bind = vec![("b", b), ("h", h)];
        e.ins = vec![("x", x)];
        self.emit(node, label, e, shape);
        Ok(())
    }

    /// `Where` of a constant mask choosing between one computed tensor and a constant.
    fn masked_fill(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let cond = self.get(node, 0)?.clone();
        let (a, b) = (self.get(node, 1)?.clone(), self.get(node, 2)?.clone());
        let (x, xs, other) = match (a, b) {
            (Value::Act { name, shape }, c @ Value::Const { .. })
            | (c @ Value::Const { .. }, Value::Act { name, shape }) => (name, shape, c),
            (Value::Unknown(why), _) | (_, Value::Unknown(why)) => return Err(why),
            _ => return Err("a choice between two computed tensors or two constants".into()),
        };
        let cs = match cond {
            Value::Const { shape, .. } => shape,
            Value::Unknown(why) => return Err(why),
            Value::Act { .. } => return Err("a computed condition".into()),
        };
        let Value::Const { shape: os, .. } = other else {
            return Err("no constant operand".into());
        };
        let out = super::onnx_infer::broadcast(&super::onnx_infer::broadcast(&cs, &xs)?, &os)?;
        if out != xs {
            return Err(format!(
                "a choice broadcasting {} to {}",
                show(&xs),
                show(&out)
            ));
        }
        let (b, h) = rows_last(&xs);
        let mut e = self.new_op(node, "masked_fill");
        e.bind = vec![("b", b), ("h", h)];
        e.ins = vec![("x", x)];
        self.emit(node, label, e, xs);
        Ok(())
    }

    /// `Pow` of a computed tensor by a constant scalar exponent.
    fn pow(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        match self.get(node, 1)? {
            Value::Const { shape, .. } if product(shape) == Poly::one() => {
                self.unary(node, label, "pow")
            }
            _ => Err("an exponent that is not a constant scalar".into()),
        }
    }

    /// `ReduceMean` over trailing axes: the mean of each row, as global average pooling of one
    /// image whose channels are the rows.
    fn reduce_mean(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let r = xs.len();
        let axes: Vec<i64> = match node.input.get(1).filter(|t| !t.is_empty()) {
            Some(_) => self.ints(node, 1)?,
            None => attr_ints(node, "axes").unwrap_or_default(),
        };
        let axes: Vec<i64> = if axes.is_empty() {
            (0..r as i64).collect()
        } else {
            axes
        };
        let mut at: Vec<usize> = axes
            .iter()
            .map(|&a| if a < 0 { a + r as i64 } else { a })
            .map(|a| usize::try_from(a).ok().filter(|a| *a < r))
            .collect::<Option<_>>()
            .ok_or("axes out of range")?;
        at.sort_unstable();
        at.dedup();
        let k = at.len();
        if k == 0 || at != (r - k..r).collect::<Vec<_>>() {
            return Err(format!(
                "a mean over axes {axes:?} of {}, not the last ones",
                show(&xs)
            ));
        }
        let keep = attr_int(node, "keepdims").unwrap_or(1) != 0;
        let mut out = xs[..r - k].to_vec();
        if keep {
            out.extend(std::iter::repeat_n(Poly::one(), k));
        }
        let mut e = self.new_op(node, "global_avgpool");
        e.bind = vec![
            ("n", Poly::one()),
            ("c", product(&xs[..r - k])),
            ("s", product(&xs[r - k..])),
        ];
        e.ins = vec![("x", x)];
        self.emit(node, label, e, out);
        Ok(())
    }

    fn binary(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let add = node.op_type() == "Add";
        let commutes = matches!(node.op_type(), "Add" | "Mul");
        let (a, b) = (self.get(node, 0)?.clone(), self.get(node, 1)?.clone());
        // A computed tensor on the left; Add and Mul commute, and so does the cost of c − x and
        // c / x for a scalar c (one operation per element).
        let scalar =
            |v: &Value| matches!(v, Value::Const { shape, .. } if product(shape) == Poly::one());
        let (a, b) = match (&a, &b) {
            (Value::Const { .. }, Value::Act { .. }) if commutes || scalar(&a) => (b, a),
            // A gate [n, c, 1, 1] times a map [n, c, h, w]: the map on the left.
            (Value::Act { shape: sa, .. }, Value::Act { shape: sb, .. })
                if node.op_type() == "Mul" && rows_of(sb, sa).is_some() =>
            {
                (b, a)
            }
            _ => (a, b),
        };
        let rows_operand = match (&a, &b) {
            (Value::Act { shape: sa, .. }, Value::Act { shape: sb, .. }) => {
                rows_of(sa, sb).is_some()
            }
            _ => false,
        };
        if !commutes && !rows_operand && !matches!(&b, Value::Const { .. }) {
            return Err(format!(
                "{} of two computed tensors: no rule for it",
                node.op_type()
            ));
        }
        let (x, xs) = match a {
            Value::Act { name, shape } => (name, shape),
            Value::Unknown(why) => return Err(why),
            Value::Const { .. } => return Err("both operands are constants".into()),
        };
        let (rows, h) = rows_last(&xs);
        match b {
            Value::Unknown(why) => Err(why),
            Value::Const { shape, origin, .. } => {
                self.by_constant(node, label, (x, xs), &shape, origin)
            }
            Value::Act { name, shape } if shape == xs => {
                let mut e = self.new_op(node, if add { "add" } else { "mul" });
                e.bind = vec![("b", rows), ("h", h)];
                e.ins = vec![("x", x), ("other", name)];
                self.emit(node, label, e, xs);
                Ok(())
            }
            Value::Act { name, shape } if !add && rows_of(&xs, &shape).is_some() => {
                let r = rows_of(&xs, &shape).unwrap_or_default();
                let rule = match node.op_type() {
                    "Sub" => "sub_rows",
                    "Div" => "div_rows",
                    _ => "mul_rows",
                };
                let mut e = self.new_op(node, rule);
                e.bind = vec![("b", product(&xs[..r])), ("h", product(&xs[r..]))];
                e.ins = vec![("x", x), ("s", name)];
                self.emit(node, label, e, xs);
                Ok(())
            }
            Value::Act { name, shape } if add && trailing(&xs, &shape).is_some() => {
                let t = trailing(&xs, &shape).unwrap_or_default();
                let mut e = self.new_op(node, "add_broadcast");
                e.bind = vec![("b", product(&xs[..xs.len() - t])), ("h", product(&shape))];
                e.ins = vec![("x", x), ("other", name)];
                self.emit(node, label, e, xs);
                Ok(())
            }
            Value::Act { shape, .. } => Err(format!(
                "{} broadcasting {} with {}: no rule for it",
                node.op_type(),
                show(&xs),
                show(&shape)
            )),
        }
    }

    /// `x` (a computed tensor, of shape `xs`) added to, taken from, multiplied or divided by a
    /// constant of `shape`.
    fn by_constant(
        &mut self,
        node: &NodeProto,
        label: &str,
        (x, xs): (String, Shape),
        shape: &[Poly],
        origin: Option<String>,
    ) -> Result<(), Reason> {
        let add = node.op_type() == "Add";
        let (rows, h) = rows_last(&xs);
        let n = product(shape);
        if n == Poly::one() {
            // x + c, x − c, x · c or x / c (or c − x, c / x) for a scalar c: one operation
            // per element.
            let mut e = self.new_op(node, "scale");
            e.bind = vec![("b", rows), ("h", h)];
            e.ins = vec![("x", x)];
            self.emit(node, label, e, xs);
            Ok(())
        } else if add && trailing(&xs, shape).is_some() {
            let t = trailing(&xs, shape).unwrap_or_default();
            let mut e = self.new_op(node, "bias_add");
            e.bind = vec![("b", product(&xs[..xs.len() - t])), ("h", n)];
            e.ins = vec![("x", x)];
            self.param(&mut e, "bias", origin);
            self.emit(node, label, e, xs);
            Ok(())
        } else if matches!(node.op_type(), "Add" | "Sub") && broadcasts(shape, &xs) {
            // x ± C for a constant C that broadcasts to x but is no trailing bias: an
            // additive attention mask ([b, 1, s, s] against [b, heads, s, s]) or lookups
            // by constant indices folded by the exporter. One operation per element; C
            // is a constant of the export, not a parameter (a folded lookup's table is
            // not in the file).
            let mut e = self.new_op(node, "scale");
            e.bind = vec![("b", rows), ("h", h)];
            e.ins = vec![("x", x)];
            self.emit(node, label, e, xs);
            Ok(())
        } else {
            Err(format!(
                "{} of {} by a constant {}: no rule for it",
                node.op_type(),
                show(&xs),
                show(shape)
            ))
        }
    }

    fn matmul(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        if xs.is_empty() {
            return Err("a scalar operand".into());
        }
        let k = xs[xs.len() - 1].clone();
        let rows = &xs[..xs.len() - 1];
        match self.get(node, 1)?.clone() {
            Value::Const { shape, origin, .. } if shape.len() == 2 => {
                if shape[0] != k {
                    return Err(format!(
                        "shapes {} and {} do not match",
                        show(&xs),
                        show(&shape)
                    ));
                }
                let mut e = self.new_op(node, "matmul");
                e.bind = vec![("b", product(rows)), ("k", k), ("n", shape[1].clone())];
                e.ins = vec![("x", x)];
                self.param(&mut e, "w", origin);
                let mut out = rows.to_vec();
                out.push(shape[1].clone());
                self.emit(node, label, e, out);
                Ok(())
            }
            Value::Const { shape, .. } => Err(format!("a weight of rank {}", shape.len())),
            Value::Unknown(why) => Err(why),
            Value::Act { name, shape } => {
                let (r, q) = (xs.len(), shape.len());
                if r < 2 || q < 2 || xs[..r - 2] != shape[..q - 2] || shape[q - 2] != k {
                    return Err(format!(
                        "a matmul of {} and {}: batch dimensions differ or broadcast",
                        show(&xs),
                        show(&shape)
                    ));
                }
                let mut e = self.new_op(node, "batch_matmul");
                let (b, m) = (product(&xs[..r - 2]), xs[r - 2].clone());
                e.bind = vec![("b", b), ("m", m), ("k", k), ("n", shape[q - 1].clone())];
                e.ins = vec![("x", x), ("other", name)];
                let mut out = xs[..r - 1].to_vec();
                out.push(shape[q - 1].clone());
                self.emit(node, label, e, out);
                Ok(())
            }
        }
    }

    fn gemm(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        if attr_int(node, "transA").unwrap_or(0) != 0 {
            return Err("transA = 1".into());
        }
        let (x, xs) = self.act(node, 0)?;
        let (ws, wo) = self.constant(node, 1)?;
        if xs.len() != 2 || ws.len() != 2 {
            return Err(format!(
                "operands {} and {} are not matrices",
                show(&xs),
                show(&ws)
            ));
        }
        let (k, n) = if attr_int(node, "transB").unwrap_or(0) != 0 {
            (ws[1].clone(), ws[0].clone())
        } else {
            (ws[0].clone(), ws[1].clone())
        };
        if k != xs[1] {
            return Err(format!(
                "shapes {} and {} do not match",
                show(&xs),
                show(&ws)
            ));
        }
        let bias = match node.input.get(2).filter(|t| !t.is_empty()) {
            None => None,
            Some(_) => {
                let (bs, bo) = self.constant(node, 2)?;
                if product(&bs) != n {
                    return Err(format!("a bias {} that is not one per output", show(&bs)));
                }
                Some(bo)
            }
        };
        let mut e = self.new_op(node, if bias.is_some() { "linear" } else { "matmul" });
        e.bind = vec![("b", xs[0].clone()), ("k", k), ("n", n.clone())];
        e.ins = vec![("x", x)];
        self.param(&mut e, "w", wo);
        if let Some(bo) = bias {
            self.param(&mut e, "bias", bo);
        }
        self.emit(node, label, e, vec![xs[0].clone(), n]);
        Ok(())
    }

    fn softmax(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let default = if self.opset >= 13 { -1 } else { 1 };
        let a = axis(node, default, xs.len()).ok_or("axis out of range")?;
        // Opset < 13 normalises over every dimension from the axis on.
        let n = if self.opset >= 13 {
            xs.get(a).cloned().unwrap_or_else(Poly::one)
        } else {
            product(&xs[a.min(xs.len())..])
        };
        let rows = if self.opset >= 13 {
            product(&[&xs[..a.min(xs.len())], &xs[(a + 1).min(xs.len())..]].concat())
        } else {
            product(&xs[..a.min(xs.len())])
        };
        let mut e = self.new_op(node, "softmax");
        e.bind = vec![("b", rows), ("n", n)];
        e.ins = vec![("x", x)];
        self.emit(node, label, e, xs);
        Ok(())
    }

    fn layernorm(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let a = axis(node, -1, xs.len()).ok_or("axis out of range")?;
        let (_, go) = self.constant(node, 1)?;
        if node.input.get(2).is_none_or(|b| b.is_empty()) {
            return Err("no bias: the layernorm rule has a learned bias".into());
        }
        let (_, bo) = self.constant(node, 2)?;
        let mut e = self.new_op(node, "layernorm");
        e.bind = vec![("b", product(&xs[..a])), ("h", product(&xs[a..]))];
        e.ins = vec![("x", x)];
        self.param(&mut e, "gamma", go);
        self.param(&mut e, "beta", bo);
        self.emit(node, label, e, xs);
        Ok(())
    }

    fn gather(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        if attr_int(node, "axis").unwrap_or(0) != 0 {
            return Err("a gather along an axis other than 0".into());
        }
        let (ts, to) = self.constant(node, 0)?;
        if ts.len() != 2 {
            return Err(format!("a table {} that is not a matrix", show(&ts)));
        }
        // Constant indices (positions from a Range) read the table as a lookup too: they become
        // an integer graph input.
        let (ids, is) = match self.get(node, 1)?.clone() {
            Value::Const { shape, .. } => {
                let name = self.alloc(&node.input[1]);
                self.const_inputs
                    .push((name.clone(), shape.clone(), label.to_string()));
                (name, shape)
            }
            _ => self.act(node, 1)?,
        };
        let mut e = self.new_op(node, "embedding");
        e.bind = vec![
            ("t", product(&is)),
            ("v", ts[0].clone()),
            ("h", ts[1].clone()),
        ];
        e.ins = vec![("ids", ids)];
        self.param(&mut e, "table", to);
        let mut out = is;
        out.push(ts[1].clone());
        self.emit(node, label, e, out);
        Ok(())
    }
}

/// How many trailing dimensions of `x` a broadcast operand covers (leading 1s dropped), when it
/// is exactly those dimensions and fewer than all of them.
fn trailing(x: &[Poly], other: &[Poly]) -> Option<usize> {
    let o: Vec<&Poly> = other.iter().skip_while(|d| **d == Poly::one()).collect();
    let t = o.len();
    (t > 0 && t < x.len() && x[x.len() - t..].iter().zip(o).all(|(a, b)| a == b)).then_some(t)
}

/// Whether `other` broadcasts to `x` (aligned from the last axis, each of its dimensions equal to
/// x's or 1) without changing x's shape.
fn broadcasts(other: &[Poly], x: &[Poly]) -> bool {
    other.len() <= x.len()
        && other
            .iter()
            .rev()
            .zip(x.iter().rev())
            .all(|(o, d)| o == d || *o == Poly::one())
}

/// How many leading dimensions of `x` a broadcast operand covers (its trailing 1s dropped,
/// leading 1s of a lower rank allowed), when it is exactly those dimensions and fewer than all.
fn rows_of(x: &[Poly], other: &[Poly]) -> Option<usize> {
    if other.len() > x.len() || other == x {
        return None;
    }
    let mut o: Vec<Poly> = vec![Poly::one(); x.len() - other.len()];
    o.extend(other.iter().cloned());
    let r = o.len() - o.iter().rev().take_while(|d| **d == Poly::one()).count();
    (r > 0 && r < x.len() && x[..r] == o[..r]).then_some(r)
}

/// Pooling and convolution settings: one stride and one padding for both spatial axes.
pub(super) fn square(node: &NodeProto, name: &str, default: i64) -> Result<i64, Reason> {
    let v = attr_ints(node, name).unwrap_or_default();
    match v.as_slice() {
        [] => Ok(default),
        [first, rest @ ..] if rest.iter().all(|x| x == first) => Ok(*first),
        _ => Err(format!(
            "unequal {name} {v:?}: the rules take one for both axes"
        )),
    }
}

/// Rejects `auto_pad` settings other than explicit padding.
pub(super) fn explicit_pads(node: &NodeProto) -> Result<(), Reason> {
    match attr_str(node, "auto_pad").as_deref() {
        None | Some("NOTSET") | Some("") | Some("VALID") => Ok(()),
        Some(p) => Err(format!("auto_pad {p}")),
    }
}

/// Whether the node has a setting the rules do not model.
pub(super) fn reject_attr(node: &NodeProto, name: &str, ok: i64) -> Result<(), Reason> {
    let ints = attr_ints(node, name).unwrap_or_default();
    if ints.iter().any(|&x| x != ok) || attr_int(node, name).is_some_and(|x| x != ok) {
        return Err(format!("{name} other than {ok}"));
    }
    Ok(())
}
