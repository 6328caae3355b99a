//! The simulation's state between tasks and the gradient reductions it launches: when a
//! bucket fills, when a layer's gradients are ready, what waits for what.

use super::*;

/// What the event loop changes as the devices run their programs.
pub(super) struct State {
    /// The simulated devices, one per pipeline rank.
    pub(super) devices: Vec<Device>,
    /// Per device, the tasks of its program it has run.
    pub(super) pos: Vec<usize>,
    /// Per virtual stage and micro-batch: when (and by which event) its forward input and its
    /// backward gradient arrive.
    pub(super) arrivals: Vec<Vec<PerPass<Arrival>>>,
    pub(super) rec: Recorder,
    /// The end of the last backward.
    pub(super) flush: f64,
    /// Per block and pass, the steady step of a run of its layers (two states a layer apart),
    /// once a task has shown one; later tasks recognise it after a single layer.
    pub(super) steady: Vec<PerPass<Option<(Snapshot, Snapshot)>>>,
    /// Per virtual stage and pass, what its tasks did from the device states they met.
    pub(super) memos: Vec<PerPass<Vec<TaskMemo>>>,
    /// Per device, the tasks run whose sends wait for the end of their chunk.
    pub(super) waiting: Vec<Vec<Task>>,
}

impl State {
    pub(super) fn new(layout: &Layout, keep: bool) -> State {
        let plan = layout.plan();
        let m = plan.knobs.microbatches as usize;
        let device = || Device {
            contention: layout.ctx.rates.contention,
            free: PerStream::default(),
            last: PerStream::default(),
            busy: PerStream::default(),
            work: 0.0,
            bucket_wire: DpWire::default(),
            bucket_full: 0.0,
            bucket_ready: None,
            buckets: 0,
            pending: Vec::new(),
            backwards: 0,
            task_end: 0.0,
            first_forward: None,
        };
        State {
            devices: (0..layout.p).map(|_| device()).collect(),
            pos: vec![0usize; layout.p],
            arrivals: vec![vec![PerPass::default(); m]; layout.nst],
            rec: Recorder {
                keep,
                events: Vec::new(),
                count: 0,
            },
            flush: 0.0,
            steady: vec![PerPass::default(); plan.blocks.len()],
            memos: vec![PerPass::default(); layout.nst],
            waiting: vec![Vec::new(); layout.p],
        }
    }
}

/// A task as its layers see it.
pub(super) struct TaskRun {
    /// The device (pipeline rank) that runs it.
    pub(super) d: usize,
    pub(super) task: Task,
    /// Whether its backward reduces the gradients it makes (the stage's last backward, or
    /// every backward with sharded gradients).
    pub(super) grads_now: bool,
    /// The bucket at which data-parallel gradients are launched: [`Layout::cap`] where the
    /// backward launches buckets as it fills them, else never during the task.
    pub(super) cap: f64,
    /// Whether a run of equal layers is added at once once it is steady.
    pub(super) repeat: bool,
}

/// Where a task stands on its device.
#[derive(Clone, Copy)]
pub(super) struct Cursor {
    /// When the next step may start: the end of the last blocking step (or the task's start).
    pub(super) t: f64,
    /// The last blocking event (or the event that delivered the task's input).
    pub(super) prev: Option<usize>,
    /// The start of the task's first event.
    pub(super) started: Option<f64>,
    /// The last compute step's start and end.
    pub(super) last_compute: Option<(f64, f64)>,
}

/// FSDP's prefetch across a task's layers.
pub(super) struct Prefetch {
    /// When the previous layer of the task began computing: the next gather's issue time.
    pub(super) at: f64,
    /// The end of the weight gather already issued for the next layer.
    pub(super) gathered: Option<f64>,
}

/// What a layer's steps leave for the steps after them.
#[derive(Default)]
pub(super) struct LayerState {
    /// Whether the layer has begun computing.
    pub(super) item_started: bool,
    /// Ends of the latest two ring exchanges (context parallelism).
    pub(super) ring_prev: f64,
    pub(super) ring_last: f64,
    /// The end of a gather the next compute step's weight gradient waits for.
    pub(super) gathered: Option<f64>,
    /// The start of the GEMM group the last compute step belongs to (one linear layer written
    /// as several operators), and whether the next compute step joins it.
    pub(super) group_start: Option<f64>,
    pub(super) joining: bool,
}

/// Issues step `s`, a collective launched when the matmul's input gradient (the first of its
/// two GEMMs) is done, beside its weight gradient; what follows waits. A group's input
/// gradients all run first: the collective is issued halfway through the group.
pub(super) fn issue_after_dgrad(
    dev: &mut Device,
    rec: &mut Recorder,
    s: &SimStep,
    cur: &mut Cursor,
    layer: &LayerState,
    event: impl FnOnce() -> Event,
) {
    let (st, en) = cur.last_compute.unwrap_or((cur.t, cur.t));
    let st = layer.group_start.unwrap_or(st).min(st);
    let issue = st + (en - st) / 2.0;
    let (id, cs, end) = dev.push_with(rec, s.stream, s.dur, issue, event);
    // The weight-gradient GEMM it overlaps gives up the table's contention share of its
    // throughput while both run: the compute stream is held that much longer after it (what
    // depends on the GEMM's result keeps its recorded end, and busy seconds stay the sum of the
    // recorded events).
    let overlap = (end.min(en) - cs).max(0.0);
    let extra = dev.contention * overlap;
    if extra > 0.0 && cur.last_compute.is_some() {
        let c = Stream::Compute;
        dev.free[c] = dev.free[c].max(en) + extra;
        cur.t = cur.t.max(dev.free[c]);
    }
    cur.t = cur.t.max(end);
    cur.prev = Some(id);
}

/// After compute step `s` ran from `start` to `end`: records it as the last compute step and in
/// its GEMM group, and returns when what follows may start. The weight gradient (the step's
/// second half; in a group, the group's, checked at its last member) starts once the gather it
/// reads has arrived: the compute stream and what follows wait for the difference (busy seconds
/// keep the recorded event).
pub(super) fn after_compute(
    dev: &mut Device,
    cur: &mut Cursor,
    layer: &mut LayerState,
    s: &SimStep,
    start: f64,
    end: f64,
) -> f64 {
    let mut held = end;
    cur.last_compute = Some((start, end));
    let first = if layer.joining {
        layer.group_start.unwrap_or(start)
    } else {
        start
    };
    layer.group_start = Some(first);
    layer.joining = s.fused_next;
    if let Some(g) = layer.gathered.filter(|_| !s.fused_next) {
        layer.gathered = None;
        let wait = g - (first + (end - first) / 2.0);
        if wait > 0.0 {
            held = end + wait;
            let c = Stream::Compute;
            dev.free[c] = dev.free[c].max(held);
        }
    }
    held
}

/// Seconds of one pipeline send of `bytes` per device. An activation that tensor parallelism
/// keeps whole on every rank is sent in 1/tp slices and all-gathered inside the receiving node
/// (Megatron-LM's scatter/gather optimisation, Narayanan et al. SC'21 §4.1); a sequence-parallel
/// activation is already a 1/tp slice.
pub(super) fn send_seconds(ctx: &Ctx, bytes: f64, tier: crate::strategy::Tier) -> f64 {
    let k = &ctx.plan.knobs;
    if k.tp > 1 && !k.sequence_parallel {
        let t = k.tp as f64;
        let gather =
            ctx.rates
                .collective_seconds(Collective::AllGather, bytes * (t - 1.0) / t, ctx.tp);
        ctx.rates.p2p_seconds(bytes / t, tier) + gather
    } else {
        ctx.rates.p2p_seconds(bytes, tier)
    }
}

/// Gradients of operator `op` are ready at event `ready`: tensor-parallel ones reduce at once,
/// data-parallel ones join the bucket, which is launched once it holds `cap` bytes.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_grads(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    bi: usize,
    op: usize,
    item: usize,
    (d, ready, t): (usize, usize, f64),
    cap: f64,
) {
    for (k, g) in &ctx.grads[bi] {
        if *k != op {
            continue;
        }
        match *g {
            Grad::Now(stream, dur, bytes) => {
                let e = grad_event(d, stream, dur, bytes, dev.buckets, Some(item), ready);
                dev.buckets += 1;
                dev.push(rec, e, t);
            }
            Grad::Bucket { wire, full } => {
                dev.bucket_wire += wire;
                dev.bucket_full += full;
                dev.bucket_ready = Some((ready, t));
                if dev.bucket_full >= cap {
                    flush_bucket(ctx, dev, rec, d);
                }
            }
        }
    }
}

pub(super) fn grad_event(
    d: usize,
    stream: Stream,
    dur: f64,
    bytes: f64,
    bucket: usize,
    item: Option<usize>,
    ready: usize,
) -> Event {
    Event {
        device: d,
        stream,
        start: 0.0,
        dur,
        what: What::Grad { bucket },
        pass: Pass::Backward,
        stage: d,
        item,
        microbatch: None,
        flops: 0.0,
        bytes,
        deps: vec![ready],
    }
}

/// Launches the pending gradients of finished model chunks due after backward task `index`
/// (all of them when `None`), once `now` (an event and its end).
pub(super) fn launch_pending(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    d: usize,
    index: Option<usize>,
    now: (usize, f64),
) {
    while let Some(i) = dev
        .pending
        .iter()
        .position(|g| index.is_none_or(|x| g.after <= x))
    {
        let g = dev.pending.remove(i);
        let ready = if g.ready.1 >= now.1 { g.ready } else { now };
        reduce_grads(ctx, dev, rec, d, g.wire, ready, g.calls);
    }
}

/// Launches the bucket's gradients in one collective; returns when it ends.
pub(super) fn flush_bucket(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    d: usize,
) -> Option<f64> {
    let ready = dev.bucket_ready.take()?;
    let wire = std::mem::take(&mut dev.bucket_wire);
    dev.bucket_full = 0.0;
    Some(reduce_grads(ctx, dev, rec, d, wire, ready, 1.0))
}

/// Reduces `wire` bytes of data-parallel gradients (as an all-reduce carries them) in `calls`
/// equal collectives, once event `ready` has ended at time `t`; returns when they end.
pub(super) fn reduce_grads(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    d: usize,
    mut wire: DpWire,
    (ready, t): (usize, f64),
    calls: f64,
) -> f64 {
    let k = &ctx.plan.knobs;
    // A distributed optimizer (ZeRO 1–2) and FSDP (ZeRO 3) reduce-scatter the gradients to their
    // owners (half an all-reduce's traffic); ZeRO 1–2 gather the weights after the step, ZeRO 3
    // before each layer's use.
    let kind = if (1..=3).contains(&k.zero) && k.replicas() > 1 {
        wire = wire.times(0.5);
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    let dur = ctx.dp_seconds(kind, wire, calls);
    let e = grad_event(
        d,
        Stream::DpComm,
        dur,
        wire.total(),
        dev.buckets,
        None,
        ready,
    );
    dev.buckets += 1;
    dev.push(rec, e, t).2
}
