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
