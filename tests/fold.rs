//! One fold, three number types: the evaluation folded over exact numbers with their formulas
//! (`evaluate_strategy`) gives the same numbers as the fold over exact numbers alone
//! (`evaluate_analysed`, what `rank` prices its rows with), and every formula it gives
//! evaluates at the model's values to the number beside it. The floating-point screen is held
//! to the exact fold by `parallel::amount`'s own property test.

use proptest::prelude::*;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::{analyse, evaluate_analysed, evaluate_strategy, Evaluation, Layout};
use symshard::strategy::{Knobs, Recompute, Schedule};
use symshard::sym::{Bindings, Poly, Rational};

fn int(v: u64) -> Rational {
    Rational::from_integer(v.into())
}

/// Every formula of `e` against its number: (what, formula, number).
fn pairs(e: &Evaluation) -> Vec<(String, Option<Poly>, Rational)> {
    let f = e
        .formulas
        .as_deref()
        .expect("evaluate_strategy folds formulas");
    let busiest = e.stages.iter().find(|s| s.flops == e.flops).unwrap();
    let (r, m) = (&e.relative, &e.memory);
    let mut out: Vec<(String, Option<Poly>, Rational)> = vec![
        ("compute".into(), f.compute.clone(), e.flops.clone()),
        ("HBM".into(), f.hbm_cost.clone(), busiest.hbm_cost.clone()),
        ("p2p".into(), f.p2p_bytes.clone(), e.p2p_bytes.clone()),
        (
            "bubble fraction".into(),
            f.bubble_fraction.clone(),
            e.bubble_fraction.clone(),
        ),
        (
            "rel compute".into(),
            f.relative.compute.clone(),
            r.compute.clone(),
        ),
        (
            "rel kernels".into(),
            f.relative.kernels.clone(),
            r.kernels.clone(),
        ),
        (
            "rel intra".into(),
            f.relative.comm_intra.clone(),
            r.comm_intra.clone(),
        ),
        (
            "rel inter".into(),
            f.relative.comm_inter.clone(),
            r.comm_inter.clone(),
        ),
        (
            "rel bubble".into(),
            f.relative.bubble.clone(),
            r.bubble.clone(),
        ),
        (
            "rel hidden".into(),
            f.relative.hidden.clone(),
            r.hidden.clone(),
        ),
        (
            "rel total".into(),
            f.relative.total.clone(),
            r.total.clone(),
        ),
        ("weights".into(), f.memory.params.clone(), m.params.clone()),
        ("gradients".into(), f.memory.grads.clone(), m.grads.clone()),
        (
            "optimizer".into(),
            f.memory.optimizer.clone(),
            m.optimizer.clone(),
        ),
        (
            "activations".into(),
            f.memory.activations.clone(),
            m.activations.clone(),
        ),
        ("memory".into(), f.memory.total.clone(), m.total.clone()),
    ];
    // The passes add up to the compute, where each has a formula.
    if let (Some(fw), Some(bw), Some(rc)) = (&f.forward, &f.backward, &f.recomputed) {
        out.push(("passes".into(), Some(fw + bw + rc), e.flops.clone()));
    }
    for c in &e.comm {
        out.push((
            format!("{} {} {}", c.collective.name(), c.op, c.tensor),
            c.formula.clone(),
            c.bytes.clone(),
        ));
    }
    out
}

/// The checks of one strategy; `None` where the strategy is refused (a split that does not
/// divide, more stages than layers: the same refusal on both sides).
fn check(name: &str, k: &Knobs, calib: &Calibration) -> Result<Option<usize>, TestCaseError> {
    let model = ModelLoader::embedded().unwrap().resolve(name).unwrap();
    let mut values: Bindings = model.values.clone();
    // A batch that the layouts' data parallelism and micro-batches divide.
    if let Some(b) = model.batch.clone() {
        values.insert(b, int(1024));
    }
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    let big = int(1 << 50);
    let traced = evaluate_strategy(&model, &values, k, &layout, MachineRef::new(calib, 8, &big));
    let analysis = analyse(&model, &layout);
    let exact = evaluate_analysed(
        &model,
        &analysis,
        &values,
        k,
        MachineRef::new(calib, 8, &big),
    );
    let (traced, exact) = match (traced, exact) {
        (Ok((_, t)), Ok(x)) => (t, x),
        (Err(a), Err(b)) => {
            prop_assert_eq!(a.to_string(), b.to_string());
            return Ok(None);
        }
        (a, b) => {
            return Err(TestCaseError::fail(format!(
                "{name} {k:?}: one fold failed: {:?} / {:?}",
                a.err(),
                b.err()
            )))
        }
    };
    // The same numbers: only the formulas differ.
    let mut plain = traced.clone();
    plain.formulas = None;
    for c in &mut plain.comm {
        c.formula = None;
    }
    prop_assert_eq!(&plain, &exact, "{} {:?}", name, k);
    let mut formulas = 0;
    for (what, formula, number) in pairs(&traced) {
        if let Some(f) = formula {
            let v = f.eval(&values).unwrap();
            prop_assert_eq!(&v, &number, "{} {:?}: {} = {}", name, k, what, f);
            formulas += 1;
        }
    }
    Ok(Some(formulas))
}

fn knobs(
    (dp, tp, pp, cp, ep): (u64, u64, u64, u64, u64),
    (m, zero, recompute, schedule, sp): (u64, u8, usize, usize, bool),
) -> Knobs {
    let schedule = [
        Schedule::OneFOneB,
        Schedule::Gpipe,
        Schedule::Interleaved,
        Schedule::ZeroBubbleV,
        Schedule::DualPipeV,
    ][schedule];
    Knobs {
        dp,
        tp,
        pp,
        cp,
        ep,
        microbatches: m,
        zero,
        recompute: [Recompute::None, Recompute::Selective, Recompute::Full][recompute],
        schedule: if pp == 1 {
            Knobs::data_parallel(1).schedule
        } else {
            schedule
        },
        chunks: if pp > 1 && schedule == Schedule::Interleaved {
            2
        } else {
            1
        },
        sequence_parallel: sp && tp > 1,
        ..Knobs::data_parallel(1)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Dense and mixture-of-experts transformers under random layouts, on a table with kernel
    /// curves (the kernel term has no formula) and at the plateau (it is zero).
    #[test]
    fn the_formulas_are_the_numbers(
        model in 0usize..4,
        (dp, tp, pp, cp, ep) in (0u32..5, 0u32..4, 0u32..3, 1u64..3, 0u32..4),
        (m, zero, recompute, schedule, sp) in (0u32..4, 0u8..4, 0usize..3, 0usize..5, any::<bool>()),
        plateau: bool,
    ) {
        let name = ["gpt3-1.3b", "llama3-8b", "mixtral-8x7b", "bert-large"][model];
        let (dp, pp) = (1u64 << dp, 1u64 << pp);
        // Expert parallelism where the model has experts, drawn from the dp × cp ranks.
        let ep = if model == 2 { (1u64 << ep).min(dp * cp) } else { 1 };
        // Interleaving needs the micro-batches to be a multiple of the stages.
        let m = (1u64 << m) * if schedule == 2 { pp } else { 1 };
        let k = knobs((dp, 1 << tp, pp, cp, ep), (m, zero, recompute, schedule, sp));
        let reference = Calibration::reference().unwrap();
        let calib = if plateau { reference.at_plateau() } else { reference };
        check(name, &k, &calib)?;
    }
}

/// A few layouts that are known to price, each with formulas for the compute and memory.
#[test]
fn known_layouts_have_formulas() {
    let calib = Calibration::reference().unwrap();
    for (name, dims, rest) in [
        ("gpt3-175b", (8, 8, 16, 1, 1), (32, 1, 1, 0, true)),
        ("gpt3-175b", (16, 8, 8, 1, 1), (16, 0, 2, 2, false)),
        ("llama3-8b", (8, 4, 1, 2, 1), (4, 3, 1, 0, true)),
        ("llama3-8b", (16, 2, 2, 1, 1), (8, 2, 2, 1, false)),
        ("mixtral-8x7b", (8, 2, 1, 1, 8), (4, 1, 1, 0, true)),
        ("mixtral-8x7b", (8, 2, 2, 1, 4), (8, 3, 0, 0, true)),
    ] {
        let k = knobs(dims, rest);
        let n = check(name, &k, &calib)
            .unwrap_or_else(|e| panic!("{name} {k:?}: {e}"))
            .unwrap_or_else(|| panic!("{name} {k:?} refused"));
        assert!(n >= 10, "{name} {k:?}: only {n} formulas");
    }
}
