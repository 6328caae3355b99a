//! The serde shape of an operator rule file, exactly as users write it. Validation and
//! conversion to [`crate::rules::OpRule`] live in `load.rs`.

use indexmap::IndexMap;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::marker::PhantomData;

/// A mapping that refuses duplicate keys (serde's maps keep the last silently).
#[derive(Debug, Clone)]
pub struct UniqueMap<V>(pub IndexMap<String, V>);

impl<V> Default for UniqueMap<V> {
    fn default() -> Self {
        UniqueMap(IndexMap::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = UniqueMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = IndexMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.contains_key(&key) {
                        return Err(de::Error::custom(format!("duplicate name `{key}`")));
                    }
                    let value = map.next_value()?;
                    out.insert(key, value);
                }
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(V2(PhantomData))
    }
}

/// A whole rule file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub name: String,
    pub doc: String,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub params: Vec<String>,
    pub indices: UniqueMap<IndexSpec>,
    pub inputs: UniqueMap<TensorSpec>,
    pub output: TensorSpec,
    #[serde(default)]
    pub terms: Option<Vec<Vec<String>>>,
    #[serde(default)]
    pub flops: Option<String>,
    #[serde(default)]
    pub backward_flops: Option<String>,
    #[serde(default)]
    pub saved: Vec<SavedSpec>,
    #[serde(default)]
    pub io: Option<IoSpec>,
    /// `fused-attention` for a fused attention kernel (FlashAttention-style).
    #[serde(default)]
    pub kernel: Option<String>,
    /// FLOPs the backward pass spends recomputing forward work inside its kernel (hardware
    /// FLOPs, not model FLOPs).
    #[serde(default)]
    pub recompute_flops: Option<String>,
    /// Whether the backward computes the parameter gradients in a kernel of its own that reads
    /// the output gradient and the saved tensors again (explicit-FLOP rules only; an einsum's
    /// bias-like terms are such a kernel by their structure).
    #[serde(default)]
    pub param_grad_kernel: bool,
    /// Whether stacks without a fused kernel for it run it as separate fp32 passes over its first
    /// input (a loss over the vocabulary's logits; see `OpRule::fp32_pass_bytes`).
    #[serde(default)]
    pub fp32_passes: bool,
    /// What it is in a mixture of experts: `expert-gemm`, `moe-dispatch`, `moe-combine` or
    /// `moe-gate`.
    #[serde(default)]
    pub role: Option<String>,
    /// The inputs a context-parallel ring passes from rank to rank (an attention's keys and
    /// values), by name.
    #[serde(default)]
    pub ring: Vec<String>,
    /// The inputs that hold a router's logits (a gate's), by name.
    #[serde(default)]
    pub router: Vec<String>,
}

/// An index: a kind name, or a mapping with the kind and its details.
#[derive(Debug, Clone, Default)]
pub struct IndexSpec {
    pub kind: String,
    pub stats: Option<u32>,
    pub backward_stats: Option<u32>,
    pub halo: Option<String>,
    pub doc: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexSpecFull {
    kind: String,
    #[serde(default)]
    stats: Option<u32>,
    #[serde(default)]
    backward_stats: Option<u32>,
    #[serde(default)]
    halo: Option<String>,
    #[serde(default)]
    doc: Option<String>,
}

impl<'de> Deserialize<'de> for IndexSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IndexSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an index kind (map, reduce-sum, reduce-max, stat, window, opaque) or a mapping with `kind`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IndexSpec, E> {
                Ok(IndexSpec {
                    kind: v.to_string(),
                    ..IndexSpec::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<IndexSpec, A::Error> {
                let full = IndexSpecFull::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(IndexSpec {
                    kind: full.kind,
                    stats: full.stats,
                    backward_stats: full.backward_stats,
                    halo: full.halo,
                    doc: full.doc,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A tensor: a list of dimensions, or a mapping with dims and details.
#[derive(Debug, Clone, Default)]
pub struct TensorSpec {
    pub dims: Vec<String>,
    pub param: bool,
    pub grad: Option<bool>,
    pub dtype: Option<String>,
    pub extents: IndexMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorSpecFull {
    dims: Vec<String>,
    #[serde(default)]
    param: bool,
    #[serde(default)]
    grad: Option<bool>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    extents: UniqueMap<String>,
}

impl<'de> Deserialize<'de> for TensorSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TensorSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of index names, or a mapping with `dims`")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<TensorSpec, A::Error> {
                let dims = Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(TensorSpec {
                    dims,
                    ..TensorSpec::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TensorSpec, A::Error> {
                let full = TensorSpecFull::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TensorSpec {
                    dims: full.dims,
                    param: full.param,
                    grad: full.grad,
                    dtype: full.dtype,
                    extents: full.extents.0,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A tensor kept for the backward pass: an input's name, `output`, or a new tensor.
#[derive(Debug, Clone)]
pub enum SavedSpec {
    Name(String),
    Tensor(SavedTensorSpec),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedTensorSpec {
    pub name: String,
    pub dims: Vec<String>,
    #[serde(default)]
    pub dtype: Option<String>,
}

impl<'de> Deserialize<'de> for SavedSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SavedSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an input name, `output`, or a mapping with `name` and `dims`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SavedSpec, E> {
                Ok(SavedSpec::Name(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SavedSpec, A::Error> {
                SavedTensorSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(SavedSpec::Tensor)
            }
        }
        d.deserialize_any(V)
    }
}

/// Element counts read and written, where they differ from "every input once, the output once".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IoSpec {
    pub read: String,
    pub write: String,
}
