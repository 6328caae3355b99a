//! Calibrating link tiers from nccl-tests `all_reduce_perf` logs: per tier, the latency α and
//! the bandwidth β of the α–β model the timeline uses, fitted by least squares on
//! `time = α·steps + bytes·factor/β` (ring: `steps = 2(n−1)`, `factor = 2(n−1)/n`). A log whose
//! ranks sit on one host measures the intra-node tier; one spanning hosts the inter-node tier,
//! fitted on what remains after the intra-node halves of the hierarchical all-reduce.

use crate::calib::{parse_exact, Calibration, Curve, Sourced};
use crate::error::{Error, Result};
use crate::sym::Rational;
use num_traits::{One, ToPrimitive};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One parsed `all_reduce_perf` log.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclLog {
    /// The file.
    pub file: PathBuf,
    /// Ranks.
    pub ranks: u64,
    /// Hosts the ranks run on.
    pub hosts: u64,
    /// (bytes, out-of-place seconds) per row.
    pub rows: Vec<(f64, f64)>,
}

/// Parses an `all_reduce_perf` log.
pub fn parse_log(file: &Path, text: &str) -> Result<NcclLog> {
    let mut hosts = BTreeSet::new();
    let mut ranks = 0u64;
    let mut time_col = 5usize;
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix('#') {
            let words: Vec<&str> = rest.split_whitespace().collect();
            if words.first() == Some(&"Rank") {
                ranks += 1;
                if let Some(i) = words.iter().position(|w| *w == "on") {
                    if let Some(h) = words.get(i + 1) {
                        hosts.insert(h.to_string());
                    }
                }
            } else if words.first() == Some(&"size") {
                if let Some(i) = words.iter().position(|w| *w == "time") {
                    time_col = i;
                }
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let bad = |what: &str| {
            Error::at(
                file,
                n + 1,
                1,
                format!("{what}: expected `size count type redop root time algbw busbw …`"),
            )
        };
        let size: f64 = words[0]
            .parse::<u64>()
            .map_err(|_| bad("not a result row"))? as f64;
        let time: f64 = words
            .get(time_col)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("no time column"))?;
        if !(time.is_finite() && time > 0.0) {
            return Err(bad("time must be positive"));
        }
        rows.push((size, time * 1e-6));
    }
    if ranks < 2 {
        return Err(Error::at(
            file,
            1,
            1,
            "no `#  Rank N … on HOST` lines naming two or more ranks: is this all_reduce_perf output?",
        ));
    }
    if rows.len() < 2 {
        return Err(Error::at(file, 1, 1, "fewer than two result rows to fit"));
    }
    let h = hosts.len().max(1) as u64;
    if !ranks.is_multiple_of(h) {
        return Err(Error::at(
            file,
            1,
            1,
            format!("{ranks} ranks do not spread evenly over {h} hosts"),
        ));
    }
    Ok(NcclLog {
        file: file.to_path_buf(),
        ranks,
        hosts: h,
        rows,
    })
}

/// A fitted tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Seconds per step.
    pub latency: f64,
    /// Achievable bytes per second.
    pub bandwidth: f64,
    /// Rows fitted.
    pub rows: usize,
}

/// Least squares of `t = α·x + γ·y` minimising relative error, with `α ≥ 0`; returns (α, γ).
pub fn least_squares(rows: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let (mut sxx, mut sxy, mut syy, mut sxt, mut syt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y, t) in rows {
        let w = 1.0 / (t * t);
        sxx += w * x * x;
        sxy += w * x * y;
        syy += w * y * y;
        sxt += w * x * t;
        syt += w * y * t;
    }
    let det = sxx * syy - sxy * sxy;
    let (mut a, mut g) = if det.abs() > 0.0 {
        ((sxt * syy - syt * sxy) / det, (sxx * syt - sxy * sxt) / det)
    } else {
        (0.0, -1.0)
    };
    if a < 0.0 || !a.is_finite() {
        a = 0.0;
        g = syt / syy;
    }
    (g > 0.0 && g.is_finite()).then_some((a, g))
}

fn fit_rows(rows: &[(f64, f64, f64)], what: &str) -> Result<Fit> {
    let (a, g) = least_squares(rows).ok_or_else(|| {
        Error::Usage(format!(
            "cannot fit the {what} tier: the times do not grow with the message size"
        ))
    })?;
    Ok(Fit {
        latency: a,
        bandwidth: 1.0 / g,
        rows: rows.len(),
    })
}

/// Fits the intra-node tier on single-host logs, then the inter-node tier on multi-host logs
/// (using the intra-node fit, or `base`'s intra-node rates when no single-host log is given).
pub fn fit(logs: &[NcclLog], base: &Calibration) -> Result<(Option<Fit>, Option<Fit>)> {
    let mut intra_rows = Vec::new();
    for l in logs.iter().filter(|l| l.hosts == 1) {
        let n = l.ranks as f64;
        for &(s, t) in &l.rows {
            intra_rows.push((2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s, t));
        }
    }
    let intra = if intra_rows.is_empty() {
        None
    } else {
        Some(fit_rows(&intra_rows, "intra-node")?)
    };
    let (ai, bi) = match intra {
        Some(f) => (f.latency, f.bandwidth),
        None => (
            base.tiers.intra.latency.value.to_f64().unwrap_or(0.0),
            base.achievable_bandwidth(crate::strategy::Tier::Intra)
                .to_f64()
                .unwrap_or(f64::MAX),
        ),
    };
    let mut inter_rows = Vec::new();
    for l in logs.iter().filter(|l| l.hosts > 1) {
        let k = (l.ranks / l.hosts) as f64;
        let g = l.hosts as f64;
        for &(s, t) in &l.rows {
            let intra_half = (k - 1.0) * ai + (k - 1.0) / k * s / bi;
            let rest = t - 2.0 * intra_half;
            if rest > 0.0 {
                inter_rows.push((2.0 * (g - 1.0), 2.0 * (g - 1.0) / g * s / k, rest));
            }
        }
    }
    let inter = if inter_rows.is_empty() {
        None
    } else {
        Some(fit_rows(&inter_rows, "inter-node")?)
    };
    Ok((intra, inter))
}

fn exact(x: f64) -> Rational {
    parse_exact(&format!("{x:.4e}")).unwrap_or_else(Rational::one)
}

/// `base` with the fitted tiers written in, each number's source naming the logs.
pub fn calibrate(logs: &[NcclLog], base: &Calibration, name: &str) -> Result<Calibration> {
    let (intra, inter) = fit(logs, base)?;
    let mut c = base.clone();
    c.name = name.to_string();
    c.doc = format!(
        "{} Link tiers measured with nccl-tests all_reduce_perf.",
        base.doc
    );
    for (fitted, multi, link) in [
        (intra, false, &mut c.tiers.intra),
        (inter, true, &mut c.tiers.inter),
    ] {
        let Some(f) = fitted else { continue };
        let files: Vec<String> = logs
            .iter()
            .filter(|l| (l.hosts > 1) == multi)
            .map(|l| {
                let name = l.file.file_name().map(|n| n.to_string_lossy().to_string());
                format!(
                    "{} ({} ranks, {} hosts)",
                    name.unwrap_or_default(),
                    l.ranks,
                    l.hosts
                )
            })
            .collect();
        let how = format!(
            "measured: nccl-tests all_reduce_perf {}; least squares of time = α·2(n−1) + 2(n−1)/n·bytes/β over {} rows",
            files.join(", "),
            f.rows
        );
        link.latency = Sourced {
            value: exact(f.latency),
            source: how.clone(),
        };
        let measured = exact(f.bandwidth);
        if measured <= link.bandwidth.value {
            link.efficiency = Sourced {
                value: exact(f.bandwidth / link.bandwidth.value.to_f64().unwrap_or(f64::MAX)),
                source: format!("{how}: fitted β ÷ the datasheet bandwidth"),
            };
        } else {
            link.bandwidth = Sourced {
                value: measured,
                source: format!("{how}: fitted β (above the table's figure)"),
            };
            link.efficiency = Sourced {
                value: Rational::one(),
                source: "the measured bandwidth is already achievable".into(),
            };
        }
    }
    Ok(c)
}

/// Writes a number as a plain decimal when it is one, otherwise as a fraction.
fn decimal(r: &Rational) -> String {
    if r.is_integer() {
        return r.to_integer().to_string();
    }
    let f = r.to_f64().unwrap_or(0.0);
    let text = format!("{f:e}");
    match parse_exact(&text) {
        Some(back) if &back == r => text,
        _ => r.to_string(),
    }
}

fn entry(out: &mut String, indent: usize, key: &str, s: &Sourced) {
    let value = decimal(&s.value);
    let value = if value.contains('/') {
        format!("\"{value}\"")
    } else {
        value
    };
    let _ = writeln!(
        out,
        "{:indent$}{key}: {{value: {value}, source: {}}}",
        "",
        serde_json::to_string(&s.source).unwrap_or_default()
    );
}

fn number(r: &Rational) -> String {
    let v = decimal(r);
    if v.contains('/') {
        format!("\"{v}\"")
    } else {
        v
    }
}

fn curve(out: &mut String, indent: usize, key: &str, c: &Curve) {
    if c.constant {
        let s = Sourced {
            value: c.points[0].1.clone(),
            source: c.source.clone(),
        };
        return entry(out, indent, key, &s);
    }
    let points: Vec<String> = c
        .points
        .iter()
        .map(|(x, y)| format!("[{}, {}]", number(x), number(y)))
        .collect();
    let _ = writeln!(
        out,
        "{:indent$}{key}: {{points: [{}], source: {}}}",
        "",
        points.join(", "),
        serde_json::to_string(&c.source).unwrap_or_default()
    );
}

/// A calibration table as YAML in the shipped files' layout.
pub fn to_yaml(c: &Calibration) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut o = String::new();
    let _ = writeln!(o, "name: {}", q(&c.name));
    let _ = writeln!(o, "doc: {}", q(&c.doc));
    let _ = writeln!(o, "device:");
    let _ = writeln!(o, "  name: {}", q(&c.device.name));
    let _ = writeln!(o, "  peak_flops:");
    for (k, v) in &c.device.peak_flops {
        entry(&mut o, 4, k, v);
    }
    entry(&mut o, 2, "memory_bandwidth", &c.device.memory_bandwidth);
    entry(&mut o, 2, "memory_capacity", &c.device.memory_capacity);
    let _ = writeln!(o, "  efficiency:");
    curve(&mut o, 4, "matmul", &c.device.efficiency.matmul);
    curve(&mut o, 4, "memory_bound", &c.device.efficiency.memory_bound);
    if let Some(a) = &c.device.efficiency.attention {
        curve(&mut o, 4, "attention", a);
    }
    if let Some(k) = &c.device.kernel_overhead {
        entry(&mut o, 2, "kernel_overhead", k);
    }
    if let Some(k) = &c.device.comm_contention {
        entry(&mut o, 2, "comm_contention", k);
    }
    if !c.device.measured.is_empty() {
        let _ = writeln!(o, "  measured:");
        for (k, v) in &c.device.measured {
            entry(&mut o, 4, k, v);
        }
    }
    entry(&mut o, 0, "gpus_per_node", &c.gpus_per_node);
    let _ = writeln!(o, "tiers:");
    for (name, l) in [("intra", &c.tiers.intra), ("inter", &c.tiers.inter)] {
        let _ = writeln!(o, "  {name}:");
        entry(&mut o, 4, "bandwidth", &l.bandwidth);
        entry(&mut o, 4, "efficiency", &l.efficiency);
        entry(&mut o, 4, "latency", &l.latency);
        let _ = writeln!(o, "    algorithm: {}", l.algorithm);
        if !l.busbw.is_empty() {
            let _ = writeln!(o, "    busbw:");
            for (kind, c) in &l.busbw {
                curve(&mut o, 6, kind, c);
            }
        }
    }
    o
}
