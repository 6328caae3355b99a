//! What-if machines (`--calib TABLE --with NAME=VALUE,…`): the derived machine says what it
//! changed wherever the machine is named, unknown or inconsistent changes are refused with the
//! valid names, and a faster link makes a communication-bound step faster.

mod common;
use common::{json, refused, stdout};

const RANK: [&str; 8] = [
    "rank",
    "gpt3-1.3b",
    "--devices",
    "16",
    "--calib",
    "h100-sxm",
    "--top",
    "1",
];

fn seconds(doc: &serde_json::Value) -> f64 {
    doc["strategies"][0]["iteration_seconds"].as_f64().unwrap()
}

#[test]
fn an_unknown_quantity_is_refused_naming_the_valid_ones() {
    let mut args = RANK.to_vec();
    args.extend(["--with", "nvlink.bandwith=x2"]);
    let err = refused(&args);
    assert!(err.contains("unknown quantity `nvlink.bandwith`"), "{err}");
    for name in [
        "device.peak.bf16",
        "hbm.bandwidth",
        "hbm.capacity",
        "nvlink.bandwidth",
        "network.bandwidth",
        "nvlink.latency",
        "network.latency",
        "domain",
    ] {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
}

#[test]
fn inconsistent_values_are_refused() {
    for (with, says) in [
        ("domain=0", "must be positive"),
        ("domain=3.5", "whole number of devices"),
        ("hbm.capacity=x-1", "positive"),
        ("hbm.capacity=80parsecs", "expected bytes"),
        ("domain=x2,domain=16", "given twice"),
    ] {
        let mut args = RANK.to_vec();
        args.extend(["--with", with]);
        let err = refused(&args);
        assert!(err.contains(says), "{with}: {err}");
    }
}

#[test]
fn with_needs_a_table() {
    let err = common::symshard()
        .args([
            "rank",
            "gpt3-1.3b",
            "--devices",
            "16",
            "--with",
            "domain=16",
        ])
        .output()
        .unwrap();
    assert_eq!(err.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&err.stderr).contains("--calib"));
}

/// Slower links make the step slower, faster ones faster; each what-if ranking names its
/// machine and its changes, in JSON and in the table.
#[test]
fn link_bandwidth_moves_the_simulated_seconds_the_right_way() {
    let mut base = RANK.to_vec();
    base.extend(["--format", "json"]);
    let plain = json(&base);
    assert!(plain.get("what_if").is_none(), "no what_if without --with");
    let with = |w: &'static str| {
        let mut a = base.clone();
        a.extend(["--with", w]);
        json(&a)
    };
    let slow = with("nvlink.bandwidth=x0.125,network.bandwidth=x0.125");
    let fast = with("nvlink.bandwidth=x2,network.bandwidth=x2");
    assert!(
        seconds(&slow) > seconds(&plain),
        "{} {}",
        seconds(&slow),
        seconds(&plain)
    );
    assert!(
        seconds(&fast) <= seconds(&plain),
        "{} {}",
        seconds(&fast),
        seconds(&plain)
    );
    assert_eq!(
        fast["calibration"],
        "h100-sxm+what-if(nvlink.bandwidth=x2,network.bandwidth=x2)"
    );
    let changes = &fast["what_if"]["changes"];
    assert_eq!(changes[0]["field"], "nvlink.bandwidth");
    assert_eq!(changes[0]["before"], "450000000000");
    assert_eq!(changes[0]["after"], "900000000000");
    let mut table = RANK.to_vec();
    table.extend(["--with", "nvlink.bandwidth=900GB/s"]);
    let text = stdout(&table);
    assert!(
        text.contains("what-if machine: h100-sxm with nvlink.bandwidth 450.0 GB/s → 900.0 GB/s"),
        "{text}"
    );
}

/// A larger memory and a bigger NVLink domain reach the search: the header states them.
#[test]
fn capacity_and_domain_change_the_machine() {
    let mut args = RANK.to_vec();
    args.extend(["--with", "hbm.capacity=141GB,domain=16", "--format", "json"]);
    let doc = json(&args);
    assert_eq!(doc["gpus_per_node"], 16);
    // 141 GB less the default headroom of 10 %.
    assert_eq!(doc["memory_limit"], "126900000000");
}

/// `timeline` takes `--with` too, and says so in its table and JSON.
#[test]
fn timeline_marks_a_what_if_machine() {
    let args = [
        "timeline",
        "gpt3-1.3b",
        "--dp",
        "16",
        "--micro-batch-size",
        "4",
        "--calib",
        "h100-sxm",
        "--with",
        "hbm.bandwidth=x2",
    ];
    let text = stdout(&args);
    assert!(
        text.contains("what-if machine: h100-sxm with hbm.bandwidth"),
        "{text}"
    );
    let mut j = args.to_vec();
    j.extend(["--format", "json"]);
    let doc = json(&j);
    assert!(doc["what_if"].as_str().unwrap().contains("hbm.bandwidth"));
    assert!(doc["calibration"].as_str().unwrap().contains("+what-if("));
}

/// A what-if machine's printed name, `TABLE+what-if(CHANGES)`, names the same machine again
/// wherever `--calib` is taken: `rank` gives the same seconds as with `--with`.
#[test]
fn the_printed_name_of_a_what_if_machine_names_it_again() {
    let mut with = RANK.to_vec();
    with.extend([
        "--with",
        "nvlink.bandwidth=x2,hbm.capacity=141GB",
        "--format",
        "json",
    ]);
    let by_flag = json(&with);
    let name = by_flag["calibration"].as_str().unwrap().to_string();
    assert_eq!(
        name,
        "h100-sxm+what-if(nvlink.bandwidth=x2,hbm.capacity=141GB)"
    );
    let mut named = RANK.to_vec();
    named[5] = &name;
    named.extend(["--format", "json"]);
    let by_name = json(&named);
    assert_eq!(by_name["calibration"], by_flag["calibration"]);
    assert_eq!(by_name["memory_limit"], "126900000000");
    assert_eq!(seconds(&by_name), seconds(&by_flag));
    assert_eq!(by_name["what_if"], by_flag["what_if"]);
}

/// `port` sets a what-if machine beside its table, and a link twice as fast is no slower.
#[test]
fn port_times_an_analysis_on_a_what_if_machine() {
    let dir = common::temp_dir("whatif-port");
    let plan = dir.join("plan.json");
    let plan = plan.to_str().unwrap();
    stdout(&[
        "analyze",
        "gpt3-1.3b",
        "--dp",
        "2",
        "--tp",
        "8",
        "--micro-batch-size",
        "4",
        "-o",
        plan,
    ]);
    let doc = json(&[
        "port",
        plan,
        "--calib",
        "h100-sxm",
        "--calib",
        "h100-sxm+what-if(nvlink.bandwidth=x4)",
        "--format",
        "json",
    ]);
    let rows = doc.as_array().unwrap();
    assert_eq!(
        rows[1]["calibration"],
        "h100-sxm+what-if(nvlink.bandwidth=x4)"
    );
    let s = |i: usize| rows[i]["iteration_seconds"].as_f64().unwrap();
    assert!(
        s(1) < s(0),
        "tp = 8 over NVLink four times as fast: {} {}",
        s(1),
        s(0)
    );
}

/// A what-if name with a bad change is refused as `--with` refuses it.
#[test]
fn a_bad_what_if_name_is_refused() {
    let mut args = RANK.to_vec();
    args[5] = "h100-sxm+what-if(nvlink.bandwith=x2)";
    let err = refused(&args);
    assert!(err.contains("unknown quantity `nvlink.bandwith`"), "{err}");
    args[5] = "no-such-table+what-if(domain=16)";
    let err = refused(&args);
    assert!(err.contains("unknown calibration `no-such-table`"), "{err}");
}
