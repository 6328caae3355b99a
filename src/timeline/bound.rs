//! A closed-form lower bound of the simulated step time, for ordering a search by seconds
//! (DESIGN §6.4): strategies are simulated in the order of their bounds until the next bound
//! exceeds the best time found, which makes the fastest found the fastest of the space.
//!
//! Every device runs its passes one after another, each a serial chain of operators and the
//! collectives the next operator waits for ([`pass_chains`]). Device `d` cannot start before the
//! first micro-batch has gone forward through the stages before it (the fill), then does all its
//! chains; after its last backward the gradient still has to go back through the stages before
//! it (the drain), and device 0 then runs its optimizer step. So, with `F_s` and `B_s` the chain
//! seconds of one micro-batch on virtual stage `s`:
//!
//! ```text
//! T ≥ max_d  Σ_{s<d} F_s + busy_d + max(opt_d, Σ_{s<d} B_s + opt_0)
//! ```
//!
//! Overlapped collectives, contention, sends and gradient reductions only add to the simulated
//! time, so the bound holds for every schedule (property-tested against the simulator). Of
//! them, the bound counts the least that the data-parallel stream's contention must add: a
//! collective that cannot fit in the compute stream's idle seconds overlaps compute, which it
//! slows by the table's `comm_contention` (`contention`). Under
//! ZeRO 3 the step also outlasts each device's data-parallel stream, which gathers every
//! layer's weights twice per micro-batch: `T ≥ max_d 2·m·Σ gather_d`.

use super::cost::Rates;
use super::plan::Collective;
use super::plan::{strategy_blocks, PlanBlock, TimingPlan, FORMAT};
use super::schedule::{stage_ranks, PerPass};
use super::sim::{
    block_dp_grads, block_gather_split, block_held, dp_seconds, grad_sum, optimizer_seconds,
    pass_chains, ChainSeconds, DpWire,
};
use crate::error::Result;
use crate::model::Model;
use crate::parallel::amount::HeldParams;
use crate::parallel::evaluate::{interleaved_chunks, microbatch_bindings, BlockNumbers};
use crate::parallel::Analysis;
use crate::strategy::{Knobs, Mesh, MeshAxis, Recompute, Schedule};
use crate::sym::{Bindings, Rational};

/// Chain seconds of each block under each recomputation choice, for one (dp, tp, micro-batch,
/// layout) choice.
#[derive(Debug, Clone)]
pub struct Chains {
    /// Per recomputation, per block: forward and backward seconds, and of them the waits for
    /// collectives.
    pub per_block: PerRecompute<Vec<PerPass<ChainSeconds>>>,
    /// Whether each block is a repeated layer.
    pub layer: Vec<bool>,
    /// Data-parallel gradient wire bytes per device of each block, per step, in the precision's
    /// gradient type, dense and expert (`block_dp_grads`).
    pub dp_grad: Vec<DpWire>,
    /// Parameter elements per device of each block, dense and expert, and of each the FP8 GEMM
    /// weights ([`block_held`]): what the optimizer step updates.
    pub held: Vec<HeldParams<f64>>,
    /// Wire bytes per device of one all-gather of each block's weights, as the simulation
    /// gathers them (`block_gather_split`).
    pub gather: Vec<DpWire>,
}

/// One value per recomputation choice, named by choice. Indexed by [`Recompute`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerRecompute<T> {
    /// Without recomputation.
    pub none: T,
    /// Under selective recomputation (the attention core).
    pub selective: T,
    /// Under full recomputation.
    pub full: T,
}

impl<T> std::ops::Index<Recompute> for PerRecompute<T> {
    type Output = T;

    fn index(&self, r: Recompute) -> &T {
        match r {
            Recompute::None => &self.none,
            Recompute::Selective => &self.selective,
            Recompute::Full => &self.full,
        }
    }
}

impl<T> std::ops::IndexMut<Recompute> for PerRecompute<T> {
    fn index_mut(&mut self, r: Recompute) -> &mut T {
        match r {
            Recompute::None => &mut self.none,
            Recompute::Selective => &mut self.selective,
            Recompute::Full => &mut self.full,
        }
    }
}

/// The chains of `model` under `knobs`' dp, tp, micro-batch count and the analysis' layout.
#[allow(clippy::too_many_arguments)]
pub fn chains(
    model: &Model,
    analysis: &Analysis,
    numbers: &[BlockNumbers],
    values: &Bindings,
    knobs: &Knobs,
    rates: &Rates,
    gpus_per_node: u64,
) -> Result<Chains> {
    let b = microbatch_bindings(model, values, knobs);
    let blocks: Vec<PlanBlock> = strategy_blocks(model, analysis, numbers, &b, knobs)?;
    let layer = blocks.iter().map(|b| b.layer).collect();
    let dp_grad = blocks.iter().map(|b| block_dp_grads(b, knobs)).collect();
    let held = blocks.iter().map(block_held).collect();
    let gather = blocks
        .iter()
        .map(|b| block_gather_split(b, knobs))
        .collect();
    let mut plan = TimingPlan {
        format: FORMAT.into(),
        model: model.name.clone(),
        symbols: Default::default(),
        knobs: knobs.clone(),
        gpus_per_node: Some(gpus_per_node),
        samples: Rational::from_integer(1.into()),
        tokens: Rational::from_integer(0.into()),
        model_flops: Rational::from_integer(0.into()),
        memory_per_device: Rational::from_integer(0.into()),
        batch_symbol: model.batch.clone(),
        sequence_symbol: model.roles.sequence.clone(),
        settings: Default::default(),
        routing: crate::parallel::evaluate::routing_of(numbers).cloned(),
        blocks,
        items: Vec::new(),
        stages: Vec::new(),
    };
    let mut per_block: PerRecompute<Vec<PerPass<ChainSeconds>>> = Default::default();
    for r in [Recompute::None, Recompute::Selective, Recompute::Full] {
        plan.knobs.recompute = r;
        per_block[r] = pass_chains(&plan, rates, gpus_per_node);
    }
    Ok(Chains {
        per_block,
        layer,
        dp_grad,
        held,
        gather,
    })
}

/// The copies of each block a (virtual) stage holds, in order.
pub type StageBlocks = Vec<(usize, u64)>;

/// Block copies on each virtual stage as the timeline places them: the pipeline partition for
/// GPipe and 1F1B (`partition`, per stage), the layers split evenly over `pp × chunks` virtual
/// stages for the interleaved schedule, embeddings on the first and the head on the last.
pub fn virtual_stages<'a>(
    chains: &Chains,
    repeats: &[u64],
    partition: &'a [StageBlocks],
    k: &Knobs,
) -> Option<std::borrow::Cow<'a, [StageBlocks]>> {
    let v = k.virtual_chunks();
    if v <= 1 {
        return Some(std::borrow::Cow::Borrowed(partition));
    }
    interleaved_chunks(repeats, &chains.layer, k.pp * v, k.pipeline_split)
        .map(std::borrow::Cow::Owned)
}

/// What each pipeline rank runs, summed over the (virtual) stages it holds.
struct Ranks {
    /// Per virtual stage: one micro-batch's forward, backward and (ZB-H1) weight chains.
    fwd: Vec<f64>,
    bwd: Vec<f64>,
    wgt: Vec<f64>,
    /// Per rank: the seconds of all its chains over the step.
    busy: Vec<f64>,
    /// Per rank: of `busy`, the seconds its chains wait for collectives (the compute stream
    /// idle).
    waits: Vec<f64>,
    /// Per rank: parameter elements held, and of them the FP8 GEMM weights.
    held: Vec<HeldParams<f64>>,
    /// Per rank: wire bytes of one all-gather of the weights it holds.
    gather: Vec<DpWire>,
    /// Per rank: data-parallel gradient wire bytes per micro-batch.
    grads: Vec<DpWire>,
    /// Per virtual stage: its gradient wire bytes.
    stage_grads: Vec<DpWire>,
    /// DualPipe: rank d holds a copy of stage d and one of stage p − 1 − d.
    dual: bool,
    /// Micro-batches each holder runs its stage for.
    runs: f64,
}

impl Ranks {
    fn of(chains: &Chains, stages: &[Vec<(usize, u64)>], k: &Knobs) -> Ranks {
        let per = &chains.per_block[k.recompute];
        let p = k.pp as usize;
        let m = k.microbatches as f64;
        let fwd: Vec<f64> = stages
            .iter()
            .map(|s| stage_sum(s, |b| per[b].forward.seconds))
            .collect();
        let bwd: Vec<f64> = stages
            .iter()
            .map(|s| stage_sum(s, |b| per[b].backward.seconds))
            .collect();
        // ZB-H1's weight passes (empty chains under the other schedules).
        let wgt: Vec<f64> = stages
            .iter()
            .map(|s| stage_sum(s, |b| per[b].weight.seconds))
            .collect();
        let waits: Vec<f64> = stages
            .iter()
            .map(|s| {
                stage_sum(s, |b| {
                    per[b].forward.waits + per[b].backward.waits + per[b].weight.waits
                })
            })
            .collect();
        let dual = k.dualpipe();
        let runs = if dual { m / 2.0 } else { m };
        let stage_grads: Vec<DpWire> = stages
            .iter()
            .map(|st| wire_sum(st, |b| chains.dp_grad[b]))
            .collect();
        let mut r = Ranks {
            busy: vec![0.0; p],
            waits: vec![0.0; p],
            held: vec![HeldParams::default(); p],
            gather: vec![DpWire::default(); p],
            grads: vec![DpWire::default(); p],
            fwd,
            bwd,
            wgt,
            stage_grads,
            dual,
            runs,
        };
        for (s, st) in stages.iter().enumerate() {
            for d in stage_ranks(k.schedule, s, p) {
                r.busy[d] += runs * (r.fwd[s] + r.bwd[s] + r.wgt[s]);
                r.waits[d] += runs * waits[s];
                let stage = st
                    .iter()
                    .map(|&(b, n)| chains.held[b].times(n as f64))
                    .fold(HeldParams::default(), |sum, h| sum + h);
                r.held[d] = r.held[d] + stage;
                r.gather[d] += wire_sum(st, |b| chains.gather[b]);
                r.grads[d] += r.stage_grads[s];
            }
        }
        r
    }
}

/// The sum of `v(block)` times its copies over a stage's (block, copies).
fn stage_sum(s: &[(usize, u64)], v: impl Fn(usize) -> f64) -> f64 {
    s.iter().map(|(b, c)| v(*b) * *c as f64).sum()
}

/// [`stage_sum`] of data-parallel bytes, each group's apart.
fn wire_sum(s: &[(usize, u64)], v: impl Fn(usize) -> DpWire) -> DpWire {
    DpWire {
        dense: stage_sum(s, |b| v(b).dense),
        expert: stage_sum(s, |b| v(b).expert),
    }
}

/// A device's data-parallel traffic, at its best bandwidth.
struct DpStream<'a> {
    k: &'a Knobs,
    rates: &'a Rates,
    /// The replicas' group (dense weights).
    axis: MeshAxis,
    /// The group of the ranks holding the same experts (expert weights).
    edp: MeshAxis,
}

impl DpStream<'_> {
    /// The gradient reduction of `g` wire bytes: a reduce-scatter of half the bytes when ZeRO
    /// 1–3 shards the gradients' owners, else an all-reduce.
    fn reduce(&self, g: DpWire) -> f64 {
        if (1..=3).contains(&self.k.zero) && self.k.replicas() > 1 {
            self.floor(Collective::ReduceScatter, g.times(0.5))
        } else {
            self.floor(Collective::AllReduce, g)
        }
    }

    /// The least seconds of collectives of `kind` moving `wire`, each group's over its axis.
    fn floor(&self, kind: Collective, wire: DpWire) -> f64 {
        self.rates.collective_floor(kind, wire.dense, &self.axis)
            + self.rates.collective_floor(kind, wire.expert, &self.edp)
    }

    /// After the optimizer step, ZeRO 1–2's all-gather of `wire` bytes per rank (ZeRO 3
    /// gathers layer by layer during the passes, bounded apart); overlapped with the next
    /// step's forward (`--overlap-param-gather`), it may lengthen the step by nothing.
    fn gather(&self, wire: DpWire) -> f64 {
        let distributed = (1..3).contains(&self.k.zero) && self.k.replicas() > 1;
        if distributed && !self.k.overlap.param_gather {
            self.floor(Collective::AllGather, wire)
        } else {
            0.0
        }
    }
}

/// Per rank, ZeRO 3's (FSDP's) all-gathers of every layer's weights before each micro-batch's
/// forward and backward, one after another on the device's data-parallel stream.
fn zero3_gathers(
    chains: &Chains,
    stages: &[Vec<(usize, u64)>],
    r: &Ranks,
    dp: &DpStream,
) -> Vec<f64> {
    let p = dp.k.pp as usize;
    let mut gathers = vec![0.0; p];
    for (s, st) in stages.iter().enumerate() {
        for &(b, c) in st {
            if chains.held[b].params() > 0.0 {
                let wire = chains.gather[b];
                let one = dp_seconds(
                    dp.rates,
                    Collective::AllGather,
                    wire,
                    1.0,
                    (&dp.axis, &dp.edp),
                );
                for d in stage_ranks(dp.k.schedule, s, p) {
                    gathers[d] += 2.0 * r.runs * c as f64 * one;
                }
            }
        }
    }
    gathers
}

/// The lower bound of the simulated step time of strategy `k` whose virtual stages hold
/// `stages` (see the module documentation), on nodes of `gpus_per_node` devices.
pub fn lower_bound(
    chains: &Chains,
    stages: &[Vec<(usize, u64)>],
    k: &Knobs,
    rates: &Rates,
    gpus_per_node: u64,
) -> f64 {
    let p = k.pp as usize;
    let m = k.microbatches as f64;
    let r = Ranks::of(chains, stages, k);
    let mesh = Mesh::of(k, gpus_per_node);
    let dp = DpStream {
        k,
        rates,
        axis: mesh.grad_axis(),
        edp: mesh.expert_grad_axis(k.ep),
    };
    let opt: Vec<f64> = r
        .held
        .iter()
        .map(|h| optimizer_seconds(h, k, rates))
        .collect();
    let mut best: f64 = 0.0;
    let mut gathers = vec![0.0; p];
    // ZeRO 3's gathers, on the data-parallel stream, which the step outlasts. Summed here in
    // another order than the simulation's: a relative 10⁻⁹ below.
    if k.zero == 3 && k.replicas() > 1 {
        gathers = zero3_gathers(chains, stages, &r, &dp);
        best = gathers.iter().fold(0.0, |a: f64, &g| a.max(g)) * (1.0 - 1e-9);
    }
    // Per rank: one reduction of its gradients, and the weight gather after the step.
    let reduce: Vec<f64> = r.grads.iter().map(|&g| dp.reduce(g)).collect();
    let gather_after: Vec<f64> = r.gather.iter().map(|&g| dp.gather(g)).collect();
    // Each rank's data-parallel stream over the step: its gradient reductions (once, or under
    // sharded gradients once per micro-batch), ZeRO 3's gathers and the weight gather after
    // the step.
    let mut stream = reduce.clone();
    // Sharded gradients (ZeRO 2–3) are reduce-scattered after every micro-batch's backward, on
    // the data-parallel stream that also carries ZeRO 3's gathers; the optimizer step waits for
    // the last of them and ZeRO 2's weight gather follows it on the same stream.
    if k.shards_gradients() {
        // Each micro-batch reduces its stage's gradients; under DualPipe a rank's two stage
        // copies reduce apart, each for half the micro-batches.
        let mut reduced: Vec<f64> = reduce.iter().map(|&g| m * g).collect();
        if r.dual {
            reduced = vec![0.0; p];
            for (s, g) in r.stage_grads.iter().enumerate() {
                for d in stage_ranks(k.schedule, s, p) {
                    reduced[d] += r.runs * dp.reduce(*g);
                }
            }
        }
        for d in 0..p {
            stream[d] = reduced[d] + if k.zero == 3 { gathers[d] } else { 0.0 };
            best = best.max((stream[d] + opt[d] + gather_after[d]) * (1.0 - 1e-9));
        }
    }
    for (s, g) in stream.iter_mut().zip(&gather_after) {
        *s += g;
    }
    if k.overlapped_chunks() {
        // An F&B chunk (DualPipe, DualPipeV) hides collectives that the pass chains count as
        // waited for, so a rank's chains are no bound on its time there. Its compute stream
        // still runs every kernel of its chains, paired or not, one after another, and the
        // optimizer step after the last of them: its chains less their waits, the step and
        // the weight gather. So does its gradients' reduction and what follows it: under
        // DualPipe the sum of its copies' gradients with its mirror's, the optimizer step and
        // the weight gather.
        // Under DualPipeV rank d's first task, unpaired, is micro-batch 0's forward of stage
        // d: its compute waits for that micro-batch's forward through the stages before it
        // (the fill), which run unpaired too.
        let mut fill = 0.0;
        for (d, o) in opt.iter().enumerate() {
            let sum = if r.dual {
                grad_sum(&r.held[d], k, rates, mesh.p2p_tier()).1
            } else {
                0.0
            };
            best = best.max(reduce[d] + sum + o + gather_after[d]);
            best = best.max(fill + r.busy[d] - r.waits[d] + o + gather_after[d]);
            if !r.dual {
                fill += r.fwd.get(d).copied().unwrap_or(0.0);
            }
        }
        return best;
    }
    let dp_seconds = DpSeconds {
        reduce,
        gather_after,
        stream,
    };
    best.max(pipeline_bound(&r, &opt, &dp, &dp_seconds))
}

/// Per rank, seconds of its data-parallel stream ([`lower_bound`]).
struct DpSeconds {
    /// One reduction of the rank's gradients.
    reduce: Vec<f64>,
    /// The weight gather after the optimizer step (zero where overlapped or not needed).
    gather_after: Vec<f64>,
    /// The whole stream over the step.
    stream: Vec<f64>,
}

/// The bound of the fill, each rank's chains and the drain (see the module documentation),
/// with each rank's gradient reduction and optimizer step after its last backward, and the
/// compute its data-parallel stream slows ([`contention`]).
fn pipeline_bound(r: &Ranks, opt: &[f64], dp: &DpStream, dps: &DpSeconds) -> f64 {
    let k = dp.k;
    let m = k.microbatches as f64;
    let mut best: f64 = 0.0;
    let (mut fill, mut drain) = (0.0, 0.0);
    for d in 0..k.pp as usize {
        let after = opt[d] + dps.gather_after[d];
        // Under ZB-H1 rank d's last backward is followed by up to min(m, d + 1) weight passes
        // (it defers its W's by d backwards), which the drain to rank 0 does not wait for.
        let w_after = match k.schedule {
            Schedule::ZeroBubbleH1 => {
                (d as f64 + 1.0).min(m) * r.wgt.get(d).copied().unwrap_or(0.0)
            }
            // ZB-V: at most all of rank d's weight passes, of both its chunks.
            Schedule::ZeroBubbleV => {
                let p = k.pp as usize;
                let own = |s: usize| r.wgt.get(s).copied().unwrap_or(0.0);
                m * (own(d) + own(2 * p - 1 - d))
            }
            _ => 0.0,
        };
        let tail = after.max(drain + opt[0] + dps.gather_after[0] - w_after);
        // The rank's compute stream idles through the fill, its chains' waits and the tail
        // less its optimizer step.
        let idle = fill + r.waits[d] + tail - opt[d];
        let slowed = contention(dp.rates.contention, dps.stream[d], idle);
        best = best.max(fill + r.busy[d] + tail + slowed);
        // The gradients leave after the task that makes them starts (the last backward; the
        // last weight pass under ZB-H1); everything after waits for them.
        let last_bwd = match k.schedule {
            Schedule::Interleaved | Schedule::ZeroBubbleV => r.busy[d],
            Schedule::ZeroBubbleH1 => r.wgt.get(d).copied().unwrap_or(0.0),
            _ => r.bwd.get(d).copied().unwrap_or(0.0),
        };
        best = best.max(fill + r.busy[d] - last_bwd + dps.reduce[d] + after);
        best = best.max(dps.reduce[d] + after);
        fill += r.fwd.get(d).copied().unwrap_or(0.0);
        drain += r.bwd.get(d).copied().unwrap_or(0.0);
    }
    best
}

/// The least seconds a collective stream busy `stream` seconds adds to a device's compute,
/// where a running collective slows a compute kernel by the share `c` of their overlap (the
/// table's `comm_contention`) and the compute stream idles at least `idle` seconds. The
/// collective runs at most `idle` seconds beside no compute, so it overlaps compute at least
/// `stream − idle` seconds of wall time; a kernel overlapped `o` seconds of its own length
/// lasts `c·o` longer and overlaps at most `(1 + c)·o`, so the compute lengthens by at least
/// `c·(stream − idle)/(1 + c)`. (With `X ≥ idle` seconds idle the step is at least compute +
/// `X` + `c·(stream − X)/(1 + c)`, least at `X = idle`.)
fn contention(c: f64, stream: f64, idle: f64) -> f64 {
    if c <= 0.0 || stream <= idle {
        return 0.0;
    }
    c * (stream - idle) / (1.0 + c) * (1.0 - 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calib::Calibration;
    use crate::model::ModelLoader;
    use crate::parallel::evaluate::{block_numbers, pipeline_stage_counts};
    use crate::parallel::{analyse, Layout};
    use crate::strategy::Tier;
    use crate::timeline::{plan_strategy, time_summary};
    use proptest::prelude::*;

    /// The bound and the simulated time of gpt3-125m (12 layers) under `k` with one sequence
    /// per device and micro-batch (so that the weight gathers weigh most against compute), or
    /// `None` when the strategy is not valid for the model.
    fn bound_and_time(k: &Knobs, machine: &str) -> Option<(f64, f64)> {
        let model = ModelLoader::embedded().ok()?.resolve("gpt3-125m").ok()?;
        let mut values = model.values.clone();
        let batch = k.dp * k.microbatches;
        values.insert("B".into(), Rational::from_integer(batch.into()));
        // Layers that, with what the interleaved split counts besides them, make 12 units.
        let layers = 12 - k.pipeline_split.extra();
        values.insert("L".into(), Rational::from_integer(layers.into()));
        let calib = Calibration::resolve(machine).ok()?;
        let gpn = calib.gpus_per_node();
        let layout = Layout {
            sequence_parallel: k.sequence_parallel,
            ..Layout::default()
        };
        let on = crate::calib::MachineRef::whole(&calib);
        let (plan, _) = plan_strategy(&model, &values, k, &layout, on).ok()?;
        let simulated = time_summary(&plan, &calib).ok()?.iteration_seconds;
        let analysis = analyse(&model, &layout).context_parallel();
        let kernels = crate::parallel::kernels::KernelEfficiency::of(&calib);
        let b = microbatch_bindings(&model, &values, k);
        let numbers = block_numbers(&analysis, &b, &kernels).ok()?;
        let rates = Rates::of(&calib);
        let ch = chains(&model, &analysis, &numbers, &values, k, &rates, gpn).ok()?;
        let kappa = |t: Tier| crate::parallel::amount::float(&calib.balance(t));
        let kh = crate::parallel::amount::float(&calib.hbm_balance());
        let partition = pipeline_stage_counts(&model, &numbers, k, &kappa, kh, gpn).ok()?;
        let repeats: Vec<u64> = numbers.iter().map(|n| n.repeat).collect();
        let stages = virtual_stages(&ch, &repeats, &partition, k)?;
        Some((lower_bound(&ch, &stages, k, &rates, gpn), simulated))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Under ZeRO 3, where the bound counts the weight gathers of the data-parallel stream,
        /// it still never exceeds the simulated time.
        #[test]
        fn the_zero3_bound_never_exceeds_the_simulated_time(
            dp in prop::sample::select(vec![2u64, 4, 8]),
            tp in prop::sample::select(vec![1u64, 2, 4]),
            pp in prop::sample::select(vec![1u64, 2, 4]),
            m in prop::sample::select(vec![1u64, 2, 4, 6, 12]),
            interleaved in any::<bool>(),
            zb in any::<bool>(),
            dual in any::<bool>(),
            vee in any::<bool>(),
            (embedding, loss) in any::<(bool, bool)>(),
            recompute in prop::sample::select(vec![Recompute::None, Recompute::Selective, Recompute::Full]),
            machine in prop::sample::select(vec!["a100-80gb", "h100-sxm", "a40-pcie", "v100-dgx1"]),
        ) {
            let interleaved = interleaved && pp > 1;
            let k = Knobs {
                dp,
                tp,
                pp,
                microbatches: m,
                schedule: match (interleaved, zb && pp > 1) {
                    (true, _) => Schedule::Interleaved,
                    (false, true) if vee && dual && m >= 2 * pp => Schedule::DualPipeV,
                    _ if dual && pp % 2 == 0 && m >= 2 * pp => Schedule::DualPipe,
                    (false, true) if vee => Schedule::ZeroBubbleV,
                    (false, true) => Schedule::ZeroBubbleH1,
                    (false, false) => Schedule::OneFOneB,
                },
                chunks: if interleaved { 3 } else { 1 },
                sequence_parallel: false,
                recompute,
                zero: 3,
                ep: 1,
                cp: 1,
                overlap: Default::default(),
                precision: Default::default(),
                pipeline_split: crate::strategy::PipelineSplit { embedding, loss },
                fp8_params: false,
                fp8_dispatch: false,
                node_dispatch: false,
            };
            if let Some((bound, simulated)) = bound_and_time(&k, machine) {
                prop_assert!(
                    bound <= simulated * (1.0 + 1e-9),
                    "{k} on {machine}: bound {bound} above the simulated {simulated}"
                );
            }
        }
    }
}
