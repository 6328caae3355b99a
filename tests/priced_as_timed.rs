//! The relative cost prices what the timeline runs. Under the interleaved schedule it places the
//! model chunks where the timeline does (Megatron-LM's placement: the layers split evenly over
//! the `pp × v` chunks, the embedding on the first, the head on the last, device `d` holding
//! chunks `d`, `d + pp`, …; under ZB-V chunks `d` and `2·pp − 1 − d`), so the stage it prices as
//! the busiest is the one the timeline keeps busiest; and it prices a loss's separate fp32
//! passes by the bytes the timeline times.

use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::{Knobs, Recompute, Schedule};
use symshard::timeline::plan_strategy;

/// Copies of each block on each device: the relative cost's partition and the timeline's.
fn both(model: &str, k: &Knobs) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let m = ModelLoader::embedded().unwrap().resolve(model).unwrap();
    both_at(&m, &m.values, k)
}

/// [`both`] at the symbol values `values`.
fn both_at(
    m: &symshard::model::Model,
    values: &symshard::sym::Bindings,
    k: &Knobs,
) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let calib = Calibration::resolve("a100-80gb").unwrap();
    let (plan, e) = plan_strategy(
        m,
        values,
        k,
        &Layout::default(),
        MachineRef::new(&calib, calib.gpus_per_node(), &calib.memory_bytes()),
    )
    .unwrap();
    let pp = k.pp as usize;
    let blocks = plan.blocks.len();
    let mut relative = vec![vec![0u64; blocks]; pp];
    for (d, stage) in e.stages.iter().enumerate() {
        for (name, c) in &stage.items {
            let bi = plan.blocks.iter().position(|b| &b.name == name).unwrap();
            relative[d][bi] += c;
        }
    }
    // Megatron-LM places chunk c on device c mod pp; ZB-V's second chunks run back up the
    // devices, chunk c ≥ pp on device 2·pp − 1 − c (torchtitan's V-style stage placement:
    // `stage_v_pairs = zip(range(pp), range(num_stages - 1, pp - 1, -1))`).
    let device = |c: usize| match k.schedule {
        Schedule::ZeroBubbleV | Schedule::DualPipeV if c >= pp => 2 * pp - 1 - c,
        _ => c % pp,
    };
    let mut timed = vec![vec![0u64; blocks]; pp];
    let mut item = 0;
    for (chunk, n) in plan.stages.iter().enumerate() {
        for &bi in &plan.items[item..item + n] {
            timed[device(chunk)][bi] += 1;
        }
        item += n;
    }
    (relative, timed)
}

fn knobs(dp: u64, pp: u64, chunks: u64, microbatches: u64) -> Knobs {
    Knobs {
        dp,
        tp: 1,
        pp,
        microbatches,
        schedule: Schedule::Interleaved,
        chunks,
        sequence_parallel: false,
        recompute: Recompute::None,
        zero: u8::from(dp > 1),
        ep: 1,
        cp: 1,
        overlap: Default::default(),
        precision: Default::default(),
        pipeline_split: Default::default(),
        fp8_params: false,
        fp8_dispatch: false,
        node_dispatch: false,
    }
}

#[test]
fn the_relative_cost_prices_the_chunks_where_the_timeline_runs_them() {
    for (model, k) in [
        ("llama3-8b", knobs(32, 2, 2, 64)),
        ("llama3-8b", knobs(16, 4, 4, 128)),
        ("gpt3-125m", knobs(4, 2, 3, 4)),
        ("gpt3-125m", knobs(2, 2, 6, 8)),
        ("gpt3-125m", knobs(1, 4, 3, 8)),
    ] {
        let (relative, timed) = both(model, &k);
        assert_eq!(relative, timed, "{model} {k}");
        // Every device holds the same layers; the first also the embedding, the last the head
        // (these models' blocks: embedding, layer, head): nothing offsets them, unlike the plain
        // schedule's balanced stages.
        let n = relative[0].len();
        let layers: Vec<u64> = relative.iter().map(|d| d[1..n - 1].iter().sum()).collect();
        assert!(
            layers.iter().all(|&l| l == layers[0]),
            "{model} {k}: {relative:?}"
        );
        assert_eq!(relative[0][0], 1, "{model} {k}: {relative:?}");
        assert_eq!(
            relative[k.pp as usize - 1][n - 1],
            1,
            "{model} {k}: {relative:?}"
        );
    }
    // Counting the embedding and the loss as layers of the split (Megatron-Core's
    // --account-for-…-in-pipeline-split): 30 layers and the two over 4 stages of 2 chunks. The
    // relative cost and the timeline place them alike: the first and last devices one layer short.
    let mut k = knobs(8, 4, 2, 8);
    k.pipeline_split.embedding = true;
    k.pipeline_split.loss = true;
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("llama3-8b")
        .unwrap();
    let mut values = m.values.clone();
    values.insert("L".into(), symshard::sym::Rational::from_integer(30.into()));
    let (relative, timed) = both_at(&m, &values, &k);
    assert_eq!(relative, timed, "{k}");
    let n = relative[0].len();
    let layers: Vec<u64> = relative.iter().map(|d| d[1..n - 1].iter().sum()).collect();
    assert_eq!(layers, vec![7, 8, 8, 7], "{relative:?}");
}

/// ZB-V's and DualPipeV's rank s holds chunks s and 2·pp − 1 − s: the relative cost prices on
/// each rank the blocks the timeline runs there, rank 0 holding both the embedding and the
/// head, every rank the same layers.
#[test]
fn the_relative_cost_prices_zb_v_chunks_where_the_timeline_runs_them() {
    for (model, pp, m, schedule) in [
        ("gpt3-125m", 2u64, 4u64, Schedule::ZeroBubbleV),
        ("gpt3-125m", 3, 4, Schedule::ZeroBubbleV),
        ("llama3-8b", 4, 8, Schedule::ZeroBubbleV),
        ("gpt3-125m", 2, 4, Schedule::DualPipeV),
        ("gpt3-125m", 3, 8, Schedule::DualPipeV),
        ("llama3-8b", 4, 8, Schedule::DualPipeV),
    ] {
        let k = Knobs {
            schedule,
            chunks: 1,
            ..knobs(2, pp, 1, m)
        };
        let (relative, timed) = both(model, &k);
        assert_eq!(relative, timed, "{model} {k}");
        // These models' blocks: embedding, layer, head. Rank 0 holds the first and last.
        let n = relative[0].len();
        assert_eq!(relative[0][0], 1, "{model}: {relative:?}");
        assert_eq!(relative[0][n - 1], 1, "{model}: {relative:?}");
        let layers: Vec<u64> = relative.iter().map(|d| d[1..n - 1].iter().sum()).collect();
        assert!(
            layers.iter().all(|&l| l == layers[0]),
            "{model}: {layers:?}"
        );
    }
}

/// A loss computed as separate fp32 passes costs the relative cost exactly what those passes
/// move through HBM in the timeline's plan, at κ_hbm: the two see the same bytes.
#[test]
fn the_relative_cost_prices_the_loss_passes_the_timeline_times() {
    use symshard::model::LossMode;
    use symshard::sym::Rational;
    let calib = Calibration::resolve("a100-80gb").unwrap();
    let k = Knobs {
        schedule: Schedule::OneFOneB,
        chunks: 1,
        ..knobs(1, 1, 1, 4)
    };
    let price = |mode: LossMode| {
        let m = ModelLoader::embedded()
            .unwrap()
            .with_loss(mode)
            .resolve("gpt3-125m")
            .unwrap();
        let (plan, e) = plan_strategy(
            &m,
            &m.values,
            &k,
            &Layout::default(),
            MachineRef::new(&calib, calib.gpus_per_node(), &calib.memory_bytes()),
        )
        .unwrap();
        let bytes: Rational = plan
            .items
            .iter()
            .flat_map(|&b| &plan.blocks[b].ops)
            .filter(|o| !o.matmul)
            .map(|o| &o.forward_bytes + &o.backward_bytes)
            .sum();
        (e.relative.total, bytes)
    };
    let (fp32, fp32_bytes) = price(LossMode::Fp32);
    let (fused, fused_bytes) = price(LossMode::Fused);
    let passes = fp32_bytes - fused_bytes;
    assert!(passes > Rational::from_integer(0.into()));
    let microbatches = Rational::from_integer(k.microbatches.into());
    assert_eq!(fp32 - fused, calib.hbm_balance() * passes * microbatches);
}
