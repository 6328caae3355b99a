//! Tensor parallelism on a graph whose every size is a number (GPT-2 exported by TorchScript
//! without dynamic axes, 2 sequences of 32 tokens, hidden size 64, 4 heads): the per-operator
//! search cuts a dimension where the degree divides it, at the cost its operator's index kinds
//! give, and `rank` lists tensor-parallel rows whose per-device compute is divided. The export
//! of the same model with symbolic batch and sequence ranks as it did before numbers could be
//! cut.

mod common;
use common::{json, temp_dir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use symshard::diag::Source;
use symshard::import::{import_onnx, OnnxOptions};
use symshard::model::{Model, ModelLoader};
use symshard::search::problem::Problem;
use symshard::sym::Rational;

fn exported(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/onnx/exported")
        .join(file)
}

fn fixed() -> String {
    exported("gpt2_ts.onnx").to_string_lossy().into_owned()
}

fn rational(v: &Value) -> Rational {
    Rational::from_str(v.as_str().unwrap()).unwrap()
}

/// The top row of `rank gpt2_ts.onnx` on `tp` devices with the auto layout only.
fn auto_row(tp: u64) -> Value {
    let v = json(&[
        "rank",
        &fixed(),
        "--devices",
        &tp.to_string(),
        "--fix",
        "pp=1,recompute=none",
        "--layouts",
        "auto",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    v["strategies"][0].clone()
}

/// `cost gpt2_ts.onnx --per-op` of a rank row: its knobs and its placements as a strategy file.
fn cost_of(row: &Value, dir: &Path) -> Value {
    let mut s = format!(
        "dp: {}\ntp: {}\npp: {}\nmicrobatches: {}\nsplits:\n",
        row["dp"], row["tp"], row["pp"], row["microbatches"]
    );
    for (op, index) in row["placements"].as_object().unwrap() {
        writeln!(s, "  {op}: {}", index.as_str().unwrap()).unwrap();
    }
    let file = dir.join(format!("tp{}.yaml", row["tp"]));
    std::fs::write(&file, s).unwrap();
    let f = file.to_string_lossy().into_owned();
    json(&[
        "cost",
        &fixed(),
        "--strategy",
        &f,
        "--per-op",
        "--format",
        "json",
    ])
}

/// At tp 2, 4 and 8 the auto row divides the compute of one device: its FLOPs per device are
/// below one device's whole step, and every matmul it splits runs a `tp`-th of its FLOPs per
/// device (plus at most a bias added on every device), the MLP's first GEMM among them.
#[test]
fn a_fixed_size_export_gets_tensor_parallelism() {
    let dir = temp_dir("concrete-split");
    let whole = json(&["cost", &fixed(), "--strategy", "dp=1", "--format", "json"]);
    let one = rational(&whole["per_device"]["flops"]);
    assert_eq!(one, Rational::from_integer(66_979_840.into()));
    for tp in [2u64, 4, 8] {
        let row = auto_row(tp);
        assert_eq!(row["tp"], tp);
        assert_eq!(row["layout"], "auto");
        let c = cost_of(&row, &dir);
        let per = rational(&c["per_device"]["flops"]);
        assert!(per < one, "tp {tp}: {per} FLOPs per device, {one} on one");
        let ops: BTreeMap<&str, &Value> = c["per_op"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["name"].as_str().unwrap(), o))
            .collect();
        let n = Rational::from_integer(tp.into());
        let mut split = Vec::new();
        for o in c["per_device"]["per_op"].as_array().unwrap() {
            let name = o["name"].as_str().unwrap();
            let w = ops[name];
            if w["class"] != "matmul" || o["tp_split"].is_null() {
                continue;
            }
            let (mine, all) = (rational(&o["forward"]), rational(&w["forward"]));
            let share = &all / &n;
            assert!(
                mine >= share && mine <= &share * Rational::new(51.into(), 50.into()),
                "tp {tp}: {name} runs {mine} of {all} FLOPs per device"
            );
            split.push(name.to_string());
        }
        assert!(
            split.iter().any(|s| s.ends_with("mlp_c_fc_Gemm")),
            "tp {tp}: split matmuls {split:?}"
        );
    }
}

/// The imported fixed-size model and the position of its repeated layer.
fn fixed_model() -> (Model, usize) {
    let out = import_onnx(
        &exported("gpt2_ts.onnx"),
        &OnnxOptions::default(),
        &mut |_, _| {},
    )
    .unwrap();
    assert!(out.fixed_sizes);
    let model = ModelLoader::embedded()
        .unwrap()
        .load(&Source::new("gpt2_ts.yaml", out.yaml))
        .unwrap();
    let bi = model
        .blocks
        .iter()
        .position(|b| b.name == "layers")
        .unwrap();
    (model, bi)
}

fn layer_problem(tp: u64) -> Problem {
    let (m, bi) = fixed_model();
    let calib = symshard::calib::Calibration::reference().unwrap();
    let axes = Problem::tp_axis(tp, 8, &calib);
    Problem::from_block(&m, bi, &m.values, axes, &BTreeMap::new()).unwrap()
}

fn op(p: &Problem, name: &str) -> usize {
    let pos = p
        .ops
        .iter()
        .position(|o| o.name.ends_with(name) && !o.is_source());
    pos.unwrap_or_else(|| panic!("no operator {name}"))
}

fn cut(p: &Problem, op: usize, index: &str) -> usize {
    let pos = p.ops[op].cuts.iter().position(|c| c.index == index);
    pos.unwrap_or_else(|| panic!("{} has no cut of {index}", p.ops[op].name))
}

/// A degree is refused dimension by dimension: at tp 8 no choice of any operator cuts a size
/// that 8 does not divide (the 4 heads of the attention reshape among them), while at tp 4
/// the heads are cut.
#[test]
fn a_degree_cuts_only_the_sizes_it_divides() {
    let heads = |p: &Problem| {
        let r = op(p, "attn_Reshape_2");
        let c = cut(p, r, "n");
        assert_eq!(p.ops[r].cuts[c].value(), 4);
        p.choices(r).iter().any(|ch| ch[0] == Some(c))
    };
    let p8 = layer_problem(8);
    assert!(!heads(&p8));
    let mut cuts = 0;
    for (i, o) in p8.ops.iter().enumerate() {
        for ch in p8.choices(i) {
            if let Some(c) = ch[0] {
                cuts += 1;
                let v = o.cuts[c].value();
                assert!(o.is_source() || v % 8 == 0, "{} cuts {v} in 8", o.name);
            }
        }
    }
    assert!(cuts > 0);
    assert!(heads(&layer_problem(4)));
}

/// In a graph of numbers a shard is named by the data it holds, not by the number it cuts: the
/// hidden size 64 of a projection's output cut in 4 is the 4 heads of its reshape cut in 4
/// (one placement, no redistribution between them), and the 64 tokens cut in 4 are not.
#[test]
fn a_hidden_cut_and_a_heads_cut_hold_the_same_data() {
    let p = layer_problem(4);
    let gemm = op(&p, "attn_c_attn_Gemm_piece1");
    let view = op(&p, "attn_Split_0");
    let reshape = op(&p, "attn_Reshape_2");
    let at = |o: usize, index: &str| vec![Some(cut(&p, o, index))];
    let out = p.price(gemm, &at(gemm, "n")).unwrap().out;
    let through = p.price(view, &at(view, "h")).unwrap();
    assert_eq!(through.needs[0].as_ref().unwrap()[0].want, out[0]);
    assert_eq!(through.out, out);
    let heads = p.price(reshape, &at(reshape, "n")).unwrap();
    assert_eq!(heads.needs[0].as_ref().unwrap()[0].want, out[0]);
    let tokens = p.price(reshape, &at(reshape, "b")).unwrap();
    assert_ne!(tokens.needs[0].as_ref().unwrap()[0].want, out[0]);
    // The gradient the projection receives is the same shard too.
    assert_eq!(heads.needs[0].as_ref().unwrap()[0].grad, Some(out[0]));
}

/// The export with symbolic batch and sequence ranks exactly as before: its sizes are symbols,
/// and a number in it (the vocabulary, the position table) stays whole.
#[test]
fn a_symbolic_export_ranks_as_before() {
    let f = exported("gpt2_ts_dynamic.onnx");
    let v = json(&[
        "rank",
        &f.to_string_lossy(),
        "--devices",
        "8",
        "--format",
        "json",
    ]);
    let search: Vec<(u64, Rational)> = v["auto_layouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["tp"].as_u64().unwrap(), rational(&a["search_cost"])))
        .collect();
    let r = |s: &str| Rational::from_str(s).unwrap();
    assert_eq!(
        search,
        vec![
            (2, r("21138038396/201")),
            (4, r("3869106042/67")),
            (8, r("22082914864/603")),
        ]
    );
    let rows: Vec<(u64, &str, Rational)> = v["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .take(4)
        .map(|s| {
            let layout = s["layout"].as_str().unwrap();
            (
                s["tp"].as_u64().unwrap(),
                layout,
                rational(&s["relative_cost"]),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (8, "auto", r("174856733988400/603")),
            (8, "annotated", r("19555391759496/67")),
            (4, "auto", r("176271272869978/603")),
            (4, "annotated", r("177986205522472/603")),
        ]
    );
}
