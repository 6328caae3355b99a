//! Shapes of ONNX tensors as formulas: fixed dimensions are numbers, symbolic ones (`dim_param`)
//! are model symbols; attributes and the integer contents of small constant tensors.

use super::onnx_pb::{tensor_proto::DataType, tensor_shape_proto, AttributeProto, NodeProto};
use super::onnx_pb::{TensorProto, TypeProto};
use crate::sym::Poly;
use std::collections::BTreeMap;

/// A tensor's dimensions.
pub(super) type Shape = Vec<Poly>;

/// The product of some dimensions (1 for none).
pub(super) fn product(dims: &[Poly]) -> Poly {
    dims.iter().cloned().product()
}

/// `a / b` when it is a polynomial with integer coefficients (a size): `None` otherwise.
pub(super) fn exact_div(a: &Poly, b: &Poly) -> Option<Poly> {
    let q = a.checked_div(b).ok()?;
    let whole = q
        .terms()
        .all(|(m, c)| c.is_integer() && m.iter().all(|(_, e)| e >= 0));
    whole.then_some(q)
}

/// A symbol made from an ONNX dimension name.
#[derive(Debug, Clone)]
pub(super) struct DimSymbol {
    /// The `dim_param` (or a description where the file gives none).
    pub onnx: String,
    /// Where it was first seen.
    pub seen: String,
}

/// The symbols made from `dim_param`s and unknown dimensions, by model symbol name.
#[derive(Debug, Default)]
pub(super) struct Symbols {
    /// Model symbol → what it stands for.
    pub map: BTreeMap<String, DimSymbol>,
    by_param: BTreeMap<String, String>,
}

/// `B` for the names exporters give the batch, `S` for the sequence: the names symshard's
/// layouts split for data and sequence parallelism.
fn conventional(param: &str) -> Option<&'static str> {
    let p = param.to_ascii_lowercase();
    match p.as_str() {
        "batch" | "batch_size" | "batchsize" | "batch_dim" | "bs" | "n" | "b" | "n_batch" => {
            Some("B")
        }
        "seq" | "seq_len" | "seqlen" | "seq_length" | "sequence" | "sequence_length"
        | "sequence_len" | "s" | "num_tokens" => Some("S"),
        _ => None,
    }
}

/// An identifier from any text: other characters become `_`, a leading digit gets a prefix.
pub(super) fn identifier(text: &str, fallback: &str) -> String {
    let mut s = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('_') {
            s.push('_');
        }
    }
    let s = s.trim_matches('_').to_string();
    if s.is_empty() {
        fallback.to_string()
    } else if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("{fallback}_{s}")
    } else {
        s
    }
}

impl Symbols {
    /// The symbol for `dim_param` `param`, made on first sight.
    pub fn param(&mut self, param: &str, seen: &str) -> Poly {
        if let Some(s) = self.by_param.get(param) {
            return Poly::symbol(s);
        }
        let base = conventional(param)
            .map(str::to_string)
            .unwrap_or_else(|| identifier(param, "dim"));
        let mut name = base.clone();
        let mut k = 2;
        while self.map.contains_key(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.map.insert(
            name.clone(),
            DimSymbol {
                onnx: param.to_string(),
                seen: seen.to_string(),
            },
        );
        self.by_param.insert(param.to_string(), name.clone());
        Poly::symbol(&name)
    }

    /// The shape of a typed value, `None` for a non-tensor or a tensor of unknown rank.
    pub fn shape_of(&mut self, t: Option<&TypeProto>, tensor: &str) -> Option<Shape> {
        let tensor_type = match t?.value.as_ref()? {
            super::onnx_pb::type_proto::Value::TensorType(tt) => tt,
            _ => return None,
        };
        let shape = tensor_type.shape.as_ref()?;
        let mut out = Vec::new();
        for (axis, d) in shape.dim.iter().enumerate() {
            let seen = format!("tensor `{tensor}`, axis {axis}");
            let p = match &d.value {
                Some(tensor_shape_proto::dimension::Value::DimValue(v)) if *v > 0 => Poly::int(*v),
                Some(tensor_shape_proto::dimension::Value::DimParam(p)) if !p.is_empty() => {
                    self.param(p, &seen)
                }
                // A zero-sized, negative or unnamed dimension: a symbol of its own.
                _ => self.param(&format!("{tensor}_dim{axis}"), &seen),
            };
            out.push(p);
        }
        Some(out)
    }
}

/// The element type of a typed value.
pub(super) fn elem_type(t: Option<&TypeProto>) -> Option<i32> {
    match t?.value.as_ref()? {
        super::onnx_pb::type_proto::Value::TensorType(tt) => tt.elem_type,
        _ => None,
    }
}

/// The model-file dtype of an ONNX element type; `None` for the floating types, which take the
/// model's compute type.
pub(super) fn int_dtype(elem: i32) -> Option<&'static str> {
    match DataType::try_from(elem).ok()? {
        DataType::Int64 | DataType::Uint64 => Some("int64"),
        DataType::Int32 | DataType::Uint32 => Some("int32"),
        DataType::Bool => Some("bool"),
        DataType::Uint8 => Some("uint8"),
        DataType::Int8 => Some("int8"),
        _ => None,
    }
}

/// The model dtype of a floating ONNX element type.
pub(super) fn float_dtype(elem: i32) -> Option<&'static str> {
    match DataType::try_from(elem).ok()? {
        DataType::Float => Some("fp32"),
        DataType::Float16 => Some("fp16"),
        DataType::Bfloat16 => Some("bf16"),
        DataType::Double => Some("fp64"),
        _ => None,
    }
}

/// The shape of a constant tensor.
pub(super) fn tensor_shape(t: &TensorProto) -> Option<Shape> {
    t.dims
        .iter()
        .map(|&d| (d > 0).then(|| Poly::int(d)))
        .collect()
}

/// The contents of a small integer or boolean tensor (shapes, split sizes, traced masks; a boolean
/// as 0 or 1), `None` for anything else.
pub(super) fn tensor_ints(t: &TensorProto) -> Option<Vec<i64>> {
    let count = t.dims.iter().try_fold(1i64, |acc, &d| {
        (d >= 0).then(|| acc.checked_mul(d)).flatten()
    })?;
    if count > 64 {
        return None;
    }
    let ty = DataType::try_from(t.data_type?).ok()?;
    let raw = t.raw_data.as_deref().unwrap_or_default();
    let v: Vec<i64> = match ty {
        // An empty integer tensor (the empty shape of a scalar, as exporters write it).
        DataType::Int64 | DataType::Int32 | DataType::Bool if count == 0 && !t.dims.is_empty() => {
            return Some(Vec::new())
        }
        // Booleans (traced masks) as 0 and 1, one byte each or in `int32_data`.
        DataType::Bool if !t.int32_data.is_empty() => {
            t.int32_data.iter().map(|&x| (x != 0) as i64).collect()
        }
        DataType::Bool => raw.iter().map(|&x| (x != 0) as i64).collect(),
        DataType::Int64 if !t.int64_data.is_empty() => t.int64_data.clone(),
        DataType::Int64 => raw
            .chunks_exact(8)
            .map(|c| c.try_into().map(i64::from_le_bytes))
            .collect::<Result<_, _>>()
            .ok()?,
        DataType::Int32 if !t.int32_data.is_empty() => {
            t.int32_data.iter().map(|&x| x as i64).collect()
        }
        DataType::Int32 => raw
            .chunks_exact(4)
            .map(|c| c.try_into().map(|b| i32::from_le_bytes(b) as i64))
            .collect::<Result<_, _>>()
            .ok()?,
        _ => return None,
    };
    (v.len() as i64 == count.max(1) || (t.dims.is_empty() && v.len() == 1)).then_some(v)
}

/// The contents of a small integer tensor as formulas.
pub(super) fn tensor_vals(t: &TensorProto) -> Option<Vec<Poly>> {
    tensor_ints(t).map(|v| v.into_iter().map(Poly::int).collect())
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

/// An integer attribute.
pub(super) fn attr_int(node: &NodeProto, name: &str) -> Option<i64> {
    attr(node, name).and_then(|a| a.i)
}

/// An integer-list attribute.
pub(super) fn attr_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

/// A string attribute.
pub(super) fn attr_str(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name)
        .and_then(|a| a.s.as_deref())
        .map(|s| String::from_utf8_lossy(s).to_string())
}

/// A tensor attribute (`Constant`'s value).
pub(super) fn attr_tensor<'a>(node: &'a NodeProto, name: &str) -> Option<&'a TensorProto> {
    attr(node, name).and_then(|a| a.t.as_ref())
}

/// An axis attribute resolved against a rank (negative counts from the end).
pub(super) fn axis(node: &NodeProto, default: i64, rank: usize) -> Option<usize> {
    let a = attr_int(node, "axis").unwrap_or(default);
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r.max(1)).contains(&a).then_some(a as usize)
}

/// Shape text for messages.
pub(super) fn show(shape: &[Poly]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_identifiers_and_conventional_symbols() {
        assert_eq!(identifier("/h.0/attn/MatMul", "op"), "h_0_attn_MatMul");
        assert_eq!(identifier("0abc", "op"), "op_0abc");
        assert_eq!(identifier("///", "op"), "op");
        let mut s = Symbols::default();
        assert_eq!(s.param("batch_size", "x"), Poly::symbol("B"));
        assert_eq!(s.param("sequence_length", "x"), Poly::symbol("S"));
        assert_eq!(s.param("batch_size", "y"), Poly::symbol("B"));
        assert_eq!(s.param("unk__7", "y"), Poly::symbol("unk_7"));
        assert_eq!(s.param("N", "y"), Poly::symbol("B_2"));
    }

    #[test]
    fn small_int_tensors_read_from_either_field() {
        let t = TensorProto {
            dims: vec![2],
            data_type: Some(DataType::Int64 as i32),
            raw_data: Some([3i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect()),
            ..TensorProto::default()
        };
        assert_eq!(tensor_ints(&t), Some(vec![3, -1]));
        let t = TensorProto {
            dims: vec![3],
            data_type: Some(DataType::Int64 as i32),
            int64_data: vec![1, 2],
            ..TensorProto::default()
        };
        assert_eq!(tensor_ints(&t), None);
        let t = TensorProto {
            dims: vec![3],
            data_type: Some(DataType::Bool as i32),
            raw_data: Some(vec![1, 0, 1]),
            ..TensorProto::default()
        };
        assert_eq!(tensor_ints(&t), Some(vec![1, 0, 1]));
        let t = TensorProto {
            dims: vec![0],
            data_type: Some(DataType::Int64 as i32),
            ..TensorProto::default()
        };
        assert_eq!(tensor_ints(&t), Some(vec![]));
        // An empty float tensor is no list of sizes.
        let t = TensorProto {
            dims: vec![0],
            data_type: Some(DataType::Float as i32),
            ..TensorProto::default()
        };
        assert_eq!(tensor_ints(&t), None);
    }
}
