//! Overlap as a steering knob of `rank` (`--fix overlap=…`): applied to every strategy that
//! allows it, timed by the simulator under `--calib`, printed in the JSON rows and emitted as
//! Megatron-LM's flags.

use assert_cmd::Command;
use serde_json::Value;

fn rank(args: &[&str]) -> Value {
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .arg("rank")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(v: &Value) -> &Vec<Value> {
    v["strategies"].as_array().unwrap()
}

/// `overlap=all` turns on each overlap exactly where the row allows it: tensor-parallel overlap
/// with sequence parallelism over tp > 1, the weight-gather overlap under ZeRO 1–2 with more than
/// one replica. Since overlapping never makes a step slower, the fastest row with every overlap
/// is at least as fast as the fastest with the defaults.
#[test]
fn overlap_all_applies_where_allowed_and_is_never_slower() {
    let base = [
        "gpt3-1.3b",
        "--devices",
        "16",
        "--calib",
        "a100-80gb",
        "--top",
        "20",
    ];
    let plain = rank(&base);
    let mut args = base.to_vec();
    args.extend(["--fix", "overlap=all"]);
    let all = rank(&args);
    assert_eq!(
        all["steering"],
        "--fix overlap=tp-comm+param-gather+grad-reduce"
    );
    let mut saw = (false, false);
    for r in rows(&all) {
        let tp_comm = r["sequence_parallel"] == true && r["tp"].as_u64().unwrap() > 1;
        let zero = r["zero"].as_u64().unwrap();
        let replicas = r["dp"].as_u64().unwrap() * r["cp"].as_u64().unwrap();
        let gather = (zero == 1 || zero == 2) && replicas > 1;
        assert_eq!(r["overlap"]["tp-comm"], tp_comm, "{r}");
        assert_eq!(r["overlap"]["param-gather"], gather, "{r}");
        assert_eq!(r["overlap"]["grad-reduce"], true, "{r}");
        saw.0 |= tp_comm;
        saw.1 |= gather;
    }
    assert!(
        saw.0 && saw.1,
        "the rows should exercise both overlaps: {saw:?}"
    );
    for r in rows(&plain) {
        assert_eq!(r["overlap"]["tp-comm"], false);
        assert_eq!(r["overlap"]["param-gather"], false);
    }
    let best = |v: &Value| rows(v)[0]["iteration_seconds"].as_f64().unwrap();
    assert!(
        best(&all) <= best(&plain),
        "{} > {}",
        best(&all),
        best(&plain)
    );
}

/// The emitted Megatron-LM arguments carry the overlaps the ranked row ran with.
#[test]
fn emit_carries_the_fixed_overlaps() {
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .args([
            "rank",
            "gpt3-1.3b",
            "--devices",
            "16",
            "--fix",
            "tp=2,sp=on,zero=1,overlap=tp-comm+param-gather",
            "--top",
            "1",
            "--emit",
            "megatron",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--tp-comm-overlap",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    ] {
        assert!(text.contains(flag), "{flag} missing:\n{text}");
    }
}

/// Unknown overlaps, an order on overlaps and a weight-gather overlap without the gradient
/// reduction's are refused, naming the item.
#[test]
fn bad_overlaps_are_refused_by_name() {
    for (flag, value, says) in [
        ("--fix", "overlap=everything", "unknown overlap"),
        ("--fix", "overlap=tp-comm+tp-comm", "given twice"),
        ("--max", "overlap=tp-comm", "has no order"),
        (
            "--fix",
            "overlap=param-gather+no-grad-reduce",
            "--overlap-grad-reduce",
        ),
    ] {
        let out = Command::cargo_bin("symshard")
            .unwrap()
            .args(["rank", "gpt3-125m", "--devices", "8", flag, value])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(says) && err.contains("overlap"),
            "{flag} {value}: {err}"
        );
    }
}
