//! A validated operator rule: its indices and their kinds, its tensors in index notation, its
//! FLOPs forward and backward, what it saves for backward and what it reads and writes.

use super::law::IndexKind;
use crate::sym::Poly;
use serde::Serialize;
use std::path::PathBuf;

/// Whether an operator's FLOPs are matmul-like (what PyTorch's FLOP counter counts: mm, bmm,
/// convolution, attention) or other (elementwise, normalisation, softmax).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlopClass {
    /// Matrix multiplication, batched matmul, convolution.
    Matmul,
    /// Everything else.
    Other,
}

/// What part an operator plays in a model that the pricing needs to know, declared by its rule
/// (`role:`), never read off a rule's or an operator's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A per-expert linear layer of a mixture of experts (its weights indexed by expert): a
    /// device holds the weights of E/ep experts, whose gradients are reduced among the ranks
    /// holding the same experts.
    ExpertGemm,
    /// Tokens copied into their experts' slots: expert parallelism's dispatch all-to-all follows
    /// it.
    MoeDispatch,
    /// Expert outputs summed back into their tokens: the combine all-to-all precedes it.
    MoeCombine,
    /// The gate over a router's logits (which its rule names in `router:`).
    MoeGate,
}

impl Role {
    /// Every role, as rule files spell them.
    pub const ALL: [(&'static str, Role); 4] = [
        ("expert-gemm", Role::ExpertGemm),
        ("moe-dispatch", Role::MoeDispatch),
        ("moe-combine", Role::MoeCombine),
        ("moe-gate", Role::MoeGate),
    ];

    /// What the pricing does with an operator of this role, in a sentence.
    pub fn meaning(self) -> &'static str {
        match self {
            Role::ExpertGemm => {
                "per-expert weights: a device holds E/ep experts', sharded by ZeRO among the \
                 ranks holding the same experts"
            }
            Role::MoeDispatch => "the expert-parallel dispatch all-to-all follows it",
            Role::MoeCombine => "the expert-parallel combine all-to-all precedes it",
            Role::MoeGate => "the gate over a router's logits",
        }
    }

    /// Its name in rule files.
    pub fn name(self) -> &'static str {
        Role::ALL
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("", |(n, _)| n)
    }

    /// The role a rule file names `name`.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
    }
}

/// One index of an operator's iteration space.
#[derive(Debug, Clone, Serialize)]
pub struct Index {
    /// Its name in the rule.
    pub name: String,
    /// Its kind, which selects the law.
    pub kind: IndexKind,
    /// For `stat`: statistics per normalised row in the forward pass.
    pub stats: u32,
    /// For `stat`: statistics per row in the backward pass.
    pub backward_stats: u32,
    /// For `window`: elements along this index each device receives from its neighbours.
    pub halo: Option<Poly>,
    /// A short description.
    pub doc: Option<String>,
}

/// Bytes of one element of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dtype {
    /// The operator's compute type (bf16 / fp16 unless a model says otherwise).
    Compute,
    /// A fixed element size in bytes (fp32 statistics, int64 token ids, uint8 masks).
    Fixed(u32),
}

impl Dtype {
    /// Parses `bf16`, `fp16`, `fp32`, `int64`, `int32`, `uint8`, `bool`, `compute`.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Some(match name {
            "compute" => Dtype::Compute,
            "bf16" | "fp16" => Dtype::Fixed(2),
            "fp32" | "int32" => Dtype::Fixed(4),
            "int64" | "fp64" => Dtype::Fixed(8),
            "uint8" | "bool" | "int8" | "fp8" => Dtype::Fixed(1),
            _ => return None,
        })
    }

    /// Element size given the operator's compute element size.
    pub fn bytes(self, compute: u32) -> u32 {
        match self {
            Dtype::Compute => compute,
            Dtype::Fixed(b) => b,
        }
    }

    /// Whether values of the dtype called `name` (absent: the compute type) can carry gradients
    /// (integers cannot).
    pub fn carries_gradient(name: Option<&str>) -> bool {
        !matches!(name, Some("int64" | "int32" | "uint8" | "bool" | "int8"))
    }
}

/// A tensor of a rule in index notation.
#[derive(Debug, Clone, Serialize)]
pub struct Tensor {
    /// Its name (`output` for the output).
    pub name: String,
    /// Dimensions; each is one index, or a group of indices stored as one merged dimension.
    pub dims: Vec<Vec<String>>,
    /// Whether it is a trained parameter.
    pub param: bool,
    /// Whether a gradient flows to it.
    pub grad: bool,
    /// Element type.
    pub dtype: Dtype,
    /// Extents that differ from the index's own size in this tensor (a convolution input's
    /// spatial size in terms of the output's).
    pub extents: Vec<(String, Poly)>,
}

impl Tensor {
    /// Whether index `name` appears in this tensor.
    pub fn has(&self, name: &str) -> bool {
        self.dims.iter().any(|g| g.iter().any(|i| i == name))
    }

    /// The dimension position holding index `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.dims.iter().position(|g| g.iter().any(|i| i == name))
    }

    /// Every index of the tensor, in order.
    pub fn indices(&self) -> impl Iterator<Item = &str> {
        self.dims.iter().flatten().map(String::as_str)
    }

    /// The extent of index `name` in this tensor.
    pub fn extent(&self, name: &str) -> Poly {
        self.extents
            .iter()
            .find(|(i, _)| i == name)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| Poly::symbol(name))
    }

    /// Number of elements.
    pub fn elements(&self) -> Poly {
        self.indices().map(|i| self.extent(i)).product()
    }
}

/// How an operator's FLOPs are known.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flops {
    /// A sum of einsum terms: FLOPs follow from the signature.
    Einsum,
    /// Stated in the rule file.
    Explicit {
        /// Forward FLOPs.
        forward: Poly,
        /// Backward FLOPs (all input gradients together).
        backward: Poly,
    },
}

/// A validated operator rule.
#[derive(Debug, Clone, Serialize)]
pub struct OpRule {
    /// Its name (the file stem).
    pub name: String,
    /// One line describing it.
    pub doc: String,
    /// The file it came from.
    pub file: PathBuf,
    /// FLOP class.
    pub class: FlopClass,
    /// Size symbols that are not indices (stride, padding).
    pub params: Vec<String>,
    /// The iteration space.
    pub indices: Vec<Index>,
    /// Inputs.
    pub inputs: Vec<Tensor>,
    /// The output.
    pub output: Tensor,
    /// For einsum rules: the output is the sum of these products of inputs (indices into
    /// `inputs`); every input is in exactly one term.
    pub terms: Vec<Vec<usize>>,
    /// How FLOPs are known.
    pub flops: Flops,
    /// Tensors kept for the backward pass.
    pub saved: Vec<Tensor>,
    /// Elements read and written, where stated (otherwise every input and the output once).
    pub io: Option<(Poly, Poly)>,
    /// Whether it runs as one fused attention kernel (FlashAttention-style).
    pub fused_attention: bool,
    /// FLOPs its backward kernel spends recomputing forward work (counted as work the device
    /// does, never as model FLOPs); zero for most rules.
    pub recompute_flops: Poly,
    /// Whether its backward computes the parameter gradients in a kernel of its own that reads
    /// the output gradient and the saved tensors again (`param_grad_kernel: true`, e.g. layer
    /// normalisation); see [`OpRule::param_grad_kernel_bytes`].
    pub param_grad_kernel: bool,
    /// Whether stacks without a fused kernel for it run it as fp32 passes over its first input
    /// (`fp32_passes: true`, the loss over the logits); see [`OpRule::fp32_pass_bytes`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fp32_passes: bool,
    /// What it is in a mixture of experts (`role:`), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The inputs (by name) that context parallelism passes around its ring of ranks (`ring:`,
    /// an attention's keys and values): each rank holds its sequence chunk's and needs every
    /// other rank's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ring: Vec<String>,
    /// The inputs (by name) that hold the logits of a router (`router:`, a gate's): the
    /// linear layer that makes them stays in the model's precision under FP8 recipes.
    /// Megatron-Core runs a mixture of experts' router through `router_gating_linear`
    /// (megatron/core/transformer/moe/moe_utils.py, called from `Router.gating` in router.py)
    /// in the input's dtype or `--moe-router-dtype`, and a shared expert's gate through
    /// `torch.nn.functional.linear` (shared_experts.py), outside Transformer Engine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub router: Vec<String>,
}

impl OpRule {
    /// Whether the context-parallel ring passes input `t` (the rule's `ring:`).
    pub fn rings(&self, t: &Tensor) -> bool {
        self.ring.contains(&t.name)
    }

    /// Whether it declares `role`.
    pub fn is(&self, role: Role) -> bool {
        self.role == Some(role)
    }

    /// An error in this rule's file at the item `path` names (a chain of keys, as
    /// [`crate::diag::Source::error_at`] takes it): its line and column where the file can be
    /// read again (a shipped rule's text is built in), else its first line.
    pub fn error_at(&self, path: &[&str], message: impl Into<String>) -> crate::error::Error {
        let shipped = crate::embedded::RULES
            .iter()
            .find(|(stem, _)| crate::embedded::display_path("operator_rules", stem) == self.file)
            .map(|(_, text)| text.to_string());
        match shipped.or_else(|| std::fs::read_to_string(&self.file).ok()) {
            Some(text) => crate::diag::Source::new(&self.file, text).error_at(path, message),
            None => crate::error::Error::at(&self.file, 1, 1, message),
        }
    }
}

impl OpRule {
    /// The index called `name`.
    pub fn index(&self, name: &str) -> Option<&Index> {
        self.indices.iter().find(|i| i.name == name)
    }

    /// The input called `name`.
    pub fn input(&self, name: &str) -> Option<&Tensor> {
        self.inputs.iter().find(|t| t.name == name)
    }

    /// Indices of term `t`'s iteration space: the output's and its inputs'.
    pub fn term_indices(&self, term: &[usize]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let tensors = std::iter::once(&self.output).chain(term.iter().map(|&k| &self.inputs[k]));
        for t in tensors {
            for i in t.indices() {
                if !out.iter().any(|o| o == i) {
                    out.push(i.to_string());
                }
            }
        }
        // Declaration order, so formulas and tables read the same way as the file.
        out.sort_by_key(|name| self.indices.iter().position(|i| &i.name == name));
        out
    }

    /// The product of the sizes of `indices`.
    pub fn volume(&self, indices: &[String]) -> Poly {
        indices.iter().map(|i| Poly::symbol(i)).product()
    }

    /// The term containing input `k` (einsum rules).
    pub fn term_of(&self, k: usize) -> Option<&Vec<usize>> {
        self.terms.iter().find(|t| t.contains(&k))
    }

    /// FLOPs of one einsum term: `(inputs − 1)` multiplies per point, plus one add per point when
    /// the term reduces an index.
    pub fn term_flops(&self, term: &[usize]) -> Poly {
        let idx = self.term_indices(term);
        let reduces = idx.iter().any(|i| !self.output.has(i));
        let per_point = term.len() as i64 - 1 + i64::from(reduces);
        Poly::int(per_point) * self.volume(&idx)
    }

    /// FLOPs to add the terms together.
    pub fn combine_flops(&self) -> Poly {
        let extra = self.terms.len().saturating_sub(1) as i64;
        Poly::int(extra) * self.output.elements()
    }

    /// Forward FLOPs (a multiply-add counts 2).
    pub fn forward_flops(&self) -> Poly {
        match &self.flops {
            Flops::Explicit { forward, .. } => forward.clone(),
            Flops::Einsum => {
                let terms: Poly = self.terms.iter().map(|t| self.term_flops(t)).sum();
                terms + self.combine_flops()
            }
        }
    }

    /// FLOPs of the gradient of input `k` (einsum rules): the einsum of the output gradient with
    /// the other inputs of its term, reducing the indices input `k` lacks.
    pub fn grad_flops(&self, k: usize) -> Poly {
        let Some(term) = self.term_of(k) else {
            return Poly::zero();
        };
        if !self.inputs[k].grad {
            return Poly::zero();
        }
        let idx = self.term_indices(term);
        let reduces = idx.iter().any(|i| !self.inputs[k].has(i));
        // Inputs of the gradient einsum: the output gradient and the term's other inputs.
        let per_point = term.len() as i64 - 1 + i64::from(reduces);
        Poly::int(per_point) * self.volume(&idx)
    }

    /// Backward FLOPs: all input gradients.
    pub fn backward_flops(&self) -> Poly {
        match &self.flops {
            Flops::Explicit { backward, .. } => backward.clone(),
            Flops::Einsum => (0..self.inputs.len()).map(|k| self.grad_flops(k)).sum(),
        }
    }

    /// Forward FLOPs as (matmul-like, other). For an einsum rule of class matmul, the contraction
    /// terms are matmul-like and the bias terms and the adds that combine terms are other, as
    /// PyTorch's FLOP counter counts `addmm` by its product alone.
    pub fn forward_flops_split(&self) -> (Poly, Poly) {
        match (&self.flops, self.class) {
            (Flops::Einsum, FlopClass::Matmul) => {
                let (mut mm, mut other) = (Poly::zero(), self.combine_flops());
                for t in &self.terms {
                    if self.is_contraction(t) {
                        mm += self.term_flops(t);
                    } else {
                        other += self.term_flops(t);
                    }
                }
                (mm, other)
            }
            (_, FlopClass::Matmul) => (self.forward_flops(), Poly::zero()),
            (_, FlopClass::Other) => (Poly::zero(), self.forward_flops()),
        }
    }

    /// Backward FLOPs as (matmul-like, other), split as [`OpRule::forward_flops_split`].
    pub fn backward_flops_split(&self) -> (Poly, Poly) {
        match (&self.flops, self.class) {
            (Flops::Einsum, FlopClass::Matmul) => {
                let (mut mm, mut other) = (Poly::zero(), Poly::zero());
                for k in 0..self.inputs.len() {
                    match self.term_of(k) {
                        Some(t) if self.is_contraction(t) => mm += self.grad_flops(k),
                        _ => other += self.grad_flops(k),
                    }
                }
                (mm, other)
            }
            (_, FlopClass::Matmul) => (self.backward_flops(), Poly::zero()),
            (_, FlopClass::Other) => (Poly::zero(), self.backward_flops()),
        }
    }

    /// The GEMMs a matmul-like rule runs as (its one einsum term multiplying two tensors while
    /// summing an index): the forward product first, then the product that computes the
    /// gradient of each of the term's inputs that takes one (the output gradient times the other
    /// input). Empty for any other rule.
    pub fn gemms(&self) -> Vec<GemmIndices> {
        if !matches!(self.flops, Flops::Einsum) {
            return Vec::new();
        }
        let mut contractions = self
            .terms
            .iter()
            .filter(|t| t.len() == 2 && self.is_contraction(t));
        let (Some(term), None) = (contractions.next(), contractions.next()) else {
            return Vec::new();
        };
        let names = |t: &Tensor| t.indices().map(str::to_string).collect::<Vec<_>>();
        let (a, b) = (names(&self.inputs[term[0]]), names(&self.inputs[term[1]]));
        let c = names(&self.output);
        let mut out = vec![GemmIndices::of(&a, &b, &c)];
        if self.inputs[term[0]].grad {
            out.push(GemmIndices::of(&c, &b, &a));
        }
        if self.inputs[term[1]].grad {
            out.push(GemmIndices::of(&a, &c, &b));
        }
        out
    }

    /// Whether it is a linear layer: its one GEMM ([`OpRule::gemms`]) multiplies an activation
    /// (first operand) by a trained weight (second operand, a parameter), and every index is a
    /// map or a summed one (no window: a convolution is no linear layer, though it runs as a
    /// GEMM). These are the layers Transformer Engine's `Linear` (and `LayerNormLinear`,
    /// `LayerNormMLP`, `GroupedLinear`) runs in FP8. The position of its activation input
    /// when it is one.
    pub fn linear_input(&self) -> Option<usize> {
        if self.gemms().is_empty() {
            return None;
        }
        let term = self
            .terms
            .iter()
            .find(|t| t.len() == 2 && self.is_contraction(t))?;
        let linear = !self.inputs[term[0]].param
            && self.inputs[term[1]].param
            && self
                .indices
                .iter()
                .all(|i| matches!(i.kind, IndexKind::Map | IndexKind::ReduceSum));
        linear.then_some(term[0])
    }

    /// Whether an einsum term multiplies two or more tensors while summing an index.
    pub fn is_contraction(&self, term: &[usize]) -> bool {
        term.len() >= 2 && self.term_indices(term).iter().any(|i| !self.output.has(i))
    }

    /// What the forward pass saves for backward besides its inputs and output (a dropout mask,
    /// normalisation statistics, softmax probabilities, argmax indices): the forward kernel
    /// writes these too.
    pub fn saved_extra(&self) -> impl Iterator<Item = &Tensor> {
        self.saved.iter().filter(move |s| {
            s.name != self.output.name && !self.inputs.iter().any(|t| t.name == s.name)
        })
    }

    /// Elements read and written by the forward pass (written: the output and
    /// [`OpRule::saved_extra`]).
    pub fn io_elements(&self) -> (Poly, Poly) {
        match &self.io {
            Some((r, w)) => (r.clone(), w.clone()),
            None => (
                self.inputs.iter().map(Tensor::elements).sum(),
                self.output.elements() + self.saved_extra().map(Tensor::elements).sum::<Poly>(),
            ),
        }
    }

    /// Bytes read and written by the forward pass with compute elements of `compute` bytes:
    /// it reads its inputs and writes its output and what it saves for backward beyond them.
    pub fn io_bytes(&self, compute: u32) -> (Poly, Poly) {
        match &self.io {
            Some((r, w)) => (
                r * &Poly::int(compute as i64),
                w * &Poly::int(compute as i64),
            ),
            None => (
                self.inputs.iter().map(|t| tensor_bytes(t, compute)).sum(),
                tensor_bytes(&self.output, compute)
                    + self
                        .saved_extra()
                        .map(|t| tensor_bytes(t, compute))
                        .sum::<Poly>(),
            ),
        }
    }

    /// Bytes read and written by the backward pass with compute elements of `compute` bytes.
    /// For an einsum, each input gradient is an einsum of its own: it reads the output gradient
    /// and the other inputs of its term and writes the gradient. Otherwise the backward reads the
    /// output gradient, what the rule saves and its parameters, and writes a gradient for every
    /// input that takes one.
    pub fn backward_io_bytes(&self, compute: u32) -> (Poly, Poly) {
        let dy = tensor_bytes(&self.output, compute);
        let grad_bytes = |t: &Tensor| gradient_bytes(t, compute);
        let mut read = Poly::zero();
        let mut written = Poly::zero();
        match &self.flops {
            Flops::Einsum => {
                for (k, t) in self.inputs.iter().enumerate() {
                    if !t.grad {
                        continue;
                    }
                    read += dy.clone();
                    if let Some(term) = self.term_of(k) {
                        for &j in term.iter().filter(|&&j| j != k) {
                            read += tensor_bytes(&self.inputs[j], compute);
                        }
                    }
                    written += grad_bytes(t);
                }
            }
            Flops::Explicit { .. } => {
                read += dy;
                read += self.saved_bytes(compute);
                for t in self
                    .inputs
                    .iter()
                    .filter(|t| t.param && !self.saved.iter().any(|s| s.name == t.name))
                {
                    read += tensor_bytes(t, compute);
                }
                for t in self.inputs.iter().filter(|t| t.grad) {
                    written += grad_bytes(t);
                }
            }
        }
        (read, written)
    }

    /// The kernel a backward pass runs of its own for the gradients of vector parameters, as
    /// PyTorch and Megatron-LM run it: `(its bytes read and written, the share of
    /// [`OpRule::backward_io_bytes`] it takes from the other backward kernels)`, both zero when
    /// there is none.
    ///
    /// * An einsum term of one parameter alone (a bias, `y = x·W + bias`) has the gradient
    ///   `Σ_rows dy`, a reduction no GEMM computes: its own kernel reads the output gradient and
    ///   writes the parameter's gradient (`grad_output.sum(dim=0)` in Megatron-LM's
    ///   `LinearWithGradAccumulationAndAsyncCommunication.backward`, the broadcast's reduction
    ///   in PyTorch's `addmm` backward), bytes the rule's formula already counts once.
    /// * A rule with `param_grad_kernel: true` (layer normalisation) reads the output gradient
    ///   and its saved tensors a second time to write the parameter gradients: PyTorch's
    ///   `layer_norm_backward_cuda` launches `GammaBetaBackwardCUDAKernel` beside the
    ///   input-gradient kernel, apex's and Megatron-LM's `fused_layer_norm_cuda` launch
    ///   `cuComputePartGradGammaBeta` beside `cuComputeGradInput`, each reading `x` and `dy`.
    ///   Only the parameter gradients' writes move out of the other kernel.
    pub fn param_grad_kernel_bytes(&self, compute: u32) -> (Poly, Poly) {
        let dy = tensor_bytes(&self.output, compute);
        let grad = |t: &Tensor| gradient_bytes(t, compute);
        match &self.flops {
            Flops::Einsum => {
                let mut own = Poly::zero();
                for (k, t) in self.inputs.iter().enumerate() {
                    let alone = self.term_of(k).is_some_and(|term| term.len() == 1);
                    if t.grad && t.param && alone {
                        own += dy.clone() + grad(t);
                    }
                }
                (own.clone(), own)
            }
            Flops::Explicit { .. } if self.param_grad_kernel => {
                let grads: Poly = self
                    .inputs
                    .iter()
                    .filter(|t| t.param && t.grad)
                    .map(grad)
                    .sum();
                (dy + self.saved_bytes(compute) + grads.clone(), grads)
            }
            Flops::Explicit { .. } => (Poly::zero(), Poly::zero()),
        }
    }

    /// Bytes beyond [`OpRule::io_bytes`] and [`OpRule::backward_io_bytes`] (forward, backward)
    /// that a rule with `fp32_passes: true` moves where no fused kernel computes it, with
    /// compute elements of `compute` bytes: zero otherwise. Per element of the first input (the
    /// logits), as Megatron-LM computes its loss (`vocab_parallel_cross_entropy(output.float(),
    /// labels)`, megatron/core/tensor_parallel/cross_entropy.py) in separate kernels:
    /// * forward: the cast to fp32 (reads the compute type, writes 4 bytes; none when the compute
    ///   type is fp32), the maximum (reads 4), the subtraction of it (reads 4, writes 4), the
    ///   exponential (reads 4, writes 4), their sum (reads 4) and the division by it (reads 4,
    ///   writes 4), the probabilities kept in fp32 for the backward;
    /// * backward: the product with the loss gradient (reads 4, writes 4) and the cast back
    ///   (reads 4, writes the compute type; none in fp32).
    ///
    /// The rule's own count (the logits read and the probabilities written forward, the
    /// probabilities read and the logits' gradient written backward, each in the compute type)
    /// is what one fused kernel moves, and is subtracted. PyTorch's `F.cross_entropy` under
    /// autocast (which runs it in fp32) and Hugging Face's `logits.float()` move about as much in
    /// a different order of passes.
    pub fn fp32_pass_bytes(&self, compute: u32) -> (Poly, Poly) {
        if !self.fp32_passes {
            return (Poly::zero(), Poly::zero());
        }
        let e = self.inputs[0].elements();
        let c = compute as i64;
        let cast = |v: i64| if c < 4 { v } else { 0 };
        let forward = 20 + 12 + cast(c + 4) - 2 * c;
        let backward = 8 + cast(4 + c) - 2 * c;
        (
            &e * &Poly::int(forward.max(0)),
            &e * &Poly::int(backward.max(0)),
        )
    }

    /// Bytes a loss moves beyond [`OpRule::io_bytes`] and [`OpRule::backward_io_bytes`]
    /// (forward, backward), with compute elements of `compute` bytes: its separate fp32 passes
    /// where `fp32` ([`OpRule::fp32_pass_bytes`]) and `metrics` evaluations as a training metric
    /// ([`OpRule::metric_pass_bytes`]), charged with the forward (they run after the backward,
    /// on the same device, micro-batch and compute stream). Zero for rules without
    /// `fp32_passes`.
    pub fn loss_pass_bytes(&self, compute: u32, fp32: bool, metrics: u32) -> (Poly, Poly) {
        let (mut forward, backward) = if fp32 {
            self.fp32_pass_bytes(compute)
        } else {
            (Poly::zero(), Poly::zero())
        };
        forward += &(&self.metric_pass_bytes(compute) * &Poly::int(i64::from(metrics)));
        (forward, backward)
    }

    /// Bytes one evaluation of the loss as a training metric moves over the logits (the first
    /// input) of a rule with `fp32_passes: true`, with compute elements of `compute` bytes; zero
    /// for other rules. Composer's trainer updates each training metric after every
    /// micro-batch's backward, under the run's autocast and without gradients
    /// (`Trainer._eval_train_metrics`, composer/trainer/trainer.py), and its
    /// `LanguageCrossEntropy` and `LanguagePerplexity` each call `torch.nn.CrossEntropyLoss` on
    /// the logits (composer/metrics/nlp.py). Per logit: autocast's cast to fp32 (reads the
    /// compute type, writes 4; none in fp32) and the fp32 log-softmax (reads 4, writes 4); the
    /// target pick and the sum read one value per token, which is not counted.
    pub fn metric_pass_bytes(&self, compute: u32) -> Poly {
        if !self.fp32_passes {
            return Poly::zero();
        }
        let c = compute as i64;
        let cast = if c < 4 { c + 4 } else { 0 };
        &self.inputs[0].elements() * &Poly::int(cast + 8)
    }

    /// Whether its backward only hands the output gradient to every input, as autograd does for
    /// a sum of same-shaped activations (`AddBackward` returns the gradient itself to both
    /// inputs): an einsum whose terms are one input each, every input shaped as the output and
    /// none a parameter. No backward kernel runs for it.
    pub fn passes_gradient_through(&self) -> bool {
        let same = |t: &Tensor| t.indices().eq(self.output.indices());
        matches!(self.flops, Flops::Einsum)
            && !self.terms.is_empty()
            && self.terms.iter().all(|t| t.len() == 1)
            && self.inputs.iter().all(|t| !t.param && same(t))
    }

    /// Bytes kept for the backward pass.
    pub fn saved_bytes(&self, compute: u32) -> Poly {
        self.saved.iter().map(|t| tensor_bytes(t, compute)).sum()
    }

    /// Parameter elements.
    pub fn param_elements(&self) -> Poly {
        self.inputs
            .iter()
            .filter(|t| t.param)
            .map(Tensor::elements)
            .sum()
    }
}

/// The indices of one GEMM `r = p · q`, grouped as a GEMM library tiles it: each of the `batch`
/// products has an output of `rows` × `cols` elements, computed in output tiles, and sums over
/// `inner`. An index of the output and of one operand only is a row (first operand) or column
/// (second); one of both operands and not the output is summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GemmIndices {
    /// In both operands and the output.
    pub batch: Vec<String>,
    /// In the first operand and the output.
    pub rows: Vec<String>,
    /// In the second operand and the output.
    pub cols: Vec<String>,
    /// In both operands, summed.
    pub inner: Vec<String>,
}

impl GemmIndices {
    fn of(p: &[String], q: &[String], r: &[String]) -> GemmIndices {
        let has = |v: &[String], i: &String| v.contains(i);
        let mut g = GemmIndices {
            batch: Vec::new(),
            rows: Vec::new(),
            cols: Vec::new(),
            inner: Vec::new(),
        };
        for i in p {
            match (has(q, i), has(r, i)) {
                (true, true) => g.batch.push(i.clone()),
                (false, true) => g.rows.push(i.clone()),
                (true, false) => g.inner.push(i.clone()),
                (false, false) => {}
            }
        }
        g.cols = q
            .iter()
            .filter(|i| !has(p, i) && has(r, i))
            .cloned()
            .collect();
        g
    }
}

/// Bytes of a tensor with compute elements of `compute` bytes.
pub fn tensor_bytes(t: &Tensor, compute: u32) -> Poly {
    t.elements() * Poly::int(t.dtype.bytes(compute) as i64)
}

/// Bytes of the gradient of `t`: the compute type, whatever `t`'s storage type.
fn gradient_bytes(t: &Tensor, compute: u32) -> Poly {
    t.elements() * Poly::int(compute as i64)
}

#[cfg(test)]
mod tests {
    use super::GemmIndices;
    use crate::rules::RuleSet;

    fn g(batch: &[&str], rows: &[&str], cols: &[&str], inner: &[&str]) -> GemmIndices {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        GemmIndices {
            batch: v(batch),
            rows: v(rows),
            cols: v(cols),
            inner: v(inner),
        }
    }

    #[test]
    fn a_linear_layer_runs_three_gemms() {
        let set = RuleSet::embedded().unwrap();
        // y[b, n] = Σ_k x[b, k] · w[k, n]: forward b × n over k; dx = dy · wᵀ is b × k over n;
        // dw = xᵀ · dy is k × n over b.
        let gemms = set.get("linear").unwrap().gemms();
        assert_eq!(
            gemms,
            vec![
                g(&[], &["b"], &["n"], &["k"]),
                g(&[], &["b"], &["k"], &["n"]),
                g(&[], &["k"], &["n"], &["b"]),
            ]
        );
    }

    #[test]
    fn only_two_operand_contractions_have_gemms() {
        let set = RuleSet::embedded().unwrap();
        assert!(set.get("gelu").unwrap().gemms().is_empty());
        assert!(set.get("add").unwrap().gemms().is_empty());
        assert!(set.get("softmax").unwrap().gemms().is_empty());
    }
}
