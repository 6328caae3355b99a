//! `symshard calibrate`: a GEMM sweep becomes the matmul efficiency curve it was generated
//! from, nccl-tests logs of any collective become bus-bandwidth curves, the written tables load
//! and time as expected, and bad input fails with file:line and exit code 2. The fixtures are
//! synthetic (made-up curves, see the generator scripts beside them), never measurements.

mod common;

use assert_cmd::Command;
use num_traits::ToPrimitive;
use std::path::{Path, PathBuf};
use symshard::calib::gemm::{calibrate, efficiency_points, parse_sweep};
use symshard::calib::{Calibration, MachineRef};
use symshard::model::ModelLoader;
use symshard::parallel::Layout;
use symshard::strategy::{AxisKind, MeshAxis, Tier};
use symshard::strategy::{Knobs, Recompute, Schedule};
use symshard::sym::Rational;
use symshard::timeline::nccl::{busbw_point, parse_log, parse_log_as, NcclLog, NcclTest};
use symshard::timeline::{bus_factor, plan_strategy, time_plan, KernelClass, Rates};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// A scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("symshard-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Piecewise linear in log10(size), flat beyond the ends: how the generators' made-up curves
/// and the tables' curves are read.
fn log_linear(points: &[(f64, f64)], size: f64) -> f64 {
    let lx = size.log10();
    let (first, last) = (points[0], points[points.len() - 1]);
    if lx <= first.0.log10() {
        return first.1;
    }
    for w in points.windows(2) {
        let (x0, x1) = (w[0].0.log10(), w[1].0.log10());
        if lx <= x1 {
            return w[0].1 + (w[1].1 - w[0].1) * (lx - x0) / (x1 - x0);
        }
    }
    last.1
}

/// `EFFICIENCY` of tests/fixtures/gemm/generate.py.
const GEMM_CURVE: [(f64, f64); 8] = [
    (1e6, 0.0015),
    (1e7, 0.015),
    (1e8, 0.12),
    (1e9, 0.40),
    (1e10, 0.62),
    (1e11, 0.74),
    (1e12, 0.79),
    (1e13, 0.80),
];

/// `BUSBW` of tests/fixtures/nccl/generate_all_gather.py.
const ALL_GATHER_BUSBW: [(f64, f64); 4] = [
    (1048576.0, 120e9),
    (16777216.0, 260e9),
    (268435456.0, 330e9),
    (4294967296.0, 345e9),
];

/// The table `c` times each bandwidth-bound row of `log` (those that gave a curve point) as
/// the log measured it, to the rounding of the written numbers.
fn assert_reproduces(log: &NcclLog, c: &Calibration) {
    let rates = Rates::of(c);
    let kind = log.test.collective();
    let axis = MeshAxis {
        kind: AxisKind::Dp,
        size: log.ranks,
        stride: 1,
        tier: if log.hosts > 1 {
            Tier::Inter
        } else {
            Tier::Intra
        },
        per_node: log.ranks / log.hosts,
    };
    let mut checked = 0;
    for row in &log.results {
        if busbw_point(log, row, &rates).is_none() {
            continue;
        }
        let wire = bus_factor(kind, log.ranks) * row.bytes;
        let t = rates.collective_seconds(kind, wire, &axis);
        assert!(
            (t / row.seconds - 1.0).abs() < 1e-3,
            "{}:{}: timed {t:e} s, measured {:e} s",
            log.file.display(),
            row.line,
            row.seconds
        );
        checked += 1;
    }
    assert!(checked >= 4, "{checked} rows checked");
}

#[test]
fn a_synthetic_gemm_sweep_gives_back_its_curve() {
    let path = fixture("gemm/synthetic_h100_sweep.csv");
    let sweep = parse_sweep(&path, &read(&path)).unwrap();
    assert_eq!((sweep.rows.len(), sweep.skipped), (243, 7));
    assert_eq!(sweep.date.as_deref(), Some("2025-01-01"));
    let base = Calibration::reference().unwrap();
    let binned = efficiency_points(&sweep, 989e12).unwrap();
    assert!(binned.points.len() <= 40);
    assert!(binned.points.windows(2).all(|w| w[0].flops < w[1].flops));
    let c = calibrate(&sweep, &base, "swept").unwrap();
    let m = &c.device.efficiency.matmul;
    assert!(!m.constant);
    assert!(m
        .source
        .starts_with("measured: GEMM sweep synthetic_h100_sweep.csv (243 rows, 2025-01-01"));
    assert!(m.max() <= Rational::from_integer(1.into()));
    // Every size the sweep spans reads back the generating curve: within the ±3 % noise plus
    // what interpolating between quarter-decade points costs near the curve's kinks.
    let got = m.to_f64();
    let (lo, hi) = (2.0 * 512.0 * 1024.0 * 1024.0, 2.0 * 16384f64.powi(3));
    let mut worst: f64 = 0.0;
    for i in 0..=100 {
        let size = lo * (hi / lo).powf(i as f64 / 100.0);
        let want = log_linear(&GEMM_CURVE, size);
        let err = (got.at(size) / want - 1.0).abs();
        worst = worst.max(err);
        assert!(err < 0.12, "at {size:e} FLOPs: {} vs {want}", got.at(size));
    }
    // At the points themselves the median of noisy rows is within the noise.
    for p in &binned.points {
        let want = log_linear(&GEMM_CURVE, p.flops as f64);
        assert!(
            (p.efficiency / want - 1.0).abs() <= 0.031,
            "{p:?} vs {want}"
        );
    }
    assert!(worst > 0.0);
    // A header after a byte-order mark, extra columns and blank lines are fine.
    let text = "\u{feff}m,n,k,seconds,note\n\n4096,4096,4096,2e-4,x\n";
    let s = parse_sweep(Path::new("bom.csv"), text).unwrap();
    assert_eq!(s.rows.len(), 1);
}

/// `tools/gemm_sweep.py --soak` writes how long the GPU ran before the sweep and its clocks; the
/// soak reaches the table's source, and comment lines after the rows are comments too.
#[test]
fn a_soaked_sweep_says_so_in_the_tables_source() {
    let text =
        "# gpu: H100\n# date: 2026-12-02\n# soak: 120 s of 8192x8192x8192 GEMMs before the sweep\n\
                # before the soak: SM clock 1980 MHz; after: SM clock 1755 MHz\n\
                m,n,k,dtype,seconds\n8192,8192,8192,bf16,1.4e-3\n4096,4096,4096,bf16,2e-4\n\
                # at the end: SM clock 1755 MHz\n";
    let sweep = parse_sweep(Path::new("soaked.csv"), text).unwrap();
    assert_eq!(sweep.rows.len(), 2);
    assert_eq!(
        sweep.soak.as_deref(),
        Some("120 s of 8192x8192x8192 GEMMs before the sweep")
    );
    let c = calibrate(&sweep, &Calibration::reference().unwrap(), "soaked").unwrap();
    let source = &c.device.efficiency.matmul.source;
    assert!(
        source.contains("2026-12-02, H100, soak: 120 s of 8192x8192x8192 GEMMs"),
        "{source}"
    );
    // Without the comment, nothing is said.
    let plain = parse_sweep(
        Path::new("plain.csv"),
        "m,n,k,seconds\n4096,4096,4096,2e-4\n",
    );
    assert_eq!(plain.unwrap().soak, None);
}

fn knobs(microbatches: u64) -> Knobs {
    Knobs {
        dp: 1,
        tp: 1,
        pp: 1,
        microbatches,
        schedule: Schedule::OneFOneB,
        chunks: 1,
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

/// Busy compute seconds of gpt3-125m at batch 8 on one device, in `microbatches` pieces.
fn compute_seconds(calib: &Calibration, microbatches: u64) -> f64 {
    let loader = ModelLoader::embedded().unwrap();
    let m = loader.resolve("gpt3-125m").unwrap();
    let mut values = m.values.clone();
    values.insert("B".into(), Rational::from_integer(8.into()));
    let (plan, _) = plan_strategy(
        &m,
        &values,
        &knobs(microbatches),
        &Layout::default(),
        MachineRef::whole(calib),
    )
    .unwrap();
    let t = time_plan(&plan, calib).unwrap();
    t.summary.devices.iter().map(|d| d.busy.compute).sum()
}

#[test]
fn a_swept_table_loads_and_times_small_gemms_slower() {
    let dir = scratch("gemm");
    let out = dir.join("swept-h100.yaml");
    let run = Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "gemm"])
        .arg(fixture("gemm/synthetic_h100_sweep.csv"))
        .args(["--base", "dgx-h100", "-o"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&run.get_output().stdout).to_string();
    assert!(stdout.contains("243 rows"), "{stdout}");
    let swept = Calibration::resolve(out.to_str().unwrap()).unwrap();
    let base = Calibration::reference().unwrap();
    assert_eq!(swept.name, "swept-h100");
    assert_eq!(swept.tiers, base.tiers);
    assert_eq!(swept.device.peak_flops, base.device.peak_flops);
    assert!(!swept.device.efficiency.matmul.constant);
    // The measured curve already holds the sweep's wave and tile quantization.
    assert!(base.device.gemm_tiling.is_some() && swept.device.gemm_tiling.is_none());
    // The base table assumes 80 % for every GEMM; the sweep says smaller ones reach less.
    let (new, old) = (Rates::of(&swept), Rates::of(&base));
    let gemm = |r: &Rates, flops: f64| r.op_seconds(flops, 0.0, KernelClass::Matmul, 1);
    // (Each kernel also pays the table's fixed 2 µs, which the sweep leaves alone.)
    let small = gemm(&new, 1e10) / gemm(&old, 1e10);
    let large = gemm(&new, 5e12) / gemm(&old, 5e12);
    assert!(small > 1.2 && (large - 1.0).abs() < 0.03, "{small} {large}");
    // So one sample per micro-batch (GEMMs 8× smaller) loses more than the whole batch at
    // once, against the base's one constant (its tiling left out, as the sweep replaces it);
    // memory-bound kernels (most of gpt3-125m's eager attention) are unchanged.
    let mut plain = base.clone();
    plain.device.gemm_tiling = None;
    let slowdown = |mb: u64| compute_seconds(&swept, mb) / compute_seconds(&plain, mb);
    let (whole, split) = (slowdown(1), slowdown(8));
    assert!(whole > 1.0, "{whole}");
    assert!(
        split - 1.0 > 2.0 * (whole - 1.0),
        "whole batch {whole}, split {split}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_sweeps_fail_with_file_and_line() {
    let dir = scratch("gemm-bad");
    let cases = [
        (
            "missing.csv",
            "# date: 2025-01-01\nm,n,secs\n1,2,3\n",
            2,
            "`k`",
        ),
        ("word.csv", "m,n,k,seconds\n512,abc,512,1e-3\n", 2, "`n`"),
        (
            "zero.csv",
            "m,n,k,seconds\n512,512,512,1e-3\n512,512,512,0\n",
            3,
            "positive",
        ),
        ("nan.csv", "m,n,k,seconds\n512,512,512,fast\n", 2, "number"),
        ("short.csv", "m,n,k,seconds\n512,512,512\n", 2, "fields"),
        (
            "fast.csv",
            "m,n,k,seconds\n16384,16384,16384,1e-6\n",
            2,
            "peak",
        ),
        ("empty.csv", "", 1, "empty"),
        (
            "fp32.csv",
            "m,n,k,dtype,seconds\n512,512,512,fp32,1\n",
            2,
            "no bf16",
        ),
    ];
    for (name, text, line, says) in cases {
        let csv = dir.join(name);
        std::fs::write(&csv, text).unwrap();
        let err = parse_sweep(&csv, text)
            .and_then(|s| calibrate(&s, &Calibration::reference().unwrap(), "x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("{name}:{line}:")), "{err}");
        assert!(err.contains(says), "{name}: {err}");
        let o = Command::cargo_bin("symshard")
            .unwrap()
            .args(["calibrate", "gemm"])
            .arg(&csv)
            .arg("-o")
            .arg(dir.join("out.yaml"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(&format!("{name}:{line}:")), "{stderr}");
    }
    assert!(!dir.join("out.yaml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_all_gather_log_gives_an_all_gather_curve() {
    let ag = fixture("nccl/all_gather_perf_1node_8gpu.txt");
    let ar = fixture("nccl/all_reduce_perf_1node_8gpu.txt");
    let log = parse_log(&ag, &read(&ag)).unwrap();
    assert_eq!(
        (log.test, log.ranks, log.hosts),
        (NcclTest::AllGather, 8, 1)
    );
    let dir = scratch("nccl-ag");
    let out = dir.join("measured.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests"])
        .arg(&ar)
        .arg(&ag)
        .args(["--base", "dgx-h100", "-o"])
        .arg(&out)
        .assert()
        .success();
    let c = Calibration::resolve(out.to_str().unwrap()).unwrap();
    // α comes from the all-reduce fit (the all-gather log does not enter it).
    let intra = &c.tiers.intra;
    assert!(intra
        .latency
        .source
        .contains("all_reduce_perf_1node_8gpu.txt"));
    assert!(!intra.latency.source.contains("all_gather"));
    let curve = &intra.busbw["all-gather"];
    assert!(!curve.constant);
    assert!(curve
        .source
        .starts_with("measured: nccl-tests all_gather_perf"));
    // The generating curve comes back wherever rows are bandwidth-bound (4 MiB and up), within
    // the ±2 % noise and what the fitted α (1.8 µs ± its error) leaves in.
    let got = curve.to_f64();
    for (size, _) in &curve.points {
        let size = size.to_f64().unwrap();
        let want = log_linear(&ALL_GATHER_BUSBW, size);
        assert!(
            (got.at(size) / want - 1.0).abs() < 0.05,
            "at {size}: {} vs {want}",
            got.at(size)
        );
    }
    assert!(curve.points.len() >= 5);
    assert_reproduces(&log, &c);
    // The all-reduce log gives its own curve, near the β it was generated with (362 GB/s).
    let ar_curve = intra.busbw["all-reduce"].to_f64();
    assert!((ar_curve.at(2147483648.0) / 362e9 - 1.0).abs() < 0.05);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_multi_host_log_gives_the_inter_node_curve() {
    let dir = scratch("nccl-inter");
    let out = dir.join("measured.yaml");
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests"])
        .arg(fixture("nccl/all_reduce_perf_1node_8gpu.txt"))
        .arg(fixture("nccl/all_reduce_perf_2node_16gpu.txt"))
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    let c = Calibration::resolve(out.to_str().unwrap()).unwrap();
    // Generated with β = 44 GB/s across nodes after the intra-node halves; each point carries
    // its row's noise, magnified by the intra-node share of the time, so only the mean is
    // held to it.
    let curve = &c.tiers.inter.busbw["all-reduce"];
    let values: Vec<f64> = curve
        .points
        .iter()
        .map(|(_, y)| y.to_f64().unwrap())
        .collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    assert!(
        values.len() >= 4 && (mean / 44e9 - 1.0).abs() < 0.08,
        "{values:?}"
    );
    // The table times every bandwidth-bound row of both logs as measured.
    for name in [
        "all_reduce_perf_1node_8gpu.txt",
        "all_reduce_perf_2node_16gpu.txt",
    ] {
        let path = fixture(&format!("nccl/{name}"));
        assert_reproduces(&parse_log(&path, &read(&path)).unwrap(), &c);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_log_of_another_test_is_caught() {
    let ag = fixture("nccl/all_gather_perf_1node_8gpu.txt");
    let text = read(&ag);
    // The log names its test: --collective may not say otherwise.
    let err = parse_log_as(&ag, &text, Some(NcclTest::AllReduce))
        .unwrap_err()
        .to_string();
    assert!(err.contains("all_gather_perf_1node_8gpu.txt:4:"), "{err}");
    // A log that does not name it is taken as all-reduce, whose bus factor the printed busbw
    // contradicts; --collective fixes it.
    let nameless: String = text
        .lines()
        .filter(|l| !l.contains("test starting"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = scratch("nccl-nameless");
    let file = dir.join("nameless.txt");
    std::fs::write(&file, &nameless).unwrap();
    let o = Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests"])
        .arg(&file)
        .arg("-o")
        .arg(dir.join("out.yaml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("nameless.txt:") && stderr.contains("busbw"),
        "{stderr}"
    );
    Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "nccl-tests", "--collective", "all-gather"])
        .arg(&file)
        .arg("-o")
        .arg(dir.join("out.yaml"))
        .assert()
        .success();
    let c = Calibration::resolve(dir.join("out.yaml").to_str().unwrap()).unwrap();
    assert!(c.tiers.intra.busbw.contains_key("all-gather"));
    // No all_reduce_perf log: α and β stay the base table's.
    let base = Calibration::reference().unwrap();
    assert_eq!(c.tiers.intra.latency, base.tiers.intra.latency);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The A100 tables' matmul curve is no hand-picked number: it is what `symshard calibrate gemm`
/// makes of the published A100 sweep shipped beside them (bitsandbytes'
/// benchmarking/switchback/info_a100_py2.jsonl, Wortsman et al. 2023, arXiv:2304.13013, as
/// `calibration/sweeps/a100-switchback.csv`), point for point, and without the tiling model the
/// measured rows already contain. Its median row sits well below the best-shape maximum the
/// tables used before (87 % of peak, S. Bekman's Machine Learning Engineering), which its best
/// rows match.
#[test]
fn the_a100_tables_carry_the_shipped_sweeps_curve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("calibration/sweeps/a100-switchback.csv");
    let sweep = parse_sweep(&file, &std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(sweep.rows.len(), 180);
    let peak = 312e12;
    let mut eff: Vec<f64> = sweep
        .rows
        .iter()
        .map(|r| r.flops() / r.seconds / peak)
        .collect();
    eff.sort_by(f64::total_cmp);
    let (median, best) = (eff[eff.len() / 2], eff[eff.len() - 1]);
    assert!((0.76..0.80).contains(&median), "{median}");
    assert!((0.86..0.90).contains(&best), "{best}");
    for name in ["a100-80gb", "a100-40gb"] {
        let table = Calibration::resolve(name).unwrap();
        let swept = calibrate(&sweep, &table, name).unwrap();
        assert_eq!(
            table.device.efficiency.matmul.points, swept.device.efficiency.matmul.points,
            "{name}"
        );
        assert!(!table.device.efficiency.matmul.constant);
        assert!(table.device.gemm_tiling.is_none(), "{name}");
        assert!(
            table
                .device
                .efficiency
                .matmul
                .source
                .contains("info_a100_py2.jsonl"),
            "{name}"
        );
    }
}

/// The H800 table's FP8 GEMM curve is what `symshard calibrate gemm` makes of the published
/// DeepGEMM benchmark shipped beside it (github.com/deepseek-ai/DeepGEMM, README.md at 327ec92:
/// 28 block-scaled FP8 GEMMs on H800 SXM5, 206 to 1,520 TFLOPS), point for point; its bf16
/// curve stays the table's own. The rows keep the published rates: the fastest is 1,520 TFLOP/s
/// (M = 4096, N = 7168, K = 16384) and the slowest 206 (M = 64, N = 2112, K = 7168).
#[test]
fn the_h800_fp8_curve_is_the_shipped_deepgemm_benchmark() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("calibration/sweeps/h800-deepgemm.csv");
    let sweep = parse_sweep(&file, &std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!((sweep.rows.len(), sweep.fp8_rows.len()), (0, 28));
    let tflops = |r: &symshard::calib::gemm::GemmRow| r.flops() / r.seconds / 1e12;
    let rates: Vec<f64> = sweep.fp8_rows.iter().map(tflops).collect();
    let best = rates.iter().cloned().fold(f64::MIN, f64::max);
    let worst = rates.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        (best - 1520.0).abs() < 1e-6 && (worst - 206.0).abs() < 1e-6,
        "{best} {worst}"
    );
    let table = Calibration::resolve("h800").unwrap();
    let swept = calibrate(&sweep, &table, "h800").unwrap();
    let fp8 = table.device.efficiency.matmul_fp8.as_ref().unwrap();
    assert_eq!(
        fp8.points,
        swept.device.efficiency.matmul_fp8.unwrap().points
    );
    assert!(fp8.source.contains("DeepGEMM") && fp8.source.contains("327ec92"));
    assert_eq!(
        table.device.efficiency.matmul,
        swept.device.efficiency.matmul
    );
}

/// Every shipped table (`calibration/*.yaml`) loads by its name, is named as its file, and
/// every number in it carries a non-empty `source`.
#[test]
fn every_shipped_table_loads_and_sources_every_number() {
    fn walk(v: &serde_yaml::Value, at: &str, missing: &mut Vec<String>) {
        match v {
            serde_yaml::Value::Mapping(m) => {
                let has = |k: &str| m.contains_key(serde_yaml::Value::from(k));
                if has("value") || has("points") {
                    let ok = m
                        .get(serde_yaml::Value::from("source"))
                        .and_then(|s| s.as_str())
                        .is_some_and(|s| !s.trim().is_empty());
                    if !ok {
                        missing.push(at.to_string());
                    }
                }
                for (k, x) in m {
                    let key = k.as_str().unwrap_or("?");
                    walk(x, &format!("{at}.{key}"), missing);
                }
            }
            serde_yaml::Value::Sequence(s) => {
                for (i, x) in s.iter().enumerate() {
                    walk(x, &format!("{at}[{i}]"), missing);
                }
            }
            _ => {}
        }
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let c = Calibration::resolve(&stem).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(c.name, stem, "{}", path.display());
        let value: serde_yaml::Value = serde_yaml::from_str(&read(&path)).unwrap();
        let mut missing = Vec::new();
        walk(&value, &stem, &mut missing);
        assert!(missing.is_empty(), "numbers without a source: {missing:?}");
        names.push(stem);
    }
    // The tables the README lists, the V100 DGX-2H and the rack-scale NVLink domains among them.
    for want in common::SHIPPED_TABLES {
        assert!(names.iter().any(|n| n == want), "{want}: {names:?}");
    }
}

/// FP8 rows of a sweep (`tools/gemm_sweep.py --dtype fp8`) give their own curve, as fractions
/// of the FP8 peak, which times FP8 GEMMs in place of the bf16 curve and is never tiled again;
/// the table it is written to loads back with it. The rows are made up: a 16-bit GEMM at 0.8 of
/// the H100's 989 TFLOP/s bf16 peak and an FP8 one at 0.6 of its 1,979 TFLOP/s FP8 peak.
#[test]
fn fp8_rows_of_a_sweep_give_the_fp8_curve() {
    let base = Calibration::resolve("dgx-h100").unwrap();
    let flops = 2.0 * 8192f64.powi(3);
    let text = format!(
        "# gpu: H100\nm,n,k,dtype,seconds\n8192,8192,8192,bf16,{:e}\n8192,8192,8192,fp8,{:e}\n\
         8192,8192,8192,int8,1e-3\n",
        flops / (0.8 * 989e12),
        flops / (0.6 * 1979e12)
    );
    let sweep = parse_sweep(Path::new("mixed.csv"), &text).unwrap();
    assert_eq!(
        (sweep.rows.len(), sweep.fp8_rows.len(), sweep.skipped),
        (1, 1, 1)
    );
    let c = calibrate(&sweep, &base, "mixed").unwrap();
    let fp8 = c.device.efficiency.matmul_fp8.as_ref().unwrap();
    let at = |curve: &symshard::calib::Curve| curve.to_f64().at(flops);
    assert!((at(fp8) - 0.6).abs() < 1e-3, "{}", at(fp8));
    assert!((at(&c.device.efficiency.matmul) - 0.8).abs() < 1e-3);
    assert!(
        fp8.source.contains("the fp8 peak 1.979e15"),
        "{}",
        fp8.source
    );
    assert!(c
        .doc
        .ends_with("Matmul efficiency and FP8 matmul efficiency measured with a GEMM sweep."));
    // The FP8 GEMM is timed on its own curve: the FP8 peak times 0.6, not times 0.8.
    let r = Rates::of(&c);
    let t = r.gemm_seconds(flops, 0.0, KernelClass::Fp8Matmul, 1, &[]) - r.kernel_overhead;
    assert!(
        (t / (flops / (0.6 * 1979e12) * r.pace) - 1.0).abs() < 1e-3,
        "{t}"
    );
    // Without the curve it is the bf16 curve at the FP8 peak, as before.
    let mut plain = c.clone();
    plain.device.efficiency.matmul_fp8 = None;
    let r = Rates::of(&plain);
    let t = r.gemm_seconds(flops, 0.0, KernelClass::Fp8Matmul, 1, &[]) - r.kernel_overhead;
    assert!(
        (t / (flops / (0.8 * 1979e12) * r.pace) - 1.0).abs() < 1e-3,
        "{t}"
    );
    // An FP8-only sweep keeps the base's bf16 curve and tiling.
    let only = parse_sweep(
        Path::new("fp8.csv"),
        &format!(
            "m,n,k,dtype,seconds\n8192,8192,8192,fp8,{:e}\n",
            flops / 1e15
        ),
    )
    .unwrap();
    let c8 = calibrate(&only, &base, "fp8").unwrap();
    assert_eq!(c8.device.efficiency.matmul, base.device.efficiency.matmul);
    assert_eq!(c8.device.gemm_tiling, base.device.gemm_tiling);
    // A base with no FP8 peak cannot take FP8 rows.
    let a100 = Calibration::resolve("a100-80gb").unwrap();
    let err = calibrate(&only, &a100, "x").unwrap_err().to_string();
    assert!(err.contains("has no fp8 peak"), "{err}");
    // Written and read back through the command line.
    let dir = scratch("fp8-sweep");
    let csv = dir.join("mixed.csv");
    std::fs::write(&csv, &text).unwrap();
    let out = dir.join("mixed.yaml");
    let o = Command::cargo_bin("symshard")
        .unwrap()
        .args(["calibrate", "gemm", "--base", "dgx-h100", "-o"])
        .arg(&out)
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("fp8 matmul efficiency: 1 points from 1 rows"),
        "{stdout}"
    );
    let loaded = Calibration::resolve(out.to_str().unwrap()).unwrap();
    assert_eq!(loaded.device.efficiency.matmul_fp8.as_ref(), Some(fp8));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The H200 measurements shipped in `calibration/sweeps/` (bf16 and FP8 GEMM sweeps and memory
/// copies, measured 2026-12-04 with `tools/device_checks.sh`) are what `h200-sxm`'s `measured`
/// entries say they are, and calibrate into curves: FP8 reaches a smaller share of its peak
/// than bf16 of its own.
#[test]
fn the_h200_measurements_match_the_table_that_cites_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sweeps = root.join("calibration/sweeps");
    let table = Calibration::resolve("h200-sxm").unwrap();
    let measured = |key: &str| table.device.measured[key].value.to_f64().unwrap();
    let bf16 = sweeps.join("h200-sxm-2026-12-04-bf16.csv");
    let fp8 = sweeps.join("h200-sxm-2026-12-04-fp8.csv");
    let b = parse_sweep(&bf16, &read(&bf16)).unwrap();
    let f = parse_sweep(&fp8, &read(&fp8)).unwrap();
    assert_eq!((b.rows.len(), b.fp8_rows.len()), (1000, 0));
    assert_eq!((f.rows.len(), f.fp8_rows.len()), (0, 900));
    assert!(b.soak.is_some());
    // The median rate of the GEMMs with every size at least 4096.
    let median_rate = |rows: &[symshard::calib::gemm::GemmRow]| {
        let mut r: Vec<f64> = rows
            .iter()
            .filter(|g| g.m.min(g.n).min(g.k) >= 4096)
            .map(|g| g.flops() / g.seconds)
            .collect();
        r.sort_by(f64::total_cmp);
        assert_eq!(r.len(), 75);
        r[r.len() / 2]
    };
    for (got, key) in [
        (median_rate(&b.rows), "bf16_gemm"),
        (median_rate(&f.fp8_rows), "fp8_gemm"),
    ] {
        assert!((got / measured(key) - 1.0).abs() < 1e-3, "{key}: {got:e}");
    }
    let copy = read(&sweeps.join("h200-sxm-2026-12-04-copy.csv"));
    let rate = |kind: &str| -> f64 {
        copy.lines()
            .rfind(|l| l.starts_with(&format!("{kind},")))
            .and_then(|l| l.rsplit(',').next())
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!((rate("device") / measured("hbm_copy") - 1.0).abs() < 1e-3);
    assert!((rate("host-to-device") / measured("host_to_device") - 1.0).abs() < 1e-3);
    // Both sweeps calibrate, one after the other, into the two curves.
    let once = calibrate(&b, &table, "h200-measured").unwrap();
    let both = calibrate(&f, &once, "h200-measured").unwrap();
    let plateau = both.device.efficiency.matmul.to_f64().at(1e12);
    let plateau8 = both
        .device
        .efficiency
        .matmul_fp8
        .as_ref()
        .unwrap()
        .to_f64()
        .at(1e12);
    assert!((0.60..0.72).contains(&plateau), "{plateau}");
    assert!((0.55..plateau).contains(&plateau8), "{plateau8}");
}
