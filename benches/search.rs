//! The split search: the exact solver on a GPT layer at tp = 8, composing L identical layers by
//! repeated squaring (nearly flat in L), and D-Rec from 8 to 4096 devices (linear in the
//! number of rounds), and `layout`'s whole comparison of a Llama 3 8B layer at tp = 16 and 64
//! (one axis, D-Rec and the search on the halvings), which should stay well under 10 s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::collections::BTreeMap;
use std::hint::black_box;
use symshard::calib::Calibration;
use symshard::model::{Model, ModelLoader};
use symshard::search::compare::compare_layer;
use symshard::search::drec::drec;
use symshard::search::problem::{Axis, Problem};
use symshard::search::sp::{solve, table};

fn gpt() -> (Model, usize) {
    let m = ModelLoader::embedded()
        .expect("shipped models")
        .resolve("gpt3-125m")
        .expect("gpt3-125m");
    let bi = m
        .blocks
        .iter()
        .position(|b| b.name == "layer")
        .expect("layer block");
    (m, bi)
}

fn layer(axes: Vec<Axis>) -> Problem {
    let (m, bi) = gpt();
    Problem::from_block(&m, bi, &m.values, axes, &BTreeMap::new()).expect("layer problem")
}

fn exact(c: &mut Criterion) {
    let calib = Calibration::reference().expect("calibration");
    let p = layer(Problem::tp_axis(8, 8, &calib));
    c.bench_function("exact GPT layer tp=8", |b| {
        b.iter(|| solve(black_box(&p)).expect("solves"))
    });
}

fn repeat(c: &mut Criterion) {
    let calib = Calibration::reference().expect("calibration");
    let p = layer(Problem::tp_axis(8, 8, &calib));
    let (s, e) = p.cycle.expect("a repeated block");
    let t = table(&p, s, e).expect("table");
    let mut g = c.benchmark_group("repeat GPT layer tp=8");
    for l in [12u64, 24, 48, 96] {
        g.bench_with_input(BenchmarkId::from_parameter(l), &l, |b, &l| {
            b.iter(|| t.repeat(black_box(l)))
        });
    }
    g.finish();
}

fn drec_devices(c: &mut Criterion) {
    let calib = Calibration::reference().expect("calibration");
    let mut g = c.benchmark_group("D-Rec GPT layer");
    g.sample_size(10);
    for k in [3u32, 6, 9, 12] {
        let mut p = layer(Axis::bisection(k, 8, &calib));
        p.open_cycle();
        g.bench_with_input(BenchmarkId::from_parameter(1u64 << k), &p, |b, p| {
            b.iter(|| drec(black_box(p)).expect("D-Rec"))
        });
    }
    g.finish();
}

fn layout_llama(c: &mut Criterion) {
    let calib = Calibration::reference().expect("calibration");
    let m = ModelLoader::embedded()
        .expect("shipped models")
        .resolve("llama3-8b")
        .expect("llama3-8b");
    let mut g = c.benchmark_group("layout llama3-8b");
    g.sample_size(10);
    for tp in [16u64, 64] {
        g.bench_with_input(BenchmarkId::from_parameter(tp), &tp, |b, &tp| {
            b.iter(|| compare_layer(&m, &m.values, black_box(tp), &calib, 8).expect("layout"))
        });
    }
    g.finish();
}

criterion_group!(benches, exact, repeat, drec_devices, layout_llama);
criterion_main!(benches);
