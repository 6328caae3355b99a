//! Shape inference of its own through the shape computations exporters write (`Shape`, `Gather`
//! of a shape, `Unsqueeze`, `Concat`, `Slice`, `Range`, `ConstantOfShape`, `Expand`, `Cast`,
//! arithmetic on sizes): their values are formulas of the model's symbols, so that a `Reshape`
//! to a computed target shape, or a slice to the sequence length, needs no `value_info`.

use super::onnx_map::{Mapper, Reason, Value};
use super::onnx_pb::tensor_proto::DataType;
use super::onnx_pb::NodeProto;
use super::onnx_shape::tensor_vals;
use super::onnx_shape::{attr_int, attr_ints, attr_tensor, axis, exact_div, product, show, Shape};
use crate::sym::Poly;

/// Most values a constant keeps (shapes and index lists are short; anything longer is a weight).
const MAX_VALS: usize = 64;

/// A stop at or past this is "to the end" (exporters write `INT64_MAX` or `INT32_MAX`).
const TO_END: i64 = i32::MAX as i64;

/// A number of a formula that is one.
fn int_of(p: &Poly) -> Option<i64> {
    p.as_integer().and_then(|n| i64::try_from(n).ok())
}

/// The values of a small constant of numeric shape `out` (at most 4096 elements), each taken from
/// `v` (row-major, of shape `shape`) at the index `src` gives for the output index; `None` when a
/// shape is symbolic, too large, or an index falls outside.
pub(super) fn const_vals_at(
    v: &[Poly],
    shape: &[Poly],
    out: &[Poly],
    src: impl Fn(&[usize]) -> Option<Vec<usize>>,
) -> Option<Vec<Poly>> {
    let nums = |s: &[Poly]| -> Option<Vec<usize>> {
        s.iter()
            .map(|d| int_of(d).and_then(|x| usize::try_from(x).ok()))
            .collect()
    };
    let (dims, out) = (nums(shape)?, nums(out)?);
    let total: usize = out.iter().product();
    if total > 4096 || v.len() != dims.iter().product::<usize>() {
        return None;
    }
    let mut res = Vec::with_capacity(total);
    let mut idx = vec![0usize; out.len()];
    for _ in 0..total {
        let s = src(&idx)?;
        let mut flat = 0usize;
        for (k, &i) in s.iter().enumerate() {
            if i >= dims[k] {
                return None;
            }
            flat = flat * dims[k] + i;
        }
        res.push(v.get(flat)?.clone());
        for k in (0..out.len()).rev() {
            idx[k] += 1;
            if idx[k] < out[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Some(res)
}

/// Numpy broadcasting of two shapes.
pub(super) fn broadcast(a: &[Poly], b: &[Poly]) -> Result<Shape, Reason> {
    let r = a.len().max(b.len());
    let one = Poly::one();
    let at = |s: &[Poly], i: usize| -> Poly {
        (i + s.len())
            .checked_sub(r)
            .map_or_else(|| one.clone(), |j| s[j].clone())
    };
    (0..r)
        .map(|i| {
            let (x, y) = (at(a, i), at(b, i));
            if x == y || y == one {
                Ok(x)
            } else if x == one {
                Ok(y)
            } else {
                Err(format!("{} and {} do not broadcast", show(a), show(b)))
            }
        })
        .collect()
}

/// Start and length of a slice of a dimension `d` from `start` to `end` by `step`.
fn slice_span(d: &Poly, start: &Poly, end: &Poly, step: i64) -> Result<(Poly, Poly), Reason> {
    if step == 0 {
        return Err("a slice step of 0".into());
    }
    if let (Some(n), Some(s), Some(e)) = (int_of(d), int_of(start), int_of(end)) {
        // The ONNX rules, on numbers: clamp, then count the steps.
        let clamp = |x: i64, lo: i64, hi: i64| {
            let x = if x < 0 { x.saturating_add(n) } else { x };
            x.clamp(lo, hi)
        };
        let (s, e) = if step > 0 {
            (clamp(s, 0, n), clamp(e, 0, n))
        } else {
            (clamp(s, -1, n - 1), clamp(e, -1, n - 1))
        };
        let len = if step > 0 {
            (e - s + step - 1).div_euclid(step).max(0)
        } else {
            (s - e - step - 1).div_euclid(-step).max(0)
        };
        return Ok((Poly::int(s), Poly::int(len)));
    }
    if step != 1 {
        return Err(format!("a step of {step} over the symbolic size {d}"));
    }
    // A symbolic size: slices from a fixed start to the end, or to a computed stop.
    let s = match int_of(start) {
        Some(s) if s >= 0 => Poly::int(s),
        Some(s) => d + &Poly::int(s),
        None => start.clone(),
    };
    let e = match int_of(end) {
        Some(e) if e >= TO_END => d.clone(),
        Some(e) if e < 0 => d + &Poly::int(e),
        _ => end.clone(),
    };
    Ok((s.clone(), &e - &s))
}

impl Mapper {
    /// A constant input's shape and values.
    pub(super) fn const_vals(
        &self,
        node: &NodeProto,
        k: usize,
    ) -> Result<(Shape, Vec<Poly>), Reason> {
        match self.get(node, k)? {
            Value::Const {
                shape,
                vals: Some(v),
                ..
            } => Ok((shape.clone(), v.clone())),
            Value::Unknown(why) => Err(why.clone()),
            _ => Err(format!(
                "input `{}` is not a constant or a size computed from shapes",
                node.input[k]
            )),
        }
    }

    /// A constant input's values as numbers.
    pub(super) fn ints(&self, node: &NodeProto, k: usize) -> Result<Vec<i64>, Reason> {
        let (_, v) = self.const_vals(node, k)?;
        v.iter()
            .map(|p| int_of(p).ok_or_else(|| format!("`{}` holds the formula {p}", node.input[k])))
            .collect()
    }

    /// The shape of an input of any kind.
    fn shape_in(&self, node: &NodeProto, k: usize) -> Result<Shape, Reason> {
        match self.get(node, k)? {
            Value::Act { shape, .. } | Value::Const { shape, .. } => Ok(shape.clone()),
            Value::Unknown(why) => Err(why.clone()),
        }
    }

    fn set_const(&mut self, node: &NodeProto, shape: Shape, vals: Option<Vec<Poly>>) {
        let vals = vals.filter(|v| v.len() <= MAX_VALS);
        let v = Value::Const {
            shape,
            vals,
            origin: None,
        };
        self.set(node, 0, v);
    }

    /// `Shape`: the input's dimensions as values (`start`/`end` from opset 15).
    pub(super) fn shape_node(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let shape = self.shape_in(node, 0)?;
        let r = shape.len() as i64;
        let at = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r) as usize;
        let s = at(attr_int(node, "start").unwrap_or(0));
        let e = at(attr_int(node, "end").unwrap_or(r));
        let dims = shape[s..e.max(s)].to_vec();
        self.set_const(node, vec![Poly::int(dims.len() as i64)], Some(dims));
        Ok(())
    }

    /// `Gather` with constant indices: values of a shape, or one position of a computed tensor
    /// (a copy, as the `split` rule).
    pub(super) fn gather_const(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (is, idx) = match self.get(node, 1)? {
            Value::Const {
                shape,
                vals: Some(v),
                ..
            } => (shape.clone(), v.clone()),
            _ => return Err("indices that are neither a tensor nor known".into()),
        };
        let idx: Vec<i64> = idx
            .iter()
            .map(|p| int_of(p).ok_or_else(|| format!("an index {p} that is not a number")))
            .collect::<Result<_, _>>()?;
        let data = self.get(node, 0)?.clone();
        match data {
            Value::Const {
                shape,
                vals: Some(v),
                ..
            } if shape.len() == 1 => {
                let n = v.len() as i64;
                let picked: Vec<Poly> = idx
                    .iter()
                    .map(|&i| {
                        let i = if i < 0 { i + n } else { i };
                        usize::try_from(i)
                            .ok()
                            .and_then(|i| v.get(i).cloned())
                            .ok_or_else(|| format!("index {i} out of {n} values"))
                    })
                    .collect::<Result<_, _>>()?;
                self.set_const(node, is, Some(picked));
                Ok(())
            }
            Value::Act { name, shape } if idx.len() == 1 => {
                let a = axis(node, 0, shape.len()).ok_or("axis out of range")?;
                let d = shape[a].clone();
                let mut out = shape[..a].to_vec();
                out.extend(is.iter().cloned());
                out.extend(shape[a + 1..].iter().cloned());
                if d == Poly::one() {
                    self.set(node, 0, Value::Act { name, shape: out });
                    return Ok(());
                }
                let trailing = product(&shape[a + 1..]);
                let mut e = self.new_op(node, "split");
                e.bind = vec![
                    ("b", product(&shape[..a])),
                    ("m", trailing.clone()),
                    ("n", (&d - &Poly::one()) * &trailing),
                ];
                e.ins = vec![("x", name)];
                self.emit(node, label, e, out);
                Ok(())
            }
            Value::Unknown(why) => Err(why),
            _ => Err("a gather of constant indices from this input".into()),
        }
    }

    /// `Concat` of constants: shapes joined, values when they are known.
    pub(super) fn concat_const(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let mut shape: Option<Shape> = None;
        let mut vals: Option<Vec<Poly>> = Some(Vec::new());
        for k in 0..node.input.len() {
            let (s, v) = match self.get(node, k)? {
                Value::Const { shape, vals, .. } => (shape.clone(), vals.clone()),
                _ => return Err("a concatenation of constants and computed tensors".into()),
            };
            let a = axis(node, 0, s.len()).ok_or("axis out of range")?;
            vals = match (vals, v) {
                (Some(mut acc), Some(v)) if s.len() == 1 => {
                    acc.extend(v);
                    Some(acc)
                }
                _ => None,
            };
            shape = Some(match shape {
                None => s,
                Some(mut acc) if acc.len() == s.len() => {
                    acc[a] = &acc[a] + &s[a];
                    acc
                }
                Some(acc) => return Err(format!("{} and {} differ", show(&acc), show(&s))),
            });
        }
        self.set_const(node, shape.ok_or("no inputs")?, vals);
        Ok(())
    }

    /// `Slice`: of a constant (shape, and values of a 1-D one), or of a computed tensor along
    /// one axis (a copy, as the `split` rule).
    pub(super) fn slice(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let data = self.get(node, 0)?.clone();
        let shape = self.shape_in(node, 0)?;
        let r = shape.len() as i64;
        let (starts, ends, axes, steps) = self.slice_bounds(node)?;
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err("starts, ends, axes and steps differ in length".into());
        }
        let mut out = shape.clone();
        let mut changed = Vec::new();
        // Per axis, the first index taken and the step (for a constant's values).
        let mut spans: Vec<(Poly, i64)> = vec![(Poly::zero(), 1); shape.len()];
        for i in 0..starts.len() {
            let a = if axes[i] < 0 { axes[i] + r } else { axes[i] };
            let a = usize::try_from(a)
                .ok()
                .filter(|a| *a < shape.len())
                .ok_or_else(|| format!("axis {} out of range", axes[i]))?;
            let (s, len) = slice_span(&shape[a], &starts[i], &ends[i], steps[i])?;
            if len != shape[a] {
                changed.push((a, steps[i]));
            }
            spans[a] = (s, steps[i]);
            out[a] = len;
        }
        match data {
            Value::Const { vals, origin, .. } => {
                // Unchanged and in order, the constant is the same tensor (and keeps its
                // origin); otherwise its values are taken at the slice's indices.
                let same = changed.is_empty() && spans.iter().all(|(_, step)| *step == 1);
                let v = Value::Const {
                    vals: vals.and_then(|v| {
                        if same {
                            Some(v)
                        } else {
                            sliced_vals(&v, &shape, &out, &spans)
                        }
                    }),
                    shape: out,
                    origin: origin.filter(|_| same),
                };
                self.set(node, 0, v);
                Ok(())
            }
            Value::Act { name, .. } => match changed.as_slice() {
                [] => {
                    self.set(node, 0, Value::Act { name, shape: out });
                    Ok(())
                }
                [(a, 1)] => {
                    let a = *a;
                    let trailing = product(&shape[a + 1..]);
                    let mut e = self.new_op(node, "split");
                    e.bind = vec![
                        ("b", product(&shape[..a])),
                        ("m", &out[a] * &trailing),
                        ("n", (&shape[a] - &out[a]) * &trailing),
                    ];
                    e.ins = vec![("x", name)];
                    self.emit(node, label, e, out);
                    Ok(())
                }
                _ => Err(format!(
                    "a slice of {} to {} along more than one axis or with a step",
                    show(&shape),
                    show(&out)
                )),
            },
            Value::Unknown(why) => Err(why),
        }
    }

    /// A `Slice`'s starts, ends, axes and steps: from its inputs (opset 10 on) or its
    /// attributes.
    fn slice_bounds(&self, node: &NodeProto) -> Result<SliceBounds, Reason> {
        let opt = |k: usize| node.input.get(k).is_some_and(|t| !t.is_empty());
        if self.opset >= 10 {
            let (_, s) = self.const_vals(node, 1)?;
            let (_, e) = self.const_vals(node, 2)?;
            let a = if opt(3) {
                self.ints(node, 3)?
            } else {
                (0..s.len() as i64).collect()
            };
            let st = if opt(4) {
                self.ints(node, 4)?
            } else {
                vec![1; s.len()]
            };
            return Ok((s, e, a, st));
        }
        let ints = |name| -> Vec<Poly> {
            attr_ints(node, name)
                .unwrap_or_default()
                .into_iter()
                .map(Poly::int)
                .collect()
        };
        let (s, e) = (ints("starts"), ints("ends"));
        let a = attr_ints(node, "axes")
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| (0..s.len() as i64).collect());
        let n = s.len();
        Ok((s, e, a, vec![1; n]))
    }

    /// `Range`: its length, and its values when they are numbers.
    pub(super) fn range(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let one = |k: usize| -> Result<Poly, Reason> {
            let (_, v) = self.const_vals(node, k)?;
            v.first().cloned().ok_or_else(|| "an empty operand".into())
        };
        let (start, limit, delta) = (one(0)?, one(1)?, one(2)?);
        match (int_of(&start), int_of(&limit), int_of(&delta)) {
            (Some(s), Some(l), Some(d)) if d != 0 => {
                let n = ((l - s + d - d.signum()) / d).max(0);
                let vals = (n as usize <= MAX_VALS).then(|| (0..n).map(|i| Poly::int(s + i * d)));
                self.set_const(node, vec![Poly::int(n)], vals.map(Iterator::collect));
                Ok(())
            }
            (_, _, Some(1)) => {
                self.set_const(node, vec![&limit - &start], None);
                Ok(())
            }
            _ => Err(format!("a range from {start} to {limit} by {delta}")),
        }
    }

    /// `ConstantOfShape`: a constant of a computed shape.
    pub(super) fn constant_of_shape(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let (_, dims) = self.const_vals(node, 0)?;
        let fill = attr_tensor(node, "value")
            .and_then(tensor_vals)
            .and_then(|v| v.first().cloned())
            .unwrap_or_else(Poly::zero);
        let count = int_of(&product(&dims)).and_then(|n| usize::try_from(n).ok());
        let vals = count
            .filter(|n| *n <= MAX_VALS)
            .map(|n| vec![fill.clone(); n]);
        self.set_const(node, dims, vals);
        Ok(())
    }

    /// `Expand`: a broadcast to a computed shape; of a computed tensor along one new or size-1
    /// axis, the `expand` rule.
    pub(super) fn expand(&mut self, node: &NodeProto, label: &str) -> Result<(), Reason> {
        let (_, target) = self.const_vals(node, 1)?;
        let data = self.get(node, 0)?.clone();
        let shape = self.shape_in(node, 0)?;
        let out = broadcast(&shape, &target)?;
        match data {
            Value::Const { vals, origin, .. } => {
                let same = out == shape;
                let v = Value::Const {
                    shape: out,
                    vals: vals.filter(|_| same),
                    origin: origin.filter(|_| same),
                };
                self.set(node, 0, v);
                Ok(())
            }
            Value::Act { name, .. } => {
                // The input with leading 1s to the output's rank.
                let mut padded = vec![Poly::one(); out.len() - shape.len()];
                padded.extend(shape.iter().cloned());
                let grown: Vec<usize> = (0..out.len()).filter(|&i| padded[i] != out[i]).collect();
                match grown.as_slice() {
                    [] => {
                        self.set(node, 0, Value::Act { name, shape: out });
                        Ok(())
                    }
                    [a] => {
                        let mut e = self.new_op(node, "expand");
                        e.bind = vec![
                            ("b", product(&out[..*a])),
                            ("r", out[*a].clone()),
                            ("d", product(&out[a + 1..])),
                        ];
                        e.ins = vec![("x", name)];
                        self.emit(node, label, e, out);
                        Ok(())
                    }
                    _ => Err(format!(
                        "a broadcast of {} to {} along more than one axis",
                        show(&shape),
                        show(&out)
                    )),
                }
            }
            Value::Unknown(why) => Err(why),
        }
    }

    /// `Cast`: the same tensor; a constant keeps its values when cast to an integer type.
    pub(super) fn cast(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let v = match self.get(node, 0)?.clone() {
            Value::Const {
                shape,
                vals,
                origin,
            } => {
                let to_int = attr_int(node, "to")
                    .and_then(|t| i32::try_from(t).ok())
                    .and_then(|t| DataType::try_from(t).ok())
                    .is_some_and(|t| matches!(t, DataType::Int64 | DataType::Int32));
                Value::Const {
                    shape,
                    vals: vals.filter(|_| to_int),
                    origin,
                }
            }
            other => other,
        };
        self.set(node, 0, v);
        Ok(())
    }

    /// Arithmetic of two constants: sizes computed from shapes (`Div` is exact division).
    pub(super) fn const_arith(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let (a, b) = (self.get(node, 0)?.clone(), self.get(node, 1)?.clone());
        let (
            Value::Const {
                shape: sa,
                vals: va,
                ..
            },
            Value::Const {
                shape: sb,
                vals: vb,
                ..
            },
        ) = (a, b)
        else {
            return Err("not two constants".into());
        };
        let out = broadcast(&sa, &sb)?;
        let vals = match (va, vb) {
            (Some(x), Some(y)) if x.len() == y.len() || x.len() == 1 || y.len() == 1 => {
                let n = x.len().max(y.len());
                let pick = |v: &Vec<Poly>, i: usize| v[if v.len() == 1 { 0 } else { i }].clone();
                (0..n)
                    .map(|i| {
                        let (p, q) = (pick(&x, i), pick(&y, i));
                        match node.op_type() {
                            "Add" => Some(&p + &q),
                            "Sub" => Some(&p - &q),
                            "Mul" => Some(&p * &q),
                            _ => match (int_of(&p), int_of(&q)) {
                                (Some(p), Some(q)) if q != 0 => Some(Poly::int(p.div_euclid(q))),
                                _ => exact_div(&p, &q),
                            },
                        }
                    })
                    .collect()
            }
            _ => None,
        };
        self.set_const(node, out, vals);
        Ok(())
    }
}

/// A `Slice`'s starts, ends, axes and steps.
type SliceBounds = (Vec<Poly>, Vec<Poly>, Vec<i64>, Vec<i64>);

/// The values of a constant of `shape` at a slice (`spans`: per axis, the first index and the
/// step) of shape `out`, where every first index is a number.
fn sliced_vals(
    v: &[Poly],
    shape: &[Poly],
    out: &[Poly],
    spans: &[(Poly, i64)],
) -> Option<Vec<Poly>> {
    let first: Vec<i64> = spans
        .iter()
        .map(|(s, _)| int_of(s))
        .collect::<Option<_>>()?;
    const_vals_at(v, shape, out, |idx| {
        idx.iter()
            .zip(&first)
            .zip(spans)
            .map(|((&j, &f), (_, step))| usize::try_from(f + j as i64 * step).ok())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Poly {
        Poly::parse(s).unwrap()
    }

    #[test]
    fn slices_of_numbers_and_symbols() {
        // numpy: list(range(10))[2:-1] has 7 items, [::-1] 10, [8:2:-2] 3.
        assert_eq!(
            slice_span(&p("10"), &p("2"), &p("-1"), 1),
            Ok((p("2"), p("7")))
        );
        let all = slice_span(&p("10"), &p("-1"), &Poly::int(-i64::MAX), -1);
        assert_eq!(all, Ok((p("9"), p("10"))));
        assert_eq!(
            slice_span(&p("10"), &p("8"), &p("2"), -2),
            Ok((p("8"), p("3")))
        );
        let end = Poly::int(i64::MAX);
        assert_eq!(
            slice_span(&p("S"), &p("1"), &end, 1),
            Ok((p("1"), p("S - 1")))
        );
        assert_eq!(
            slice_span(&p("P"), &p("0"), &p("S"), 1),
            Ok((p("0"), p("S")))
        );
        assert!(slice_span(&p("S"), &p("0"), &end, 2).is_err());
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let s = broadcast(&[p("B"), p("1"), p("S")], &[p("4"), p("1")]).unwrap();
        assert_eq!(s, [p("B"), p("4"), p("S")]);
        assert!(broadcast(&[p("3")], &[p("4")]).is_err());
    }
}
