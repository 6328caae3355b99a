//! Benchmarks of the e-graph engine on GPT-3 175B at tensor-parallel degree 8: saturating one
//! layer's program, saturating `repeat 96 layer` (identical layers share one e-class), and
//! sequence-parallelism discovery end to end (saturation, extraction, report).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use symshard::model::ModelLoader;
use symshard::rewrite::{
    block_analysis, block_program, explain_why, optimize_layer, rewrites, Limits,
};
use symshard::rules::RuleSet;
use symshard::sym::Poly;

fn rewrite(c: &mut Criterion) {
    let model = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-175b")
        .unwrap();
    let bi = model.blocks.iter().position(|b| b.name == "layer").unwrap();
    let ctx = block_analysis(&model, &model.blocks[bi], "tp", Poly::int(8));
    let one = block_program(&model, bi, &ctx, "tp").unwrap();
    let many = one.repeat(96);
    let rules = rewrites(&one.rules).unwrap();
    let mut g = c.benchmark_group("rewrite");
    for (name, program) in [
        ("saturate/1-layer/tp8", &one),
        ("saturate/96-layers/tp8", &many),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut egraph = egg::EGraph::new(ctx.clone());
                egraph.add_expr(&program.expr);
                let runner = Limits::default().runner(egraph).run(&rules);
                black_box(runner.egraph.total_number_of_nodes())
            })
        });
    }
    g.bench_function("optimize/1-layer/tp8", |b| {
        b.iter(|| {
            black_box(
                optimize_layer(&model, 8, &model.values)
                    .unwrap()
                    .run
                    .egraph_nodes,
            )
        })
    });
    let linear = RuleSet::embedded().unwrap().get("linear").unwrap().clone();
    g.bench_function("explain-why/linear", |b| {
        b.iter(|| black_box(explain_why(&linear).unwrap().proofs.len()))
    });
    g.finish();
}

criterion_group!(benches, rewrite);
criterion_main!(benches);
