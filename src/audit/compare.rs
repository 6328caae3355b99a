//! Derived against counted: every quantity of a derived split entry, evaluated at the case's
//! sizes, next to what brute force counted, equal or not.

use super::count::{axis_name, CollectiveKey, Counted, PassCount};
use super::plan::Case;
use crate::error::{Error, Result};
use crate::rules::law::{CollectiveKind, ReduceOp};
use crate::rules::split::{CollectiveCost, PassSplit, SplitEntry, TensorPlacement};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::Zero;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pass {
    /// The forward pass.
    Forward,
    /// The backward pass (all input gradients).
    Backward,
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        })
    }
}

/// Whether derived and counted agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Exactly equal.
    Ok,
    /// Different.
    Mismatch,
    /// Equal, but negative: no count of FLOPs or bytes can be.
    Negative,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Ok => "ok",
            Verdict::Mismatch => "MISMATCH",
            Verdict::Negative => "NEGATIVE",
        })
    }
}

/// One quantity of one case, derived and counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The rule.
    pub rule: String,
    /// The split indices (and window geometry).
    pub split: String,
    /// Devices per axis.
    pub mesh: String,
    /// The concrete size of every index and parameter.
    pub sizes: String,
    /// The pass.
    pub pass: Pass,
    /// What is compared.
    pub quantity: String,
    /// The derivation's value at the case's sizes.
    pub derived: String,
    /// The brute-force count.
    pub counted: String,
    /// Whether they are equal.
    pub verdict: Verdict,
}

impl Check {
    /// The check of `quantity` in `pass` of `case` (its sizes formatted as `sizes`): equal,
    /// different, or equal but negative.
    pub fn new(
        case: &Case,
        sizes: &str,
        pass: Pass,
        quantity: String,
        derived: String,
        counted: String,
    ) -> Check {
        let verdict = if derived != counted {
            Verdict::Mismatch
        } else if derived.starts_with('-') {
            Verdict::Negative
        } else {
            Verdict::Ok
        };
        Check {
            rule: case.rule.clone(),
            split: case.split_label(),
            mesh: case.mesh_label(),
            sizes: sizes.to_string(),
            pass,
            quantity,
            derived,
            counted,
            verdict,
        }
    }
}

/// Compares a derived split entry with the counts of the same case.
pub fn compare(case: &Case, entry: &SplitEntry, counted: &Counted) -> Result<Vec<Check>> {
    let b = case.bindings();
    let sizes: Vec<String> = case.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let sizes = sizes.join(" ");
    let mut out = Vec::new();
    for (pass, derived, counted) in [
        (Pass::Forward, &entry.forward, &counted.forward),
        (Pass::Backward, &entry.backward, &counted.backward),
    ] {
        let mut check = |quantity: String, derived: String, counted: String| {
            out.push(Check::new(case, &sizes, pass, quantity, derived, counted));
        };
        check(
            "compute (FLOPs per device)".into(),
            number(&eval(case, &derived.compute, &b)?),
            number(&counted.flops),
        );
        for t in &counted.tensors {
            let list = if t.written {
                &derived.outputs
            } else {
                &derived.inputs
            };
            let d = list
                .iter()
                .find(|p| p.tensor == t.name)
                .map_or_else(|| "absent".to_string(), placement);
            let c: Vec<String> = t.placement.iter().map(|p| p.to_string()).collect();
            check(format!("placement of {}", t.name), d, c.join("·"));
        }
        for (key, axis, (d, c)) in collectives(case, derived, counted, &b)? {
            let what = format!("{key} on axis {}", axis_name(axis));
            check(format!("{what}: bytes"), number(&d.size), number(&c.size));
            check(
                format!("{what}: wire bytes per rank"),
                number(&d.wire),
                number(&c.wire),
            );
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Default)]
struct Bytes {
    size: Rational,
    wire: Rational,
}

type Pair = (Bytes, Bytes);

/// Derived and counted collectives side by side, keyed by what they move and on which axis.
fn collectives(
    case: &Case,
    derived: &PassSplit,
    counted: &PassCount,
    b: &Bindings,
) -> Result<Vec<(CollectiveKey, usize, Pair)>> {
    let mut map: BTreeMap<(CollectiveKey, usize), Pair> = BTreeMap::new();
    for c in &derived.collectives {
        let axis = case
            .splits
            .iter()
            .position(|s| s.axis == c.axis)
            .unwrap_or(usize::MAX);
        let e = &mut map.entry((derived_key(c), axis)).or_default().0;
        e.size += eval(case, &c.size, b)?;
        e.wire += eval(case, &c.wire_bytes, b)?;
    }
    for c in &counted.collectives {
        let n = case.splits.get(c.axis).map_or(1, |s| i64::from(s.devices));
        let size = Rational::from_integer(c.size.into());
        let calls = Rational::from_integer(i64::from(c.calls).into());
        let wire = match c.key {
            CollectiveKey::Halo { .. } => size.clone(),
            _ => calls * ring_all_reduce(n) * &size,
        };
        let e = &mut map.entry((c.key.clone(), c.axis)).or_default().1;
        e.size += size;
        e.wire += wire;
    }
    Ok(map.into_iter().map(|((k, a), p)| (k, a, p)).collect())
}

/// Bytes each rank of a ring all-reduce over `n` ranks sends per byte of the tensor:
/// `2(n − 1)/n` (nccl-tests doc/PERFORMANCE.md).
pub fn ring_all_reduce(n: i64) -> Rational {
    Rational::new((2 * (n - 1)).into(), n.into())
}

/// What a derived collective moves, in the audit's terms.
pub fn derived_key(c: &CollectiveCost) -> CollectiveKey {
    match c.kind {
        CollectiveKind::HaloExchange => CollectiveKey::Halo {
            tensor: c.tensor.clone(),
        },
        CollectiveKind::AllReduce => {
            for pass in ["forward", "backward"] {
                if let Some(t) = c.tensor.strip_prefix(&format!("{pass} statistics of ")) {
                    return CollectiveKey::Statistics {
                        pass: pass.to_string(),
                        tensor: t.to_string(),
                    };
                }
            }
            CollectiveKey::Reduce {
                tensor: c.tensor.clone(),
                op: c.op.unwrap_or(ReduceOp::Sum),
            }
        }
        kind => CollectiveKey::Other {
            kind: kind.name().to_string(),
            tensor: c.tensor.clone(),
        },
    }
}

fn placement(p: &TensorPlacement) -> String {
    let v: Vec<String> = p.placements.iter().map(|x| x.to_string()).collect();
    v.join("·")
}

fn eval(case: &Case, p: &Poly, b: &Bindings) -> Result<Rational> {
    p.eval(b).map_err(|e| {
        Error::Usage(format!(
            "rule `{}`: derived formula `{p}` at the audit's sizes: {e}",
            case.rule
        ))
    })
}

/// An exact number: an integer, or `p/q`.
pub fn number(r: &Rational) -> String {
    if r.is_zero() {
        "0".into()
    } else {
        r.to_string()
    }
}
