//! Device counts that do not fill a node, one rule for every command: up to one node is one
//! node partly used (accepted); more must fill whole nodes, and the refusal names the counts
//! that do and `--gpus-per-node`; a knob that cannot work by itself is refused for that knob
//! before the machine it implies is.

mod common;

use common::{refused, symshard};

/// 7 devices on nodes of 8: one node partly used, as a smaller machine of the same kind.
#[test]
fn fewer_devices_than_one_node_are_one_partial_node() {
    symshard()
        .args(["rank", "llama3-8b", "--devices", "7", "--format", "json"])
        .assert()
        .success();
    symshard()
        .args(["cost", "gpt3-175b", "--pp", "7", "--format", "json"])
        .assert()
        .success();
}

/// 14 devices on nodes of 8 are refused by `rank`, `cost` and `timeline` alike, with the
/// counts that fill nodes (8 or 16) and the flag that sets the node size.
#[test]
fn devices_beyond_one_node_that_do_not_fill_nodes_are_refused_with_the_counts_that_do() {
    let says = "--gpus-per-node = 8 does not divide the 14 devices: nodes would be partly used \
                (8 or 16 devices fill whole nodes; nodes of another size: set --gpus-per-node)";
    let commands: [&[&str]; 3] = [
        &["rank", "llama3-8b", "--devices", "14"],
        &["cost", "gpt3-175b", "--tp", "2", "--pp", "7"],
        &["timeline", "gpt3-175b", "--tp", "2", "--pp", "7"],
    ];
    for args in commands {
        let err = refused(args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // The same rule names the node size the flag gave.
    let err = refused(&[
        "rank",
        "llama3-8b",
        "--devices",
        "12",
        "--gpus-per-node",
        "5",
    ]);
    // Nodes of 5 are not a power of two: 4 of each of 3 nodes also hold the 12.
    assert!(
        err.contains("(10 or 15 devices fill whole nodes, or 4 devices of each of 3 nodes;"),
        "{err}"
    );
}

/// 1,024 devices do not fill 72-GPU GB200 NVL72 racks; 64 of each of 16 racks do (as MLPerf
/// Training v5.0's 1,024-GPU GB200 run used them), and the refusal says so.
#[test]
fn the_refusal_names_the_power_of_two_of_each_rack_that_tiles_the_devices() {
    let err = refused(&[
        "rank",
        "llama3-8b",
        "--devices",
        "1024",
        "--calib",
        "gb200-nvl72",
    ]);
    assert!(
        err.contains(
            "(1008 or 1080 devices fill whole nodes, or 64 devices of each of 16 nodes; \
             nodes of another size: set --gpus-per-node)"
        ),
        "{err}"
    );
}

/// 97 devices on nodes of 8 (`--pp 97`, one device per stage): GPT-3 175B places 98 blocks
/// (96 layers, the embedding and the head), so pp = 97 itself can work, and the refusal is
/// for the nodes, with the counts that fill them. `--tp 8 --pp 97` fills 97 nodes and runs.
#[test]
fn pp_97_on_gpt3_175b_is_refused_for_the_nodes_it_does_not_fill() {
    for cmd in ["cost", "timeline"] {
        let err = refused(&[cmd, "gpt3-175b", "--pp", "97"]);
        assert!(
            err.contains("the 97 devices: nodes would be partly used (96 or 104 devices"),
            "{cmd}: {err}"
        );
    }
    symshard()
        .args([
            "cost",
            "gpt3-175b",
            "--tp",
            "8",
            "--pp",
            "97",
            "--format",
            "json",
        ])
        .assert()
        .success();
}

/// A knob that cannot work by itself is refused for that knob, not for the devices it
/// implies: pp = 99 on 98 blocks (99 devices), tp = 7 on 96 heads (14 devices), a fixed
/// pp = 99 in `rank`.
#[test]
fn a_knob_that_cannot_work_is_refused_for_the_knob_before_the_nodes() {
    for cmd in ["cost", "timeline"] {
        let err = refused(&[cmd, "gpt3-175b", "--pp", "99"]);
        assert!(
            err.contains("pp = 99 is more than the 98 layers to place"),
            "{cmd}: {err}"
        );
        let err = refused(&[cmd, "gpt3-175b", "--tp", "7", "--dp", "2"]);
        assert!(err.contains("tp = 7 does not divide"), "{cmd}: {err}");
        assert!(!err.contains("--gpus-per-node"), "{cmd}: {err}");
    }
    let err = refused(&["rank", "gpt3-175b", "--devices", "99", "--fix", "pp=99"]);
    assert!(
        err.contains("pp = 99 is more than the 98 layers to place"),
        "{err}"
    );
    let err = refused(&["rank", "llama3-8b", "--devices", "14", "--fix", "tp=4"]);
    assert!(
        err.contains("--fix tp=4: 4 does not divide the 14 devices"),
        "{err}"
    );
}

/// The range of `--gpus-per-node` is one check, worded alike by every command.
#[test]
fn gpus_per_node_out_of_range_is_refused_alike_by_every_command() {
    let commands: [&[&str]; 4] = [
        &["rank", "llama3-8b", "--devices", "8"],
        &["cost", "gpt3-175b", "--tp", "8"],
        &["timeline", "gpt3-175b", "--tp", "8"],
        &["layout", "gpt3-125m", "--tp", "4"],
    ];
    for args in commands {
        for g in ["0", "1025"] {
            let mut a = args.to_vec();
            a.extend(["--gpus-per-node", g]);
            let err = refused(&a);
            assert!(
                err.contains(&format!("--gpus-per-node must be 1 to 1024, not {g}")),
                "{a:?}: {err}"
            );
        }
    }
}
