//! Calibration tables: a machine's peak rates, capacities and links, each number with its
//! source. They turn symbolic costs into machine balance ratios (for ranking) and into seconds
//! (for timelines). Numbers are read exactly: `3.35e12` is the rational 3350000000000.

use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::strategy::Tier;
use crate::sym::Rational;
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

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
                parse_exact(v).ok_or_else(|| E::custom(format!("`{v}` is not a number")))
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

/// Achievable fractions of peak, per class of operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Matmul-like operators (of the peak FLOP/s).
    pub matmul: Sourced,
    /// Memory-bound operators (of the HBM bandwidth).
    pub memory_bound: Sourced,
}

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
    /// Rates measured on real hardware, kept beside the datasheet ones (never required).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured: BTreeMap<String, Sourced>,
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
    /// Collective algorithm (`ring`; `tree` for latency-bound small messages).
    pub algorithm: String,
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
}

impl Calibration {
    /// Loads and validates a calibration from its text.
    pub fn load(src: &Source) -> Result<Calibration> {
        let c: Calibration = serde_yaml::from_str(&src.text).map_err(|e| src.yaml_error(e))?;
        let positive = |path: &[&str], v: &Rational| -> Result<()> {
            if v.is_positive() {
                Ok(())
            } else {
                Err(src.error_at(
                    path,
                    format!("`{}` must be positive, not {v}", path.join(".")),
                ))
            }
        };
        for (k, v) in &c.device.peak_flops {
            positive(&["device", "peak_flops", k], &v.value)?;
        }
        if !c.device.peak_flops.contains_key("bf16") {
            return Err(src.error_at(
                &["device", "peak_flops"],
                "`peak_flops` needs a `bf16` entry",
            ));
        }
        positive(
            &["device", "memory_bandwidth"],
            &c.device.memory_bandwidth.value,
        )?;
        positive(
            &["device", "memory_capacity"],
            &c.device.memory_capacity.value,
        )?;
        for (name, e) in [
            ("matmul", &c.device.efficiency.matmul),
            ("memory_bound", &c.device.efficiency.memory_bound),
        ] {
            if !e.value.is_positive() || e.value > Rational::one() {
                return Err(src.error_at(
                    &["device", "efficiency", name],
                    format!("efficiency `{name}` must be in (0, 1], not {}", e.value),
                ));
            }
        }
        let g = &c.gpus_per_node.value;
        if !g.is_integer() || !g.is_positive() || *g > Rational::from_integer(1024.into()) {
            return Err(src.error_at(
                &["gpus_per_node"],
                format!("`gpus_per_node` must be a whole number from 1 to 1024, not {g}"),
            ));
        }
        for (tier, l) in [("intra", &c.tiers.intra), ("inter", &c.tiers.inter)] {
            positive(&["tiers", tier, "bandwidth"], &l.bandwidth.value)?;
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
            if !["ring", "tree"].contains(&l.algorithm.as_str()) {
                return Err(src.error_at(
                    &["tiers", tier, "algorithm"],
                    format!("unknown algorithm `{}` (ring or tree)", l.algorithm),
                ));
            }
        }
        Ok(c)
    }

    /// Loads a calibration named on the command line: a file, or a shipped table's name.
    pub fn resolve(arg: &str) -> Result<Calibration> {
        let path = Path::new(arg);
        if arg.ends_with(".yaml") || arg.ends_with(".yml") || path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
            return Calibration::load(&Source::new(path, text));
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

    /// Achievable bf16 FLOP/s of matmul-like work.
    pub fn achievable_flops(&self) -> Rational {
        &self.device.peak_flops["bf16"].value * &self.device.efficiency.matmul.value
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
