//! The knobs of a hybrid-parallel strategy, as Megatron-LM and DeepSpeed users know them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bytes per bf16 model weight element: what [`Precision::Bf16`] keeps on each device beside
/// the fp32 master copy, and what its ZeRO gathers move.
pub const WEIGHT_BYTES: i64 = 2;

/// Pipeline schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// All forwards, then all backwards (Huang et al. 2019).
    Gpipe,
    /// One forward, one backward (PipeDream-Flush; Narayanan et al. 2021).
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B with several model chunks per device (Narayanan et al. SC'21).
    #[serde(rename = "interleaved-1f1b")]
    Interleaved,
    /// ZB-H1 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024,
    /// arXiv:2401.10241, §3.1): 1F1B with each backward split into B, the gradient of the
    /// stage's input (sent upstream at once), and W, the gradient of its weights, deferred to
    /// fill what was bubble; the peak activations of 1F1B, a bubble of about
    /// (p − 1)(T_F + T_B − T_W).
    #[serde(rename = "zb-h1")]
    ZeroBubbleH1,
    /// DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1 and
    /// Table 2; deepseek-ai/DualPipe): bidirectional, each of the pp ranks holding two stages,
    /// stage i and stage pp − 1 − i, with micro-batches fed from both ends; a forward and a
    /// backward chunk of two micro-batches run overlapped, the communication of one under the
    /// other's compute; backwards split into input and weight gradients where it fills the
    /// bubble. Table 2: a bubble of (PP/2 − 1)(F&B + B − 3W), 2× the parameters and PP + 1
    /// micro-batches of activations per device. Needs pp even and an even micro-batch count of
    /// at least 2·pp (the published `DualPipe.step` asserts both).
    #[serde(rename = "dualpipe")]
    DualPipe,
    /// ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, §6;
    /// PyTorch's `ScheduleZBVZeroBubble`, which torchtitan runs as `ZBVZeroBubble`): the
    /// layers split into 2·pp chunks, rank s holding chunks s and 2·pp − 1 − s, so that a
    /// micro-batch's forward runs down the ranks and back up (a "V"); backwards split into B
    /// and W as under ZB-H1. The peak activations of 1F1B (pp micro-batches of a whole stage
    /// on every rank), twice its pipeline exchanges, and, with the chunks' F, B and W equal, a
    /// bubble of (pp − 1) chunk forwards.
    #[serde(rename = "zb-v")]
    ZeroBubbleV,
    /// DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py, DualPipe "cut in half"; PyTorch's
    /// `ScheduleDualPipeV`, which torchtitan runs as `DualPipeV`): ZB-V's placement, the layers
    /// in 2·pp chunks with rank s holding chunks s and 2·pp − 1 − s, run in DualPipe's eight
    /// steps: the forward of one micro-batch and the full backward of another overlapped as an
    /// F&B chunk in the steady state, backwards split into input and weight gradients where it
    /// fills the bubble. deepseek-ai/DualPipe's README: a bubble of (PP/2 − 1)(F&B + B − 3W)
    /// for PP stages (2·pp chunks here), 2·pp + 1 chunk micro-batches of activations per
    /// device, DualPipe's with half the devices. Needs at least 2·pp micro-batches (both
    /// implementations assert it).
    #[serde(rename = "dualpipev")]
    DualPipeV,
}

impl Schedule {
    /// Whether each backward runs as two steps, the input gradient and, later, the weight
    /// gradient ([`Schedule::ZeroBubbleH1`], and [`Schedule::DualPipe`], where some weight
    /// gradients run apart from their backward).
    pub fn splits_backward(self) -> bool {
        matches!(
            self,
            Schedule::ZeroBubbleH1
                | Schedule::DualPipe
                | Schedule::ZeroBubbleV
                | Schedule::DualPipeV
        )
    }

    /// Whether the model splits into two chunks per rank placed as a "V", chunk s and
    /// 2·pp − 1 − s on rank s ([`Schedule::ZeroBubbleV`], [`Schedule::DualPipeV`]).
    pub fn v_shaped(self) -> bool {
        matches!(self, Schedule::ZeroBubbleV | Schedule::DualPipeV)
    }

    /// Whether the steady state runs F&B chunks, the forward of one micro-batch overlapped
    /// with the full backward of another, and idles the bubble of the DeepSeek-V3 report's
    /// Table 2, (PP/2 − 1)(F&B + B − 3W) for PP stages ([`Schedule::DualPipe`],
    /// [`Schedule::DualPipeV`]).
    pub fn overlaps_chunks(self) -> bool {
        matches!(self, Schedule::DualPipe | Schedule::DualPipeV)
    }

    /// Whether each pipeline rank holds two stages, i and pp − 1 − i, with micro-batches fed
    /// from both ends ([`Schedule::DualPipe`]).
    pub fn bidirectional(self) -> bool {
        self == Schedule::DualPipe
    }

    /// Why `pp` ranks and `microbatches` micro-batches cannot run this schedule, if they
    /// cannot: DualPipe needs pp even and the micro-batches even and at least 2·pp (the
    /// assertions of `DualPipe.step`, deepseek-ai/DualPipe, dualpipe/dualpipe.py:
    /// `num_ranks % 2 == 0`, `num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`).
    /// DualPipeV needs at least 2·pp micro-batches, one per stage of its V (`DualPipeV.step`,
    /// dualpipe/dualpipev.py: `num_chunks >= num_ranks * 2`; PyTorch's `ScheduleDualPipeV`:
    /// "at least as many microbatches as stages").
    pub fn refuses(self, pp: u64, microbatches: u64) -> Option<String> {
        if pp <= 1 {
            return None;
        }
        if self == Schedule::DualPipeV {
            return (microbatches < 2 * pp).then(|| {
                format!(
                    "dualpipev needs at least 2·pp = {} micro-batches (one per stage of its V), but microbatches is {microbatches}",
                    2 * pp
                )
            });
        }
        if self != Schedule::DualPipe {
            return None;
        }
        if pp % 2 == 1 {
            return Some(format!(
                "dualpipe needs an even pp (each rank holds stages i and pp - 1 - i), but pp is {pp}"
            ));
        }
        if microbatches % 2 == 1 || microbatches < 2 * pp {
            return Some(format!(
                "dualpipe needs an even number of micro-batches, at least 2·pp = {} (half fed from each end), but microbatches is {microbatches}",
                2 * pp
            ));
        }
        None
    }

    /// Parses a schedule name.
    pub fn from_name(s: &str) -> Option<Schedule> {
        match s {
            "gpipe" => Some(Schedule::Gpipe),
            "1f1b" => Some(Schedule::OneFOneB),
            "interleaved-1f1b" | "interleaved" => Some(Schedule::Interleaved),
            "zb-h1" => Some(Schedule::ZeroBubbleH1),
            "dualpipe" => Some(Schedule::DualPipe),
            "zb-v" | "zbv" => Some(Schedule::ZeroBubbleV),
            "dualpipev" | "dualpipe-v" => Some(Schedule::DualPipeV),
            _ => None,
        }
    }
}

impl Schedule {
    /// The name users type and the tables print.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Gpipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
            Schedule::Interleaved => "interleaved-1f1b",
            Schedule::ZeroBubbleH1 => "zb-h1",
            Schedule::DualPipe => "dualpipe",
            Schedule::ZeroBubbleV => "zb-v",
            Schedule::DualPipeV => "dualpipev",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Activation recomputation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recompute {
    /// Keep every activation.
    None,
    /// Recompute the attention core (scores, softmax, dropout, context), as Korthikanti et al.
    /// 2022 propose: its activations grow with the square of the sequence.
    Selective,
    /// Keep only each layer's input and recompute the layer in the backward pass.
    Full,
}

impl Recompute {
    /// Parses a recomputation name.
    pub fn from_name(s: &str) -> Option<Recompute> {
        match s {
            "none" => Some(Recompute::None),
            "selective" => Some(Recompute::Selective),
            "full" => Some(Recompute::Full),
            _ => None,
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        })
    }
}

/// How mixed-precision training keeps and moves its weights and gradients.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// bf16 model weights and gradients with fp32 master weights in the optimizer, weight
    /// gradients added into an fp32 buffer by the GEMM itself (Megatron-LM `--bf16` with
    /// `--gradient-accumulation-fusion`, DeepSpeed bf16, PyTorch FSDP with
    /// `MixedPrecision(param_dtype=torch.bfloat16)`).
    #[default]
    Bf16,
    /// fp32 model weights under `torch.autocast(dtype=torch.bfloat16)` (PyTorch AMP; PyTorch
    /// Lightning `precision: bf16`/`bf16-mixed`; Hugging Face Trainer `bf16=True`): every
    /// matmul casts its fp32 weight to bf16 in each forward (autocast's cast cache lives for one
    /// autocast region, one forward), the bf16 weight gradient is cast back to fp32 and added to
    /// `.grad` by separate kernels, and data-parallel collectives move fp32 gradients (DDP) and
    /// fp32 weights (FSDP without a bf16 `param_dtype`).
    Autocast,
    /// The bf16 recipe with the linear layers of the repeated transformer blocks run as FP8
    /// GEMMs, as NVIDIA Transformer Engine runs them under its default recipe
    /// (`transformer_engine.common.recipe.DelayedScaling`: per-tensor scaling from an amax
    /// history, E4M3 forward and E5M2 gradients, `Format.HYBRID`; Megatron-LM `--fp8-format
    /// hybrid`). The attention's batched matmuls (fused attention), the output layer and every
    /// other operator stay bf16, as Transformer Engine's modules leave them. Priced: those
    /// GEMMs at the table's `peak_flops.fp8` (under its `matmul_fp8` curve where it has one,
    /// else the bf16 matmul curve), the casts to FP8 that feed them (inputs, weights and
    /// output gradients, each with the transpose Hopper's FP8 GEMMs need; the amax is reduced
    /// inside the cast kernel), the FP8 copy of those weights and its transpose that
    /// Transformer Engine keeps beside the bf16 weights, and their inputs saved for the
    /// backward in FP8 (1 byte) instead of bf16. Gradients are reduced in bf16/fp32 as under
    /// bf16. [`Fp8Bytes`] gives the bytes of each FP8 recipe.
    Fp8,
    /// As [`Precision::Fp8`] with per-tensor current scaling (Transformer Engine's
    /// `Float8CurrentScaling`, Megatron-LM `--fp8-recipe tensorwise`): each tensor's scale is
    /// set from its own amax, reduced by a pass over the bf16 tensor before the cast, so every
    /// cast reads its input twice.
    #[serde(rename = "fp8-current")]
    #[value(name = "fp8-current")]
    Fp8Current,
    /// As [`Precision::Fp8`] with DeepSeek-V3's block scaling (DeepSeek-AI, arXiv:2412.19437,
    /// §3.3.1; Transformer Engine's `Float8BlockScaling`, Megatron-LM `--fp8-recipe
    /// blockwise`): E4M3 throughout, one fp32 scale per 1×128 tile of activations and
    /// gradients and per 128×128 block of weights; each operand is quantized once per
    /// direction (rowwise and columnwise) with its own scales. Runs at the FP8 peak.
    #[serde(rename = "fp8-block")]
    #[value(name = "fp8-block")]
    Fp8Block,
    /// MXFP8 (OCP Microscaling Formats v1.0; Transformer Engine's `MXFP8BlockScaling`,
    /// Megatron-LM `--fp8-recipe mxfp8`): E4M3 elements with one E8M0 (1-byte) scale per 32
    /// consecutive elements, rowwise and columnwise copies of every operand, GEMMs scaled by
    /// the tensor cores themselves. Needs hardware that runs it (Blackwell, SM 10.0 and later):
    /// a table lists it under `device.scaled_formats`. Runs at the FP8 peak.
    Mxfp8,
    /// NVFP4 (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv:2509.25149;
    /// Transformer Engine's `NVFP4BlockScaling`): the same linear layers as FP4 GEMMs at the
    /// table's `peak_flops.fp4`, E2M1 elements (half a byte) with one E4M3 scale byte per 16
    /// consecutive activation or gradient elements and per 16 × 16 weight block, and an fp32
    /// scale per tensor from its amax, reduced by a pass of its own before the cast. Needs
    /// Blackwell (`device.scaled_formats: [nvfp4]`). The paper's random Hadamard transforms
    /// (fused into the casts of the weight-gradient GEMM's operands) and stochastic rounding
    /// move no bytes of their own; its choice to keep some layers in bf16 is not modelled.
    Nvfp4,
}

/// HBM bytes per element of what one FP8 recipe ([`Precision::fp8_bytes`]) casts, keeps and
/// saves, as exact fractions `(numerator, denominator)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8Bytes {
    /// One cast of an activation or output gradient: the bf16 tensor read (2; twice under
    /// current scaling, whose amax needs a pass of its own) and its rowwise and columnwise FP8
    /// copies written (1 + 1), each with its scales.
    pub cast: (u64, u64),
    /// One cast of a weight, as `cast` with the weights' scaling.
    pub weight_cast: (u64, u64),
    /// The FP8 copies of a weight kept beside the bf16 weight (rowwise and columnwise, with
    /// their scales).
    pub weight_copy: (u64, u64),
    /// Bytes per element of an FP8 GEMM input saved for the backward pass (1, plus its scales).
    pub saved: (u64, u64),
    /// Its GEMMs run at the FP4 peak (`peak_flops.fp4`), not the FP8 one.
    pub fp4: bool,
}

impl Fp8Bytes {
    /// Per-tensor scaling, delayed: one fp32 scale per tensor (no bytes per element). A cast is
    /// Transformer Engine's `fp8_cast_transpose_fused`: the bf16 tensor read (2), its FP8 copy
    /// and the FP8 copy of its transpose written (1 + 1; Hopper's FP8 GEMMs take only the "TN"
    /// layout, so each operand is wanted both ways); the amax is reduced inside the same kernel
    /// (its scale was set from the amax history of earlier steps). The weight's two FP8 copies
    /// are cast on a step's first micro-batch and reused by the others (`is_first_microbatch`,
    /// which Megatron-Core sets on the first micro-batch of each step).
    pub const DELAYED: Fp8Bytes = Fp8Bytes {
        cast: (4, 1),
        weight_cast: (4, 1),
        weight_copy: (2, 1),
        saved: (1, 1),
        fp4: false,
    };
    /// Per-tensor scaling, current: the amax pass reads the bf16 tensor once more.
    pub const CURRENT: Fp8Bytes = Fp8Bytes {
        cast: (6, 1),
        weight_cast: (6, 1),
        weight_copy: (2, 1),
        saved: (1, 1),
        fp4: false,
    };
    /// DeepSeek-V3 blocks: 4 bytes of fp32 scale per 128 activation elements (1/32 byte each)
    /// and per 128 × 128 weight elements (1/4096 byte each), per copy.
    pub const BLOCK: Fp8Bytes = Fp8Bytes {
        // 2 + 2·(1 + 1/32)
        cast: (65, 16),
        // 2 + 2·(1 + 1/4096)
        weight_cast: (8193, 2048),
        // 2·(1 + 1/4096)
        weight_copy: (4097, 2048),
        saved: (33, 32),
        fp4: false,
    };
    /// MXFP8: one 1-byte E8M0 scale per 32 elements (1/32 byte each), per copy, weights too.
    pub const MX: Fp8Bytes = Fp8Bytes {
        cast: (65, 16),
        weight_cast: (65, 16),
        weight_copy: (33, 16),
        saved: (33, 32),
        fp4: false,
    };
    /// NVFP4: half a byte per element, one E4M3 scale byte per 16 elements (1/16 byte each)
    /// or per 16 × 16 weight elements (1/256 each), per copy; every cast reads its tensor twice
    /// (the per-tensor amax first).
    pub const NVFP4: Fp8Bytes = Fp8Bytes {
        // 2 + 2 + 2·(1/2 + 1/16)
        cast: (41, 8),
        // 2 + 2 + 2·(1/2 + 1/256)
        weight_cast: (641, 128),
        // 2·(1/2 + 1/256)
        weight_copy: (129, 128),
        saved: (9, 16),
        fp4: true,
    };
}

impl Precision {
    /// Parses `bf16`, `autocast`, `fp8`, `fp8-current`, `fp8-block`, `mxfp8` or `nvfp4`.
    pub fn from_name(s: &str) -> Option<Precision> {
        match s {
            "bf16" => Some(Precision::Bf16),
            "autocast" => Some(Precision::Autocast),
            "fp8" => Some(Precision::Fp8),
            "fp8-current" => Some(Precision::Fp8Current),
            "fp8-block" => Some(Precision::Fp8Block),
            "mxfp8" => Some(Precision::Mxfp8),
            "nvfp4" => Some(Precision::Nvfp4),
            _ => None,
        }
    }

    /// What `rank --fix precision=any` searches, where the machine runs it: bf16, FP8 under
    /// delayed scaling and NVFP4. Autocast is a framework's recipe rather than a choice of
    /// speed; the other FP8 recipes run their GEMMs at the same FP8 peak and move at least as
    /// many bytes in every cast, copy and saved input as delayed scaling
    /// ([`Precision::dominates`]), so on the same knobs they are never faster nor smaller:
    /// they are chosen for their numerics, and priced where they are fixed.
    pub const SEARCHED: [Precision; 3] = [Precision::Bf16, Precision::Fp8, Precision::Nvfp4];

    /// Whether `other` runs its GEMMs at the same peak as `self` and moves no fewer bytes per
    /// element in any cast, weight copy or saved input: then `other` is never faster and never
    /// smaller than `self` on the same knobs.
    pub fn dominates(self, other: Precision) -> bool {
        let (Some(a), Some(b)) = (self.fp8_bytes(), other.fp8_bytes()) else {
            return false;
        };
        let le = |(n, d): (u64, u64), (m, e): (u64, u64)| n * e <= m * d;
        a.fp4 == b.fp4
            && le(a.cast, b.cast)
            && le(a.weight_cast, b.weight_cast)
            && le(a.weight_copy, b.weight_copy)
            && le(a.saved, b.saved)
    }

    /// Every precision's name, as [`Precision::from_name`] reads them.
    pub const NAMES: &'static str = "bf16, autocast, fp8, fp8-current, fp8-block, mxfp8, nvfp4";

    /// Whether the repeated layers' linear layers run as FP8 (or, under NVFP4, FP4) GEMMs.
    pub fn is_fp8(self) -> bool {
        self.fp8_bytes().is_some()
    }

    /// The bytes of its FP8 recipe, where it is one.
    pub fn fp8_bytes(self) -> Option<Fp8Bytes> {
        match self {
            Precision::Bf16 | Precision::Autocast => None,
            Precision::Fp8 => Some(Fp8Bytes::DELAYED),
            Precision::Fp8Current => Some(Fp8Bytes::CURRENT),
            Precision::Fp8Block => Some(Fp8Bytes::BLOCK),
            Precision::Mxfp8 => Some(Fp8Bytes::MX),
            Precision::Nvfp4 => Some(Fp8Bytes::NVFP4),
        }
    }

    /// The name under which a calibration table says its hardware runs this format
    /// (`device.scaled_formats`), where the format needs it.
    pub fn hardware_format(self) -> Option<&'static str> {
        match self {
            Precision::Mxfp8 => Some("mxfp8"),
            Precision::Nvfp4 => Some("nvfp4"),
            _ => None,
        }
    }

    /// Whether its FP8 weights can be the model's parameters ([`Knobs::fp8_params`]): the
    /// per-tensor recipes and DeepSeek-V3's 128 × 128 weight blocks, whose FP8 copy can be
    /// transposed as it is. An MXFP8 weight's columnwise copy has scales along the other axis
    /// and is quantized again from higher precision, and NVFP4 has its own `--fp4-param-gather`:
    /// neither is modelled.
    pub fn keeps_fp8_params(self) -> bool {
        matches!(
            self,
            Precision::Fp8 | Precision::Fp8Current | Precision::Fp8Block
        )
    }

    /// The peak its low-precision GEMMs run at (`peak_flops.fp8` or `peak_flops.fp4`).
    pub fn gemm_peak(self) -> Option<&'static str> {
        self.fp8_bytes().map(|b| if b.fp4 { "fp4" } else { "fp8" })
    }

    /// Bytes per model weight element (what a ZeRO-3 gather or ZeRO-1's weight gather moves).
    pub fn weight_bytes(self) -> u64 {
        match self {
            // FP8 training keeps bf16 weights: what ZeRO gathers is bf16.
            Precision::Autocast => 4,
            _ => WEIGHT_BYTES as u64,
        }
    }

    /// How many times the operator rules' bf16 gradient bytes the data-parallel collectives
    /// move: 2 when gradients and weights are fp32.
    pub fn wire_factor(self) -> u64 {
        match self {
            Precision::Autocast => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Precision {
    /// Its name, as `--precision` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Autocast => "autocast",
            Precision::Fp8 => "fp8",
            Precision::Fp8Current => "fp8-current",
            Precision::Fp8Block => "fp8-block",
            Precision::Mxfp8 => "mxfp8",
            Precision::Nvfp4 => "nvfp4",
        }
    }
}

/// Which communication overlaps the computation it sits next to, as Megatron-LM's flags name
/// them. The default is PyTorch DDP's behaviour: gradient reductions overlap the backward pass,
/// nothing else overlaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Overlap {
    /// Tensor-parallel collectives pipelined with the GEMMs they feed or are fed by
    /// (`--tp-comm-overlap`, Transformer Engine's userbuffers): each runs beside its GEMM.
    #[serde(default)]
    pub tp_comm: bool,
    /// Data-parallel gradient reductions launched bucket by bucket during the backward pass
    /// (`--overlap-grad-reduce`); otherwise one reduction after the last backward.
    #[serde(default = "yes")]
    pub grad_reduce: bool,
    /// The distributed optimizer's parameter all-gather overlapped with the next step's forward
    /// pass (`--overlap-param-gather`); otherwise it ends the step.
    #[serde(default)]
    pub param_gather: bool,
}

impl Default for Overlap {
    fn default() -> Overlap {
        Overlap {
            tp_comm: false,
            grad_reduce: true,
            param_gather: false,
        }
    }
}

impl fmt::Display for Overlap {
    /// The overlaps that differ from the default, as `overlap=tp-comm,param-gather,no-grad-reduce`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut v = Vec::new();
        if self.tp_comm {
            v.push("tp-comm");
        }
        if self.param_gather {
            v.push("param-gather");
        }
        if !self.grad_reduce {
            v.push("no-grad-reduce");
        }
        if !v.is_empty() {
            write!(f, " overlap={}", v.join(","))?;
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}

/// What the interleaved schedule's split of the layers over the model chunks counts besides
/// the transformer layers: Megatron-Core's `--account-for-embedding-in-pipeline-split` and
/// `--account-for-loss-in-pipeline-split` each count one more layer (the embedding on the first
/// chunk, the output layer and loss on the last), so that `layers + 2` divides over the chunks
/// and the first and last chunks hold one transformer layer fewer (megatron/core/transformer/
/// transformer_layer.py, `get_transformer_layer_offset`). Llama 3 405B trained so: 126 layers
/// on 16 stages of 8 chunks, the first chunk holding only the embedding and the last only the
/// output projection and loss (Grattafiori et al. 2024, arXiv:2407.21783, §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSplit {
    /// The embedding counts as a layer of the first chunk.
    #[serde(default)]
    pub embedding: bool,
    /// The output layer and loss count as a layer of the last chunk.
    #[serde(default)]
    pub loss: bool,
}

impl PipelineSplit {
    /// Neither is counted: the layers alone are split.
    pub fn is_plain(&self) -> bool {
        !self.embedding && !self.loss
    }

    /// The layers the split counts besides the transformer layers.
    pub fn extra(&self) -> u64 {
        u64::from(self.embedding) + u64::from(self.loss)
    }
}

impl fmt::Display for PipelineSplit {
    /// `embedding+loss`, `embedding`, `loss`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<&str> = [(self.embedding, "embedding"), (self.loss, "loss")]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| n)
            .collect();
        if v.is_empty() {
            write!(f, "none")
        } else {
            write!(f, "{}", v.join("+"))
        }
    }
}

/// A hybrid-parallel strategy's knobs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
    /// Data-parallel degree.
    pub dp: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Micro-batches per step.
    pub microbatches: u64,
    /// Pipeline schedule.
    pub schedule: Schedule,
    /// Model chunks per device (interleaved schedule; 1 otherwise).
    pub chunks: u64,
    /// Megatron-LM sequence parallelism in the tensor-parallel group.
    pub sequence_parallel: bool,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// ZeRO stage (0–3) over the data-parallel group.
    pub zero: u8,
    /// Expert-parallel degree: experts spread over groups of this many data-parallel ranks
    /// (mixture-of-experts models; 1 otherwise).
    #[serde(default = "one")]
    pub ep: u64,
    /// Context-parallel degree (Megatron-LM's `--context-parallel-size`): every sequence is cut
    /// over this many ranks, attention circulates keys and values around them as a ring, and
    /// weights are replicated over them (1 otherwise).
    #[serde(default = "one")]
    pub cp: u64,
    /// Communication overlapped with computation (timelines only: relative cost adds every
    /// collective).
    #[serde(default)]
    pub overlap: Overlap,
    /// How weights and gradients are kept in mixed precision (bf16 unless stated).
    #[serde(default)]
    pub precision: Precision,
    /// What the interleaved schedule's split counts besides the layers (nothing unless stated).
    #[serde(default, skip_serializing_if = "PipelineSplit::is_plain")]
    pub pipeline_split: PipelineSplit,
    /// FP8 parameters (Megatron-LM's `--fp8-param-gather`, NeMo's `fp8_params`): "keep the
    /// compute param in fp8 (do not use any other intermediate dtype) and perform the param
    /// all-gather in fp8" (megatron/training/arguments.py). The FP8 GEMMs' weights are kept only
    /// as their FP8 copies, without the bf16 weight beside them; the optimizer writes each
    /// step's FP8 weights from its fp32 master shard, they are gathered in FP8 (by the
    /// distributed optimizer once a step under ZeRO 1–2, by Megatron-FSDP before every forward
    /// and backward under ZeRO 3), and the transposed copy is made from the gathered one. Under
    /// an FP8 recipe whose weights can be ([`Precision::keeps_fp8_params`]) with ZeRO 1 to 3.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_params: bool,
    /// FP8 dispatch (DeepSeek-V3, arXiv:2412.19437, §3.3.2: "we quantize the activation before
    /// MoE up-projections into FP8 and then apply dispatch components … A similar strategy is
    /// applied to the activation gradient before MoE down-projections. For both the forward
    /// and backward combine components, we retain them in BF16"; DeepEP's dispatch takes FP8
    /// tokens with one fp32 scale per 128 channels). The two expert-parallel all-to-alls that
    /// carry tokens toward the experts (the forward dispatch, the backward of combine) move
    /// each element as 1 byte plus 4/128 of a scale instead of the bf16 activation's 2; the two
    /// that carry them back stay bf16 ([`crate::parallel::moe::all_to_all_wire`]). Under an FP8
    /// recipe with expert parallelism (ep > 1) only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_dispatch: bool,
    /// Node-limited, two-tier expert dispatch (DeepSeek-V3, arXiv:2412.19437, §3.2.2: "we limit
    /// each token to be dispatched to at most 4 nodes, thereby reducing IB traffic. For each
    /// token, when its routing decision is made, it will first be transmitted via IB to the GPUs
    /// with the same in-node index on its target nodes. Once it reaches the target nodes, we
    /// will endeavor to ensure that it is instantaneously forwarded via NVLink to specific GPUs
    /// that host their target experts … In this way, communications via IB and NVLink are fully
    /// overlapped"; DeepEP's internode kernels, github.com/deepseek-ai/DeepEP). A token crosses
    /// the inter-node links once per other node holding any of its experts, not once per
    /// expert; the copies then fan out over the node's own links at the same time
    /// ([`crate::parallel::moe::NodeRoute`]). The collectives table and the relative cost count
    /// the bytes between nodes; the timeline times each call as the longer of its two tiers.
    /// Under expert parallelism (ep > 1) only; the same as the flat all-to-all where an
    /// expert-parallel group stays in one node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_dispatch: bool,
}

impl Knobs {
    /// Plain data parallelism over `dp` devices.
    pub fn data_parallel(dp: u64) -> Knobs {
        Knobs {
            dp,
            tp: 1,
            pp: 1,
            microbatches: 1,
            schedule: Schedule::OneFOneB,
            chunks: 1,
            sequence_parallel: false,
            recompute: Recompute::None,
            zero: 0,
            ep: 1,
            cp: 1,
            overlap: Overlap::default(),
            precision: Precision::Bf16,
            pipeline_split: PipelineSplit::default(),
            fp8_params: false,
            fp8_dispatch: false,
            node_dispatch: false,
        }
    }

    /// The bytes of its FP8 recipe ([`Precision::fp8_bytes`]) as this strategy runs it: with
    /// FP8 parameters the weight's per-step cast is the transposed copy made from the gathered
    /// FP8 weight (one FP8 copy read and one written, `weight_copy`), not a cast from bf16.
    pub fn fp8_bytes(&self) -> Option<Fp8Bytes> {
        self.precision.fp8_bytes().map(|b| {
            if self.fp8_params {
                Fp8Bytes {
                    weight_cast: b.weight_copy,
                    ..b
                }
            } else {
                b
            }
        })
    }

    /// Model chunks per device (1 unless interleaved, or 2 under ZB-V with more than one
    /// rank).
    pub fn virtual_chunks(&self) -> u64 {
        match self.schedule {
            Schedule::Interleaved => self.chunks,
            Schedule::ZeroBubbleV | Schedule::DualPipeV if self.pp > 1 => 2,
            _ => 1,
        }
    }

    /// Refuses interleaving whose chunks do not divide `layers` layers (with the embedding or
    /// loss counted as layers where the pipeline split says so) evenly over the stages.
    pub fn check_interleaved_layers(&self, layers: u64) -> Result<(), super::StrategyError> {
        let v = self.virtual_chunks();
        if v > 1 && !(layers + self.pipeline_split.extra()).is_multiple_of(self.pp * v) {
            return Err(self.interleaved_layers(layers));
        }
        Ok(())
    }

    /// The refusal of these knobs' interleaving for `layers` layers.
    pub fn interleaved_layers(&self, layers: u64) -> super::StrategyError {
        super::StrategyError::InterleavedLayers {
            schedule: self.schedule.name(),
            chunks: self.virtual_chunks(),
            layers,
            pp: self.pp,
            extra: self.pipeline_split.extra(),
        }
    }

    /// Devices used.
    pub fn devices(&self) -> u64 {
        self.dp * self.tp * self.pp * self.cp
    }

    /// Whether each pipeline rank runs two stages under DualPipe ([`Schedule::bidirectional`]
    /// with more than one stage): rank s runs stages s and pp − 1 − s.
    pub fn dualpipe(&self) -> bool {
        self.schedule.bidirectional() && self.pp > 1
    }

    /// Whether the pipeline runs F&B chunks and idles the DeepSeek-V3 report's bubble
    /// ([`Schedule::overlaps_chunks`] with more than one stage): DualPipe and DualPipeV.
    pub fn overlapped_chunks(&self) -> bool {
        self.schedule.overlaps_chunks() && self.pp > 1
    }

    /// Whether each pipeline rank runs two chunks placed as a "V" under ZB-V or DualPipeV
    /// ([`Schedule::v_shaped`] with more than one stage): rank s runs chunks s and 2·pp − 1 − s.
    pub fn v_placed(&self) -> bool {
        self.schedule.v_shaped() && self.pp > 1
    }

    /// Ranks holding the same weights: the data-parallel group times the context-parallel
    /// group, over which gradients are reduced and ZeRO shards.
    pub fn replicas(&self) -> u64 {
        self.dp * self.cp
    }

    /// Ranks holding the same experts: the dp·cp/ep ranks over which an expert's gradients are
    /// reduced, its state sharded and its weights gathered (Megatron-Core's
    /// expert-data-parallel group; `ep` divides dp·cp).
    pub fn expert_replicas(&self) -> u64 {
        self.replicas() / self.ep.max(1)
    }

    /// The ranks that share what ZeRO shards, as (dense weights', expert weights'): the
    /// [`Knobs::replicas`] and the [`Knobs::expert_replicas`] where `sharded`, else one each.
    pub fn shard_groups(&self, sharded: bool) -> (u64, u64) {
        if sharded {
            (self.replicas(), self.expert_replicas())
        } else {
            (1, 1)
        }
    }

    /// Whether each device keeps only its `1/replicas` shard of the gradients (ZeRO ≥ 2 over
    /// more than one replica), so that every micro-batch's gradients are reduce-scattered.
    pub fn shards_gradients(&self) -> bool {
        self.zero >= 2 && self.replicas() > 1
    }

    /// Micro-batch size as Megatron-LM's `--micro-batch-size` means it: samples per
    /// micro-batch on one data-parallel rank, global batch ÷ (dp × micro-batches); `None` when
    /// that is not a whole number.
    pub fn micro_batch_size(&self, global_batch: &crate::sym::Rational) -> Option<u64> {
        let d = crate::sym::Rational::from_integer((self.dp * self.microbatches).into());
        let s = global_batch / d;
        if s.is_integer() && s > num_traits::Zero::zero() {
            s.to_integer().try_into().ok()
        } else {
            None
        }
    }

    /// The micro-batch count for a micro-batch size: global batch ÷ (dp × size), or why not.
    pub fn microbatches_for_size(
        global_batch: &crate::sym::Rational,
        dp: u64,
        size: u64,
    ) -> Result<u64, super::StrategyError> {
        use super::StrategyError;
        if size == 0 {
            return Err(StrategyError::MicroBatchSizeZero);
        }
        let d = crate::sym::Rational::from_integer((dp * size).into());
        let m = global_batch / d;
        if !m.is_integer() || m < num_traits::One::one() {
            return Err(StrategyError::MicroBatchSize {
                size,
                batch: global_batch.clone(),
                dp,
            });
        }
        m.to_integer()
            .try_into()
            .map_err(|_| StrategyError::TooManyMicrobatches { size })
    }

    /// Whether these knobs run without a pipeline: one stage under 1F1B, the one schedule
    /// `rank` tries at pp = 1 and the one `--schedule none` (or `schedule=none`) gives back.
    /// Other schedules at pp = 1 are not this: GPipe there still holds every micro-batch's
    /// activations at once.
    pub fn without_pipeline(&self) -> bool {
        self.pp == 1 && self.schedule == Schedule::OneFOneB
    }

    /// The schedule's one name wherever a user reads it (strategy text, tables, JSON, timeline
    /// header, emitted configs): `none` without a pipeline ([`Knobs::without_pipeline`]), the
    /// schedule's name otherwise (`interleaved-1f1b`, without its chunks).
    pub fn schedule_name(&self) -> String {
        if self.without_pipeline() {
            "none".into()
        } else {
            self.schedule.to_string()
        }
    }

    /// The strategy as users write it, with the micro-batch size (`mbs=`) where the global
    /// batch is known and whole, the micro-batch count otherwise.
    pub fn describe(&self, global_batch: Option<&crate::sym::Rational>) -> String {
        let s = self.to_string();
        match global_batch.and_then(|b| self.micro_batch_size(b)) {
            Some(mbs) => s.replacen(
                &format!("microbatches={}", self.microbatches),
                &format!("mbs={mbs}"),
                1,
            ),
            None => s,
        }
    }
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dp={} tp={} pp={} microbatches={} {}{} sp={} recompute={} zero={}",
            self.dp,
            self.tp,
            self.pp,
            self.microbatches,
            self.schedule_name(),
            if self.schedule == Schedule::Interleaved {
                format!("(v={})", self.chunks)
            } else {
                String::new()
            },
            if self.sequence_parallel { "on" } else { "off" },
            self.recompute,
            self.zero
        )?;
        if self.ep > 1 {
            write!(f, " ep={}", self.ep)?;
        }
        if self.cp > 1 {
            write!(f, " cp={}", self.cp)?;
        }
        write!(f, "{}", self.overlap)?;
        if self.precision != Precision::Bf16 {
            write!(f, " precision={}", self.precision)?;
        }
        if !self.pipeline_split.is_plain() {
            write!(f, " account={}", self.pipeline_split)?;
        }
        if self.fp8_params {
            write!(f, " fp8-params")?;
        }
        if self.fp8_dispatch {
            write!(f, " fp8-dispatch")?;
        }
        if self.node_dispatch {
            write!(f, " node-dispatch")?;
        }
        Ok(())
    }
}

fn one() -> u64 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_stage_under_1f1b_is_named_none_and_other_schedules_keep_their_names() {
        let mut k = Knobs::data_parallel(8);
        assert!(k.without_pipeline());
        assert_eq!(k.schedule_name(), "none");
        assert_eq!(
            k.to_string(),
            "dp=8 tp=1 pp=1 microbatches=1 none sp=off recompute=none zero=0"
        );
        // GPipe at pp = 1 holds every micro-batch's activations: not `none`, which is 1F1B.
        k.schedule = Schedule::Gpipe;
        assert_eq!(k.schedule_name(), "gpipe");
        k.schedule = Schedule::OneFOneB;
        k.pp = 2;
        assert_eq!(k.schedule_name(), "1f1b");
        assert!(k.to_string().contains(" 1f1b "), "{k}");
    }
}
