//! ONNX convolution, pooling, normalisation and data-movement operators (reshape, flatten,
//! transpose, concat, split) → shipped operator rules.

use super::onnx_infer::const_vals_at;
use super::onnx_map::{explicit_pads, reject_attr, split3, square, Mapper, Reason, Value};
use super::onnx_pb::NodeProto;
use super::onnx_shape::{attr_int, attr_ints, attr_str, axis, exact_div, product, show, Shape};
use crate::sym::Poly;

/// A dimension that must be a plain number (spatial sizes, kernel sizes).
fn number(p: &Poly, what: &str) -> Result<i64, Reason> {
    p.as_integer()
        .and_then(|i| i64::try_from(i).ok())
        .ok_or_else(|| format!("{what} `{p}` is not a number"))
}

/// Output size of a sliding window: ⌊(n + 2·pad − k)/stride⌋ + 1, or the ceiling with `ceil`.
fn window_out(n: i64, k: i64, stride: i64, pad: i64, ceil: bool) -> Result<i64, Reason> {
    window_out_padded(n, k, stride, pad.saturating_mul(2), ceil)
}

/// Output size of a sliding window padded by `total` elements in all (before and after):
/// ⌊(n + total − k)/stride⌋ + 1, or the ceiling with `ceil`.
fn window_out_padded(n: i64, k: i64, stride: i64, total: i64, ceil: bool) -> Result<i64, Reason> {
    let span = i128::from(n) + i128::from(total) - i128::from(k);
    if span < 0 || stride <= 0 || total < 0 || k <= 0 {
        return Err(format!(
            "a window of {k}, stride {stride} does not fit {n} with padding {total} in all"
        ));
    }
    let stride = i128::from(stride);
    if ceil && span % stride != 0 {
        return Err("ceil_mode with a partial last window".into());
    }
    i64::try_from(span / stride + 1).map_err(|_| "a window count out of range".to_string())
}

/// A convolution's padding per axis, before plus after: ONNX `pads` as [top, left, bottom,
/// right], or what `auto_pad` SAME_UPPER / SAME_LOWER implies for input sides `h` and `w`
/// (enough for ⌈side / stride⌉ outputs). The rules take one padding for both axes, so the
/// totals must agree; the split between before and after may differ.
fn conv_padding(node: &NodeProto, [h, w, kh, kw]: [i64; 4], stride: i64) -> Result<i64, Reason> {
    if let Some(mode @ ("SAME_UPPER" | "SAME_LOWER")) = attr_str(node, "auto_pad").as_deref() {
        if stride <= 0 {
            return Err(format!("stride {stride}"));
        }
        let same = |n: i64, k: i64| ((n + stride - 1) / stride - 1) * stride + k - n;
        let (ph, pw) = (same(h, kh).max(0), same(w, kw).max(0));
        if ph != pw {
            return Err(format!(
                "auto_pad {mode} pads {ph} rows and {pw} columns: the rules take one total for both axes"
            ));
        }
        return Ok(ph);
    }
    let v = attr_ints(node, "pads").unwrap_or_default();
    match v.as_slice() {
        [] => Ok(0),
        [t, l, b, r] if t + b == l + r && v.iter().all(|&p| p >= 0) => Ok(t + b),
        _ => Err(format!(
            "pads {v:?}: the rules take one total padding for both axes"
        )),
    }
}

impl Mapper {
    pub(super) fn conv(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let (ws, wo) = self.constant(node, 1)?;
        if xs.len() != 4 || ws.len() != 4 {
            return Err(format!(
                "a convolution of {} by {} that is not 2-D",
                show(&xs),
                show(&ws)
            ));
        }
        let groups = attr_int(node, "group").unwrap_or(1);
        reject_attr(node, "dilations", 1)?;
        let stride = square(node, "strides", 1)?;
        if groups < 1 || &ws[1] * &Poly::int(groups) != xs[1] {
            return Err(format!(
                "input {} and weight {} channels differ for {groups} groups",
                show(&xs),
                show(&ws)
            ));
        }
        let co_group = number(&ws[0], "output channels")?;
        if co_group % groups != 0 {
            return Err(format!("{co_group} output channels in {groups} groups"));
        }
        let (kh, kw) = (
            number(&ws[2], "kernel height")?,
            number(&ws[3], "kernel width")?,
        );
        let (ih, iw) = (number(&xs[2], "height")?, number(&xs[3], "width")?);
        let pad = conv_padding(node, [ih, iw, kh, kw], stride)?;
        let oh = window_out_padded(ih, kh, stride, pad, false)?;
        let ow = window_out_padded(iw, kw, stride, pad, false)?;
        let bias = match node.input.get(2).filter(|t| !t.is_empty()) {
            None => None,
            Some(_) => Some(self.constant(node, 2)?.1),
        };
        let rule = match (groups > 1, bias.is_some()) {
            (false, false) => "conv2d",
            (false, true) => "conv2d_bias",
            (true, false) => "conv2d_grouped",
            (true, true) => "conv2d_grouped_bias",
        };
        let mut e = self.new_op(node, rule);
        let channels = if groups > 1 {
            vec![
                ("g", Poly::int(groups)),
                ("co", Poly::int(co_group / groups)),
                ("ci", ws[1].clone()),
            ]
        } else {
            vec![("co", ws[0].clone()), ("ci", xs[1].clone())]
        };
        e.bind = vec![("n", xs[0].clone())];
        e.bind.extend(channels);
        e.bind.extend([
            ("oh", Poly::int(oh)),
            ("ow", Poly::int(ow)),
            ("kh", Poly::int(kh)),
            ("kw", Poly::int(kw)),
            ("stride", Poly::int(stride)),
            // The rules' one padding per side: half the total, rounded down when
            // TensorFlow-style "same" padding puts one more row after than before (as the
            // Hugging Face MobileNet and EfficientNet ports export it). The output size, and so
            // the FLOPs, come from the total; the rule's input extent is then one row and
            // column larger than the tensor, which only its byte count sees.
            ("pad", Poly::int(pad / 2)),
        ]);
        e.ins = vec![("x", x)];
        self.param(&mut e, "w", wo);
        if let Some(bo) = bias {
            self.param(&mut e, "bias", bo);
        }
        let out = vec![xs[0].clone(), ws[0].clone(), Poly::int(oh), Poly::int(ow)];
        self.emit(node, label, e, out);
        Ok(())
    }

    pub(super) fn pool(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        if xs.len() != 4 {
            return Err(format!("pooling of {} that is not 2-D", show(&xs)));
        }
        if self.used(node, 1) {
            return Err("the Indices output is used".into());
        }
        reject_attr(node, "dilations", 1)?;
        explicit_pads(node)?;
        let k = attr_ints(node, "kernel_shape").ok_or("no kernel_shape")?;
        let [kh, kw] = k.as_slice() else {
            return Err(format!("kernel_shape {k:?} is not 2-D"));
        };
        let stride = square(node, "strides", 1)?;
        let pad = square(node, "pads", 0)?;
        let ceil = attr_int(node, "ceil_mode").unwrap_or(0) != 0;
        let oh = window_out(number(&xs[2], "height")?, *kh, stride, pad, ceil)?;
        let ow = window_out(number(&xs[3], "width")?, *kw, stride, pad, ceil)?;
        let rule = if node.op_type() == "MaxPool" {
            "maxpool2d"
        } else {
            "avgpool2d"
        };
        let mut e = self.new_op(node, rule);
        e.bind = vec![
            ("n", xs[0].clone()),
            ("c", xs[1].clone()),
            ("oh", Poly::int(oh)),
            ("ow", Poly::int(ow)),
            ("kh", Poly::int(*kh)),
            ("kw", Poly::int(*kw)),
            ("stride", Poly::int(stride)),
            ("pad", Poly::int(pad)),
        ];
        e.ins = vec![("x", x)];
        let out = vec![xs[0].clone(), xs[1].clone(), Poly::int(oh), Poly::int(ow)];
        self.emit(node, label, e, out);
        Ok(())
    }

    pub(super) fn global_pool(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        if xs.len() < 3 {
            return Err(format!(
                "global pooling of {} without spatial axes",
                show(&xs)
            ));
        }
        let mut e = self.new_op(node, "global_avgpool");
        e.bind = vec![
            ("n", xs[0].clone()),
            ("c", xs[1].clone()),
            ("s", product(&xs[2..])),
        ];
        e.ins = vec![("x", x)];
        let mut out = xs[..2].to_vec();
        out.extend(std::iter::repeat_n(Poly::one(), xs.len() - 2));
        self.emit(node, label, e, out);
        Ok(())
    }

    pub(super) fn batchnorm(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        if xs.len() < 2 {
            return Err(format!("batch normalisation of {}", show(&xs)));
        }
        if (1..node.output.len()).any(|k| self.used(node, k)) {
            return Err("the running-statistics outputs are used".into());
        }
        let (_, go) = self.constant(node, 1)?;
        let (_, bo) = self.constant(node, 2)?;
        let mut e = self.new_op(node, "batchnorm");
        e.bind = vec![
            ("n", xs[0].clone()),
            ("c", xs[1].clone()),
            ("s", product(&xs[2..])),
        ];
        e.ins = vec![("x", x)];
        self.param(&mut e, "gamma", go);
        self.param(&mut e, "beta", bo);
        self.emit(node, label, e, xs);
        Ok(())
    }

    /// Reshape, Flatten and Transpose: views and copies with no arithmetic. A constant input
    /// stays a constant (a weight seen through a view).
    pub(super) fn view(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let input = self.get(node, 0)?.clone();
        let shape = match &input {
            Value::Act { shape, .. } | Value::Const { shape, .. } => shape.clone(),
            Value::Unknown(why) => return Err(why.clone()),
        };
        let (rule, out, bind) = match node.op_type() {
            "Reshape" | "Squeeze" | "Unsqueeze" => self.reshape_rule(node, &shape)?,
            "Flatten" => flatten_rule(node, &shape)?,
            _ => transpose_rule(node, &shape)?,
        };
        // A transpose that keeps the order, or a reshape to the same shape, is no operator.
        let identity = match rule {
            "transpose" => is_identity_perm(node, shape.len()),
            _ => out == shape,
        };
        match input {
            Value::Const { origin, vals, .. } => {
                let vals = const_view_vals(node, rule, &shape, &out, vals);
                let v = Value::Const {
                    shape: out,
                    vals,
                    origin,
                };
                self.set(node, 0, v);
            }
            Value::Act { name, .. } if identity => {
                self.set(node, 0, Value::Act { name, shape: out });
            }
            Value::Act { name, .. } => {
                let mut e = self.new_op(node, rule);
                e.bind = bind;
                e.ins = vec![("x", name)];
                self.emit(node, label, e, out);
            }
            Value::Unknown(why) => return Err(why),
        }
        Ok(())
    }

    /// The rule, output shape and sizes of a Reshape, Squeeze or Unsqueeze of `shape`.
    fn reshape_rule(&self, node: &NodeProto, shape: &[Poly]) -> Result<ViewRule, Reason> {
        let out = if node.op_type() == "Reshape" {
            self.reshaped(node, shape)?
        } else {
            self.squeezed(node, shape)?
        };
        Ok(match (shape.split_last(), out.split_last()) {
            // Only the leading dimensions regrouped: the last one maps straight through, so a
            // feature split passes the view.
            (Some((a, lead_in)), Some((z, lead_out)))
                if a == z && product(lead_in) == product(lead_out) =>
            {
                let bind = vec![("t", product(lead_out)), ("h", z.clone())];
                ("view", out.clone(), bind)
            }
            // The last two dimensions merged (attention heads joined again): a flatten, whose
            // outer merged index maps.
            _ if shape.len() >= 2
                && out.last() == Some(&(&shape[shape.len() - 2] * &shape[shape.len() - 1]))
                && product(&shape[..shape.len() - 2]) == product(&out[..out.len() - 1]) =>
            {
                let r = shape.len();
                let bind = vec![
                    ("n", product(&shape[..r - 2])),
                    ("c", shape[r - 2].clone()),
                    ("s", shape[r - 1].clone()),
                ];
                ("flatten", out.clone(), bind)
            }
            _ => {
                let (b, n, d) = split3(&out);
                ("reshape", out, vec![("b", b), ("n", n), ("d", d)])
            }
        })
    }

    /// The output shape of a Squeeze or Unsqueeze: axes from the second input (opset 13 on) or
    /// the `axes` attribute.
    fn squeezed(&self, node: &NodeProto, shape: &[Poly]) -> Result<Shape, Reason> {
        let axes: Option<Vec<i64>> = match node.input.get(1).filter(|t| !t.is_empty()) {
            Some(_) => Some(self.ints(node, 1)?),
            None => attr_ints(node, "axes").filter(|a| !a.is_empty()),
        };
        if node.op_type() == "Squeeze" {
            let r = shape.len() as i64;
            let drop: Vec<usize> = match axes {
                Some(a) => a
                    .iter()
                    .map(|&x| {
                        let x = if x < 0 { x + r } else { x };
                        usize::try_from(x)
                            .ok()
                            .filter(|x| shape.get(*x).is_some_and(|d| *d == Poly::one()))
                            .ok_or_else(|| format!("axis {x} of {} is not of size 1", show(shape)))
                    })
                    .collect::<Result<_, _>>()?,
                None => (0..shape.len())
                    .filter(|&i| shape[i] == Poly::one())
                    .collect(),
            };
            return Ok((0..shape.len())
                .filter(|i| !drop.contains(i))
                .map(|i| shape[i].clone())
                .collect());
        }
        let axes = axes.ok_or("no axes")?;
        let r = (shape.len() + axes.len()) as i64;
        let mut at: Vec<usize> = axes
            .iter()
            .map(|&x| {
                let x = if x < 0 { x + r } else { x };
                usize::try_from(x)
                    .ok()
                    .filter(|x| (*x as i64) < r)
                    .ok_or_else(|| format!("axis {x} out of range"))
            })
            .collect::<Result<_, _>>()?;
        at.sort_unstable();
        at.dedup();
        if at.len() != axes.len() {
            return Err(format!("repeated axes {axes:?}"));
        }
        let mut rest = shape.iter();
        Ok((0..r as usize)
            .map(|i| {
                if at.contains(&i) {
                    Poly::one()
                } else {
                    rest.next().cloned().unwrap_or_else(Poly::one)
                }
            })
            .collect())
    }

    /// The output shape of a Reshape whose target shape is a constant or computed from shapes.
    fn reshaped(&self, node: &NodeProto, shape: &[Poly]) -> Result<Shape, Reason> {
        let target = match self.get(node, 1)? {
            Value::Const { vals: Some(v), .. } => v.clone(),
            Value::Unknown(why) => return Err(why.clone()),
            _ => {
                return Err(
                    "the target shape is neither a constant nor computed from shapes".into(),
                )
            }
        };
        let allow_zero = attr_int(node, "allowzero").unwrap_or(0) != 0;
        let mut out: Vec<Option<Poly>> = Vec::new();
        for (i, t) in target.iter().enumerate() {
            let n = t.as_integer().and_then(|n| i64::try_from(n).ok());
            out.push(match n {
                Some(0) if !allow_zero => {
                    Some(shape.get(i).cloned().ok_or("a 0 past the input's rank")?)
                }
                Some(-1) => None,
                Some(n) if n > 0 => Some(Poly::int(n)),
                Some(n) => return Err(format!("target dimension {n}")),
                None => Some(t.clone()),
            });
        }
        let total = product(shape);
        let known: Vec<Poly> = out.iter().flatten().cloned().collect();
        let missing = out.iter().filter(|d| d.is_none()).count();
        let inferred = match missing {
            0 => None,
            1 => Some(
                exact_div(&total, &product(&known))
                    .ok_or("the inferred dimension is not a product of the others")?,
            ),
            _ => return Err("more than one -1 in the target shape".into()),
        };
        let out: Shape = out
            .into_iter()
            .map(|d| d.or_else(|| inferred.clone()).unwrap_or_else(Poly::one))
            .collect();
        if product(&out) != total {
            return Err(format!("{} and {} differ in size", show(shape), show(&out)));
        }
        Ok(out)
    }

    pub(super) fn concat(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        if let Some(done) = self.class_token(node, label) {
            return done;
        }
        let parts: Vec<(String, Shape)> = (0..node.input.len())
            .map(|k| self.act(node, k))
            .collect::<Result<_, _>>()?;
        let Some((first, rest)) = parts.split_first() else {
            return Err("no inputs".into());
        };
        let (mut acc, mut acc_shape) = first.clone();
        let a = axis(node, 0, acc_shape.len()).ok_or("axis out of range")?;
        for (name, shape) in rest {
            let same = shape.len() == acc_shape.len()
                && (0..shape.len()).all(|i| i == a || shape[i] == acc_shape[i]);
            if !same {
                return Err(format!(
                    "{} and {} differ off the axis",
                    show(&acc_shape),
                    show(shape)
                ));
            }
            let mut e = self.new_op(node, "concat");
            let trailing = product(&shape[a + 1..]);
            e.bind = vec![
                ("b", product(&shape[..a])),
                ("m", &acc_shape[a] * &trailing),
                ("n", &shape[a] * &trailing),
            ];
            e.ins = vec![("x", acc.clone()), ("other", name.clone())];
            acc_shape[a] = &acc_shape[a] + &shape[a];
            acc = e.name.clone();
            e.doc = label.to_string();
            self.emitted.push(e);
        }
        self.set(
            node,
            0,
            Value::Act {
                name: acc,
                shape: acc_shape,
            },
        );
        Ok(())
    }

    /// Constant padding of the two spatial axes of an image tensor (`Pad`, mode `constant`,
    /// pads from a constant), the same total on both axes: the rule pad2d, a copy into the
    /// larger tensor the convolution after it reads with no padding of its own.
    pub(super) fn pad(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let mode = attr_str(node, "mode").unwrap_or_else(|| "constant".into());
        if mode != "constant" {
            return Err(format!("padding mode `{mode}`"));
        }
        // The fill value (input 2) does not change the copy's cost.
        if node.input.get(3).is_some_and(|t| !t.is_empty()) {
            return Err("padding over chosen axes (the `axes` input)".into());
        }
        let pads: Vec<i64> = match node.input.get(1).filter(|t| !t.is_empty()) {
            Some(_) => match self.get(node, 1)? {
                Value::Const { vals: Some(v), .. } => v
                    .iter()
                    .map(|p| number(p, "a padding"))
                    .collect::<Result<_, _>>()?,
                _ => return Err("the pads are computed, not a constant".into()),
            },
            None => attr_ints(node, "pads").unwrap_or_default(),
        };
        let [0, 0, t, l, 0, 0, b, r] = pads.as_slice() else {
            return Err(format!(
                "pads {pads:?}: only the two spatial axes of a 4-D tensor are padded here"
            ));
        };
        if xs.len() != 4 || t + b != l + r || pads.iter().any(|&p| p < 0) {
            return Err(format!(
                "pads {pads:?} of {}: one nonnegative total for both spatial axes",
                show(&xs)
            ));
        }
        let total = Poly::int(t + b);
        let mut e = self.new_op(node, "pad2d");
        let (h, w) = (&xs[2] + &total, &xs[3] + &total);
        e.bind = vec![
            ("n", xs[0].clone()),
            ("c", xs[1].clone()),
            ("h", h.clone()),
            ("w", w.clone()),
            ("pad", total),
        ];
        e.ins = vec![("x", x)];
        let out = vec![xs[0].clone(), xs[1].clone(), h, w];
        self.emit(node, label, e, out);
        Ok(())
    }

    /// A learned token prepended to every sequence (ViT's class token): Concat on axis 1 of a
    /// constant [1, 1, h] or [b, 1, h] (the token, or the token the exporter expanded over the
    /// batch and folded into a constant) and a computed [b, t, h]. The token is one parameter
    /// row of h whichever shape the file stores it in. `None` when the node is not of that form.
    fn class_token(&mut self, node: &NodeProto, label: &str) -> Option<Result<(), Reason>> {
        if node.input.len() != 2 {
            return None;
        }
        let (
            Value::Const {
                shape: ts, origin, ..
            },
            Value::Act { name, shape: xs },
        ) = (self.get(node, 0).ok()?, self.get(node, 1).ok()?)
        else {
            return None;
        };
        let one = Poly::one();
        let fits = xs.len() == 3
            && ts.len() == 3
            && axis(node, 0, 3) == Some(1)
            && (ts[0] == one || ts[0] == xs[0])
            && ts[1] == one
            && ts[2] == xs[2];
        if !fits {
            return None;
        }
        let (origin, x, xs) = (origin.clone(), name.clone(), xs.clone());
        let mut e = self.new_op(node, "class_token");
        e.bind = vec![
            ("b", xs[0].clone()),
            ("t", xs[1].clone()),
            ("h", xs[2].clone()),
        ];
        e.ins = vec![("x", x)];
        self.param(&mut e, "token", origin);
        let out = vec![xs[0].clone(), &xs[1] + &one, xs[2].clone()];
        self.emit(node, label, e, out);
        Some(Ok(()))
    }

    pub(super) fn split(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (x, xs) = self.act(node, 0)?;
        let a = axis(node, 0, xs.len()).ok_or("axis out of range")?;
        let d = xs.get(a).cloned().ok_or("a split of a scalar")?;
        let outputs = node.output.len();
        let sizes: Vec<Poly> = match node.input.get(1).filter(|t| !t.is_empty()) {
            Some(_) => match self.get(node, 1)? {
                Value::Const { vals: Some(v), .. } => v.clone(),
                _ => return Err("the split sizes are computed, not a constant".into()),
            },
            None => match attr_ints(node, "split") {
                Some(v) if !v.is_empty() => v.iter().map(|&s| Poly::int(s)).collect(),
                _ => {
                    let k = attr_int(node, "num_outputs").unwrap_or(outputs as i64);
                    if k != outputs as i64 || k < 1 {
                        return Err(format!("num_outputs {k} for {outputs} outputs"));
                    }
                    let piece = d.checked_div(&Poly::int(k)).map_err(|e| e.to_string())?;
                    vec![piece; outputs]
                }
            },
        };
        if sizes.len() != outputs || sizes.iter().cloned().sum::<Poly>() != d {
            return Err(format!("split sizes do not add up to the axis {d}"));
        }
        let (lead, trailing) = (product(&xs[..a]), product(&xs[a + 1..]));
        for (i, size) in sizes.iter().enumerate() {
            let mut out = xs.clone();
            out[a] = size.clone();
            if *size == d {
                self.set(
                    node,
                    i,
                    Value::Act {
                        name: x.clone(),
                        shape: out,
                    },
                );
                continue;
            }
            let mut e = self.new_op(node, "split");
            e.name = {
                self.taken.remove(&e.name);
                self.alloc(&format!("{}_{i}", e.name))
            };
            e.bind = vec![
                ("b", lead.clone()),
                ("m", size * &trailing),
                ("n", (&d - size) * &trailing),
            ];
            e.ins = vec![("x", x.clone())];
            e.doc = label.to_string();
            let name = e.name.clone();
            self.emitted.push(e);
            self.set(node, i, Value::Act { name, shape: out });
        }
        Ok(())
    }
}

/// Whether a Transpose keeps every axis in place.
fn is_identity_perm(node: &NodeProto, rank: usize) -> bool {
    match attr_ints(node, "perm").filter(|p| !p.is_empty()) {
        Some(p) => p.iter().enumerate().all(|(i, &x)| x == i as i64),
        None => rank <= 1,
    }
}

/// The output shape of a Transpose.
/// A Transpose's `perm` (by default the axes reversed) as indices; entries out of range are
/// left for [`permuted`] to refuse.
fn permutation(node: &NodeProto, r: usize) -> Vec<usize> {
    attr_ints(node, "perm")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| (0..r as i64).rev().collect())
        .into_iter()
        .map(|p| usize::try_from(p).unwrap_or(usize::MAX))
        .collect()
}

fn permuted(node: &NodeProto, shape: &[Poly]) -> Result<Shape, Reason> {
    let r = shape.len();
    let perm: Vec<i64> = attr_ints(node, "perm")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| (0..r as i64).rev().collect());
    let mut seen = vec![false; r];
    let mut out = Vec::new();
    for &p in &perm {
        let i = usize::try_from(p)
            .ok()
            .filter(|i| *i < r)
            .ok_or("perm out of range")?;
        if std::mem::replace(&mut seen[i], true) {
            return Err(format!("perm {perm:?} is not a permutation"));
        }
        out.push(shape[i].clone());
    }
    if out.len() != r {
        return Err(format!("perm {perm:?} is not a permutation"));
    }
    Ok(out)
}

/// An operator rule, its output shape and its sizes: what a view of a tensor becomes.
type ViewRule = (&'static str, Shape, Vec<(&'static str, Poly)>);

/// The rule, output shape and sizes of a Flatten of `shape`.
fn flatten_rule(node: &NodeProto, shape: &[Poly]) -> Result<ViewRule, Reason> {
    let r = shape.len() as i64;
    let a = attr_int(node, "axis").unwrap_or(1);
    let a = if a < 0 { a + r } else { a };
    let a = usize::try_from(a)
        .ok()
        .filter(|a| *a <= shape.len())
        .ok_or("axis out of range")?;
    let n = product(&shape[..a]);
    let c = shape.get(a).cloned().unwrap_or_else(Poly::one);
    let s = product(shape.get(a + 1..).unwrap_or(&[]));
    let out = vec![n.clone(), product(&shape[a..])];
    Ok(("flatten", out, vec![("n", n), ("c", c), ("s", s)]))
}

/// The rule, output shape and sizes of a Transpose of `shape`.
fn transpose_rule(node: &NodeProto, shape: &[Poly]) -> Result<ViewRule, Reason> {
    let out = permuted(node, shape)?;
    let four = |rule| {
        let bind = vec![
            ("a", shape[0].clone()),
            ("m", shape[1].clone()),
            ("n", shape[2].clone()),
            ("d", shape[3].clone()),
        ];
        (rule, out.clone(), bind)
    };
    Ok(match permutation(node, shape.len()).as_slice() {
        // The attention layouts of four dimensions, each with its own rule so that every
        // index keeps its place for the split search.
        [0, 2, 1, 3] => four("transpose_heads"),
        [0, 2, 3, 1] => four("transpose_keys"),
        _ => {
            let (b, m, n) = split3(shape);
            ("transpose", out, vec![("b", b), ("m", m), ("n", n)])
        }
    })
}

/// The contents of a constant `shape` seen through the view `rule` as `out`, where they stay
/// known.
fn const_view_vals(
    node: &NodeProto,
    rule: &str,
    shape: &[Poly],
    out: &[Poly],
    vals: Option<Vec<Poly>>,
) -> Option<Vec<Poly>> {
    let vals = match rule {
        "reshape" | "flatten" => vals,
        // A transposed constant (pads reordered by the TorchScript exporter).
        _ => vals.and_then(|v| {
            let perm = permutation(node, shape.len());
            const_vals_at(&v, shape, out, |idx| {
                let mut src = vec![0; idx.len()];
                for (k, &p) in perm.iter().enumerate() {
                    *src.get_mut(p)? = *idx.get(k)?;
                }
                Some(src)
            })
        }),
    };
    vals.filter(|v| Poly::int(v.len() as i64) == product(out))
}
