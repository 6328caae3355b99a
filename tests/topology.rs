//! Topologies beyond "node + network": collectives on a TPU torus against the ring formula with
//! Google's published ICI link bandwidth, an all-reduce over a GB200 NVL72 domain against its
//! published bus bandwidth, a group of 4 of 8 fully connected MI300X GPUs on the 3 links among
//! them, oversubscribed scale-out, and malformed topology fields refused at their place.

mod common;

use symshard::calib::topology::{Piece, Placement};
use symshard::calib::Calibration;
use symshard::diag::Source;
use symshard::strategy::{AxisKind, Mesh, Tier};
use symshard::sym::Rational;
use symshard::timeline::{Collective, Rates};

fn table(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("calibration/{name}.yaml")),
    )
    .unwrap()
}

fn close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-12 * want.abs(),
        "{got} vs {want} ({:e} off)",
        got - want
    );
}

/// Google's published ICI figures: v5p 1200 GB/s bidirectional per chip over the six links of
/// a 3D torus, v6e 800 GB/s bidirectional over four ports: 100 GB/s per link and direction.
const V5P_LINK: f64 = 1200e9 / 2.0 / 6.0;
const V6E_LINK: f64 = 800e9 / 2.0 / 4.0;
/// Both tables' ICI efficiency and per-step latency (placeholders, sourced as such).
const ICI_EFF: f64 = 0.8;
const ICI_ALPHA: f64 = 3e-6;

#[test]
fn a_v5p_torus_axis_runs_a_bidirectional_ring_at_two_links() {
    let c = Calibration::resolve("tpu-v5p").unwrap();
    let r = Rates::of(&c);
    // tp = 4 on the first axis of the 4x8x8 slice: the whole axis, closed by its wraparound.
    let m = Mesh::new(4, 64, 1, 256);
    let tp = m.axis(AxisKind::Tp);
    let torus = c.topology.as_ref().unwrap().torus.as_ref().unwrap();
    let placed = torus.place(tp.size, tp.stride);
    assert_eq!(
        placed,
        Placement::Axes(vec![Piece {
            axis: 0,
            len: 4,
            step: 1,
            wraps: true
        }])
    );
    assert_eq!(
        torus.ring_bandwidth(&placed),
        Rational::from_integer(200_000_000_000i64.into())
    );
    let s = 1e9;
    let wire = 2.0 * 3.0 / 4.0 * s;
    let t = r.collective_seconds(Collective::AllReduce, wire, tp);
    close(t, 2.0 * 3.0 * ICI_ALPHA + wire / (2.0 * V5P_LINK * ICI_EFF));
    // dp = 64 at stride 4: the y and z axes of 8, both rings: four links at once, 7 + 7 steps.
    let dp = m.axis(AxisKind::Dp);
    let placed = torus.place(dp.size, dp.stride);
    assert_eq!(
        torus.ring_bandwidth(&placed),
        Rational::from_integer(400_000_000_000i64.into())
    );
    assert_eq!(torus.describe(&placed), "torus y(8, ring) × z(8, ring)");
    let wire = 63.0 / 64.0 * s;
    let t = r.collective_seconds(Collective::AllGather, wire, dp);
    close(t, 14.0 * ICI_ALPHA + wire / (4.0 * V5P_LINK * ICI_EFF));
    // Without the topology the same table times both at the flat tier rate (2 links).
    let mut flat = c.clone();
    flat.topology = None;
    let t_flat = Rates::of(&flat).collective_seconds(Collective::AllGather, wire, dp);
    close(t_flat, 63.0 * ICI_ALPHA + wire / (2.0 * V5P_LINK * ICI_EFF));
}

#[test]
fn a_v6e_group_on_part_of_an_axis_runs_on_a_line_and_strided_groups_share_links() {
    let c = Calibration::resolve("tpu-v6e").unwrap();
    let r = Rates::of(&c);
    let torus = c.topology.as_ref().unwrap().torus.as_ref().unwrap();
    let m = Mesh::new(4, 64, 1, 256);
    let (tp, dp) = (m.axis(AxisKind::Tp), m.axis(AxisKind::Dp));
    // tp = 4: 4 of the 16 chips of x, no wraparound among them: one link per direction.
    let placed = torus.place(tp.size, tp.stride);
    assert_eq!(torus.describe(&placed), "torus x(4 of 16, line)");
    let s = 256e6;
    let wire = 2.0 * 3.0 / 4.0 * s;
    close(
        r.collective_seconds(Collective::AllReduce, wire, tp),
        6.0 * ICI_ALPHA + wire / (V6E_LINK * ICI_EFF),
    );
    // dp = 64 at stride 4: every 4th chip of x (closing the ring, 4 groups sharing its links)
    // and all 16 of y: 2/4 + 2 links.
    let placed = torus.place(dp.size, dp.stride);
    assert_eq!(
        torus.describe(&placed),
        "torus x(4 of 16, every 4, ring) × y(16, ring)"
    );
    let wire = 2.0 * 63.0 / 64.0 * s;
    close(
        r.collective_seconds(Collective::AllReduce, wire, dp),
        2.0 * (3.0 + 15.0) * ICI_ALPHA + wire / (2.5 * V6E_LINK * ICI_EFF),
    );
    // tp = 3 divides no axis: one ring over single links, n − 1 steps.
    assert_eq!(torus.place(3, 1), Placement::Unaligned);
    let m3 = Mesh::new(3, 1, 1, 256);
    let wire = 2.0 * 2.0 / 3.0 * s;
    close(
        r.collective_seconds(Collective::AllReduce, wire, m3.axis(AxisKind::Tp)),
        4.0 * ICI_ALPHA + wire / (V6E_LINK * ICI_EFF),
    );
}

#[test]
fn an_nvl72_domain_all_reduce_runs_at_its_published_bus_bandwidth() {
    let c = Calibration::resolve("gb200-nvl72").unwrap();
    let r = Rates::of(&c);
    // 72 GPUs of 18 trays, one NVLink domain: one tier, whatever trays a group spans.
    let m = Mesh::new(72, 1, 1, 72);
    let tp = m.axis(AxisKind::Tp);
    assert_eq!(tp.tier, Tier::Intra);
    assert_eq!(Mesh::new(8, 9, 1, 72).axis(AxisKind::Tp).tier, Tier::Intra);
    // coreweave/nccl-tests PR #43: all_reduce_perf over 72 GB200s, 839.16 GB/s bus bandwidth
    // at 4 GiB.
    let s = 4294967296.0;
    let wire = 2.0 * 71.0 / 72.0 * s;
    let t = r.collective_seconds(Collective::AllReduce, wire, tp);
    close(t, 2.0 * 71.0 * 3e-6 + wire / 839.16e9);
    // The algorithm bandwidth: size ÷ time, busbw × 72 / 142 less the 142 latency steps
    // (0.43 ms of the 10.6 ms).
    let algbw = s / t;
    assert!(
        (algbw / (839.16e9 * 72.0 / 142.0) - 1.0).abs() < 0.05,
        "{algbw}"
    );
}

/// mi300x with its Infinity Fabric described: 8 peers, one 64 GB/s link to each.
fn mi300x_fully_connected(busbw: bool) -> Calibration {
    let mut text = table("mi300x");
    text.push_str(
        "topology:\n  fully_connected:\n    peers: {value: 8, source: \"test\"}\n    \
         link_bandwidth: {value: 64e9, source: \"test\"}\n",
    );
    let mut c = Calibration::load(&Source::new("fc.yaml", text)).unwrap();
    if !busbw {
        c.tiers.intra.busbw.clear();
    }
    c
}

#[test]
fn four_of_eight_fully_connected_gpus_use_only_the_links_among_them() {
    let s = 1e9;
    let m4 = Mesh::new(4, 2, 1, 8);
    let m8 = Mesh::new(8, 1, 1, 8);
    let wire4 = 2.0 * 3.0 / 4.0 * s;
    let wire8 = 2.0 * 7.0 / 8.0 * s;
    // From the link rate: 3 links (the 4 GPUs' peers) at 75 % of 64 GB/s.
    let c = mi300x_fully_connected(false);
    let fc = c
        .topology
        .as_ref()
        .unwrap()
        .fully_connected
        .as_ref()
        .unwrap();
    assert_eq!(
        fc.ring_bandwidth(4),
        Rational::from_integer(192_000_000_000i64.into())
    );
    let r = Rates::of(&c);
    close(
        r.collective_seconds(Collective::AllReduce, wire4, m4.axis(AxisKind::Tp)),
        6.0 * 3e-6 + wire4 / (3.0 * 64e9 * 0.75),
    );
    // With the measured 8-GPU bus bandwidth: 3 of its 7 links' worth.
    let c = mi300x_fully_connected(true);
    let r = Rates::of(&c);
    close(
        r.collective_seconds(Collective::AllReduce, wire4, m4.axis(AxisKind::Tp)),
        6.0 * 3e-6 + wire4 / (312.912e9 * 3.0 / 7.0),
    );
    // All eight: the table's own all-reduce figure, as without a topology.
    let plain = Rates::of(&Calibration::resolve("mi300x").unwrap());
    let t8 = r.collective_seconds(Collective::AllReduce, wire8, m8.axis(AxisKind::Tp));
    assert_eq!(
        t8,
        plain.collective_seconds(Collective::AllReduce, wire8, m8.axis(AxisKind::Tp))
    );
    close(t8, 14.0 * 3e-6 + wire8 / 312.912e9);
    // Without the topology, the 4-GPU group is timed at the whole node's rate (optimistic).
    let t4_plain = plain.collective_seconds(Collective::AllReduce, wire4, m4.axis(AxisKind::Tp));
    let t4 = r.collective_seconds(Collective::AllReduce, wire4, m4.axis(AxisKind::Tp));
    assert!(t4 > 2.0 * t4_plain, "{t4} vs {t4_plain}");
}

#[test]
fn oversubscription_slows_inter_node_traffic_beyond_its_group_by_its_ratio() {
    let base = Calibration::resolve("h100-sxm").unwrap();
    let mut text = table("h100-sxm");
    text.push_str(
        "topology:\n  oversubscription:\n    group: {value: 64, source: \"test\"}\n    \
         ratio: {value: 2, source: \"test\"}\n",
    );
    let over = Calibration::load(&Source::new("over.yaml", text)).unwrap();
    let (rb, ro) = (Rates::of(&base), Rates::of(&over));
    let s = 1e9;
    // dp = 16 over 16 nodes (128 GPUs, beyond the group of 64): one GPU per node, flat over
    // the inter-node tier, its bandwidth term doubled, its latency not.
    let m = Mesh::new(8, 16, 1, 8);
    let dp = m.axis(AxisKind::Dp);
    assert_eq!((dp.tier, dp.per_node), (Tier::Inter, 1));
    let wire = 2.0 * 15.0 / 16.0 * s;
    let latency = 2.0 * 15.0 * 10e-6;
    let tb = rb.collective_seconds(Collective::AllReduce, wire, dp);
    let to = ro.collective_seconds(Collective::AllReduce, wire, dp);
    close(to - latency, 2.0 * (tb - latency));
    close(tb, latency + wire / (50e9 * 0.8));
    // The floor (no latency) doubles too.
    close(
        ro.collective_floor(Collective::AllReduce, wire, dp),
        2.0 * rb.collective_floor(Collective::AllReduce, wire, dp),
    );
    // dp = 8 over 8 nodes (64 GPUs): inside the group, unchanged.
    let m = Mesh::new(8, 8, 1, 8);
    let dp = m.axis(AxisKind::Dp);
    assert_eq!(
        ro.collective_seconds(Collective::AllReduce, wire, dp),
        rb.collective_seconds(Collective::AllReduce, wire, dp)
    );
    // Intra-node traffic never is.
    let tp = Mesh::new(8, 16, 1, 8);
    let tp = tp.axis(AxisKind::Tp);
    assert_eq!(
        ro.collective_seconds(Collective::AllReduce, wire, tp),
        rb.collective_seconds(Collective::AllReduce, wire, tp)
    );
}

/// `text` with `from` replaced by `to` must be refused at the line of `at` (the first line
/// that starts with it after the replacement) naming `word`.
fn refused(text: &str, from: &str, to: &str, at: &str, word: &str) {
    assert!(text.contains(from), "{from}");
    let bad = text.replacen(from, to, 1);
    let line = bad
        .lines()
        .position(|l| l.trim_start().starts_with(at))
        .unwrap()
        + 1;
    let err = match Calibration::load(&Source::new("bad.yaml", bad.clone())) {
        Ok(_) => panic!("accepted: {to}"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with(&format!("bad.yaml:{line}:")) && err.contains(word),
        "{to}: {err}"
    );
}

#[test]
fn malformed_topology_fields_are_refused_with_file_line_and_field() {
    let v5p = table("tpu-v5p");
    let dims = "dims: {value: [4, 8, 8]";
    refused(&v5p, dims, "dims: {value: [4, 8, 4]", "dims:", "dims");
    refused(&v5p, dims, "dims: {value: []", "dims:", "dims");
    refused(&v5p, dims, "dims: {value: [4, -8, 8]", "dims:", "");
    refused(&v5p, dims, "dims: {value: four", "dims:", "");
    refused(
        &v5p,
        "wraparound: [true, true, true]",
        "wraparound: [true, true]",
        "wraparound:",
        "wraparound",
    );
    refused(
        &v5p,
        "wraparound: [true, true, true]",
        "wraparound: [true, true, true]\n    speed: 3",
        "speed:",
        "speed",
    );
    refused(
        &v5p,
        "link_bandwidth: {value: 100e9",
        "link_bandwidth: {value: -100e9",
        "link_bandwidth:",
        "link_bandwidth",
    );
    refused(
        &v5p,
        "link_bandwidth: {value: 100e9",
        "link_bandwidth: {value: 100e19",
        "link_bandwidth:",
        "link_bandwidth",
    );
    refused(&v5p, "  torus:", "  tori:", "tori:", "tori");
    let both = format!(
        "{v5p}  fully_connected:\n    peers: {{value: 256, source: \"x\"}}\n    \
         link_bandwidth: {{value: 1e9, source: \"x\"}}\n"
    );
    refused(
        &both,
        "fully_connected:",
        "fully_connected:",
        "fully_connected:",
        "both",
    );
    let mi = format!(
        "{}topology:\n  fully_connected:\n    peers: {{value: 8, source: \"x\"}}\n    \
         link_bandwidth: {{value: 64e9, source: \"x\"}}\n  oversubscription:\n    \
         group: {{value: 64, source: \"x\"}}\n    ratio: {{value: 2, source: \"x\"}}\n",
        table("mi300x")
    );
    assert!(Calibration::load(&Source::new("ok.yaml", mi.clone())).is_ok());
    refused(
        &mi,
        "peers: {value: 8",
        "peers: {value: 7",
        "peers:",
        "peers",
    );
    refused(
        &mi,
        "ratio: {value: 2",
        "ratio: {value: 0.5",
        "ratio:",
        "ratio",
    );
    refused(
        &mi,
        "group: {value: 64",
        "group: {value: 12",
        "group:",
        "group",
    );
    refused(
        &mi,
        "group: {value: 64",
        "group: {value: 64, sauce: \"x\"",
        "group:",
        "sauce",
    );
}

#[test]
fn rank_and_timeline_run_on_the_tpu_tables() {
    let out = common::symshard()
        .args([
            "rank",
            "llama3-8b",
            "--devices",
            "256",
            "--calib",
            "tpu-v5p",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("of tpu-v5p") && text.contains("s/step"),
        "{text}"
    );
    // Where the top row's dimensions land on the 4x8x8 torus.
    let links = text
        .lines()
        .find(|l| l.starts_with("links of #1: "))
        .unwrap();
    assert!(links.contains("→ torus"), "{links}");
    let out = common::symshard()
        .args([
            "cost",
            "llama3-8b",
            "--tp",
            "4",
            "--dp",
            "128",
            "--calib",
            "tpu-v6e",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "  links (tpu-v6e): tp 4 → torus x(4 of 16, line); dp 128 → torus x(4 of 16, every 4, \
             ring) × y(16, ring), then inter-node over 2 nodes"
        ),
        "{text}"
    );
    // Tables without a topology print no such line.
    let out = common::symshard()
        .args(["cost", "llama3-8b", "--tp", "4", "--dp", "16"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("links ("));
    let out = common::symshard()
        .args([
            "timeline",
            "llama3-8b",
            "--tp",
            "4",
            "--dp",
            "64",
            "--recompute",
            "full",
            "--calib",
            "tpu-v6e",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = v["iteration_seconds"].as_f64().unwrap();
    assert!(s.is_finite() && s > 0.0, "{s}");
}
