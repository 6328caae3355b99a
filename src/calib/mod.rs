//! Calibration tables: a machine's peak rates, capacities and links, each number with its
//! source. They turn symbolic costs into machine balance ratios (for ranking) and into seconds
//! (for timelines). Numbers are read exactly: `3.35e12` is the rational 3350000000000.

pub mod gemm;
mod machine_ref;
pub use machine_ref::MachineRef;
pub mod stack;
pub mod topology;
pub mod whatif;
use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::strategy::Tier;
use crate::sym::Rational;
use num_bigint::BigInt;
use num_traits::{One, Signed, ToPrimitive, Zero};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// The memory kept free on each device unless told otherwise (`--headroom`): what the CUDA
/// context, NCCL's and cuBLAS's workspaces and the caching allocator's fragmentation take beside
/// the tensors a cost model counts. Training stacks publish no default for it; this is the one a
/// widely used PyTorch-based engine ships: vLLM lets its tensors use 0.9 of device memory by
/// default (`gpu_memory_utilization`, vLLM documentation, "Engine Arguments").
pub const DEFAULT_HEADROOM: &str = "10%";

/// [`DEFAULT_HEADROOM`] as a number of percent.
fn default_headroom_percent() -> Rational {
    crate::sym::size::decimal(DEFAULT_HEADROOM.trim_end_matches('%')).unwrap_or_default()
}

/// The whole bytes left of `capacity` with `percent` % of it kept free.
pub fn less_share(capacity: &Rational, percent: &Rational) -> Rational {
    let hundred = Rational::from_integer(100.into());
    (capacity * (Rational::one() - percent / hundred)).floor()
}

/// The name of the embedded reference machine.
pub const REFERENCE: &str = "dgx-h100";

/// An exact number with the source it was taken from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sourced {
    /// The value.
    #[serde(with = "exact")]
    pub value: Rational,
    /// Where it comes from (datasheet, paper, measurement).
    pub source: String,
}

/// Parses a decimal number exactly: `12`, `0.8`, `3.35e12`, `1e-6`.
pub fn parse_exact(text: &str) -> Option<Rational> {
    let t = text.trim();
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    if !(-400..=400).contains(&exp) {
        return None;
    }
    let (neg, m) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
    };
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) || m.len() > 400 {
        return None;
    }
    let digits = format!("{int}{frac}");
    let n: BigInt = if digits.is_empty() {
        BigInt::zero()
    } else {
        digits.parse().ok()?
    };
    let scale = exp - frac.len() as i32;
    let ten = BigInt::from(10);
    let mut r = Rational::from_integer(n);
    if scale >= 0 {
        r *= Rational::from_integer(num_traits::pow(ten, scale as usize));
    } else {
        r /= Rational::from_integer(num_traits::pow(ten, (-scale) as usize));
    }
    Some(if neg { -r } else { r })
}

/// Bytes written with a unit, as memory is given on the command line (`80GB`, `80GiB`), or a
/// bandwidth in bytes per second (`3.35TB/s`): exact, whole bytes.
pub(crate) fn bytes_with_unit(v: &str) -> Option<Rational> {
    let t = v.trim();
    let t = t.strip_suffix("/s").unwrap_or(t).trim_end();
    if !t.to_ascii_lowercase().ends_with('b') {
        return None;
    }
    crate::sym::size::parse_memory(t).ok()
}

mod exact {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        r: &Rational,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&r.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Rational, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rational;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Rational, E> {
                if let Some((a, b)) = v.split_once('/') {
                    let (a, b) = (parse_exact(a), parse_exact(b));
                    if let (Some(a), Some(b)) = (a, b) {
                        if !b.is_zero() {
                            return Ok(a / b);
                        }
                    }
                }
                parse_exact(v).or_else(|| bytes_with_unit(v)).ok_or_else(|| {
                    E::custom(format!(
                        "`{v}` is not a number (nor bytes with a unit, such as 80GB, 80GiB or 3.35TB/s)"
                    ))
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Rational, E> {
                if !v.is_finite() {
                    return Err(E::custom("not a finite number"));
                }
                // Rust prints the shortest text that reads back as the same float: the
                // literal the user wrote, which is then read exactly.
                self.visit_str(&format!("{v:e}"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Rational, E> {
                Ok(Rational::from_integer(v.into()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Rational, E> {
                Ok(Rational::from_integer(v.into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An exact number read from YAML (a number or a decimal string).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exact(#[serde(with = "exact")] pub Rational);

/// A quantity that may depend on a size: one number, or points `[size, value]` read
/// piecewise-linearly in log(size) and held flat beyond the first and last point. A constant is
/// a valid curve, so tables written before curves existed still load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CurveSpec", into = "CurveSpec")]
pub struct Curve {
    /// `(size, value)` points, sizes strictly increasing; one point for a constant.
    pub points: Vec<(Rational, Rational)>,
    /// Whether it was written as one number (`value:`).
    pub constant: bool,
    /// Where it comes from (datasheet, paper, microbenchmark, the user's measurement).
    pub source: String,
}

/// How a curve is written: `{value, source}` or `{points, source}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurveSpec {
    /// One number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Exact>,
    /// `[size, value]` pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<[Exact; 2]>>,
    /// Where it comes from.
    pub source: String,
}

impl TryFrom<CurveSpec> for Curve {
    type Error = String;
    fn try_from(s: CurveSpec) -> std::result::Result<Curve, String> {
        match (s.value, s.points) {
            (Some(v), None) => Ok(Curve {
                points: vec![(Rational::one(), v.0)],
                constant: true,
                source: s.source,
            }),
            (None, Some(p)) => {
                if p.is_empty() {
                    return Err("`points` needs at least one [size, value] pair".into());
                }
                let points: Vec<(Rational, Rational)> =
                    p.into_iter().map(|[x, y]| (x.0, y.0)).collect();
                for w in points.windows(2) {
                    if w[1].0 <= w[0].0 {
                        return Err(format!(
                            "curve sizes must increase strictly ({} then {})",
                            w[0].0, w[1].0
                        ));
                    }
                }
                if points.iter().any(|(x, _)| !x.is_positive()) {
                    return Err("curve sizes must be positive".into());
                }
                Ok(Curve {
                    points,
                    constant: false,
                    source: s.source,
                })
            }
            (Some(_), Some(_)) => Err("give either `value` or `points`, not both".into()),
            (None, None) => Err("a number needs `value` (or `points` for a curve)".into()),
        }
    }
}

impl From<Curve> for CurveSpec {
    fn from(c: Curve) -> CurveSpec {
        if c.constant {
            CurveSpec {
                value: Some(Exact(c.points[0].1.clone())),
                points: None,
                source: c.source,
            }
        } else {
            CurveSpec {
                value: None,
                points: Some(
                    c.points
                        .into_iter()
                        .map(|(x, y)| [Exact(x), Exact(y)])
                        .collect(),
                ),
                source: c.source,
            }
        }
    }
}

impl Curve {
    /// The largest value (a constant's value): the plateau of an efficiency curve.
    pub fn max(&self) -> Rational {
        self.points
            .iter()
            .map(|(_, y)| y.clone())
            .max()
            .unwrap_or_else(Rational::zero)
    }

    /// The smallest value.
    pub fn min(&self) -> Rational {
        self.points
            .iter()
            .map(|(_, y)| y.clone())
            .min()
            .unwrap_or_else(Rational::zero)
    }

    /// The curve as floats, for timing.
    pub fn to_f64(&self) -> FloatCurve {
        let f = |r: &Rational| r.to_f64().unwrap_or(f64::MAX);
        FloatCurve {
            log_x: self.points.iter().map(|(x, _)| f(x).log10()).collect(),
            y: self.points.iter().map(|(_, y)| f(y)).collect(),
        }
    }
}

/// A [`Curve`] in floating point: `log10(size)` and values.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatCurve {
    log_x: Vec<f64>,
    y: Vec<f64>,
}

impl FloatCurve {
    /// The value at `size`: linear in log(size) between points, flat beyond them.
    pub fn at(&self, size: f64) -> f64 {
        let n = self.y.len();
        if n == 1 || size <= 0.0 || !size.is_finite() {
            return if size.is_finite() || n == 1 {
                self.y[0]
            } else {
                self.y[n - 1]
            };
        }
        let lx = size.log10();
        if lx <= self.log_x[0] {
            return self.y[0];
        }
        if lx >= self.log_x[n - 1] {
            return self.y[n - 1];
        }
        let i = self.log_x.partition_point(|&x| x <= lx);
        let (x0, x1, y0, y1) = (self.log_x[i - 1], self.log_x[i], self.y[i - 1], self.y[i]);
        y0 + (y1 - y0) * (lx - x0) / (x1 - x0)
    }

    /// The largest value.
    pub fn max(&self) -> f64 {
        self.y.iter().cloned().fold(f64::MIN, f64::max)
    }

    /// The curve with every value multiplied by `factor`.
    pub fn scaled(&self, factor: f64) -> FloatCurve {
        FloatCurve {
            log_x: self.log_x.clone(),
            y: self.y.iter().map(|y| y * factor).collect(),
        }
    }

    /// Whether it is one number (no size dependence of its own).
    pub fn is_constant(&self) -> bool {
        self.y.len() == 1
    }
}

/// Achievable fractions of peak, per class of operator: constants or curves against the size
/// of one kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Matmul-like kernels, of the peak FLOP/s, against the FLOPs of one kernel (one GEMM
    /// call): small GEMMs fill fewer SMs and waves and reach less of the peak.
    pub matmul: Curve,
    /// Memory-bound kernels, of the HBM bandwidth, against the bytes one kernel moves.
    pub memory_bound: Curve,
    /// Fused attention kernels (FlashAttention-style), of the peak FLOP/s, against the FLOPs of
    /// one kernel; the matmul curve when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Curve>,
    /// Other fused-attention kernels a stack may run on this device, by name (for example an
    /// earlier FlashAttention, or one written in Triton), each with its own curve as
    /// `attention`; `--calib TABLE@NAME` times attention with the named one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attention_kernels: BTreeMap<String, Curve>,
    /// GEMMs with FP8 operands, of the FP8 peak, against the FLOPs of one GEMM, where they
    /// were measured (`symshard calibrate gemm` on a sweep with FP8 rows). Without it an FP8
    /// GEMM is timed at the FP8 peak times the `matmul` curve (and the table's tiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul_fp8: Option<Curve>,
}

/// Whether `name` is a label: a lower-case letter, then lower-case letters, digits and hyphens.
/// Attention kernels are named so (a name that can follow `@` in `--calib`), and validation
/// files' software stacks.
pub(crate) fn is_label(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A collective's kind, as calibration tables name it (nccl-tests' names).
pub const COLLECTIVE_KINDS: [&str; 5] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "send-recv",
];

/// One accelerator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Its name.
    pub name: String,
    /// Dense peak FLOP/s per dtype (`bf16`, `fp16`, `fp32`, `tf32`).
    pub peak_flops: BTreeMap<String, Sourced>,
    /// HBM bytes per second.
    pub memory_bandwidth: Sourced,
    /// HBM bytes.
    pub memory_capacity: Sourced,
    /// Achievable fractions.
    pub efficiency: Efficiency,
    /// Fixed seconds every kernel costs on top of its roofline time (launch latency and the
    /// fill and drain of its first and last wave); zero when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_overhead: Option<Sourced>,
    /// The share of compute throughput a collective running at the same time takes from the
    /// kernels it overlaps (its SMs and HBM traffic); zero when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_contention: Option<Sourced>,
    /// The spread of throughput between devices of the same model: the standard deviation of
    /// one device's compute rate over the median device's (a fraction, e.g. 0.015). A
    /// synchronous step runs at the pace of its slowest device, so the timeline slows compute
    /// by the expected slowest of the job's devices ([`crate::machine::slowest_pace`]); zero
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace_spread: Option<Sourced>,
    /// How GEMMs are tiled over the streaming multiprocessors, where the table models it:
    /// a GEMM whose output tiles do not fill its last wave of SMs, or whose sizes are not
    /// multiples of its tile, runs below the matmul curve (wave and tile quantization).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_tiling: Option<GemmTiling>,
    /// Block-scaled formats its tensor cores run natively (`mxfp8`, `nvfp4`), where a source
    /// says so; a format needing such hardware is refused on a table without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_formats: Option<ScaledFormats>,
    /// Rates measured on real hardware, kept beside the datasheet ones (never required).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured: BTreeMap<String, Sourced>,
    /// Thermal design power in watts, from the vendor's datasheet, where the table gives it:
    /// `sweep`'s energy per step (an upper bound, every device at its TDP the whole step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdp: Option<Sourced>,
}

/// The block-scaled formats a device's tensor cores run, with the source that says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaledFormats {
    /// The formats: `mxfp8`, `nvfp4`.
    pub formats: Vec<String>,
    /// Where this is stated.
    pub source: String,
}

/// The block-scaled formats a table may list under `device.scaled_formats`.
pub const SCALED_FORMATS: [&str; 2] = ["mxfp8", "nvfp4"];

/// A GEMM library's tiling of the output over the SMs (NVIDIA, Matrix Multiplication
/// Background User's Guide, "Dimension Quantization Effects"): each thread block computes one
/// output tile, one block per SM at a time, so a GEMM runs in ⌈tiles ÷ SMs⌉ waves. With it, the
/// matmul curve is read as the efficiency of a GEMM that fills every wave (as a maximum
/// achievable matmul FLOPS search measures it), and each GEMM's is that times the share of the
/// SM-tile slots of its waves that hold useful output: the best over the listed tiles. A GEMM of
/// fewer tiles than SMs is split along its summed index to fill one wave (split-K).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmTiling {
    /// Streaming multiprocessors per device.
    pub multiprocessors: Sourced,
    /// Output tile shapes `[rows, columns]` the library chooses from.
    pub tiles: Vec<[u32; 2]>,
    /// Where the tile shapes come from.
    pub source: String,
}

/// A class of links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Bytes per second per device, one direction.
    pub bandwidth: Sourced,
    /// Achievable fraction of the bandwidth for collectives.
    pub efficiency: Sourced,
    /// Seconds of latency per step of a collective (α).
    pub latency: Sourced,
    /// Collective algorithm: `ring`; `tree` for latency-bound small messages (log₂ n steps);
    /// `nccl` for NCCL's choice per call: an all-reduce across nodes runs whichever of the
    /// ring and NCCL's double binary tree NCCL's own model times faster
    /// ([`crate::machine::nccl_tree_all_reduce`]), every other collective the ring.
    pub algorithm: String,
    /// Per collective kind (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
    /// `send-recv`): bus bandwidth in bytes per second against the message size in bytes, in
    /// the nccl-tests sense (size = the whole logical tensor): a collective takes α per step plus
    /// size × bus factor ÷ busbw(size). Kinds left out use `bandwidth × efficiency`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub busbw: BTreeMap<String, Curve>,
}

/// The links of a machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    /// Inside a node.
    pub intra: Link,
    /// Across nodes.
    pub inter: Link,
}

/// A calibration table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Its name.
    pub name: String,
    /// A description.
    pub doc: String,
    /// The accelerator.
    pub device: Device,
    /// Devices per node.
    pub gpus_per_node: Sourced,
    /// Links.
    pub tiers: Tiers,
    /// How the links are laid out, where more than two flat tiers ([`topology`]); none: every
    /// group of a tier gets the tier's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<topology::Topology>,
    /// The software stack's profile the timeline adds to every strategy (`--stack NAME`);
    /// none: profile-free, or each strategy on its own stack's ([`Calibration::per_row`]).
    /// Never read from or written to a table's file.
    #[serde(skip)]
    pub stack: Option<stack::StackProfile>,
    /// Each strategy priced on the profile of the stack it assumes (`--stack auto`):
    /// [`Calibration::profile_for`] gives the one a strategy is timed with. The table itself is
    /// profile-free, and so is the relative cost, which compares every row on one scale. Never
    /// read from or written to a table's file.
    #[serde(skip)]
    pub per_row: Option<stack::PerRow>,
    /// What changed this table from a shipped or given one (`--with`): a what-if machine.
    /// Never read from or written to a table's file.
    #[serde(skip)]
    pub what_if: Option<whatif::WhatIf>,
}

/// Refuses a value that is not positive, at its place in the file.
fn positive(src: &Source, path: &[&str], v: &Rational) -> Result<()> {
    if v.is_positive() {
        Ok(())
    } else {
        Err(src.error_at(
            path,
            format!("`{}` must be positive, not {v}", path.join(".")),
        ))
    }
}

/// `--stack auto`: each strategy on its own stack's shipped profile.
pub const STACK_AUTO: &str = "auto";

/// `--stack none`: every strategy profile-free (the default).
pub const STACK_NONE: &str = "none";

/// The plausible range of each rate and size a table states, for any accelerator past or
/// planned (an H100 SXM is about 1e15 FLOP/s, 3.35e12 B/s of HBM and 8e10 bytes): a number
/// outside it is a typo or a unit mistake, which would otherwise print infinite or zero seconds.
pub(crate) const MAGNITUDES: [(&str, f64, f64, &str); 4] = [
    ("FLOP/s", 1e9, 1e18, "1 GFLOP/s to 1 EFLOP/s"),
    ("B/s", 1e8, 1e15, "100 MB/s to 1 PB/s"),
    ("bytes", 1e8, 1e15, "100 MB to 1 PB"),
    ("link B/s", 1e6, 1e14, "1 MB/s to 100 TB/s"),
];

impl Calibration {
    /// Refuses a peak, bandwidth or capacity outside [`MAGNITUDES`] (zero and negative ones
    /// are refused with their own message by [`Calibration::load`]).
    fn check_magnitudes(&self, src: &Source) -> Result<()> {
        let d = &self.device;
        let mut numbers: Vec<(Vec<&str>, &Rational, usize)> = d
            .peak_flops
            .iter()
            .map(|(k, v)| (vec!["device", "peak_flops", k.as_str()], &v.value, 0))
            .collect();
        numbers.push((
            vec!["device", "memory_bandwidth"],
            &d.memory_bandwidth.value,
            1,
        ));
        numbers.push((
            vec!["device", "memory_capacity"],
            &d.memory_capacity.value,
            2,
        ));
        numbers.push((
            vec!["tiers", "intra", "bandwidth"],
            &self.tiers.intra.bandwidth.value,
            3,
        ));
        numbers.push((
            vec!["tiers", "inter", "bandwidth"],
            &self.tiers.inter.bandwidth.value,
            3,
        ));
        for (path, v, m) in numbers {
            let (unit, lo, hi, range) = MAGNITUDES[m];
            let x = v.to_f64().unwrap_or(f64::INFINITY);
            if x > 0.0 && !(lo..=hi).contains(&x) {
                return Err(src.error_at(
                    &path,
                    format!(
                        "`{}` = {x:e} {unit} is absurd for an accelerator (expected {range}): a typo or a unit mistake?",
                        path.join(".")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Loads and validates a calibration from its text.
    pub fn load(src: &Source) -> Result<Calibration> {
        let c: Calibration = src.parse()?;
        c.check_magnitudes(src)?;
        c.check_device(src)?;
        c.check_efficiencies(src)?;
        c.check_scaled_formats(src)?;
        c.check_kernel_model(src)?;
        c.check_nodes(src)?;
        c.check_tiers(src)?;
        if let Some(t) = &c.topology {
            t.check(src, c.gpus_per_node())?;
        }
        Ok(c)
    }

    /// The device's peaks, bandwidth and capacity are positive; bf16 has a peak.
    fn check_device(&self, src: &Source) -> Result<()> {
        let d = &self.device;
        for (k, v) in &d.peak_flops {
            positive(src, &["device", "peak_flops", k], &v.value)?;
        }
        if !d.peak_flops.contains_key("bf16") {
            return Err(src.error_at(
                &["device", "peak_flops"],
                "`peak_flops` needs a `bf16` entry",
            ));
        }
        positive(
            src,
            &["device", "memory_bandwidth"],
            &d.memory_bandwidth.value,
        )?;
        if let Some(t) = &d.tdp {
            positive(src, &["device", "tdp"], &t.value)?;
        }
        positive(
            src,
            &["device", "memory_capacity"],
            &d.memory_capacity.value,
        )
    }

    /// The block-scaled formats a table lists are known ones, each once.
    fn check_scaled_formats(&self, src: &Source) -> Result<()> {
        let Some(l) = &self.device.scaled_formats else {
            return Ok(());
        };
        for (i, f) in l.formats.iter().enumerate() {
            let what = if !SCALED_FORMATS.contains(&f.as_str()) {
                "not a block-scaled format"
            } else if l.formats[..i].contains(f) {
                "listed twice"
            } else {
                continue;
            };
            return Err(src.error_at(
                &["device", "scaled_formats", "formats"],
                format!(
                    "`{f}` is {what} (the formats are {})",
                    SCALED_FORMATS.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// Attention kernels have label names, and every efficiency curve is in (0, 1].
    fn check_efficiencies(&self, src: &Source) -> Result<()> {
        let e = &self.device.efficiency;
        if let Some(bad) = e.attention_kernels.keys().find(|n| !is_label(n)) {
            return Err(src.error_at(
                &["device", "efficiency", "attention_kernels", bad],
                format!(
                    "attention kernel name `{bad}` must be lowercase letters, digits and dashes, \
                     starting with a letter"
                ),
            ));
        }
        let mut curves = vec![
            (vec!["matmul"], &e.matmul),
            (vec!["memory_bound"], &e.memory_bound),
        ];
        curves.extend(e.attention.iter().map(|a| (vec!["attention"], a)));
        curves.extend(e.matmul_fp8.iter().map(|a| (vec!["matmul_fp8"], a)));
        curves.extend(
            e.attention_kernels
                .iter()
                .map(|(n, c)| (vec!["attention_kernels", n.as_str()], c)),
        );
        for (name, e) in curves {
            if e.min() <= Rational::zero() || e.max() > Rational::one() {
                let at: Vec<&str> = ["device", "efficiency"]
                    .into_iter()
                    .chain(name.clone())
                    .collect();
                return Err(src.error_at(
                    &at,
                    format!(
                        "efficiency `{}` must be in (0, 1], not {}",
                        name.join("."),
                        if e.min() <= Rational::zero() {
                            e.min()
                        } else {
                            e.max()
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The kernel overhead, the compute share a collective takes and the GEMM tiling are in
    /// their ranges.
    fn check_kernel_model(&self, src: &Source) -> Result<()> {
        let d = &self.device;
        if let Some(o) = &d.kernel_overhead {
            if o.value.is_negative() || o.value > Rational::new(1.into(), 1000.into()) {
                return Err(src.error_at(
                    &["device", "kernel_overhead"],
                    format!(
                        "`kernel_overhead` must be from 0 to 1 ms per kernel, not {} s",
                        o.value
                    ),
                ));
            }
        }
        if let Some(o) = &d.comm_contention {
            if o.value.is_negative() || o.value >= Rational::one() {
                return Err(src.error_at(
                    &["device", "comm_contention"],
                    format!("`comm_contention` must be in [0, 1), not {}", o.value),
                ));
            }
        }
        if let Some(o) = &d.pace_spread {
            if o.value.is_negative() || o.value > Rational::new(1.into(), 5.into()) {
                return Err(src.error_at(
                    &["device", "pace_spread"],
                    format!(
                        "`pace_spread` (the standard deviation of a device's rate over the \
                         median's) must be from 0 to 0.2, not {}",
                        o.value
                    ),
                ));
            }
        }
        if let Some(t) = &d.gemm_tiling {
            let sms = &t.multiprocessors.value;
            if !sms.is_integer()
                || !sms.is_positive()
                || *sms > Rational::from_integer(100_000.into())
            {
                return Err(src.error_at(
                    &["device", "gemm_tiling", "multiprocessors"],
                    format!("`multiprocessors` must be a whole number from 1 to 100000, not {sms}"),
                ));
            }
            if t.tiles.is_empty() || t.tiles.iter().flatten().any(|&d| d == 0 || d > 4096) {
                return Err(src.error_at(
                    &["device", "gemm_tiling", "tiles"],
                    "`tiles` needs at least one [rows, columns] pair, each from 1 to 4096",
                ));
            }
        }
        Ok(())
    }

    /// Devices per node: a whole number in range.
    fn check_nodes(&self, src: &Source) -> Result<()> {
        let g = &self.gpus_per_node.value;
        let whole = g
            .is_integer()
            .then(|| g.to_integer().to_u64())
            .flatten()
            .ok_or_else(|| {
                format!(
                    "`gpus_per_node` must be a whole number from 1 to {}, not {g}",
                    crate::strategy::MAX_GPUS_PER_NODE
                )
            });
        if let Err(why) =
            whole.and_then(|n| crate::strategy::check_gpus_per_node(n).map_err(|e| e.to_string()))
        {
            return Err(src.error_at(&["gpus_per_node"], why));
        }
        Ok(())
    }

    /// Each link tier: positive bandwidth, efficiency in (0, 1], latency not negative, known
    /// collectives with positive bus bandwidths, a known algorithm.
    fn check_tiers(&self, src: &Source) -> Result<()> {
        for (tier, l) in [("intra", &self.tiers.intra), ("inter", &self.tiers.inter)] {
            positive(src, &["tiers", tier, "bandwidth"], &l.bandwidth.value)?;
            if !l.efficiency.value.is_positive() || l.efficiency.value > Rational::one() {
                return Err(src.error_at(
                    &["tiers", tier, "efficiency"],
                    "link efficiency must be in (0, 1]",
                ));
            }
            if l.latency.value.is_negative() {
                return Err(
                    src.error_at(&["tiers", tier, "latency"], "latency must not be negative")
                );
            }
            for (kind, curve) in &l.busbw {
                if !COLLECTIVE_KINDS.contains(&kind.as_str()) {
                    return Err(src.error_at(
                        &["tiers", tier, "busbw", kind],
                        format!(
                            "unknown collective `{kind}` (one of {})",
                            COLLECTIVE_KINDS.join(", ")
                        ),
                    ));
                }
                if curve.min() <= Rational::zero() {
                    return Err(src.error_at(
                        &["tiers", tier, "busbw", kind],
                        "bus bandwidth must be positive",
                    ));
                }
            }
            if !["ring", "tree", "nccl"].contains(&l.algorithm.as_str()) {
                return Err(src.error_at(
                    &["tiers", tier, "algorithm"],
                    format!("unknown algorithm `{}` (ring, tree or nccl)", l.algorithm),
                ));
            }
        }
        Ok(())
    }

    /// Loads a calibration named on the command line: a file, or a shipped table's name,
    /// optionally followed by `@KERNEL` to time fused attention with one of the table's
    /// `attention_kernels` instead of its `attention` curve. A what-if machine is named as
    /// symshard prints it, `TABLE+what-if(CHANGES)` (see [`Calibration::with_what_if`]), so
    /// that a name copied from any output names the same machine again.
    pub fn resolve(arg: &str) -> Result<Calibration> {
        if !Path::new(arg).is_file() {
            if let Some((table, changes)) = whatif::split_name(arg) {
                return Calibration::resolve(table)?.with_what_if(changes);
            }
            if let Some((table, kernel)) = arg.rsplit_once('@') {
                return Calibration::resolve_table(table)?.with_attention_kernel(kernel);
            }
        }
        Calibration::resolve_table(arg)
    }

    /// The table `--calib` names with its attention kernel chosen: `attention` becomes the
    /// named entry of `attention_kernels`, and the name becomes `TABLE@KERNEL`.
    pub fn with_attention_kernel(mut self, kernel: &str) -> Result<Calibration> {
        let e = &mut self.device.efficiency;
        match e.attention_kernels.get(kernel) {
            Some(curve) => {
                e.attention = Some(curve.clone());
                self.name = format!("{}@{kernel}", self.name);
                Ok(self)
            }
            None => {
                let names: Vec<&str> = e.attention_kernels.keys().map(String::as_str).collect();
                Err(Error::Usage(format!(
                    "calibration `{}` has no attention kernel `{kernel}` ({})",
                    self.name,
                    if names.is_empty() {
                        "it lists none under `device.efficiency.attention_kernels`".to_string()
                    } else {
                        format!("its kernels: {}", names.join(", "))
                    }
                )))
            }
        }
    }

    /// Loads a table by file or shipped name.
    fn resolve_table(arg: &str) -> Result<Calibration> {
        let path = Path::new(arg);
        if arg.ends_with(".yaml") || arg.ends_with(".yml") || path.is_file() {
            return Calibration::load(&Source::read(path)?);
        }
        match embedded::CALIBRATIONS.iter().find(|(s, _)| *s == arg) {
            Some((s, text)) => Calibration::load(&Source::new(
                embedded::display_path("calibration", s),
                *text,
            )),
            None => {
                let names: Vec<&str> = embedded::CALIBRATIONS.iter().map(|(s, _)| *s).collect();
                Err(Error::Usage(format!(
                    "unknown calibration `{arg}` (shipped: {})",
                    names.join(", ")
                )))
            }
        }
    }

    /// The embedded reference machine.
    pub fn reference() -> Result<Calibration> {
        Calibration::resolve(REFERENCE)
    }

    /// The machine named on the command line, or the reference machine.
    pub fn resolve_or_reference(arg: Option<&str>) -> Result<Calibration> {
        Calibration::resolve(arg.unwrap_or(REFERENCE))
    }

    /// The table as the relative cost's formulas see it: every matmul-like and fused attention
    /// kernel at the matmul curve's plateau, no tiling and no per-kernel time, so that the
    /// relative cost has no kernel term (`parallel::kernels`) and is a polynomial in the
    /// model's symbols. The balances κ are unchanged.
    pub fn at_plateau(&self) -> Calibration {
        let mut c = self.clone();
        let e = &mut c.device.efficiency;
        e.matmul = Curve {
            points: vec![(Rational::one(), e.matmul.max())],
            constant: true,
            source: format!("{} (at its plateau)", e.matmul.source),
        };
        e.attention = None;
        e.attention_kernels.clear();
        e.matmul_fp8 = None;
        c.device.kernel_overhead = None;
        c.device.gemm_tiling = None;
        c.stack = None;
        c.per_row = None;
        c
    }

    /// The table with the stack profiles `--stack` names: `none` (also `None`, the default)
    /// prices every strategy profile-free; `auto` prices each strategy on the shipped profile of
    /// the stack it assumes; a file or a shipped profile's name adds that profile's seconds to
    /// every strategy.
    pub fn with_stack(mut self, arg: Option<&str>) -> Result<Calibration> {
        match arg.unwrap_or(STACK_NONE) {
            STACK_AUTO => {
                self.stack = None;
                self.per_row = Some(stack::PerRow::shipped()?);
            }
            STACK_NONE => {
                self.stack = None;
                self.per_row = None;
            }
            a => {
                self.stack = Some(stack::StackProfile::resolve(a)?);
                self.per_row = None;
            }
        }
        Ok(self)
    }

    /// The stack profile a strategy assumed to run on `stack` is timed with: under per-row
    /// profiles that stack's (none where no shipped profile is labelled for it), otherwise the
    /// one the table gives every strategy (none: profile-free).
    pub fn profile_on(&self, stack: stack::Stack) -> Option<&stack::StackProfile> {
        match &self.per_row {
            Some(per_row) => per_row.profile(stack),
            None => self.stack.as_ref(),
        }
    }

    /// The layouts the stack profile named for every strategy (`--stack NAME`) runs, where it
    /// says ([`stack::Supports`]); `None` under per-row profiles or none.
    pub fn stack_supports(&self) -> Option<&stack::Supports> {
        self.stack.as_ref().and_then(|p| p.supports.as_ref())
    }

    /// [`Calibration::profile_on`] for the stack a strategy of knobs `k` assumes
    /// ([`stack::Stack::of`]).
    pub fn profile_for(&self, k: &crate::strategy::Knobs) -> Option<&stack::StackProfile> {
        self.profile_on(stack::Stack::of(k))
    }

    /// The stack profiles as a header names them: one profile, per row, or none (`None`:
    /// profile-free).
    pub fn stack_text(&self) -> Option<String> {
        match (&self.stack, &self.per_row) {
            (Some(p), _) => Some(p.describe()),
            (None, Some(r)) => Some(r.describe()),
            (None, None) => None,
        }
    }

    /// Achievable bf16 FLOP/s of large matmul-like kernels (the plateau of the matmul curve).
    pub fn achievable_flops(&self) -> Rational {
        &self.device.peak_flops["bf16"].value * self.device.efficiency.matmul.max()
    }

    /// Achievable HBM bytes per second of large streaming kernels.
    pub fn achievable_memory_bandwidth(&self) -> Rational {
        &self.device.memory_bandwidth.value * self.device.efficiency.memory_bound.max()
    }

    /// The share of an overlapped collective's time that overlapping it with compute saves:
    /// 1 − `comm_contention` (the share of compute throughput a running collective takes), 1
    /// where the table gives none.
    pub fn overlap_saving(&self) -> Rational {
        let one = Rational::from_integer(1.into());
        match &self.device.comm_contention {
            Some(c) => &one - &c.value,
            None => one,
        }
    }

    /// Machine balance κ_hbm: FLOP-equivalents one byte of HBM traffic costs.
    pub fn hbm_balance(&self) -> Rational {
        self.achievable_flops() / self.achievable_memory_bandwidth()
    }

    /// The link class of a tier.
    pub fn link(&self, tier: Tier) -> &Link {
        match tier {
            Tier::Intra => &self.tiers.intra,
            Tier::Inter => &self.tiers.inter,
        }
    }

    /// Achievable bytes per second of a tier.
    pub fn achievable_bandwidth(&self, tier: Tier) -> Rational {
        let l = self.link(tier);
        &l.bandwidth.value * &l.efficiency.value
    }

    /// Machine balance κ of a tier: FLOP-equivalents one byte on it costs (achievable FLOP/s ÷
    /// achievable bytes/s). DESIGN §3.
    pub fn balance(&self, tier: Tier) -> Rational {
        self.achievable_flops() / self.achievable_bandwidth(tier)
    }

    /// Device memory in bytes.
    pub fn memory_bytes(&self) -> Rational {
        self.device.memory_capacity.value.clone()
    }

    /// The memory a strategy may fill on one device unless told otherwise: the capacity less
    /// [`DEFAULT_HEADROOM`], in whole bytes. What "fits" means on this table for every command.
    pub fn usable_memory_bytes(&self) -> Rational {
        less_share(&self.memory_bytes(), &default_headroom_percent())
    }

    /// Where the table has no GEMM efficiency of a low-precision recipe's own and borrows its
    /// bf16 matmul curve: the line that says so, for the headers of what is timed under that
    /// precision (`None` for bf16 and autocast, and for FP8 recipes on a table with an
    /// `efficiency.matmul_fp8` curve). No table has an FP4 curve: no FP4 GEMM sweep is cited.
    pub fn borrowed_gemm_curve(&self, p: crate::strategy::Precision) -> Option<String> {
        let bytes = p.fp8_bytes()?;
        let (format, field) = if bytes.fp4 {
            ("FP4", "no FP4 GEMM efficiency curve")
        } else if self.device.efficiency.matmul_fp8.is_none() {
            (
                "FP8",
                "no measured FP8 GEMM efficiency (efficiency.matmul_fp8)",
            )
        } else {
            return None;
        };
        Some(format!(
            "precision {p}: {} has {field}; its {format} GEMMs are timed at the {} peak × the bf16 matmul curve",
            self.name,
            format.to_lowercase()
        ))
    }

    /// [`Calibration::borrowed_gemm_curve`] of each of `precisions`, each line once, in order.
    pub fn borrowed_gemm_curves(
        &self,
        precisions: impl IntoIterator<Item = crate::strategy::Precision>,
    ) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for line in precisions
            .into_iter()
            .filter_map(|p| self.borrowed_gemm_curve(p))
        {
            if !out.contains(&line) {
                out.push(line);
            }
        }
        out
    }

    /// Devices per node.
    pub fn gpus_per_node(&self) -> u64 {
        self.gpus_per_node
            .value
            .to_integer()
            .try_into()
            .unwrap_or(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A low-precision recipe's GEMMs timed on a borrowed curve are named: FP8 on a table
    /// without `efficiency.matmul_fp8`, FP4 on every table; nothing for bf16 and autocast, or
    /// for FP8 once the table has its own curve.
    #[test]
    fn a_borrowed_gemm_curve_is_said() {
        use crate::strategy::Precision;
        let mut h100 = Calibration::resolve("h100-sxm").unwrap();
        for p in [Precision::Bf16, Precision::Autocast] {
            assert_eq!(h100.borrowed_gemm_curve(p), None);
        }
        for p in [Precision::Fp8, Precision::Fp8Current, Precision::Fp8Block] {
            let line = h100.borrowed_gemm_curve(p).unwrap();
            assert!(
                line.starts_with(&format!("precision {p}: h100-sxm")),
                "{line}"
            );
            assert!(line.contains("efficiency.matmul_fp8"), "{line}");
        }
        h100.device.efficiency.matmul_fp8 = Some(h100.device.efficiency.matmul.clone());
        assert_eq!(h100.borrowed_gemm_curve(Precision::Fp8), None);
        let b200 = Calibration::resolve("b200").unwrap();
        let line = b200.borrowed_gemm_curve(Precision::Nvfp4).unwrap();
        assert!(
            line.contains("FP4 GEMMs are timed at the fp4 peak"),
            "{line}"
        );
    }

    #[test]
    fn exact_decimals() {
        assert_eq!(
            parse_exact("3.35e12"),
            Some(Rational::from_integer(3_350_000_000_000i64.into()))
        );
        assert_eq!(
            parse_exact("1e-6"),
            Some(Rational::new(1.into(), 1_000_000.into()))
        );
        assert_eq!(parse_exact("0.8"), Some(Rational::new(4.into(), 5.into())));
        assert_eq!(parse_exact("abc"), None);
        assert_eq!(parse_exact("1e99999"), None);
    }

    /// Memory and bandwidth may be written with byte units, as on the command line; anything
    /// else that is not a number is refused with the text and its place.
    #[test]
    fn byte_units_are_read_exactly() {
        let base = include_str!("../../calibration/a100-80gb.yaml");
        let with = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            Calibration::load(&Source::new("units.yaml", base.replacen(from, to, 1)))
        };
        let gb = with("value: 80e9", "value: 80GB").unwrap();
        assert_eq!(
            gb.device.memory_capacity.value,
            Rational::from_integer(80_000_000_000i64.into())
        );
        let gib = with("value: 80e9", "value: 80 GiB").unwrap();
        assert_eq!(
            gib.device.memory_capacity.value,
            Rational::from_integer((80i64 << 30).into())
        );
        let bw = with("value: 2039e9", "value: 2.039TB/s").unwrap();
        assert_eq!(
            bw.device.memory_bandwidth.value,
            Rational::from_integer(2_039_000_000_000i64.into())
        );
        let err = with("value: 80e9", "value: 80 parsecs")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("80 parsecs") && err.contains("units.yaml"),
            "{err}"
        );
    }

    #[test]
    fn reference_machine_loads() {
        let c = Calibration::reference().unwrap();
        // κ_intra = 0.8·989e12 / (0.8·450e9) = 989000/450.
        assert_eq!(
            c.balance(Tier::Intra),
            Rational::new(989_000.into(), 450.into())
        );
    }
}
