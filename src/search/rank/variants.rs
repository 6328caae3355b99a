//! The layout variants a ranking prices: the model's annotated layout, the per-operator
//! search's auto layouts per tensor-parallel degree, and the e-graph's rewrites of them.

use super::*;

/// One layout the search prices: sequence parallelism on or off, the annotated layout or a
/// degree's auto layout, analysed and bound once.
pub(super) struct Variant {
    /// Sequence parallelism.
    pub(super) sp: bool,
    /// Whether it is an auto layout (the auto layout of the strategy's degree: the layouts are
    /// symbolic in the degree, so degrees whose searches agree share one).
    pub(super) auto: bool,
    /// Whether sequence parallelism changes anything (it splits the operators the layout
    /// replicates; an auto layout may replicate none).
    pub(super) sp_matters: bool,
    /// Whether it is the e-graph's variant of an auto layout.
    pub(super) egraph: bool,
    pub(super) analysis: Analysis,
    pub(super) sums: Vec<crate::parallel::evaluate::BlockSums>,
}

/// The layouts priced.
pub(super) struct Variants {
    pub(super) list: Vec<Variant>,
    /// The auto layout of each degree.
    pub(super) autos: BTreeMap<u64, AutoLayout>,
    /// The e-graph's variant of each degree's auto layout.
    pub(super) egraphs: BTreeMap<u64, EGraphLayout>,
}

impl Variants {
    pub(super) fn analysis(&self, c: &Cand) -> &Analysis {
        &self.list[c.v].analysis
    }

    pub(super) fn kind(&self, v: usize) -> LayoutKind {
        if self.list[v].egraph {
            LayoutKind::EGraph
        } else if self.list[v].auto {
            LayoutKind::Auto
        } else {
            LayoutKind::Annotated
        }
    }

    pub(super) fn key(&self, v: usize, e: &Evaluation) -> (LayoutKind, u64) {
        layout_key(self.kind(v), e)
    }

    pub(super) fn layout(&self, v: usize, tp: u64) -> RowLayout {
        if self.list[v].egraph {
            return RowLayout {
                kind: LayoutKind::EGraph,
                auto: self
                    .autos
                    .get(&tp)
                    .zip(self.egraphs.get(&tp))
                    .map(|(a, e)| AutoLayout {
                        placements: e.placements.clone(),
                        ..a.clone()
                    }),
            };
        }
        match self.list[v].auto {
            true => RowLayout {
                kind: LayoutKind::Auto,
                auto: self.autos.get(&tp).cloned(),
            },
            false => RowLayout::annotated(),
        }
    }
}

impl Variants {
    /// The annotated layout, without and with sequence parallelism.
    pub(super) fn new(model: &Model, values: &Bindings) -> Result<Variants, SearchError> {
        let none = BTreeMap::new();
        Ok(Variants {
            list: vec![
                Variant::new(model, values, false, &none, false)?,
                Variant::new(model, values, true, &none, false)?,
            ],
            autos: BTreeMap::new(),
            egraphs: BTreeMap::new(),
        })
    }
}

impl Variant {
    /// A layout analysed once: its context-parallel analysis (at p_cp = 1 it evaluates exactly
    /// as the plain one), each block's per-operator polynomials summed once, for every (dp, tp,
    /// micro-batch) choice. Every symbol the search does not vary is bound (all but the batch,
    /// which micro-batching divides, and the vocabulary, which tensor parallelism may pad).
    pub(super) fn new(
        model: &Model,
        values: &Bindings,
        sp: bool,
        overrides: &BTreeMap<String, String>,
        auto: bool,
    ) -> Result<Variant, SearchError> {
        let mut fixed = values.clone();
        if let Some(b) = &model.batch {
            fixed.remove(b);
        }
        if let Some(v) = &model.roles.vocab {
            fixed.remove(v);
        }
        let layout = Layout {
            sequence_parallel: sp,
            tp_overrides: overrides.clone(),
        };
        let off = Layout {
            sequence_parallel: false,
            ..layout.clone()
        };
        let sp_matters = !auto
            || model.ops().any(|(_, n)| {
                crate::parallel::plan(n, &layout, model) != crate::parallel::plan(n, &off, model)
            });
        analyse(model, &layout)
            .without_split_entries()
            .into_context_parallel()
            .into_bound(&fixed)
            .map_err(SearchError::from)
            .map(|analysis| Variant {
                sp,
                auto,
                sp_matters,
                egraph: false,
                sums: block_sums(&analysis),
                analysis,
            })
    }
}

/// The auto layouts of a search: per degree, its variants (without and with sequence
/// parallelism), and the degrees whose search failed or found the annotated layout.
#[derive(Default)]
pub(super) struct AutoVariants {
    /// Per degree: the variants of its auto layout.
    pub(super) variants: BTreeMap<u64, [usize; 2]>,
    /// Degrees whose search failed, and why.
    pub(super) failed: BTreeMap<u64, SearchError>,
    /// Degrees whose auto layout is the annotated one.
    pub(super) same: Vec<u64>,
    /// Per degree: the variant of the e-graph's rewrite of its auto layout.
    pub(super) egraph: BTreeMap<u64, usize>,
    /// Degrees whose e-graph pass failed, and why.
    pub(super) egraph_failed: BTreeMap<u64, String>,
    /// Seconds spent.
    pub(super) seconds: f64,
}

/// The auto layout of every tensor-parallel degree a mesh allowed by the steering uses, found
/// once per degree (in parallel) and analysed with and without sequence parallelism into
/// `variants`.
pub(super) fn auto_layouts(
    model: &Model,
    values: &Bindings,
    calib: &Calibration,
    opts: &Ctx,
    meshes: &[(u64, u64, u64)],
    variants: &mut Variants,
) -> Result<AutoVariants, SearchError> {
    let auto_start = Instant::now();
    let steer = &opts.steer;
    let mut auto = AutoVariants::default();
    let (auto_failed, auto_same, auto_variants) =
        (&mut auto.failed, &mut auto.same, &mut auto.variants);
    let variant = |sp: bool, overrides: &BTreeMap<String, String>, auto: bool| {
        Variant::new(model, values, sp, overrides, auto)
    };
    if opts.layouts != Layouts::Annotated {
        let mut tps: Vec<u64> = meshes
            .iter()
            .filter(|&&(tp, cp, pp)| {
                tp > 1 && steer.allows_mesh(opts.devices / tp / pp / cp, tp, pp)
            })
            .map(|m| m.0)
            .collect();
        tps.sort_unstable();
        tps.dedup();
        let found: Vec<(u64, Result<AutoLayout, SearchError>)> = tps
            .par_iter()
            .map(|&tp| {
                (
                    tp,
                    auto_tp_layout(model, values, tp, calib, opts.gpus_per_node),
                )
            })
            .collect();
        let mut kept: Vec<AutoLayout> = Vec::new();
        for (tp, a) in found {
            match a {
                Err(e) => {
                    auto_failed.insert(tp, e);
                }
                Ok(a)
                    if opts.layouts == Layouts::Both && same_as_annotated(model, &a.placements) =>
                {
                    auto_same.push(tp)
                }
                Ok(a) => {
                    let layout = Layout {
                        sequence_parallel: false,
                        tp_overrides: a.placements.clone(),
                    };
                    match crate::parallel::check_overrides(model, &layout) {
                        Ok(()) => kept.push(a),
                        Err((op, why)) => {
                            auto_failed.insert(tp, SearchError::Override { op, why });
                        }
                    }
                }
            }
        }
        // Degrees whose searches agree share the analyses (symbolic in the degree).
        let mut distinct: Vec<&BTreeMap<String, String>> = Vec::new();
        for a in &kept {
            if !distinct.contains(&&a.placements) {
                distinct.push(&a.placements);
            }
        }
        let built: Vec<Result<(Variant, Variant), SearchError>> = distinct
            .par_iter()
            .map(|p| Ok((variant(false, p, true)?, variant(true, p, true)?)))
            .collect();
        let base = variants.list.len();
        for b in built {
            let (off, on) = b?;
            variants.list.push(off);
            variants.list.push(on);
        }
        for a in &kept {
            if let Some(i) = distinct.iter().position(|p| **p == a.placements) {
                auto_variants.insert(a.tp, [base + 2 * i, base + 2 * i + 1]);
            }
        }
        egraph_variants(model, values, &kept, variants, &mut auto)?;
        variants.autos = kept.into_iter().map(|a| (a.tp, a)).collect();
    }
    auto.seconds = auto_start.elapsed().as_secs_f64();
    Ok(auto)
}

/// The e-graph pass over each degree's auto layout, once per degree (in parallel, not per
/// strategy): each layout it rewrites becomes one more variant, without sequence parallelism
/// (the variant places the operators that sequence parallelism would move itself).
pub(super) fn egraph_variants(
    model: &Model,
    values: &Bindings,
    kept: &[AutoLayout],
    variants: &mut Variants,
    auto: &mut AutoVariants,
) -> Result<(), SearchError> {
    let found: Vec<(u64, crate::error::Result<Option<EGraphLayout>>)> = kept
        .par_iter()
        .map(|a| (a.tp, egraph_layout(model, values, a)))
        .collect();
    for (tp, e) in found {
        match e {
            Ok(Some(e)) => {
                let mut v = Variant::new(model, values, false, &e.placements, true)?;
                v.egraph = true;
                auto.egraph.insert(tp, variants.list.len());
                variants.list.push(v);
                variants.egraphs.insert(tp, e);
            }
            Ok(None) => {}
            Err(why) => {
                auto.egraph_failed.insert(tp, why.to_string());
            }
        }
    }
    Ok(())
}
