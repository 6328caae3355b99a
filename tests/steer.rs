//! Steering `rank`: micro-batch size as users state it, every interleaving chunk count the layers
//! allow, fixed and capped knobs, memory with units and headroom, rows grouped when knobs do not
//! matter, the Pareto frontier and the smallest footprint when nothing fits (launch configs are
//! tested in tests/emit.rs).

use serde_json::Value;
use std::collections::BTreeSet;
use symshard::calib::Calibration;
use symshard::model::ModelLoader;
use symshard::search::steer::{apply_headroom, parse_memory};
use symshard::search::{rank, RankOptions, Steer};
use symshard::sym::Rational;

mod common;
use common::{json, refused, symshard};

/// An exact number as the JSON writes it ("123" or "7/2"), as a float.
fn num(v: &Value) -> f64 {
    let s = v.as_str().unwrap();
    match s.split_once('/') {
        Some((a, b)) => a.parse::<f64>().unwrap() / b.parse::<f64>().unwrap(),
        None => s.parse().unwrap(),
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

fn rows(v: &Value) -> &Vec<Value> {
    v["strategies"].as_array().unwrap()
}

fn r(n: u64) -> Rational {
    Rational::from_integer(n.into())
}

#[test]
fn micro_batch_size_times_dp_times_count_is_the_global_batch() {
    // gpt3-1.3b: B = 512 (models/gpt3-1.3b.yaml).
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "64",
        "--top",
        "30",
        "--format",
        "json",
    ]);
    let b: u64 = v["global_batch"].as_str().unwrap().parse().unwrap();
    assert!(!rows(&v).is_empty());
    for row in rows(&v) {
        let mbs = u(&row["micro_batch_size"]);
        assert_eq!(mbs * u(&row["dp"]) * u(&row["microbatches"]), b, "{row}");
        let s = row["strategy"].as_str().unwrap();
        assert!(s.contains(&format!("mbs={mbs}")), "{s}");
    }
}

#[test]
fn the_table_says_mbs_and_states_b_s_and_the_machine() {
    let out = symshard()
        .args(["rank", "gpt3-1.3b", "--devices", "64", "--top", "3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap();
    // B = 512 and S = 2048: models/gpt3-1.3b.yaml.
    assert!(header.contains("B = 512"), "{header}");
    assert!(header.contains("S = 2048"), "{header}");
    assert!(header.contains("dgx-h100"), "{header}");
    assert!(header.contains("80.0 GB"), "{header}");
    let columns = text
        .lines()
        .find(|l| l.trim_start().starts_with("rank "))
        .unwrap();
    assert!(columns.split_whitespace().any(|c| c == "mbs"), "{columns}");
    assert!(!columns.split_whitespace().any(|c| c == "mb"), "{columns}");
}

#[test]
fn the_size_flag_and_the_count_flag_price_the_same_strategy() {
    // B = 1536 (models/gpt3-175b.yaml) over dp = 8: size 1 is 192 micro-batches.
    let base = [
        "cost",
        "gpt3-175b",
        "--dp",
        "8",
        "--tp",
        "8",
        "--pp",
        "16",
        "--schedule",
        "interleaved-1f1b",
        "--sequence-parallel",
        "--format",
        "json",
    ];
    let by_size = json(&[&base[..], &["--micro-batch-size", "1"]].concat());
    let by_count = json(&[&base[..], &["--microbatches", "192"]].concat());
    assert_eq!(by_size["per_device"], by_count["per_device"]);
    let both = json(
        &[
            &base[..],
            &["--micro-batch-size", "2", "--microbatches", "96"],
        ]
        .concat(),
    );
    assert!(both["per_device"]["strategy"]
        .as_str()
        .unwrap()
        .contains("mbs=2"));
    let e = refused(
        &[
            &base[..],
            &["--micro-batch-size", "2", "--microbatches", "64"],
        ]
        .concat(),
    );
    assert!(e.contains("96 micro-batches"), "{e}");
    // 1536 / (8 × 5) is not whole.
    let e = refused(&[&base[..], &["--micro-batch-size", "5"]].concat());
    assert!(e.contains("micro-batch size 5"), "{e}");
}

/// Chunk counts of the interleaved rows of a ranking.
fn chunk_counts(v: &Value) -> BTreeSet<u64> {
    rows(v)
        .iter()
        .filter(|r| r["schedule"] == "interleaved-1f1b")
        .map(|r| u(&r["chunks"]))
        .collect()
}

#[test]
fn interleaving_tries_every_chunk_count_the_layers_allow_up_to_the_cap() {
    // gpt3-1.3b has L = 24 layers (models/gpt3-1.3b.yaml): at pp = 4, 6 layers per stage allow
    // 2, 3 and 6 chunks.
    let args = [
        "rank",
        "gpt3-1.3b",
        "--devices",
        "64",
        "--fix",
        "pp=4,schedule=interleaved-1f1b,tp=2",
        "--top",
        "1000",
        "--format",
        "json",
    ];
    let v = json(&args);
    assert_eq!(chunk_counts(&v), BTreeSet::from([2, 3, 6]));
    let v = json(&[&args[..], &["--max-chunks", "3"]].concat());
    assert_eq!(chunk_counts(&v), BTreeSet::from([2, 3]));
    let v = json(&[&args[..], &["--max-chunks", "4"]].concat());
    assert_eq!(chunk_counts(&v), BTreeSet::from([2, 3]));
    for row in rows(&v) {
        assert_eq!(u(&row["pp"]), 4);
        assert_eq!(u(&row["tp"]), 2);
        assert_eq!(24 % (4 * u(&row["chunks"])), 0);
    }
}

#[test]
fn more_chunks_cost_more_point_to_point_traffic() {
    // Narayanan et al. SC'21 §2.2: interleaving with v chunks multiplies the pipeline's
    // communication by v. Same strategy, 2 and 6 chunks: the inter-node share (pp crosses
    // nodes at tp = 2, dp = 8) grows.
    let cost = |v: &str| {
        json(&[
            "cost",
            "gpt3-1.3b",
            "--dp",
            "8",
            "--tp",
            "2",
            "--pp",
            "4",
            "--microbatches",
            "64",
            "--schedule",
            "interleaved-1f1b",
            "--chunks",
            v,
            "--format",
            "json",
        ])
    };
    let p2p = |v: &Value| num(&v["per_device"]["p2p_bytes"]);
    let (two, six) = (p2p(&cost("2")), p2p(&cost("6")));
    // The busiest stage exchanges 1 or 2 stage boundaries plus 2·(v − 1) chunk boundaries.
    let ratio = six / two;
    assert!(
        (ratio - 11.0 / 3.0).abs() < 1e-9 || (ratio - 3.0).abs() < 1e-9,
        "{six} / {two}"
    );
}

#[test]
fn fixed_and_capped_knobs_hold_in_every_row() {
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "64",
        "--fix",
        "tp=2,zero=1",
        "--max",
        "pp=4",
        "--schedule",
        "1f1b",
        "--no-sp",
        "--fix",
        "recompute=selective",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    assert!(!rows(&v).is_empty());
    for row in rows(&v) {
        assert_eq!(u(&row["tp"]), 2);
        assert_eq!(u(&row["zero"]), 1);
        assert!(u(&row["pp"]) <= 4);
        assert!(row["schedule"] == "1f1b" || row["schedule"] == "none");
        assert_eq!(row["sequence_parallel"], false);
        assert_eq!(row["recompute"], "selective");
    }
    assert!(v["steering"].as_str().unwrap().contains("tp=2"));
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "64",
        "--fix",
        "mbs=2",
        "--top",
        "20",
        "--format",
        "json",
    ]);
    for row in rows(&v) {
        assert_eq!(u(&row["micro_batch_size"]), 2);
    }
}

#[test]
fn bad_steering_is_refused_naming_the_item() {
    let base = ["rank", "gpt3-1.3b", "--devices", "64"];
    for (extra, expect) in [
        (vec!["--fix", "tq=8"], "unknown knob `tq`"),
        (vec!["--fix", "tp=0"], "`tp` must be at least 1"),
        (vec!["--fix", "tp=3"], "3 does not divide the 64 devices"),
        (
            vec!["--fix", "tp=8,pp=16"],
            "does not divide the 64 devices",
        ),
        (vec!["--fix", "tp=eight"], "not a whole number"),
        (vec!["--fix", "tp"], "expected KNOB=VALUE"),
        (vec!["--fix", "tp=2,tp=4"], "given twice"),
        (vec!["--fix", "zero=4"], "ZeRO stages are 0, 1, 2 and 3"),
        (vec!["--fix", "schedule=zigzag"], "unknown schedule"),
        (vec!["--fix", "sp=maybe"], "expected on or off"),
        (vec!["--max", "sp=on"], "has no order"),
        (vec!["--max", "tp=0"], "`tp` must be at least 1"),
        (vec!["--fix", "tp=4", "--max", "tp=2"], "exceeds --max tp=2"),
        (vec!["--schedule", "zigzag"], "unknown schedule"),
        (vec!["--memory", "75XB"], "unknown unit `XB`"),
        (vec!["--memory", "0GB"], "must be positive"),
        (vec!["--memory", "GB"], "expected a number"),
        (vec!["--headroom", "100%"], "leaves no memory"),
        // The device memory as tables print it, not a count of bytes.
        (
            vec!["--headroom", "80GB"],
            "all of the 80.0 GB device memory",
        ),
        (vec!["--max-chunks", "0"], "--max-chunks must be at least 1"),
        (vec!["--fix", "tp=64,sp=on,pp=1,dp=1,ep=2"], "no strategy"),
    ] {
        let e = refused(&[&base[..], &extra[..]].concat());
        assert!(e.contains(expect), "{extra:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn memory_in_bits_is_refused_not_read_as_bytes() {
    // `Gb` is gigabits (a lower-case b): 80Gb would be 10 GB, not the 80 GB a user means.
    for (text, suggest) in [
        ("80Gb", "80GB"),
        ("80 gb", "80GB"),
        ("64Gib", "64GiB"),
        ("512Mb", "512MB"),
    ] {
        let e = parse_memory(text).unwrap_err().to_string();
        assert!(e.contains("bits") && e.contains(suggest), "{text}: {e}");
    }
    let out = symshard()
        .args(["rank", "llama3-8b", "--devices", "64", "--memory", "80Gb"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("`Gb` is bits") && e.contains("80GB"), "{e}");
}

#[test]
fn memory_takes_units_and_headroom() {
    assert_eq!(parse_memory("75GB").unwrap(), r(75_000_000_000));
    assert_eq!(parse_memory("75 gB").unwrap(), r(75_000_000_000));
    assert_eq!(parse_memory("80GiB").unwrap(), r(80 << 30));
    assert_eq!(parse_memory("75.5GB").unwrap(), r(75_500_000_000));
    assert_eq!(parse_memory("1_000").unwrap(), r(1000));
    assert_eq!(parse_memory("80000000000").unwrap(), r(80_000_000_000));
    assert!(parse_memory("0.5B").is_err());
    assert!(parse_memory("-1GB").is_err());
    assert!(parse_memory("1e9").is_err());
    let cap = r(80_000_000_000);
    assert_eq!(apply_headroom("10%", &cap).unwrap(), r(72_000_000_000));
    assert_eq!(apply_headroom("8GB", &cap).unwrap(), r(72_000_000_000));
    assert_eq!(apply_headroom("0%", &cap).unwrap(), cap);
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "8",
        "--memory",
        "40GB",
        "--headroom",
        "25%",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(v["memory_limit"], "30000000000");
    for row in rows(&v) {
        let m = num(&row["memory_per_device"]);
        assert!(row["feasible"] == false || m <= 30e9, "{row}");
    }
    // The same limit in bytes, in GB and as headroom rank the same rows.
    let plain = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "8",
        "--memory",
        "30000000000",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(plain["strategies"], v["strategies"]);
    // cost and timeline take units too.
    json(&[
        "cost",
        "gpt3-1.3b",
        "--dp",
        "8",
        "--memory",
        "40GiB",
        "--format",
        "json",
    ]);
    let e = refused(&["cost", "gpt3-1.3b", "--dp", "8", "--memory", "4 parsecs"]);
    assert!(e.contains("--memory"), "{e}");
}

#[test]
fn rows_with_equal_cost_and_memory_are_one_line() {
    // Under fused attention selective recomputation recomputes nothing: those rows cost and
    // weigh exactly the same as recompute=none and are grouped (llama3-8b defaults to flash).
    let v = json(&[
        "rank",
        "llama3-8b",
        "--devices",
        "16",
        "--top",
        "10",
        "--format",
        "json",
    ]);
    let mut grouped = 0;
    let mut keys = BTreeSet::new();
    for row in rows(&v) {
        let key = (
            row["relative_cost"].to_string(),
            row["memory_per_device"].to_string(),
            row["feasible"].to_string(),
        );
        assert!(
            keys.insert(key),
            "two rows with equal cost and memory: {row}"
        );
        if let Some(free) = row["knobs_that_do_not_matter"].as_object() {
            grouped += 1;
            let rec: Vec<&str> = free["recompute"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            assert!(rec.contains(&"none") && rec.contains(&"selective"), "{row}");
        }
    }
    assert!(grouped > 0, "no grouped row");
    assert_eq!(rows(&v).len(), 10, "grouping keeps --top lines");
    // The grouped knob really changes nothing: price both exactly.
    let row = rows(&v)
        .iter()
        .find(|r| r["knobs_that_do_not_matter"].is_object())
        .unwrap();
    let cost = |recompute: &str| {
        let mut a: Vec<String> = [
            "cost",
            "llama3-8b",
            "--dp",
            &row["dp"].to_string(),
            "--tp",
            &row["tp"].to_string(),
            "--pp",
            &row["pp"].to_string(),
            "--microbatches",
            &row["microbatches"].to_string(),
            "--recompute",
            recompute,
            "--format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if u(&row["zero"]) > 0 {
            a.extend(["--zero".into(), row["zero"].to_string()]);
        }
        if row["sequence_parallel"] == true {
            a.push("--sequence-parallel".into());
        }
        if row["schedule"] != "none" {
            a.extend([
                "--schedule".into(),
                row["schedule"].as_str().unwrap().into(),
            ]);
            if row["schedule"] == "interleaved-1f1b" {
                a.extend(["--chunks".into(), row["chunks"].to_string()]);
            }
        }
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let v = json(&refs);
        (
            v["per_device"]["relative"].clone(),
            v["per_device"]["memory"].clone(),
        )
    };
    assert_eq!(cost("none"), cost("selective"));
}

#[test]
fn the_pareto_frontier_is_exact() {
    // Every strategy that fits, ranked with a top large enough to hold them all, against the
    // frontier: no strategy beats a frontier point in both memory and cost, and every strategy
    // is matched or beaten in both by a frontier point.
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-125m")
        .unwrap();
    let calib = Calibration::reference().unwrap();
    let opts = RankOptions {
        devices: 8,
        top: 100_000,
        memory: r(20_000_000_000),
        pareto: true,
        ..RankOptions::default()
    };
    let res = rank(&m, &m.values, &calib, &opts).unwrap();
    let front = &res.pareto;
    assert!(front.len() >= 2, "{}", front.len());
    for w in front.windows(2) {
        assert!(w[0].evaluation.memory.total < w[1].evaluation.memory.total);
        assert!(w[0].evaluation.relative.total > w[1].evaluation.relative.total);
    }
    let all: Vec<_> = res
        .rows
        .iter()
        .flat_map(|row| {
            std::iter::once(&row.evaluation)
                .map(|e| (e.memory.total.clone(), e.relative.total.clone(), e.feasible))
        })
        .filter(|x| x.2)
        .collect();
    assert!(all.len() > front.len());
    for (mem, cost, _) in &all {
        assert!(front
            .iter()
            .any(|f| &f.evaluation.memory.total <= mem && &f.evaluation.relative.total <= cost));
    }
    for f in front {
        assert!(!all
            .iter()
            .any(|(mem, cost, _)| (mem < &f.evaluation.memory.total
                && cost <= &f.evaluation.relative.total)
                || (mem <= &f.evaluation.memory.total && cost < &f.evaluation.relative.total)));
    }
    // The cheapest strategy that fits ends the frontier.
    assert_eq!(
        front.last().unwrap().evaluation.relative.total,
        res.rows[0].evaluation.relative.total
    );
}

/// Without `--headroom`, a search keeps 10 % of the table's capacity free (vLLM's default
/// `gpu_memory_utilization` of 0.9, vLLM documentation, Engine Arguments) and says so in its
/// header; `--headroom 0%` takes it back, and a `--memory` given is taken whole.
#[test]
fn the_default_headroom_is_kept_free_and_stated() {
    let run = |extra: &[&str]| {
        let mut args = vec!["rank", "gpt3-1.3b", "--devices", "8", "--top", "3"];
        args.extend_from_slice(extra);
        let o = symshard().args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let text = run(&[]);
    let header = text.lines().next().unwrap();
    assert!(
        header.ends_with(
            "80.0 GB per device, 72.0 GB usable (headroom 10% by default, --headroom to change)"
        ),
        "{header}"
    );
    let limit = |extra: &[&str]| {
        let mut args = vec!["rank", "gpt3-1.3b", "--devices", "8", "--top", "1"];
        args.extend_from_slice(extra);
        args.extend(["--format", "json"]);
        json(&args)["memory_limit"].as_str().unwrap().to_string()
    };
    assert_eq!(limit(&[]), "72000000000");
    assert_eq!(limit(&["--headroom", "0%"]), "80000000000");
    assert_eq!(limit(&["--memory", "75GB"]), "75000000000");
    assert_eq!(
        limit(&["--memory", "75GB", "--headroom", "10%"]),
        "67500000000"
    );
    let plain = run(&["--headroom", "0%"]);
    assert!(
        plain
            .lines()
            .next()
            .unwrap()
            .ends_with("80.0 GB per device"),
        "{plain}"
    );
}

#[test]
fn when_nothing_fits_the_smallest_footprint_is_named() {
    // GPT-3 175B on 8 devices of 80 GB: its 175 B parameters need 16 bytes each under mixed
    // precision Adam, 2.8 TB over 8 devices at the very least.
    let out = symshard()
        .args(["rank", "gpt3-175b", "--devices", "8", "--top", "3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("nothing fits in 72.0 GB per device: the smallest footprint reachable is"),
        "{text}"
    );
    let v = json(&[
        "rank",
        "gpt3-175b",
        "--devices",
        "8",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    let smallest = &v["smallest_footprint"];
    // Every state sharded 8 ways (ZeRO 3 over dp = 8, or tp = 8 with full recomputation and
    // 512 micro-batches of 3) is about 350 GB: nothing fits, and the least is named.
    let need: f64 = smallest["memory_per_device"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(need > 72e9, "{smallest}");
    // Exactly the least memory of every strategy of the space.
    let m = ModelLoader::embedded()
        .unwrap()
        .resolve("gpt3-175b")
        .unwrap();
    let calib = Calibration::reference().unwrap();
    let res = rank(
        &m,
        &m.values,
        &calib,
        &RankOptions {
            devices: 8,
            top: 100_000,
            ..RankOptions::default()
        },
    )
    .unwrap();
    let least = res
        .rows
        .iter()
        .map(|row| row.evaluation.memory.total.clone())
        .min()
        .unwrap();
    let got = res.smallest.as_ref().unwrap().0.memory.total.clone();
    assert_eq!(got, least);
    assert_eq!(
        smallest["memory_per_device"].as_str().unwrap(),
        least.to_string()
    );
}

#[test]
fn steering_in_the_library() {
    let mut s = Steer::default();
    s.fix("tp=8,pp=4,zero=1", "--fix").unwrap();
    s.max("dp=16", "--max").unwrap();
    assert_eq!(s.describe(), "--fix tp=8,pp=4,zero=1 --max dp=16");
    assert!(s.check_devices(512).is_ok());
    assert_eq!(
        s.check_devices(48).unwrap_err(),
        symshard::search::SteerError::ProductDevices {
            fix: "--fix",
            fixed: "tp=8,pp=4".into(),
            product: 32,
            devices: 48
        }
    );
    assert!(s.allows_mesh(16, 8, 4));
    assert!(!s.allows_mesh(32, 8, 4));
}

#[test]
fn the_pareto_frontier_by_seconds_ends_at_the_fastest() {
    let v = json(&[
        "rank",
        "gpt3-125m",
        "--devices",
        "8",
        "--calib",
        "a100-80gb",
        "--pareto",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let front = v["pareto"].as_array().unwrap();
    assert!(front.len() >= 2, "{}", front.len());
    for w in front.windows(2) {
        assert!(num(&w[0]["memory_per_device"]) < num(&w[1]["memory_per_device"]));
        let (a, b) = (
            w[0]["iteration_seconds"].as_f64().unwrap(),
            w[1]["iteration_seconds"].as_f64().unwrap(),
        );
        assert!(a > b, "{a} then {b}");
    }
    assert_eq!(
        front.last().unwrap()["iteration_seconds"],
        rows(&v)[0]["iteration_seconds"]
    );
}

#[test]
fn rejections_are_grouped_by_kind_with_one_whole_example() {
    // gpt3-175b on 1024 devices (measured): 588 strategies refused because pp exceeds the 98
    // layers (pp = 128, 256 and 512), 432 because tp does not divide an index (5 distinct
    // degrees), 1 because the batch 1536 does not split over dp = 1024.
    let out = symshard()
        .args(["rank", "gpt3-175b", "--devices", "1024"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" rejected: ")).collect();
    assert_eq!(
        lines,
        [
            "  588 rejected: more pipeline stages than layers, e.g. pp = 128 is more than the 98 layers to place (3 distinct reasons)",
            "  432 rejected: split degree does not divide an operator index, e.g. tp = 64 does not divide `scores` index `g` = NH = 96 (5 distinct reasons)",
            "  1 rejected: global batch not divisible by dp, e.g. batch not divisible by dp = 1024",
        ]
    );
    // The JSON keeps every distinct reason whole, with its count.
    let v = json(&["rank", "gpt3-175b", "--devices", "1024", "--format", "json"]);
    let rejected = v["rejected"].as_object().unwrap();
    assert_eq!(rejected.len(), 9);
    assert_eq!(
        rejected["tp = 128 does not divide `scores` index `g` = NH = 96"],
        112
    );
    assert_eq!(
        rejected["pp = 256 is more than the 98 layers to place"],
        156
    );
    let total: u64 = rejected.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, 588 + 432 + 1);
}

#[test]
fn rejection_kinds_name_the_error_variant() {
    use symshard::search::error::{Rejection, Rejections};
    use symshard::strategy::StrategyError;
    let mut r = Rejections::default();
    r.add(&Rejection::BatchNotDivisible { dp: 3 });
    r.add(&StrategyError::TooManyStages { pp: 8, layers: 4 }.into());
    r.add(&StrategyError::TooManyStages { pp: 16, layers: 4 }.into());
    r.add(&StrategyError::TooManyStages { pp: 16, layers: 4 }.into());
    let kinds = r.by_kind();
    assert_eq!(kinds.len(), 2);
    assert_eq!(kinds[0].0, "more pipeline stages than layers");
    assert_eq!(kinds[0].1.count, 3);
    assert_eq!(
        kinds[0].1.example(),
        "pp = 16 is more than the 4 layers to place"
    );
    assert_eq!(kinds[1].1.example(), "batch not divisible by dp = 3");
    assert_eq!(r.by_message().values().sum::<usize>(), 4);
}
