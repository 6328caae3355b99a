//! Rack-scale NVLink domains: on GB200 NVL72 one "node" is a rack of 72 GPUs on NVLink, so an
//! expert-parallel group of 64 keeps its all-to-alls on NVLink where its 64 devices lie in one
//! rack, and crosses InfiniBand where they do not: on 8 racks, the 64-device blocks 64–127,
//! 128–191, … straddle two racks, and the all-to-all of a group waits for its slowest rank.
//! Running 64 of each rack's 72 GPUs (`--gpus-per-node 64`) keeps every group in a rack.

mod common;
use common::json;
use serde_json::Value;

/// The tiers of the expert-parallel all-to-alls `cost` lists, and the busy seconds of the
/// expert-parallel stream `timeline` simulates, for a Mixtral layer shape with 64 experts.
fn expert_parallel(devices: u64, gpus_per_node: u64) -> (Vec<String>, f64) {
    let (d, g) = (devices.to_string(), gpus_per_node.to_string());
    let batch = format!("B={devices}");
    let args = |cmd: &'static str| -> Vec<String> {
        [
            cmd,
            "mixtral-8x7b",
            "--set",
            "E=64",
            "--set",
            &batch,
            "--set",
            "S=4096",
            "--tp",
            "1",
            "--ep",
            "64",
            "--dp",
            &d,
            "--calib",
            "gb200-nvl72",
            "--gpus-per-node",
            &g,
            "--format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let cost = json(&strs(&args("cost")));
    let tiers: Vec<String> = cost["per_device"]["comm"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["collective"] == "all-to-all")
        .map(|c| c["tier"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !tiers.is_empty(),
        "{devices} on {gpus_per_node}: no all-to-all"
    );
    let t: Value = json(&strs(&args("timeline")));
    let seconds = t["devices"][0]["busy"]["ep_comm"].as_f64().unwrap();
    (tiers, seconds)
}

#[test]
fn a_64_way_expert_group_keeps_its_all_to_alls_in_one_nvl72_rack() {
    // One rack: the group is inside the NVLink domain; cut into nodes of 8, it is not.
    let (rack, rack_s) = expert_parallel(64, 72);
    assert!(rack.iter().all(|t| t == "intra"), "{rack:?}");
    let (eights, eights_s) = expert_parallel(64, 8);
    assert!(eights.iter().all(|t| t == "inter"), "{eights:?}");
    // NVLink 5 at 900 GB/s against one 400 Gb/s NIC per GPU.
    assert!(eights_s > 5.0 * rack_s, "{eights_s} s vs {rack_s} s");

    // Eight racks of 72: groups 64–127, … straddle two racks and cross InfiniBand.
    let (straddling, straddling_s) = expert_parallel(576, 72);
    assert!(straddling.iter().all(|t| t == "inter"), "{straddling:?}");
    // Nine racks using 64 GPUs each: every group is one rack.
    let (aligned, aligned_s) = expert_parallel(576, 64);
    assert!(aligned.iter().all(|t| t == "intra"), "{aligned:?}");
    assert!(
        straddling_s > 5.0 * aligned_s,
        "{straddling_s} s vs {aligned_s} s"
    );
    // The same per-device all-to-all as on one rack.
    assert!(
        (aligned_s - rack_s).abs() <= 1e-9 * rack_s,
        "{aligned_s} vs {rack_s}"
    );
}

#[test]
fn blocks_of_consecutive_devices_on_racks_by_hand() {
    use symshard::strategy::block_placement;
    // Blocks of 64 on 8 racks of 72: block i covers 64i..64i+63. Blocks 1-7 cross a rack
    // boundary; block 4 (256-319) holds 32 devices of rack 3 and 32 of rack 4, the other six
    // 8/56, 16/48, 24/40, 40/24, 48/16 and 56/8.
    assert_eq!(block_placement(64, 72, 576), [9, 7, 6]);
    // 64 of each rack: every block is one rack.
    assert_eq!(block_placement(64, 64, 576), [9, 0, 0]);
    // Blocks of 8 tile a 72-GPU rack.
    assert_eq!(block_placement(8, 72, 576), [72, 0, 0]);
    // Blocks of 16 over two racks: only 64-79 crosses, 8 devices on each side.
    assert_eq!(block_placement(16, 72, 144), [9, 1, 0]);
    // Blocks of two whole racks, and blocks of 160 over three racks (72 + 72 + 16, 56 + 32).
    assert_eq!(block_placement(144, 72, 288), [2, 2, 0]);
    assert_eq!(block_placement(160, 72, 320), [2, 2, 2]);
    // Blocks that do not tile the devices: none.
    assert_eq!(block_placement(100, 72, 576), [0, 0, 0]);
}

/// `rank` of [`common::EXPERTS_ON_NVL72`], top 1, JSON, with `extra` arguments.
fn rank_experts(extra: &[&str]) -> Value {
    let head = ["rank"];
    let tail = ["--top", "1", "--format", "json"];
    json(&[&head[..], &common::EXPERTS_ON_NVL72, &tail, extra].concat())
}

#[test]
fn rank_says_when_64_of_each_nvl72_rack_wins() {
    let full = rank_experts(&[]);
    let p = &full["partial_domains"];
    assert_eq!(p["domain_size"], 72);
    assert_eq!(p["gpus_per_domain"], 64);
    assert_eq!(p["domains"], 9);
    assert_eq!(p["full_domains"], 8);
    // Its best row is #1 of the same search on 64 of each rack.
    let partial = rank_experts(&["--gpus-per-node", "64"]);
    let best = &partial["strategies"][0];
    assert_eq!(p["best"]["strategy"], best["strategy"]);
    assert_eq!(p["best"]["iteration_seconds"], best["iteration_seconds"]);
    // Its change is its seconds over #1's on full racks.
    let (b, f) = (
        best["iteration_seconds"].as_f64().unwrap(),
        full["strategies"][0]["iteration_seconds"].as_f64().unwrap(),
    );
    let change = p["change"].as_f64().unwrap();
    assert!(
        (change - (b / f - 1.0)).abs() < 1e-12,
        "{change} vs {b}/{f}"
    );
    // On full racks the groups of 64 straddle two racks in 7 of 9 (the hand count above) and
    // cross InfiniBand; on 64 of each they stay on NVLink, and that wins.
    assert_eq!(p["wins"], true);
    assert!(change < 0.0);
    assert_eq!(
        p["straddling"],
        serde_json::json!(["ep = 64: 7 of 9 groups cross domains (on 64 of each, none)"])
    );
    let args = [&common::EXPERTS_ON_NVL72[..], &["--top", "1"]].concat();
    let text = common::stdout(&[&["rank"][..], &args].concat());
    let line = text
        .lines()
        .find(|l| l.starts_with("partial domains: "))
        .unwrap_or_else(|| panic!("no partial-domains line:\n{text}"));
    assert!(
        line.contains("on 64 of each 72-device NVLink domain (9 domains for 576 devices where full ones take 8; 8 devices of each idle)")
            && line.contains("faster than #1: it wins")
            && line.contains("--gpus-per-node 64 ranks that placement"),
        "{line}"
    );
    // The report says the same.
    let dir = common::temp_dir("partial-domains-report");
    let path = dir.join("r.html");
    let out = dir.join("r.html").display().to_string();
    common::stdout(&[&["report"][..], &args, &["-o", &out]].concat());
    let html = std::fs::read_to_string(&path).unwrap();
    let said = line.trim_start_matches("partial domains: ");
    assert!(
        html.contains(&format!(
            "<p id=\"partial-domains\">Partial domains: {}</p>",
            said.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        )),
        "{said}"
    );
}

#[test]
fn no_partial_domains_where_the_placement_is_given_or_a_power_of_two() {
    // Devices per node given: the user chose the placement.
    assert!(rank_experts(&["--gpus-per-node", "72"])
        .get("partial_domains")
        .is_none());
    assert!(rank_experts(&["--gpus-per-node", "64"])
        .get("partial_domains")
        .is_none());
    // Nodes of 8: a power of two.
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "576",
        "--calib",
        "a100-80gb",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert!(v.get("partial_domains").is_none());
    // One rack: nothing straddles.
    let v = json(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "72",
        "--calib",
        "gb200-nvl72",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert!(v.get("partial_domains").is_none());
}
