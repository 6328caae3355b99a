//! Strategy flags shared by `cost`, `timeline` and `analyze`, and the machine flags (`--calib`,
//! `--with`, `--stack`) shared by every command that prices one machine.

use crate::api::{Machine, Strategy};
use crate::calib::Calibration;
use crate::error::Error;
use crate::strategy::{Recompute, Schedule};
use crate::sym::Rational;
use clap::Args;
use std::path::PathBuf;

/// The machine a command prices on, as flags: a calibration table, a what-if change of it and a
/// software stack's profile. One definition for `rank`, `report`, `compare`, `cost`, `timeline`
/// and `analyze`.
#[derive(Debug, Clone, Args, Default)]
pub struct MachineArgs {
    /// A calibration table (a file or a shipped name; `TABLE@KERNEL` times fused attention with
    /// one of its `attention_kernels`): its balance ratios and memory, and the simulated seconds
    /// per step; default: the embedded reference machine, by relative cost.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// A what-if machine: change named quantities of the `--calib` table
    /// (`nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`; a factor `xF` or a value with its
    /// unit). Names: device.peak.DTYPE, hbm.bandwidth, hbm.capacity, nvlink.bandwidth,
    /// network.bandwidth, nvlink.latency, network.latency, domain, device.tdp. The machine is
    /// named `TABLE+what-if(CHANGES)`, a name `--calib` takes again.
    #[arg(long = "with", value_name = "NAME=VALUE,…", requires = "calib")]
    pub with: Option<String>,
    /// A software stack's profile (a file or a shipped name, `stacks/`): the seconds its host work
    /// adds per step, per micro-batch pass and per kernel, which it turns on as --calib does;
    /// default: `none`, profile-free; `auto` times each strategy on the shipped profile of the
    /// stack it is assumed to run on (ZeRO 2–3 PyTorch FSDP, other model parallelism Megatron,
    /// plain data parallelism PyTorch DDP).
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
}

impl MachineArgs {
    /// Whether strategies are timed in seconds: a machine or a stack profile was named.
    pub fn seconds(&self) -> bool {
        self.calib.is_some() || self.stack.is_some()
    }

    /// The machine named by `--calib` (the reference without it), changed by `--with`, with the
    /// profile `--stack` names.
    pub fn calibration(&self) -> Result<Calibration, Error> {
        Calibration::resolve_with(self.calib.as_deref(), self.with.as_deref())?
            .with_stack(self.stack.as_deref())
    }

    /// [`MachineArgs::calibration`] as a typed machine, with `gpus_per_node` devices per node
    /// where given (checked where the machine is used).
    pub fn machine(&self, gpus_per_node: Option<u64>) -> Result<Machine, Error> {
        let m = Machine::from_calibration(self.calibration()?);
        Ok(match gpus_per_node {
            Some(g) => m.with_gpus_per_node_unchecked(g),
            None => m,
        })
    }

    /// [`MachineArgs::machine`] with the device memory of a `--memory` and the reserve of a
    /// `--headroom` where given.
    pub fn machine_with_memory(
        &self,
        gpus_per_node: Option<u64>,
        memory: Option<&str>,
        headroom: Option<&str>,
    ) -> Result<Machine, Error> {
        let mut m = self.machine(gpus_per_node)?;
        if let Some(text) = memory {
            let bytes = crate::search::steer::parse_memory(text)
                .map_err(|e| Error::Usage(format!("--memory: {e}")))?;
            m = m.with_memory(bytes);
        }
        if let Some(h) = headroom {
            m = m.with_headroom(crate::api::Headroom::parse(h)?);
        }
        Ok(m)
    }

    /// The flags as given, in order, to print a command line again.
    pub fn to_args(&self) -> Vec<String> {
        [
            ("--calib", &self.calib),
            ("--with", &self.with),
            ("--stack", &self.stack),
        ]
        .into_iter()
        .filter_map(|(flag, v)| v.as_ref().map(|v| format!("{flag} {v}")))
        .collect()
    }
}

/// A strategy as flags or a file.
#[derive(Debug, Clone, Args, Default)]
pub struct StrategyFlags {
    /// A strategy file (YAML) or a knob string (`dp=8,tp=8,mbs=1,sp`, a rank row as printed);
    /// flags given as well override its knobs.
    #[arg(long, value_name = "FILE")]
    pub strategy: Option<PathBuf>,
    /// Data-parallel degree.
    #[arg(long)]
    pub dp: Option<u64>,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u64>,
    /// Pipeline stages.
    #[arg(long)]
    pub pp: Option<u64>,
    /// Micro-batch size: samples per micro-batch and data-parallel rank (global batch ÷ (dp ×
    /// size) micro-batches per step), as Megatron-LM's flag of the same name.
    #[arg(long, value_name = "N")]
    pub micro_batch_size: Option<u64>,
    /// Micro-batches per step (the count; `--micro-batch-size` states the size instead).
    #[arg(long)]
    pub microbatches: Option<u64>,
    /// Pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe, dualpipev; none (what `rank` prints) when pp is 1.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Model chunks per device for interleaved-1f1b.
    #[arg(long)]
    pub chunks: Option<u64>,
    /// Megatron-LM sequence parallelism.
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Activation recomputation: none, selective, full.
    #[arg(long)]
    pub recompute: Option<String>,
    /// ZeRO stage 0–3.
    #[arg(long)]
    pub zero: Option<u8>,
    /// Expert-parallel degree (mixture-of-experts models): divides dp.
    #[arg(long)]
    pub ep: Option<u64>,
    /// Context-parallel degree (Megatron-LM `--context-parallel-size`): each sequence is cut
    /// over cp ranks (2·cp must divide S); attention passes keys and values around them as a
    /// ring; gradients reduce over dp × cp.
    #[arg(long)]
    pub cp: Option<u64>,
    /// Timelines: tensor-parallel collectives pipelined with their GEMMs (Megatron-LM
    /// `--tp-comm-overlap`).
    #[arg(long)]
    pub tp_comm_overlap: bool,
    /// Timelines: the distributed optimizer's parameter all-gather overlaps the next forward
    /// (Megatron-LM `--overlap-param-gather`).
    #[arg(long)]
    pub overlap_param_gather: bool,
    /// Timelines: reduce gradients once after the backward pass instead of bucket by bucket
    /// during it (Megatron-LM without `--overlap-grad-reduce`).
    #[arg(long)]
    pub no_overlap_grad_reduce: bool,
    /// Mixed precision: bf16 (bf16 weights, fp32 master copy and gradient buffer; Megatron-LM,
    /// DeepSpeed) or autocast (fp32 weights under torch.autocast: each forward casts every
    /// weight to bf16, each backward casts its gradient back and adds it to `.grad`, and
    /// data-parallel collectives move fp32) or fp8 (bf16 with the repeated layers' linear layers
    /// as FP8 GEMMs, Transformer Engine's delayed-scaling recipe; needs a table with an FP8
    /// peak).
    #[arg(long, value_name = "PRECISION")]
    pub precision: Option<crate::strategy::Precision>,
    /// Interleaved schedule: count the embedding as a layer of the first model chunk when
    /// splitting the layers over the chunks (Megatron-Core's flag of the same name).
    #[arg(long)]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Interleaved schedule: count the output layer and loss as a layer of the last model chunk
    /// (Megatron-Core's flag of the same name).
    #[arg(long)]
    pub account_for_loss_in_pipeline_split: bool,
    /// FP8 parameters (Megatron-LM's `--fp8-param-gather`, NeMo's `fp8_params`): the FP8 GEMMs'
    /// weights are kept only as FP8, without a bf16 copy beside them, the optimizer writes them
    /// from its fp32 master shard and they are gathered in FP8 (once a step under the
    /// distributed optimizer, zero 1 or 2; before every forward and backward under
    /// Megatron-FSDP, zero 3). Under fp8, fp8-current or fp8-block, with zero 1 to 3.
    #[arg(long)]
    pub fp8_params: bool,
    /// FP8 dispatch (DeepSeek-V3, arXiv:2412.19437, §3.3.2; DeepEP's FP8 dispatch): the
    /// expert-parallel all-to-alls toward the experts (the forward dispatch, the backward of
    /// combine) move FP8 with an fp32 scale per 128 elements, those back stay bf16. Under an
    /// FP8 recipe with ep > 1.
    #[arg(long)]
    pub fp8_dispatch: bool,
    /// Node-limited, two-tier expert dispatch (DeepSeek-V3, arXiv:2412.19437, §3.2.2; DeepEP's
    /// internode kernels): a token crosses the inter-node links once per other node holding any
    /// of its experts (at most the model's groups per token where its expert groups sit on
    /// whole nodes), then fans out over the node's own links at the same time. Under ep > 1.
    #[arg(long)]
    pub node_dispatch: bool,
    /// Devices per node (default: the calibration's, 8 for the reference machine).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// The machine: a calibration table, a what-if change of it, a stack profile.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's
    /// capacity.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Memory kept free on each device: a percentage of it (`10%`) or an amount (`8GB`); a
    /// strategy fits when its fullest device needs no more than the rest. Default: 10 % of the
    /// calibration's capacity, none of a `--memory` given (as `rank` judges it).
    #[arg(long, value_name = "PERCENT|SIZE")]
    pub headroom: Option<String>,
}

pub(crate) use crate::api::{machine_error, Resolved};

impl StrategyFlags {
    /// Whether any strategy was given.
    pub fn given(&self) -> bool {
        self.strategy.is_some()
            || self.dp.is_some()
            || self.tp.is_some()
            || self.pp.is_some()
            || self.microbatches.is_some()
            || self.micro_batch_size.is_some()
            || self.schedule.is_some()
            || self.chunks.is_some()
            || self.sequence_parallel
            || self.recompute.is_some()
            || self.zero.is_some()
            || self.ep.is_some()
            || self.cp.is_some()
            || self.tp_comm_overlap
            || self.overlap_param_gather
            || self.account_for_embedding_in_pipeline_split
            || self.account_for_loss_in_pipeline_split
            || self.no_overlap_grad_reduce
            || self.precision.is_some()
            || self.fp8_params
            || self.fp8_dispatch
            || self.node_dispatch
    }

    /// Without a strategy ([`StrategyFlags::given`]): checks the machine flags given all the
    /// same (`--calib`, `--stack`, `--memory`, `--headroom`), as [`StrategyFlags::machine`] reads
    /// them, so that a bad value is refused rather than ignored, and returns a note naming those
    /// that only a strategy reads.
    pub fn unused_machine_flags(&self) -> Result<Option<String>, Error> {
        self.machine()?;
        let unused: Vec<&str> = [
            ("--calib", self.machine.calib.is_some()),
            ("--stack", self.machine.stack.is_some()),
            ("--memory", self.memory.is_some()),
            ("--headroom", self.headroom.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        Ok((!unused.is_empty()).then(|| {
            format!(
                "note: {} price a strategy's devices, and no strategy is given (--dp, --tp, --pp, … or --strategy): the model's totals below do not read them",
                unused.join(", ")
            )
        }))
    }

    /// The machine named by `--calib`, or the reference.
    pub fn calibration(&self) -> Result<Calibration, Error> {
        self.machine.calibration()
    }

    /// Resolves file and flags into one strategy for `model`: per-operator overrides must name
    /// its operators and their indices (errors point into the strategy file).
    pub fn resolve_for(
        &self,
        model: &crate::model::Model,
        values: &crate::sym::Bindings,
    ) -> Result<Resolved, Error> {
        self.strategy()?
            .resolve_for(&self.machine()?, model, values)
    }

    /// Resolves file and flags into one strategy (`batch`, the global batch, turns a
    /// micro-batch size into a count).
    pub fn resolve(&self, batch: &Rational) -> Result<Resolved, Error> {
        let (r, notes) = self.resolve_quietly(batch)?;
        for n in notes {
            eprintln!("warning: {n}");
        }
        Ok(r)
    }

    /// [`StrategyFlags::resolve`] returning its warnings instead of printing them (for commands
    /// that resolve one strategy at many symbol values).
    pub fn resolve_quietly(&self, batch: &Rational) -> Result<(Resolved, Vec<String>), Error> {
        self.strategy()?.resolve_quietly(&self.machine()?, batch)
    }

    /// The machine the flags name: `--calib` (with `--with` and `--stack`), `--gpus-per-node`
    /// and `--memory`.
    pub fn machine(&self) -> Result<Machine, Error> {
        self.machine.machine_with_memory(
            self.gpus_per_node,
            self.memory.as_deref(),
            self.headroom.as_deref(),
        )
    }

    /// The strategy the flags ask for: `--strategy` (a file, or a knob string that the flags
    /// given beside it override) and the knobs.
    pub fn strategy(&self) -> Result<Strategy, Error> {
        let schedule = match self.schedule.as_deref() {
            None | Some("none") => None,
            Some(s) => Some(Schedule::from_name(s).ok_or_else(|| {
                Error::Usage(format!(
                    "unknown schedule `{s}` (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe, dualpipev; none when pp is 1)"
                ))
            })?),
        };
        let recompute = match &self.recompute {
            None => None,
            Some(s) => Some(Recompute::from_name(s).ok_or_else(|| {
                Error::Usage(format!(
                    "unknown recomputation `{s}` (none, selective, full)"
                ))
            })?),
        };
        let knobs = Strategy {
            file: None,
            dp: self.dp,
            tp: self.tp,
            pp: self.pp,
            micro_batch_size: self.micro_batch_size,
            microbatches: self.microbatches,
            schedule,
            no_pipeline: self.schedule.as_deref() == Some("none"),
            chunks: self.chunks,
            sequence_parallel: self.sequence_parallel,
            recompute,
            zero: self.zero,
            ep: self.ep,
            cp: self.cp,
            tp_comm_overlap: self.tp_comm_overlap,
            overlap_param_gather: self.overlap_param_gather,
            no_overlap_grad_reduce: self.no_overlap_grad_reduce,
            precision: self.precision,
            account_for_embedding_in_pipeline_split: self.account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split: self.account_for_loss_in_pipeline_split,
            fp8_params: self.fp8_params,
            fp8_dispatch: self.fp8_dispatch,
            node_dispatch: self.node_dispatch,
        };
        // `--strategy` takes a knob string too (a rank row pasted as it is), as `compare` does;
        // the flags given beside it win.
        if let Some(text) = self.knob_text() {
            return Ok(Strategy::from_knobs(text, "--strategy")?.overlaid_by(&knobs));
        }
        Ok(Strategy {
            file: self.strategy.clone(),
            ..knobs
        })
    }

    /// The flags of a typed strategy (no machine flags).
    pub fn from_strategy(s: Strategy) -> StrategyFlags {
        StrategyFlags {
            strategy: s.file,
            dp: s.dp,
            tp: s.tp,
            pp: s.pp,
            micro_batch_size: s.micro_batch_size,
            microbatches: s.microbatches,
            schedule: s
                .schedule
                .map(|x| x.to_string())
                .or(s.no_pipeline.then(|| "none".to_string())),
            chunks: s.chunks,
            sequence_parallel: s.sequence_parallel,
            recompute: s.recompute.map(|r| r.to_string()),
            zero: s.zero,
            ep: s.ep,
            cp: s.cp,
            tp_comm_overlap: s.tp_comm_overlap,
            overlap_param_gather: s.overlap_param_gather,
            no_overlap_grad_reduce: s.no_overlap_grad_reduce,
            precision: s.precision,
            account_for_embedding_in_pipeline_split: s.account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split: s.account_for_loss_in_pipeline_split,
            fp8_params: s.fp8_params,
            fp8_dispatch: s.fp8_dispatch,
            node_dispatch: s.node_dispatch,
            ..StrategyFlags::default()
        }
    }

    /// `--strategy`'s text when it is a knob string rather than a file.
    fn knob_text(&self) -> Option<&str> {
        let p = self.strategy.as_deref()?;
        let text = p.to_str()?;
        let file = p.exists() || text.ends_with(".yaml") || text.ends_with(".yml");
        (text.contains('=') && !file).then_some(text)
    }

    /// A strategy named on the command line of `compare` and `crossover`: a strategy file (a path
    /// that exists, or one ending in `.yaml`/`.yml`), or a knob string (see [`knob_string`]).
    /// `what` names the argument in errors.
    pub fn from_argument(text: &str, what: &str) -> Result<StrategyFlags, Error> {
        let path = std::path::Path::new(text);
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml || (path.is_file() && !text.contains('=')) {
            return Ok(StrategyFlags {
                strategy: Some(path.to_path_buf()),
                ..StrategyFlags::default()
            });
        }
        knob_string(text, what)
    }
}

/// Parses a knob string into strategy flags ([`Strategy::from_knobs`]).
pub fn knob_string(text: &str, what: &str) -> Result<StrategyFlags, Error> {
    Ok(StrategyFlags::from_strategy(Strategy::from_knobs(
        text, what,
    )?))
}
