//! `symshard port MODEL --devices N --calib …`: the fastest layout on each machine, and where it
//! changes, the previous machine's best timed on this one (never faster than this one's best,
//! which the same search found); a machine the devices do not suit is a row that says why.

mod common;
use common::{json, refused};

fn seconds(v: &serde_json::Value) -> f64 {
    v["iteration_seconds"].as_f64().unwrap()
}

#[test]
fn each_machine_gets_its_best_layout_and_a_changed_choice_is_explained() {
    let doc = json(&[
        "port",
        "gpt3-1.3b",
        "--devices",
        "16",
        "--calib",
        "a100-80gb",
        "--calib",
        "h100-sxm",
        "--calib",
        "gb200-nvl72",
        "--format",
        "json",
    ]);
    let rows = doc.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let mut changed = 0;
    for (i, m) in rows.iter().enumerate() {
        let s = &m["summary"];
        assert!(m["strategy"].is_string(), "{m}");
        assert_eq!(s["device_count"], 16);
        assert_eq!(s["calibration"], m["calibration"]);
        if i > 0 && m["strategy"] != rows[i - 1]["strategy"] {
            changed += 1;
            let prev = &m["previous_best"];
            assert_eq!(prev["strategy"], rows[i - 1]["strategy"]);
            // The search ranked the previous best too: timed here it is no faster.
            assert!(
                seconds(&prev["summary"]) >= seconds(s) * (1.0 - 1e-9),
                "{m}"
            );
        } else {
            assert!(m.get("previous_best").is_none(), "{m}");
        }
    }
    assert!(
        changed >= 1,
        "the GB200's larger memory changes the micro-batch: {doc}"
    );
    // A newer machine is faster on its own best layout.
    assert!(seconds(&rows[1]["summary"]) < seconds(&rows[0]["summary"]));
    assert!(seconds(&rows[2]["summary"]) < seconds(&rows[1]["summary"]));
    let text = common::stdout(&[
        "port",
        "gpt3-1.3b",
        "--devices",
        "16",
        "--calib",
        "h100-sxm",
        "--calib",
        "gb200-nvl72",
    ]);
    assert!(text.contains("why the best layout changes"), "{text}");
    assert!(text.contains("on gb200-nvl72: h100-sxm's best"), "{text}");
}

#[test]
fn a_machine_whose_nodes_the_devices_do_not_fill_is_a_row_with_its_reason() {
    let doc = json(&[
        "port",
        "gpt3-1.3b",
        "--devices",
        "1024",
        "--calib",
        "h100-sxm",
        "--calib",
        "gb200-nvl72",
        "--fix",
        "pp=1",
        "--format",
        "json",
    ]);
    let rows = doc.as_array().unwrap();
    assert!(rows[0]["strategy"].is_string());
    assert!(rows[1].get("strategy").unwrap().is_null());
    let why = rows[1]["reason"].as_str().unwrap();
    assert!(why.contains("does not divide the 1024 devices"), "{why}");
}

#[test]
fn a_model_needs_devices_and_an_analysis_takes_none() {
    let err = refused(&["port", "gpt3-1.3b", "--calib", "h100-sxm"]);
    assert!(err.contains("a model needs --devices"), "{err}");
    let dir = common::temp_dir("port-analysis-flags");
    let plan = dir.join("plan.json");
    let plan = plan.to_str().unwrap();
    common::stdout(&[
        "analyze",
        "gpt3-1.3b",
        "--dp",
        "8",
        "--micro-batch-size",
        "4",
        "-o",
        plan,
    ]);
    let err = refused(&["port", plan, "--calib", "h100-sxm", "--devices", "8"]);
    assert!(err.contains("already fixes the devices"), "{err}");
    let err = refused(&["port", "gpt3-1.3b", "--devices", "8", "--calib", "no-such"]);
    assert!(err.contains("unknown calibration `no-such`"), "{err}");
}

#[test]
fn port_times_the_best_layout_on_64_of_each_nvl72_rack_as_rank_finds_it() {
    // common::EXPERTS_ON_NVL72: 8 full racks of 72, or 64 of each of 9 racks.
    let args = [&common::EXPERTS_ON_NVL72[..], &["--format", "json"]].concat();
    let port = json(&[&["port"][..], &args].concat());
    let m = &port.as_array().unwrap()[0];
    let p = &m["partial_domains"];
    assert_eq!(p["gpus_per_domain"], 64);
    assert_eq!(p["domain_size"], 72);
    assert_eq!(p["domains"], 9);
    let rank = json(&[&["rank"][..], &args, &["--top", "1"]].concat());
    let want = &rank["partial_domains"]["best"];
    assert_eq!(p["strategy"], want["strategy"]);
    let (got, want) = (seconds(&p["summary"]), seconds(want));
    assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
    // And the full racks' best is rank's #1.
    assert_eq!(m["strategy"], rank["strategies"][0]["strategy"]);
    // A machine whose node is a power of two has none.
    let h100 = json(&[
        "port",
        "gpt3-1.3b",
        "--devices",
        "16",
        "--calib",
        "h100-sxm",
        "--format",
        "json",
    ]);
    assert!(h100[0].get("partial_domains").is_none());
}

#[test]
fn port_times_64_of_each_rack_where_whole_nvl72_racks_cannot_hold_the_devices() {
    // 1,024 GPUs fill no whole number of 72-GPU racks; 64 of each of 16 racks hold them.
    let doc = json(&[
        "port",
        "gpt3-1.3b",
        "--devices",
        "1024",
        "--calib",
        "gb200-nvl72",
        "--format",
        "json",
    ]);
    let m = &doc[0];
    assert!(m["strategy"].is_null(), "{m}");
    let reason = m["reason"].as_str().unwrap();
    assert!(
        reason.contains("or 64 devices of each of 16 nodes"),
        "{reason}"
    );
    let p = &m["partial_domains"];
    assert_eq!(p["gpus_per_domain"], 64);
    assert_eq!(p["domains"], 16);
    // The same row `rank` finds on 64 of each rack.
    let rank = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "1024",
        "--calib",
        "gb200-nvl72",
        "--gpus-per-node",
        "64",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let want = &rank["strategies"][0];
    assert_eq!(p["strategy"], want["strategy"]);
    let (got, want) = (seconds(&p["summary"]), seconds(want));
    assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
}
