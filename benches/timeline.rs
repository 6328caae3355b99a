//! Timeline of GPT-3 175B on 1024 devices (tp 8 × dp 8 × pp 16), 1F1B with 64 micro-batches,
//! on the reference machine: planning (analysis and exact evaluation) and the event simulation.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::{Knobs, Recompute, Schedule};
use symshard::sym::Rational;
use symshard::timeline::{plan_strategy, time_plan, time_summary};

/// tp 8 × dp 8 × pp 16, 1F1B with 64 micro-batches, sequence parallelism, selective
/// recomputation and the distributed optimizer, as Megatron-LM runs GPT-3 175B.
fn megatron_knobs() -> Knobs {
    Knobs {
        dp: 8,
        tp: 8,
        pp: 16,
        microbatches: 64,
        schedule: Schedule::OneFOneB,
        chunks: 1,
        sequence_parallel: true,
        recompute: Recompute::Selective,
        zero: 1,
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

fn gpt3_175b_1024(c: &mut Criterion) {
    let loader = ModelLoader::embedded().unwrap();
    let model = loader.resolve("gpt3-175b").unwrap();
    let mut values = model.values.clone();
    values.insert("B".into(), Rational::from_integer(512.into()));
    let knobs = megatron_knobs();
    let layout = Layout {
        sequence_parallel: true,
        ..Layout::default()
    };
    let calib = Calibration::reference().unwrap();
    let plan =
        || plan_strategy(&model, &values, &knobs, &layout, MachineRef::whole(&calib)).unwrap();
    let (p, _) = plan();
    let mut g = c.benchmark_group("timeline gpt3-175b 1024 devices 1f1b 64 micro-batches");
    g.sample_size(20);
    g.bench_function("plan", |b| b.iter(|| black_box(plan())));
    g.bench_function("simulate", |b| {
        b.iter(|| black_box(time_summary(&p, &calib).unwrap()))
    });
    g.bench_function("simulate with events", |b| {
        b.iter(|| black_box(time_plan(&p, &calib).unwrap().sim.events.len()))
    });
    g.finish();
}

/// The deep interleaved pipeline that 192 layers allow and `rank` simulates near the top of its
/// table at 1024 A100s (the layer-scaling benchmark of `benches/analysis.rs`): dp 8 × tp 4 ×
/// pp 32, six model chunks per rank, 192 micro-batches, 73,728 tasks, timing only.
fn gpt3_175b_deep_interleaved(c: &mut Criterion) {
    let loader = ModelLoader::embedded().unwrap();
    let model = loader.resolve("gpt3-175b").unwrap();
    let mut values = model.values.clone();
    values.insert("L".into(), Rational::from_integer(192.into()));
    let knobs = Knobs {
        tp: 4,
        pp: 32,
        microbatches: 192,
        schedule: Schedule::Interleaved,
        chunks: 6,
        ..megatron_knobs()
    };
    let layout = Layout {
        sequence_parallel: true,
        ..Layout::default()
    };
    let calib = Calibration::resolve("a100-80gb").unwrap();
    let (p, _) =
        plan_strategy(&model, &values, &knobs, &layout, MachineRef::whole(&calib)).unwrap();
    let mut g = c.benchmark_group("timeline gpt3-175b L=192 1024 a100 interleaved pp 32 v 6");
    g.sample_size(20);
    g.bench_function("simulate", |b| {
        b.iter(|| black_box(time_summary(&p, &calib).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, gpt3_175b_1024, gpt3_175b_deep_interleaved);
criterion_main!(benches);
