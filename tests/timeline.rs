//! Timelines: the event flow's invariants (streams never overlap, dependencies hold), the
//! bubble fractions of the schedules, agreement with the per-device evaluation, the trace
//! format, the saved analysis, the calibration tables and nccl-tests fitting.

mod common;

use assert_cmd::Command;
use num_traits::ToPrimitive;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use symshard::calib::{Calibration, MachineRef};
use symshard::diag::Source;
use symshard::model::ModelLoader;
use symshard::parallel::amount::HeldParams;
use symshard::parallel::{Evaluation, Layout};
use symshard::rules::CollectiveKind;
use symshard::strategy::{AxisKind, Knobs, Precision, Recompute, Schedule};
use symshard::sym::Rational;
use symshard::timeline::nccl::{fit, parse_log};
use symshard::timeline::*;

const EPS: f64 = 1e-12;

fn knobs(dp: u64, tp: u64, pp: u64, m: u64, schedule: Schedule, chunks: u64) -> Knobs {
    Knobs {
        dp,
        tp,
        pp,
        microbatches: m,
        schedule,
        chunks,
        sequence_parallel: false,
        recompute: Recompute::None,
        zero: 0,
        ep: 1,
        cp: 1,
        overlap: Default::default(),
        precision: Default::default(),
        pipeline_split: Default::default(),
        fp8_params: false,
        fp8_dispatch: false,
        node_dispatch: false,
    }
}

/// Plans `model` (with `B` set) under `k` on the reference machine.
fn plan(model: &str, batch: i64, k: &Knobs) -> (TimingPlan, Evaluation, Calibration) {
    let loader = ModelLoader::embedded().unwrap();
    let m = loader.resolve(model).unwrap();
    let mut values = m.values.clone();
    values.insert("B".into(), Rational::from_integer(batch.into()));
    let calib = Calibration::reference().unwrap();
    let layout = Layout {
        sequence_parallel: k.sequence_parallel,
        ..Layout::default()
    };
    let (p, e) = plan_strategy(
        &m,
        &values,
        k,
        &layout,
        MachineRef::of(&calib, &calib.memory_bytes()),
    )
    .unwrap();
    (p, e, calib)
}

fn strategies() -> Vec<Knobs> {
    let mut v = vec![
        knobs(2, 2, 2, 4, Schedule::Gpipe, 1),
        knobs(2, 2, 2, 4, Schedule::OneFOneB, 1),
        knobs(1, 2, 4, 8, Schedule::OneFOneB, 1),
        knobs(4, 1, 1, 2, Schedule::OneFOneB, 1),
        knobs(2, 4, 1, 1, Schedule::OneFOneB, 1),
    ];
    let mut full = knobs(2, 2, 2, 4, Schedule::OneFOneB, 1);
    full.recompute = Recompute::Full;
    full.zero = 1;
    v.push(full);
    // One stage with tensor parallelism: its forward collectives run again under full
    // recomputation (checked against the evaluation's rows below).
    let mut full_one_stage = knobs(2, 4, 1, 2, Schedule::OneFOneB, 1);
    full_one_stage.recompute = Recompute::Full;
    v.push(full_one_stage);
    let mut sel = knobs(1, 4, 2, 4, Schedule::OneFOneB, 1);
    sel.recompute = Recompute::Selective;
    sel.sequence_parallel = true;
    v.push(sel);
    let mut z3 = knobs(4, 2, 1, 2, Schedule::OneFOneB, 1);
    z3.zero = 3;
    v.push(z3.clone());
    // fp32 weights under autocast: fp32 gradients reduced, fp32 weights gathered.
    for zero in [0, 1, 3] {
        let mut amp = knobs(4, 1, 1, 2, Schedule::OneFOneB, 1);
        amp.zero = zero;
        amp.precision = Precision::Autocast;
        v.push(amp);
    }
    // DualPipe: each rank runs two stages and sums its copies' gradients with its mirror's.
    for zero in [0, 1] {
        let mut dual = knobs(2, 1, 2, 4, Schedule::DualPipe, 1);
        dual.zero = zero;
        v.push(dual);
    }
    v
}

#[test]
fn streams_never_overlap_and_dependencies_hold() {
    // gpt3-125m has 12 layers; interleaving needs pp × chunks | 12 and pp | micro-batches.
    let mut all = strategies();
    all.push(knobs(1, 1, 3, 6, Schedule::Interleaved, 2));
    all.push(knobs(2, 1, 2, 4, Schedule::Interleaved, 3));
    all.push(knobs(1, 2, 2, 2, Schedule::Interleaved, 2));
    for k in all {
        let (p, _, calib) = plan("gpt3-125m", 48, &k);
        let tl = time_plan(&p, &calib).unwrap();
        let ev = &tl.sim.events;
        assert!(!ev.is_empty());
        let mut lanes: BTreeMap<(usize, Stream), Vec<&Event>> = BTreeMap::new();
        for e in ev {
            assert!(e.dur >= 0.0 && e.start >= 0.0, "{k}: {e:?}");
            lanes.entry((e.device, e.stream)).or_default().push(e);
            for &d in &e.deps {
                assert!(d < ev.len(), "{k}: dependency on a missing event");
                assert!(
                    ev[d].end() <= e.start + EPS,
                    "{k}: event starts at {} before its dependency ends at {}",
                    e.start,
                    ev[d].end()
                );
            }
        }
        for ((d, s), mut es) in lanes {
            es.sort_by(|a, b| a.start.total_cmp(&b.start));
            for w in es.windows(2) {
                assert!(
                    w[0].end() <= w[1].start + EPS,
                    "{k}: device {d} {s:?}: {} ends after {} starts",
                    w[0].end(),
                    w[1].start
                );
            }
        }
        let last = ev.iter().map(Event::end).fold(0.0, f64::max);
        assert!((last - tl.summary.iteration_seconds).abs() < EPS);
        let bubble = tl.summary.bubble_fraction;
        assert!(
            (0.0..=1.0).contains(&bubble),
            "{k}: bubble fraction {bubble}"
        );
    }
}

/// A plan of `layers` identical layers (forward 1 s of matmul, backward 2 s, nothing else).
fn uniform(p: u64, m: u64, schedule: Schedule, v: u64, layers: usize) -> TimingPlan {
    let op = PlanOp {
        name: "mm".into(),
        matmul: true,
        attention_core: false,
        fused_attention: false,
        forward_flops: Rational::from_integer(1000.into()),
        backward_flops: Rational::from_integer(2000.into()),
        weight_grad_flops: Rational::from_integer(0.into()),
        forward_bytes: Rational::from_integer(0.into()),
        backward_bytes: Rational::from_integer(0.into()),
        ring_bytes: Rational::from_integer(0.into()),
        gemms: Vec::new(),
        params: Rational::from_integer(0.into()),
        fused_with_next: false,
        param_grad_bytes: Rational::from_integer(0.into()),
        fan_in_bytes: Rational::from_integer(0.into()),
        fp8: false,
        fp8_casts_input: false,
        weight_share: Rational::from_integer(1.into()),
        expert: false,
    };
    let block = PlanBlock {
        name: "layer".into(),
        layer: true,
        ops: vec![op],
        forward: vec![Step::Compute(0)],
        backward: vec![Step::Compute(0)],
        grads: vec![],
        boundary_bytes: Rational::from_integer(0.into()),
        params: Rational::from_integer(0.into()),
    };
    let stages = (p * v) as usize;
    TimingPlan {
        format: FORMAT.into(),
        model: "uniform".into(),
        symbols: BTreeMap::new(),
        knobs: knobs(1, 1, p, m, schedule, v),
        gpus_per_node: Some(8),
        samples: Rational::from_integer(m.into()),
        tokens: Rational::from_integer(0.into()),
        model_flops: Rational::from_integer(0.into()),
        memory_per_device: Rational::from_integer(0.into()),
        batch_symbol: None,
        sequence_symbol: None,
        settings: BTreeMap::new(),
        routing: None,
        blocks: vec![block],
        items: vec![0; layers],
        stages: vec![layers / stages; stages],
    }
}

#[test]
fn bubble_fractions_of_uniform_stages() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    for (p, m) in [(2u64, 4u64), (4, 8), (4, 16), (8, 16), (3, 9)] {
        for sched in [Schedule::Gpipe, Schedule::OneFOneB] {
            let plan = uniform(p, m, sched, 1, 2 * p as usize);
            let sim = simulate(&plan, &rates, 8).unwrap();
            let work = sim.work.iter().cloned().fold(0.0, f64::max);
            let bubble = (sim.flush - work) / work;
            let want = (p - 1) as f64 / m as f64;
            assert!(
                (bubble - want).abs() < 1e-9,
                "{sched} p={p} m={m}: {bubble} vs {want}"
            );
        }
        for v in [2u64, 3] {
            if m == p {
                continue;
            }
            let plan = uniform(p, m, Schedule::Interleaved, v, (p * v) as usize * 2);
            let sim = simulate(&plan, &rates, 8).unwrap();
            let work = sim.work.iter().cloned().fold(0.0, f64::max);
            let bubble = (sim.flush - work) / work;
            let want = (p - 1) as f64 / (v * m) as f64;
            assert!(
                (bubble - want).abs() < 1e-9,
                "interleaved v={v} p={p} m={m}: {bubble} vs {want}"
            );
        }
    }
}

/// The sum of `f` over the events of stream `s`, per device (pipeline rank) of `k`.
fn per_device(tl: &Timeline, k: &Knobs, s: Stream, f: &dyn Fn(&Event) -> f64) -> Vec<f64> {
    let mut v = vec![0.0; k.pp as usize];
    for ev in tl.sim.events.iter().filter(|ev| ev.stream == s) {
        v[ev.device] += f(ev);
    }
    v
}

/// The evaluation's bytes per step on `axis`: each row's bytes per call times its calls.
fn axis_bytes(e: &Evaluation, axis: AxisKind) -> f64 {
    e.comm
        .iter()
        .filter(|r| r.axis == axis)
        .map(|r| r.bytes.to_f64().unwrap() * r.count as f64)
        .sum()
}

#[test]
fn busy_times_add_up_to_the_evaluation() {
    for k in strategies() {
        let (p, e, calib) = plan("gpt3-125m", 32, &k);
        let tl = time_plan(&p, &calib).unwrap();
        let rates = Rates::of(&calib);
        let per_device = |s: Stream, f: &dyn Fn(&Event) -> f64| per_device(&tl, &k, s, f);
        // FLOPs of every stage, recomputation included, exactly as the evaluation counts them.
        let flops = per_device(Stream::Compute, &|ev| ev.flops);
        for (s, st) in e.stages.iter().enumerate() {
            let want = st.flops.to_f64().unwrap();
            assert!((flops[s] - want).abs() <= 1e-9 * want, "{k}: stage {s}");
        }
        // Busy seconds per stream equal the sums of the events' durations.
        for (s, d) in tl.summary.devices.iter().enumerate() {
            for (stream, busy) in [
                (Stream::Compute, d.busy.compute),
                (Stream::TpComm, d.busy.tp_comm),
                (Stream::DpComm, d.busy.dp_comm),
                (Stream::P2p, d.busy.p2p),
            ] {
                let sum = per_device(stream, &|ev| ev.dur)[s];
                assert!((sum - busy).abs() < 1e-12, "{k}: {stream:?}");
            }
        }
        if k.pp > 1 {
            // Point-to-point bytes of a middle-or-end stage: what the evaluation says it sends.
            let sent = per_device(Stream::P2p, &|ev| ev.bytes);
            let want = e.p2p_bytes.to_f64().unwrap();
            assert!(
                sent.iter().any(|b| (b - want).abs() <= 1e-9 * want),
                "{k}: {sent:?} vs {want}"
            );
            continue;
        }
        // One stage: its collectives are the evaluation's rows, timed α–β by the same table.
        let tp_axis = e.mesh.axis(AxisKind::Tp).clone();
        let dp_axis = e.mesh.axis(AxisKind::Dp).clone();
        let (mut tp_bytes, mut tp_secs) = (0.0, 0.0);
        // Data-parallel rows as the evaluation lists them under the ZeRO stage: the gradients'
        // reduction (an all-reduce, or reduce-scatters) and the weights' all-gathers.
        let (mut dp_reduce, mut dp_gather) = (0.0, 0.0);
        for r in &e.comm {
            let b = r.bytes.to_f64().unwrap();
            // Counts hold every pass: a layer's forward collectives twice under full
            // recomputation.
            let times = r.count as f64;
            if r.axis == AxisKind::Tp {
                tp_bytes += b * times;
                tp_secs +=
                    rates.collective_seconds(Collective::of(r.collective), b, &tp_axis) * times;
            } else if r.collective == CollectiveKind::AllGather {
                dp_gather += b * times;
            } else {
                dp_reduce += b * times;
            }
        }
        let ev_tp = per_device(Stream::TpComm, &|ev| ev.bytes)[0];
        let ev_dp = per_device(Stream::DpComm, &|ev| {
            if matches!(ev.what, What::Grad { .. }) {
                ev.bytes
            } else {
                0.0
            }
        })[0];
        let gathers = tl
            .sim
            .events
            .iter()
            .filter(|ev| ev.what == What::ParamGather)
            .count();
        assert_eq!(gathers > 0, (1..=3).contains(&k.zero) && k.dp > 1, "{k}");
        if k.zero == 3 && k.dp > 1 {
            // FSDP: every block's weights, twice per micro-batch, (n − 1)/n on the wire: the
            // evaluation's all-gather rows (with a reduce-scatter per micro-batch, 3m/2 of the
            // all-reduce's bytes in all).
            let gathered: f64 = tl
                .sim
                .events
                .iter()
                .filter(|ev| ev.device == 0 && ev.what == What::ParamGather)
                .map(|ev| ev.bytes)
                .sum();
            assert!(
                (gathered - dp_gather).abs() <= 1e-9 * dp_gather,
                "{k}: {gathered} vs {dp_gather}"
            );
        }
        // The gradients' reduction the simulator runs is the evaluation's: one all-reduce (ZeRO
        // 0), one reduce-scatter (ZeRO 1), or one after every micro-batch (ZeRO 2–3).
        assert!(
            (ev_tp - tp_bytes).abs() <= 1e-9 * tp_bytes.max(1.0),
            "{k}: {ev_tp} vs {tp_bytes}"
        );
        assert!(
            (ev_dp - dp_reduce).abs() <= 1e-9 * dp_reduce.max(1.0),
            "{k}: {ev_dp} vs {dp_reduce}"
        );
        let busy_tp = tl.summary.devices[0].busy.tp_comm;
        assert!((busy_tp - tp_secs).abs() <= 1e-9 * tp_secs.max(1e-9), "{k}");
        // Buckets batch the latency, so only the bandwidth term is additive.
        let link = rates.link(dp_axis.tier);
        let fastest = link.busbw[Collective::AllReduce]
            .as_ref()
            .map_or(link.bandwidth, |c| c.max().max(link.bandwidth));
        let dp_band = dp_reduce / fastest;
        assert!(
            tl.summary.devices[0].busy.dp_comm >= dp_band * (1.0 - 1e-9),
            "{k}"
        );
    }
}

#[test]
fn the_trace_follows_the_trace_event_format() {
    let (p, _, calib) = plan("gpt3-125m", 32, &strategies()[1]);
    let tl = time_plan(&p, &calib).unwrap();
    let text = serde_json::to_string(&chrome_trace(&tl.plan, &tl.sim, TraceDetail::Op)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let (mut procs, mut threads, mut used) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut complete = 0;
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        let pid = e["pid"].as_u64().unwrap();
        let tid = e["tid"].as_u64().unwrap();
        assert!(e["name"].is_string());
        match ph {
            "X" => {
                complete += 1;
                assert!(e["ts"].as_f64().unwrap() >= 0.0);
                assert!(e["dur"].as_f64().unwrap() >= 0.0);
                used.insert((pid, tid));
            }
            "M" => {
                let name = e["name"].as_str().unwrap();
                assert!(e["args"].is_object());
                match name {
                    "process_name" => {
                        procs.insert(pid);
                    }
                    "thread_name" => {
                        threads.insert((pid, tid));
                    }
                    "process_sort_index" | "thread_sort_index" => {}
                    other => panic!("unexpected metadata {other}"),
                }
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    assert_eq!(complete, tl.sim.events.len());
    for (pid, tid) in used {
        assert!(procs.contains(&pid) && threads.contains(&(pid, tid)));
    }
    // Names carry layer, operator and micro-batch.
    assert!(events.iter().any(|e| e["name"]
        .as_str()
        .unwrap()
        .starts_with("F layer3.fc_in mb1")));
}

#[test]
fn the_layer_trace_merges_each_layer_pass_and_micro_batch_into_one_span() {
    let (p, _, calib) = plan("gpt3-125m", 32, &strategies()[1]);
    let tl = time_plan(&p, &calib).unwrap();
    let op = chrome_trace(&tl.plan, &tl.sim, TraceDetail::Op);
    let layer = chrome_trace(&tl.plan, &tl.sim, TraceDetail::Layer);
    let complete = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .cloned()
            .collect()
    };
    let (ops, layers) = (complete(&op), complete(&layer));
    assert!(
        layers.len() * 4 < ops.len(),
        "{} vs {}",
        layers.len(),
        ops.len()
    );
    // Nothing is lost: per device and stream, busy time, FLOPs and bytes add up to the
    // per-operator trace's.
    // Busy seconds: a span's `busy_us` (what its events ran), an operator's own duration.
    let totals = |evs: &[serde_json::Value]| {
        let mut t: BTreeMap<(u64, u64), [f64; 3]> = BTreeMap::new();
        for e in evs {
            let busy = e["args"]["busy_us"]
                .as_f64()
                .unwrap_or_else(|| e["dur"].as_f64().unwrap());
            let s = t
                .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                .or_default();
            s[0] += busy;
            s[1] += e["args"]["flops"].as_f64().unwrap_or(0.0);
            s[2] += e["args"]["bytes"].as_f64().unwrap_or(0.0);
        }
        t
    };
    assert!(ops.iter().all(|e| e["args"]["busy_us"].is_null()));
    let (a, b) = (totals(&ops), totals(&layers));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, x) in &a {
        for i in 0..3 {
            let y = b[k][i];
            assert!(
                (x[i] - y).abs() <= 1e-9 * x[i].abs().max(1.0),
                "{k:?} {i}: {x:?} {y}"
            );
        }
    }
    // A span covers its events: it never ends before they are busy.
    for e in &layers {
        let busy = e["args"]["busy_us"].as_f64().unwrap_or(0.0);
        assert!(e["dur"].as_f64().unwrap() >= busy * (1.0 - 1e-12));
    }
    // Layer spans are named by pass, layer and micro-batch.
    assert!(layers
        .iter()
        .any(|e| e["name"] == "F layer3 mb1" && e["args"]["events"].as_u64().unwrap() > 1));
}

#[test]
fn a_saved_analysis_times_as_the_direct_run() {
    let mut k = strategies()[1].clone();
    k.recompute = Recompute::Selective;
    let (p, _, calib) = plan("gpt3-125m", 32, &k);
    let back: TimingPlan = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(back, p);
    assert_eq!(
        time_plan(&back, &calib).unwrap().summary,
        time_plan(&p, &calib).unwrap().summary
    );
    // The command line: analyze → timeline FILE.json gives what timeline MODEL gives.
    let dir = std::env::temp_dir().join(format!("symshard-tl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("analysis.json");
    let flags = [
        "--dp",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--microbatches",
        "4",
        "--set",
        "B=32",
        "--recompute",
        "selective",
        "--calib",
        "a100-80gb",
    ];
    let bin = || Command::cargo_bin("symshard").unwrap();
    bin()
        .arg("analyze")
        .arg("gpt3-125m")
        .args(flags)
        .arg("-o")
        .arg(&file)
        .assert()
        .success();
    let direct = bin()
        .args(["timeline", "gpt3-125m", "--format", "json"])
        .args(flags)
        .output()
        .unwrap();
    let saved = bin()
        .arg("timeline")
        .arg(&file)
        .args(["--calib", "a100-80gb", "--format", "json"])
        .output()
        .unwrap();
    assert!(direct.status.success() && saved.status.success());
    assert_eq!(direct.stdout, saved.stdout);
    let json: serde_json::Value = serde_json::from_slice(&direct.stdout).unwrap();
    for key in [
        "iteration_seconds",
        "tokens_per_second",
        "model_tflops_per_device",
        "mfu",
        "bubble_fraction",
    ] {
        assert!(json[key].as_f64().unwrap() > 0.0, "{key}");
    }
    let d = &json["devices"][1];
    assert_eq!((d["id"].as_u64(), d["stage"].as_u64()), (Some(4), Some(1)));
    for s in ["compute", "tp_comm", "dp_comm", "p2p"] {
        assert!(d["busy"][s].as_f64().unwrap() > 0.0, "{s}");
    }
    // port: the same analysis on several machines.
    let port = bin()
        .arg("port")
        .arg(&file)
        .args([
            "--calib",
            "a100-80gb",
            "--calib",
            "h100-sxm",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&port.stdout).unwrap();
    assert_eq!(rows[0], json);
    assert!(rows[1]["iteration_seconds"].as_f64() < rows[0]["iteration_seconds"].as_f64());
    // A saved analysis fixes the strategy.
    bin()
        .arg("timeline")
        .arg(&file)
        .args(["--tp", "4"])
        .assert()
        .code(2);
    std::fs::write(dir.join("broken.json"), "{\"format\": 1}").unwrap();
    let out = bin()
        .arg("timeline")
        .arg(dir.join("broken.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.json:1:"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_calibration_table_loads_and_times() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration");
    let mut names = Vec::new();
    let (p, _, _) = plan("gpt3-125m", 32, &strategies()[1]);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let c = Calibration::load(&Source::new(&path, text.clone()))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            Some(c.name.as_str()),
            path.file_stem().and_then(|s| s.to_str())
        );
        // Every number says where it comes from.
        let values = text.matches("value:").count()
            + text.matches("points:").count()
            + text.matches("tiles:").count()
            + text.matches("formats: [").count();
        let sourced = text.matches("source: \"").count();
        assert!(values > 0 && values == sourced, "{}", path.display());
        let s = time_plan(&p, &c).unwrap().summary;
        assert!(s.iteration_seconds.is_finite() && s.iteration_seconds > 0.0);
        assert!(s.mfu > 0.0 && s.mfu < 1.0, "{}: mfu {}", c.name, s.mfu);
        names.push(c.name);
    }
    for want in common::SHIPPED_TABLES {
        assert!(names.iter().any(|n| n == want), "{want} missing");
    }
}

#[test]
fn a_broken_calibration_fails_with_file_and_line() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/a100-80gb.yaml"),
    )
    .unwrap();
    let line = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let bad = text.replace("memory_bound: {value: 0.80", "memory_bound: {value: 1.80");
    let err = Calibration::load(&Source::new("bad.yaml", bad))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("bad.yaml:{}:", line("memory_bound: {value"))),
        "{err}"
    );
    let bad = text.replace("algorithm: ring", "algorithm: ring\n    speed: 3");
    let err = Calibration::load(&Source::new("bad.yaml", bad))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("bad.yaml:") && err.contains("speed"),
        "{err}"
    );
    // On the command line too, with exit code 2.
    let dir = std::env::temp_dir().join(format!("symshard-badcal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        text.replace("latency: {value: 3e-6", "latency: {value: -3e-6"),
    )
    .unwrap();
    let out = Command::cargo_bin("symshard")
        .unwrap()
        .args(["timeline", "gpt3-125m", "--calib"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("bad.yaml:{}:", line("latency: {value: 3e-6"))),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nccl_tests_logs_fit_the_synthetic_parameters() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl");
    let read = |name: &str| {
        let p = dir.join(name);
        parse_log(&p, &std::fs::read_to_string(&p).unwrap()).unwrap()
    };
    let one = read("all_reduce_perf_1node_8gpu.txt");
    let two = read("all_reduce_perf_2node_16gpu.txt");
    assert_eq!((one.ranks, one.hosts, two.ranks, two.hosts), (8, 1, 16, 2));
    let base = Calibration::reference().unwrap();
    let (intra, inter) = fit(&[one, two], &base).unwrap();
    let (intra, inter) = (intra.unwrap(), inter.unwrap());
    // The fixtures were generated with α = 1.8 µs, β = 362 GB/s inside and α = 8 µs,
    // β = 44 GB/s across nodes, with ±3% noise.
    let close = |got: f64, want: f64, tol: f64| (got / want - 1.0).abs() < tol;
    assert!(close(intra.bandwidth, 362e9, 0.03), "{intra:?}");
    assert!(close(intra.latency, 1.8e-6, 0.15), "{intra:?}");
    assert!(close(inter.bandwidth, 44e9, 0.05), "{inter:?}");
    assert!(close(inter.latency, 8e-6, 0.25), "{inter:?}");
    // The command writes a table that loads, its tiers measured.
    let out_dir = std::env::temp_dir().join(format!("symshard-nccl-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("measured.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests"])
        .arg(dir.join("all_reduce_perf_1node_8gpu.txt"))
        .arg(dir.join("all_reduce_perf_2node_16gpu.txt"))
        .args(["--base", "dgx-h100", "-o"])
        .arg(&out)
        .assert()
        .success();
    let c = Calibration::resolve(out.to_str().unwrap()).unwrap();
    assert_eq!(c.name, "measured");
    assert!(c.tiers.intra.latency.source.starts_with("measured"));
    assert!(c.tiers.inter.efficiency.source.starts_with("measured"));
    assert_eq!(c.device, base.device);
    // A log that is not all_reduce_perf output fails with its name and line.
    let bad = out_dir.join("bad.txt");
    std::fs::write(
        &bad,
        "#  Rank 0 on a\n#  Rank 1 on a\n       8   2 float sum -1 x\n",
    )
    .unwrap();
    let o = Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests"])
        .arg(&bad)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.txt:3:"));
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// Every shipped published measurement (`validation/`) stays within the bound recorded for it.
/// These are regression guards: the bounds are the errors observed when each row was added plus
/// a margin, not accuracy claims (`symshard validate` prints the errors and the aims).
#[test]
fn shipped_validation_stays_within_recorded_bounds() {
    let files = symshard::validate::shipped();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "korthikanti2022-table4",
        "korthikanti2022-table5",
        "mosaicml-mpt-a100",
        "mosaicml-mpt-h100",
        "lambda-flash-attention-a100",
        "lambda-flash-attention-h100",
        "flash-attention-training-a100",
        "dao2023-table1-flash-attention",
        "dao2023-table1-flash-attention-2",
        "mosaicml-mpt-a100-sweep",
        "mosaicml-mpt-h100-sweep",
        "megatron-v1-dgx2h",
        "narayanan2021-table1",
        "torchtitan-a100",
        "nvidia-dgxc-h100",
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    for (name, src) in &files {
        let o = symshard::validate::run_file(name, src).unwrap();
        assert!(!o.rows.is_empty(), "{name}");
        // Every shipped file names the software stack its measurements ran.
        assert!(o.stack.is_some(), "{name} names no stack");
        for r in &o.rows {
            assert!(
                r.predicted.is_finite() && r.predicted > 0.0,
                "{name}/{}",
                r.name
            );
            assert!(
                r.error.abs() <= r.bound,
                "{name}/{}: {:.3} predicted, {} published ({:+.1} %, bound {:.1} %)",
                r.name,
                r.predicted,
                r.published,
                100.0 * r.error,
                100.0 * r.bound
            );
        }
    }
}

/// A validation file with a broken row fails with its file and line.
#[test]
fn a_broken_validation_file_names_the_row() {
    let text = "source: x\nmachine: a100-80gb\nsettings: s\nbound: 0.1\nruns:\n  - {name: r, model: gpt3-125m, strategy: {tp: 7}, published: 1.0}\n";
    let err = symshard::validate::run_file("bad", &Source::new("bad.yaml", text))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("bad.yaml:6:"), "{err}");
    let text = text.replace("published: 1.0", "published: 1.0, speed: 2");
    let err = symshard::validate::run_file("bad", &Source::new("bad.yaml", text))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("bad.yaml:") && err.contains("speed"),
        "{err}"
    );
}

/// A validation file names the software stack its measurements ran; `validate` groups the rows
/// by it. A label that is not one (spaces, capitals, empty) is refused with its line.
#[test]
fn validation_rows_are_summarised_by_the_stack_their_file_names() {
    let file = |stack: &str, published: &[f64]| {
        let mut text =
            format!("source: x\nmachine: a100-80gb\n{stack}settings: s\nbound: 10\nruns:\n");
        for (i, p) in published.iter().enumerate() {
            text += &format!(
                "  - {{name: r{i}, model: gpt3-125m, set: {{B: 8}}, strategy: {{dp: 8}}, published: {p}}}\n"
            );
        }
        text
    };
    let run =
        |text: String| symshard::validate::run_file("f", &Source::new("f.yaml", text)).unwrap();
    let a = run(file("stack: alpha\n", &[1.0, 2.0]));
    let b = run(file("stack: beta-2\n", &[1.0]));
    let c = run(file("stack: alpha\n", &[4.0]));
    let d = run(file("", &[3.0]));
    assert_eq!(a.stack.as_deref(), Some("alpha"));
    assert_eq!(d.stack, None);
    let predicted = a.rows[0].predicted;
    let err = |published: f64| predicted / published - 1.0;
    let summary = symshard::validate::by_stack(&[a, b, c, d]);
    let labels: Vec<&str> = summary.iter().map(|s| s.group.as_str()).collect();
    assert_eq!(labels, ["alpha", "beta-2", "unstated"]);
    let alpha = &summary[0];
    assert_eq!((alpha.sources, alpha.rows), (2, 3));
    let mut e = [err(1.0), err(2.0), err(4.0)];
    e.sort_by(f64::total_cmp);
    assert!((alpha.median_error - e[1]).abs() < 1e-12);
    assert!((alpha.min_error - e[0]).abs() < 1e-12 && (alpha.max_error - e[2]).abs() < 1e-12);
    let mean = e.iter().map(|x| x.abs()).sum::<f64>() / 3.0;
    assert!((alpha.mean_abs_error - mean).abs() < 1e-12);
    assert_eq!((summary[1].rows, summary[2].rows), (1, 1));
    assert!((summary[2].median_error - err(3.0)).abs() < 1e-12);
    for bad in ["stack: Megatron LM\n", "stack: \"\"\n"] {
        let e = symshard::validate::run_file("f", &Source::new("f.yaml", file(bad, &[1.0])))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.yaml:3:") && e.contains("stack"), "{e}");
    }
}

/// `symshard validate` prints the errors by stack after the sources (that every shipped file
/// names its stack is checked with the bounds, above).
#[test]
fn validate_prints_the_errors_by_stack() {
    let out = common::symshard().arg("validate").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let tail = &out[out.find("by stack").expect("no summary by stack")..];
    for stack in ["megatron", "pytorch-fsdp", "pytorch-ddp"] {
        assert!(tail.contains(stack), "{stack} missing:\n{tail}");
    }
}

/// 1F1B and GPipe have the same bubble (Narayanan et al. SC'21); with the same stages 1F1B is
/// never slower (it only holds fewer activations).
#[test]
fn one_f_one_b_is_never_slower_than_gpipe() {
    let loader = ModelLoader::embedded().unwrap();
    let m = loader.resolve("bert-large").unwrap();
    let calib = Calibration::resolve("a40-pcie").unwrap();
    let mut values = m.values.clone();
    values.insert("L".into(), Rational::from_integer(48.into()));
    values.insert("B".into(), Rational::from_integer(16.into()));
    let time = |schedule| {
        let k = knobs(1, 1, 16, 16, schedule, 1);
        let (p, _) = plan_strategy(
            &m,
            &values,
            &k,
            &Layout::default(),
            MachineRef::of(&calib, &calib.memory_bytes()),
        )
        .unwrap();
        time_summary(&p, &calib).unwrap()
    };
    let (g, o) = (time(Schedule::Gpipe), time(Schedule::OneFOneB));
    assert!(
        o.iteration_seconds <= g.iteration_seconds * (1.0 + 1e-9),
        "1F1B {} s, GPipe {} s",
        o.iteration_seconds,
        g.iteration_seconds
    );
    for s in [&g, &o] {
        assert!(
            (0.0..1.0).contains(&s.bubble_fraction),
            "{}",
            s.bubble_fraction
        );
    }
}

/// Curves in calibration tables are checked where they are written.
#[test]
fn broken_curves_fail_with_file_and_line() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/h100-sxm.yaml"),
    )
    .unwrap();
    let line = |t: &str, needle: &str| t.lines().position(|l| l.contains(needle)).unwrap() + 1;
    for (from, to, needle, says) in [
        (
            "[[2.68e8, 370e9], [8.59e9, 480e9]]",
            "[[8.59e9, 370e9], [2.68e8, 480e9]]",
            "all-reduce: {points",
            "increase",
        ),
        (
            "all-gather: {value: 350e9",
            "all-gather: {value: 0",
            "all-gather: {value",
            "positive",
        ),
        (
            "all-gather: {value: 350e9",
            "all-scatter: {value: 350e9",
            "all-scatter: {value",
            "unknown collective",
        ),
        (
            "attention: {points: [[6.87e10, 0.237]",
            "attention: {points: [[6.87e10, 1.5]",
            "attention: {points",
            "(0, 1]",
        ),
        (
            "kernel_overhead: {value: 2e-6",
            "kernel_overhead: {value: 2",
            "kernel_overhead: {value",
            "kernel_overhead",
        ),
        (
            "multiprocessors: {value: 132",
            "multiprocessors: {value: 13.2",
            "multiprocessors: {value",
            "whole number",
        ),
        (
            "tiles: [[256, 128], [128, 256], [128, 128]]",
            "tiles: [[256, 0]]",
            "tiles: [[256, 0]]",
            "[rows, columns]",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let bad = text.replace(from, to);
        let err = Calibration::load(&Source::new("bad.yaml", bad.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("bad.yaml:{}:", line(&bad, needle))) && err.contains(says),
            "{err}"
        );
    }
}

/// Fused attention: the same matmul FLOPs as eager attention, far less memory, and a
/// fused-attention model refuses nothing it can run; a graph without fused operators refuses
/// `--attention flash`.
#[test]
fn attention_modes_on_the_command_line() {
    let run = |args: &[&str]| {
        Command::cargo_bin("symshard")
            .unwrap()
            .args(args)
            .output()
            .unwrap()
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let o = run(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let flash = json(&[
        "cost",
        "gpt3-125m",
        "--attention",
        "flash",
        "--format",
        "json",
    ]);
    let eager = json(&["cost", "gpt3-125m", "--format", "json"]);
    let mm = |v: &serde_json::Value| v["flops"]["forward"]["matmul"].clone();
    assert_eq!(mm(&flash), mm(&eager));
    let saved = |v: &serde_json::Value| -> f64 {
        let a = &v["memory"]["activations"];
        a.as_str()
            .map_or_else(|| a.as_f64().unwrap(), |s| s.parse().unwrap())
    };
    assert!(saved(&flash) < saved(&eager) / 2.0);
    // A causal kernel computes half of the score blocks (its share `w = 1/2` is a rule
    // parameter, not a size): forward matmul FLOPs drop by exactly the attention's half,
    // 4·B·NH·S²·(H/NH)·(1/2) per layer = 2·B·S²·H, over the L layers of gpt3-125m (at the
    // model's default symbol values, read from the JSON).
    let causal = json(&[
        "cost",
        "gpt3-125m",
        "--attention",
        "flash-causal",
        "--format",
        "json",
    ]);
    let num = |v: &serde_json::Value| -> i128 {
        v.as_str()
            .map_or_else(|| v.as_i64().unwrap() as i128, |s| s.parse().unwrap())
    };
    let (b, s, h, l) = (
        num(&flash["symbols"]["B"]),
        num(&flash["symbols"]["S"]),
        num(&flash["symbols"]["H"]),
        num(&flash["symbols"]["L"]),
    );
    assert_eq!(
        num(&mm(&flash)) - num(&mm(&causal)),
        l * 2 * b * s * s * h,
        "flash − flash-causal forward matmul FLOPs"
    );
    for model in ["llama3-8b", "gpt3-175b"] {
        let o = run(&["timeline", model, "--attention", "flash-causal"]);
        assert!(
            o.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = run(&["cost", "resnet50", "--attention", "flash"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no fused-attention"));
    let o = run(&["cost", "llama3-8b", "--tp", "8", "--recompute", "selective"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("recomputes nothing"));
}

/// A backward gradient conversion lands before its producer's backward, also for operators
/// whose names start with `d` (`down_proj`: its gradient is `ddown_proj`).
#[test]
fn gradient_conversions_precede_their_producers_backward() {
    let mut k = knobs(1, 2, 1, 1, Schedule::OneFOneB, 1);
    k.sequence_parallel = true;
    let reference = symshard::calib::REFERENCE;
    let (p, _) = common::plan_on("llama3-8b", &[("B", 8), ("S", 1024)], &k, reference);
    let layer = p.blocks.iter().find(|b| b.layer).unwrap();
    let down = layer
        .ops
        .iter()
        .position(|o| o.name == "down_proj")
        .unwrap();
    let at = |want: &dyn Fn(&Step) -> bool| layer.backward.iter().position(want);
    let conversion = at(
        &|s: &Step| matches!(s, Step::Collective(c) | Step::AfterDgrad(c) if c.name.starts_with("ddown_proj")),
    );
    if let Some(i) = conversion {
        let compute = at(&|s: &Step| matches!(s, Step::Compute(j) if *j == down)).unwrap();
        assert!(
            i < compute,
            "the gradient of down_proj is converted after its backward"
        );
    }
    // Nothing named after an operator lands at the end unless its producer is elsewhere.
    let tail: Vec<&String> = layer
        .backward
        .iter()
        .rev()
        .take_while(|s| !matches!(s, Step::Compute(_)))
        .filter_map(|s| match s {
            Step::Collective(c) | Step::AfterDgrad(c) | Step::Overlapped(c) => Some(&c.name),
            _ => None,
        })
        .collect();
    for name in tail {
        let producer = name.strip_prefix('d').unwrap_or(name);
        assert!(
            !layer.ops.iter().any(|o| o.name == producer),
            "`{name}` lands at the end of the backward pass though `{producer}` is in the layer"
        );
    }
}

/// A table written before curves existed (constants only) loads, and times exactly as the same
/// table written with the new keys at their neutral values: constant curves, no kernel
/// overhead, each collective's bus bandwidth equal to the tier's achievable bandwidth.
#[test]
fn constant_tables_still_load_and_time_alike() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/calibration");
    let path = dir.join("a100-80gb-v1.yaml");
    let old_text = std::fs::read_to_string(&path).unwrap();
    let old = Calibration::load(&Source::new(&path, old_text.clone())).unwrap();
    let new_text = old_text
        .replace(
            "matmul: {value: 0.87,",
            "matmul: {points: [[1e6, 0.87], [1e15, 0.87]],",
        )
        .replace(
            "gpus_per_node:",
            "  kernel_overhead: {value: 0, source: none}\n  comm_contention: {value: 0, source: none}\ngpus_per_node:",
        )
        .replace(
            "    algorithm: ring\n  inter:",
            "    algorithm: ring\n    busbw:\n      all-reduce: {value: 240e9, source: 300e9 × 0.8}\n      reduce-scatter: {value: 240e9, source: 300e9 × 0.8}\n  inter:",
        );
    assert_ne!(old_text, new_text);
    let new = Calibration::load(&Source::new("new.yaml", new_text)).unwrap();
    assert!(!new.device.efficiency.matmul.constant);
    for k in strategies() {
        let (p, _, _) = plan("gpt3-125m", 32, &k);
        let a = time_summary(&p, &old).unwrap().iteration_seconds;
        let b = time_summary(&p, &new).unwrap().iteration_seconds;
        assert!((a - b).abs() <= 1e-12 * a, "{k}: {a} vs {b}");
    }
}

/// The backward traffic of a rule is what its gradient kernels read and write.
#[test]
fn backward_bytes_are_derived_from_the_rules() {
    use symshard::rules::RuleSet;
    use symshard::sym::Poly;
    let rules = RuleSet::embedded().unwrap();
    let bytes = |name: &str| {
        let (r, w) = rules.get(name).unwrap().backward_io_bytes(2);
        (r.to_string(), w.to_string())
    };
    let p = |s: &str| Poly::parse(s).unwrap().to_string();
    // linear: dx reads dy and w, dw reads dy and x, dbias reads dy; writes dx, dw, dbias.
    assert_eq!(
        bytes("linear"),
        (p("6*b*n + 2*k*n + 2*b*k"), p("2*b*k + 2*k*n + 2*n"))
    );
    // softmax: reads dy and the saved output, writes dx.
    assert_eq!(bytes("softmax"), (p("4*b*n"), p("2*b*n")));
    // dropout: reads dy and the one-byte mask, writes dx.
    assert_eq!(bytes("dropout"), (p("3*b*h"), p("2*b*h")));
}

/// A forward kernel writes its output and whatever it keeps for backward beyond its inputs and
/// output: dropout's one-byte mask, layer norm's fp32 statistics.
#[test]
fn forward_bytes_include_what_is_saved_for_backward() {
    use symshard::rules::RuleSet;
    use symshard::sym::Poly;
    let rules = RuleSet::embedded().unwrap();
    let bytes = |name: &str| {
        let (r, w) = rules.get(name).unwrap().io_bytes(2);
        (r.to_string(), w.to_string())
    };
    let p = |s: &str| Poly::parse(s).unwrap().to_string();
    // dropout: reads x; writes y and the mask.
    assert_eq!(bytes("dropout"), (p("2*b*h"), p("3*b*h")));
    // layernorm: reads x, gamma and beta; writes y, mean and rstd (4 bytes each per row).
    assert_eq!(bytes("layernorm"), (p("2*b*h + 4*h"), p("2*b*h + 8*b")));
    // softmax saves its own output: nothing more is written.
    assert_eq!(bytes("softmax"), (p("2*b*n"), p("2*b*n")));
}

/// A saved analysis carries the fullest device's memory: `port` says on which machines it does
/// not fit, and timeline JSON has `fits`.
#[test]
fn port_checks_memory_on_every_machine() {
    let dir = std::env::temp_dir().join(format!("symshard-port-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.json");
    let bin = || Command::cargo_bin("symshard").unwrap();
    bin()
        .args([
            "analyze",
            "gpt3-175b",
            "--tp",
            "8",
            "--pp",
            "8",
            "--dp",
            "16",
        ])
        .args(["--microbatches", "96", "-o"])
        .arg(&file)
        .assert()
        .success();
    let o = bin()
        .arg("port")
        .arg(&file)
        .args([
            "--calib",
            "a100-80gb",
            "--calib",
            "h200-sxm",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 100.9 GB per device: too much for 80 GB, enough for 141 GB.
    assert_eq!(rows[0]["fits"], serde_json::json!(false));
    assert_eq!(rows[1]["fits"], serde_json::json!(true));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expert_parallel_all_to_alls_are_timed_on_their_own_stream() {
    // Mixtral on 8 devices: dp 4 with expert parallelism 2 inside it, tp 2, one stage.
    let mut k = knobs(4, 2, 1, 2, Schedule::OneFOneB, 1);
    k.ep = 2;
    let (p, e, calib) = plan("mixtral-8x7b", 8, &k);
    let tl = time_plan(&p, &calib).unwrap();
    let ev = &tl.sim.events;
    // What device 0 sends in all-to-alls is what the evaluation counts: four per MoE layer and
    // micro-batch, (ep − 1)/ep of the device's expert slots each.
    let sent: f64 = ev
        .iter()
        .filter(|x| x.device == 0 && x.stream == Stream::EpComm)
        .map(|x| x.bytes)
        .sum();
    let want: f64 = e
        .comm
        .iter()
        .filter(|c| c.axis == AxisKind::Ep)
        .map(|c| c.bytes.to_f64().unwrap() * c.count as f64)
        .sum();
    assert!(want > 0.0);
    assert!((sent - want).abs() <= 1e-9 * want, "{sent} vs {want}");
    let calls = ev
        .iter()
        .filter(|x| x.device == 0 && x.stream == Stream::EpComm)
        .count() as u64;
    let layers = e
        .comm
        .iter()
        .filter(|c| c.axis == AxisKind::Ep)
        .map(|c| c.count)
        .sum::<u64>();
    assert_eq!(calls, layers);
    assert!(tl.summary.devices[0].busy.ep_comm > 0.0);
    // Expert weights' gradients are reduced among dp/ep ranks only: less data-parallel traffic
    // than the same layout without expert parallelism.
    let dp_bytes = |p: &TimingPlan| -> f64 {
        p.blocks
            .iter()
            .flat_map(|b| b.grads.iter())
            .filter(|(_, c)| c.axis == Axis::Dp)
            .map(|(_, c)| c.bytes.to_f64().unwrap())
            .sum()
    };
    let mut k1 = k.clone();
    k1.ep = 1;
    let (p1, _, _) = plan("mixtral-8x7b", 8, &k1);
    assert!(dp_bytes(&p) < dp_bytes(&p1));
}

#[test]
fn overlap_never_slows_a_step_nor_beats_its_busiest_stream() {
    use symshard::strategy::Overlap;
    let mut cases = Vec::new();
    let mut sp = knobs(2, 4, 1, 2, Schedule::OneFOneB, 1);
    sp.sequence_parallel = true;
    cases.push(sp.clone());
    let mut sp_pp = knobs(1, 2, 2, 4, Schedule::OneFOneB, 1);
    sp_pp.sequence_parallel = true;
    sp_pp.recompute = Recompute::Full;
    cases.push(sp_pp);
    let mut z1 = knobs(4, 2, 1, 2, Schedule::OneFOneB, 1);
    z1.sequence_parallel = true;
    z1.zero = 1;
    cases.push(z1);
    for base in cases {
        let time = |o: Overlap| {
            let mut k = base.clone();
            k.overlap = o;
            let (p, _, calib) = plan("gpt3-125m", 32, &k);
            time_plan(&p, &calib).unwrap()
        };
        let none = Overlap {
            tp_comm: false,
            grad_reduce: false,
            param_gather: false,
        };
        let slow = time(none).summary.iteration_seconds;
        let mut variants = vec![
            Overlap {
                tp_comm: true,
                ..none
            },
            Overlap {
                grad_reduce: true,
                ..none
            },
        ];
        if base.zero == 1 {
            // The weight gather's overlap goes with the gradient reduction's, as Megatron-LM
            // requires.
            variants.push(Overlap {
                grad_reduce: true,
                param_gather: true,
                ..none
            });
            variants.push(Overlap {
                tp_comm: true,
                grad_reduce: true,
                param_gather: true,
            });
        }
        for o in variants {
            let tl = time(o);
            let t = tl.summary.iteration_seconds;
            assert!(t <= slow * (1.0 + 1e-12), "{base} {o:?}: {t} > {slow}");
            for d in &tl.summary.devices {
                let b = d.busy;
                for busy in [b.compute, b.tp_comm, b.dp_comm, b.p2p, b.ep_comm, b.cp_comm] {
                    assert!(busy <= t * (1.0 + 1e-12), "{base} {o:?}: {busy} > {t}");
                }
            }
        }
        // Overlapping tensor-parallel communication does make a difference here.
        let tp = time(Overlap {
            tp_comm: true,
            ..none
        })
        .summary
        .iteration_seconds;
        assert!(tp < slow, "{base}");
    }
}

#[test]
fn overlap_needs_what_megatron_needs() {
    let mut k = knobs(2, 4, 1, 2, Schedule::OneFOneB, 1);
    k.overlap.tp_comm = true;
    let e = symshard::strategy::check_knobs(&k).unwrap_err().to_string();
    assert!(e.contains("sequence parallelism"), "{e}");
    let mut k = knobs(2, 4, 1, 2, Schedule::OneFOneB, 1);
    k.overlap.param_gather = true;
    let e = symshard::strategy::check_knobs(&k).unwrap_err().to_string();
    assert!(e.contains("distributed optimizer"), "{e}");
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["timeline", "gpt3-125m", "--tp", "2", "--tp-comm-overlap"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("--sequence-parallel"));
    // Megatron-LM asserts `--overlap-param-gather` only with `--overlap-grad-reduce`
    // (megatron/training/arguments.py, `validate_args`).
    Command::cargo_bin("symshard")
        .unwrap()
        .args([
            "timeline",
            "gpt3-125m",
            "--dp",
            "2",
            "--zero",
            "1",
            "--overlap-param-gather",
            "--no-overlap-grad-reduce",
        ])
        .assert()
        .failure()
        .stderr(predicates::str::contains("--overlap-grad-reduce"));
}

#[test]
fn strategy_files_carry_overlap_and_reject_unknown_keys() {
    let dir = std::env::temp_dir().join(format!("symshard-overlap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        "dp: 2\ntp: 2\nsequence_parallel: true\nzero: 1\noverlap: {tp-comm: true, param-gather: true}\n",
    )
    .unwrap();
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["timeline", "gpt3-125m", "--set", "B=8", "--strategy"])
        .arg(&good)
        .assert()
        .success()
        .stdout(predicates::str::contains("overlap=tp-comm,param-gather"));
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "dp: 2\noverlap: {tp-com: true}\n").unwrap();
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["timeline", "gpt3-125m", "--strategy"])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("bad.yaml:2"))
        .stderr(predicates::str::contains("tp-com"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_trace_command_writes_layer_spans_by_default_and_operators_on_request() {
    let dir = std::env::temp_dir().join(format!("symshard-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |detail: Option<&str>| -> serde_json::Value {
        let file = dir.join(format!("{}.json", detail.unwrap_or("default")));
        let mut cmd = Command::cargo_bin("symshard").unwrap();
        cmd.args([
            "timeline",
            "gpt3-125m",
            "--dp",
            "2",
            "--pp",
            "2",
            "--calib",
            "a100-80gb",
            "--trace",
        ])
        .arg(&file);
        if let Some(d) = detail {
            cmd.args(["--trace-detail", d]);
        }
        cmd.assert().success();
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap()
    };
    let default = run(None);
    assert_eq!(default["otherData"]["detail"], "layer");
    assert_eq!(default, run(Some("layer")));
    let op = run(Some("op"));
    assert_eq!(op["otherData"]["detail"], "op");
    let n = |v: &serde_json::Value| v["traceEvents"].as_array().unwrap().len();
    assert!(n(&default) < n(&op));
    // A detail without a trace to apply it to is refused.
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["timeline", "gpt3-125m", "--trace-detail", "op"])
        .assert()
        .failure()
        .code(2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every collective on an operator's output gradient runs right before that operator's
/// backward, wherever its name comes from: placed by its typed site (the gradient of
/// `down_proj` is `ddown_proj`, T5's decoder operators start with `dec_`, Mixtral's with `d`).
#[test]
fn gradient_collectives_run_before_their_producers_backward() {
    use symshard::parallel::{analyse, Layout, Site};
    for name in ["llama3-8b", "t5-base", "mixtral-8x7b"] {
        let model = ModelLoader::embedded().unwrap().resolve(name).unwrap();
        let k = Knobs {
            tp: 2,
            sequence_parallel: true,
            ..Knobs::data_parallel(1)
        };
        let layout = Layout {
            sequence_parallel: true,
            ..Layout::default()
        };
        let calib = Calibration::reference().unwrap();
        let mut values = model.values.clone();
        values.insert("B".into(), Rational::from_integer(1.into()));
        let big = Rational::from_integer(10u64.pow(15).into());
        let (plan, _) = plan_strategy(&model, &values, &k, &layout, MachineRef::of(&calib, &big))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let analysis = analyse(&model, &layout);
        let mut checked = 0;
        for (ba, pb) in analysis.blocks.iter().zip(&plan.blocks) {
            assert_eq!(ba.name, pb.name);
            for c in &ba.edges {
                let Site::Gradient { producer } = &c.site else {
                    continue;
                };
                let Some(k) = pb.ops.iter().position(|o| &o.name == producer) else {
                    continue;
                };
                let at = pb
                    .backward
                    .iter()
                    .position(|s| match s {
                        Step::Collective(p) | Step::AfterDgrad(p) => p.name == c.op,
                        _ => false,
                    })
                    .unwrap_or_else(|| panic!("{name}: {} not in the backward", c.op));
                let next = pb.backward[at..]
                    .iter()
                    .find_map(|s| match s {
                        Step::Compute(j) => Some(*j),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{name}: {} at the end of the backward", c.op));
                assert_eq!(next, k, "{name}: {} runs before the wrong operator", c.op);
                checked += 1;
            }
        }
        assert!(checked > 0, "{name}: no gradient collective checked");
    }
}

/// A larger micro-batch gives larger GEMMs, whose tiles fill the SMs' waves better, until the
/// pipeline bubble of fewer micro-batches outweighs it. Narayanan et al. 2021, "Efficient
/// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (arXiv:2104.04473),
/// Figure 17: on A100s with tensor and pipeline parallelism 8 × 8, throughput peaks at
/// micro-batch size 2 and falls after. With one constant matmul efficiency, micro-batch size 1
/// always came out fastest here.
#[test]
fn a_larger_micro_batch_helps_until_the_bubble_wins() {
    let seconds = |mbs: &str| {
        let v = common::json(&[
            "timeline",
            "gpt3-175b",
            "--set",
            "L=16",
            "--set",
            "B=256",
            "--tp",
            "8",
            "--pp",
            "8",
            "--micro-batch-size",
            mbs,
            "--recompute",
            "full",
            "--attention",
            "eager",
            "--calib",
            "a100-80gb",
            "--format",
            "json",
        ]);
        v["iteration_seconds"].as_f64().unwrap()
    };
    let (one, two, eight) = (seconds("1"), seconds("2"), seconds("8"));
    assert!(
        two < one,
        "micro-batch 2 ({two} s) not faster than 1 ({one} s)"
    );
    assert!(
        two < eight,
        "micro-batch 2 ({two} s) not faster than 8 ({eight} s)"
    );
}

/// Every micro-batch's backward adds each weight-bearing operator's gradient to the fp32
/// gradient buffer (Megatron-LM's `main_grad`): 8 bytes of HBM traffic per local parameter,
/// once per micro-batch and never in the forward pass, sharded only when gradients are
/// (ZeRO ≥ 2).
#[test]
fn each_micro_batch_adds_its_weight_gradients_to_the_fp32_buffer() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    let params = 5.0e7;
    let pass = rates.memory_seconds(8.0 * params);
    assert!(pass > 0.0);
    let at = |zero: u8, dp: u64| Knobs {
        zero,
        ..Knobs::data_parallel(dp)
    };
    assert_eq!(grad_accumulation_bytes(params, &at(0, 8)), 8.0 * params);
    assert_eq!(grad_accumulation_bytes(params, &at(1, 8)), 8.0 * params);
    assert_eq!(grad_accumulation_bytes(params, &at(2, 8)), params);
    assert_eq!(grad_accumulation_bytes(params, &at(3, 4)), 2.0 * params);
    for m in [1u64, 4] {
        let bare = uniform(1, m, Schedule::OneFOneB, 1, 3);
        let mut weighted = bare.clone();
        weighted.blocks[0].ops[0].params = Rational::from_integer(50_000_000.into());
        let a = simulate(&bare, &rates, 8).unwrap();
        let b = simulate(&weighted, &rates, 8).unwrap();
        // Three layers, m micro-batches: one pass per layer and micro-batch, all on the
        // critical path of a single stage (the optimizer's step does not read op params).
        let extra = b.flush - a.flush;
        let want = 3.0 * m as f64 * pass;
        assert!(
            (extra - want).abs() < 1e-9 * want.max(1.0),
            "m={m}: {extra} vs {want}"
        );
        // Only the backward pass pays it.
        let chains_a = pass_chains(&bare, &rates, 8);
        let chains_b = pass_chains(&weighted, &rates, 8);
        assert_eq!(chains_a[0].forward.seconds, chains_b[0].forward.seconds);
        assert!((chains_b[0].backward.seconds - chains_a[0].backward.seconds - pass).abs() < 1e-12);
    }
}

/// Under autocast (fp32 weights, `torch.autocast`) each forward casts every weight to bf16 (6
/// bytes per element: fp32 read, bf16 written), and each backward casts the bf16 weight
/// gradient back to fp32 (6 bytes, every element) before autograd adds it to `.grad` (12
/// bytes: two fp32 reads, one write; the 1/replicas share under ZeRO ≥ 2). The forward pass
/// pays the cast, the backward the rest, once per micro-batch each, and the optimizer step
/// has no master-to-model copy.
#[test]
fn autocast_casts_weights_every_forward_and_gradients_every_backward() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    let params = 5.0e7;
    let at = |zero: u8, dp: u64| Knobs {
        zero,
        precision: Precision::Autocast,
        ..Knobs::data_parallel(dp)
    };
    assert_eq!(grad_accumulation_bytes(params, &at(0, 8)), 18.0 * params);
    assert_eq!(grad_accumulation_bytes(params, &at(1, 8)), 18.0 * params);
    assert_eq!(grad_accumulation_bytes(params, &at(2, 4)), 9.0 * params);
    let cast = rates.memory_seconds(6.0 * params);
    let back = rates.memory_seconds(18.0 * params);
    for m in [1u64, 4] {
        let mut bare = uniform(1, m, Schedule::OneFOneB, 1, 3);
        bare.knobs.precision = Precision::Autocast;
        let mut weighted = bare.clone();
        weighted.blocks[0].ops[0].params = Rational::from_integer(50_000_000.into());
        let a = simulate(&bare, &rates, 8).unwrap();
        let b = simulate(&weighted, &rates, 8).unwrap();
        let extra = b.flush - a.flush;
        let want = 3.0 * m as f64 * (cast + back);
        assert!(
            (extra - want).abs() < 1e-9 * want.max(1.0),
            "m={m}: {extra} vs {want}"
        );
        let chains_a = pass_chains(&bare, &rates, 8);
        let chains_b = pass_chains(&weighted, &rates, 8);
        assert!((chains_b[0].forward.seconds - chains_a[0].forward.seconds - cast).abs() < 1e-12);
        assert!((chains_b[0].backward.seconds - chains_a[0].backward.seconds - back).abs() < 1e-12);
    }
    // The optimizer step: Adam over fp32 weights has no copy into bf16 model weights.
    let held = HeldParams {
        dense: params,
        ..HeldParams::default()
    };
    let bf16 = optimizer_seconds(&held, &Knobs::data_parallel(1), &rates);
    let amp = optimizer_seconds(&held, &at(0, 1), &rates);
    assert!(
        (bf16 - amp - rates.op_seconds(0.0, 6.0 * params, KernelClass::Other, 1)).abs() < 1e-12
    );
}

/// Under sequence parallelism the layer input that the query, key and value projections read
/// whole is gathered again for their backward (Korthikanti et al. 2022 §4.2.3). The gather is
/// issued with the first of them to run its backward (the query projection: the last to run
/// forward). Megatron-LM runs the three as one linear layer (`query_key_value`), whose
/// weight-gradient GEMM waits for the gathered input after the input-gradient GEMM of all
/// three; here that input gradient takes longer than the gather, so nothing waits.
/// Korthikanti's 22B layer at tp 8 on A100s (Table 4's configuration).
#[test]
fn the_sequence_parallel_regather_serves_the_first_backward_reader() {
    let file = std::env::temp_dir().join(format!("symshard-regather-{}.json", std::process::id()));
    Command::cargo_bin("symshard")
        .unwrap()
        .args([
            "timeline",
            "gpt3-175b",
            "--set",
            "L=48",
            "--set",
            "H=6144",
            "--set",
            "NH=64",
            "--set",
            "F=24576",
            "--set",
            "V=51200",
            "--set",
            "S=2048",
            "--set",
            "B=4",
            "--tp",
            "8",
            "--sequence-parallel",
            "--calib",
            "a100-80gb",
            "--trace-detail",
            "op",
            "--trace",
        ])
        .arg(&file)
        .assert()
        .success();
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_file(&file);
    let events: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 0 && e["args"]["layer"] == "layer47")
        .collect();
    let find = |name: &str| {
        events
            .iter()
            .find(|e| e["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no event {name}"))
    };
    let span = |e: &serde_json::Value| {
        let s = e["ts"].as_f64().unwrap();
        (s, s + e["dur"].as_f64().unwrap())
    };
    let gather = span(find("B layer47 all-gather ln1→q_proj (backward)"));
    let q = span(find("B layer47.q_proj "));
    let k = span(find("B layer47.k_proj "));
    // Issued with the query projection's backward, the first of the three.
    assert!((gather.0 - q.0).abs() < 1e-6, "{gather:?} {q:?}");
    assert!(q.1 <= k.0 + 1e-6);
    // The gather ends before the group's input gradients do: one projection's input gradient
    // is shorter than it, the three together are longer, and the projections run back to back.
    let v = span(find("B layer47.v_proj "));
    let half = (v.1 - q.0) / 2.0;
    assert!(gather.1 > q.0 + (q.1 - q.0) / 2.0, "{gather:?} {q:?}");
    assert!(gather.1 < q.0 + half, "{gather:?} {q:?} {v:?}");
    assert!(
        (k.0 - q.1).abs() < 1e-6 && (v.0 - k.1).abs() < 1e-6,
        "{q:?} {k:?} {v:?}"
    );
    // No backward gather is attached to the other readers.
    assert!(!events.iter().any(|e| {
        let n = e["name"].as_str().unwrap();
        n.starts_with("B ") && (n.contains("ln1→k_proj") || n.contains("ln1→v_proj"))
    }));
}

/// `h100-sxm-te` is `h100-sxm` with Transformer Engine's attention: every other line, and so
/// every other number and its source, stays the same as the table it copies.
#[test]
fn the_transformer_engine_table_differs_from_h100_sxm_only_in_attention() {
    let read = |name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("calibration/{name}.yaml")),
        )
        .unwrap()
    };
    let (base, te) = (read("h100-sxm"), read("h100-sxm-te"));
    let body = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| {
                let l = l.trim_start();
                !(l.starts_with('#')
                    || l.starts_with("name:")
                    || l.starts_with("doc:")
                    || l.starts_with("attention:"))
            })
            .map(str::to_string)
            .collect()
    };
    assert_eq!(body(&base), body(&te));
    let attention = |t: &str| {
        t.lines()
            .filter(|l| l.trim_start().starts_with("attention: {"))
            .count()
    };
    assert_eq!((attention(&base), attention(&te)), (1, 1));
    assert!(te.contains("cuDNN's fused attention"));
    let (b, t) = (
        Calibration::resolve("h100-sxm").unwrap(),
        Calibration::resolve("h100-sxm-te").unwrap(),
    );
    assert_eq!(b.achievable_flops(), t.achievable_flops());
}

/// Korthikanti et al. 2022 Table 4's layer (the 22B model at tp 8, micro-batch 4) on A100s,
/// with or without sequence parallelism.
fn table4_plan(sequence_parallel: bool) -> (TimingPlan, Calibration) {
    let mut k = knobs(1, 8, 1, 1, Schedule::OneFOneB, 1);
    k.sequence_parallel = sequence_parallel;
    let set = [
        ("L", 48),
        ("H", 6144),
        ("NH", 64),
        ("F", 24576),
        ("V", 51200),
        ("S", 2048),
        ("B", 4),
    ];
    common::plan_on("gpt3-175b", &set, &k, "a100-80gb")
}

/// Megatron-LM's attention computes the query, key and value with one `ColumnParallelLinear`
/// (`query_key_value`, megatron/model/transformer.py `ParallelAttention`), the cross-attention's
/// key and value with one (`key_value`) and its query with another. The plan marks the
/// operators written for them as one group, and nothing else.
#[test]
fn the_attention_projections_run_as_one_linear_layer() {
    let fused = |model: &str| -> Vec<(String, String)> {
        let (p, _, _) = plan(model, 8, &knobs(1, 2, 1, 1, Schedule::OneFOneB, 1));
        let mut v = Vec::new();
        for b in &p.blocks {
            for (i, o) in b.ops.iter().enumerate() {
                if o.fused_with_next {
                    v.push((o.name.clone(), b.ops[i + 1].name.clone()));
                }
            }
        }
        v.sort();
        v
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        fused("gpt3-125m"),
        vec![pair("k_proj", "q_proj"), pair("v_proj", "k_proj")]
    );
    assert_eq!(
        fused("t5-base"),
        vec![
            pair("cross_v", "cross_k"),
            pair("dec_k", "dec_q"),
            pair("dec_v", "dec_k"),
            pair("enc_k", "enc_q"),
            pair("enc_v", "enc_k"),
        ]
    );
}

/// Megatron-LM's column-parallel backward (megatron/mpu/layers.py,
/// `LinearWithGradAccumulationAndAsyncCommunication.backward`) launches the input gradient's
/// all-reduce (reduce-scatter under sequence parallelism) once the input-gradient GEMM is done,
/// beside the weight-gradient GEMM. For the attention's fused `query_key_value` layer that is
/// halfway through the three projections' backward (each projection's input and weight
/// gradients are equal GEMMs), not halfway through the last one's.
#[test]
fn the_attention_input_gradient_reduction_overlaps_all_three_weight_gradients() {
    for sp in [false, true] {
        let (p, calib) = table4_plan(sp);
        let tl = time_plan(&p, &calib).unwrap();
        let item = p.items.iter().position(|&b| p.blocks[b].layer).unwrap();
        let bi = p.items[item];
        let block = &p.blocks[bi];
        let op = |name: &str| block.ops.iter().position(|o| o.name == name).unwrap();
        let backward: Vec<&Event> = tl
            .sim
            .events
            .iter()
            .filter(|e| e.item == Some(item) && e.pass == Pass::Backward && e.microbatch == Some(0))
            .collect();
        let compute = |k: usize| {
            backward
                .iter()
                .find(|e| matches!(e.what, What::Op { op, recompute: false, .. } if op == k))
                .unwrap()
        };
        let (q, v) = (compute(op("q_proj")), compute(op("v_proj")));
        let reduce = backward
            .iter()
            .find(|e| match e.what {
                What::Comm { step, .. } => matches!(
                    &block.backward[step],
                    Step::AfterDgrad(c) if c.name == "dln1"
                ),
                _ => false,
            })
            .unwrap();
        let want = q.start + (v.end() - q.start) / 2.0;
        assert!(
            (reduce.start - want).abs() < 1e-12,
            "sp {sp}: issued at {} instead of {want}",
            reduce.start
        );
        // It ends before the weight gradients do, so the layernorm's backward starts when the
        // compute stream is free again.
        assert!(reduce.end() < v.end(), "sp {sp}");
    }
}

/// A plan whose stages do not cover its layers is bad input (exit code 2), refused by the
/// simulation itself as well as where plans are read; a schedule that deadlocks would be a
/// fault of symshard's, an internal error (exit code 3), not a usage error.
#[test]
fn a_simulation_failure_says_whether_the_input_or_symshard_is_at_fault() {
    let rates = Rates::of(&Calibration::reference().unwrap());
    let mut plan = uniform(2, 4, Schedule::OneFOneB, 1, 4);
    plan.stages = vec![1, 1];
    let err = simulate(&plan, &rates, 8).unwrap_err();
    assert_eq!(
        err,
        SimError::Plan("the stages do not cover the layer items".into())
    );
    assert_eq!(symshard::Error::from(err).exit_code(), 2);
    let deadlock = symshard::Error::from(SimError::Deadlock);
    assert_eq!(deadlock.exit_code(), 3);
    assert!(deadlock.to_string().contains("deadlocks"), "{deadlock}");
}

/// What `calibrate nccl-tests` writes keeps everything of its base table it does not measure:
/// every shipped table written back as YAML (`to_yaml`) loads as the same device, node size,
/// tiers and link layout (the TDP and a torus or rack-scale topology included).
#[test]
fn every_shipped_table_written_back_loads_as_itself() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration");
    let out = std::env::temp_dir().join(format!("symshard-to-yaml-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let mut tables = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let c = Calibration::resolve(path.to_str().unwrap()).unwrap();
        let written = out.join(path.file_name().unwrap());
        std::fs::write(&written, symshard::timeline::nccl::to_yaml(&c)).unwrap();
        let back = Calibration::resolve(written.to_str().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.display();
        assert_eq!(back.device, c.device, "{name}");
        assert_eq!(back.gpus_per_node, c.gpus_per_node, "{name}");
        assert_eq!(back.tiers, c.tiers, "{name}");
        assert_eq!(back.topology, c.topology, "{name}");
        tables += 1;
    }
    assert!(tables >= 19, "{tables} tables");
    let _ = std::fs::remove_dir_all(&out);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// On random strategies of gpt3-125m, llama3-8b and mixtral-8x7b (GPipe, 1F1B,
    /// interleaved, ZB-H1 or DualPipeV; any recomputation and ZeRO stage; sequence, context and
    /// expert parallelism; bf16, autocast or FP8), the simulator's events add up to the
    /// evaluation: every stage's compute FLOPs (recomputation included), and on some device of
    /// the busiest stage the tensor-parallel bytes of the evaluation's rows (a layer's forward
    /// collectives twice under full recomputation), the context-parallel rings, the
    /// expert-parallel all-to-alls, the point-to-point bytes, the data-parallel gradient
    /// reduction and ZeRO 3's weight gathers.
    #[test]
    fn the_simulated_streams_carry_the_evaluations_totals(
        (model, layers) in proptest::sample::select(
            vec![("gpt3-125m", 12u64), ("llama3-8b", 32), ("mixtral-8x7b", 32)]
        ),
        ep in 1u64..=2,
        dp in 1u64..=2,
        tp in proptest::sample::select(vec![1u64, 2, 4]),
        pp in proptest::sample::select(vec![1u64, 2, 4]),
        per_stage in 1u64..=3,
        schedule in 0usize..5,
        recompute in 0usize..3,
        sp: bool,
        zero in 0u8..=3,
        cp in 1u64..=2,
        precision in 0usize..4,
        fp8_extras: bool,
    ) {
        // Interleaving (two chunks per rank) where pp × 2 divides the layers.
        let (schedule, chunks) = match schedule {
            0 => (Schedule::Gpipe, 1),
            2 if pp > 1 && layers % (2 * pp) == 0 => (Schedule::Interleaved, 2),
            3 if pp > 1 => (Schedule::ZeroBubbleH1, 1),
            4 if pp > 1 && per_stage >= 2 && layers % (2 * pp) == 0 => (Schedule::DualPipeV, 1),
            _ => (Schedule::OneFOneB, 1),
        };
        let mut k = knobs(dp, tp, pp, pp * per_stage, schedule, chunks);
        k.cp = cp;
        // Expert parallelism for the mixture of experts, over its dp·cp ranks.
        k.ep = if model == "mixtral-8x7b" && dp * cp >= 2 { ep } else { 1 };
        // bf16, fp32 weights under autocast, or an FP8 recipe (with FP8 parameters where ZeRO
        // gathers them, and FP8 dispatch where experts are spread).
        k.precision = [Precision::Bf16, Precision::Autocast, Precision::Fp8, Precision::Fp8Block][precision];
        if precision >= 2 && fp8_extras {
            k.fp8_params = zero >= 1 && dp > 1;
            k.fp8_dispatch = k.ep > 1;
        }
        k.recompute = [Recompute::None, Recompute::Selective, Recompute::Full][recompute];
        k.sequence_parallel = sp && tp > 1;
        k.zero = if dp > 1 { zero } else { 0 };
        // 8 samples per micro-batch and data-parallel rank.
        let batch = (8 * dp * k.microbatches) as i64;
        let (p, e, calib) = plan(model, batch, &k);
        let tl = time_plan(&p, &calib).unwrap();
        let per_device = |s: Stream, f: &dyn Fn(&Event) -> f64| per_device(&tl, &k, s, f);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        let flops = per_device(Stream::Compute, &|ev| ev.flops);
        for (s, st) in e.stages.iter().enumerate() {
            let want = st.flops.to_f64().unwrap();
            proptest::prop_assert!(close(flops[s], want), "{}: stage {}: {} vs {}", k, s, flops[s], want);
        }
        // Tensor-parallel collectives, context-parallel rings and expert-parallel all-to-alls,
        // each on its own stream.
        for (axis, stream) in [
            (AxisKind::Tp, Stream::TpComm),
            (AxisKind::Cp, Stream::CpComm),
            (AxisKind::Ep, Stream::EpComm),
        ] {
            let want = axis_bytes(&e, axis);
            let sent = per_device(stream, &|ev| ev.bytes);
            proptest::prop_assert!(
                sent.iter().any(|&b| close(b, want)),
                "{}: {:?} bytes per device {:?}, the evaluation's {}", k, axis, sent, want
            );
        }
        if pp > 1 {
            let want = e.p2p_bytes.to_f64().unwrap();
            let sent = per_device(Stream::P2p, &|ev| ev.bytes);
            proptest::prop_assert!(sent.iter().any(|&b| close(b, want)), "{}: {:?} vs {}", k, sent, want);
        }
        // The data-parallel gradient reduction (an all-reduce, or ZeRO's reduce-scatters) and
        // ZeRO 3's weight gathers, as the evaluation lists them.
        let (mut reduce, mut gather) = (0.0, 0.0);
        for r in e.comm.iter().filter(|r| r.axis == AxisKind::Dp && r.gradient) {
            let b = r.bytes.to_f64().unwrap() * r.count as f64;
            if r.collective == CollectiveKind::AllGather {
                gather += b;
            } else {
                reduce += b;
            }
        }
        let reduced = per_device(Stream::DpComm, &|ev| {
            if matches!(ev.what, What::Grad { .. }) { ev.bytes } else { 0.0 }
        });
        proptest::prop_assert!(
            reduced.iter().any(|&b| close(b, reduce)),
            "{}: gradient bytes per device {:?}, the evaluation's {}", k, reduced, reduce
        );
        if k.zero == 3 && k.dp > 1 {
            let gathered = per_device(Stream::DpComm, &|ev| {
                if ev.what == What::ParamGather { ev.bytes } else { 0.0 }
            });
            proptest::prop_assert!(
                gathered.iter().any(|&b| close(b, gather)),
                "{}: gathered bytes per device {:?}, the evaluation's {}", k, gathered, gather
            );
        }
    }
}
