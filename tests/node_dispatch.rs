//! Node-limited, two-tier expert dispatch (DeepSeek-V3, arXiv:2412.19437, §3.2.2; DeepEP's
//! internode kernels): a token crosses the inter-node links once per other node holding any of
//! its experts, then fans out over the node's own links at the same time. The collectives
//! table, the simulated wire and the simulated call times agree with hand counts; a group that
//! stays in one node is priced as before; the refusal names the knob; `rank --fix` carries it.

mod common;

use common::refused;
use symshard::machine::{Collective, Rates};
use symshard::parallel::Evaluation;
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Mesh, Tier};
use symshard::sym::Rational;
use symshard::timeline::{time_plan, Stream};

fn q(n: i64) -> Rational {
    Rational::from_integer(n.into())
}

/// Mixtral 8x7B (Jiang et al. 2024): 32 MoE layers of hidden 4096, top-2 of 8 experts.
const LAYERS: i64 = 32;
const H: i64 = 4096;
/// Samples per step, sequence length.
const B: i64 = 16;
const S: i64 = 256;

/// dp 8 and ep 8 at tensor-parallel degree `tp`, on nodes of 8 devices: at tp 2 an
/// expert-parallel group (8 ranks at stride 2) spans two nodes, 4 ranks and 4 experts in each;
/// at tp 1 it stays in one node.
fn knobs(tp: u64, node_dispatch: bool) -> Knobs {
    Knobs {
        tp,
        ep: 8,
        node_dispatch,
        ..Knobs::data_parallel(8)
    }
}

fn run(k: &Knobs) -> Evaluation {
    common::evaluate_on("mixtral-8x7b", &[("B", B), ("S", S)], k, "h100-sxm")
}

/// The all-to-all rows: (tier, bytes per call, calls).
fn all_to_alls(e: &Evaluation) -> Vec<(Tier, Rational, u64)> {
    e.comm
        .iter()
        .filter(|r| r.axis == AxisKind::Ep && r.collective == CollectiveKind::AllToAll)
        .map(|r| (r.tier, r.bytes.clone(), r.count))
        .collect()
}

/// The bf16 slots one device dispatches per layer and micro-batch: its B/dp samples' S tokens,
/// each sent to its top-2 experts, H elements of 2 bytes.
fn slots() -> Rational {
    q(B / 8 * S * 2 * H * 2)
}

/// Of a token's two experts among 8, 4 on each of two nodes: both on its own node in 6 of the
/// C(8, 2) = 28 pairs, both on the other node in 6, one on each in 16. It crosses to the other
/// node in 22 of 28 pairs, once: 22/28 of a row of its 2 slots, 11/28 of the slots. The flat
/// all-to-all sends every slot whose expert is on another rank, 7/8 of them.
#[test]
fn a_token_crosses_to_each_other_node_it_reaches_once() {
    let flat = all_to_alls(&run(&knobs(2, false)));
    assert_eq!(
        flat,
        vec![(Tier::Inter, slots() * q(7) / q(8), LAYERS as u64 * 4)]
    );
    let by_node = all_to_alls(&run(&knobs(2, true)));
    assert_eq!(
        by_node,
        vec![(Tier::Inter, slots() * q(11) / q(28), LAYERS as u64 * 4)]
    );
}

/// A group inside one node has no inter-node links to save: every number is the flat
/// all-to-all's.
#[test]
fn a_group_inside_one_node_is_priced_as_the_flat_all_to_all() {
    let (flat, by_node) = (run(&knobs(1, false)), run(&knobs(1, true)));
    assert_eq!(all_to_alls(&flat), all_to_alls(&by_node));
    assert_eq!(flat.relative, by_node.relative);
    assert_eq!(flat.memory, by_node.memory);
}

/// The simulated expert-parallel stream carries the rows' bytes, and each call lasts as long
/// as the longer of its two tiers: the rows' bytes between the nodes, one device per node; and
/// inside each node the fan-out of every slot whose expert is on another of its 4 devices, 3/4
/// of the slots, 21/11 of the bytes between nodes. On the H100 table the inter-node part is the
/// longer; with the intra-node links made 1,000 times slower, the fan-out is.
#[test]
fn the_simulated_call_lasts_the_longer_of_its_two_tiers() {
    let k = knobs(2, true);
    let table: f64 = all_to_alls(&run(&k))
        .iter()
        .map(|(_, b, n)| symshard::parallel::amount::float(b) * *n as f64)
        .sum();
    let (plan, h100) = common::plan_on("mixtral-8x7b", &[("B", B), ("S", S)], &k, "h100-sxm");
    let mut slow_inside = h100.clone();
    let intra = &mut slow_inside.tiers.intra;
    intra.busbw.clear();
    intra.bandwidth.value = &intra.bandwidth.value / q(1000);
    let (across, within) = Mesh::of(&k, 8).ep_axis(8).by_node();
    assert_eq!((across.size, within.size), (2, 4));
    assert_eq!((across.tier, within.tier), (Tier::Inter, Tier::Intra));
    let mut longer = Vec::new();
    for calib in [h100, slow_inside] {
        let t = time_plan(&plan, &calib).unwrap();
        let calls: Vec<_> = t
            .sim
            .events
            .iter()
            .filter(|e| e.device == 0 && e.stream == Stream::EpComm)
            .collect();
        let simulated: f64 = calls.iter().map(|e| e.bytes).sum();
        assert!(
            (table - simulated).abs() <= 1e-9 * table,
            "table {table}, simulated {simulated}"
        );
        let rates = Rates::for_knobs(&calib, &k);
        for e in calls {
            let between = rates.collective_seconds(Collective::AllToAll, e.bytes, &across);
            let inside =
                rates.collective_seconds(Collective::AllToAll, e.bytes * 21.0 / 11.0, &within);
            let want = between.max(inside);
            assert!(
                (e.dur - want).abs() <= 1e-9 * want,
                "{} s, want {want} s",
                e.dur
            );
            longer.push(if between >= inside {
                "between"
            } else {
                "inside"
            });
        }
    }
    assert!(longer.contains(&"between") && longer.contains(&"inside"));
}

/// On the same step, node by node takes less of the expert-parallel stream than the flat
/// all-to-all.
#[test]
fn node_dispatch_shortens_the_expert_parallel_stream() {
    let busy = |k: &Knobs| -> f64 {
        let (plan, calib) = common::plan_on("mixtral-8x7b", &[("B", B), ("S", S)], k, "h100-sxm");
        let t = time_plan(&plan, &calib).unwrap();
        t.sim
            .events
            .iter()
            .filter(|e| e.device == 0 && e.stream == Stream::EpComm)
            .map(|e| e.dur)
            .sum()
    };
    let (flat, by_node) = (busy(&knobs(2, false)), busy(&knobs(2, true)));
    assert!(by_node < flat, "{by_node} s against {flat} s");
}

/// On nodes of 6 devices, an expert-parallel group of 8 ranks holds 6 in one node and 2 in the
/// next: node by node is priced for groups spread evenly, so it is refused, naming the sizes.
#[test]
fn a_group_spread_unevenly_over_its_nodes_is_refused() {
    let e = refused(&[
        "cost",
        "mixtral-8x7b",
        "--set",
        "B=48",
        "--dp",
        "24",
        "--ep",
        "8",
        "--node-dispatch",
        "--gpus-per-node",
        "6",
        "--calib",
        "h100-sxm",
    ]);
    assert!(
        e.contains("ep = 8 does not split into nodes of 6 of its ranks"),
        "{e}"
    );
}

#[test]
fn without_expert_parallelism_it_is_refused() {
    let e = refused(&[
        "cost",
        "mixtral-8x7b",
        "--set",
        "B=64",
        "--strategy",
        "dp=8,node-dispatch",
        "--calib",
        "h100-sxm",
    ]);
    assert!(
        e.contains("`node_dispatch` needs expert parallelism, ep > 1"),
        "{e}"
    );
}

/// `rank --fix node-dispatch=on` dispatches node by node on every row with ep > 1, and a row
/// passes back to `cost` as printed.
#[test]
fn rank_dispatches_node_by_node_where_rows_allow_it() {
    common::expert_knob_passes_back(
        "mixtral-8x7b",
        64,
        "node-dispatch=on",
        "node_dispatch",
        "node-dispatch",
    );
    // The table says which rows dispatch node by node (its columns cannot).
    let text = common::stdout(&[
        "rank",
        "mixtral-8x7b",
        "--devices",
        "64",
        "--fix",
        "node-dispatch=on",
    ]);
    assert!(
        text.contains("node dispatch: the rows with ep > 1"),
        "{text}"
    );
}

/// `--emit megatron` runs the dispatcher the row was priced with: DeepEP's node-by-node kernels
/// behind the flex dispatcher, or the all-to-all dispatcher (not the parser's default,
/// `allgather`) for the flat all-to-all (flags of megatron/training/arguments.py at the commit
/// `--emit` cites).
#[test]
fn emit_megatron_names_the_dispatcher_the_row_was_priced_with() {
    let node = common::emit_megatron("mixtral-8x7b", 64, "tp=2,ep=8,node-dispatch=on");
    assert!(
        node.contains("--moe-token-dispatcher-type flex") && node.contains("--moe-enable-deepep"),
        "{node}"
    );
    let flat = common::emit_megatron("mixtral-8x7b", 64, "tp=2,ep=8");
    assert!(
        flat.contains("--moe-token-dispatcher-type alltoall") && !flat.contains("deepep"),
        "{flat}"
    );
}

/// The screen prices strategies in batches that share their meshes; a batch that holds the same
/// mesh with and without node dispatch prices each as it prices it alone, and node dispatch
/// makes the relative cost smaller.
#[test]
fn the_screen_keeps_node_dispatch_apart_from_the_flat_all_to_all() {
    use symshard::parallel::evaluate::{block_numbers, estimate_variants, microbatch_bindings};
    use symshard::parallel::kernels::KernelEfficiency;
    use symshard::parallel::{analyse, Layout};
    let model = symshard::model::ModelLoader::embedded()
        .unwrap()
        .resolve("mixtral-8x7b")
        .unwrap();
    let mut values = model.values.clone();
    values.insert("B".into(), q(B));
    values.insert("S".into(), q(S));
    let calib = symshard::calib::Calibration::resolve("h100-sxm").unwrap();
    let analysis = analyse(&model, &Layout::default());
    let (flat, by_node) = (knobs(2, false), knobs(2, true));
    let b = microbatch_bindings(&model, &values, &flat);
    let numbers = block_numbers(&analysis, &b, &KernelEfficiency::of(&calib)).unwrap();
    let kappa = |t: Tier| symshard::parallel::amount::float(&calib.balance(t));
    let kh = symshard::parallel::amount::float(&calib.hbm_balance());
    let price = |ks: &[Knobs]| -> Vec<symshard::parallel::evaluate::Estimate> {
        estimate_variants(&model, &numbers, ks, &kappa, kh, 1.0, 8)
            .into_iter()
            .map(|e| e.unwrap())
            .collect()
    };
    let together = price(&[flat.clone(), by_node.clone()]);
    let apart = [price(&[flat])[0], price(&[by_node])[0]];
    assert_eq!(together, apart);
    assert!(apart[1].total < apart[0].total, "{apart:?}");
}

/// The flat all-to-all's bytes are a formula in the model's symbols (the mesh sizes put in);
/// node by node they are not (binomials of the routing sizes), so `compare` and `crossover`
/// give no formula for them rather than one that holds only at these sizes.
#[test]
fn node_by_node_bytes_carry_no_formula() {
    let formula = |k: &Knobs| -> Vec<bool> {
        run(k)
            .comm
            .iter()
            .filter(|r| r.axis == AxisKind::Ep)
            .map(|r| r.formula.is_some())
            .collect()
    };
    assert_eq!(formula(&knobs(2, false)), vec![true]);
    assert_eq!(formula(&knobs(2, true)), vec![false]);
    // Inside one node the share is the flat one, and so is its formula.
    assert_eq!(formula(&knobs(1, true)), vec![true]);
}

/// On nodes of 6 devices some expert-parallel groups spread unevenly: `rank --fix
/// node-dispatch=on` dispatches those flat, so every row it prints passes back to `cost`, which
/// refuses node dispatch over an uneven group.
#[test]
fn rank_dispatches_flat_where_a_group_spreads_unevenly() {
    let rows = common::ranked_rows_with(
        "mixtral-8x7b",
        48,
        40,
        &["--gpus-per-node", "6", "--fix", "node-dispatch=on"],
    );
    let on = |r: &serde_json::Value| r["node_dispatch"].as_bool().unwrap_or(false);
    // tp 2 leaves 3 ranks of a group in a node: ep 4 and 8 spread unevenly, ep 2 evenly.
    assert!(rows.iter().any(|r| r["tp"] == 2 && r["ep"] == 8 && !on(r)));
    for r in rows.iter().filter(|r| on(r)) {
        let strategy = r["strategy"].as_str().unwrap();
        common::json(&[
            "cost",
            "mixtral-8x7b",
            "--strategy",
            strategy,
            "--gpus-per-node",
            "6",
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ]);
    }
}

/// A saved plan holds the flat all-to-all's bytes and the model's routing, no machine's nodes:
/// timed on GB200 NVL72, whose 72-device nodes hold a whole group, node dispatch is the flat
/// all-to-all; timed on the H100 nodes of 8 it was planned on, it is shorter.
#[test]
fn a_saved_plan_goes_node_by_node_on_the_nodes_it_is_timed_on() {
    let time = |node: bool, machine: &str| -> f64 {
        let (plan, _) = common::plan_on(
            "mixtral-8x7b",
            &[("B", B), ("S", S)],
            &knobs(2, node),
            "h100-sxm",
        );
        assert_eq!(plan.gpus_per_node, None);
        let calib = symshard::calib::Calibration::resolve(machine).unwrap();
        time_plan(&plan, &calib).unwrap().sim.iteration
    };
    assert_eq!(time(true, "gb200-nvl72"), time(false, "gb200-nvl72"));
    assert!(time(true, "h100-sxm") < time(false, "h100-sxm"));
}

/// A strategy file says `node_dispatch: true` as the flag says `--node-dispatch`: the same
/// expert-parallel bytes, and the refusal at ep = 1 names the file.
#[test]
fn a_strategy_file_sets_node_dispatch() {
    let dir = common::temp_dir("node-dispatch-file");
    std::fs::write(
        dir.join("s.yaml"),
        "dp: 8\ntp: 2\nep: 8\nnode_dispatch: true\n",
    )
    .unwrap();
    std::fs::write(dir.join("one.yaml"), "dp: 8\nnode_dispatch: true\n").unwrap();
    let a2a = |v: serde_json::Value| -> Vec<String> {
        v["per_device"]["comm"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["collective"] == "all-to-all")
            .map(|c| c["bytes"].as_str().unwrap().to_string())
            .collect()
    };
    let cost = |args: &[&str]| -> serde_json::Value {
        let base = ["cost", "--calib", "h100-sxm", "--format", "json"];
        let text = common::run_on_file(&dir, "mixtral-8x7b", &[&base[..], args].concat());
        serde_json::from_str(&text).unwrap()
    };
    let from_file = a2a(cost(&["--strategy", "s.yaml"]));
    let from_flags = a2a(cost(&[
        "--dp",
        "8",
        "--tp",
        "2",
        "--ep",
        "8",
        "--node-dispatch",
    ]));
    assert!(!from_file.is_empty());
    assert_eq!(from_file, from_flags);
    let e = common::refused_in(&dir, &["cost", "mixtral-8x7b", "--strategy", "one.yaml"]);
    assert!(e.contains("one.yaml") && e.contains("node_dispatch"), "{e}");
}
