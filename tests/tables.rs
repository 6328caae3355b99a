//! The terminal tables of `compare`, `rank --why`, `crossover`, `validate` and the count lines of
//! `rank` and `audit`: amounts with decimal units and counts with thousands separators by
//! default, the exact numbers of the JSON output with `--exact`, and headers that state B, S and
//! the machine.

use serde_json::Value;

mod common;
use common::{json, symshard};

const DP: &str = "dp=64,mbs=1,zero=1";
const TP: &str = "dp=8,tp=8,mbs=1,sp,zero=1";

/// Standard output of a command that must succeed.
fn text(args: &[&str]) -> String {
    let out = symshard().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The exact value (JSON text) of component `group`/`name`, side `side` (`a` or `b`).
fn exact(c: &Value, group: &str, name: &str, side: &str) -> String {
    c["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == group && r["name"] == name)
        .unwrap_or_else(|| panic!("no component {group}/{name}"))[side]
        .as_str()
        .unwrap()
        .to_string()
}

/// The table line whose component is `name`, after the line that starts group `group`.
fn line<'a>(t: &'a str, group: &str, name: &str) -> &'a str {
    t.lines()
        .skip_while(|l| !l.starts_with(group))
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("no line {group}/{name} in\n{t}"))
}

#[test]
fn compare_prints_units_by_default_and_the_json_numbers_with_exact() {
    let c = json(&["compare", "llama3-8b", DP, TP, "--format", "json"]);
    let flops = exact(&c, "compute", "compute FLOPs", "a");
    let weights = exact(&c, "memory", "weights", "a");
    let readable = text(&["compare", "llama3-8b", DP, TP]);
    // Llama 3 8B's shipped values: global batch 2048 (as rank states it) and S = 8192.
    assert!(
        readable.starts_with(
            "llama3-8b (B = 2048, S = 8192) on 64 devices (8 per node) of dgx-h100: 72.0 GB usable per device\n"
        ),
        "{readable}"
    );
    // A's compute is 15747627379851264 FLOP, its weights 16060522496 bytes: rounded with units.
    assert_eq!(flops, "15747627379851264");
    assert_eq!(weights, "16060522496");
    let row = line(&readable, "compute", "compute FLOPs");
    assert!(row.contains("15.75 PFLOP"), "{row}");
    assert!(line(&readable, "memory", "weights").contains("16.1 GB"));
    assert!(line(&readable, "communication", "all-gather on tp").contains("+2.92 TB"));
    assert!(
        !readable.contains(&flops) && !readable.contains('≈'),
        "{readable}"
    );
    assert!(readable.contains("units are decimal"), "{readable}");
    // The formulas print as they are.
    assert!(readable.contains("679/16*B*H*S"), "{readable}");

    let exact_text = text(&["compare", "llama3-8b", DP, TP, "--exact"]);
    let row = line(&exact_text, "compute", "compute FLOPs");
    assert!(row.contains(&flops) && !row.contains("FLOP "), "{row}");
    assert!(line(&exact_text, "memory", "weights").contains(&weights));
    // Every amount of the JSON output appears exactly (the HBM traffic is a fraction).
    let hbm = exact(&c, "compute", "HBM traffic (FLOP-equivalents)", "b");
    assert!(hbm.contains('/'), "{hbm}");
    assert!(exact_text.contains(&hbm), "{exact_text}");
    // Only the header's device memory stays rounded, as rank's header states it.
    let table: String = exact_text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert!(
        !table.contains("PFLOP") && !table.contains(" GB"),
        "{table}"
    );
    assert!(exact_text.contains("679/16*B*H*S"));
}

#[test]
fn compare_header_groups_device_counts() {
    // GPT-3 175B's shipped B = 1536 and S = 2048 (Brown et al. 2020, Table 2.1).
    let t = text(&[
        "compare",
        "gpt3-175b",
        "dp=16,tp=8,pp=8,mbs=1,sp",
        "dp=16,tp=8,pp=8,mbs=1,sp,recompute=selective",
    ]);
    assert!(
        t.starts_with("gpt3-175b (B = 1536, S = 2048) on 1,024 devices (8 per node) of dgx-h100"),
        "{t}"
    );
    assert!(t.contains("(1,024 devices"), "{t}");
}

#[test]
fn rank_why_rounds_and_counts_group_thousands() {
    let r = json(&["rank", "gpt3-175b", "--devices", "1024", "--format", "json"]);
    let evaluated = r["evaluated"].as_u64().unwrap();
    let feasible = r["feasible"].as_u64().unwrap();
    assert!(evaluated >= 1000 && feasible >= 1000);
    let t = text(&["rank", "gpt3-175b", "--devices", "1024", "--why"]);
    let count = t
        .lines()
        .find(|l| l.contains(" strategies priced, "))
        .unwrap_or_else(|| panic!("{t}"));
    let (priced, rest) = count.split_once(" strategies priced, ").unwrap();
    let fit = rest.split_once(" fit in memory").unwrap().0;
    let group = |n: u64| {
        let s = n.to_string();
        let mut out = String::new();
        for (k, ch) in s.chars().enumerate() {
            if k > 0 && (s.len() - k).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        out
    };
    assert_eq!(priced, group(evaluated), "{count}");
    assert_eq!(fit, group(feasible), "{count}");
    assert!(priced.contains(','));
    // The comparison after the table rounds with units; --exact gives the row's exact cost.
    let why = t.split("why #1 and not #2").nth(1).unwrap();
    assert!(why.contains("PFLOP") && why.contains(" GB"), "{why}");
    let total = r["strategies"][0]["relative_cost"].as_str().unwrap();
    assert!(!why.contains(total));
    let t = text(&["rank", "gpt3-175b", "--devices", "1024", "--why", "--exact"]);
    let why = t.split("why #1 and not #2").nth(1).unwrap();
    assert!(why.contains(total), "{why}");
    assert!(t.contains(&format!("{evaluated} strategies priced")), "{t}");
}

#[test]
fn compare_lists_every_stream_of_the_timeline() {
    // Context parallelism keeps the cp_comm stream busy; the table lists it with the others.
    let a = "tp=4,pp=2,dp=8,mbs=1,sp,zero=1";
    let b = "tp=4,cp=2,dp=8,mbs=1,sp,zero=1";
    let c = json(&[
        "compare",
        "llama3-8b",
        a,
        b,
        "--calib",
        "a100-80gb",
        "--format",
        "json",
    ]);
    let cp = c["b"]["seconds"]["busy"]["cp_comm"].as_f64().unwrap();
    assert!(cp > 0.0);
    let t = text(&["compare", "llama3-8b", a, b, "--calib", "a100-80gb"]);
    for stream in ["compute", "tp_comm", "dp_comm", "p2p", "ep_comm", "cp_comm"] {
        let l = line(&t, "timeline", &format!("{stream} stream busy (s)"));
        let cells: Vec<&str> = l.split_whitespace().rev().take(3).collect();
        let x: f64 = cells[1].parse().unwrap();
        let want = c["b"]["seconds"]["busy"][stream].as_f64().unwrap_or(0.0);
        assert!((x - want).abs() < 1e-4, "{stream}: {l}");
    }
}

#[test]
fn crossover_rounds_costs_and_exact_gives_the_json_numbers() {
    let args = [
        "crossover",
        "llama3-8b",
        DP,
        TP,
        "--in",
        "S",
        "--from",
        "128",
        "--to",
        "1024",
        "--step",
        "128",
    ];
    let mut j = args.to_vec();
    j.extend(["--format", "json"]);
    let c = json(&j);
    let first = &c["boundaries"][0];
    let a = first["a"].as_str().unwrap();
    assert!(a.contains('/'), "{a}");
    let readable = text(&args);
    let row = readable
        .lines()
        .find(|l| l.starts_with("128 "))
        .unwrap_or_else(|| panic!("{readable}"));
    assert!(row.contains("PFLOP") && !row.contains('/'), "{row}");
    let mut e = args.to_vec();
    e.push("--exact");
    let exact_text = text(&e);
    let row = exact_text
        .lines()
        .find(|l| l.starts_with("128 "))
        .unwrap_or_else(|| panic!("{exact_text}"));
    assert!(row.contains(a), "{row}");
}

#[test]
fn validate_states_b_and_s_of_every_row() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/validation/");
    let t = text(&[
        "validate",
        &format!("{dir}flash-attention-training-a100.yaml"),
        &format!("{dir}korthikanti2022-table4.yaml"),
    ]);
    // The FlashAttention rows differ in B (256 sequences for 125M, 512 for 1.3B: the
    // repository's configurations, see the file): a column.
    let row = t
        .lines()
        .find(|l| l.contains("gpt3-125m 8 GPUs"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(row.contains("B = 256, S = 2048"), "{row}");
    let row = t.lines().find(|l| l.contains("gpt3-1.3b 8 GPUs")).unwrap();
    assert!(row.contains("B = 512, S = 2048"), "{row}");
    // Korthikanti et al. 2022, Table 4: one shape for every row, stated in the header.
    let head = t
        .lines()
        .find(|l| l.starts_with("korthikanti2022-table4"))
        .unwrap();
    assert!(
        head.contains("(B = ") && head.contains(", S = 2048)"),
        "{head}"
    );
}

/// The cells of `rank`'s table rows (whitespace-separated; an amount and its unit are two).
fn rank_rows(t: &str) -> Vec<Vec<&str>> {
    t.lines()
        .skip_while(|l| !l.starts_with("rank "))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Whether `s` is a byte amount as the tables print one: at most three significant digits and a
/// decimal prefix (`"53.3 TB"`, `"355 GB"`, `"512 B"`).
fn table_bytes(s: &str) -> bool {
    let Some((number, unit)) = s.split_once(' ') else {
        return false;
    };
    let digits = number.chars().filter(char::is_ascii_digit).count();
    let prefixes = ["", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q"];
    digits <= 3
        && number.parse::<f64>().is_ok()
        && unit
            .strip_suffix('B')
            .is_some_and(|p| prefixes.contains(&p))
}

#[test]
fn nothing_fits_uses_the_tables_units() {
    // GPT-3 175B on 8 devices of 80 GB: nothing fits; the line under the table states the
    // footprints as the table's memory column does, not as a count of GB with a decimal.
    let args = ["rank", "gpt3-175b", "--devices", "8", "--top", "3"];
    let t = text(&args);
    let line = t
        .lines()
        .find(|l| l.starts_with("nothing fits in "))
        .unwrap_or_else(|| panic!("{t}"));
    let between = |from: &str, to: &str| {
        let at = line.find(from).unwrap_or_else(|| panic!("{line}")) + from.len();
        line[at..at + line[at..].find(to).unwrap()].to_string()
    };
    let limit = between("nothing fits in ", " per device");
    let smallest = between("smallest footprint reachable is ", " (");
    let cheapest = between("from the cheapest strategy (", ")");
    // 80 GB less the default headroom of 10 %.
    assert_eq!(limit, "72.0 GB", "{line}");
    for amount in [&smallest, &cheapest] {
        assert!(table_bytes(amount), "{amount}: {line}");
    }
    // Nothing fits, so the cheapest strategy is #1, and its footprint is its memory cell.
    // rank, dp, tp, pp, ep, cp, mbs, schedule, sp, recompute, zero, layout, cost and its unit,
    // compute, intra, inter, bubble, hidden, memory and its unit.
    let rows = rank_rows(&t);
    assert_eq!(cheapest, format!("{} {}", rows[0][19], rows[0][20]), "{t}");
    // With --exact both are the exact whole bytes, as the table's memory column gives them.
    let mut exact_args = args.to_vec();
    exact_args.push("--exact");
    let e = text(&exact_args);
    let line = e.lines().find(|l| l.starts_with("nothing fits")).unwrap();
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
    let smallest = v["smallest_footprint"]["memory_per_device"]
        .as_str()
        .unwrap();
    assert!(!smallest.contains('/'), "{smallest}");
    assert!(
        line.contains(&format!("reachable is {smallest} (")),
        "{line}"
    );
}

#[test]
fn a_strategy_without_a_pipeline_has_no_bubble() {
    // Llama 3 8B on 64 devices: the top rows mix pp = 1 and pp = 2.
    let t = text(&["rank", "llama3-8b", "--devices", "64", "--top", "10"]);
    let rows = rank_rows(&t);
    let pp = |r: &Vec<&str>| r[3].parse::<u64>().unwrap();
    assert!(rows.iter().any(|r| pp(r) == 1) && rows.iter().any(|r| pp(r) > 1));
    // rank, dp, tp, pp, ep, cp, mbs, schedule, sp, recompute, zero, layout, cost and its
    // unit, compute, intra, inter, bubble.
    for r in &rows {
        let bubble = r[17];
        if pp(r) == 1 {
            assert_eq!(bubble, "-", "{r:?}");
        } else {
            assert!(bubble.ends_with('%') && bubble != "0.0%", "{r:?}");
        }
    }
    assert!(t.contains("bubble: the share of the step"), "{t}");
    // The timeline of a strategy without a pipeline, whose device waits for ZeRO 3's weight
    // gathers between passes: those waits are not a bubble.
    let args = [
        "timeline",
        "llama3-8b",
        "--set",
        "B=16",
        "--dp",
        "8",
        "--micro-batch-size",
        "1",
        "--zero",
        "3",
        "--calib",
        "h100-sxm",
    ];
    let mut j = args.to_vec();
    j.extend(["--format", "json"]);
    assert_eq!(json(&j)["bubble_fraction"].as_f64(), Some(0.0));
    let t = text(&args);
    let line = t.lines().find(|l| l.contains("bubble ")).unwrap();
    assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["bubble", "-"]);
}

#[test]
fn cost_prints_whole_bytes_with_and_without_exact() {
    // ZeRO 3 over 7 data-parallel ranks shards gpt3-125m's optimizer state into sevenths:
    // 1502714880/7 bytes exactly in JSON.
    let args = [
        "cost",
        "gpt3-125m",
        "--dp",
        "7",
        "--zero",
        "3",
        "--set",
        "B=7",
    ];
    let mut j = args.to_vec();
    j.extend(["--format", "json"]);
    let optimizer = json(&j)["per_device"]["memory"]["optimizer"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(optimizer, "1502714880/7");
    let t = text(&args);
    let line = |t: &str, name: &str| {
        t.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{t}"))
            .split_once(name)
            .map(|(_, rest)| rest.trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(line(&t, "optimizer state"), "215 MB");
    let mut e = args.to_vec();
    e.push("--exact");
    let t = text(&e);
    // Rounded up to whole bytes: 214673554 and 2/7.
    assert_eq!(line(&t, "optimizer state"), "214673555");
    // No amount of memory in the per-device table or its stages is a fraction.
    let memory: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("  memory"))
        .take_while(|l| !l.starts_with("  collectives"))
        .collect();
    assert!(
        memory.len() > 5 && memory.iter().all(|l| !l.contains('/')),
        "{t}"
    );
}
