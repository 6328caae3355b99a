//! The split search: the exact solver on a GPT layer at tp = 8, composing L identical layers by
//! repeated squaring (nearly flat in L), and D-Rec from 8 to 4096 devices (linear in the
//! number of rounds), and `layout`'s whole comparison of a Llama 3 8B layer at tp = 16 and 64
//! (one axis, D-Rec and the search on the halvings), which should stay well under 10 s; and
//! `rank` with its auto layouts on a repeat-free graph of 2,000 operators (a fan-in whose
//! search the work budget bounds), which should stay near a second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::collections::BTreeMap;
use std::hint::black_box;
use symshard::calib::Calibration;
use symshard::model::{Model, ModelLoader};
use symshard::search::compare::compare_layer;
use symshard::search::drec::drec;
use symshard::search::problem::{Axis, Problem};
use symshard::search::sp::{solve, table};
use symshard::search::{rank, Layouts, RankOptions};

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

/// A block of `branches` elementwise operators each reading the input, summed pairwise by
/// `add` (about 2 × `branches` operators; the shape of `tests/big_graphs.rs`).
fn fan_in(branches: usize) -> Model {
    let mut s = String::from(
        "name: fanin\ngraph:\n  symbols:\n    T: tokens\n    H: hidden size\n  inputs:\n    x: {dims: [T, H]}\n  blocks:\n    - name: body\n      ops:\n",
    );
    let mut level: Vec<String> = Vec::new();
    for i in 0..branches {
        let op = if i % 2 == 0 { "gelu" } else { "relu" };
        s += &format!("        - {{name: f{i}, op: {op}, bind: {{b: T, h: H}}, in: {{x: x}}}}\n");
        level.push(format!("f{i}"));
    }
    let mut k = 0;
    while level.len() > 1 {
        let mut next = Vec::new();
        for pair in level.chunks(2) {
            if let [a, b] = pair {
                s += &format!("        - {{name: s{k}, op: add, bind: {{b: T, h: H}}, in: {{x: {a}, other: {b}}}}}\n");
                next.push(format!("s{k}"));
                k += 1;
            } else {
                next.push(pair[0].clone());
            }
        }
        level = next;
    }
    s += "symbols:\n  T: 8192\n  H: 4096\n";
    let path =
        std::env::temp_dir().join(format!("symshard-bench-fanin-{}.yaml", std::process::id()));
    std::fs::write(&path, s).expect("temporary model");
    let m = ModelLoader::embedded()
        .expect("shipped rules")
        .resolve(path.to_str().expect("path"))
        .expect("fan-in model");
    let _ = std::fs::remove_file(&path);
    m
}

fn rank_big_graph(c: &mut Criterion) {
    let m = fan_in(1000);
    let calib = Calibration::reference().expect("calibration");
    let opts = RankOptions {
        devices: 2,
        layouts: Layouts::Both,
        ..RankOptions::default()
    };
    let mut g = c.benchmark_group("rank big graph");
    g.sample_size(10);
    g.bench_function("fan-in of 1,999 operators, 2 devices, auto layouts", |b| {
        b.iter(|| black_box(rank(&m, &m.values, &calib, &opts).expect("ranks").evaluated))
    });
    g.finish();
}

criterion_group!(
    benches,
    exact,
    repeat,
    drec_devices,
    layout_llama,
    rank_big_graph
);
criterion_main!(benches);
