//! What-if machines: a calibration table with named quantities changed (`--with
//! nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`). The derived table is named
//! `TABLE+what-if(CHANGES)`, each changed number's source says what it was and where that came
//! from, and [`WhatIf`] records the changes so that every output can mark the machine.

use super::{bytes_with_unit, parse_exact, Calibration, Sourced, MAGNITUDES};
use crate::error::{Error, Result};
use crate::sym::Rational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use serde::Serialize;

/// What a quantity measures: how its values are read and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// FLOP/s.
    Flops,
    /// Bytes per second of HBM.
    HbmRate,
    /// Bytes of HBM.
    Bytes,
    /// Bytes per second of a link, per device and direction.
    LinkRate,
    /// Seconds.
    Seconds,
    /// Devices per node.
    Count,
    /// Watts.
    Watts,
    /// A fraction of a rate (a spread), from 0 to 0.2.
    Fraction,
}

/// The quantities every table has, by name: what each is and where it sits in the table.
const FIELDS: [(&str, Kind, &str); 9] = [
    ("hbm.bandwidth", Kind::HbmRate, "device.memory_bandwidth"),
    ("hbm.capacity", Kind::Bytes, "device.memory_capacity"),
    (
        "nvlink.bandwidth",
        Kind::LinkRate,
        "tiers.intra.bandwidth (and its busbw curves)",
    ),
    (
        "network.bandwidth",
        Kind::LinkRate,
        "tiers.inter.bandwidth (and its busbw curves)",
    ),
    ("nvlink.latency", Kind::Seconds, "tiers.intra.latency"),
    ("network.latency", Kind::Seconds, "tiers.inter.latency"),
    (
        "domain",
        Kind::Count,
        "gpus_per_node (the NVLink domain size)",
    ),
    ("device.tdp", Kind::Watts, "device.tdp"),
    (
        "device.pace_spread",
        Kind::Fraction,
        "device.pace_spread (the spread of device rates)",
    ),
];

/// One changed quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// Its dotted name (`nvlink.bandwidth`).
    pub field: String,
    /// The value as given (`x2`, `141GB`).
    pub given: String,
    /// The table's value (none where the table gives none: a TDP).
    #[serde(serialize_with = "ser_opt_rational")]
    pub before: Option<Rational>,
    /// The new value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub after: Rational,
    /// How it is read and printed.
    #[serde(skip)]
    kind: Kind,
}

fn ser_opt_rational<S: serde::Serializer>(
    r: &Option<Rational>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match r {
        Some(r) => s.serialize_str(&r.to_string()),
        None => s.serialize_none(),
    }
}

/// The changes that derived a what-if machine from a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// The table it was derived from.
    pub base: String,
    /// The changes, in the order given.
    pub changes: Vec<Change>,
}

impl WhatIf {
    /// `nvlink.bandwidth 450 GB/s → 900 GB/s (x2), domain 8 → 72`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .changes
            .iter()
            .map(|c| {
                let kind = c.kind;
                let before = c
                    .before
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |b| show(kind, b));
                let rel = if c.given.starts_with(['x', '×']) {
                    format!(" ({})", c.given)
                } else {
                    String::new()
                };
                format!("{} {before} → {}{rel}", c.field, show(kind, &c.after))
            })
            .collect();
        format!("{} with {}", self.base, parts.join(", "))
    }

    /// The line tables print under their header.
    pub fn line(&self) -> String {
        format!(
            "what-if machine: {} (derived, not a measured machine)",
            self.describe()
        )
    }
}

/// A value as people read it.
fn show(kind: Kind, r: &Rational) -> String {
    match kind {
        Kind::Flops => crate::units::si(r, 4, "FLOP/s"),
        Kind::HbmRate | Kind::LinkRate => crate::units::si(r, 4, "B/s"),
        Kind::Bytes => crate::units::si(r, 4, "B"),
        Kind::Seconds => {
            let us = r * Rational::from_integer(1_000_000.into());
            format!("{} µs", crate::units::si(&us, 4, ""))
        }
        Kind::Count => r.to_string(),
        Kind::Watts => crate::units::si(r, 4, "W"),
        Kind::Fraction => {
            let pct = r * Rational::from_integer(100.into());
            format!("{} %", crate::units::si(&pct, 4, "").trim())
        }
    }
}

/// Every name `--with` takes for this table: the fixed ones and a peak per dtype the table
/// gives.
pub fn field_names(c: &Calibration) -> Vec<String> {
    let mut names: Vec<String> = c
        .device
        .peak_flops
        .keys()
        .map(|k| format!("device.peak.{k}"))
        .collect();
    names.extend(FIELDS.iter().map(|(n, _, _)| n.to_string()));
    names
}

/// What `--with` refuses, with the names it takes (the option's name is added by
/// [`Calibration::with_what_if_as`]).
fn refuse(c: &Calibration, message: String) -> Error {
    Error::Usage(format!(
        "{message} (the quantities of `{}`: {})",
        c.name,
        field_names(c).join(", ")
    ))
}

/// Reads a value of `kind`: a number, or with the unit people write it in.
fn absolute(kind: Kind, text: &str) -> Option<Rational> {
    let t = text.trim();
    if let Some(r) = parse_exact(t) {
        return Some(r);
    }
    match kind {
        Kind::HbmRate | Kind::Bytes | Kind::LinkRate => bytes_with_unit(t),
        Kind::Seconds => {
            let (num, scale) = [
                ("ns", 1_000_000_000u64),
                ("us", 1_000_000),
                ("µs", 1_000_000),
            ]
            .into_iter()
            .chain([("ms", 1_000), ("s", 1)])
            .find_map(|(u, s)| t.strip_suffix(u).map(|n| (n, s)))?;
            Some(parse_exact(num.trim())? / Rational::from_integer(scale.into()))
        }
        Kind::Watts => parse_exact(t.strip_suffix('W')?.trim()),
        Kind::Fraction => {
            Some(parse_exact(t.strip_suffix('%')?.trim())? / Rational::from_integer(100.into()))
        }
        Kind::Flops | Kind::Count => None,
    }
}

/// What a value of each kind is written as, for errors.
fn example(kind: Kind) -> &'static str {
    match kind {
        Kind::Flops => "a number of FLOP/s such as 2.5e15, or x2",
        Kind::HbmRate | Kind::LinkRate => "bytes per second such as 900GB/s or 9e11, or x2",
        Kind::Bytes => "bytes such as 141GB, 192GiB or 1.41e11, or x2",
        Kind::Seconds => "seconds such as 2us, 1e-6 or 0.5ms, or x0.5",
        Kind::Count => "a whole number of devices such as 72, or x2",
        Kind::Watts => "watts such as 700W or 700, or x1.5",
        Kind::Fraction => "a fraction such as 0.01 or 1%, or x0.5",
    }
}

/// The quantity's place in the table.
fn slot<'a>(c: &'a mut Calibration, name: &str) -> Option<&'a mut Option<Sourced>> {
    match name {
        "device.tdp" => Some(&mut c.device.tdp),
        "device.pace_spread" => Some(&mut c.device.pace_spread),
        _ => None,
    }
}

/// The number a name refers to (a mandatory one).
fn number<'a>(c: &'a mut Calibration, name: &str) -> Option<&'a mut Sourced> {
    Some(match name {
        "hbm.bandwidth" => &mut c.device.memory_bandwidth,
        "hbm.capacity" => &mut c.device.memory_capacity,
        "nvlink.bandwidth" => &mut c.tiers.intra.bandwidth,
        "network.bandwidth" => &mut c.tiers.inter.bandwidth,
        "nvlink.latency" => &mut c.tiers.intra.latency,
        "network.latency" => &mut c.tiers.inter.latency,
        "domain" => &mut c.gpus_per_node,
        _ => {
            let dtype = name.strip_prefix("device.peak.")?;
            c.device.peak_flops.get_mut(dtype)?
        }
    })
}

/// The kind of a name the table has.
fn kind_of(c: &Calibration, name: &str) -> Option<Kind> {
    if let Some((_, k, _)) = FIELDS.iter().find(|(n, _, _)| *n == name) {
        return Some(*k);
    }
    let dtype = name.strip_prefix("device.peak.")?;
    c.device
        .peak_flops
        .contains_key(dtype)
        .then_some(Kind::Flops)
}

/// Refuses a new value out of range for its kind: not positive, a fraction of a device, or
/// outside the magnitudes a table may state.
fn check_value(c: &Calibration, name: &str, kind: Kind, v: &Rational) -> Result<()> {
    if kind == Kind::Fraction {
        return if v.is_negative() || *v > Rational::new(1.into(), 5.into()) {
            Err(refuse(
                c,
                format!("`{name}` must be from 0 to 0.2 (20 %), not {v}"),
            ))
        } else {
            Ok(())
        };
    }
    if !v.is_positive() {
        return Err(refuse(c, format!("`{name}` must be positive, not {v}")));
    }
    if kind == Kind::Count {
        let whole = v.is_integer().then(|| v.to_integer().to_u64()).flatten();
        return match whole.map(crate::strategy::check_gpus_per_node) {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(refuse(c, format!("`{name}` = {v}: {e}"))),
            None => Err(refuse(
                c,
                format!("`{name}` must be a whole number of devices, not {v}"),
            )),
        };
    }
    let m = match kind {
        Kind::Flops => 0,
        Kind::HbmRate => 1,
        Kind::Bytes => 2,
        Kind::LinkRate => 3,
        _ => return Ok(()),
    };
    let (unit, lo, hi, range) = MAGNITUDES[m];
    let x = v.to_f64().unwrap_or(f64::INFINITY);
    if !(lo..=hi).contains(&x) {
        return Err(refuse(
            c,
            format!("`{name}` = {x:e} {unit} is absurd for an accelerator (expected {range})"),
        ));
    }
    Ok(())
}

/// One `NAME=VALUE` applied to `c`: the change it made.
fn apply_one(c: &mut Calibration, item: &str) -> Result<Change> {
    let (name, value) = item.split_once('=').ok_or_else(|| {
        refuse(
            c,
            format!("`{item}`: expected NAME=VALUE, such as nvlink.bandwidth=x2"),
        )
    })?;
    let (name, value) = (name.trim(), value.trim());
    let kind = kind_of(c, name).ok_or_else(|| refuse(c, format!("unknown quantity `{name}`")))?;
    let before = match slot(c, name) {
        Some(s) => s.as_ref().map(|s| s.value.clone()),
        None => number(c, name).map(|s| s.value.clone()),
    };
    let factor = value.strip_prefix('x').or_else(|| value.strip_prefix('×'));
    let after = match factor {
        Some(f) => {
            let f = parse_exact(f).filter(|f| f.is_positive()).ok_or_else(|| {
                refuse(
                    c,
                    format!("`{name}={value}`: a factor must be a positive number"),
                )
            })?;
            let b = before.clone().ok_or_else(|| {
                refuse(
                    c,
                    format!("`{name}={value}`: the table gives no {name} to scale; give a value"),
                )
            })?;
            b * f
        }
        None => absolute(kind, value)
            .ok_or_else(|| refuse(c, format!("`{name}={value}`: expected {}", example(kind))))?,
    };
    check_value(c, name, kind, &after)?;
    set(c, name, &before, &after, value);
    Ok(Change {
        field: name.to_string(),
        given: value.to_string(),
        before,
        after,
        kind,
    })
}

/// Writes the new value with its what-if source; a link's busbw curves scale with its
/// bandwidth.
fn set(c: &mut Calibration, name: &str, before: &Option<Rational>, after: &Rational, given: &str) {
    let was = |s: Option<&Sourced>| match s {
        Some(s) => format!("was {} from: {}", s.value, s.source),
        None => "the table gives none".to_string(),
    };
    if let Some(s) = slot(c, name) {
        let source = format!("what-if: {name}={given} ({})", was(s.as_ref()));
        *s = Some(Sourced {
            value: after.clone(),
            source,
        });
        return;
    }
    if let Some(s) = number(c, name) {
        s.source = format!("what-if: {name}={given} ({})", was(Some(s)));
        s.value = after.clone();
    }
    let link = match name {
        "nvlink.bandwidth" => &mut c.tiers.intra,
        "network.bandwidth" => &mut c.tiers.inter,
        _ => return,
    };
    let ratio = match before {
        Some(b) if !b.is_zero() => after / b,
        _ => Rational::one(),
    };
    for curve in link.busbw.values_mut() {
        for (_, y) in curve.points.iter_mut() {
            *y = &*y * &ratio;
        }
        curve.source = format!(
            "what-if: {name}={given}, bus bandwidth scaled by {ratio} (was from: {})",
            curve.source
        );
    }
}

/// The table and the changes of a what-if machine's name, `TABLE+what-if(CHANGES)`; `None`
/// for any other name.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    let (table, rest) = name.rsplit_once("+what-if(")?;
    let changes = rest.strip_suffix(')')?;
    (!table.is_empty()).then_some((table, changes))
}

impl Calibration {
    /// This table with the quantities `spec` names changed (`nvlink.bandwidth=x2,domain=72`):
    /// a what-if machine, named `TABLE+what-if(SPEC)`. Unknown names, values that are not
    /// positive, a fraction of a device and a name given twice are refused, naming the valid
    /// quantities.
    pub fn with_what_if(self, spec: &str) -> Result<Calibration> {
        self.with_what_if_as(spec, "--with")
    }

    /// [`Calibration::with_what_if`], its refusals naming the option `option` (`--with` on the
    /// command line, `what_if` in Python).
    pub fn with_what_if_as(self, spec: &str, option: &str) -> Result<Calibration> {
        self.edited(spec).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("{option}: {m}")),
            other => other,
        })
    }

    /// [`Calibration::with_what_if`] with refusals that do not name the option.
    fn edited(mut self, spec: &str) -> Result<Calibration> {
        let items: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if items.is_empty() {
            return Err(refuse(&self, "nothing to change".into()));
        }
        let base = self.name.clone();
        let mut changes: Vec<Change> = Vec::new();
        for item in &items {
            let change = apply_one(&mut self, item)?;
            if changes.iter().any(|c| c.field == change.field) {
                return Err(refuse(&self, format!("`{}` is given twice", change.field)));
            }
            changes.push(change);
        }
        self.name = format!("{base}+what-if({})", items.join(","));
        let mut what_if = WhatIf { base, changes };
        if let Some(prior) = self.what_if.take() {
            let mut all = prior.changes;
            all.extend(what_if.changes);
            what_if = WhatIf {
                base: prior.base,
                changes: all,
            };
        }
        self.what_if = Some(what_if);
        Ok(self)
    }

    /// The machine `--calib` and `--with` name: the table, changed where `with` says.
    pub fn resolve_with(calib: Option<&str>, with: Option<&str>) -> Result<Calibration> {
        let c = Calibration::resolve_or_reference(calib)?;
        match with {
            Some(w) => c.with_what_if(w),
            None => Ok(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Calibration {
        Calibration::resolve("h100-sxm").unwrap()
    }

    #[test]
    fn doubling_a_link_doubles_its_bus_bandwidths() {
        let c = h100().with_what_if("nvlink.bandwidth=x2").unwrap();
        assert_eq!(
            c.tiers.intra.bandwidth.value,
            Rational::from_integer(900_000_000_000i64.into())
        );
        let ag = &c.tiers.intra.busbw["all-gather"].points[0].1;
        assert_eq!(*ag, Rational::from_integer(700_000_000_000i64.into()));
        assert!(
            c.name.ends_with("+what-if(nvlink.bandwidth=x2)"),
            "{}",
            c.name
        );
        assert!(c.tiers.intra.bandwidth.source.contains("was 450000000000"));
    }

    #[test]
    fn units_and_domain() {
        let c = h100()
            .with_what_if("hbm.capacity=141GB, domain=72, nvlink.latency=2us")
            .unwrap();
        assert_eq!(c.gpus_per_node(), 72);
        assert_eq!(
            c.memory_bytes(),
            Rational::from_integer(141_000_000_000i64.into())
        );
        assert_eq!(
            c.tiers.intra.latency.value,
            Rational::new(2.into(), 1_000_000.into())
        );
        let line = c.what_if.as_ref().unwrap().line();
        assert!(line.contains("domain 8 → 72"), "{line}");
    }

    #[test]
    fn refusals_name_the_valid_quantities() {
        for (spec, says) in [
            ("nvlink.bandwith=x2", "unknown quantity `nvlink.bandwith`"),
            ("domain=0", "must be positive"),
            ("domain=7.5", "whole number"),
            ("hbm.capacity=-1", "must be positive"),
            ("hbm.capacity=x0", "positive"),
            ("domain=x2,domain=4", "given twice"),
            ("hbm.bandwidth=3TB/s/s", "expected"),
        ] {
            let e = h100().with_what_if(spec).unwrap_err().to_string();
            assert!(e.contains(says), "{spec}: {e}");
            assert!(e.contains("nvlink.bandwidth, network.bandwidth"), "{e}");
        }
    }
}
