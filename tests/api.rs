//! The typed library interface (`symshard::{cost, timeline, …}`) against the command line: the
//! same request gives the same document, and bad input the typed error with its place.

mod common;

use symshard::sym::Rational;
use symshard::{
    cost, timeline, CostRequest, Error, Machine, Model, ModelSource, Quantity, Strategy,
    TimelineInput, TimelineRequest,
};

fn int(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

fn megatron_3d() -> Strategy {
    Strategy {
        dp: Some(16),
        tp: Some(8),
        pp: Some(8),
        sequence_parallel: true,
        recompute: Some(symshard::strategy::Recompute::Selective),
        ..Strategy::default()
    }
}

#[test]
fn a_cost_through_the_library_is_the_command_lines_document() {
    let req = CostRequest {
        strategy: Some(megatron_3d()),
        machine: Some(Machine::named("a100-80gb").unwrap()),
        ..CostRequest::new(Model::named("gpt3-175b"))
    };
    let got = cost(&req).unwrap();
    let want = common::json(&[
        "cost",
        "gpt3-175b",
        "--dp",
        "16",
        "--tp",
        "8",
        "--pp",
        "8",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--calib",
        "a100-80gb",
        "--format",
        "json",
    ]);
    assert_eq!(serde_json::to_value(&got).unwrap(), want);
    // The typed numbers are the document's, exact.
    let d = got.per_device.as_ref().unwrap();
    assert_eq!(
        d.flops.to_string(),
        want["per_device"]["flops"].as_str().unwrap()
    );
    assert_eq!(
        got.params,
        Quantity::Exact(want["params"].as_str().unwrap().parse().unwrap())
    );
    assert_eq!(
        serde_json::json!(d.feasible),
        want["per_device"]["feasible"]
    );
}

#[test]
fn exact_bindings_and_formulas() {
    // A batch no machine word holds, bound exactly.
    let big: Rational = "123456789012345678901234567890".parse().unwrap();
    let got = cost(&CostRequest::new(
        Model::named("gpt2-1.5b").set("B", big.clone()),
    ))
    .unwrap();
    assert_eq!(got.symbols["B"], big);
    assert_eq!(got.overrides["B"], big);
    let want = common::json(&[
        "cost",
        "gpt2-1.5b",
        "--set",
        "B=123456789012345678901234567890",
        "--format",
        "json",
    ]);
    assert_eq!(serde_json::to_value(&got).unwrap(), want);
    let symbolic = cost(&CostRequest {
        symbolic: true,
        ..CostRequest::new(Model::named("gpt2-1.5b"))
    })
    .unwrap();
    assert!(matches!(symbolic.params, Quantity::Formula(_)));
}

#[test]
fn a_machine_bundles_table_devices_per_node_and_memory() {
    let m = Machine::named("h100-sxm")
        .unwrap()
        .with_what_if("nvlink.bandwidth=x2")
        .unwrap()
        .with_gpus_per_node(4)
        .unwrap()
        .with_memory(int(60_000_000_000));
    assert_eq!(m.gpus_per_node(), 4);
    assert!(m.calibration().name.contains("what-if"));
    let req = CostRequest {
        strategy: Some(Strategy {
            tp: Some(4),
            dp: Some(2),
            ..Strategy::default()
        }),
        machine: Some(m),
        ..CostRequest::new(Model::named("llama2-7b"))
    };
    let got = serde_json::to_value(cost(&req).unwrap()).unwrap();
    let want = common::json(&[
        "cost",
        "llama2-7b",
        "--tp",
        "4",
        "--dp",
        "2",
        "--calib",
        "h100-sxm",
        "--with",
        "nvlink.bandwidth=x2",
        "--gpus-per-node",
        "4",
        "--memory",
        "60GB",
        "--format",
        "json",
    ]);
    assert_eq!(got, want);
    assert!(matches!(
        Machine::named("h100-sxm").unwrap().with_gpus_per_node(0),
        Err(Error::Usage(m)) if m.contains("--gpus-per-node")
    ));
}

#[test]
fn a_knob_string_is_a_strategy() {
    let s = Strategy::from_knobs("dp=4,tp=2,mbs=2,sp", "strategy").unwrap();
    assert_eq!(
        (s.dp, s.tp, s.micro_batch_size, s.sequence_parallel),
        (Some(4), Some(2), Some(2), true)
    );
    // Knobs given beside it win.
    let t = s.overlaid_by(&Strategy {
        tp: Some(4),
        ..Strategy::default()
    });
    assert_eq!((t.dp, t.tp), (Some(4), Some(4)));
}

#[test]
fn a_timeline_through_the_library_is_the_command_lines() {
    let req = TimelineRequest {
        input: TimelineInput::Model {
            model: Model::named("llama2-7b"),
            strategy: Strategy {
                dp: Some(4),
                tp: Some(2),
                pp: Some(2),
                microbatches: Some(4),
                ..Strategy::default()
            },
        },
        machine: Machine::named("a100-80gb").unwrap(),
        svg: true,
    };
    let got = timeline(&req).unwrap();
    let want = common::json(&[
        "timeline",
        "llama2-7b",
        "--calib",
        "a100-80gb",
        "--dp",
        "4",
        "--tp",
        "2",
        "--pp",
        "2",
        "--microbatches",
        "4",
        "--format",
        "json",
    ]);
    // Through the same JSON text as the command line's (serde_json reads floats to within an
    // ulp, so both sides are read back from text).
    let text = serde_json::to_string(&got.summary).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        want
    );
    assert_eq!(got.summary.model, "llama2-7b");
    assert!(got.svg.unwrap().starts_with("<svg"));
}

#[test]
fn a_bad_model_text_is_an_input_error_at_its_line() {
    let text = "name: bad\nfamily: gpt\nsymbols:\n  L: {value: 2}\n  H: {value: oops}\n";
    let model = Model::new(ModelSource::Yaml {
        text: text.into(),
        label: "<my model>".into(),
    });
    match cost(&CostRequest::new(model)) {
        Err(Error::Input { location, message }) => {
            assert_eq!(location.file, std::path::Path::new("<my model>"));
            assert_eq!(location.line, 5, "{message}");
            assert!(message.contains("oops"), "{message}");
        }
        other => panic!("expected an input error, got {other:?}"),
    }
    // An unknown symbol names the model's symbols.
    match cost(&CostRequest::new(
        Model::named("llama2-7b").set("NOPE", int(3)),
    )) {
        Err(Error::Usage(m)) => assert!(m.contains("no symbol `NOPE`"), "{m}"),
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn a_hugging_face_config_text_is_a_model() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hf/Llama-2-7b-hf.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let model = Model::new(ModelSource::HfConfig {
        text,
        label: "<config>".into(),
        name: "Llama-2-7b-hf".into(),
    });
    let got = cost(&CostRequest::new(model)).unwrap();
    let want = common::json(&["cost", path, "--format", "json"]);
    assert_eq!(got.params.to_string(), want["params"].as_str().unwrap());
}

/// `models()` lists what names resolve to, each shipped model's parameters what `cost` counts.
#[test]
fn the_catalogue_counts_what_cost_counts() {
    let all = symshard::models().unwrap();
    let shipped: Vec<_> = all.iter().filter(|m| m.source == "shipped").collect();
    assert!(shipped.len() > 20, "{}", shipped.len());
    for m in shipped.iter().filter(|m| m.family.is_some()).take(12) {
        let c = cost(&CostRequest::new(Model::named(&m.name))).unwrap();
        let want = m.params.clone().map(Rational::from_integer);
        assert_eq!(want.map(Quantity::Exact), Some(c.params), "{}", m.name);
    }
    // JSON keeps the command line's form: the count as decimal text.
    let doc = serde_json::to_value(shipped[0]).unwrap();
    assert!(doc["params"].is_string(), "{doc}");
}

/// `explain()` is `explain --format json`'s document; an unknown rule or an element size out of
/// range is refused.
#[test]
fn an_explanation_through_the_library_is_the_command_lines() {
    let e = symshard::explain("linear", None, 2).unwrap();
    let want = common::json(&["explain", "linear", "--format", "json"]);
    assert_eq!(serde_json::to_value(&e).unwrap(), want);
    assert_eq!(e.rule.name, "linear");
    let four = symshard::explain("linear", None, 4).unwrap();
    assert_ne!(four.bytes.read, e.bytes.read);
    let unknown = symshard::explain("no-such-rule", None, 2).unwrap_err();
    assert!(unknown.to_string().contains("no-such-rule"), "{unknown}");
    let zero = symshard::explain("linear", None, 0).unwrap_err();
    assert!(matches!(zero, Error::Usage(_)), "{zero}");
}
