//! A model: blocks of operators (a petgraph each), every operator binding its rule's indices to
//! formulas in the model's symbols. A block may repeat: identical layers are analysed once.

use crate::rules::{OpRule, Tensor};
use crate::sym::{Bindings, Poly};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{BTreeMap, BTreeSet};
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
    /// The rule it applies (shared by the operators that apply it).
    pub rule: std::sync::Arc<OpRule>,
    /// Rule index or parameter → formula in the model's symbols.
    pub bind: BTreeMap<String, Poly>,
    /// Per rule input, where it comes from.
    pub inputs: Vec<(String, Producer)>,
    /// The rule index split by tensor parallelism in the Megatron-LM layout, if any.
    pub tp: Option<String>,
    /// A description.
    pub doc: Option<String>,
    /// Part of attention's core between the projections (tagged `attention: eager` or
    /// `role: attention-core` in its graph): what selective recomputation's `core_attn`
    /// recomputes.
    pub attention_core: bool,
    /// The submodule of selective recomputation it belongs to besides the attention core, as
    /// its family declares it (`recompute: layernorm`).
    pub recompute: Option<RecomputeModule>,
    /// It makes logits a gate reads through an input its rule names in `router:` (a mixture
    /// of experts' router, a shared expert's gate), which FP8 recipes keep in the model's
    /// precision ([`crate::rules::OpRule::router`]).
    pub router: bool,
}

impl OpNode {
    /// Whether selective recomputation of `modules` recomputes it: an attention-core operator
    /// that is not a fused kernel under `core_attn`, or one of a module asked for.
    pub fn recomputed(&self, modules: &[RecomputeModule]) -> bool {
        (self.attention_core
            && !self.rule.fused_attention
            && modules.contains(&RecomputeModule::CoreAttn))
            || self.recompute.is_some_and(|m| modules.contains(&m))
    }

    /// Whether selective recomputation of `modules` discards its output: it belongs to an
    /// output-discarding module asked for.
    pub fn discards_output(&self, modules: &[RecomputeModule]) -> bool {
        self.recompute
            .is_some_and(|m| m.discards_output() && modules.contains(&m))
    }

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

    /// What input `k` is as a tensor of its block, so that several operators keeping it for the
    /// backward count it once: its producer's [`OpNode::output_key`], the block's input, or a
    /// graph input; `None` for a parameter.
    pub fn input_key(&self, k: usize) -> Option<String> {
        match &self.inputs[k].1 {
            Producer::Op { block, node } => Some(OpNode::output_key(*block, *node)),
            Producer::BlockInput => Some("block input".to_string()),
            Producer::GraphInput(g) => Some(format!("input {g}")),
            _ => None,
        }
    }

    /// What the output of operator `node` of block `block` is as a tensor (see
    /// [`OpNode::input_key`]).
    pub fn output_key(block: usize, node: NodeIndex) -> String {
        format!("op {block} {}", node.index())
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
    /// The defaults the file marks `assumed`: sizes its source does not give (an ONNX export's
    /// symbolic batch and sequence), placeholders nobody chose.
    pub assumed: BTreeSet<String>,
    /// Bytes of a compute element.
    pub dtype_bytes: u32,
    /// Graph inputs and their shapes.
    pub inputs: Vec<(String, Vec<Poly>)>,
    /// Blocks in order.
    pub blocks: Vec<Block>,
    /// How attention runs, for graphs that offer a choice.
    pub attention: Option<AttentionMode>,
    /// How the loss over the vocabulary runs (timelines only: the symbolic counts are one
    /// fused kernel's).
    pub loss: LossMode,
    /// Evaluations of the loss as a training metric per micro-batch, each one more unfused
    /// fp32 pass over the logits without gradients (timelines only; Composer's trainer runs
    /// its model's training metrics after every micro-batch: two for LLM Foundry's MPT).
    pub train_metrics: u32,
    /// What selective recomputation recomputes ([`RecomputeModule`]; default `core_attn`).
    pub recompute_modules: Vec<RecomputeModule>,
    /// Whether its dropout operators run: `None` for a graph without any, `Some(false)` where
    /// `dropout: false` (or `--dropout off`) took them out.
    pub dropout: Option<bool>,
    /// The symbol of the global batch (`roles: {batch: …}` in its graph), the one data
    /// parallelism and micro-batching divide; `None` for a model without one.
    pub batch: Option<String>,
    /// The symbols of the other roles (`roles:` in its graph; [`Roles`]).
    pub roles: Roles,
}

/// The symbols a graph gives a role besides the batch (`roles: {sequence: S, vocab: V, heads:
/// NH, layer: L, hidden: H, ffn: F, kv_heads: KV, head_dim: D, positions: P, experts: E, top_k:
/// K, expert_groups: NG, groups_per_token: TG}`). A graph that declares no roles has them
/// inferred from the conventional names (`B`, `S`, `V`, `NH`, `L`, `H`, `F`, `KV`, `D`, `P`, `E`,
/// `K`, `NG`, `TG`), once, when it is loaded;
/// [`Roles::inferred`] says which.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    /// The sequence length: what context parallelism splits, what attention is quadratic in.
    pub sequence: Option<String>,
    /// The vocabulary size: what tensor parallelism pads (Megatron-LM's vocabulary padding).
    pub vocab: Option<String>,
    /// The attention heads.
    pub heads: Option<String>,
    /// The layer count: the repeat count of the repeated block.
    pub layer: Option<String>,
    /// The hidden size (the model width): what attention heads divide into head dimensions.
    pub hidden: Option<String>,
    /// The MLP inner size.
    pub ffn: Option<String>,
    /// The key/value heads of grouped-query attention.
    pub kv_heads: Option<String>,
    /// The dimension of one attention head.
    pub head_dim: Option<String>,
    /// The size of a learned position table (the longest sequence it holds).
    pub positions: Option<String>,
    /// The experts of a mixture-of-experts layer.
    pub experts: Option<String>,
    /// The experts each token is routed to (top-k).
    pub top_k: Option<String>,
    /// The groups a group-limited router splits the experts into (DeepSeek-V2 and V3's
    /// `n_group`; the experts of a group are consecutive).
    pub expert_groups: Option<String>,
    /// The groups each token's experts are chosen from (`topk_group`).
    pub groups_per_token: Option<String>,
    /// The roles inferred from symbol names, as (role, symbol), for a graph that declares none;
    /// empty when the graph declares its roles.
    pub inferred: Vec<(&'static str, String)>,
}

impl Roles {
    /// `"roles inferred from symbol names: batch B, sequence S"`, for a graph that declares no
    /// roles and has symbols of the conventional names; `None` otherwise.
    pub fn inference_note(&self) -> Option<String> {
        if self.inferred.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .inferred
            .iter()
            .map(|(r, s)| format!("{r} {s}"))
            .collect();
        Some(format!(
            "roles inferred from symbol names (the graph declares none): {}",
            list.join(", ")
        ))
    }
}

/// The most evaluations of the loss as a training metric per micro-batch a model may ask for
/// (trainers compute one or two; more is taken as a mistake).
pub const MAX_TRAIN_METRICS: u32 = 16;

/// How the loss over the vocabulary runs where a graph's loss rule says `fp32_passes: true`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LossMode {
    /// Separate fp32 passes over the logits, as Megatron-LM (`output.float()`), PyTorch's
    /// `F.cross_entropy` under autocast and Hugging Face models compute it.
    #[default]
    Fp32,
    /// One fused kernel reading the logits once forward and once backward (flash-attn's
    /// `CrossEntropyLoss`, as the FlashAttention training scripts run it; Apex's xentropy).
    Fused,
}

impl LossMode {
    /// Its name on the command line (`fp32`, `fused`).
    pub fn name(self) -> &'static str {
        match self {
            LossMode::Fp32 => "fp32",
            LossMode::Fused => "fused",
        }
    }
}

/// A submodule selective recomputation may recompute, as Megatron-Core names them
/// (`--recompute-granularity selective --recompute-modules …`; `recompute_modules` in
/// megatron/core/transformer/transformer_config.py, Megatron-LM commit 000c4ac: default
/// `core_attn`; `moe_act`, `layernorm` and `mla_up_proj` "use output-discarding checkpointing",
/// `core_attn`, `mlp` and `shared_experts` normal checkpointing; its `moe`, the whole MoE layer,
/// is not offered). A family declares which operators belong to each but the
/// attention core (`recompute: layernorm` on an operator); the attention core is its eager
/// attention operators (`attention: eager` or `role: attention-core`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecomputeModule {
    /// The attention core between the projections (Korthikanti et al. 2022, §5): its
    /// intermediates are dropped and recomputed, its output and inputs kept. Fused attention
    /// keeps no intermediates, so there it drops nothing.
    CoreAttn,
    /// The layer's input norm and pre-MLP norm: their outputs, which the following linear
    /// layers save, are discarded and recomputed from their inputs.
    Layernorm,
    /// Multi-head latent attention's up-projections and rotary embedding (Megatron-Core's
    /// `qkv_up_proj_and_rope_apply`): the queries, keys and values the attention saves are
    /// discarded and recomputed from the latents.
    MlaUpProj,
    /// The activation of the experts' MLP (SwiGLU): its output, which the down-projection
    /// saves, and its intermediates are discarded and recomputed from its inputs.
    MoeAct,
    /// A dense layer's MLP (normal checkpointing): its intermediates are dropped and
    /// recomputed from its input, its output kept.
    Mlp,
    /// A mixture-of-experts layer's shared experts (normal checkpointing), as `mlp`.
    SharedExperts,
}

impl RecomputeModule {
    /// Every module.
    pub const ALL: [RecomputeModule; 6] = [
        RecomputeModule::CoreAttn,
        RecomputeModule::Layernorm,
        RecomputeModule::MlaUpProj,
        RecomputeModule::MoeAct,
        RecomputeModule::Mlp,
        RecomputeModule::SharedExperts,
    ];

    /// Its name, as Megatron-Core spells it.
    pub fn name(self) -> &'static str {
        match self {
            RecomputeModule::CoreAttn => "core_attn",
            RecomputeModule::Layernorm => "layernorm",
            RecomputeModule::MlaUpProj => "mla_up_proj",
            RecomputeModule::MoeAct => "moe_act",
            RecomputeModule::Mlp => "mlp",
            RecomputeModule::SharedExperts => "shared_experts",
        }
    }

    /// The module named `s`, or a message naming the known modules.
    pub fn parse(s: &str) -> Result<RecomputeModule, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown recompute module `{s}` (known: {})",
                    Self::list(&Self::ALL, ", ")
                )
            })
    }

    /// Whether its output is discarded too (output-discarding checkpointing): the tensors its
    /// readers save of it are recomputed, not kept.
    pub fn discards_output(self) -> bool {
        matches!(
            self,
            RecomputeModule::Layernorm | RecomputeModule::MlaUpProj | RecomputeModule::MoeAct
        )
    }

    /// Megatron-Core's default: the attention core alone.
    pub fn default_set() -> Vec<RecomputeModule> {
        vec![RecomputeModule::CoreAttn]
    }

    /// Whether `modules` is the default, [`RecomputeModule::default_set`].
    pub fn is_default(modules: &[RecomputeModule]) -> bool {
        modules == [RecomputeModule::CoreAttn]
    }

    /// The names of `modules` joined by `sep` (`layernorm,moe_act`).
    pub fn list(modules: &[RecomputeModule], sep: &str) -> String {
        modules
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// How a model's attention runs: materialising the S×S scores (eager), or as one fused
/// FlashAttention-style kernel, optionally skipping the masked half of a causal mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionMode {
    /// Scores, softmax and dropout as separate kernels, the scores kept for backward (the
    /// scores' scaling runs inside the softmax kernel, as Megatron-LM's fused softmax runs it).
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

/// A size that is not a positive integer at some symbol values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} = `{formula}` = {value} at {at}: {reason}")]
pub struct SizeError {
    /// The size: `operator `scores` index `d``, `block `layer` repeat`, …
    pub what: String,
    /// Its formula in the model's symbols.
    pub formula: Poly,
    /// Its value.
    pub value: crate::sym::Rational,
    /// The values of the formula's symbols, `H = 12288, NH = 7`.
    pub at: String,
    /// Why it is refused.
    pub reason: &'static str,
}

/// Checks that `formula` is a positive integer at `values` (a size that indexes a tensor), or,
/// where `zero_ok` (a rule parameter, such as padding or a causal kernel's share `w = 1/2` of
/// the score blocks), a non-negative number. Formulas with unbound symbols are left alone: they
/// are reported where they are evaluated.
pub fn check_size(
    what: impl FnOnce() -> String,
    formula: &Poly,
    values: &Bindings,
    zero_ok: bool,
) -> Result<(), Box<SizeError>> {
    use num_traits::{Signed, Zero};
    let Ok(value) = formula.eval(values) else {
        return Ok(());
    };
    let reason = if !zero_ok && !value.is_integer() {
        "not an integer (every size and every `a/b` extent must divide exactly)"
    } else if value.is_negative() || (value.is_zero() && !zero_ok) {
        "not positive"
    } else {
        return Ok(());
    };
    let at: Vec<String> = formula
        .symbols()
        .iter()
        .filter_map(|s| values.get(s).map(|v| format!("{s} = {v}")))
        .collect();
    Err(Box::new(SizeError {
        what: what(),
        formula: formula.clone(),
        value,
        at: at.join(", "),
        reason,
    }))
}

impl Model {
    /// The settings that change how its operators run, as `(name, value)` pairs: the attention
    /// mode (graphs that offer a choice), the loss's kernels and the training-metric passes
    /// (models with a loss over the vocabulary), and dropout (graphs with dropout operators).
    /// Output headers and JSON show them keyed by name.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(a) = self.attention {
            out.push(("attention", a.name().to_string()));
        }
        let has_loss = self
            .blocks
            .iter()
            .any(|b| b.graph.node_weights().any(|o| o.rule.fp32_passes));
        if has_loss {
            out.push(("loss", self.loss.name().to_string()));
            if self.train_metrics > 0 {
                out.push(("train-metrics", self.train_metrics.to_string()));
            }
        }
        if let Some(d) = self.dropout {
            out.push(("dropout", if d { "on" } else { "off" }.to_string()));
        }
        if !RecomputeModule::is_default(&self.recompute_modules) {
            out.push((
                "recompute-modules",
                RecomputeModule::list(&self.recompute_modules, ","),
            ));
        }
        out
    }

    /// The value of the batch symbol at `values`, where the model has one and it is bound.
    pub fn batch_value<'a>(&self, values: &'a Bindings) -> Option<&'a crate::sym::Rational> {
        self.batch.as_ref().and_then(|b| values.get(b))
    }

    /// Checks that every size at `values` is a positive integer: graph input dimensions,
    /// block repeats, and every index an operator binds (parameters such as padding may be 0).
    pub fn check_sizes(&self, values: &Bindings) -> Result<(), Box<SizeError>> {
        for (name, dims) in &self.inputs {
            for (k, d) in dims.iter().enumerate() {
                check_size(|| format!("input `{name}` dimension {k}"), d, values, false)?;
            }
        }
        for b in &self.blocks {
            check_size(
                || format!("block `{}` repeat", b.name),
                &b.repeat,
                values,
                false,
            )?;
            for op in b.ops() {
                for (k, f) in &op.bind {
                    let zero_ok = op.rule.index(k).is_none();
                    let what = || {
                        let role = if zero_ok { "parameter" } else { "index" };
                        format!("operator `{}` {role} `{k}`", op.name)
                    };
                    check_size(what, f, values, zero_ok)?;
                }
            }
        }
        Ok(())
    }

    /// The first repeated block (a transformer's layer): what `compare`'s layer report and
    /// `optimize` analyse, and the block recomputation applies to.
    pub fn first_repeated_block(&self) -> Option<usize> {
        self.blocks.iter().position(|b| b.repeat != Poly::one())
    }

    /// Every operator with its block's repeat count.
    pub fn ops(&self) -> impl Iterator<Item = (&Block, &OpNode)> {
        self.blocks
            .iter()
            .flat_map(|b| b.ops().map(move |o| (b, o)))
    }
}
