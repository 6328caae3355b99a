//! A block's pass as timed steps: each operator's kernels, the collectives on its path, the
//! context-parallel ring, the weight-gradient pass, with their seconds on the machine.

use super::*;

/// The weight-gradient share of an operator's backward, as floats: what ZB-H1 defers to a
/// step of its own.
pub(super) struct WeightPart {
    /// Its FLOPs (the plan's [`PlanOp::weight_grad_flops`], exact from the rule).
    pub(super) flops: f64,
    /// The backward's bytes in the proportion of its FLOPs.
    pub(super) bytes: f64,
    /// The position in [`PlanOp::gemms`] of its GEMM: the last backward GEMM within the weight
    /// gradient's FLOPs (which add a bias's reduction to the weight's GEMM). The two backward
    /// GEMMs of a two-operand contraction have the same FLOPs, so only the shape, not the work,
    /// rides on which one this is; a linear layer's weight is its second operand, the last.
    pub(super) gemm: Option<usize>,
}

impl WeightPart {
    pub(super) fn of(o: &PlanOp) -> WeightPart {
        let w = f(&o.weight_grad_flops);
        let total = f(&o.backward_flops);
        let bytes = if total > 0.0 {
            f(&o.backward_bytes) * w / total
        } else {
            0.0
        };
        let gemm = (1..o.gemms.len()).rev().find(|&i| {
            let g = o.gemms[i].to_f64();
            w > 0.0 && 2.0 * g.iter().product::<f64>() <= w * (1.0 + 1e-9)
        });
        WeightPart {
            flops: w,
            bytes,
            gemm,
        }
    }
}

impl<'a> Ctx<'a> {
    pub(super) fn new(plan: &'a TimingPlan, rates: &'a Rates, mesh: &'a Mesh) -> Ctx<'a> {
        let mut ctx = Ctx {
            plan,
            rates,
            tp: mesh.axis(AxisKind::Tp),
            dp: mesh.grad_axis(),
            edp: mesh.expert_grad_axis(plan.knobs.ep),
            cp: mesh.cp_axis(),
            ep: mesh.ep_axis(plan.knobs.ep),
            // A saved plan timed on nodes its groups spread over unevenly, which `cost` and
            // `timeline` refuse node dispatch on, moves its slots flat.
            route: crate::parallel::moe::node_route(
                &plan.knobs,
                plan.routing.as_ref(),
                mesh.ep_nodes(plan.knobs.ep),
            )
            .filter(|_| mesh.ep_even(plan.knobs.ep))
            .map(|r| {
                // The flat bytes are (ep − 1)/ep of the slots.
                let ep = plan.knobs.ep as f64;
                [&r.inter, &r.intra].map(|share| f(share) * ep / (ep - 1.0))
            }),
            grads: Vec::new(),
            split: plan.knobs.schedule.splits_backward(),
        };
        ctx.grads = plan
            .blocks
            .iter()
            .map(|b| {
                b.grads
                    .iter()
                    .map(|(op, c)| {
                        let g = match c.axis {
                            Axis::Tp | Axis::Ep => {
                                let (stream, dur, bytes) = ctx.comm(c);
                                Grad::Now(stream, dur, bytes)
                            }
                            Axis::Dp | Axis::ExpertDp => {
                                // The rules count bf16 gradients; autocast reduces fp32 ones.
                                let w = f(&c.bytes) * plan.knobs.precision.wire_factor() as f64;
                                let group = if c.axis == Axis::Dp {
                                    &ctx.dp
                                } else {
                                    &ctx.edp
                                };
                                Grad::Bucket {
                                    wire: DpWire::by_axis(|a| if a == c.axis { w } else { 0.0 }),
                                    full: w / bus_factor(c.kind, group.size.max(2)),
                                }
                            }
                        };
                        (*op, g)
                    })
                    .collect()
            })
            .collect();
        ctx
    }

    /// Seconds one micro-batch's backward spends adding the weight gradient of `params` local
    /// parameter elements to the fp32 gradient buffer ([`grad_accumulation_bytes`]).
    pub(super) fn grad_accumulation_seconds(&self, params: f64) -> f64 {
        if params <= 0.0 {
            return 0.0;
        }
        let k = &self.plan.knobs;
        let bytes = grad_accumulation_bytes(params, k);
        self.rates.memory_seconds(bytes)
    }

    /// Seconds one forward spends casting `params` local weight elements to bf16 under
    /// autocast ([`crate::parallel::amount::weight_cast`]; none under bf16).
    pub(super) fn weight_cast_seconds(&self, params: f64) -> f64 {
        let bytes = crate::parallel::amount::weight_cast(params, &self.plan.knobs);
        self.rates.memory_seconds(bytes)
    }

    /// [`dp_seconds`] over this mesh's gradient groups.
    pub(super) fn dp_seconds(&self, kind: Collective, wire: DpWire, calls: f64) -> f64 {
        dp_seconds(self.rates, kind, wire, calls, (&self.dp, &self.edp))
    }

    pub(super) fn comm(&self, c: &PlanComm) -> (Stream, f64, f64) {
        let (stream, axis) = match c.axis {
            Axis::Tp => (Stream::TpComm, self.tp),
            Axis::Dp => (Stream::DpComm, &self.dp),
            Axis::ExpertDp => (Stream::DpComm, &self.edp),
            Axis::Ep => (Stream::EpComm, &self.ep),
        };
        let calls = c.calls.max(1) as f64;
        match (&self.route, c.axis) {
            // Node by node: between the nodes and inside them at once, as long as the longer.
            (Some([to_nodes, in_node]), Axis::Ep) => {
                let (between, inside) = (f(&c.bytes) * to_nodes, f(&c.bytes) * in_node);
                let (across, within) = axis.by_node();
                let one = |bytes: f64, axis: &MeshAxis| {
                    self.rates.collective_seconds(c.kind, bytes / calls, axis)
                };
                let dur = calls * one(between, &across).max(one(inside, &within));
                (stream, dur, between)
            }
            _ => {
                let bytes = f(&c.bytes);
                let dur = calls * self.rates.collective_seconds(c.kind, bytes / calls, axis);
                (stream, dur, bytes)
            }
        }
    }

    /// Under `--tp-comm-overlap`: each blocking tensor-parallel collective of a forward pass
    /// next to a GEMM — the all-gather feeding it, the reduce-scatter it feeds — runs beside
    /// that GEMM, chunk by chunk (Transformer Engine's userbuffers): the collective no longer
    /// blocks, it starts with the GEMM, and the GEMM's step lasts as long as the longer of the
    /// two (the contention share is added where they overlap).
    pub(super) fn overlap_tp(&self, steps: &mut [SimStep], b: &PlanBlock) {
        if !self.plan.knobs.overlap.tp_comm {
            return;
        }
        let gemm = |s: &SimStep| {
            s.op.is_some_and(|k| b.ops[k].matmul && !b.ops[k].fused_attention)
        };
        let mut i = 0;
        while i < steps.len() {
            let tp =
                steps[i].stream == Stream::TpComm && steps[i].blocking && !steps[i].after_dgrad;
            if tp {
                let partner = if i + 1 < steps.len() && gemm(&steps[i + 1]) {
                    Some(i + 1)
                } else if i > 0 && gemm(&steps[i - 1]) && steps[i - 1].blocking {
                    // Fed by the GEMM before it: issue it with that GEMM.
                    steps.swap(i - 1, i);
                    Some(i)
                } else {
                    None
                };
                if let Some(j) = partner {
                    let c = if j == i + 1 { i } else { i - 1 };
                    steps[c].blocking = false;
                    // Pushed beside a running collective, the GEMM is lengthened by the
                    // contention share of the overlap: this makes it last max(GEMM × (1 + c),
                    // collective), never longer than the two one after the other.
                    let c_share = self.rates.contention;
                    steps[j].dur = steps[j].dur.max(steps[c].dur / (1.0 + c_share));
                    i = j + 1;
                    continue;
                }
            }
            i += 1;
        }
    }

    /// An attention operator under context parallelism, as Megatron-Core's ring attention runs
    /// it: its work in cp blocks, one per ring step; before each of the first cp − 1 blocks the
    /// rank issues the exchange of the keys and values the next block needs (point-to-point on
    /// the context-parallel stream; in the backward pass the keys and values travel with their
    /// gradients, twice the bytes), and each block after the first waits for the exchange issued
    /// before its predecessor. An exchange is hidden behind the block it runs beside, and only
    /// the part longer than that block shows; a block slows by the table's contention share
    /// while an exchange runs beside it (as every compute kernel next to a collective does).
    pub(super) fn ring(
        &self,
        i: usize,
        recompute: bool,
        backward: bool,
        ring: f64,
        block: impl Fn(u64) -> SimStep,
    ) -> Vec<SimStep> {
        let cp = self.plan.knobs.cp;
        let bytes = if backward { 2.0 * ring } else { ring };
        let dur = self
            .rates
            .collective_seconds(Collective::OneStep, bytes, &self.cp);
        let mut out = Vec::new();
        for j in 0..cp {
            if j + 1 < cp {
                out.push(SimStep {
                    blocking: false,
                    after_dgrad: false,
                    gather: false,
                    fused_next: false,
                    ring_wait: 0,
                    op: None,
                    step: i,
                    stream: Stream::CpComm,
                    dur,
                    flops: 0.0,
                    bytes,
                    recompute,
                });
            }
            out.push(block(j));
        }
        out
    }

    /// The events of one block's pass, with their durations.
    pub(super) fn steps(&self, bi: usize, pass: Pass) -> Vec<SimStep> {
        let b = &self.plan.blocks[bi];
        if pass == Pass::Weight {
            return self.weight_steps(bi);
        }
        let to_sim = |(i, s): (usize, &Step), recompute: bool| -> Vec<SimStep> {
            match s {
                Step::Compute(k) => self.compute_steps(b, pass, (i, *k), recompute),
                Step::Collective(c) | Step::Overlapped(c) | Step::AfterDgrad(c) => {
                    let (stream, dur, bytes) = self.comm(c);
                    vec![SimStep {
                        blocking: !matches!(s, Step::Overlapped(_)),
                        // With the weight gradient deferred, nothing of the operator is left to
                        // overlap a collective launched after its input gradient: it follows it.
                        after_dgrad: matches!(s, Step::AfterDgrad(_)) && !self.split,
                        gather: matches!(s, Step::Overlapped(_)),
                        fused_next: false,
                        ring_wait: 0,
                        op: None,
                        step: i,
                        stream,
                        dur,
                        flops: 0.0,
                        bytes,
                        recompute,
                    }]
                }
            }
        };
        if pass == Pass::Forward {
            let mut steps: Vec<SimStep> = b
                .forward
                .iter()
                .enumerate()
                .flat_map(|s| to_sim(s, false))
                .collect();
            self.overlap_tp(&mut steps, b);
            return steps;
        }
        let mut out = Vec::new();
        let recompute = if b.layer {
            self.plan.knobs.recompute
        } else {
            Recompute::None
        };
        if recompute == Recompute::Full {
            let mut steps: Vec<SimStep> = b
                .forward
                .iter()
                .enumerate()
                .flat_map(|s| to_sim(s, true))
                .collect();
            self.overlap_tp(&mut steps, b);
            out.extend(steps);
        }
        let core = |s: &Step| matches!(s, Step::Compute(k) if b.ops[*k].attention_core);
        let mut pending = recompute == Recompute::Selective;
        for (i, s) in b.backward.iter().enumerate() {
            if pending && core(s) {
                pending = false;
                for (j, fs) in b.forward.iter().enumerate() {
                    if core(fs) {
                        out.extend(to_sim((j, fs), true));
                    }
                }
            }
            out.extend(to_sim((i, s), false));
        }
        out
    }

    /// The weight-gradient pass of block `bi` (ZB-H1's W): in the backward's order, one compute
    /// step per operator with parameters or a weight gradient, its weight-gradient GEMM (one
    /// kernel) with the addition of its gradient to the buffer and its own parameter-gradient
    /// kernel; the operator's gradient reductions follow it. Empty unless the schedule splits
    /// the backward.
    pub(super) fn weight_steps(&self, bi: usize) -> Vec<SimStep> {
        let b = &self.plan.blocks[bi];
        if !self.split {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, s) in b.backward.iter().enumerate() {
            let Step::Compute(k) = *s else {
                continue;
            };
            let o = &b.ops[k];
            let w = WeightPart::of(o);
            let reduces = self.grads[bi].iter().any(|(g, _)| *g == k);
            if w.flops <= 0.0 && o.params.is_zero() && o.param_grad_bytes.is_zero() && !reduces {
                continue;
            }
            let gemms: Vec<[f64; 4]> = w.gemm.iter().map(|&g| o.gemms[g].to_f64()).collect();
            let (accumulate, own) = self.own_seconds(o, true);
            let param_kernel = own - self.fan_in_seconds(o);
            let dur = self
                .rates
                .gemm_seconds(w.flops, w.bytes, self.class(o), 1, &gemms)
                + accumulate
                + param_kernel;
            out.push(SimStep {
                blocking: true,
                after_dgrad: false,
                gather: false,
                fused_next: false,
                ring_wait: 0,
                op: Some(k),
                step: i,
                stream: Stream::Compute,
                dur,
                flops: w.flops,
                bytes: 0.0,
                recompute: false,
            });
        }
        out
    }

    /// Step `i` of block `b`'s `pass`, operator `k` computing (in the recomputed forward when
    /// `recompute`): one step, or under context parallelism, for an attention operator, its
    /// ring of blocks and exchanges ([`Ctx::ring`]).
    pub(super) fn compute_steps(
        &self,
        b: &PlanBlock,
        pass: Pass,
        (i, k): (usize, usize),
        recompute: bool,
    ) -> Vec<SimStep> {
        let cp = self.plan.knobs.cp;
        let o = &b.ops[k];
        let backward = pass == Pass::Backward && !recompute;
        // Under ZB-H1 the backward computes the input gradient only: the weight's share (its
        // GEMM, one kernel) runs in the weight pass ([`Ctx::weight_steps`]).
        let w = (backward && self.split).then(|| WeightPart::of(o));
        let (fl, by) = match (backward, &w) {
            (true, Some(w)) => (
                f(&o.backward_flops) - w.flops,
                f(&o.backward_bytes) - w.bytes,
            ),
            (true, None) => (f(&o.backward_flops), f(&o.backward_bytes)),
            _ => (f(&o.forward_flops), f(&o.forward_bytes)),
        };
        let wgemm = w.as_ref().and_then(|w| w.gemm);
        // The backward runs the block's operators in reverse: operator k − 1 next.
        let fused_next = backward
            && k > 0
            && b.ops[k - 1].fused_with_next
            && matches!(b.backward.get(i + 1), Some(Step::Compute(j)) if j + 1 == k);
        let gemms: Vec<[f64; 4]> = match (backward, o.gemms.split_first()) {
            (false, Some((g, _))) => vec![g.to_f64()],
            (true, Some((_, rest))) => (1..=rest.len())
                .filter(|i| Some(*i) != wgemm)
                .map(|i| o.gemms[i].to_f64())
                .collect(),
            (_, None) => Vec::new(),
        };
        // The weight's GEMM (its kernel, whether or not its shape is known) leaves the backward.
        let weight_kernel = w.as_ref().is_some_and(|w| w.flops > 0.0);
        let kernels = o
            .kernels(backward)
            .saturating_sub(u32::from(weight_kernel))
            .max(1);
        let step = |fl: f64, by: f64, ring_wait: u8| SimStep {
            blocking: true,
            after_dgrad: false,
            gather: false,
            fused_next,
            ring_wait,
            op: Some(k),
            step: i,
            stream: Stream::Compute,
            dur: self
                .rates
                .gemm_seconds(fl, by, self.class(o), kernels, &gemms),
            flops: fl,
            bytes: 0.0,
            recompute,
        };
        let (mut accumulate, mut own_kernels) = self.own_seconds(o, backward);
        if w.is_some() {
            // The gradient's addition to the buffer and its own kernel go with the weight.
            accumulate = 0.0;
            own_kernels = self.fan_in_seconds(o);
        }
        accumulate += self.fp8_cast_seconds(o, backward, recompute);
        let ring = f(&o.ring_bytes);
        if cp <= 1 || ring <= 0.0 {
            let mut one = step(fl, by, 0);
            one.dur += accumulate + own_kernels;
            return vec![one];
        }
        self.ring(i, recompute, backward, ring, |j| {
            let n = cp as f64;
            // Block j computes on the keys and values of exchange j − 1: the one issued before
            // its own (the latest, for the last block, which issues none).
            let wait = match j {
                0 => 0,
                _ if j + 1 < cp => 2,
                _ => 1,
            };
            let mut part = step(fl / n, by / n, wait);
            if j + 1 == cp {
                part.dur += accumulate;
            }
            part
        })
    }

    /// The kind of kernel `o` runs as under the plan's precision: its low-precision GEMMs at
    /// the FP4 peak under NVFP4.
    pub(super) fn class(&self, o: &PlanOp) -> KernelClass {
        match o.class() {
            KernelClass::Fp8Matmul
                if self.plan.knobs.precision.fp8_bytes().is_some_and(|b| b.fp4) =>
            {
                KernelClass::Fp4Matmul
            }
            c => c,
        }
    }

    /// Seconds an FP8 GEMM `o` spends casting its operands in a pass (none for other
    /// operators), each cast its own memory-bound kernel ([`Fp8Operands::cast_bytes`]): a
    /// forward casts its input, a backward its output gradient; the weight is cast once a step
    /// (on the first micro-batch, reused by the others and by recomputed forwards), timed as one
    /// kernel and spread evenly over the step's forwards.
    pub(super) fn fp8_cast_seconds(&self, o: &PlanOp, backward: bool, recompute: bool) -> f64 {
        let (Some(ops), Some(bytes)) = (o.fp8_operands(), self.plan.knobs.fp8_bytes()) else {
            return 0.0;
        };
        let [input, grad, weight] = ops.cast_bytes(bytes).map(|b| f(&b));
        let kernel = |bytes: f64| self.rates.op_seconds(0.0, bytes, KernelClass::Other, 1);
        let input = if o.fp8_casts_input {
            kernel(input)
        } else {
            0.0
        };
        if backward {
            kernel(grad)
        } else if recompute {
            input
        } else {
            input + kernel(weight) / self.plan.knobs.microbatches.max(1) as f64
        }
    }

    /// Seconds operator `o` spends besides its kernels in a pass (its `backward` or a forward):
    /// the weight's own traffic, and the kernels of its own a backward runs.
    pub(super) fn own_seconds(&self, o: &PlanOp, backward: bool) -> (f64, f64) {
        // The weight's own traffic: its gradient added to the buffer after a backward, its bf16
        // cast before a forward under autocast.
        let accumulate = if backward {
            self.grad_accumulation_seconds(f(&o.params))
        } else {
            self.weight_cast_seconds(f(&o.params))
        };
        // Kernels of their own once per backward: the parameter gradients' (a bias's reduction,
        // layer normalisation's second pass) and autograd's sums of the gradients whose last
        // reader this is.
        let own_kernels = if backward {
            let own = |bytes: &crate::sym::Rational| {
                self.rates.op_seconds(0.0, f(bytes), KernelClass::Other, 1)
            };
            own(&o.param_grad_bytes) + own(&o.fan_in_bytes)
        } else {
            0.0
        };
        (accumulate, own_kernels)
    }

    /// Seconds of autograd's sums of the gradients whose last reader is `o`, a kernel of their
    /// own in its backward (part of [`Ctx::own_seconds`]).
    pub(super) fn fan_in_seconds(&self, o: &PlanOp) -> f64 {
        self.rates
            .op_seconds(0.0, f(&o.fan_in_bytes), KernelClass::Other, 1)
    }
}
