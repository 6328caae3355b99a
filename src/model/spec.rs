//! The serde shape of model and family files, exactly as users write them.

use crate::rules::spec::UniqueMap;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// A model file: a family or an inline graph, and symbol values.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub name: String,
    #[serde(default)]
    pub doc: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub family: Option<String>,
    #[serde(default)]
    pub graph: Option<GraphSpec>,
    #[serde(default)]
    pub symbols: UniqueMap<SymbolValue>,
    #[serde(default)]
    pub defaults: UniqueMap<SymbolValue>,
    #[serde(default)]
    pub dtype: Option<String>,
    /// `eager`, `flash` or `flash-causal`: how attention runs (the graph's default otherwise).
    #[serde(default)]
    pub attention: Option<String>,
    /// `false`: the graph's dropout operators are identities (probability 0): no kernel, no mask.
    #[serde(default)]
    pub dropout: Option<bool>,
    /// What selective recomputation recomputes (`[layernorm, moe_act]`; default `[core_attn]`).
    #[serde(default)]
    pub recompute_modules: Option<Vec<String>>,
}

/// A family file: a graph over free symbols.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyFile {
    pub family: String,
    pub doc: String,
    #[serde(default)]
    pub attention: Option<String>,
    /// Roles of symbols: `batch: B`.
    #[serde(default)]
    pub roles: UniqueMap<String>,
    pub symbols: UniqueMap<String>,
    #[serde(default)]
    pub inputs: UniqueMap<InputSpec>,
    pub blocks: Vec<BlockSpec>,
}

impl FamilyFile {
    /// The graph part.
    pub fn into_graph(self) -> (String, String, GraphSpec) {
        (
            self.family,
            self.doc,
            GraphSpec {
                attention: self.attention,
                roles: self.roles,
                symbols: self.symbols,
                inputs: self.inputs,
                blocks: self.blocks,
            },
        )
    }
}

/// A graph: its symbols, inputs and blocks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// The default attention mode of graphs with `attention:`-tagged operators.
    #[serde(default)]
    pub attention: Option<String>,
    /// Roles of symbols, role → symbol: `batch: B` names the global batch, the symbol data
    /// parallelism and micro-batching divide.
    #[serde(default)]
    pub roles: UniqueMap<String>,
    /// Free symbols with a description each.
    pub symbols: UniqueMap<String>,
    #[serde(default)]
    pub inputs: UniqueMap<InputSpec>,
    pub blocks: Vec<BlockSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    pub dims: Vec<String>,
    #[serde(default)]
    pub dtype: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockSpec {
    pub name: String,
    #[serde(default)]
    pub doc: Option<String>,
    #[serde(default)]
    pub repeat: Option<String>,
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub output: Option<String>,
    pub ops: Vec<OpSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    pub name: String,
    /// The attention mode the operator belongs to (`eager` or `flash`); in every mode when absent.
    #[serde(default)]
    pub attention: Option<String>,
    /// What the operator is to the analysis, where its name and shape cannot say it:
    /// `attention-core` marks the operators of attention between the projections (scores,
    /// softmax, dropout, the weighted sum: what selective recomputation recomputes). Operators
    /// tagged `attention: eager` have that role without saying so.
    #[serde(default)]
    pub role: Option<String>,
    /// The submodule of selective recomputation the operator belongs to, as Megatron-Core
    /// names them: `layernorm`, `mla_up_proj` or `moe_act` ([`RecomputeModule`]).
    ///
    /// [`RecomputeModule`]: crate::model::RecomputeModule
    #[serde(default)]
    pub recompute: Option<String>,
    pub op: String,
    #[serde(default)]
    pub bind: UniqueMap<FormulaText>,
    #[serde(default, rename = "in")]
    pub inputs: UniqueMap<String>,
    #[serde(default)]
    pub tied: UniqueMap<String>,
    #[serde(default)]
    pub tp: Option<String>,
    #[serde(default)]
    pub doc: Option<String>,
}

/// A formula written as text or as a bare number.
#[derive(Debug, Clone)]
pub struct FormulaText(pub String);

impl<'de> Deserialize<'de> for FormulaText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FormulaText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a formula or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FormulaText, E> {
                Ok(FormulaText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FormulaText, E> {
                Ok(FormulaText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FormulaText, E> {
                Ok(FormulaText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A symbol's value: a number, or `{value, source, assumed}`.
#[derive(Debug, Clone)]
pub struct SymbolValue {
    pub value: String,
    pub source: Option<String>,
    /// `assumed: true`: a size the file's source does not give (an ONNX export's symbolic batch
    /// or sequence), set to a placeholder nobody chose; results at it say so.
    pub assumed: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SymbolValueFull {
    value: FormulaText,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    assumed: bool,
}

impl<'de> Deserialize<'de> for SymbolValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SymbolValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, or a mapping with `value`, `source` and `assumed`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SymbolValue, E> {
                Ok(SymbolValue {
                    value: v.to_string(),
                    source: None,
                    assumed: false,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SymbolValue, E> {
                Ok(SymbolValue {
                    value: v.to_string(),
                    source: None,
                    assumed: false,
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SymbolValue, E> {
                Ok(SymbolValue {
                    value: v.to_string(),
                    source: None,
                    assumed: false,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<SymbolValue, E> {
                Ok(SymbolValue {
                    value: v.to_string(),
                    source: None,
                    assumed: false,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SymbolValue, A::Error> {
                let full =
                    SymbolValueFull::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(SymbolValue {
                    value: full.value.0,
                    source: full.source,
                    assumed: full.assumed,
                })
            }
        }
        d.deserialize_any(V)
    }
}
