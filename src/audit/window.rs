//! Window geometry read from a rule's extent formulas.
//!
//! Along a window index `o`, a tensor whose extent is `(o − 1)·stride + kernel − 2·pad` is read at
//! position `o·stride + r − pad` for each kernel offset `r` in `[0, kernel)`; positions outside the
//! tensor are zero padding. The kernel offset is the rule's own index when the kernel is one (a
//! convolution's `kh`), and an offset the audit adds to the iteration space otherwise (a pooling
//! window whose size is a parameter).
//!
//! The audit gives the stride, kernel and padding symbols small values with "same" padding
//! (`kernel − stride = 2·pad`), so that a window-split input divides evenly among the devices.

use crate::error::Result;
use crate::rules::{IndexKind, OpRule};
use crate::sym::{Poly, Rational};
use num_traits::{ToPrimitive, Zero};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A window index of one tensor, symbolically.
#[derive(Debug, Clone)]
pub struct WindowShape {
    /// The tensor read through the window.
    pub tensor: String,
    /// The window index.
    pub index: String,
    /// The stride: the coefficient of the index in the extent.
    pub stride: Poly,
    /// The kernel size: the positive part of the extent's remainder.
    pub kernel: Poly,
    /// The padding on each side: minus half the negative part of the remainder.
    pub pad: Poly,
}

impl WindowShape {
    /// An error in `rule`'s file at this window's extent (`inputs.TENSOR.extents.INDEX`).
    fn error(&self, rule: &OpRule, message: String) -> crate::error::Error {
        rule.error_at(&["inputs", &self.tensor, "extents", &self.index], message)
    }
}

/// What a symbol of a window extent stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A stride.
    Stride,
    /// A kernel size.
    Kernel,
    /// A padding.
    Pad,
}

/// Values given to the stride, kernel and padding symbols of window extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Stride.
    pub stride: i64,
    /// Kernel size.
    pub kernel: i64,
    /// Padding on each side.
    pub pad: i64,
}

impl Geometry {
    /// The value of a symbol with role `role`.
    pub fn value(self, role: Role) -> i64 {
        match role {
            Role::Stride => self.stride,
            Role::Kernel => self.kernel,
            Role::Pad => self.pad,
        }
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stride {}, kernel {}, pad {}",
            self.stride, self.kernel, self.pad
        )
    }
}

/// The geometries each windowed rule is audited under: a 3-wide kernel at stride 1 (ResNet's 3×3
/// convolutions) and a 4-wide kernel at stride 2, both with "same" padding.
pub const GEOMETRIES: [Geometry; 2] = [
    Geometry {
        stride: 1,
        kernel: 3,
        pad: 1,
    },
    Geometry {
        stride: 2,
        kernel: 4,
        pad: 1,
    },
];

/// A window index of one tensor at concrete sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The tensor read through the window.
    pub tensor: String,
    /// The window index.
    pub index: String,
    /// Stride.
    pub stride: i64,
    /// Kernel size.
    pub kernel: i64,
    /// Padding on each side.
    pub pad: i64,
    /// The rule index that enumerates kernel offsets, if the kernel is one.
    pub kernel_index: Option<String>,
    /// The tensor's extent along the index.
    pub extent: i64,
}

/// Every window index of every tensor of `rule` that has an extent formula.
pub fn window_shapes(rule: &OpRule) -> Result<Vec<WindowShape>> {
    let mut out = Vec::new();
    for t in rule.inputs.iter().chain(std::iter::once(&rule.output)) {
        for (index, extent) in &t.extents {
            if rule.index(index).map(|i| i.kind) == Some(IndexKind::Window) {
                out.push(shape(rule, &t.name, index, extent)?);
            }
        }
    }
    Ok(out)
}

fn shape(rule: &OpRule, tensor: &str, index: &str, extent: &Poly) -> Result<WindowShape> {
    let bad = || {
        rule.error_at(
            &["inputs", tensor, "extents", index],
            format!(
                "rule `{}`: the extent of window index `{index}` in `{tensor}` is `{extent}`; the \
                 audit reads window extents as `({index} - 1)*stride + kernel - 2*pad`",
                rule.name
            ),
        )
    };
    let at0 = extent.substitute(index, &Poly::zero()).map_err(|_| bad())?;
    let at1 = extent.substitute(index, &Poly::one()).map_err(|_| bad())?;
    let stride = &at1 - &at0;
    if stride.is_zero()
        || stride.symbols().contains(index)
        || &(&stride * &Poly::symbol(index)) + &at0 != *extent
    {
        return Err(bad());
    }
    let rest = &at0 + &stride;
    let (mut kernel, mut negative) = (Poly::zero(), Poly::zero());
    for (m, c) in rest.terms() {
        let term = Poly::monomial(c.clone(), m.clone());
        if *c > Rational::zero() {
            kernel += term;
        } else {
            negative += term;
        }
    }
    if kernel.is_zero() {
        return Err(bad());
    }
    let half = Poly::constant(Rational::new(1.into(), 2.into()));
    Ok(WindowShape {
        tensor: tensor.to_string(),
        index: index.to_string(),
        stride,
        kernel,
        pad: -negative * half,
    })
}

/// The role of each symbol of the window shapes; a symbol with two roles is an error.
pub fn roles(rule: &OpRule, shapes: &[WindowShape]) -> Result<BTreeMap<String, Role>> {
    let mut roles = BTreeMap::new();
    for s in shapes {
        for (poly, role) in [
            (&s.stride, Role::Stride),
            (&s.kernel, Role::Kernel),
            (&s.pad, Role::Pad),
        ] {
            for sym in poly.symbols() {
                if let Some(ix) = rule.index(&sym) {
                    if ix.kind.law().splittable {
                        return Err(s.error(
                            rule,
                            format!(
                                "rule `{}`: splittable index `{sym}` is part of the window of \
                                 `{}`; the audit gives window symbols fixed values",
                                rule.name, s.index
                            ),
                        ));
                    }
                }
                match roles.insert(sym.clone(), role) {
                    Some(r) if r != role => {
                        return Err(s.error(
                            rule,
                            format!(
                                "rule `{}`: symbol `{sym}` is both {r:?} and {role:?} of a window",
                                rule.name
                            ),
                        ))
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(roles)
}

/// The concrete windows of a rule at the given sizes (every index and parameter bound).
pub fn concrete(
    rule: &OpRule,
    shapes: &[WindowShape],
    sizes: &BTreeMap<String, i64>,
) -> Result<Vec<Window>> {
    let b = super::plan::bindings(sizes);
    let value = |p: &Poly, what: &str, s: &WindowShape| -> Result<i64> {
        let v = p.eval(&b).map_err(|e| {
            s.error(
                rule,
                format!("rule `{}`: {what} of window `{}`: {e}", rule.name, s.index),
            )
        })?;
        integer(&v).ok_or_else(|| {
            s.error(
                rule,
                format!(
                    "rule `{}`: {what} of window `{}` is {v}, not an integer",
                    rule.name, s.index
                ),
            )
        })
    };
    let mut out = Vec::new();
    for s in shapes {
        let stride = value(&s.stride, "stride", s)?;
        let kernel = value(&s.kernel, "kernel", s)?;
        let pad = value(&s.pad, "padding", s)?;
        let size = sizes.get(&s.index).copied().unwrap_or(0);
        let extent = (size - 1) * stride + kernel - 2 * pad;
        if stride < 1 || kernel < 1 || pad < 0 || extent < 1 {
            return Err(s.error(
                rule,
                format!(
                    "rule `{}`: window `{}` of `{}` has stride {stride}, kernel {kernel}, pad {pad}",
                    rule.name, s.index, s.tensor
                ),
            ));
        }
        let kernel_index = s
            .kernel
            .symbols()
            .into_iter()
            .next()
            .filter(|k| s.kernel == Poly::symbol(k) && rule.index(k).is_some());
        out.push(Window {
            tensor: s.tensor.clone(),
            index: s.index.clone(),
            stride,
            kernel,
            pad,
            kernel_index,
            extent,
        });
    }
    Ok(out)
}

/// A rational that is an integer fitting `i64`.
pub fn integer(r: &Rational) -> Option<i64> {
    if !r.is_integer() {
        return None;
    }
    r.to_integer().to_i64()
}
