//! A machine's achievable rates, and seconds from exact amounts: a roofline per kernel (FLOPs
//! at the efficiency of its class and size, bytes at the streaming efficiency of its size, plus
//! a fixed overhead) and α–β per
//! collective (Thakur, Rabenseifner and Gropp 2005: ring all-reduce `2(n−1)·α + 2(n−1)/n·S/β`,
//! ring all-gather and reduce-scatter `(n−1)·α + (n−1)/n·S/β`), where β is the collective
//! kind's own bus bandwidth at that message size when the table gives one (nccl-tests
//! doc/PERFORMANCE.md). An axis whose groups span nodes is timed hierarchically: the intra-node
//! part among the group's devices in one node, then the inter-node part among nodes. This is
//! the only place where amounts become floating-point seconds.

use crate::calib::topology::{Placement, Torus};
use crate::calib::{Calibration, FloatCurve, COLLECTIVE_KINDS};
use crate::rules::CollectiveKind;
use crate::strategy::{MeshAxis, Tier};
use serde::{Deserialize, Serialize};

/// A collective's kind, as the plan stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Ring all-reduce.
    AllReduce,
    /// Ring reduce-scatter.
    ReduceScatter,
    /// Ring all-gather.
    AllGather,
    /// All-to-all.
    AllToAll,
    /// Exchange with neighbours, broadcast or point-to-point: one step.
    OneStep,
}

impl Collective {
    /// The plan's kind of a collective.
    pub fn of(k: CollectiveKind) -> Collective {
        match k {
            CollectiveKind::AllReduce => Collective::AllReduce,
            CollectiveKind::ReduceScatter => Collective::ReduceScatter,
            CollectiveKind::AllGather => Collective::AllGather,
            CollectiveKind::AllToAll => Collective::AllToAll,
            _ => Collective::OneStep,
        }
    }

    /// Its name in output.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllGather => "all-gather",
            Collective::AllToAll => "all-to-all",
            Collective::OneStep => "exchange",
        }
    }
}

/// One link tier's achievable rates.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRate {
    /// Bytes per second (datasheet × efficiency).
    pub bandwidth: f64,
    /// Seconds per step (α).
    pub latency: f64,
    /// How the tier runs its collectives (the table's `algorithm`).
    pub algorithm: LinkAlgorithm,
    /// Bus bandwidth by message size per collective kind, where the table gives one; such a
    /// kind's time is `size × bus factor ÷ busbw(size)`.
    pub busbw: PerCollective<Option<FloatCurve>>,
}

/// How a tier runs its collectives: the table's `algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAlgorithm {
    /// A ring: `n − 1` latency steps per pass.
    Ring,
    /// A tree: `⌈log₂ n⌉` latency steps per pass, the ring's bandwidth.
    Tree,
    /// NCCL's choice per call: an all-reduce across nodes runs whichever of the ring and NCCL's
    /// tree its model times faster ([`nccl_tree_all_reduce`]), every other collective the ring.
    Nccl,
}

impl LinkAlgorithm {
    /// The algorithm a table's `algorithm` names (`ring` for any other name: the loader refuses
    /// those).
    pub fn of(name: &str) -> LinkAlgorithm {
        match name {
            "tree" => LinkAlgorithm::Tree,
            "nccl" => LinkAlgorithm::Nccl,
            _ => LinkAlgorithm::Ring,
        }
    }
}

impl LinkRate {
    /// Whether its collectives take a tree's latency steps.
    pub fn tree(&self) -> bool {
        self.algorithm == LinkAlgorithm::Tree
    }

    /// Bus bandwidth of `kind` for a `size`-byte logical tensor: its curve at that size, or the
    /// tier's achievable bandwidth where the table has no curve for the kind.
    pub fn bus_bandwidth(&self, kind: Collective, size: f64) -> f64 {
        self.busbw[kind]
            .as_ref()
            .map_or(self.bandwidth, |c| c.at(size))
    }
}

/// One value per collective kind, named by kind. Indexed by [`Collective`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerCollective<T> {
    /// All-reduce.
    pub all_reduce: T,
    /// All-gather.
    pub all_gather: T,
    /// Reduce-scatter.
    pub reduce_scatter: T,
    /// All-to-all.
    pub all_to_all: T,
    /// One step: exchange with neighbours, broadcast or point-to-point (a table's `send-recv`).
    pub one_step: T,
}

impl<T> PerCollective<T> {
    /// `f` of each kind's name in a calibration table ([`COLLECTIVE_KINDS`]).
    pub fn from_names(f: impl FnMut(&str) -> T) -> PerCollective<T> {
        let [all_reduce, all_gather, reduce_scatter, all_to_all, one_step] =
            COLLECTIVE_KINDS.map(f);
        PerCollective {
            all_reduce,
            all_gather,
            reduce_scatter,
            all_to_all,
            one_step,
        }
    }
}

impl<T> std::ops::IndexMut<Collective> for PerCollective<T> {
    fn index_mut(&mut self, kind: Collective) -> &mut T {
        match kind {
            Collective::AllReduce => &mut self.all_reduce,
            Collective::AllGather => &mut self.all_gather,
            Collective::ReduceScatter => &mut self.reduce_scatter,
            Collective::AllToAll => &mut self.all_to_all,
            Collective::OneStep => &mut self.one_step,
        }
    }
}

impl<T> std::ops::Index<Collective> for PerCollective<T> {
    type Output = T;

    fn index(&self, kind: Collective) -> &T {
        match kind {
            Collective::AllReduce => &self.all_reduce,
            Collective::AllGather => &self.all_gather,
            Collective::ReduceScatter => &self.reduce_scatter,
            Collective::AllToAll => &self.all_to_all,
            Collective::OneStep => &self.one_step,
        }
    }
}

/// The class of kernel an operator runs as, which decides its efficiency curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelClass {
    /// A GEMM or batched GEMM on the tensor cores.
    Matmul,
    /// A GEMM on the tensor cores with FP8 operands ([`crate::strategy::Precision::Fp8`]): at
    /// the table's FP8 peak times its measured FP8 curve (`efficiency.matmul_fp8`) where it has
    /// one, else times the same matmul efficiency curve (and tiling) as a bf16 GEMM of the same
    /// FLOPs.
    Fp8Matmul,
    /// A GEMM with FP4 operands ([`crate::strategy::Precision::Nvfp4`]): at the table's FP4
    /// peak times the bf16 matmul curve (and tiling); no FP4 efficiency is measured yet.
    Fp4Matmul,
    /// A fused attention kernel (FlashAttention-style).
    Attention,
    /// Elementwise, normalisation, reduction: vector units, usually memory-bound.
    Other,
}

impl KernelClass {
    /// The class of an operator that is a fused attention kernel or not, matmul-like or not.
    pub fn of(fused_attention: bool, matmul: bool) -> KernelClass {
        if fused_attention {
            KernelClass::Attention
        } else if matmul {
            KernelClass::Matmul
        } else {
            KernelClass::Other
        }
    }

    /// Kernels one pass launches: a matmul's backward is two GEMMs (the input gradient and the
    /// weight or second-operand gradient); everything else is one kernel a pass.
    pub fn kernels(self, backward: bool) -> u32 {
        if backward
            && matches!(
                self,
                KernelClass::Matmul | KernelClass::Fp8Matmul | KernelClass::Fp4Matmul
            )
        {
            2
        } else {
            1
        }
    }
}

/// A machine's achievable rates, as floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Achievable FLOP/s of large matmul-like kernels (bf16 peak × the matmul curve's plateau).
    pub matmul_flops: f64,
    /// Achievable FLOP/s of other work (the fp32 peak of the vector units × the same plateau).
    pub other_flops: f64,
    /// Achievable HBM bytes per second of large streaming kernels.
    pub memory_bandwidth: f64,
    /// Peak bf16 FLOP/s (for MFU).
    pub peak_flops: f64,
    /// Peak FP8 FLOP/s, where the table gives one (`peak_flops.fp8`).
    pub fp8_peak_flops: Option<f64>,
    /// Peak FP4 FLOP/s, where the table gives one (`peak_flops.fp4`).
    pub fp4_peak_flops: Option<f64>,
    /// Peak HBM bytes per second.
    pub peak_memory_bandwidth: f64,
    /// Matmul efficiency against one kernel's FLOPs.
    pub matmul_efficiency: FloatCurve,
    /// Fused attention efficiency against one kernel's FLOPs.
    pub attention_efficiency: FloatCurve,
    /// FP8 GEMM efficiency (of the FP8 peak) against one GEMM's FLOPs, where it was measured;
    /// such a curve already holds the GEMMs' wave and tile losses, so no tiling applies to it.
    pub fp8_matmul_efficiency: Option<FloatCurve>,
    /// Streaming efficiency against one kernel's bytes.
    pub memory_efficiency: FloatCurve,
    /// Streaming multiprocessors and output tiles, where the table models wave and tile
    /// quantization of GEMMs.
    pub tiling: Option<Tiling>,
    /// Fixed seconds per kernel (the table's, plus the stack profile's).
    pub kernel_overhead: f64,
    /// Seconds the stack profile adds once per step ([`crate::calib::stack::Param`]).
    pub step_overhead: f64,
    /// Seconds the stack profile adds before each pass of a micro-batch on a stage.
    pub microbatch_overhead: f64,
    /// Share of compute throughput an overlapping collective takes.
    pub contention: f64,
    /// The table's spread of device rates (`pace_spread`: the standard deviation of one
    /// device's compute rate over the median device's); zero without one.
    pub pace_spread: f64,
    /// What compute seconds are multiplied by: 1 for the median device the table describes,
    /// [`slowest_pace`] of the job's devices once [`Rates::paced`].
    pub pace: f64,
    /// Inside a node.
    pub intra: LinkRate,
    /// Across nodes.
    pub inter: LinkRate,
    /// How the links are laid out, where the table says ([`crate::calib::topology`]).
    pub layout: LinkLayout,
}

/// A table's topology as the timeline times it: the torus or fully connected node that the
/// intra-node rings run on, and the scale-out oversubscription; empty for two flat tiers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkLayout {
    /// The node's torus and its link's bytes per second, one direction.
    pub torus: Option<(Torus, f64)>,
    /// The node's peers and their link's bytes per second, one direction.
    pub fully_connected: Option<(u64, f64)>,
    /// Devices at the full inter-node rate, and the ratio above them.
    pub oversubscription: Option<(u64, f64)>,
    /// The intra-node tier's achievable fraction of its links.
    pub intra_efficiency: f64,
}

impl LinkLayout {
    /// The layout of a table.
    pub fn of(c: &Calibration) -> LinkLayout {
        let t = c.topology.as_ref();
        let whole = |r: &crate::sym::Rational| r.to_integer().try_into().unwrap_or(u64::MAX);
        LinkLayout {
            torus: t
                .and_then(|t| t.torus.as_ref())
                .map(|t| (t.clone(), f(&t.link_bandwidth.value))),
            fully_connected: t
                .and_then(|t| t.fully_connected.as_ref())
                .map(|x| (whole(&x.peers.value), f(&x.link_bandwidth.value))),
            oversubscription: t
                .and_then(|t| t.oversubscription.as_ref())
                .map(|o| (whole(&o.group.value), f(&o.ratio.value))),
            intra_efficiency: f(&c.tiers.intra.efficiency.value),
        }
    }

    /// Bus bandwidth and latency steps of a ring collective of `kind` over a group of `n`
    /// devices `stride` apart inside one node, where the layout decides them: along the torus
    /// axes the group spans, or over the `n − 1` links among `n` fully connected peers (the
    /// tier's bus bandwidth curve, where given, scaled by `(n − 1) / (peers − 1)`). `at`: the
    /// logical size whose curve value is read; `None` reads the curve's best.
    fn intra_ring(
        &self,
        kind: Collective,
        n: u64,
        stride: u64,
        at: Option<f64>,
        l: &LinkRate,
    ) -> Option<(f64, f64)> {
        let per = if kind == Collective::AllReduce {
            2.0
        } else {
            1.0
        };
        if let Some((torus, link)) = &self.torus {
            let placement = torus.place(n, stride);
            let links: f64 = match &placement {
                Placement::Unaligned => 1.0,
                Placement::Axes(pieces) => pieces
                    .iter()
                    .map(|p| if p.wraps { 2.0 } else { 1.0 } / p.step.max(1) as f64)
                    .sum(),
            };
            let steps = Torus::ring_steps(&placement, n) as f64 * per;
            return Some((link * links * self.intra_efficiency, steps));
        }
        let (peers, link) = self.fully_connected?;
        let bw = match (&l.busbw[kind], at) {
            (Some(c), Some(size)) => c.at(size) * fc_share(n, peers),
            (Some(c), None) => c.max() * fc_share(n, peers),
            (None, _) => link * n.saturating_sub(1).max(1) as f64 * self.intra_efficiency,
        };
        Some((bw, steps(kind, n, l.tree())))
    }

    /// Achievable bytes per second of one link of the torus or fully connected node.
    fn one_link(&self) -> Option<f64> {
        let link = match (&self.torus, &self.fully_connected) {
            (Some((_, link)), _) | (None, Some((_, link))) => *link,
            (None, None) => return None,
        };
        Some(link * self.intra_efficiency)
    }

    /// The factor the inter-node bandwidth of a group spanning `span` device numbers runs at:
    /// `1 / ratio` beyond the oversubscription's group, else 1.
    fn inter_scale(&self, span: u64) -> f64 {
        match self.oversubscription {
            Some((group, ratio)) if span > group => 1.0 / ratio,
            _ => 1.0,
        }
    }
}

/// The share of a fully connected node's bus bandwidth a group of `k` of its `peers` reaches:
/// the `k − 1` links among them of the `peers − 1` each device has.
fn fc_share(k: u64, peers: u64) -> f64 {
    if peers <= 1 || k >= peers {
        1.0
    } else {
        k.saturating_sub(1).max(1) as f64 / (peers - 1) as f64
    }
}

/// A device's GEMM tiling, as floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Tiling {
    /// Streaming multiprocessors.
    pub sms: f64,
    /// Output tile shapes (rows, columns).
    pub tiles: Vec<(f64, f64)>,
}

impl Tiling {
    /// The share of the SM-tile slots of a GEMM's waves that hold useful output, under the best
    /// of the tiles: `batch · rows · cols ÷ (waves · SMs · tile area)` with
    /// `waves = ⌈batch · ⌈rows ÷ tile rows⌉ · ⌈cols ÷ tile columns⌉ ÷ SMs⌉`. A GEMM of fewer
    /// tiles than SMs is split along its summed index (at most `inner` ways) to fill one wave.
    /// 1 for a GEMM with an empty side.
    pub fn utilisation(&self, [batch, rows, cols, inner]: [f64; 4]) -> f64 {
        if batch <= 0.0 || rows <= 0.0 || cols <= 0.0 {
            return 1.0;
        }
        let mut best: f64 = 0.0;
        for &(tr, tc) in &self.tiles {
            let tiles = batch * (rows / tr).ceil() * (cols / tc).ceil();
            let split = if tiles < self.sms {
                (self.sms / tiles).floor().min(inner.max(1.0)).max(1.0)
            } else {
                1.0
            };
            let waves = (tiles * split / self.sms).ceil();
            let useful = batch * rows * cols * split;
            best = best.max(useful / (waves * self.sms * tr * tc));
        }
        best.min(1.0)
    }
}

use crate::calib::stack::Param;
use crate::sym::float as f;

impl Rates {
    /// The rates of a calibration table, with the stack profile it gives every strategy
    /// (`--stack NAME`; none under per-row profiles: [`Rates::for_knobs`]).
    pub fn of(c: &Calibration) -> Rates {
        Rates::with_profile(c, c.stack.as_ref())
    }

    /// The rates a strategy of knobs `k` is timed at: the table's with the stack profile it is
    /// timed with ([`Calibration::profile_for`]: under `--stack auto`, its own stack's).
    pub fn for_knobs(c: &Calibration, k: &crate::strategy::Knobs) -> Rates {
        Rates::with_profile(c, c.profile_for(k))
    }

    /// The rates of a calibration table with `profile`'s seconds added (none: profile-free).
    pub fn with_profile(
        c: &Calibration,
        profile: Option<&crate::calib::stack::StackProfile>,
    ) -> Rates {
        let d = &c.device;
        let stack = |p: Param| profile.map_or(0.0, |s| s.get(p));
        let matmul = d.efficiency.matmul.to_f64();
        let eff = matmul.max();
        let peak = f(&d.peak_flops["bf16"].value);
        let vector = d
            .peak_flops
            .get("fp32")
            .map(|s| f(&s.value))
            .unwrap_or(peak);
        let link = |t: Tier| {
            let l = c.link(t);
            let busbw = PerCollective::from_names(|name| l.busbw.get(name).map(|c| c.to_f64()));
            LinkRate {
                bandwidth: f(&c.achievable_bandwidth(t)),
                latency: f(&l.latency.value),
                algorithm: LinkAlgorithm::of(&l.algorithm),
                busbw,
            }
        };
        let memory = d.efficiency.memory_bound.to_f64();
        let hbm = f(&d.memory_bandwidth.value);
        Rates {
            matmul_flops: peak * eff,
            other_flops: vector * eff,
            memory_bandwidth: hbm * memory.max(),
            peak_flops: peak,
            fp8_peak_flops: d.peak_flops.get("fp8").map(|s| f(&s.value)),
            fp4_peak_flops: d.peak_flops.get("fp4").map(|s| f(&s.value)),
            peak_memory_bandwidth: hbm,
            attention_efficiency: d
                .efficiency
                .attention
                .as_ref()
                .map(|a| a.to_f64())
                .unwrap_or_else(|| matmul.clone()),
            matmul_efficiency: matmul,
            fp8_matmul_efficiency: d.efficiency.matmul_fp8.as_ref().map(|c| c.to_f64()),
            memory_efficiency: memory,
            kernel_overhead: d.kernel_overhead.as_ref().map_or(0.0, |o| f(&o.value))
                + stack(Param::KernelOverhead),
            step_overhead: stack(Param::StepOverhead),
            microbatch_overhead: stack(Param::MicrobatchOverhead),
            tiling: d.gemm_tiling.as_ref().map(|t| Tiling {
                sms: f(&t.multiprocessors.value),
                tiles: t
                    .tiles
                    .iter()
                    .map(|[r, c]| (*r as f64, *c as f64))
                    .collect(),
            }),
            contention: d.comm_contention.as_ref().map_or(0.0, |o| f(&o.value)),
            pace_spread: d.pace_spread.as_ref().map_or(0.0, |o| f(&o.value)),
            pace: 1.0,
            intra: link(Tier::Intra),
            inter: link(Tier::Inter),
            layout: LinkLayout::of(c),
        }
    }

    /// The rates of a synchronous step over `devices` devices: compute runs at the pace of the
    /// slowest of them ([`slowest_pace`] of the table's `pace_spread`). Unchanged without a
    /// spread or on one device.
    pub fn paced(&self, devices: u64) -> std::borrow::Cow<'_, Rates> {
        let pace = slowest_pace(self.pace_spread, devices);
        if pace == self.pace {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Rates {
            pace,
            ..self.clone()
        })
    }

    /// The rates of a tier.
    pub fn link(&self, t: Tier) -> &LinkRate {
        match t {
            Tier::Intra => &self.intra,
            Tier::Inter => &self.inter,
        }
    }

    /// Roofline time of an operator run as `kernels` equal kernels: each takes the larger of
    /// its FLOPs at the achievable FLOP/s of its class and size and its bytes at the achievable
    /// bandwidth of its size, plus the fixed per-kernel overhead. An operator with neither FLOPs
    /// nor bytes (a view) runs no kernel.
    pub fn op_seconds(&self, flops: f64, bytes: f64, class: KernelClass, kernels: u32) -> f64 {
        self.gemm_seconds(flops, bytes, class, kernels, &[])
    }

    /// Seconds of streaming `bytes` through HBM as part of a kernel already launched (no
    /// overhead of its own): at the table's streaming efficiency for that many bytes.
    pub fn memory_seconds(&self, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        bytes / (self.peak_memory_bandwidth * self.memory_efficiency.at(bytes))
    }

    /// [`Rates::op_seconds`] for kernels whose GEMM sizes are known (`[batch, rows, cols,
    /// inner]`, one per kernel): with a tiling in the table, each matmul kernel's efficiency is
    /// the curve's times its [`Tiling::utilisation`]. Without sizes (or tiling) it is the same.
    pub fn gemm_seconds(
        &self,
        flops: f64,
        bytes: f64,
        class: KernelClass,
        kernels: u32,
        gemms: &[[f64; 4]],
    ) -> f64 {
        if flops <= 0.0 && bytes <= 0.0 {
            return 0.0;
        }
        let k = kernels.max(1) as f64;
        let (fk, bk) = (flops / k, bytes / k);
        let bw = self.peak_memory_bandwidth * self.memory_efficiency.at(bk);
        let memory = bk / bw;
        let one = |utilisation: f64| {
            let rate = match class {
                KernelClass::Matmul => {
                    self.peak_flops * self.matmul_efficiency.at(fk) * utilisation
                }
                // A plan is refused FP8 on a table without an FP8 peak before it is timed
                // ([`crate::parallel::check_precision`]); a saved plan timed on one runs at bf16.
                KernelClass::Fp8Matmul => {
                    let curve = self
                        .fp8_matmul_efficiency
                        .as_ref()
                        .unwrap_or(&self.matmul_efficiency);
                    self.fp8_peak_flops.unwrap_or(self.peak_flops) * curve.at(fk) * utilisation
                }
                KernelClass::Fp4Matmul => {
                    self.fp4_peak_flops.unwrap_or(self.peak_flops)
                        * self.matmul_efficiency.at(fk)
                        * utilisation
                }
                KernelClass::Attention => self.peak_flops * self.attention_efficiency.at(fk),
                KernelClass::Other => self.other_flops,
            };
            (fk / rate * self.pace).max(memory) + self.kernel_overhead
        };
        let tiled = match class {
            KernelClass::Matmul | KernelClass::Fp4Matmul => true,
            KernelClass::Fp8Matmul => self.fp8_matmul_efficiency.is_none(),
            _ => false,
        };
        match &self.tiling {
            Some(t) if tiled && gemms.len() == kernels.max(1) as usize => {
                gemms.iter().map(|g| one(t.utilisation(*g))).sum()
            }
            _ => k * one(1.0),
        }
    }

    /// Seconds of one call of a collective moving `wire` bytes per rank over `axis`.
    pub fn collective_seconds(&self, kind: Collective, wire: f64, axis: &MeshAxis) -> f64 {
        let n = axis.size;
        if n <= 1 || wire <= 0.0 {
            return 0.0;
        }
        let k = axis.per_node.clamp(1, n);
        let full = wire / bus_factor(kind, n);
        if kind == Collective::OneStep || kind == Collective::AllToAll {
            // Every rank talks to others over the slowest tier the group crosses.
            let l = self.link(axis.tier);
            let scale = self.span_scale(axis);
            let steps = if kind == Collective::OneStep {
                1.0
            } else {
                (n - 1) as f64
            };
            return steps * l.latency + wire / (l.bus_bandwidth(kind, full) * scale);
        }
        if k >= n || axis.tier == Tier::Intra {
            return self.intra_ring(kind, n, axis.stride, full);
        }
        let inter = self.scaled_inter(axis);
        // Hierarchical: reduce-scatter inside the node, the collective of each device's 1/k
        // share across the n/k nodes, all-gather inside the node (for all-reduce); the
        // intra-node half alone for reduce-scatter and all-gather. One device per node: the
        // collective across the nodes alone.
        let g = n / k;
        let share = full / k as f64;
        let across = match kind {
            Collective::AllReduce if inter.algorithm == LinkAlgorithm::Nccl => {
                ring(kind, g, share, &inter).min(nccl_tree_all_reduce(g, share, full, &inter))
            }
            _ => ring(kind, g, share, &inter),
        };
        if k == 1 {
            return across;
        }
        let intra_half = self.intra_ring(Collective::ReduceScatter, k, axis.stride, full);
        match kind {
            Collective::AllReduce => 2.0 * intra_half + across,
            _ => intra_half + across,
        }
    }

    /// A ring collective of a `full`-byte tensor over `n` devices `stride` apart inside one
    /// node: on the table's torus or fully connected links where it has them, else flat on the
    /// intra-node tier.
    fn intra_ring(&self, kind: Collective, n: u64, stride: u64, full: f64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        match self
            .layout
            .intra_ring(kind, n, stride, Some(full), &self.intra)
        {
            Some((bw, steps)) => steps * self.intra.latency + bus_factor(kind, n) * full / bw,
            None => ring(kind, n, full, &self.intra),
        }
    }

    /// The factor the inter-node bandwidth of `axis`'s groups runs at (oversubscription).
    fn span_scale(&self, axis: &MeshAxis) -> f64 {
        if axis.tier == Tier::Intra {
            return 1.0;
        }
        self.layout
            .inter_scale(axis.stride.saturating_mul(axis.size))
    }

    /// The inter-node rates `axis`'s groups get: the tier's, oversubscribed where they span
    /// more devices than the table's group.
    fn scaled_inter(&self, axis: &MeshAxis) -> std::borrow::Cow<'_, LinkRate> {
        let scale = self.span_scale(axis);
        if scale == 1.0 {
            return std::borrow::Cow::Borrowed(&self.inter);
        }
        let mut l = self.inter.clone();
        l.bandwidth *= scale;
        for kind in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::ReduceScatter,
        ] {
            if let Some(c) = l.busbw[kind].as_mut() {
                *c = c.scaled(scale);
            }
        }
        std::borrow::Cow::Owned(l)
    }

    /// The least time `wire` bytes per rank of `kind` over `axis` can take however they are split
    /// into calls: no latency, every bandwidth at its best (a lower bound of the sum of
    /// [`Rates::collective_seconds`] over any split).
    pub fn collective_floor(&self, kind: Collective, wire: f64, axis: &MeshAxis) -> f64 {
        let n = axis.size;
        if n <= 1 || wire <= 0.0 {
            return 0.0;
        }
        let best = |l: &LinkRate, kind: Collective| -> f64 {
            l.busbw[kind].as_ref().map_or(l.bandwidth, |c| c.max())
        };
        let intra_best = |kind: Collective, n: u64| -> f64 {
            self.layout
                .intra_ring(kind, n, axis.stride, None, &self.intra)
                .map_or_else(|| best(&self.intra, kind), |(bw, _)| bw)
        };
        let k = axis.per_node.clamp(1, n);
        let full = wire / bus_factor(kind, n);
        let scale = self.span_scale(axis);
        if kind == Collective::OneStep || kind == Collective::AllToAll {
            return wire / (best(self.link(axis.tier), kind) * scale);
        }
        if k >= n || axis.tier == Tier::Intra {
            return wire / intra_best(kind, n);
        }
        if k == 1 {
            return wire / (best(&self.inter, kind) * scale);
        }
        let g = n / k;
        let rs = Collective::ReduceScatter;
        let intra_half = bus_factor(rs, k) * full / intra_best(rs, k);
        let inter = bus_factor(kind, g) * (full / k as f64) / (best(&self.inter, kind) * scale);
        match kind {
            Collective::AllReduce => 2.0 * intra_half + inter,
            _ => intra_half + inter,
        }
    }

    /// Seconds of a point-to-point transfer of `bytes` over tier `t`.
    pub fn p2p_seconds(&self, bytes: f64, t: Tier) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        let l = self.link(t);
        match &l.busbw[Collective::OneStep] {
            Some(c) => l.latency + bytes / c.at(bytes),
            // On a torus or fully connected node, one link to the neighbour.
            None if t == Tier::Intra && self.layout.one_link().is_some() => {
                l.latency + bytes / self.layout.one_link().unwrap_or(l.bandwidth)
            }
            None => l.latency + bytes / l.bandwidth,
        }
    }
}

/// How much longer the slowest of `devices` devices takes over the same compute than the median
/// device, when device rates spread normally with standard deviation `spread` (a fraction of
/// the median rate): `1 / (1 − spread · E[max of n standard normals])`. A synchronous step
/// (each data-parallel reduction, each tensor-parallel collective, each pipeline send) waits for
/// its slowest participant, and a device's rate is its own for the whole run (Sinha et al.,
/// "Not All GPUs Are Created Equal", SC'22, arXiv:2208.11035: the variation is per GPU, from
/// manufacturing and power management), so the step runs at that device's pace. 1 for one
/// device or no spread.
pub fn slowest_pace(spread: f64, devices: u64) -> f64 {
    if spread <= 0.0 || devices <= 1 {
        return 1.0;
    }
    1.0 / (1.0 - spread * expected_max_normal(devices)).max(1e-3)
}

/// The expected largest of `n` independent standard normal draws,
/// `∫ x · n φ(x) Φ(x)ⁿ⁻¹ dx`, by Simpson's rule on [−10, 10] (steps of 1/200), remembered
/// per `n` (0 for `n ≤ 1`; 1/√π for 2).
pub fn expected_max_normal(n: u64) -> f64 {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static KNOWN: RefCell<HashMap<u64, f64>> = RefCell::new(HashMap::new());
    }
    if n <= 1 {
        return 0.0;
    }
    if let Some(v) = KNOWN.with(|k| k.borrow().get(&n).copied()) {
        return v;
    }
    let density = |x: f64| {
        let phi = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        // ln Φ(x) from the upper tail where Φ is near 1, so that Φⁿ⁻¹ keeps its precision.
        let ln_cdf = if x > 0.0 {
            (-0.5 * erfc(x / std::f64::consts::SQRT_2)).ln_1p()
        } else {
            (0.5 * erfc(-x / std::f64::consts::SQRT_2)).ln()
        };
        x * n as f64 * phi * ((n - 1) as f64 * ln_cdf).exp()
    };
    let (a, steps) = (-10.0, 4000);
    let h = 20.0 / steps as f64;
    let mut sum = density(a) + density(a + h * steps as f64);
    for i in 1..steps {
        sum += density(a + h * i as f64) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    let v = sum * h / 3.0;
    KNOWN.with(|k| k.borrow_mut().insert(n, v));
    v
}

/// The complementary error function, by the Chebyshev fit of Press et al., *Numerical Recipes
/// in C* (2nd ed.), §6.2, `erfcc`: fractional error below 1.2·10⁻⁷ everywhere.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ]
    .iter()
    .rev()
    .fold(0.0, |acc, c| acc * t + c);
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// The wire bytes per rank of a collective as a fraction of the logical tensor (nccl-tests bus
/// factors): `2(n−1)/n` for all-reduce, `(n−1)/n` for the others.
pub fn bus_factor(kind: Collective, n: u64) -> f64 {
    let frac = (n as f64 - 1.0) / n as f64;
    match kind {
        Collective::AllReduce => 2.0 * frac,
        Collective::OneStep => 1.0,
        _ => frac,
    }
}

/// Latency steps of a collective over `n` ranks: `2(n−1)` for a ring all-reduce, `n−1` for the
/// others; `2⌈log₂n⌉` and `⌈log₂n⌉` on a tree.
pub fn steps(kind: Collective, n: u64, tree: bool) -> f64 {
    let per = if tree {
        (n as f64).log2().ceil()
    } else {
        (n - 1) as f64
    };
    match kind {
        Collective::AllReduce => 2.0 * per,
        Collective::OneStep => 1.0,
        _ => per,
    }
}

/// NCCL's model of its tree all-reduce against its ring (src/graph/tuning.cc of NVIDIA/nccl at
/// commit 5067397c, `ncclTopoTuneModel` and `ncclTopoGetAlgoTime`): the tree's bus bandwidth is
/// the ring's × 0.92 ("busBw * .92" for `NCCL_ALGO_TREE` all-reduce), its algorithm bandwidth half
/// of that (ratio .5, where the ring's is nRanks / nsteps), and for messages under 512 MiB it is
/// further scaled by `treeCorrectionFactor` ("Trees are not perfectly sticking to the model for
/// medium sizes"), read here on the Simple protocol's row, the protocol of NCCL's highest
/// bandwidth.
const NCCL_TREE_BUSBW: f64 = 0.92;

/// `treeCorrectionFactor[NCCL_PROTO_SIMPLE]` of the same file, by ⌊log₂(bytes ÷ 64)⌋ from 0 to
/// 22; messages of 512 MiB and more (and under 64 bytes) are not corrected.
const NCCL_TREE_CORRECTION: [f64; 23] = [
    0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7,
    0.7, 0.8, 0.9, 0.9,
];

/// The correction NCCL's model applies to its tree's bandwidth for an all-reduce of `bytes`.
pub fn nccl_tree_correction(bytes: f64) -> f64 {
    let chunks = (bytes / 64.0).floor();
    if chunks < 1.0 {
        return 1.0;
    }
    let log = chunks.log2().floor() as usize;
    NCCL_TREE_CORRECTION.get(log).copied().unwrap_or(1.0)
}

/// Seconds of the part across `g` nodes of an all-reduce of a `full`-byte tensor, as NCCL's
/// double binary tree over the nodes runs it, each device reducing its `share` (`full` ÷ the
/// devices per node): `2 ⌊log₂ g⌋` steps of the tier's latency (NCCL: `2 · log2i(nNodes) ·
/// interLat`, where the ring pays `2 (nNodes − 1)`), and the share moved at half the tier's bus
/// bandwidth × 0.92 × the size's correction (`NCCL_TREE_BUSBW`, [`nccl_tree_correction`]),
/// where the ring moves `2 (g − 1) / g` of it at the full bus bandwidth.
pub fn nccl_tree_all_reduce(g: u64, share: f64, full: f64, l: &LinkRate) -> f64 {
    if g <= 1 {
        return 0.0;
    }
    let bw = l.bus_bandwidth(Collective::AllReduce, share);
    let steps = 2.0 * (g as f64).log2().floor();
    steps * l.latency + 2.0 * share / (bw * NCCL_TREE_BUSBW * nccl_tree_correction(full))
}

/// Time of a flat collective of a `full`-byte logical tensor over `n` ranks of one tier: α per
/// step plus the wire bytes at the tier's bus bandwidth for the kind at that size (its curve), or
/// at the tier's achievable bandwidth where the table has no curve for the kind.
fn ring(kind: Collective, n: u64, full: f64, l: &LinkRate) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    steps(kind, n, l.tree()) * l.latency + bus_factor(kind, n) * full / l.bus_bandwidth(kind, full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::{AxisKind, Mesh};

    /// The reference table without its measured bus-bandwidth curves: plain α–β.
    fn alpha_beta() -> Calibration {
        let mut c = Calibration::reference().unwrap();
        c.tiers.intra.busbw.clear();
        c.tiers.inter.busbw.clear();
        c
    }

    #[test]
    fn wave_and_tile_quantization_by_hand() {
        // 108 SMs (A100) and one 256 × 128 tile.
        let t = Tiling {
            sms: 108.0,
            tiles: vec![(256.0, 128.0)],
        };
        // 8192 × 768: 32 · 6 = 192 tiles in 2 waves of 108 slots: 192 / 216 useful.
        let u = t.utilisation([1.0, 8192.0, 768.0, 6144.0]);
        assert!((u - 192.0 / 216.0).abs() < 1e-12, "{u}");
        // 108 tiles exactly: one full wave.
        assert_eq!(t.utilisation([1.0, 256.0 * 108.0, 128.0, 64.0]), 1.0);
        // 200 × 128: one tile, 56 of its 256 rows padding; split 108 ways along K = 4096.
        let u = t.utilisation([1.0, 200.0, 128.0, 4096.0]);
        assert!((u - 200.0 / 256.0).abs() < 1e-12, "{u}");
        // The same with K = 4: at most 4 ways, so 4 of 108 slots hold work.
        let u = t.utilisation([1.0, 256.0, 128.0, 4.0]);
        assert!((u - 4.0 / 108.0).abs() < 1e-12, "{u}");
        // Batched: 4 products of 2 tiles each fill 8 of 108 slots, then split 13 ways.
        let u = t.utilisation([4.0, 512.0, 128.0, 1e6]);
        assert!((u - 8.0 * 13.0 / 108.0).abs() < 1e-12, "{u}");
        // The best tile is chosen: 128 × 128 tiles fill 8192 × 3072 better (1536 tiles in 15
        // waves) than 256 × 128 (768 tiles in 8 waves).
        let two = Tiling {
            sms: 108.0,
            tiles: vec![(256.0, 128.0), (128.0, 128.0)],
        };
        let u = two.utilisation([1.0, 8192.0, 3072.0, 6144.0]);
        assert!((u - 1536.0 / 1620.0).abs() < 1e-12, "{u}");
    }

    #[test]
    fn tiling_slows_a_gemm_by_its_utilisation_only() {
        let mut r = Rates::of(&Calibration::reference().unwrap());
        r.kernel_overhead = 0.0;
        let g = [1.0, 8192.0, 768.0, 6144.0];
        let flops = 2.0 * 8192.0 * 768.0 * 6144.0;
        let plain = r.op_seconds(flops, 0.0, KernelClass::Matmul, 1);
        r.tiling = Some(Tiling {
            sms: 108.0,
            tiles: vec![(256.0, 128.0)],
        });
        let tiled = r.gemm_seconds(flops, 0.0, KernelClass::Matmul, 1, &[g]);
        assert!((tiled * (192.0 / 216.0) - plain).abs() < 1e-15 * plain.max(1.0));
        // Without sizes, or for other kernels, nothing changes.
        assert_eq!(
            r.gemm_seconds(flops, 0.0, KernelClass::Matmul, 1, &[]),
            plain
        );
        let other = r.op_seconds(flops, 1e6, KernelClass::Other, 1);
        assert_eq!(
            r.gemm_seconds(flops, 1e6, KernelClass::Other, 1, &[g]),
            other
        );
    }

    #[test]
    fn ring_all_reduce_matches_the_formula() {
        let c = alpha_beta();
        let r = Rates::of(&c);
        let m = Mesh::new(8, 1, 1, 8);
        let s = 1e9;
        let wire = 2.0 * 7.0 / 8.0 * s;
        let t = r.collective_seconds(Collective::AllReduce, wire, m.axis(AxisKind::Tp));
        let want = 14.0 * 3e-6 + wire / (450e9 * 0.8);
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
    }

    #[test]
    fn hierarchical_when_the_axis_spans_nodes() {
        let c = alpha_beta();
        let r = Rates::of(&c);
        // dp = 4 with tp = 4 on 8-GPU nodes: 2 dp ranks per node, 2 nodes.
        let m = Mesh::new(4, 4, 1, 8);
        let ax = m.axis(AxisKind::Dp);
        assert_eq!((ax.per_node, ax.tier), (2, Tier::Inter));
        let s = 1e9;
        let wire = 2.0 * 3.0 / 4.0 * s;
        let t = r.collective_seconds(Collective::AllReduce, wire, ax);
        let intra = 3e-6 + 0.5 * s / (450e9 * 0.8);
        let inter = 2.0 * 10e-6 + (s / 2.0) / (50e9 * 0.8);
        assert!((t - (2.0 * intra + inter)).abs() < 1e-12);
    }

    /// NCCL's tree correction by hand (NVIDIA/nccl src/graph/tuning.cc at 5067397c,
    /// `treeCorrectionFactor`, Simple row, indexed by ⌊log₂(bytes ÷ 64)⌋ below 2²³).
    #[test]
    fn the_tree_correction_is_read_by_the_size_s_power_of_two() {
        assert_eq!(nccl_tree_correction(63.0), 1.0);
        assert_eq!(nccl_tree_correction(64.0), 0.9);
        // 1 MB: 15,625 chunks of 64 bytes, ⌊log₂⌋ = 13.
        assert_eq!(nccl_tree_correction(1e6), 0.5);
        // 40 MB: 625,000 chunks, ⌊log₂⌋ = 19.
        assert_eq!(nccl_tree_correction(40e6), 0.7);
        // 256 MiB is 2²² chunks: the last corrected entry; 512 MiB is not corrected.
        assert_eq!(nccl_tree_correction(268_435_456.0), 0.9);
        assert_eq!(nccl_tree_correction(536_870_912.0), 1.0);
    }

    /// `algorithm: nccl`: an all-reduce over 256 nodes of 8 (dp = 2048) takes NCCL's tree
    /// across the nodes for a 1 MB tensor, where the ring's 2 · 255 latency steps dominate, and
    /// the ring for a 64 GB one, where the tree's lower bandwidth does; over 2 nodes the tree
    /// saves no step and is never chosen. Hand counts on the reference table without its bus
    /// bandwidth curves (α 3 µs and 10 µs, 450 GB/s and 50 GB/s at 0.8).
    #[test]
    fn nccl_selection_takes_the_faster_of_ring_and_tree_across_nodes() {
        let mut c = alpha_beta();
        c.tiers.inter.algorithm = "nccl".into();
        let selected = Rates::of(&c);
        c.tiers.inter.algorithm = "ring".into();
        let ringed = Rates::of(&c);
        let m = Mesh::new(1, 2048, 1, 8);
        let ax = m.axis(AxisKind::Dp);
        assert_eq!((ax.per_node, ax.tier), (8, Tier::Inter));
        let time = |r: &Rates, full: f64| {
            r.collective_seconds(Collective::AllReduce, 2.0 * 2047.0 / 2048.0 * full, ax)
        };
        let intra_half = |full: f64| 7.0 * 3e-6 + 7.0 / 8.0 * full / (450e9 * 0.8);
        let ring_across =
            |full: f64| 2.0 * 255.0 * 10e-6 + 2.0 * 255.0 / 256.0 * (full / 8.0) / 40e9;
        let tree_across =
            |full: f64, corr: f64| 2.0 * 8.0 * 10e-6 + 2.0 * (full / 8.0) / (40e9 * 0.92 * corr);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12 * b.max(1.0);
        // 1 MB: the tree (correction 0.5) across the nodes.
        let full = 1e6;
        assert!(tree_across(full, 0.5) < ring_across(full));
        assert!(close(
            time(&selected, full),
            2.0 * intra_half(full) + tree_across(full, 0.5)
        ));
        assert!(close(
            time(&ringed, full),
            2.0 * intra_half(full) + ring_across(full)
        ));
        // 64 GB: the ring (no correction at this size; at 4 GB the ring's 2.5 ms of latency
        // still loses to the tree's 9 % more wire time).
        let full = 64e9;
        assert!(ring_across(full) < tree_across(full, 1.0));
        assert!(close(time(&selected, full), time(&ringed, full)));
        // Two nodes: the same single latency step each way, so the ring's bandwidth wins.
        let two = Mesh::new(1, 16, 1, 8);
        let ax2 = two.axis(AxisKind::Dp);
        for full in [1e3, 1e6, 1e9] {
            let wire = 2.0 * 15.0 / 16.0 * full;
            assert_eq!(
                selected.collective_seconds(Collective::AllReduce, wire, ax2),
                ringed.collective_seconds(Collective::AllReduce, wire, ax2)
            );
        }
        // Reduce-scatter and all-gather keep the ring.
        for kind in [Collective::ReduceScatter, Collective::AllGather] {
            assert_eq!(
                selected.collective_seconds(kind, 1e6, ax),
                ringed.collective_seconds(kind, 1e6, ax)
            );
        }
        // The floor the lower bound uses stays below the selected time.
        for full in [1e3, 1e6, 1e9] {
            let wire = 2.0 * 2047.0 / 2048.0 * full;
            assert!(
                selected.collective_floor(Collective::AllReduce, wire, ax)
                    <= selected.collective_seconds(Collective::AllReduce, wire, ax)
            );
        }
    }

    /// The shipped tables that run NCCL choose per all-reduce across nodes; the AMD (RCCL),
    /// TPU and Gaudi tables keep their ring, and every table's intra-node tier does.
    #[test]
    fn nccl_tables_select_across_nodes_only() {
        let nccl = [
            "a100-40gb",
            "a100-80gb",
            "a40-pcie",
            "b200",
            "dgx-h100",
            "gb200-nvl72",
            "gb300-nvl72",
            "h100-sxm-te",
            "h100-sxm",
            "h200-sxm",
            "h800",
            "v100-dgx1",
            "v100-dgx2h",
        ];
        for name in nccl
            .iter()
            .chain(&["mi300x", "mi325x", "mi355x", "tpu-v5p", "tpu-v6e", "gaudi3"])
        {
            let r = Rates::of(&Calibration::resolve(name).unwrap());
            assert_eq!(
                r.inter.algorithm == LinkAlgorithm::Nccl,
                nccl.contains(name),
                "{name}"
            );
            assert_ne!(r.intra.algorithm, LinkAlgorithm::Nccl, "{name}");
        }
    }

    #[test]
    fn a_bus_bandwidth_curve_times_its_collective() {
        // dgx-h100: all-reduce 370 GB/s at 268 MB rising to 480 GB/s at 8.59 GB (log-linear).
        let r = Rates::of(&Calibration::reference().unwrap());
        let m = Mesh::new(8, 1, 1, 8);
        let ax = m.axis(AxisKind::Tp);
        let full = 1e9;
        let wire = 2.0 * 7.0 / 8.0 * full;
        let t = r.collective_seconds(Collective::AllReduce, wire, ax);
        let x = (1e9f64.log10() - 2.68e8f64.log10()) / (8.59e9f64.log10() - 2.68e8f64.log10());
        let bw = 370e9 + (480e9 - 370e9) * x;
        let want = 14.0 * 3e-6 + wire / bw;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        // Reduce-scatter has its own figure (360 GB/s): the pair is not one all-reduce.
        let rs = r.collective_seconds(Collective::ReduceScatter, wire / 2.0, ax);
        let ag = r.collective_seconds(Collective::AllGather, wire / 2.0, ax);
        assert!((rs - (7.0 * 3e-6 + wire / 2.0 / 360e9)).abs() < 1e-12);
        assert!((ag - (7.0 * 3e-6 + wire / 2.0 / 350e9)).abs() < 1e-12);
        assert!(rs + ag > t);
        // The floor never exceeds the time of any split of the bytes into calls.
        let floor = r.collective_floor(Collective::AllReduce, wire, ax);
        let split: f64 = (0..10)
            .map(|_| r.collective_seconds(Collective::AllReduce, wire / 10.0, ax))
            .sum();
        assert!(floor <= t && floor <= split);
    }

    /// Expected largest of n standard normals: 1/√π and 3/(2√π) in closed form for n = 2 and 3;
    /// for 5, 10, 100 and 1000, the tabulated expected normal order statistics (Harter,
    /// "Expected values of normal order statistics", Biometrika 48, 1961, Table 1: 1.16296,
    /// 1.53875, 2.50759, 3.24144).
    #[test]
    fn the_expected_slowest_matches_closed_forms_and_tables() {
        let pi = std::f64::consts::PI;
        let close = |n: u64, want: f64| {
            let got = expected_max_normal(n);
            assert!((got - want).abs() < 2e-5, "n = {n}: {got} against {want}");
        };
        close(2, 1.0 / pi.sqrt());
        close(3, 1.5 / pi.sqrt());
        close(5, 1.16296);
        close(10, 1.53875);
        close(100, 2.50759);
        close(1000, 3.24144);
        assert_eq!(expected_max_normal(1), 0.0);
        assert_eq!(slowest_pace(0.0, 4096), 1.0);
        assert_eq!(slowest_pace(0.02, 1), 1.0);
        // The pace falls with the device count, and a spread of 2 % at 1000 devices is
        // 1 / (1 − 0.02 · 3.24144).
        assert!((slowest_pace(0.02, 1000) - 1.0 / (1.0 - 0.02 * 3.24144)).abs() < 1e-6);
        assert!(slowest_pace(0.02, 16384) > slowest_pace(0.02, 1024));
    }

    /// Pacing slows compute-bound kernels only: a GEMM by the pace, a streaming kernel not.
    #[test]
    fn pacing_slows_compute_not_streaming() {
        let mut c = alpha_beta();
        c.device.kernel_overhead = None;
        c.device.gemm_tiling = None;
        let mut r = Rates::of(&c);
        r.pace_spread = 0.02;
        let p = r.paced(1024);
        assert_eq!(r.paced(1).pace, 1.0);
        let gemm = |r: &Rates| r.op_seconds(1e15, 1e6, KernelClass::Matmul, 1);
        let stream = |r: &Rates| r.op_seconds(1.0, 1e10, KernelClass::Other, 1);
        assert!((gemm(&p) / gemm(&r) - slowest_pace(0.02, 1024)).abs() < 1e-12);
        assert_eq!(stream(&p), stream(&r));
    }
}
