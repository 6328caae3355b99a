//! Calibrating link tiers from nccl-tests logs. Per tier, the latency α and the bandwidth β of
//! the α–β model the timeline uses, fitted on `all_reduce_perf` logs by least squares on
//! `time = α·steps + bytes·factor/β` (ring: `steps = 2(n−1)`, `factor = 2(n−1)/n`). A log whose
//! ranks sit on one host measures the intra-node tier; one spanning hosts the inter-node tier,
//! fitted on what remains after the intra-node halves of the hierarchical all-reduce. Every log
//! (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
//! `sendrecv_perf`) also gives its tier a bus-bandwidth curve for the collective it measured.

use super::cost::{bus_factor, steps, Rates};
use super::plan::Collective;
use crate::calib::{parse_exact, Calibration, Curve, Sourced};
use crate::error::{Error, Result};
use crate::strategy::{AxisKind, MeshAxis, Tier};
use crate::sym::Rational;
use num_traits::{One, ToPrimitive};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The collective an nccl-tests binary measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NcclTest {
    /// `all_reduce_perf`.
    AllReduce,
    /// `all_gather_perf`.
    AllGather,
    /// `reduce_scatter_perf`.
    ReduceScatter,
    /// `alltoall_perf`.
    AllToAll,
    /// `sendrecv_perf`.
    SendRecv,
}

impl NcclTest {
    /// Every test.
    pub const ALL: [NcclTest; 5] = [
        NcclTest::AllReduce,
        NcclTest::AllGather,
        NcclTest::ReduceScatter,
        NcclTest::AllToAll,
        NcclTest::SendRecv,
    ];

    /// The nccl-tests binary.
    pub fn binary(self) -> &'static str {
        match self {
            NcclTest::AllReduce => "all_reduce_perf",
            NcclTest::AllGather => "all_gather_perf",
            NcclTest::ReduceScatter => "reduce_scatter_perf",
            NcclTest::AllToAll => "alltoall_perf",
            NcclTest::SendRecv => "sendrecv_perf",
        }
    }

    /// The collective's name in a calibration table's `busbw` ([`crate::calib::COLLECTIVE_KINDS`]).
    pub fn kind(self) -> &'static str {
        match self {
            NcclTest::AllReduce => "all-reduce",
            NcclTest::AllGather => "all-gather",
            NcclTest::ReduceScatter => "reduce-scatter",
            NcclTest::AllToAll => "all-to-all",
            NcclTest::SendRecv => "send-recv",
        }
    }

    /// The collective the timeline times.
    pub fn collective(self) -> Collective {
        match self {
            NcclTest::AllReduce => Collective::AllReduce,
            NcclTest::AllGather => Collective::AllGather,
            NcclTest::ReduceScatter => Collective::ReduceScatter,
            NcclTest::AllToAll => Collective::AllToAll,
            NcclTest::SendRecv => Collective::OneStep,
        }
    }

    /// The test a comment line names (`# Collective test starting: all_gather_perf`, or the
    /// command line some launchers echo).
    fn named_in(comment: &str) -> Option<NcclTest> {
        NcclTest::ALL
            .into_iter()
            .find(|t| comment.contains(t.binary()))
    }
}

/// One result row of a log (the out-of-place columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NcclRow {
    /// Its line in the file (1-based).
    pub line: usize,
    /// The message size in bytes (nccl-tests' `size`: the whole logical buffer).
    pub bytes: f64,
    /// Seconds of one call.
    pub seconds: f64,
    /// The printed bus bandwidth in bytes per second.
    pub busbw: f64,
}

/// One parsed nccl-tests log.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclLog {
    /// The file.
    pub file: PathBuf,
    /// The test that wrote it.
    pub test: NcclTest,
    /// Ranks.
    pub ranks: u64,
    /// Hosts the ranks run on.
    pub hosts: u64,
    /// (bytes, out-of-place seconds) per row.
    pub rows: Vec<(f64, f64)>,
    /// The result rows in full.
    pub results: Vec<NcclRow>,
}

/// Parses an nccl-tests log, taking the test from the log and all-reduce where it names none.
pub fn parse_log(file: &Path, text: &str) -> Result<NcclLog> {
    parse_log_as(file, text, None)
}

/// Parses an nccl-tests log. The test is the one the log names (newer nccl-tests print
/// `# Collective test starting: NAME`), else `assumed`, else all-reduce; a log that names a
/// test other than `assumed` is an error. The printed bus bandwidth must agree with the size
/// and time under that test's bus factor, which catches a wrong guess.
pub fn parse_log_as(file: &Path, text: &str, assumed: Option<NcclTest>) -> Result<NcclLog> {
    let mut hosts = BTreeSet::new();
    let mut ranks = 0u64;
    let mut time_col = 5usize;
    let mut busbw_col = 7usize;
    let mut named: Option<(NcclTest, usize)> = None;
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
                if let Some(i) = words.iter().position(|w| *w == "busbw") {
                    busbw_col = i;
                }
            } else if let Some(t) = NcclTest::named_in(rest) {
                // `# Collective test starting: NAME` wins over a passing mention.
                if named.is_none() || rest.contains("test starting") {
                    named = Some((t, n + 1));
                }
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        rows.push(result_row(file, n + 1, &words, time_col, busbw_col)?);
    }
    let test = which_test(file, named, assumed)?;
    if ranks < 2 {
        return Err(Error::at(
            file,
            1,
            1,
            format!(
                "no `#  Rank N … on HOST` lines naming two or more ranks: is this {} output?",
                test.binary()
            ),
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
    check_bus_factor(file, test, ranks, &rows)?;
    Ok(NcclLog {
        file: file.to_path_buf(),
        test,
        ranks,
        hosts: h,
        rows: rows.iter().map(|r| (r.bytes, r.seconds)).collect(),
        results: rows,
    })
}

/// One result row of a log (line `line`, split into `words`), its time and bus bandwidth read
/// from the columns the header named.
fn result_row(
    file: &Path,
    line: usize,
    words: &[&str],
    time_col: usize,
    busbw_col: usize,
) -> Result<NcclRow> {
    let bad = |what: &str| {
        Error::at(
            file,
            line,
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
    let busbw: f64 = words
        .get(busbw_col)
        .and_then(|w| w.parse().ok())
        .filter(|b: &f64| b.is_finite() && *b >= 0.0)
        .ok_or_else(|| bad("no busbw column"))?;
    Ok(NcclRow {
        line,
        bytes: size,
        seconds: time * 1e-6,
        busbw: busbw * 1e9,
    })
}

/// The test a log ran: the one it names (`named`, with its line), which must be `assumed`
/// where that is given; else `assumed`, else all-reduce.
fn which_test(
    file: &Path,
    named: Option<(NcclTest, usize)>,
    assumed: Option<NcclTest>,
) -> Result<NcclTest> {
    match (named, assumed) {
        (Some((t, line)), Some(a)) if t != a => Err(Error::at(
            file,
            line,
            1,
            format!(
                "the log is {} output, not {} as --collective says",
                t.binary(),
                a.binary()
            ),
        )),
        (Some((t, _)), _) => Ok(t),
        (None, a) => Ok(a.unwrap_or(NcclTest::AllReduce)),
    }
}

/// The printed busbw is `size ÷ time × bus factor` of the test that ran; a row where that
/// does not hold (beyond the rounding of the printed columns) means the log was taken for the
/// wrong test.
fn check_bus_factor(file: &Path, test: NcclTest, ranks: u64, rows: &[NcclRow]) -> Result<()> {
    let factor = bus_factor(test.collective(), ranks);
    for r in rows {
        // Printed to 0.01 GB/s: only rows well above that say anything.
        if r.busbw < 1e9 {
            continue;
        }
        let implied = r.bytes / r.seconds * factor;
        if (implied / r.busbw - 1.0).abs() > 0.05 {
            return Err(Error::at(
                file,
                r.line,
                1,
                format!(
                    "busbw {:.2} GB/s is not size ÷ time × {factor:.4} = {:.2} GB/s as {} \
                     computes it over {ranks} ranks: is this another test's log? \
                     (--collective names it)",
                    r.busbw / 1e9,
                    implied / 1e9,
                    test.binary()
                ),
            ));
        }
    }
    Ok(())
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

/// Fits the intra-node tier on single-host `all_reduce_perf` logs, then the inter-node tier on
/// multi-host ones (using the intra-node fit, or `base`'s intra-node rates when no single-host
/// log is given). Logs of other tests only give bus-bandwidth curves ([`busbw_curves`]).
pub fn fit(logs: &[NcclLog], base: &Calibration) -> Result<(Option<Fit>, Option<Fit>)> {
    let mut intra_rows = Vec::new();
    let all_reduce = logs.iter().filter(|l| l.test == NcclTest::AllReduce);
    for l in all_reduce.clone().filter(|l| l.hosts == 1) {
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
    for l in all_reduce.filter(|l| l.hosts > 1) {
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

/// A message size: whole bytes stay exact (`8388608`, not `8.3886e6`).
fn whole_or_exact(x: f64) -> Rational {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        Rational::from_integer((x as i64).into())
    } else {
        exact(x)
    }
}

fn exact(x: f64) -> Rational {
    parse_exact(&format!("{x:.4e}")).unwrap_or_else(Rational::one)
}

/// `base` with the fitted tiers written in, each number's source naming the logs.
pub fn calibrate(logs: &[NcclLog], base: &Calibration, name: &str) -> Result<Calibration> {
    let (intra, inter) = fit(logs, base)?;
    let mut c = base.clone();
    c.name = name.to_string();
    let mut tests: Vec<&str> = logs.iter().map(|l| l.test.binary()).collect();
    tests.sort_unstable();
    tests.dedup();
    c.doc = format!(
        "{} Link tiers measured with nccl-tests {}.",
        base.doc,
        tests.join(", ")
    );
    for (fitted, multi, link) in [
        (intra, false, &mut c.tiers.intra),
        (inter, true, &mut c.tiers.inter),
    ] {
        let Some(f) = fitted else { continue };
        let files: Vec<String> = logs
            .iter()
            .filter(|l| (l.hosts > 1) == multi && l.test == NcclTest::AllReduce)
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
    // Intra-node curves first: the inter-node ones take the intra-node halves of hierarchical
    // collectives at the rates just written.
    for tier in [Tier::Intra, Tier::Inter] {
        let rates = Rates::of(&c);
        let link = match tier {
            Tier::Intra => &mut c.tiers.intra,
            Tier::Inter => &mut c.tiers.inter,
        };
        for (test, curve) in busbw_curves(logs, &rates, tier) {
            link.busbw.insert(test.kind().to_string(), curve);
        }
    }
    Ok(c)
}

/// Where a row's bandwidth term is at least this share of the time its tier's ring takes
/// (after the intra-node halves of a hierarchical collective), its bus bandwidth is measured;
/// below it the row is latency-bound and α covers it (the curve holds flat there).
pub const BANDWIDTH_BOUND_SHARE: f64 = 0.5;

/// One log row as a point of the bus-bandwidth curve the timeline reads for `log`'s tier:
/// `(size, busbw)` such that the timeline, with the latencies and intra-node rates of `rates`,
/// takes exactly the measured time. On one host that is the printed busbw with the α·steps the
/// timeline adds taken out; across hosts, all-reduce, all-gather and reduce-scatter run
/// hierarchically, so the point is the inter-node ring over the hosts, on each host's
/// `size ÷ k` share, after the intra-node halves. `None` for a latency-bound row.
pub fn busbw_point(log: &NcclLog, row: &NcclRow, rates: &Rates) -> Option<(f64, f64)> {
    let kind = log.test.collective();
    let (n, h) = (log.ranks, log.hosts);
    let k = n / h;
    let hierarchical = h > 1
        && k > 1
        && matches!(
            kind,
            Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter
        );
    let (fixed, ranks, share, link) = if hierarchical {
        let intra = MeshAxis {
            kind: AxisKind::Dp,
            size: k,
            stride: 1,
            tier: Tier::Intra,
            per_node: k,
        };
        let rs = Collective::ReduceScatter;
        let half = rates.collective_seconds(rs, bus_factor(rs, k) * row.bytes, &intra);
        let halves = if kind == Collective::AllReduce {
            2.0
        } else {
            1.0
        };
        (halves * half, h, row.bytes / k as f64, &rates.inter)
    } else {
        let link = if h > 1 { &rates.inter } else { &rates.intra };
        (0.0, n, row.bytes, link)
    };
    let steps = match kind {
        // All-to-all is timed with n − 1 steps on either algorithm.
        Collective::AllToAll => (ranks - 1) as f64,
        _ => steps(kind, ranks, link.tree()),
    };
    let own = row.seconds - fixed;
    let bandwidth_time = own - steps * link.latency;
    (bandwidth_time > 0.0 && bandwidth_time >= BANDWIDTH_BOUND_SHARE * own)
        .then(|| (share, bus_factor(kind, ranks) * share / bandwidth_time))
}

/// The bus-bandwidth curve of each test measured on `tier` (single-host logs for the
/// intra-node tier, multi-host ones for the inter-node tier), from the points of
/// [`busbw_point`]; logs of one test are merged, points at one size averaged.
pub fn busbw_curves(logs: &[NcclLog], rates: &Rates, tier: Tier) -> Vec<(NcclTest, Curve)> {
    let mut out = Vec::new();
    for test in NcclTest::ALL {
        let these: Vec<&NcclLog> = logs
            .iter()
            .filter(|l| l.test == test && (l.hosts > 1) == (tier == Tier::Inter))
            .collect();
        let mut points: Vec<(f64, f64)> = these
            .iter()
            .flat_map(|l| l.results.iter().filter_map(|r| busbw_point(l, r, rates)))
            .collect();
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut exact_points: Vec<(Rational, Rational)> = Vec::new();
        let mut i = 0;
        while i < points.len() {
            let same = points[i..]
                .iter()
                .take_while(|p| p.0 == points[i].0)
                .count();
            let mean = points[i..i + same].iter().map(|p| p.1).sum::<f64>() / same as f64;
            let size = whole_or_exact(points[i].0);
            if exact_points.last().is_none_or(|(x, _)| *x < size) {
                exact_points.push((size, exact(mean)));
            }
            i += same;
        }
        let files: Vec<String> = these
            .iter()
            .map(|l| {
                let name = l.file.file_name().map(|n| n.to_string_lossy().to_string());
                format!(
                    "{} ({} ranks, {} host{})",
                    name.unwrap_or_default(),
                    l.ranks,
                    l.hosts,
                    if l.hosts == 1 { "" } else { "s" }
                )
            })
            .collect();
        let how = if tier == Tier::Inter
            && test.collective() != Collective::AllToAll
            && test.collective() != Collective::OneStep
        {
            "the inter-node ring's bus bandwidth on each host's size ÷ k share, after the \
             intra-node halves at the table's intra-node rates"
        } else {
            "the out-of-place busbw column per size"
        };
        let source = format!(
            "measured: nccl-tests {} {}: {how}, with the α·steps the timeline adds \
             taken out; rows whose bandwidth term is at least {:.0} % of that time ({} points)",
            test.binary(),
            files.join(", "),
            100.0 * BANDWIDTH_BOUND_SHARE,
            exact_points.len()
        );
        out.push((
            test,
            Curve {
                points: exact_points,
                constant: false,
                source,
            },
        ));
    }
    out
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
    if let Some(a) = &c.device.efficiency.matmul_fp8 {
        curve(&mut o, 4, "matmul_fp8", a);
    }
    if !c.device.efficiency.attention_kernels.is_empty() {
        let _ = writeln!(o, "    attention_kernels:");
        for (name, k) in &c.device.efficiency.attention_kernels {
            curve(&mut o, 6, name, k);
        }
    }
    if let Some(k) = &c.device.kernel_overhead {
        entry(&mut o, 2, "kernel_overhead", k);
    }
    if let Some(k) = &c.device.comm_contention {
        entry(&mut o, 2, "comm_contention", k);
    }
    if let Some(k) = &c.device.pace_spread {
        entry(&mut o, 2, "pace_spread", k);
    }
    if let Some(t) = &c.device.gemm_tiling {
        let _ = writeln!(o, "  gemm_tiling:");
        entry(&mut o, 4, "multiprocessors", &t.multiprocessors);
        let tiles: Vec<String> = t.tiles.iter().map(|[r, c]| format!("[{r}, {c}]")).collect();
        let _ = writeln!(o, "    tiles: [{}]", tiles.join(", "));
        let _ = writeln!(o, "    source: {}", q(&t.source));
    }
    if let Some(f) = &c.device.scaled_formats {
        let _ = writeln!(
            o,
            "  scaled_formats: {{formats: [{}], source: {}}}",
            f.formats.join(", "),
            q(&f.source)
        );
    }
    if !c.device.measured.is_empty() {
        let _ = writeln!(o, "  measured:");
        for (k, v) in &c.device.measured {
            entry(&mut o, 4, k, v);
        }
    }
    if let Some(t) = &c.device.tdp {
        entry(&mut o, 2, "tdp", t);
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
    // The link layout as the table states it (a torus, a rack-scale domain), kept as is.
    if let Some(t) = &c.topology {
        let _ = writeln!(o, "topology:");
        for line in serde_yaml::to_string(t).unwrap_or_default().lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
    o
}
