//! The strategies a ranking tries: the mesh shapes and context-parallel degrees of N devices,
//! one job per shape, and the floating-point screen of every strategy a job enumerates.

use super::*;

/// The context-parallel degrees worth trying for `devices / tp` devices: 1, and every divisor
/// up to [`MAX_CP`] that keeps 2·cp dividing S and at least [`MIN_CP_TOKENS`] tokens per rank
/// (a degree fixed by `--fix cp=` needs only the first and the model's checks).
pub(super) fn context_degrees(
    model: &Model,
    values: &Bindings,
    left: u64,
    steer: &Steer,
) -> Vec<u64> {
    let seq = model
        .roles
        .sequence
        .as_ref()
        .and_then(|s| values.get(s))
        .filter(|s| s.is_integer())
        .and_then(|s| s.to_integer().to_u64());
    divisors(left)
        .into_iter()
        .filter(|&cp| {
            if !steer.cp.allows(cp) {
                return false;
            }
            if cp == 1 {
                return true;
            }
            let asked = steer.cp.fixed == Some(cp);
            let Some(seq) = seq else { return asked };
            // A degree asked for is kept so that, if the model refuses it, the search says why.
            asked
                || (cp <= MAX_CP
                    && seq / cp >= MIN_CP_TOKENS
                    && crate::parallel::check_context_parallel(model, values, cp).is_ok())
        })
        .collect()
}

pub(super) fn divisors(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (1..=n)
        .take_while(|d| d * d <= n)
        .filter(|d| n.is_multiple_of(*d))
        .collect();
    let big: Vec<u64> = v
        .iter()
        .rev()
        .map(|d| n / d)
        .filter(|d| d * d != n)
        .collect();
    v.extend(big);
    v
}

/// Every mesh shape (tp, cp, pp) of `opts.devices`, context-parallel degrees as
/// [`context_degrees`] allows them.
pub(super) fn mesh_shapes(model: &Model, values: &Bindings, opts: &Ctx) -> Vec<(u64, u64, u64)> {
    divisors(opts.devices)
        .into_iter()
        .flat_map(|tp| {
            context_degrees(model, values, opts.devices / tp, &opts.steer)
                .into_iter()
                .flat_map(move |cp| {
                    divisors(opts.devices / tp / cp)
                        .into_iter()
                        .map(move |pp| (tp, cp, pp))
                })
        })
        .collect()
}

/// The jobs of a search, in order: each mesh shape's (micro-batch count, layout variant) to
/// price, or why a shape or strategy is set aside. They are priced in parallel and merged in
/// this order, so the ranking and its rejections are those of one pass in order.
pub(super) fn jobs(
    model: &Model,
    values: &Bindings,
    opts: &Ctx,
    meshes: &[(u64, u64, u64)],
    variants: &Variants,
    auto: &AutoVariants,
    batch: &Rational,
) -> Vec<(usize, Job)> {
    let steer = &opts.steer;
    // A fixed micro-batch size or count overrides the cap on the count.
    let cap_microbatches = steer.mbs.fixed.is_none() && steer.microbatches.fixed.is_none();
    let mut jobs: Vec<(usize, Job)> = Vec::new();
    for (done, &(tp, cp, pp)) in meshes.iter().enumerate() {
        let dp = opts.devices / tp / pp / cp;
        if !steer.allows_mesh(dp, tp, pp) {
            continue;
        }
        let per_dp = batch / Rational::from_integer(dp.into());
        if !per_dp.is_integer() {
            jobs.push((done, Job::Reject(Rejection::BatchNotDivisible { dp })));
            continue;
        }
        let per_dp: u64 = per_dp.to_integer().try_into().unwrap_or(1);
        let mbs: Vec<u64> = divisors(per_dp)
            .into_iter()
            .filter(|m| {
                (!cap_microbatches || *m <= opts.max_microbatches)
                    && (pp == 1 || *m >= pp || *m == per_dp)
                    && steer.microbatches.allows(*m)
                    && steer.mbs.allows(per_dp / *m)
            })
            .collect();
        let vs = match degree_variants(opts, auto, tp) {
            Ok(vs) => vs,
            Err(why) => {
                jobs.push((done, Job::Reject(why)));
                continue;
            }
        };
        for m in mbs {
            for &v in &vs {
                let Variant { sp, sp_matters, .. } = &variants.list[v];
                let sp = *sp;
                if sp && tp == 1 {
                    continue;
                }
                // Sequence parallelism that splits nothing more is the same strategy as none:
                // priced once, unless asked for.
                if sp && !sp_matters && steer.sequence_parallel != Some(true) {
                    continue;
                }
                if steer.sequence_parallel.is_some_and(|x| x != sp) {
                    continue;
                }
                let base = Knobs {
                    dp,
                    tp,
                    pp,
                    microbatches: m,
                    schedule: Schedule::OneFOneB,
                    chunks: 1,
                    sequence_parallel: sp,
                    recompute: Recompute::None,
                    zero: 0,
                    ep: 1,
                    cp,
                    overlap: Default::default(),
                    precision: Precision::Bf16,
                    pipeline_split: steer.pipeline_split.unwrap_or_default(),
                    fp8_params: false,
                    fp8_dispatch: false,
                    node_dispatch: false,
                };
                if let Err(e) = check_model_limits(model, values, &base) {
                    jobs.push((done, Job::Reject(e.into())));
                    continue;
                }
                for &precision in &opts.precisions {
                    let base = Knobs {
                        precision,
                        ..base.clone()
                    };
                    jobs.push((done, Job::Price { base, v, per_dp }));
                }
            }
        }
    }
    jobs
}

/// The layouts a search tries at tensor-parallel degree `tp`: the annotated one (and, at
/// tp = 1, the only one), the auto ones and the e-graph's; why none, where there is none.
fn degree_variants(opts: &Ctx, auto: &AutoVariants, tp: u64) -> Result<Vec<usize>, Rejection> {
    let mut vs: Vec<usize> = Vec::new();
    if tp == 1 || opts.layouts != Layouts::Auto {
        vs.extend([0, 1]);
    }
    if let Some(a) = auto.variants.get(&tp) {
        vs.extend(a);
    }
    vs.extend(auto.egraph.get(&tp));
    if !vs.is_empty() {
        return Ok(vs);
    }
    Err(match auto.failed.get(&tp) {
        Some(e) => Rejection::NoAutoLayout {
            tp,
            why: Box::new(e.clone()),
        },
        None => Rejection::AutoIsAnnotated { tp },
    })
}

/// What pricing a search's jobs in floating point needs.
pub(super) struct Pricer<'a> {
    pub(super) model: &'a Model,
    pub(super) values: &'a Bindings,
    pub(super) opts: &'a Ctx<'a>,
    pub(super) variants: &'a Variants,
    pub(super) kernels: crate::parallel::kernels::KernelEfficiency,
    pub(super) has_experts: bool,
    /// κ of each tier, as floats.
    pub(super) kappa: Kappa,
    pub(super) kappa_hbm: f64,
    pub(super) overlap: f64,
}

/// κ of the intra- and inter-node tiers, as floats.
#[derive(Clone, Copy)]
pub(super) struct Kappa {
    pub(super) intra: f64,
    pub(super) inter: f64,
}

impl Kappa {
    pub(super) fn of(&self, t: Tier) -> f64 {
        match t {
            Tier::Intra => self.intra,
            Tier::Inter => self.inter,
        }
    }
}

impl<'a> Pricer<'a> {
    pub(super) fn new(
        model: &'a Model,
        values: &'a Bindings,
        calib: &Calibration,
        opts: &'a Ctx<'a>,
        variants: &'a Variants,
    ) -> Pricer<'a> {
        Pricer {
            model,
            values,
            opts,
            variants,
            kernels: crate::parallel::kernels::KernelEfficiency::of(calib),
            has_experts: !crate::parallel::moe::moe_sites(model).is_empty(),
            kappa: Kappa {
                intra: calib.balance(Tier::Intra).to_f64().unwrap_or(f64::MAX),
                inter: calib.balance(Tier::Inter).to_f64().unwrap_or(f64::MAX),
            },
            kappa_hbm: calib.hbm_balance().to_f64().unwrap_or(f64::MAX),
            overlap: calib.overlap_saving().to_f64().unwrap_or(1.0),
        }
    }

    /// A [`Job::Price`]: its blocks' numbers, and every schedule, expert degree, recomputation
    /// and ZeRO stage of it the steering allows, estimated.
    pub(super) fn price_job(&self, base: &Knobs, v: usize, per_dp: u64) -> JobPriced {
        let (model, values, variants, opts) = (self.model, self.values, self.variants, self.opts);
        let (steer, kernels) = (&opts.steer, &self.kernels);
        let (kappa_hbm, overlap) = (self.kappa_hbm, self.overlap);
        let kappa = |t: Tier| self.kappa.of(t);
        let Variant { analysis, sums, .. } = &variants.list[v];
        let (dp, m, cp) = (base.dp, base.microbatches, base.cp);
        let key = numbers_key(&Cand { k: base.clone(), v });
        let b = microbatch_bindings(model, values, base);
        let numbers = check_divisibility(model, analysis, &b, base)
            .and_then(|()| block_numbers_summed(analysis, sums, &b, kernels));
        let mut out: Vec<Result<(Cand, Estimate), Rejection>> = Vec::new();
        let Ok(numbers_ok) = &numbers else {
            if let Err(e) = &numbers {
                out.push(Err(e.clone().into()));
            }
            return (key, numbers, out);
        };
        let schedules = self.schedules(base, numbers_ok);
        let eps = self.expert_degrees(dp, cp);
        let mut batch_knobs: Vec<Knobs> = Vec::new();
        for &ep in &eps {
            for &(schedule, chunks) in &schedules {
                for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                    let zeros: &[u8] = if dp * cp > 1 { &[0, 1, 2, 3] } else { &[0] };
                    for &zero in zeros {
                        let mut k = Knobs {
                            schedule,
                            chunks,
                            recompute,
                            zero,
                            ep,
                            ..base.clone()
                        };
                        k.overlap = steer.overlap_for(&k);
                        k.fp8_params = steer.fp8_params_for(&k);
                        k.fp8_dispatch = steer.fp8_dispatch_for(&k);
                        // Node by node where the expert-parallel group spreads evenly over
                        // its nodes (else the flat all-to-all, as `cost` would refuse it).
                        k.node_dispatch = steer.node_dispatch_for(&k)
                            && Mesh::of(&k, opts.gpus_per_node).ep_even(k.ep);
                        if !steer.allows(&k, per_dp / m) {
                            continue;
                        }
                        if let Some(why) = steer.stack_refuses(&k) {
                            out.push(Err(why));
                            continue;
                        }
                        if let Err(e) = crate::strategy::check_knobs(&k) {
                            out.push(Err(e.into()));
                            continue;
                        }
                        batch_knobs.push(k);
                    }
                }
            }
        }
        let priced = estimate_variants(
            model,
            numbers_ok,
            &batch_knobs,
            &kappa,
            kappa_hbm,
            overlap,
            opts.gpus_per_node,
        );
        for (k, e) in batch_knobs.into_iter().zip(priced) {
            out.push(e.map(|e| (Cand { k, v }, e)).map_err(Rejection::from));
        }
        (key, numbers, out)
    }

    /// The schedules (with their chunk counts) a [`Job::Price`] of `base` tries: GPipe and
    /// 1F1B, the others the steering names, and every interleaving the layers allow.
    fn schedules(&self, base: &Knobs, numbers_ok: &[BlockNumbers]) -> Vec<(Schedule, u64)> {
        let (model, opts) = (self.model, self.opts);
        let steer = &opts.steer;
        let (pp, m) = (base.pp, base.microbatches);
        let mut schedules: Vec<(Schedule, u64)> = if pp == 1 {
            vec![(Schedule::OneFOneB, 1)]
        } else {
            vec![(Schedule::Gpipe, 1), (Schedule::OneFOneB, 1)]
        };
        // ZB-H1 only where asked for (`--fix schedule=zb-h1`): the default search stays the
        // schedules Megatron-LM runs.
        if pp > 1 && steer.schedule == Some(Schedule::ZeroBubbleH1) {
            schedules.push((Schedule::ZeroBubbleH1, 1));
        }
        // DualPipe likewise only under `--fix schedule=dualpipe`, and only where it runs (pp
        // even, micro-batches even and at least 2·pp).
        if pp > 1
            && steer.schedule == Some(Schedule::DualPipe)
            && Schedule::DualPipe.refuses(pp, m).is_none()
        {
            schedules.push((Schedule::DualPipe, 1));
        }
        // ZB-V likewise only under `--fix schedule=zb-v`; where its 2·pp chunks do not divide
        // the layers, pricing refuses it and the refusal is counted with its reason.
        if pp > 1 && steer.schedule == Some(Schedule::ZeroBubbleV) {
            schedules.push((Schedule::ZeroBubbleV, 1));
        }
        // DualPipeV likewise only under `--fix schedule=dualpipev`; pricing refuses fewer than
        // 2·pp micro-batches and layers its 2·pp chunks do not divide, each counted with its
        // reason.
        if pp > 1 && steer.schedule == Some(Schedule::DualPipeV) {
            schedules.push((Schedule::DualPipeV, 1));
        }
        // Interleaving: every chunk count the layers allow (layers divisible by pp × chunks;
        // with the embedding or the loss counted as layers where `--fix account=` says so), up
        // to the cap; the micro-batch count must be a multiple of pp (Narayanan et al. SC'21).
        if pp > 1 && m.is_multiple_of(pp) {
            let layers = layer_count(model, numbers_ok) + base.pipeline_split.extra();
            let per_stage = layers / pp;
            let most = steer.chunks.fixed.unwrap_or(opts.max_chunks);
            for v in 2..=most.min(per_stage) {
                if per_stage.is_multiple_of(v) && layers.is_multiple_of(pp * v) {
                    schedules.push((Schedule::Interleaved, v));
                }
            }
        }
        schedules
    }

    /// Expert parallelism for mixture-of-experts models: every degree dividing the data- and
    /// context-parallel ranks (the expert-parallel groups are drawn from them) and the experts.
    fn expert_degrees(&self, dp: u64, cp: u64) -> Vec<u64> {
        if self.has_experts {
            divisors(dp * cp)
                .into_iter()
                .filter(|&ep| {
                    self.opts.steer.ep.allows(ep)
                        && crate::parallel::moe::check_expert_parallel(
                            self.model,
                            self.values,
                            dp,
                            cp,
                            ep,
                        )
                        .is_ok()
                })
                .collect()
        } else {
            vec![1]
        }
    }
}
