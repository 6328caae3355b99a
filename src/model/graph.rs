//! A model: blocks of operators (a petgraph each), every operator binding its rule's indices to
//! formulas in the model's symbols. A block may repeat: identical layers are analysed once.

use crate::rules::{OpRule, Tensor};
use crate::sym::{Bindings, Poly};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where an operator input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Producer {
    /// A graph input (tokens, images).
    GraphInput(String),
    /// An operator's output, by block and node.
    Op {
        /// Block index.
        block: usize,
        /// Node in that block's graph.
        node: NodeIndex,
    },
    /// The block's own input (the previous iteration's output in a repeated block).
    BlockInput,
    /// A constant buffer that is not trained (rotary tables).
    Buffer,
    /// The operator's own parameter.
    Param,
    /// A parameter owned by another operator (tied weights), named `op.input`.
    Tied(String),
}

/// One operator application.
#[derive(Debug, Clone)]
pub struct OpNode {
    /// Unique name in the model.
    pub name: String,
    /// The rule it applies.
    pub rule: OpRule,
    /// Rule index or parameter → formula in the model's symbols.
    pub bind: BTreeMap<String, Poly>,
    /// Per rule input, where it comes from.
    pub inputs: Vec<(String, Producer)>,
    /// The rule index split by tensor parallelism in the Megatron-LM layout, if any.
    pub tp: Option<String>,
    /// A description.
    pub doc: Option<String>,
}

impl OpNode {
    /// A rule formula in the model's symbols.
    pub fn model_formula(&self, rule_formula: &Poly) -> Poly {
        rule_formula
            .substitute_all(&self.bind)
            .expect("bindings are validated to be non-zero monomials where divided")
    }

    /// A rule tensor's extents in the model's symbols.
    pub fn shape(&self, t: &Tensor) -> Vec<Poly> {
        t.dims
            .iter()
            .map(|g| g.iter().map(|i| self.model_formula(&t.extent(i))).product())
            .collect()
    }

    /// A rule tensor's element count in the model's symbols.
    pub fn elements(&self, t: &Tensor) -> Poly {
        self.model_formula(&t.elements())
    }

    /// Whether input `k` of the rule is a parameter owned by this operator (not tied).
    pub fn owns_param(&self, k: usize) -> bool {
        self.rule.inputs[k].param && matches!(self.inputs[k].1, Producer::Param)
    }
}

/// A block of operators.
#[derive(Debug, Clone)]
pub struct Block {
    /// Its name.
    pub name: String,
    /// A description.
    pub doc: Option<String>,
    /// How many identical copies run one after another.
    pub repeat: Poly,
    /// The operators, with an edge for each producer → consumer inside the block.
    pub graph: DiGraph<OpNode, ()>,
    /// The operators in a valid execution order.
    pub order: Vec<NodeIndex>,
    /// The node whose output feeds the next iteration (repeated blocks) and later blocks.
    pub output: Option<NodeIndex>,
}

impl Block {
    /// The operators in execution order.
    pub fn ops(&self) -> impl Iterator<Item = &OpNode> {
        self.order.iter().map(|n| &self.graph[*n])
    }
}

/// A model: named, with symbols, default values and blocks.
#[derive(Debug, Clone)]
pub struct Model {
    /// Its name.
    pub name: String,
    /// A description.
    pub doc: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Where its numbers come from.
    pub source: Option<String>,
    /// The family it instantiates, if any.
    pub family: Option<String>,
    /// Symbols with their descriptions.
    pub symbols: BTreeMap<String, String>,
    /// Values of the symbols (architecture, then defaults for batch and sequence).
    pub values: Bindings,
    /// Where each value comes from.
    pub sources: BTreeMap<String, String>,
    /// Bytes of a compute element.
    pub dtype_bytes: u32,
    /// Graph inputs and their shapes.
    pub inputs: Vec<(String, Vec<Poly>)>,
    /// Blocks in order.
    pub blocks: Vec<Block>,
    /// How attention runs, for graphs that offer a choice.
    pub attention: Option<AttentionMode>,
}

/// How a model's attention runs: materialising the S×S scores (eager), or as one fused
/// FlashAttention-style kernel, optionally skipping the masked half of a causal mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionMode {
    /// Scores, softmax and dropout as separate kernels, the scores kept for backward.
    Eager,
    /// A fused kernel computing every score block.
    Flash,
    /// A fused causal kernel that skips the masked half of the scores.
    FlashCausal,
}

impl AttentionMode {
    /// Parses `eager`, `flash`, `flash-causal`.
    pub fn from_name(s: &str) -> Option<AttentionMode> {
        match s {
            "eager" => Some(AttentionMode::Eager),
            "flash" => Some(AttentionMode::Flash),
            "flash-causal" => Some(AttentionMode::FlashCausal),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            AttentionMode::Eager => "eager",
            AttentionMode::Flash => "flash",
            AttentionMode::FlashCausal => "flash-causal",
        }
    }

    /// The operator tag (`attention:` in graphs) of this mode.
    pub fn tag(self) -> &'static str {
        match self {
            AttentionMode::Eager => "eager",
            _ => "flash",
        }
    }
}

impl Model {
    /// Every operator with its block's repeat count.
    pub fn ops(&self) -> impl Iterator<Item = (&Block, &OpNode)> {
        self.blocks
            .iter()
            .flat_map(|b| b.ops().map(move |o| (b, o)))
    }
}
