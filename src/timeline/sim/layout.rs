//! The simulation of every pipeline rank's program: tasks in schedule order, point-to-point
//! sends between stages, the data-parallel stream, memory.

use super::*;

/// A plan laid out for the event loop: what stays fixed while the devices run their programs.
pub(super) struct Layout<'a> {
    pub(super) ctx: Ctx<'a>,
    /// Pipeline ranks: the simulated devices.
    pub(super) p: usize,
    /// Virtual stages.
    pub(super) nst: usize,
    /// Per virtual stage, its first item (and after the last stage, the number of items).
    pub(super) first: Vec<usize>,
    /// Per block, its parameter elements and FP8 GEMM weights, dense and expert, as floats once
    /// ([`block_held`]; FSDP gathers a block's weights per item).
    pub(super) block_held: Vec<HeldParams<f64>>,
    /// Per block, the wire bytes of one all-gather of its weights ([`block_gather_split`]).
    pub(super) block_gather: Vec<DpWire>,
    /// For each item, the first and last item of its run of copies of the same block.
    pub(super) run_start: Vec<usize>,
    pub(super) run_end: Vec<usize>,
    /// Each block's steps in each pass.
    pub(super) passes: Vec<PerPass<Vec<SimStep>>>,
    /// Per virtual stage: the bytes of its last item's output, what a pipeline send after it
    /// moves, and that send's seconds (as floats once: every micro-batch sends them).
    pub(super) boundary: Vec<(f64, f64)>,
    /// Each pipeline rank's tasks, in order.
    pub(super) programs: Vec<Vec<Task>>,
    /// Per rank and virtual stage, the position of the stage's last backward (its last weight
    /// pass under ZB-H1 and DualPipe) in the rank's program: the task that produces its
    /// gradients (a stage runs on two ranks under DualPipe, one copy each).
    pub(super) last_bwd: Vec<Vec<usize>>,
    /// Per rank and task of its program, whether it runs overlapped with the next (DualPipe's
    /// F&B chunks).
    pub(super) paired: Vec<Vec<bool>>,
    /// Per rank and task of its program, whether its sends wait for the end of the next task
    /// (DualPipe's full backward chunks: [`crate::timeline::schedule::sends_after_next`]).
    pub(super) joined: Vec<Vec<bool>>,
    /// The pass whose tasks make the gradients: the backward, or the weight pass under ZB-H1.
    pub(super) grad_pass: Pass,
    /// Data-parallel replicas of each device (dp × cp).
    pub(super) replicas: u64,
    /// Whether a device keeps only its shard of the gradients (ZeRO ≥ 2).
    pub(super) sharded_grads: bool,
    /// Whether gradient reductions overlap the backward (`--overlap-grad-reduce`).
    pub(super) overlap: bool,
    /// Whether the schedule interleaves model chunks.
    pub(super) interleaved: bool,
    /// The gradient bucket, in bytes as the bus carries them.
    pub(super) cap: f64,
    /// Whether every layer's weights are gathered before its use (FSDP: ZeRO 3).
    pub(super) fsdp: bool,
    /// The tier of the pipeline's links.
    pub(super) p2p_tier: crate::strategy::Tier,
}

impl<'a> Layout<'a> {
    pub(super) fn new(plan: &'a TimingPlan, rates: &'a Rates, mesh: &'a Mesh) -> Layout<'a> {
        let k = &plan.knobs;
        let ctx = Ctx::new(plan, rates, mesh);
        let p = k.pp as usize;
        let v = k.virtual_chunks() as usize;
        let m = k.microbatches as usize;
        let nst = plan.stages.len();
        let mut first = vec![0usize; nst + 1];
        for (s, n) in plan.stages.iter().enumerate() {
            first[s + 1] = first[s] + n;
        }
        let (run_start, run_end) = block_runs(&plan.items);
        let passes = (0..plan.blocks.len())
            .map(|b| PerPass {
                forward: ctx.steps(b, Pass::Forward),
                backward: ctx.steps(b, Pass::Backward),
                weight: ctx.steps(b, Pass::Weight),
            })
            .collect();
        let (mut programs, mut paired, mut joined) = (Vec::new(), Vec::new(), Vec::new());
        for s in 0..p {
            let (tasks, pairs, sends) = program_with_pairs(k.schedule, s, p, m, v);
            programs.push(tasks);
            paired.push(pairs);
            joined.push(sends);
        }
        debug_assert_eq!(v * p, nst);
        // Megatron-LM's delayed launch of a chunk's gradients (below) is the interleaved
        // schedule's; ZB-V's ranks launch theirs as 1F1B's do.
        let interleaved = k.schedule == Schedule::Interleaved && v > 1;
        // When data-parallel gradients are reduced, as Megatron-LM's DDP launches them with
        // `--overlap-grad-reduce` and its default `delay_grad_reduce`
        // (megatron/core/pipeline_parallel/schedules.py: "Asynchronous communication tends to
        // slow down compute. To reduce idling from mismatched microbatch times, we launch
        // asynchronous communication at the same time across the pipeline-parallel group"):
        //
        // * 1F1B: pipeline rank 0 reduces bucket by bucket as its last backward fills them; the
        //   other ranks launch their gradients after their last backward ("Other pipeline stages
        //   do grad reduction during pipeline bubble"), one bucket each (DDP buckets only rank
        //   0).
        // * Interleaved: rank r launches a model chunk's gradients r backward tasks after the
        //   last backward of that chunk, so that every rank launches together; those the step
        //   has no task left for after the last backward. Only chunk 0 of rank 0 is cut into
        //   buckets.
        // * Without overlap: one reduction of everything after the last backward.
        // * ZeRO ≥ 2 keeps only the device's 1/replicas shard of the gradients, so each
        //   micro-batch's gradients are reduce-scattered after its backward (DeepSpeed ZeRO-2
        //   and PyTorch FSDP during gradient accumulation; Rajbhandari et al. 2020, §5.2):
        //   bucket by bucket during the backward with overlap, after it and before the device
        //   goes on without.
        // * ZB-H1: the weight pass makes the gradients, so all of the above happens at its
        //   tasks instead: after the last W, or after each W with ZeRO ≥ 2.
        let replicas = k.replicas();
        let grad_pass = if k.schedule.splits_backward() {
            Pass::Weight
        } else {
            Pass::Backward
        };
        let last_bwd = last_grad_tasks(&programs, nst, grad_pass);
        let boundary = boundary_sends(&ctx, &first, mesh.p2p_tier());
        Layout {
            p,
            nst,
            first,
            block_held: plan.blocks.iter().map(block_held).collect(),
            block_gather: plan
                .blocks
                .iter()
                .map(|b| block_gather_split(b, k))
                .collect(),
            run_start,
            run_end,
            passes,
            boundary,
            programs,
            last_bwd,
            paired,
            joined,
            grad_pass,
            replicas,
            sharded_grads: k.shards_gradients(),
            overlap: k.overlap.grad_reduce,
            interleaved,
            cap: bucket_bytes(replicas),
            // FSDP (ZeRO 3): every layer's weights are all-gathered before each forward and each
            // backward of every micro-batch (resharded after use, PyTorch FSDP's default), one
            // layer ahead: the gather of a layer is issued when the previous layer starts
            // computing (forward and backward prefetch), before that layer's gradient
            // reductions and its kernels (which it slows by the contention share while both
            // run), and the layer waits for it.
            fsdp: k.zero == 3 && replicas > 1,
            p2p_tier: mesh.p2p_tier(),
            ctx,
        }
    }

    pub(super) fn plan(&self) -> &'a TimingPlan {
        self.ctx.plan
    }

    /// Runs every device's program, each task once its input has arrived, until all are done.
    pub(super) fn run_programs(&self, st: &mut State) -> Result<(), SimError> {
        loop {
            let mut progress = false;
            let mut done = true;
            for d in 0..self.p {
                while st.pos[d] < self.programs[d].len() {
                    let task = self.programs[d][st.pos[d]];
                    let Some(input) = self.input(st, task) else {
                        break;
                    };
                    if self.paired[d][st.pos[d]] {
                        let second = self.programs[d][st.pos[d] + 1];
                        let Some(other) = self.input(st, second) else {
                            break;
                        };
                        self.run_pair(st, d, [task, second], [input, other]);
                        st.pos[d] += 2;
                    } else {
                        self.run_task(st, d, task, input);
                        st.pos[d] += 1;
                    }
                    progress = true;
                }
                done &= st.pos[d] == self.programs[d].len();
            }
            if done {
                return Ok(());
            }
            if !progress {
                return Err(SimError::Deadlock);
            }
        }
    }

    /// When `task`'s input (an activation, or its gradient) is there, and the event that
    /// delivers it (none for the first stage of its pass); `None` while it is on its way.
    pub(super) fn input(&self, st: &State, task: Task) -> Option<(f64, Option<usize>)> {
        let head = match task.pass {
            Pass::Forward => task.stage == 0,
            Pass::Backward => task.stage + 1 == self.nst,
            // Its input is its own backward's, which ran before it on the same device.
            Pass::Weight => true,
        };
        if head {
            Some((0.0, None))
        } else {
            st.arrivals[task.stage][task.microbatch][task.pass].map(|(t, e)| (t, Some(e)))
        }
    }

    /// Runs `task` on device `d` once its input is there (at `ready`, by event `dep`): its
    /// layers, or what an earlier task that met the same state did; then its gradients and
    /// its hand-off to the neighbouring stage.
    pub(super) fn run_task(
        &self,
        st: &mut State,
        d: usize,
        task: Task,
        (ready, dep): (f64, Option<usize>),
    ) {
        let dev = &mut st.devices[d];
        let mut cur = Cursor {
            // A stack profile's host gap before every pass of a micro-batch (zero without one).
            t: ready.max(dev.task_end) + self.ctx.rates.microbatch_overhead,
            prev: dep,
            started: None,
            last_compute: None,
        };
        let last = task.pass == self.grad_pass && self.last_bwd[d][task.stage] == st.pos[d];
        let grads_now = task.pass == self.grad_pass && (self.sharded_grads || last);
        // Whether buckets are launched as the backward fills them.
        let eager =
            grads_now && self.overlap && (self.sharded_grads || (d == 0 && !self.interleaved));
        // A run of equal layers reaches a steady state: once a layer leaves the device as the
        // one before left it (each stream's free time the same distance from the task's time,
        // the streams it does not use idle), every further layer of the run repeats it shifted
        // by the same seconds, and is added at once. Only when just the times are kept, and
        // without per-layer gathers or gradient launches. Tasks that reduce their own
        // micro-batch's gradients (ZeRO ≥ 2) start and end with an empty bucket, so they may
        // still be remembered whole.
        let memo = !st.rec.keep && !self.fsdp && (!grads_now || self.sharded_grads);
        let run = TaskRun {
            d,
            task,
            grads_now,
            cap: if eager { self.cap } else { f64::INFINITY },
            repeat: memo && !grads_now,
        };
        // A task that finds its device as an earlier task of the same stage and pass found it
        // (each stream's free time the same distance after the task's start, or free by then)
        // does what that task did, shifted: its layers are not stepped.
        let memos = &mut st.memos[task.stage][task.pass];
        let entry = memo.then(|| TaskEntry::of(dev, cur.t, st.rec.count));
        let hit = entry
            .as_ref()
            .and_then(|e| memos.iter().find(|m| m.met(e)).copied());
        match &hit {
            Some(m) => m.apply(dev, &mut cur, &mut st.rec.count),
            None => self.run_layers(dev, &mut st.rec, &mut st.steady, &run, &mut cur),
        }
        if grads_now && self.sharded_grads {
            // This micro-batch's gradients leave before the next one adds to the shard.
            let end = flush_bucket(&self.ctx, dev, &mut st.rec, d);
            if let (Some(end), false) = (end, self.overlap) {
                let c = Stream::Compute;
                dev.free[c] = dev.free[c].max(end);
                cur.t = cur.t.max(end);
            }
        }
        if let (Some(e), None) = (&entry, &hit) {
            if memos.len() < MEMOS_PER_TASK {
                memos.push(TaskMemo::of(e, dev, &cur, st.rec.count));
            }
        }
        if task.pass == Pass::Backward {
            self.after_backward(dev, &mut st.rec, d, task, last, &cur);
        }
        let start = cur.started.unwrap_or(ready);
        dev.work += cur.t - start;
        if task.pass == Pass::Forward && dev.first_forward.is_none() {
            dev.first_forward = Some(cur.t - start);
        }
        dev.task_end = cur.t;
        if task.pass != Pass::Forward {
            st.flush = st.flush.max(cur.t);
        }
        self.send(st, d, task, &cur);
    }

    /// Hands on what `task` on device `d` made, once its chunk is done: now, with `cur` where
    /// it ended; or, where its sends wait for the next task (the forward of an F&B chunk,
    /// [`Layout::paired`], and a task of [`Layout::joined`]), after that task, with what waited
    /// before it.
    pub(super) fn send(&self, st: &mut State, d: usize, task: Task, cur: &Cursor) {
        st.waiting[d].push(task);
        let pos = st.pos[d];
        if self.joined[d][pos] || self.paired[d][pos] {
            return;
        }
        let dev = &mut st.devices[d];
        // Emptied in place, its allocation kept for the next task.
        let mut waiting = std::mem::take(&mut st.waiting[d]);
        for t in waiting.drain(..) {
            if let Some((dest, arrival)) = self.hand_on(dev, &mut st.rec, d, t, cur) {
                st.arrivals[dest][t.microbatch][t.pass] = Some(arrival);
            }
        }
        st.waiting[d] = waiting;
    }

    /// Runs DualPipe's F&B chunk on device `d`: the forward of one micro-batch and the
    /// backward (input gradient) of another, overlapped as DeepSeek-V3 runs them
    /// (arXiv:2412.19437, §3.2.1 and Figure 4: the all-to-all and tensor-parallel
    /// communication of one chunk under the other's compute). The two tasks' steps are issued
    /// in turn on the device's streams, each step of a task after its own previous blocking
    /// step, always the step that can start first (the forward's on a tie): while one task
    /// waits for its collective, the other computes. The streams stay in-order queues, so a
    /// step issued later never starts before one issued earlier on the same stream, where a
    /// hand-tuned kernel order could; under FSDP (ZeRO 3) the two run one after the other.
    pub(super) fn run_pair(
        &self,
        st: &mut State,
        d: usize,
        tasks: [Task; 2],
        inputs: [(f64, Option<usize>); 2],
    ) {
        if self.fsdp {
            self.run_task(st, d, tasks[0], inputs[0]);
            st.pos[d] += 1;
            let (ready, dep) = inputs[1];
            self.run_task(st, d, tasks[1], (ready, dep));
            st.pos[d] -= 1;
            return;
        }
        let dev = &mut st.devices[d];
        let overhead = self.ctx.rates.microbatch_overhead;
        // The chunk starts once both inputs are there, as `DualPipe._forward_backward_chunk`
        // receives both before it computes (deepseek-ai/DualPipe, dualpipe/dualpipe.py).
        let both = inputs[0].0.max(inputs[1].0).max(dev.task_end) + overhead;
        let mut curs = inputs.map(|(_, dep)| Cursor {
            t: both,
            prev: dep,
            started: None,
            last_compute: None,
        });
        let runs = tasks.map(|task| TaskRun {
            d,
            task,
            grads_now: false,
            cap: f64::INFINITY,
            repeat: false,
        });
        // Each task's (item, block) in the order it runs them, and where it stands.
        let order = |task: Task| -> Vec<(usize, usize)> {
            let range = self.first[task.stage]..self.first[task.stage + 1];
            let items: Vec<usize> = if task.pass == Pass::Forward {
                range.collect()
            } else {
                range.rev().collect()
            };
            items
                .into_iter()
                .map(|i| (i, self.plan().items[i]))
                .collect()
        };
        let orders = tasks.map(order);
        let mut at = [(0usize, 0usize); 2];
        let mut layers = [LayerState::default(), LayerState::default()];
        loop {
            let next = |i: usize| -> Option<&SimStep> {
                let (li, si) = at[i];
                let &(_, bi) = orders[i].get(li)?;
                self.passes[bi][tasks[i].pass].get(si)
            };
            let start_of = |i: usize, s: &SimStep| curs[i].t.max(dev.free[s.stream]);
            let pick = match (next(0), next(1)) {
                (None, None) => break,
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (Some(a), Some(b)) => usize::from(start_of(1, b) < start_of(0, a)),
            };
            let (li, si) = at[pick];
            let (item, bi) = orders[pick][li];
            let s = &self.passes[bi][tasks[pick].pass][si];
            let run = &runs[pick];
            self.pair_step(
                dev,
                &mut st.rec,
                run,
                (item, bi, s),
                &mut curs[pick],
                &mut layers[pick],
            );
            at[pick].1 += 1;
            if at[pick].1 == self.passes[bi][tasks[pick].pass].len() {
                at[pick] = (li + 1, 0);
                layers[pick] = LayerState::default();
            }
        }
        self.finish_pair(st, d, tasks, inputs, curs);
    }

    /// After the F&B chunk `tasks` on device `d`, which ran from `inputs` to `curs`: its work,
    /// its backward's bookkeeping, and both its sends, when the chunk is done
    /// (`_forward_backward_chunk` sends after computing both).
    pub(super) fn finish_pair(
        &self,
        st: &mut State,
        d: usize,
        tasks: [Task; 2],
        inputs: [(f64, Option<usize>); 2],
        curs: [Cursor; 2],
    ) {
        let dev = &mut st.devices[d];
        let start = curs
            .iter()
            .zip(&inputs)
            .map(|(c, (ready, _))| c.started.unwrap_or(*ready))
            .fold(f64::INFINITY, f64::min);
        let end = curs[0].t.max(curs[1].t);
        dev.work += end - start;
        dev.task_end = end;
        for (task, cur) in tasks.iter().zip(&curs) {
            if task.pass == Pass::Backward {
                self.after_backward(dev, &mut st.rec, d, *task, false, cur);
            }
            if task.pass == Pass::Forward && dev.first_forward.is_none() {
                dev.first_forward = Some(cur.t - start);
            }
            if task.pass != Pass::Forward {
                st.flush = st.flush.max(cur.t);
            }
        }
        let last = usize::from(curs[1].t > curs[0].t);
        let [c0, c1] = curs;
        let done = if last == 1 { c1 } else { c0 };
        self.send(st, d, tasks[0], &done);
        st.pos[d] += 1;
        self.send(st, d, tasks[1], &done);
        st.pos[d] -= 1;
    }

    /// One step `s` of block `bi` in `item` of a task of an F&B chunk ([`Layout::run_pair`]):
    /// what [`Layout::run_layer`] does with a step, without FSDP's gathers (not paired) and
    /// without gradient launches (a paired task makes no gradients: its weight gradient is a
    /// task of its own).
    pub(super) fn pair_step(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        (item, bi, s): (usize, usize, &SimStep),
        cur: &mut Cursor,
        layer: &mut LayerState,
    ) {
        let keep = rec.keep;
        let prev = cur.prev;
        let event = || self.step_event(run, bi, item, s, prev, keep);
        if s.after_dgrad {
            let event = || Event {
                deps: Vec::new(),
                ..event()
            };
            issue_after_dgrad(dev, rec, s, cur, layer, event);
            return;
        }
        let ready = match s.ring_wait {
            1 => cur.t.max(layer.ring_last),
            2 => cur.t.max(layer.ring_prev),
            _ => cur.t,
        };
        let (id, start, end) = dev.push_with(rec, s.stream, s.dur, ready, event);
        if s.stream == Stream::CpComm {
            layer.ring_prev = layer.ring_last;
            layer.ring_last = end;
        }
        cur.started.get_or_insert(start);
        let mut held = end;
        if s.stream == Stream::Compute {
            layer.item_started = true;
            held = after_compute(dev, cur, layer, s, start, end);
        }
        if s.blocking {
            cur.t = held;
            cur.prev = Some(id);
        }
    }

    /// Runs the task's layers (its block copies, in the order it runs them: backward in
    /// reverse) from `cur`; once a run of equal layers is steady, adds the rest of the run at
    /// once (see [`Snapshot`]).
    pub(super) fn run_layers(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        steady: &mut [PerPass<Option<(Snapshot, Snapshot)>>],
        run: &TaskRun,
        cur: &mut Cursor,
    ) {
        let plan = self.plan();
        let task = run.task;
        let range = self.first[task.stage]..self.first[task.stage + 1];
        let forward = task.pass == Pass::Forward;
        let n_items = range.len();
        let item_at = |j: usize| {
            if forward {
                range.start + j
            } else {
                range.end - 1 - j
            }
        };
        let mut prefetch = Prefetch {
            at: cur.t,
            gathered: None,
        };
        let mut before: Option<Snapshot> = None;
        let mut j = 0;
        while j < n_items {
            let item = item_at(j);
            j += 1;
            let next = (j < n_items).then(|| item_at(j));
            self.run_layer(dev, rec, run, (item, next), cur, &mut prefetch);
            if !run.repeat {
                continue;
            }
            let bi = plan.items[item];
            let after = Snapshot::of(dev, cur, rec.count);
            // The copies of the same block still to come in this task.
            let rest = if forward {
                self.run_end[item].min(range.end - 1) - item
            } else {
                item - self.run_start[item].max(range.start)
            };
            // The steady step of this block and pass, once any task has shown it.
            let known = &mut steady[bi][task.pass];
            let step = match (&before, &*known) {
                (_, Some((from, to))) if after.is_steady(from, to) => Some((*from, *to)),
                (Some(b), _) if b.block == bi && after.repeats(b) => {
                    let found = (*b, after);
                    *known = Some(found);
                    Some(found)
                }
                _ => None,
            };
            if let Some((from, to)) = step {
                if rest > 0 {
                    let mut x = after;
                    x.advance(&from, &to, rest);
                    x.store(dev, cur, &mut rec.count);
                    j += rest;
                }
                before = None;
                continue;
            }
            before = Some(Snapshot { block: bi, ..after });
        }
    }

    /// Runs one layer of the task: copy `item` of a block (with `next` the task's next item, if
    /// any), after FSDP's gather of its weights.
    pub(super) fn run_layer(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        (item, next): (usize, Option<usize>),
        cur: &mut Cursor,
        prefetch: &mut Prefetch,
    ) {
        let bi = self.plan().items[item];
        let params = self.block_held[bi].params();
        // The weight gradient reads activations and output gradients, not the weights: no
        // gather before it.
        let gathers = self.fsdp && run.task.pass != Pass::Weight;
        if gathers && params > 0.0 {
            let end = match prefetch.gathered.take() {
                Some(end) => end,
                None => self.push_gather(dev, rec, run, item, prefetch.at),
            };
            cur.t = cur.t.max(end);
        }
        let mut layer = LayerState::default();
        for s in &self.passes[bi][run.task.pass] {
            // Built only when the events are kept.
            let keep = rec.keep;
            let prev = cur.prev;
            let event = || self.step_event(run, bi, item, s, prev, keep);
            if s.after_dgrad {
                let event = || Event {
                    deps: Vec::new(),
                    ..event()
                };
                issue_after_dgrad(dev, rec, s, cur, &layer, event);
                continue;
            }
            let ready = match s.ring_wait {
                1 => cur.t.max(layer.ring_last),
                2 => cur.t.max(layer.ring_prev),
                _ => cur.t,
            };
            let first_compute = !layer.item_started && s.stream == Stream::Compute;
            if let Some(next) = next.filter(|_| gathers && first_compute) {
                // The next layer's weights are gathered as this layer starts computing, and
                // before its gradients are reduce-scattered: in issue order on the one
                // data-parallel stream (see `push_gather`).
                if self.block_held[self.plan().items[next]].params() > 0.0 {
                    let at = ready.max(dev.free[Stream::Compute]);
                    prefetch.gathered = Some(self.push_gather(dev, rec, run, next, at));
                }
            }
            let (id, start, end) = dev.push_with(rec, s.stream, s.dur, ready, event);
            if s.stream == Stream::CpComm {
                layer.ring_prev = layer.ring_last;
                layer.ring_last = end;
            }
            cur.started.get_or_insert(start);
            if !layer.item_started && s.stream == Stream::Compute {
                layer.item_started = true;
                prefetch.at = start;
            }
            let mut held = end;
            if s.stream == Stream::Compute {
                held = after_compute(dev, cur, &mut layer, s, start, end);
            }
            // Under ZB-H1 the weight gradient that reads the gather runs in a later task, by
            // when the gather has long arrived: the input gradient does not wait for it.
            if s.gather && !self.ctx.split {
                layer.gathered = Some(end);
            }
            if !s.blocking {
                continue;
            }
            cur.t = held;
            cur.prev = Some(id);
            if run.grads_now && !s.recompute {
                if let Some(op) = s.op {
                    let ready = (run.d, id, end);
                    launch_grads(&self.ctx, dev, rec, bi, op, item, ready, run.cap);
                }
            }
        }
    }

    /// The event of step `s` of block `bi`'s pass in `item`, depending on `prev` where events
    /// are kept.
    pub(super) fn step_event(
        &self,
        run: &TaskRun,
        bi: usize,
        item: usize,
        s: &SimStep,
        prev: Option<usize>,
        keep: bool,
    ) -> Event {
        Event {
            device: run.d,
            stream: s.stream,
            start: 0.0,
            dur: s.dur,
            what: match s.op {
                Some(op) => What::Op {
                    block: bi,
                    op,
                    recompute: s.recompute,
                },
                None => What::Comm {
                    block: bi,
                    step: s.step,
                    recompute: s.recompute,
                },
            },
            pass: run.task.pass,
            stage: run.task.stage,
            item: Some(item),
            microbatch: Some(run.task.microbatch),
            flops: s.flops,
            bytes: s.bytes,
            deps: if keep {
                prev.into_iter().collect()
            } else {
                Vec::new()
            },
        }
    }

    /// FSDP's gather of `item`'s weights, issued at `ready`; returns when it ends.
    ///
    /// PyTorch FSDP issues a layer's backward prefetch (the next layer's all-gather,
    /// `BackwardPrefetch.BACKWARD_PRE`, the default) in that layer's pre-backward hook, before
    /// its gradients are computed, and the layer's reduce-scatter in its post-backward hook,
    /// after them (pytorch/pytorch 00ae0bc, torch/distributed/fsdp/_runtime_utils.py:
    /// `_pre_backward_hook` → `_prefetch_handles`, `_post_backward_hook`). The two run from
    /// different CUDA streams (`unshard`, `post_backward`) but through the same process group,
    /// whose NCCL kernels all run on its one internal stream per device, in the order they were
    /// issued (pytorch/pytorch 0007e75, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the
    /// "[Sync Streams]" note: "NCCL communications run on ncclStreams"; one per device of the
    /// process group): one data-parallel stream in issue order, so the gather a layer waits for
    /// never queues behind the reductions of the layer before it.
    pub(super) fn push_gather(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        item: usize,
        ready: f64,
    ) -> f64 {
        let (dur, wire) = self.gather_seconds(self.plan().items[item]);
        let mut e = grad_event(run.d, Stream::DpComm, dur, wire, dev.buckets, Some(item), 0);
        e.what = What::ParamGather;
        e.pass = run.task.pass;
        e.microbatch = Some(run.task.microbatch);
        e.deps.clear();
        dev.push(rec, e, ready).2
    }

    /// Seconds and bytes on the wire of one all-gather of block `b`'s weights (ZeRO 3's).
    pub(super) fn gather_seconds(&self, b: usize) -> (f64, f64) {
        let wire = self.block_gather[b];
        (
            self.ctx.dp_seconds(Collective::AllGather, wire, 1.0),
            wire.total(),
        )
    }

    /// After backward `task` on device `d` (its last for its stage when `last`), with `cur`
    /// where it ended: queues an interleaved chunk's gradients for their launch, and launches
    /// those now due.
    pub(super) fn after_backward(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        task: Task,
        last: bool,
        cur: &Cursor,
    ) {
        let index = dev.backwards;
        dev.backwards += 1;
        if last && self.overlap && self.interleaved && !self.sharded_grads {
            if let Some(ready) = dev.bucket_ready.take() {
                let full = std::mem::take(&mut dev.bucket_full);
                let calls = if task.stage == 0 {
                    (full / self.cap).ceil()
                } else {
                    1.0
                };
                dev.pending.push(Pending {
                    wire: std::mem::take(&mut dev.bucket_wire),
                    ready,
                    after: index + d,
                    calls: calls.max(1.0),
                });
            }
        }
        let ready = (cur.prev.unwrap_or(0), cur.t);
        launch_pending(&self.ctx, dev, rec, d, Some(index), ready);
    }

    /// Hands `task`'s activation (or its gradient) to the neighbouring stage: returns that
    /// stage and when (and by which event) it arrives, after a send unless the stage is on the
    /// same device.
    pub(super) fn hand_on(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        task: Task,
        cur: &Cursor,
    ) -> Option<(usize, (f64, usize))> {
        let (dest, boundary_stage) = match task.pass {
            Pass::Forward if task.stage + 1 < self.nst => (task.stage + 1, task.stage),
            Pass::Backward if task.stage > 0 => (task.stage - 1, task.stage - 1),
            _ => return None,
        };
        let (bytes, dur) = self.boundary[boundary_stage];
        let k = &self.plan().knobs;
        let m = k.microbatches as usize;
        if device_of(k.schedule, dest, task.microbatch, self.p, m) == d {
            return Some((dest, (cur.t, cur.prev.unwrap_or(0))));
        }
        let e = Event {
            device: d,
            stream: Stream::P2p,
            start: 0.0,
            dur,
            what: What::Send,
            pass: task.pass,
            stage: task.stage,
            item: None,
            microbatch: Some(task.microbatch),
            flops: 0.0,
            bytes,
            deps: rec.deps(cur.prev),
        };
        let (id, _, end) = dev.push(rec, e, cur.t);
        // Megatron-LM's pipeline exchange is synchronous: the stage waits for its batched
        // send/receive before computing again.
        let c = Stream::Compute;
        dev.free[c] = dev.free[c].max(end);
        Some((dest, (end, id)))
    }

    /// After the devices' programs: on each device the remaining gradient buckets, the
    /// gradient-norm all-reduce, the optimizer step and, with a distributed optimizer, the
    /// all-gather of the updated parameters. Returns the step time.
    pub(super) fn finish_step(&self, st: &mut State, gpus_per_node: u64) -> f64 {
        let k = &self.plan().knobs;
        let all_devices = k.devices();
        let norm_tier = if all_devices > gpus_per_node {
            crate::strategy::Tier::Inter
        } else {
            crate::strategy::Tier::Intra
        };
        let norm_seconds = if all_devices > 1 {
            // One fp32 number, reduced over every device: latency-bound, a tree (NCCL picks
            // one for tiny messages).
            crate::timeline::cost::steps(Collective::AllReduce, all_devices, true)
                * self.ctx.rates.link(norm_tier).latency
        } else {
            0.0
        };
        let mut iteration: f64 = 0.0;
        for (d, dev) in st.devices.iter_mut().enumerate() {
            self.finish_device(dev, &mut st.rec, d, norm_seconds, &mut iteration);
        }
        iteration
    }

    /// [`Layout::finish_step`] on device `d`, taking `iteration` to at least its end.
    pub(super) fn finish_device(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        norm_seconds: f64,
        iteration: &mut f64,
    ) {
        let plan = self.plan();
        let (k, rates) = (&plan.knobs, self.ctx.rates);
        let ready = (dev.last[Stream::Compute].unwrap_or(0), dev.task_end);
        launch_pending(&self.ctx, dev, rec, d, None, ready);
        flush_bucket(&self.ctx, dev, rec, d);
        if norm_seconds > 0.0 {
            let ready = dev.free.iter().cloned().fold(0.0, f64::max);
            let deps: Vec<usize> = dev.last.iter().flatten().copied().collect();
            let mut e = grad_event(d, Stream::DpComm, norm_seconds, 4.0, dev.buckets, None, 0);
            e.deps = deps;
            e.what = What::GradNorm;
            dev.push(rec, e, ready);
        }
        // The blocks of the items it holds (under DualPipe a copy of stages d and p − 1 − d).
        let blocks: Vec<usize> = (0..self.nst)
            .filter(|&s| stage_ranks(k.schedule, s, self.p).any(|r| r == d))
            .flat_map(|s| self.first[s]..self.first[s + 1])
            .map(|i| plan.items[i])
            .collect();
        // Their parameters, and of those the FP8 GEMM weights.
        let held = blocks
            .iter()
            .fold(HeldParams::default(), |sum, &b| sum + self.block_held[b]);
        // Under DualPipe, the sum of its copies' gradients with its mirror's, before the step.
        let (sum_bytes, sum_seconds) = grad_sum(&held, k, rates, self.p2p_tier);
        if sum_bytes > 0.0 {
            let ready = dev.free.iter().cloned().fold(0.0, f64::max);
            let e = Event {
                device: d,
                stream: Stream::P2p,
                start: 0.0,
                dur: sum_seconds,
                what: What::GradSum,
                pass: Pass::Backward,
                stage: d,
                item: None,
                microbatch: None,
                flops: 0.0,
                bytes: sum_bytes,
                deps: dev.last.iter().flatten().copied().collect(),
            };
            dev.push(rec, e, ready);
        }
        let ready = dev.free.iter().cloned().fold(0.0, f64::max);
        let deps: Vec<usize> = dev.last.iter().flatten().copied().collect();
        let e = Event {
            device: d,
            stream: Stream::Compute,
            start: 0.0,
            dur: optimizer_seconds(&held, k, rates),
            what: What::Optimizer,
            pass: Pass::Backward,
            stage: d,
            item: None,
            microbatch: None,
            flops: 0.0,
            bytes: 0.0,
            deps,
        };
        let (opt, _, opt_end) = dev.push(rec, e, ready);
        if k.zero >= 1 && k.zero < 3 && self.replicas > 1 {
            // The distributed optimizer gathers the updated model weights from their owners.
            let wire = blocks
                .iter()
                .fold(DpWire::default(), |sum, &b| sum + self.block_gather[b]);
            let dur = self.ctx.dp_seconds(Collective::AllGather, wire, 1.0);
            let before = dev.free.iter().cloned().fold(0.0, f64::max);
            let mut e = grad_event(d, Stream::DpComm, dur, wire.total(), dev.buckets, None, opt);
            e.what = What::ParamGather;
            dev.push(rec, e, opt_end);
            if k.overlap.param_gather {
                // Gathered bucket by bucket while the next step's forward runs: only what
                // outlasts this device's first forward task lengthens the step.
                let hidden = dev.first_forward.unwrap_or(0.0);
                let exposed = (dur - hidden).max(0.0);
                *iteration = iteration.max(before).max(opt_end + exposed);
                return;
            }
        }
        *iteration = iteration.max(dev.free.iter().cloned().fold(0.0, f64::max));
    }
}

/// For each of `items` (block indices), the first and the last item of its run of copies of
/// the same block.
pub(super) fn block_runs(items: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let n = items.len();
    let mut run_start = vec![0usize; n];
    let mut run_end = vec![0usize; n];
    for i in 0..n {
        run_start[i] = if i > 0 && items[i - 1] == items[i] {
            run_start[i - 1]
        } else {
            i
        };
    }
    for i in (0..n).rev() {
        run_end[i] = if i + 1 < n && items[i + 1] == items[i] {
            run_end[i + 1]
        } else {
            i
        };
    }
    (run_start, run_end)
}
