//! Matmul efficiency measured on the user's GPU: a GEMM sweep (`tools/gemm_sweep.py` writes it)
//! read as a CSV of `m,n,k,seconds`, turned into the curve `efficiency.matmul` of a table —
//! the fraction of the bf16 peak one GEMM of `2·m·n·k` FLOPs reaches, as the median of the rows
//! in each quarter-decade of FLOPs. FP8 rows (`tools/gemm_sweep.py --dtype fp8`) give the curve
//! `efficiency.matmul_fp8` the same way, as fractions of the FP8 peak.

use super::{parse_exact, Calibration, Curve};
use crate::error::{Error, Result};
use crate::sym::Rational;
use num_traits::{One, ToPrimitive};
use std::path::{Path, PathBuf};

/// Above this share of the peak a row is taken as a wrong peak or a wrong unit, not as noise
/// (boost clocks and timer jitter stay well below it).
pub const IMPLAUSIBLE_EFFICIENCY: f64 = 1.2;

/// The most points a measured curve gets.
pub const MAX_POINTS: usize = 40;

/// Bins per decade of FLOPs while the sweep spans at most [`MAX_POINTS`] quarter-decades.
pub const BINS_PER_DECADE: f64 = 4.0;

/// One timed GEMM.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmRow {
    /// Its line in the file (1-based).
    pub line: usize,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// The reduced dimension.
    pub k: u64,
    /// Seconds of one call.
    pub seconds: f64,
}

impl GemmRow {
    /// FLOPs of one call: `2·m·n·k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// A parsed sweep: its bf16/fp16 and FP8 rows and what its comment lines say.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmSweep {
    /// The file.
    pub file: PathBuf,
    /// Rows in a 16-bit dtype.
    pub rows: Vec<GemmRow>,
    /// Rows with FP8 operands.
    pub fp8_rows: Vec<GemmRow>,
    /// Rows skipped for their dtype (neither 16-bit nor FP8).
    pub skipped: usize,
    /// The `# date:` comment, if any.
    pub date: Option<String>,
    /// The `# gpu:` comment, if any.
    pub gpu: Option<String>,
    /// The `# soak:` comment, if any: how long the GPU ran large GEMMs before the sweep
    /// (`tools/gemm_sweep.py --soak`), so that it was timed at its sustained clocks.
    pub soak: Option<String>,
}

/// One point of a measured efficiency curve.
#[derive(Debug, Clone, PartialEq)]
pub struct BinPoint {
    /// The median FLOPs of the bin's rows (one row's FLOPs).
    pub flops: u64,
    /// The median efficiency of the bin's rows, at most 1.
    pub efficiency: f64,
    /// Rows in the bin.
    pub rows: usize,
}

/// What a row's dtype measures: the bf16 tensor-core rate, the FP8 one, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measures {
    SixteenBit,
    Fp8,
    Other,
}

fn measures(dtype: &str) -> Measures {
    match dtype.trim().to_ascii_lowercase().as_str() {
        "bf16" | "bfloat16" | "torch.bfloat16" | "fp16" | "float16" | "half" | "torch.float16" => {
            Measures::SixteenBit
        }
        "fp8" | "float8" | "e4m3" | "fp8_e4m3" | "float8_e4m3fn" | "torch.float8_e4m3fn" => {
            Measures::Fp8
        }
        _ => Measures::Other,
    }
}

/// The columns a sweep's header names.
struct Header {
    m: usize,
    n: usize,
    k: usize,
    seconds: usize,
    dtype: Option<usize>,
    width: usize,
}

impl Header {
    fn parse(file: &Path, line: usize, text: &str) -> Result<Header> {
        let names: Vec<String> = text
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .collect();
        let find = |want: &str| names.iter().position(|n| n == want);
        let need = |want: &str| {
            find(want).ok_or_else(|| {
                Error::at(
                    file,
                    line,
                    1,
                    format!(
                        "the header has no `{want}` column (it needs m,n,k,seconds; found `{}`)",
                        text.trim()
                    ),
                )
            })
        };
        Ok(Header {
            m: need("m")?,
            n: need("n")?,
            k: need("k")?,
            seconds: need("seconds")?,
            dtype: find("dtype"),
            width: names.len(),
        })
    }
}

/// The 1-based column where field `i` of a comma-separated line starts.
fn column_of(text: &str, i: usize) -> usize {
    let start: usize = text.split(',').take(i).map(|f| f.len() + 1).sum();
    let lead = text[start.min(text.len())..]
        .chars()
        .take_while(|c| c.is_whitespace())
        .count();
    start + lead + 1
}

/// Parses a GEMM sweep: a header with `m`, `n`, `k`, `seconds` (and optionally `dtype`; other
/// columns are ignored), then one row per GEMM; `#` starts a comment line (`# date: …`,
/// `# gpu: …` and `# soak: …` are kept for the table's source).
pub fn parse_sweep(file: &Path, text: &str) -> Result<GemmSweep> {
    let mut header: Option<Header> = None;
    let mut sweep = GemmSweep {
        file: file.to_path_buf(),
        rows: Vec::new(),
        fp8_rows: Vec::new(),
        skipped: 0,
        date: None,
        gpu: None,
        soak: None,
    };
    let mut last = 1;
    // Spreadsheets may start the file with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        last = line;
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            read_note(&mut sweep, rest);
            continue;
        }
        let Some(h) = &header else {
            header = Some(Header::parse(file, line, raw)?);
            continue;
        };
        match h.row(file, line, raw)? {
            (Measures::SixteenBit, Some(row)) => sweep.rows.push(row),
            (Measures::Fp8, Some(row)) => sweep.fp8_rows.push(row),
            _ => sweep.skipped += 1,
        }
    }
    if header.is_none() {
        return Err(Error::at(
            file,
            last,
            1,
            "no header line `m,n,k,seconds`: the file is empty or holds only comments",
        ));
    }
    if sweep.rows.is_empty() && sweep.fp8_rows.is_empty() {
        return Err(Error::at(
            file,
            last,
            1,
            format!(
                "no bf16, fp16 or fp8 rows to fit ({} rows of other dtypes skipped)",
                sweep.skipped
            ),
        ));
    }
    Ok(sweep)
}

/// Keeps a comment line's `date: …`, `gpu: …` or `soak: …` (what follows its `#`) for the
/// table's source; other comments are ignored.
fn read_note(sweep: &mut GemmSweep, rest: &str) {
    if let Some((key, value)) = rest.split_once(':') {
        let value = value.trim().to_string();
        match key.trim().to_ascii_lowercase().as_str() {
            "date" if !value.is_empty() => sweep.date = Some(value),
            "gpu" if !value.is_empty() => sweep.gpu = Some(value),
            "soak" if !value.is_empty() => sweep.soak = Some(value),
            _ => {}
        }
    }
}

impl Header {
    /// The GEMM on data line `line` (`raw`) and what its dtype measures (16-bit without a
    /// dtype column), or `None` where its dtype is neither 16-bit nor FP8.
    fn row(&self, file: &Path, line: usize, raw: &str) -> Result<(Measures, Option<GemmRow>)> {
        let fields: Vec<&str> = raw.split(',').map(str::trim).collect();
        if fields.len() != self.width {
            return Err(Error::at(
                file,
                line,
                1,
                format!(
                    "{} fields where the header has {}",
                    fields.len(),
                    self.width
                ),
            ));
        }
        let kind = self
            .dtype
            .map_or(Measures::SixteenBit, |d| measures(fields[d]));
        if kind == Measures::Other {
            return Ok((kind, None));
        }
        let dim = |c: usize, name: &str| -> Result<u64> {
            match fields[c].parse::<u64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(Error::at(
                    file,
                    line,
                    column_of(raw, c),
                    format!(
                        "`{name}` must be a positive whole number, not `{}`",
                        fields[c]
                    ),
                )),
            }
        };
        let (m, n, k) = (dim(self.m, "m")?, dim(self.n, "n")?, dim(self.k, "k")?);
        let seconds = match fields[self.seconds].parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => s,
            Ok(_) => {
                return Err(Error::at(
                    file,
                    line,
                    column_of(raw, self.seconds),
                    format!("`seconds` must be positive, not `{}`", fields[self.seconds]),
                ))
            }
            Err(_) => {
                return Err(Error::at(
                    file,
                    line,
                    column_of(raw, self.seconds),
                    format!("`seconds` must be a number, not `{}`", fields[self.seconds]),
                ))
            }
        };
        Ok((
            kind,
            Some(GemmRow {
                line,
                m,
                n,
                k,
                seconds,
            }),
        ))
    }
}

/// The median of sorted values: the lower middle one, so that it is always one of them.
fn lower_median<T: Copy>(sorted: &[T]) -> T {
    sorted[(sorted.len() - 1) / 2]
}

/// A sweep's efficiency, binned.
#[derive(Debug, Clone, PartialEq)]
pub struct Binned {
    /// One point per non-empty bin, FLOPs strictly increasing.
    pub points: Vec<BinPoint>,
    /// The width of a bin in decades of FLOPs.
    pub decades_per_bin: f64,
}

/// The efficiency curve of a sweep's 16-bit rows against a bf16 peak of `peak` FLOP/s: rows
/// binned by log10(FLOPs) in quarter decades (wider when the sweep spans more than
/// [`MAX_POINTS`] of them), the median efficiency of each bin at its median FLOPs, capped at 1.
/// A row above [`IMPLAUSIBLE_EFFICIENCY`] is an error at its line.
pub fn efficiency_points(sweep: &GemmSweep, peak: f64) -> Result<Binned> {
    bin_rows(&sweep.file, &sweep.rows, peak, "bf16")
}

/// [`efficiency_points`] of the sweep's FP8 rows against an FP8 peak of `peak` FLOP/s.
pub fn fp8_efficiency_points(sweep: &GemmSweep, peak: f64) -> Result<Binned> {
    bin_rows(&sweep.file, &sweep.fp8_rows, peak, "fp8")
}

/// `rows` of `file` binned as [`efficiency_points`] says, against the `dtype` peak `peak`.
fn bin_rows(file: &Path, all: &[GemmRow], peak: f64, dtype: &str) -> Result<Binned> {
    let mut rows: Vec<(f64, u64, f64)> = Vec::with_capacity(all.len());
    for r in all {
        let flops = r.flops();
        let e = flops / r.seconds / peak;
        if !(e.is_finite() && e <= IMPLAUSIBLE_EFFICIENCY) {
            return Err(Error::at(
                file,
                r.line,
                1,
                format!(
                    "{m}×{n}×{k} in {s:e} s is {e:.2} of the {dtype} peak {peak:e} FLOP/s: a \
                     wrong peak (--base) or a time not in seconds",
                    m = r.m,
                    n = r.n,
                    k = r.k,
                    s = r.seconds
                ),
            ));
        }
        // FLOPs up to 2^64 are kept whole; larger ones are capped (no GEMM is that large).
        let whole = if flops < u64::MAX as f64 {
            flops as u64
        } else {
            u64::MAX
        };
        rows.push((flops.log10(), whole, e));
    }
    let lo = rows.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| r.0).fold(f64::NEG_INFINITY, f64::max);
    let width = (1.0 / BINS_PER_DECADE).max((hi - lo) / (MAX_POINTS - 1) as f64);
    let bin = |log: f64| (log / width).floor() as i64;
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut points = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let b = bin(rows[start].0);
        let end = start + rows[start..].iter().take_while(|r| bin(r.0) == b).count();
        let group = &rows[start..end];
        let mut flops: Vec<u64> = group.iter().map(|r| r.1).collect();
        flops.sort_unstable();
        let mut eff: Vec<f64> = group.iter().map(|r| r.2).collect();
        eff.sort_by(f64::total_cmp);
        points.push(BinPoint {
            flops: lower_median(&flops),
            efficiency: lower_median(&eff).min(1.0),
            rows: group.len(),
        });
        start = end;
    }
    // Bins are disjoint ranges in order, so their medians increase; equal whole FLOPs can only
    // come from the cap above and are merged.
    points.dedup_by(|later, kept| later.flops <= kept.flops);
    Ok(Binned {
        points,
        decades_per_bin: width,
    })
}

/// A number rounded to four significant digits, exactly.
fn four_digits(x: f64) -> Rational {
    parse_exact(&format!("{x:.3e}")).unwrap_or_else(Rational::one)
}

/// The measured curve of `binned`, its source naming the file, its rows and date.
fn measured_curve(
    sweep: &GemmSweep,
    rows: usize,
    binned: &Binned,
    dtype: &str,
    peak: f64,
) -> Curve {
    let file = sweep
        .file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut about = format!("{rows} rows");
    if let Some(d) = &sweep.date {
        about.push_str(&format!(", {d}"));
    }
    if let Some(g) = &sweep.gpu {
        about.push_str(&format!(", {g}"));
    }
    if let Some(w) = &sweep.soak {
        about.push_str(&format!(", soak: {w}"));
    }
    let source = format!(
        "measured: GEMM sweep {file} ({about}), median per bin: efficiency = 2·m·n·k ÷ seconds ÷ \
         the {dtype} peak {peak:e} FLOP/s, median of each {:.2}-decade bin of FLOPs at its median \
         FLOPs, capped at 1",
        binned.decades_per_bin
    );
    Curve {
        points: binned
            .points
            .iter()
            .map(|p| {
                (
                    Rational::from_integer(p.flops.into()),
                    four_digits(p.efficiency).min(Rational::one()),
                )
            })
            .collect(),
        constant: false,
        source,
    }
}

/// The table's peak FLOP/s for `dtype`.
fn peak_of(base: &Calibration, dtype: &str) -> Result<f64> {
    base.device
        .peak_flops
        .get(dtype)
        .and_then(|p| p.value.to_f64())
        .ok_or_else(|| {
            Error::Usage(format!(
                "table `{}` has no {dtype} peak (`device.peak_flops.{dtype}`) to measure the \
                 sweep's {dtype} rows against: pick a --base table for a GPU with one",
                base.name
            ))
        })
}

/// `base` with the sweep's curves: its 16-bit rows replace `device.efficiency.matmul`, and its
/// FP8 rows (as fractions of the FP8 peak) give `device.efficiency.matmul_fp8`; each curve's
/// source names the file, its rows and date. The measured GEMMs already ran with whatever wave
/// and tile quantization their shapes met, so a measured 16-bit curve replaces the base
/// table's `gemm_tiling` too (keeping both would count those losses twice); an FP8 curve is
/// never tiled ([`crate::machine::Rates::gemm_seconds`]).
pub fn calibrate(sweep: &GemmSweep, base: &Calibration, name: &str) -> Result<Calibration> {
    let mut c = base.clone();
    c.name = name.to_string();
    let mut what = Vec::new();
    if !sweep.rows.is_empty() {
        let peak = peak_of(base, "bf16")?;
        let binned = efficiency_points(sweep, peak)?;
        c.device.efficiency.matmul = measured_curve(sweep, sweep.rows.len(), &binned, "bf16", peak);
        c.device.gemm_tiling = None;
        what.push("Matmul efficiency");
    }
    if !sweep.fp8_rows.is_empty() {
        let peak = peak_of(base, "fp8")?;
        let binned = fp8_efficiency_points(sweep, peak)?;
        c.device.efficiency.matmul_fp8 = Some(measured_curve(
            sweep,
            sweep.fp8_rows.len(),
            &binned,
            "fp8",
            peak,
        ));
        what.push("FP8 matmul efficiency");
    }
    c.doc = format!(
        "{} {} measured with a GEMM sweep.",
        base.doc,
        what.join(" and ")
    );
    Ok(c)
}
