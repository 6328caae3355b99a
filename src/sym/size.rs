//! Memory sizes as people write them (`80GB`, `75.5GiB`), read exactly.

use super::Rational;
use num_traits::Zero;

/// Why a memory size cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// A memory size with an unknown unit.
    #[error("memory `{text}`: unknown unit `{unit}` (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")]
    Unit {
        /// The size given.
        text: String,
        /// Its unit.
        unit: String,
    },
    /// A memory size in bits (`Gb`, `Mb`: a lower-case b), where bytes are meant.
    #[error("memory `{text}`: `{unit}` is bits (a lower-case b); give bytes: {suggest}")]
    Bits {
        /// The size given.
        text: String,
        /// Its unit.
        unit: String,
        /// The unit in bytes the user probably meant.
        suggest: String,
    },
    /// A memory size that is not a number.
    #[error("memory `{0}`: expected a number with an optional unit, such as 80GB or 75.5GiB")]
    Number(String),
    /// A memory size of zero.
    #[error("memory `{0}` must be positive")]
    NotPositive(String),
    /// A memory size with a fraction of a byte.
    #[error("memory `{0}` is not a whole number of bytes")]
    Fraction(String),
    /// A memory size beyond any device.
    #[error("memory `{0}` is absurd (more than 2^80 bytes)")]
    Absurd(String),
}

/// Parses a memory size: bytes as a whole number (`80000000000`), or a number with a unit —
/// `KB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024), `B`
/// for bytes; decimals allowed (`75.5GB`), the prefix in either case, a space allowed before the
/// unit. A lower-case `b` is a bit (`80Gb` is 10 GB), so it is refused rather than read as bytes.
/// The result is exact and must be a positive whole number of bytes.
pub fn parse_memory(text: &str) -> Result<Rational, MemoryError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    if let Some(prefix) = unit.strip_suffix('b') {
        return Err(MemoryError::Bits {
            text: text.into(),
            unit: unit.into(),
            suggest: format!("{num}{}B", prefix.to_ascii_uppercase().replace('I', "i")),
        });
    }
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(MemoryError::Unit {
                text: text.into(),
                unit: unit.into(),
            })
        }
    };
    let value = decimal(num).ok_or_else(|| MemoryError::Number(text.into()))?;
    let bytes = value * Rational::from_integer(scale.into());
    if bytes <= Rational::zero() {
        return Err(MemoryError::NotPositive(text.into()));
    }
    if !bytes.is_integer() {
        return Err(MemoryError::Fraction(text.into()));
    }
    if bytes > Rational::from_integer((1u128 << 80).into()) {
        return Err(MemoryError::Absurd(text.into()));
    }
    Ok(bytes)
}

/// An exact decimal (`75`, `75.5`, `1_000`).
pub fn decimal(s: &str) -> Option<Rational> {
    let s: String = s.chars().filter(|c| *c != '_').collect();
    if s.is_empty() || s.len() > 40 {
        return None;
    }
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let digits: num_bigint::BigInt = format!("{int}{frac}").parse().ok()?;
    let den = num_bigint::BigInt::from(10u32).pow(frac.len() as u32);
    Some(Rational::new(digits, den))
}
