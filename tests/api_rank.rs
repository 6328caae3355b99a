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
    // A typed amount and the device memory, each as tables print amounts.
    assert!(
        m.contains("`90.0 GB`") && m.contains("all of the 80.0 GB device memory"),
        "{m}"
    );
    // A typed headroom below zero would add memory to the device: refused, as a share and as an
    // amount.
    for h in [Headroom::Percent(int(-5)), Headroom::Bytes(int(-1))] {
        let m = bad_rank(b().headroom(h.clone()).build().unwrap());
        assert!(
            m.contains("headroom") && m.contains("negative"),
            "{h:?}: {m}"
        );
    }
    let m = bad_rank(RankOptions::builder(12).build().unwrap());
    assert!(m.contains("12"), "{m}");
    assert!(Headroom::parse("x%").is_err());
    assert!(Headroom::parse("lots").is_err());
    // A machine the options cannot run on is refused when it is built.
    assert!(Machine::reference().unwrap().with_gpus_per_node(0).is_err());
}

#[test]
fn a_comparison_through_the_library_is_the_command_lines_document() {
    use symshard::{compare, CompareRequest, CompareSide};
    let (a, b) = ("dp=64,mbs=1,zero=1", "dp=8,tp=8,mbs=1,sp,zero=1");
    let req = CompareRequest {
        model: Model::named("llama3-8b"),
        a: CompareSide::parse(a, "strategy A").unwrap(),
        b: CompareSide::parse(b, "strategy B").unwrap(),
        machine: Some(Machine::named("h100-sxm").unwrap()),
        seconds: true,
        plateau: false,
    };
    let got = compare(&req).unwrap();
    let want = common::json(&[
        "compare",
        "llama3-8b",
        a,
        b,
        "--calib",
        "h100-sxm",
        "--format",
        "json",
    ]);
    assert_eq!(serde_json::to_value(&got).unwrap(), want);
    assert_eq!(got.cheaper, want["cheaper"].as_str().unwrap());
    assert!(got.a.seconds.is_some() && got.b.seconds.is_some());

    // The first two rows of a ranking, compared as typed strategies: the totals are the rows'.
    let r = rank(
        &Model::named("llama3-8b"),
        &RankOptions::builder(64).top(2).build().unwrap(),
    )
    .unwrap();
    let side = |row: &symshard::RankRow| CompareSide {
        strategy: row.knobs.clone(),
        given: row.strategy.clone(),
    };
    let c = compare(&CompareRequest {
        model: Model::named("llama3-8b"),
        a: side(&r.rows[0]),
        b: side(&r.rows[1]),
        machine: None,
        seconds: false,
        plateau: false,
    })
    .unwrap();
    let total = c
        .components
        .iter()
        .find(|x| x.group == "relative cost" && x.name == "total")
        .unwrap();
    assert_eq!(total.a, r.rows[0].relative_cost);
    assert_eq!(total.b, r.rows[1].relative_cost);
    assert_eq!(c.a.strategy, r.rows[0].strategy);
}

#[test]
fn comparison_errors_name_the_side() {
    use symshard::{compare, CompareRequest, CompareSide};
    match CompareSide::parse("tp=2,foo=1", "strategy A") {
        Err(Error::Usage(m)) => assert!(m.contains("unknown knob `foo`"), "{m}"),
        other => panic!("{:?}", other.map(|s| s.given)),
    }
    let (a, b) = ("tp=7,dp=8", "tp=4,dp=4");
    let req = CompareRequest {
        model: Model::named("gpt3-1.3b"),
        a: CompareSide::parse(a, "strategy A").unwrap(),
        b: CompareSide::parse(b, "strategy B").unwrap(),
        machine: None,
        seconds: false,
        plateau: false,
    };
    let got = match compare(&req) {
        Err(e) => e.to_string(),
        Ok(c) => panic!("accepted: {}", c.cheaper),
    };
    let out = common::symshard()
        .args(["compare", "gpt3-1.3b", a, b])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end(), format!("error: {got}"));
}

#[test]
fn cost_and_timeline_return_their_warnings() {
    use symshard::{timeline, TimelineInput, TimelineRequest};
    let t = timeline(&TimelineRequest {
        input: TimelineInput::Model {
            model: Model::named("llama2-7b"),
            strategy: Strategy {
                dp: Some(8),
                ..Strategy::default()
            },
        },
        machine: Machine::named("a100-80gb").unwrap(),
        svg: false,
    })
    .unwrap();
    assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
    assert!(t.warnings[0].starts_with("warning: ") && t.warnings[0].contains("does not fit"));
    let c = cost(&CostRequest {
        strategy: Some(Strategy {
            tp: Some(8),
            dp: Some(2),
            recompute: Some(symshard::strategy::Recompute::Selective),
            ..Strategy::default()
        }),
        ..CostRequest::new(Model::named("llama2-7b"))
    })
    .unwrap();
    assert!(
        c.warnings.iter().any(|w| w.starts_with("note: selective")),
        "{:?}",
        c.warnings
    );
}
