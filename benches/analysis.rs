//! Benchmarks of the main jobs: `cost` of the zoo's largest models (repeated layers analysed
//! once), and `rank` over the full default space as layers and devices grow, by relative cost
//! and by simulated seconds.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use symshard::calib::Calibration;
use symshard::model::{model_cost, ModelLoader};
use symshard::search::{rank, RankOptions};
use symshard::sym::Rational;

fn cost(c: &mut Criterion) {
    let loader = ModelLoader::embedded().unwrap();
    let mut g = c.benchmark_group("cost");
    for name in ["llama3-8b", "llama3-405b", "gpt3-175b"] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let m = loader.resolve(name).unwrap();
                let c = model_cost(&m);
                black_box(c.params.eval(&m.values).unwrap())
            })
        });
    }
    g.finish();
}

fn opts(devices: u64) -> RankOptions {
    RankOptions {
        devices,
        gpus_per_node: 8,
        top: 10,
        memory: Rational::from_integer(80_000_000_000u64.into()),
        max_microbatches: 256,
        seconds: false,
        ..RankOptions::default()
    }
}

fn rank_bench(c: &mut Criterion) {
    let loader = ModelLoader::embedded().unwrap();
    let calib = Calibration::reference().unwrap();
    let m = loader.resolve("gpt3-175b").unwrap();
    let mut g = c.benchmark_group("rank");
    g.sample_size(10);
    g.bench_function("gpt3-175b/1024", |b| {
        b.iter(|| black_box(rank(&m, &m.values, &calib, &opts(1024)).unwrap().evaluated))
    });
    // Ranked by simulated seconds on A100s: bounds for every strategy that fits, then
    // simulations in bound order until the fastest rows are proven.
    let a100 = Calibration::resolve("a100-80gb").unwrap();
    for top in [1usize, 10] {
        let o = RankOptions {
            seconds: true,
            top,
            ..opts(1024)
        };
        g.bench_with_input(
            BenchmarkId::new("gpt3-175b/1024/calib-a100-80gb/top", top),
            &o,
            |b, o| b.iter(|| black_box(rank(&m, &m.values, &a100, o).unwrap().simulated)),
        );
    }
    for layers in [12u64, 24, 48, 96, 192] {
        let mut v = m.values.clone();
        v.insert("L".into(), Rational::from_integer(layers.into()));
        g.bench_with_input(BenchmarkId::new("gpt3-175b/layers", layers), &v, |b, v| {
            b.iter(|| black_box(rank(&m, v, &calib, &opts(512)).unwrap().evaluated))
        });
    }
    // The same by simulated seconds on A100s: the simulations of deep pipelines with many layers
    // per stage are what grows with the layers (512 devices keeps its historical name; 1024 and
    // 2048, where 192 layers allow deeper interleaved pipelines than 12, are named by both).
    for devices in [512u64, 1024, 2048] {
        for layers in [12u64, 192] {
            let mut v = m.values.clone();
            v.insert("L".into(), Rational::from_integer(layers.into()));
            let o = RankOptions {
                seconds: true,
                ..opts(devices)
            };
            let name = if devices == 512 {
                "gpt3-175b/layers/calib-a100-80gb".to_string()
            } else {
                format!("gpt3-175b/{devices}/layers/calib-a100-80gb")
            };
            g.bench_with_input(BenchmarkId::new(name, layers), &v, |b, v| {
                b.iter(|| black_box(rank(&m, v, &a100, &o).unwrap().simulated))
            });
        }
    }
    for devices in [8u64, 64, 512, 4096] {
        g.bench_with_input(
            BenchmarkId::new("gpt3-175b/devices", devices),
            &devices,
            |b, d| b.iter(|| black_box(rank(&m, &m.values, &calib, &opts(*d)).unwrap().evaluated)),
        );
    }
    g.finish();
}

criterion_group!(benches, cost, rank_bench);
criterion_main!(benches);
