//! The exact pricing of a strategy's stages: the links its traffic crosses, each stage's
//! compute, traffic and memory in the fold's number type, and the relative cost of a step on the
//! busiest device.

use super::*;

/// The links a strategy's traffic crosses and their machine balance: the tier of each parallel
/// dimension's links under the strategy's mesh, and κ (FLOP-equivalents per byte) of each, and
/// of HBM.
pub(super) struct Links {
    /// The mesh the tiers come from.
    pub(super) mesh: Mesh,
    /// Tensor-parallel links.
    pub(super) tp_tier: Tier,
    /// Gradient-reduction links: gradients are reduced over the ranks holding the same
    /// weights, dp × cp.
    pub(super) dp_tier: Tier,
    /// Context-parallel ring links.
    pub(super) cp_tier: Tier,
    /// Pipeline point-to-point links.
    pub(super) p2p_tier: Tier,
    /// Expert-parallel all-to-all links.
    pub(super) ep_tier: Tier,
    /// κ of each.
    pub(super) kap: Kappas<Rational>,
    /// κ of the intra- and inter-node tiers.
    pub(super) tiers: [Rational; 2],
}

impl Links {
    /// The links of `k` on nodes of `gpus_per_node` devices, priced by `calib`.
    pub(super) fn of(k: &Knobs, calib: &Calibration, gpus_per_node: u64) -> Links {
        let mesh = Mesh::of(k, gpus_per_node);
        let tp_tier = mesh.axis(AxisKind::Tp).tier;
        let dp_tier = mesh.grad_axis().tier;
        let cp_tier = mesh.cp_axis().tier;
        let p2p_tier = mesh.p2p_tier();
        let ep_tier = mesh.ep_tier(k.ep);
        Links {
            kap: mesh_kappas(
                &mesh,
                k,
                |t| calib.balance(t),
                calib.hbm_balance(),
                calib.overlap_saving(),
            ),
            tiers: [calib.balance(Tier::Intra), calib.balance(Tier::Inter)],
            mesh,
            tp_tier,
            dp_tier,
            cp_tier,
            p2p_tier,
            ep_tier,
        }
    }

    /// κ of a tier.
    pub(super) fn tier_kappa(&self, tier: Tier) -> &Rational {
        &self.tiers[usize::from(tier == Tier::Inter)]
    }

    /// The balances the floating-point pipeline plan uses.
    pub(super) fn kappas(&self) -> Kappas<f64> {
        self.kap.map(float)
    }
}

/// Each block's exact per-micro-batch costs under `k` ([`BlockCost::of`]).
pub(super) fn block_costs<T: Priced>(
    numbers: &[BlockNumbers<T>],
    layer_block: &[bool],
    k: &Knobs,
    share: &Rational,
) -> Result<Vec<BlockCost<T>>, StrategyError> {
    numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let e = expert_view(n, k, share)?;
            Ok(BlockCost::of(
                &n.exact,
                e,
                layer_block[bi],
                k.recompute,
                k.precision,
            ))
        })
        .collect()
}

/// Bytes one device of a stage moves per step on each parallel dimension.
#[derive(Clone)]
pub(super) struct Traffic<T> {
    /// Gradient reduction (and, under ZeRO-3, weight gathering) over the data-parallel group.
    pub(super) dp: T,
    /// The same for expert weights under expert parallelism, over the ranks holding the same
    /// experts.
    pub(super) edp: T,
    /// Tensor-parallel collectives, per-micro-batch and gradient ones.
    pub(super) tp: T,
    /// Pipeline point-to-point activations and their gradients.
    pub(super) p2p: T,
    /// Expert-parallel all-to-alls.
    pub(super) ep: T,
    /// Context-parallel ring passes.
    pub(super) cp: T,
}

/// Memory per device, in the fold's number type ([`Memory`] of the values).
#[derive(Clone)]
pub(super) struct Held<T> {
    pub(super) params: T,
    pub(super) grads: T,
    pub(super) optimizer: T,
    pub(super) activations: T,
    pub(super) total: T,
}

impl<T: Priced> Held<T> {
    pub(super) fn values(&self) -> Memory {
        let v = |x: &T| x.value().clone();
        Memory {
            params: v(&self.params),
            grads: v(&self.grads),
            optimizer: v(&self.optimizer),
            activations: v(&self.activations),
            total: v(&self.total),
        }
    }

    pub(super) fn formulas(&self) -> MemoryFormulas {
        let f = |x: &T| x.formula().cloned();
        MemoryFormulas {
            params: f(&self.params),
            grads: f(&self.grads),
            optimizer: f(&self.optimizer),
            activations: f(&self.activations),
            total: f(&self.total),
        }
    }
}

/// One stage priced exactly.
#[derive(Clone)]
pub(super) struct PricedStage<T> {
    /// Stage number.
    pub(super) stage: u64,
    /// Its block copies, by name.
    pub(super) items: Vec<(String, u64)>,
    /// FLOPs per device per step, recomputation included.
    pub(super) flops: T,
    /// Of them, the backward pass's without recomputation.
    pub(super) backward: T,
    /// Of them, the weight gradients' (what ZB-H1 defers).
    pub(super) weight: T,
    /// Its DualPipe bubble per step ([`BlockCost::dualpipe_bubble`]; zero under the other
    /// schedules).
    pub(super) dualpipe: T,
    /// Of them, the forward FLOPs recomputation reruns.
    pub(super) recomputed: T,
    /// κ_hbm × HBM bytes per step.
    pub(super) hbm_cost: T,
    /// What its kernels take beyond their FLOPs per step.
    pub(super) kernel_cost: T,
    /// Memory per device.
    pub(super) memory: Held<T>,
    /// Its time in FLOP-equivalents: compute, HBM traffic, and tensor-, expert- and
    /// context-parallel traffic (what runs once per micro-batch on the stage).
    pub(super) time: T,
    /// Its bytes per dimension.
    pub(super) traffic: Traffic<T>,
    /// Of its point-to-point bytes, the DualPipe sum of its copies' gradients with its
    /// mirror's ([`BlockCost::grad_sum_bytes`]; zero under the other schedules).
    pub(super) grad_sum: T,
    /// The FLOP-equivalents of its data-parallel traffic that run under its compute
    /// ([`BlockCost::dp_hidden`]).
    pub(super) hidden: T,
    /// Whether the compute it runs under, not the traffic, bounds `hidden`.
    pub(super) hidden_by_compute: bool,
}

impl<T: Priced> PricedStage<T> {
    /// What the evaluation reports of it.
    pub(super) fn report(&self) -> Stage {
        Stage {
            stage: self.stage,
            items: self.items.clone(),
            flops: self.flops.value().clone(),
            hbm_cost: self.hbm_cost.value().clone(),
            kernel_cost: self.kernel_cost.value().clone(),
            memory: self.memory.values(),
        }
    }
}

/// What pricing the stages of one strategy exactly needs.
pub(super) struct StagePricer<'a, T> {
    pub(super) a: &'a Analysis,
    pub(super) k: &'a Knobs,
    pub(super) costs: &'a [BlockCost<T>],
    pub(super) plan: &'a Plan,
    pub(super) layer_block: &'a [bool],
    /// The machine balances, as constants of the fold.
    pub(super) kap: Kappas<T>,
    /// Micro-batches per step.
    pub(super) m: T,
    /// Under full recomputation, the saved activations of the largest layer (what the
    /// layer being recomputed holds again).
    pub(super) full_layer_saved: T,
}

impl<T: Priced> StagePricer<'_, T> {
    /// Memory per device of stage `s` (its summed costs `c`): weights, gradients and optimizer
    /// state ([`BlockCost::state`]) and the activations of the micro-batches in flight.
    pub(super) fn memory(&self, c: &BlockCost<T>, s: usize) -> Held<T> {
        let [params, grads, optimizer, activations] =
            self.plan
                .memory(self.costs, self.k, s, c, &self.full_layer_saved);
        let total = params.clone() + grads.clone() + optimizer.clone() + activations.clone();
        Held {
            params,
            grads,
            optimizer,
            activations,
            total,
        }
    }

    /// The stages `pick`, priced exactly: stages in the same place ([`Plan::place`]) share
    /// their times and traffic, priced once; each has its own memory. Under DualPipe a stage
    /// stands for its rank, whose place is its two stages'.
    pub(super) fn price_all(&self, pick: &[usize]) -> Vec<PricedStage<T>> {
        type Place<'p> = (StagePlace<'p>, Option<StagePlace<'p>>);
        let mut known: Vec<(Place<'_>, usize, BlockCost<T>)> = Vec::new();
        let mut priced: Vec<PricedStage<T>> = Vec::with_capacity(pick.len());
        let place_of = |s: usize| self.plan.place(s, self.k.pp);
        for &s in pick {
            let place = (place_of(s), dualpipe_mirror(self.k, s).map(place_of));
            if let Some((_, at, c)) = known.iter().find(|(p, ..)| *p == place) {
                let mut p = priced[*at].clone();
                p.stage = s as u64;
                p.memory = self.memory(c, s);
                priced.push(p);
            } else {
                let c = BlockCost::stage(self.costs, self.plan.counts(s));
                let p = self.price(s, &c);
                known.push((place, priced.len(), c));
                priced.push(p);
            }
        }
        priced
    }

    /// Pipeline point-to-point bytes of stage `s` per micro-batch.
    pub(super) fn boundary(&self, s: usize) -> T {
        stage_boundary(self.plan, self.k, self.layer_block, s, |b| {
            self.costs[b].boundary.clone()
        })
    }

    /// Stage `s` (its summed costs `c`) priced exactly: its compute (memory-bound operators
    /// cost their HBM traffic at κ_hbm), memory, time and traffic. Under DualPipe, its rank
    /// ([`dualpipe_rank`]): stages s and pp − 1 − s, half the micro-batches through each, as the
    /// timeline runs them.
    pub(super) fn price(&self, s: usize, c: &BlockCost<T>) -> PricedStage<T> {
        match dualpipe_rank(self.plan, self.k, s) {
            Some((mirror, counts)) => {
                let rank = BlockCost::stage(self.costs, &counts);
                let half = self.m.clone() / T::int(2);
                let p2p = (self.boundary(s) + self.boundary(mirror)) * half.clone();
                self.price_as(s, c, &rank, &half, p2p)
            }
            None => {
                let p2p = self.boundary(s) * self.m.clone();
                self.price_as(s, c, c, &self.m, p2p)
            }
        }
    }

    /// Stage `s` (its summed costs `own`, for its memory) priced as its device runs it: the
    /// summed costs `c` for `m` micro-batches, sending `p2p` bytes of activations and their
    /// gradients, and under DualPipe the sum of its copies' gradients with its mirror's
    /// ([`BlockCost::grad_sum_bytes`]) over the same link.
    pub(super) fn price_as(
        &self,
        s: usize,
        own: &BlockCost<T>,
        c: &BlockCost<T>,
        m: &T,
        p2p: T,
    ) -> PricedStage<T> {
        let kap = &self.kap;
        let grad_sum = c.grad_sum_bytes(self.k);
        let traffic = Traffic {
            dp: c.dp_traffic(self.k),
            edp: c.edp_traffic(self.k),
            tp: c.tp_traffic(m, self.k),
            p2p: p2p + grad_sum.clone(),
            ep: c.ep_bytes.clone() * m.clone(),
            cp: c.cp_bytes.clone() * m.clone(),
        };
        // The stage's own blocks (under DualPipe its rank also runs the mirrored stage's).
        let items = self
            .plan
            .counts(s)
            .iter()
            .map(|(b, c)| (self.a.blocks[*b].name.clone(), *c))
            .collect();
        let (hidden, hidden_by_compute) = c.dp_hidden_bound(m, kap, self.k);
        PricedStage {
            stage: s as u64,
            items,
            flops: c.compute.clone() * m.clone(),
            backward: (c.backward.clone() - c.recomputed.clone()) * m.clone(),
            weight: c.weight.clone() * m.clone(),
            dualpipe: if self.k.schedule.overlaps_chunks() {
                c.dualpipe_bubble(m, kap, self.k)
            } else {
                T::zero()
            },
            recomputed: c.recomputed.clone() * m.clone(),
            hbm_cost: kap.hbm.clone() * c.step_hbm(m, self.k),
            kernel_cost: c.kernel.clone() * m.clone(),
            memory: self.memory(own, s),
            time: c.time(m, kap, self.k),
            traffic,
            grad_sum,
            hidden,
            hidden_by_compute,
        }
    }
}

/// The stages worth pricing exactly, in order: every stage within a relative 1e-9 of a maximum
/// of the floating-point `rough` (time, full time, memory), so that a near tie cannot hide the
/// true maximum. Stages with the same blocks and neighbours have the same exact times, so one of
/// each kind is priced for the times; their memory also depends on the micro-batches in flight,
/// so one of each kind and count is priced for memory. With `detail`, all stages.
pub(super) fn stages_to_price(
    rough: &[RoughStage],
    plan: &Plan,
    k: &Knobs,
    detail: bool,
) -> Vec<usize> {
    if detail {
        return (0..plan.stages).collect();
    }
    let place = |s: usize| plan.place(s, k.pp);
    // The micro-batches a stage holds, which its memory depends on besides its place.
    let fly = |s: usize| crate::parallel::amount::in_flight::<Rational>(k, plan.v, s);
    // Under DualPipe a stage stands for its rank, whose place is its two stages'.
    let at = |s: usize| (place(s), dualpipe_mirror(k, s).map(place));
    let mut pick: Vec<usize> = Vec::new();
    let mut timed = Vec::new();
    let mut held = Vec::new();
    let measures: [fn(&RoughStage) -> f64; 3] = [|x| x.time, |x| x.full, |x| x.memory];
    for (m, get) in measures.iter().enumerate() {
        let top = rough.iter().map(get).fold(f64::MIN, f64::max);
        for (s, x) in rough.iter().enumerate() {
            if get(x) < top - top.abs() * 1e-9 || pick.contains(&s) {
                continue;
            }
            let p = at(s);
            let new = if m < 2 {
                !timed.contains(&p)
            } else {
                !held.contains(&(p, fly(s)))
            };
            if new {
                held.push((p, fly(s)));
                timed.push(p);
                pick.push(s);
            }
        }
    }
    pick.sort_unstable();
    pick
}

/// The busiest device and the relative cost of a step on it.
pub(super) struct Busiest<T> {
    /// Position in the priced stages of the stage with the largest time including its own
    /// data-parallel and point-to-point traffic: the busiest device.
    pub(super) at: usize,
    /// Idle fraction of the pipeline schedule, (pp − 1)/(m·v), of the slowest stage's time
    /// (under ZB-H1, of that time less twice its weight gradients': [`zb_h1_bubble`]).
    pub(super) bubble_fraction: Rational,
    /// Relative cost of a step, in the fold's number type (the total's split into FLOP and
    /// byte parts aside).
    pub(super) parts: RelativeParts<T>,
    /// The part of the total that is FLOPs ([`RelativeCost::flop_part`]).
    pub(super) flop_part: Rational,
}

/// The relative cost's parts in the fold's number type.
pub(super) struct RelativeParts<T> {
    pub(super) compute: T,
    pub(super) kernels: T,
    pub(super) comm_intra: T,
    pub(super) comm_inter: T,
    pub(super) bubble: T,
    pub(super) hidden: T,
    pub(super) total: T,
}

impl<T: Priced> Busiest<T> {
    /// The relative cost's values.
    pub(super) fn relative(&self) -> RelativeCost {
        let p = &self.parts;
        let v = |x: &T| x.value().clone();
        RelativeCost {
            compute: v(&p.compute),
            kernels: v(&p.kernels),
            comm_intra: v(&p.comm_intra),
            comm_inter: v(&p.comm_inter),
            bubble: v(&p.bubble),
            hidden: v(&p.hidden),
            byte_part: v(&p.total) - &self.flop_part,
            flop_part: self.flop_part.clone(),
            total: v(&p.total),
        }
    }

    /// Their formulas.
    pub(super) fn formulas(&self) -> RelativeFormulas {
        let p = &self.parts;
        let f = |x: &T| x.formula().cloned();
        RelativeFormulas {
            compute: f(&p.compute),
            kernels: f(&p.kernels),
            comm_intra: f(&p.comm_intra),
            comm_inter: f(&p.comm_inter),
            bubble: f(&p.bubble),
            hidden: f(&p.hidden),
            total: f(&p.total),
        }
    }
}

/// ZB-H1's bubble on a stage of step time `time` whose weight gradients take `weight` (both
/// over the step's m micro-batches), with `fraction` = (pp − 1)/m: Qi et al.,
/// arXiv:2401.10241, §3.1, give it as (p − 1)(T_F + T_B − T_W) per step, where 1F1B idles
/// (p − 1)(T_F + T_B + T_W): the per-micro-batch stage time less twice its W, times p − 1.
/// Never negative: a weight gradient's FLOPs are those of a forward product it mirrors (the
/// einsum of the output gradient with the same operand, over the same indices), so T_W ≤ T_F.
pub(super) fn zb_h1_bubble<T: Priced>(time: &T, weight: &T, fraction: T) -> T {
    (time.clone() - weight.clone() * T::int(2)) * fraction
}

/// κ times the bytes of traffic `t` on the intra- and inter-node links: rings (gradient
/// reductions of each data-parallel group, tensor-parallel collectives) split over the tiers
/// their group crosses, the other traffic on its dimension's tier.
pub(super) fn tier_costs<T: Priced>(
    t: &Traffic<T>,
    links: &Links,
    kap: &Kappas<T>,
    k: &Knobs,
) -> (T, T) {
    let (mut intra, mut inter) = (T::zero(), T::zero());
    let mut add = |tier: Tier, c: T| match tier {
        Tier::Intra => intra = std::mem::take(&mut intra) + c,
        Tier::Inter => inter = std::mem::take(&mut inter) + c,
    };
    // Gradient reductions and tensor-parallel collectives are rings, hierarchical where their
    // group spans nodes: their bytes split over the tiers.
    let rings = [
        (&t.dp, links.mesh.grad_axis()),
        (&t.edp, links.mesh.expert_grad_axis(k.ep)),
        (&t.tp, links.mesh.axis(AxisKind::Tp).clone()),
    ];
    for (bytes, axis) in rings {
        for (tier, share) in axis.tier_fractions() {
            add(
                tier,
                T::constant(links.tier_kappa(tier) * share) * bytes.clone(),
            );
        }
    }
    for (bytes, tier, kappa) in [
        (&t.p2p, links.p2p_tier, &kap.p2p),
        (&t.ep, links.ep_tier, &kap.ep),
        (&t.cp, links.cp_tier, &kap.cp),
    ] {
        add(tier, kappa.clone() * bytes.clone());
    }
    (intra, inter)
}

/// Finds the busiest of the priced stages and prices a step on it: its compute, its traffic on
/// intra- and inter-node links, and the bubble, the longest per-micro-batch stage time idle for
/// the bubble fraction.
pub(super) fn relative_cost<T: Priced>(
    priced: &[PricedStage<T>],
    links: &Links,
    kap: &Kappas<T>,
    k: &Knobs,
    v: u64,
) -> Result<Busiest<T>, StrategyError> {
    let full: Vec<Rational> = priced
        .iter()
        .map(|p| {
            p.time.value()
                + kap.dp.value() * p.traffic.dp.value()
                + kap.edp.value() * p.traffic.edp.value()
                - p.hidden.value()
                + kap.p2p.value() * p.traffic.p2p.value()
        })
        .collect();
    let bs = (0..full.len())
        .max_by(|x, y| full[*x].cmp(&full[*y]))
        .ok_or(StrategyError::Nothing("stages"))?;
    let tm = (0..priced.len())
        .max_by(|x, y| priced[*x].time.value().cmp(priced[*y].time.value()))
        .ok_or(StrategyError::Nothing("stages"))?;
    let mut bubble_fraction = Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    let fraction = T::constant(bubble_fraction.clone());
    let mut bubble = priced[tm].time.clone() * fraction.clone();
    // What of the slowest stage's FLOPs idles: its time's share for the schedule.
    let mut idle_flops =
        priced[tm].flops.value() + priced[tm].hbm_cost.value() + priced[tm].kernel_cost.value();
    let slowest = &priced[tm];
    if k.overlapped_chunks() {
        // DualPipe and DualPipeV: arXiv:2412.19437 Table 2 ([`BlockCost::dualpipe_bubble`]); its FLOP part
        // in the slowest stage's own proportion, so that times (pp − 1)/m below it comes out.
        bubble = slowest.dualpipe.clone();
        if !slowest.time.value().is_zero() {
            idle_flops = idle_flops * bubble.value() / slowest.time.value()
                * Rational::new((k.microbatches * v).into(), (k.pp - 1).into());
            bubble_fraction = bubble.value() / slowest.time.value();
        }
    } else if k.schedule.splits_backward() {
        bubble = zb_h1_bubble(&slowest.time, &slowest.weight, fraction.clone());
        idle_flops -= slowest.weight.value() * Rational::from_integer(2.into());
        if !slowest.time.value().is_zero() {
            bubble_fraction = bubble.value() / slowest.time.value();
        }
    }
    if k.pp > 1 {
        // The slowest stage's time: a maximum over the partition's stages.
        bubble = bubble.piecewise();
    }
    let busiest = &priced[bs];
    let (intra, inter) = tier_costs(&busiest.traffic, links, kap, k);
    let compute = busiest.flops.clone() + busiest.hbm_cost.clone();
    let kernels = busiest.kernel_cost.clone();
    let hidden = busiest.hidden.clone();
    let total = compute.clone() + kernels.clone() + intra.clone() + inter.clone() + bubble.clone()
        - hidden.clone();
    let mut flop_part = compute.value()
        + kernels.value()
        + idle_flops * Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    // What overlap saves scales with the links' κ where the traffic bounds it, and is a FLOP
    // part where the compute it runs under does.
    if busiest.hidden_by_compute {
        flop_part -= hidden.value();
    }
    Ok(Busiest {
        at: bs,
        bubble_fraction,
        flop_part,
        parts: RelativeParts {
            compute,
            kernels,
            comm_intra: intra,
            comm_inter: inter,
            bubble,
            hidden,
            total,
        },
    })
}
