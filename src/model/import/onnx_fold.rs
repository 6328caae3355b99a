//! Nodes computed from constants and shapes alone: the attention masks and index tensors the
//! TorchScript exporter traces (`Equal`, `LessOrEqual`, `And`, `Where`, `GatherElements`,
//! `Gather` of a traced constant or of a shape, …), from fixed sizes or from the input's
//! symbolic ones. Their inputs are never the data, so they are the same at every step of one
//! shape: they become constants (shape, and values when small and decided) and no operator. The
//! import lists them in the model file with the elements they produce (a mask of S² entries
//! built per shape), so that no folded work goes unsaid; the work a mask does on the data
//! (adding it to the scores) is the consuming node's, mapped as such.

use super::onnx_infer::{broadcast, const_vals_at};
use super::onnx_map::{Mapper, Reason, Value};
use super::onnx_pb::NodeProto;
use super::onnx_shape::{axis, product, Shape};
use crate::sym::Poly;
use std::cmp::Ordering;

/// The operators folded when every input is a constant that is not a weight.
const FOLDED: &[&str] = &[
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Neg",
    "Where",
    "GatherElements",
    "GatherND",
    "Gather",
];

fn int_of(p: &Poly) -> Option<i64> {
    p.as_integer().and_then(|n| i64::try_from(n).ok())
}

/// Numeric dimensions, when every one is a number.
fn nums(s: &[Poly]) -> Option<Vec<usize>> {
    s.iter()
        .map(|d| int_of(d).and_then(|x| usize::try_from(x).ok()))
        .collect()
}

/// The values of a constant of shape `shape` broadcast (numpy rules) to `out`.
fn broadcast_vals(v: &[Poly], shape: &[Poly], out: &[Poly]) -> Option<Vec<Poly>> {
    let dims = nums(shape)?;
    let lead = out.len().checked_sub(dims.len())?;
    if dims.is_empty() {
        // A scalar: the one value everywhere.
        let n: usize = nums(out)?.iter().product();
        return (v.len() == 1 && n <= 4096).then(|| vec![v[0].clone(); n]);
    }
    const_vals_at(v, shape, out, |idx| {
        Some(
            dims.iter()
                .enumerate()
                .map(|(k, &d)| if d == 1 { 0 } else { idx[lead + k] })
                .collect(),
        )
    })
}

impl Mapper {
    /// Whether `node` is one of [`FOLDED`] and reads only constants that are no weights: each
    /// is a `Constant` output or a value computed from constants, or an initializer whose
    /// integer contents are known (a weight's contents never are).
    /// `Where` may also choose between scalar initializers (the dynamo exporter writes the 0 and
    /// the large negative of a mask as such): a choice, not a parameter.
    pub(super) fn foldable(&self, node: &NodeProto) -> bool {
        let scalar_choice = |k: usize, v: &Value| {
            node.op_type() == "Where"
                && k > 0
                && matches!(v, Value::Const { shape, .. } if product(shape) == Poly::one())
        };
        FOLDED.contains(&node.op_type())
            && !node.input.is_empty()
            && node
                .input
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.is_empty())
                .all(|(k, t)| match self.values.get(t) {
                    Some(
                        v @ Value::Const {
                            origin: Some(_),
                            vals: None,
                            ..
                        },
                    ) => scalar_choice(k, v),
                    Some(Value::Const { .. }) => true,
                    _ => false,
                })
    }

    /// Folds a [`Mapper::foldable`] node into a constant.
    pub(super) fn fold(&mut self, node: &NodeProto) -> Result<(), Reason> {
        let ins: Vec<(Shape, Option<Vec<Poly>>)> = (0..node.input.len())
            .map(|k| match self.get(node, k)? {
                Value::Const { shape, vals, .. } => Ok((shape.clone(), vals.clone())),
                _ => Err("not a constant".to_string()),
            })
            .collect::<Result<_, _>>()?;
        let (shape, vals) = match node.op_type() {
            "GatherElements" => gather_elements(node, &ins)?,
            "GatherND" => gather_nd(node, &ins)?,
            "Gather" => gather(node, &ins)?,
            op => {
                let mut out: Shape = Vec::new();
                for (s, _) in &ins {
                    out = broadcast(&out, s)?;
                }
                let spread: Option<Vec<Vec<Poly>>> = ins
                    .iter()
                    .map(|(s, v)| broadcast_vals(v.as_deref()?, s, &out))
                    .collect();
                let vals = spread.and_then(|spread| {
                    let n = spread.first()?.len();
                    (0..n)
                        .map(|i| elementwise(op, &spread.iter().map(|v| &v[i]).collect::<Vec<_>>()))
                        .collect()
                });
                (out, vals)
            }
        };
        let elements = product(&shape);
        self.set(
            node,
            0,
            Value::Const {
                shape,
                vals: vals.filter(|v| v.len() <= 64),
                origin: None,
            },
        );
        self.folded.push((node.op_type().to_string(), elements));
        Ok(())
    }
}

/// One element of an elementwise operator on constants; booleans are 0 and 1. `None` when an
/// operand is a formula whose comparison is not decided.
fn elementwise(op: &str, x: &[&Poly]) -> Option<Poly> {
    let b = |v: bool| Poly::int(v as i64);
    if op == "Where" {
        let c = int_of(x[0])?;
        return Some(if c != 0 { x[1].clone() } else { x[2].clone() });
    }
    if op == "Neg" {
        return Some(-x[0].clone());
    }
    if op == "Not" {
        return Some(b(int_of(x[0])? == 0));
    }
    let order = || sign(&(x[0] - x[1]));
    Some(match op {
        "Equal" => b(order()? == Ordering::Equal),
        "Less" => b(order()? == Ordering::Less),
        "LessOrEqual" => b(order()? != Ordering::Greater),
        "Greater" => b(order()? == Ordering::Greater),
        "GreaterOrEqual" => b(order()? != Ordering::Less),
        _ => {
            let (a, c) = (int_of(x[0])? != 0, int_of(x[1])? != 0);
            b(match op {
                "And" => a && c,
                "Or" => a || c,
                _ => a != c,
            })
        }
    })
}

/// The sign of a difference of sizes, where it is decided: a number, or a formula whose
/// coefficients all have one sign (every symbol is a dimension, at least 1, so each monomial
/// is positive: `B·S + 1 > 0`, the size `S` is not the `-1` of a broadcast target).
fn sign(d: &Poly) -> Option<Ordering> {
    if d.is_zero() {
        return Some(Ordering::Equal);
    }
    let zero = crate::sym::Rational::from_integer(0.into());
    let mut signs = d.terms().map(|(_, c)| c.cmp(&zero));
    let first = signs.next()?;
    signs.all(|s| s == first).then_some(first)
}

/// `GatherND`: the indices' leading dimensions, then the data's dimensions after the batch and
/// the indexed ones (`indices.shape[:-1] + data.shape[batch_dims + k:]`, `k` the indices' last
/// dimension); values are not followed.
fn gather_nd(
    node: &NodeProto,
    ins: &[(Shape, Option<Vec<Poly>>)],
) -> Result<(Shape, Option<Vec<Poly>>), Reason> {
    let [(ds, _), (is, _)] = ins else {
        return Err("GatherND reads two inputs".into());
    };
    let batch = super::onnx_shape::attr_int(node, "batch_dims").unwrap_or(0);
    let batch = usize::try_from(batch).map_err(|_| "negative batch_dims")?;
    let (last, lead) = is.split_last().ok_or("GatherND of scalar indices")?;
    let k = int_of(last)
        .and_then(|k| usize::try_from(k).ok())
        .ok_or("GatherND whose index depth is not a number")?;
    if batch + k > ds.len() || batch >= is.len() && batch > 0 {
        return Err("GatherND indexing beyond the data's rank".into());
    }
    let mut out = lead.to_vec();
    out.extend(ds[batch + k..].iter().cloned());
    Ok((out, None))
}

/// `GatherElements`: the shape of the indices; values picked along the axis when known.
fn gather_elements(
    node: &NodeProto,
    ins: &[(Shape, Option<Vec<Poly>>)],
) -> Result<(Shape, Option<Vec<Poly>>), Reason> {
    let [(ds, dv), (is, iv)] = ins else {
        return Err("GatherElements reads two inputs".into());
    };
    if ds.len() != is.len() {
        return Err("GatherElements of indices of another rank".into());
    }
    let a = axis(node, 0, ds.len()).ok_or("axis out of range")?;
    let vals = (|| {
        let (dv, iv) = (dv.as_ref()?, iv.as_ref()?);
        let dims = nums(ds)?;
        let idx: Vec<i64> = iv.iter().map(int_of).collect::<Option<_>>()?;
        let inums = nums(is)?;
        const_vals_at(dv, ds, is, |at| {
            // The output index is the index tensor's: its row-major position.
            let flat = at.iter().zip(&inums).fold(0usize, |f, (&i, &d)| f * d + i);
            let i = *idx.get(flat)?;
            let n = dims[a] as i64;
            let i = if i < 0 { i + n } else { i };
            let mut src = at.to_vec();
            src[a] = usize::try_from(i).ok()?;
            Some(src)
        })
    })();
    Ok((is.clone(), vals))
}

/// `Gather` of a constant by constant indices: the data's shape with the axis replaced by the
/// indices' shape; values when both are known.
fn gather(
    node: &NodeProto,
    ins: &[(Shape, Option<Vec<Poly>>)],
) -> Result<(Shape, Option<Vec<Poly>>), Reason> {
    let [(ds, dv), (is, iv)] = ins else {
        return Err("Gather reads two inputs".into());
    };
    let r = ds.len();
    let a = axis(node, 0, r).ok_or("axis out of range")?;
    let mut out = ds[..a].to_vec();
    out.extend(is.iter().cloned());
    out.extend(ds[a + 1..].iter().cloned());
    let vals = (|| {
        let (dv, iv) = (dv.as_ref()?, iv.as_ref()?);
        let dims = nums(ds)?;
        let idx: Vec<i64> = iv.iter().map(int_of).collect::<Option<_>>()?;
        let ir = is.len();
        let inums = nums(is)?;
        const_vals_at(dv, ds, &out, |at| {
            // The index tensor's position within the output index.
            let mut flat = 0usize;
            for (k, &d) in inums.iter().enumerate() {
                flat = flat * d + at[a + k];
            }
            let n = dims[a] as i64;
            let i = *idx.get(flat)?;
            let i = if i < 0 { i + n } else { i };
            let mut src = at[..a].to_vec();
            src.push(usize::try_from(i).ok()?);
            src.extend_from_slice(&at[a + ir..]);
            Some(src)
        })
    })();
    Ok((out, vals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Vec<Poly> {
        v.iter().map(|&x| Poly::int(x)).collect()
    }

    fn node(op: &str, axis: Option<i64>) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            attribute: axis
                .map(|a| super::super::onnx_pb::AttributeProto {
                    name: Some("axis".into()),
                    i: Some(a),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..NodeProto::default()
        }
    }

    #[test]
    fn comparisons_and_choices_of_constants() {
        let x = |a: i64, b: i64| [Poly::int(a), Poly::int(b)];
        for (op, want) in [
            ("Equal", [0, 1, 0]),
            ("Less", [1, 0, 0]),
            ("LessOrEqual", [1, 1, 0]),
            ("Greater", [0, 0, 1]),
            ("GreaterOrEqual", [0, 1, 1]),
        ] {
            let got: Vec<i64> = [x(1, 2), x(2, 2), x(3, 2)]
                .iter()
                .map(|[a, b]| int_of(&elementwise(op, &[a, b]).unwrap()).unwrap())
                .collect();
            assert_eq!(got, want, "{op}");
        }
        let (t, f) = (Poly::int(1), Poly::int(0));
        assert_eq!(elementwise("And", &[&t, &f]), Some(f.clone()));
        assert_eq!(elementwise("Or", &[&t, &f]), Some(t.clone()));
        assert_eq!(elementwise("Xor", &[&t, &t]), Some(f.clone()));
        assert_eq!(elementwise("Not", &[&f]), Some(t.clone()));
        let s = Poly::symbol("S");
        assert_eq!(elementwise("Where", &[&f, &t, &s]), Some(s.clone()));
        // Sizes are positive: S is no -1, S + 1 is more than S; S against 2 is not decided.
        let m1 = Poly::int(-1);
        assert_eq!(elementwise("Equal", &[&s, &m1]), Some(f.clone()));
        assert_eq!(elementwise("Equal", &[&s, &s]), Some(t.clone()));
        let s1 = &s + &t;
        assert_eq!(elementwise("Greater", &[&s1, &s]), Some(t.clone()));
        assert_eq!(elementwise("Less", &[&s, &Poly::int(2)]), None);
    }

    #[test]
    fn broadcast_values_follow_numpy() {
        // [3] against [2, 3], and a scalar.
        let out = ints(&[2, 3]);
        let v = broadcast_vals(&ints(&[7, 8, 9]), &ints(&[3]), &out).unwrap();
        assert_eq!(v, ints(&[7, 8, 9, 7, 8, 9]));
        let v = broadcast_vals(&ints(&[5]), &[], &out).unwrap();
        assert_eq!(v, ints(&[5; 6]));
        // [2, 1] against [2, 3].
        let v = broadcast_vals(&ints(&[1, 2]), &ints(&[2, 1]), &out).unwrap();
        assert_eq!(v, ints(&[1, 1, 1, 2, 2, 2]));
    }

    #[test]
    fn gathers_of_constants() {
        // GatherElements along axis 1 of [[10, 11, 12], [20, 21, 22]] by [[2, 0], [1, -1]].
        let data = (ints(&[2, 3]), Some(ints(&[10, 11, 12, 20, 21, 22])));
        let idx = (ints(&[2, 2]), Some(ints(&[2, 0, 1, -1])));
        let (shape, vals) =
            gather_elements(&node("GatherElements", Some(1)), &[data.clone(), idx]).unwrap();
        assert_eq!(shape, ints(&[2, 2]));
        assert_eq!(vals, Some(ints(&[12, 10, 21, 22])));
        // Gather of rows [1, 0, 1] (axis 0): shape [3, 3].
        let idx = (ints(&[3]), Some(ints(&[1, 0, 1])));
        let (shape, vals) = gather(&node("Gather", None), &[data, idx]).unwrap();
        assert_eq!(shape, ints(&[3, 3]));
        assert_eq!(vals, Some(ints(&[20, 21, 22, 10, 11, 12, 20, 21, 22])));
    }
}
