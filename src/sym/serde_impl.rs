//! Serialization of [`Poly`] as its canonical text.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::poly::Poly;

impl Serialize for Poly {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct PolyVisitor;

impl Visitor<'_> for PolyVisitor {
    type Value = Poly;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a formula string or a number")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Poly, E> {
        Poly::parse(v).map_err(|e| E::custom(format!("invalid formula `{v}`: {e}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Poly, E> {
        Ok(Poly::int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Poly, E> {
        Ok(Poly::from_bigint(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Poly, E> {
        Ok(Poly::from_bigint(v.into()))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Poly, E> {
        Ok(Poly::from_bigint(v.into()))
    }

    /// Floats are read through their shortest decimal text, so `0.1`
    /// becomes exactly `1/10`.
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Poly, E> {
        if !v.is_finite() {
            return Err(E::custom(format!("non-finite number {v} is not a formula")));
        }
        let text = format!("{}", v.abs());
        let p = Poly::parse(&text).map_err(|e| E::custom(format!("number {v}: {e}")))?;
        Ok(if v < 0.0 { -p } else { p })
    }
}

impl<'de> Deserialize<'de> for Poly {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Poly, D::Error> {
        deserializer.deserialize_any(PolyVisitor)
    }
}
