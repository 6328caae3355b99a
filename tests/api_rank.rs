//! `symshard::rank` against the command line: the same options give the same document, the
//! rows are typed (knobs as a `Strategy`, exact numbers), and bad options are typed errors.

mod common;

use serde_json::Value;
use symshard::sym::Rational;
use symshard::{
    cost, rank, CostRequest, Error, Headroom, Knob, Layouts, Machine, Model, RankOptions, Strategy,
};

fn int(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// The document without the figures that time the search.
fn untimed(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("search_seconds");
    o.remove("auto_layout_seconds");
    v
}

#[test]
fn a_ranking_through_the_library_is_the_command_lines_document() {
    let got = rank(
        &Model::named("llama3-8b"),
        &RankOptions::builder(64).build().unwrap(),
    )
    .unwrap();
    let want = common::json(&["rank", "llama3-8b", "--devices", "64", "--format", "json"]);
    assert_eq!(
        untimed(serde_json::to_value(&got).unwrap()),
        untimed(want.clone())
    );
    assert_eq!(got.rows.len(), 10);
    for (row, w) in got.rows.iter().zip(want["strategies"].as_array().unwrap()) {
        let exact = |k: &str| w[k].as_str().unwrap().parse::<Rational>().unwrap();
        assert_eq!(row.relative_cost, exact("relative_cost"));
        assert_eq!(row.memory_per_device, exact("memory_per_device"));
        assert_eq!(row.iteration_seconds, None);
        assert_eq!(Some(row.tp), w["tp"].as_u64());
    }
    assert!(got.warnings.is_empty());
    assert!(!got.by_seconds);
}

#[test]
fn typed_constraints_are_the_flags_they_stand_for() {
    let opts = RankOptions::builder(16)
        .machine(Machine::named("a100-80gb").unwrap())
        .top(4)
        .fix(&Strategy {
            tp: Some(2),
            zero: Some(1),
            ..Strategy::default()
        })
        .sequence_parallel(false)
        .max(Knob::Pp, 2)
        .headroom(Headroom::Percent(int(10)))
        .max_microbatches(64)
        .layouts(Layouts::Annotated)
        .pareto(true)
        .build()
        .unwrap();
    let got = rank(&Model::named("gpt3-1.3b").set("B", int(64)), &opts).unwrap();
    let want = common::json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "16",
        "--calib",
        "a100-80gb",
        "--top",
        "4",
        "--fix",
        "tp=2,zero=1",
        "--no-sp",
        "--max",
        "pp=2",
        "--headroom",
        "10%",
        "--max-microbatches",
        "64",
        "--layouts",
        "annotated",
        "--pareto",
        "--set",
        "B=64",
        "--format",
        "json",
    ]);
    assert_eq!(untimed(serde_json::to_value(&got).unwrap()), untimed(want));
    assert!(got.by_seconds && got.simulated > 0);
    assert_eq!(got.headroom.as_deref(), Some("10%"));
    assert!(got.memory_limit < got.capacity);
    let first = &got.rows[0];
    assert!(first.iteration_seconds.is_some_and(|s| s > 0.0));
    assert_eq!((first.tp, first.zero), (2, 1));
    assert!(!first.sequence_parallel && first.pp <= 2);
    assert_eq!(first.knobs.tp, Some(2));
}

#[test]
fn a_rows_knobs_price_the_same_memory_through_cost() {
    let got = rank(
        &Model::named("gpt3-1.3b"),
        &RankOptions::builder(16).top(3).build().unwrap(),
    )
    .unwrap();
    for row in &got.rows {
        let c = cost(&CostRequest {
            strategy: Some(row.knobs.clone()),
            ..CostRequest::new(Model::named("gpt3-1.3b"))
        })
        .unwrap();
        let d = c.per_device.unwrap();
        assert_eq!(d.memory.total, row.memory_per_device, "{}", row.strategy);
        assert_eq!(d.strategy, row.strategy);
    }
}

#[test]
fn warnings_are_returned_not_printed() {
    let dir = common::temp_dir("api-rank-rules");
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("operator_rules/add.yaml");
    std::fs::copy(shipped, dir.join("add.yaml")).unwrap();
    let model = Model::named("gpt3-125m").rules(Some(dir.clone()));
    let got = rank(&model, &RankOptions::builder(8).top(1).build().unwrap()).unwrap();
    assert_eq!(got.warnings.len(), 1, "{:?}", got.warnings);
    assert!(got.warnings[0].starts_with("note: `"));
    assert!(got.warnings[0].contains("replaces the shipped rule `add`"));
}

fn usage(e: Result<RankOptions, Error>) -> String {
    match e {
        Err(Error::Usage(m)) => m,
        Err(other) => panic!("not a usage error: {other}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn bad_options_are_typed_errors_naming_the_item() {
    let b = || RankOptions::builder(8);
    assert!(usage(b().top(0).build()).contains("--top"));
    assert!(usage(b().max_microbatches(0).build()).contains("--max-microbatches"));
    assert!(usage(b().max_chunks(0).build()).contains("--max-chunks"));
    assert!(usage(b().fix_text("tp=8,foo=1").build()).contains("unknown knob `foo`"));
    assert!(usage(b().max_text("schedule=gpipe").build()).contains("has no order"));
    let m = usage(
        b().fix(&Strategy {
            tp: Some(3),
            ..Strategy::default()
        })
        .build(),
    );
    assert!(m.contains("tp") && m.contains('3'), "{m}");
    let m = usage(
        b().fix(&Strategy {
            zero: Some(7),
            ..Strategy::default()
        })
        .build(),
    );
    assert!(m.contains("ZeRO") || m.contains("zero"), "{m}");
    let m = usage(
        b().fix(&Strategy::from_file("s.yaml"))
            .fix_text("tp=2")
            .build(),
    );
    assert!(m.contains("s.yaml"), "{m}");
    assert!(usage(b().max(Knob::Tp, 0).build()).contains("tp"));
    assert!(usage(
        b().fix(&Strategy {
            tp: Some(1),
            ..Strategy::default()
        })
        .sequence_parallel(true)
        .build()
    )
    .contains("sp=on needs tp > 1"));
    // Checked when ranking: what needs the model or the machine's memory.
    let bad_rank = |opts: RankOptions| match rank(&Model::named("gpt3-1.3b"), &opts) {
        Err(Error::Usage(m)) => m,
        other => panic!("{:?}", other.map(|r| r.rows.len())),
    };
    let m = bad_rank(b().headroom(Headroom::Percent(int(100))).build().unwrap());
    assert!(m.contains("headroom"), "{m}");
    let m = bad_rank(
        b().headroom(Headroom::parse("90GB").unwrap())
            .build()
            .unwrap(),
    );
    assert!(
        m.contains("90000000000") && m.contains("device memory"),
        "{m}"
    );
    let m = bad_rank(RankOptions::builder(12).build().unwrap());
    assert!(m.contains("12"), "{m}");
    assert!(Headroom::parse("x%").is_err());
    assert!(Headroom::parse("lots").is_err());
    // A machine the options cannot run on is refused when it is built.
    assert!(Machine::reference().unwrap().with_gpus_per_node(0).is_err());
}
