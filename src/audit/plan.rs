//! What the audit runs: every split a rule allows — each splittable index alone, and each pair over
//! two mesh axes — on small meshes, at small concrete sizes chosen so that every split divides.

use super::window::{self, Geometry, Role, Window, WindowShape, GEOMETRIES};
use crate::error::{Error, Result};
use crate::rules::split::AxisSplit;
use crate::rules::OpRule;
use crate::sym::{Bindings, Poly, Rational};
use serde::Serialize;
use std::collections::BTreeMap;

/// Devices on the one axis of a single-index split.
pub const SINGLE_MESHES: [u32; 4] = [2, 3, 4, 8];

/// Devices on the two axes of a two-index split.
pub const PAIR_MESHES: [(u32, u32); 3] = [(2, 2), (2, 3), (4, 2)];

/// Names of the mesh axes, in split order.
pub const AXIS_NAMES: [&str; 2] = ["a", "b"];

/// Sizes of unsplit indices (and the per-device block of split ones), in declaration order:
/// distinct where the budget allows, so that a formula naming the wrong index shows.
const BASES: [i64; 6] = [2, 3, 5, 7, 4, 6];

/// Size of indices beyond [`BASES`].
const OTHER_BASE: i64 = 2;

/// Value of parameters that are not part of a window.
const PARAM_VALUE: i64 = 3;

/// Points of the whole iteration space a case may have; bases shrink (never below 2) to fit.
pub const BUDGET: i64 = 2048;

/// Points beyond which a rule is too large to audit even with every base at 2.
const LIMIT: i64 = 1 << 22;

/// One index split over one mesh axis of a given size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Split {
    /// The rule's index.
    pub index: String,
    /// The mesh axis.
    pub axis: String,
    /// Devices on the axis.
    pub devices: u32,
}

/// One audited configuration: a rule, its split, and concrete sizes of everything.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// The rule.
    pub rule: String,
    /// The splits, one per mesh axis.
    pub splits: Vec<Split>,
    /// Window geometry, for rules with window extents.
    pub geometry: Option<Geometry>,
    /// Every index and parameter.
    pub sizes: BTreeMap<String, i64>,
    /// The windows at these sizes.
    #[serde(skip)]
    pub windows: Vec<Window>,
}

impl Case {
    /// `k`, or `b,k` for two axes, with the window geometry when there is one.
    pub fn split_label(&self) -> String {
        let names: Vec<&str> = self.splits.iter().map(|s| s.index.as_str()).collect();
        match self.geometry {
            Some(g) => format!("{} ({g})", names.join(",")),
            None => names.join(","),
        }
    }

    /// `4`, or `2×3` for two axes.
    pub fn mesh_label(&self) -> String {
        let sizes: Vec<String> = self.splits.iter().map(|s| s.devices.to_string()).collect();
        sizes.join("×")
    }

    /// The sizes as bindings for formula evaluation.
    pub fn bindings(&self) -> Bindings {
        bindings(&self.sizes)
    }

    /// The splits in the form the derivation takes, with numeric axis sizes.
    pub fn axis_splits(&self) -> Vec<AxisSplit> {
        self.splits
            .iter()
            .map(|s| AxisSplit {
                index: s.index.clone(),
                axis: s.axis.clone(),
                size: Poly::int(i64::from(s.devices)),
            })
            .collect()
    }

    /// The window of `tensor` along `index`, if it has one.
    pub fn window(&self, tensor: &str, index: &str) -> Option<&Window> {
        self.windows
            .iter()
            .find(|w| w.tensor == tensor && w.index == index)
    }

    /// The size of index or parameter `name`.
    pub fn size(&self, name: &str) -> i64 {
        self.sizes.get(name).copied().unwrap_or(1)
    }
}

/// Sizes as bindings.
pub fn bindings(sizes: &BTreeMap<String, i64>) -> Bindings {
    sizes
        .iter()
        .map(|(k, v)| (k.clone(), Rational::from_integer((*v).into())))
        .collect()
}

/// Every case of a rule: each splittable index on each of [`SINGLE_MESHES`], each pair of
/// splittable indices (in declaration order, the first on axis `a`) on each of [`PAIR_MESHES`],
/// under each window geometry when the rule has windows.
pub fn cases(rule: &OpRule) -> Result<Vec<Case>> {
    let shapes = window::window_shapes(rule)?;
    let roles = window::roles(rule, &shapes)?;
    let geometries: Vec<Option<Geometry>> = if roles.is_empty() {
        vec![None]
    } else {
        GEOMETRIES.iter().copied().map(Some).collect()
    };
    let splittable: Vec<&str> = rule
        .indices
        .iter()
        .filter(|i| i.kind.law().splittable)
        .map(|i| i.name.as_str())
        .collect();
    let mut out = Vec::new();
    for g in geometries {
        for i in &splittable {
            for p in SINGLE_MESHES {
                out.extend(build(rule, &shapes, &roles, &[(i, p)], g)?);
            }
        }
        for (n, i) in splittable.iter().enumerate() {
            for j in &splittable[n + 1..] {
                for (pa, pb) in PAIR_MESHES {
                    out.extend(build(rule, &shapes, &roles, &[(i, pa), (j, pb)], g)?);
                }
            }
        }
    }
    Ok(out)
}

/// One case of `rule`: `splits` pairs an index with its axis's device count. `None` when the
/// devices do not divide a tensor dimension at the chosen sizes.
pub fn case(
    rule: &OpRule,
    splits: &[(&str, u32)],
    geometry: Option<Geometry>,
) -> Result<Option<Case>> {
    let shapes = window::window_shapes(rule)?;
    let roles = window::roles(rule, &shapes)?;
    let geometry = match (geometry, roles.is_empty()) {
        (_, true) => None,
        (Some(g), false) => Some(g),
        (None, false) => Some(GEOMETRIES[0]),
    };
    build(rule, &shapes, &roles, splits, geometry)
}

fn build(
    rule: &OpRule,
    shapes: &[WindowShape],
    roles: &BTreeMap<String, Role>,
    splits: &[(&str, u32)],
    geometry: Option<Geometry>,
) -> Result<Option<Case>> {
    if splits.len() > AXIS_NAMES.len() {
        return Err(Error::Usage(format!(
            "the audit splits over at most {} mesh axes",
            AXIS_NAMES.len()
        )));
    }
    for (i, p) in splits {
        if rule.index(i).is_none() {
            return Err(Error::Usage(format!(
                "rule `{}` has no index `{i}`",
                rule.name
            )));
        }
        if *p == 0 {
            return Err(Error::Usage("a mesh axis needs at least one device".into()));
        }
    }
    let sizes = choose_sizes(rule, shapes, roles, splits, geometry)?;
    let windows = window::concrete(rule, shapes, &sizes)?;
    let case = Case {
        rule: rule.name.clone(),
        splits: splits
            .iter()
            .zip(AXIS_NAMES)
            .map(|((i, p), axis)| Split {
                index: i.to_string(),
                axis: axis.to_string(),
                devices: *p,
            })
            .collect(),
        geometry,
        sizes,
        windows,
    };
    Ok(divides(rule, &case)?.then_some(case))
}

/// Whether every split divides every tensor dimension holding its index.
fn divides(rule: &OpRule, case: &Case) -> Result<bool> {
    let b = case.bindings();
    for t in rule.inputs.iter().chain(std::iter::once(&rule.output)) {
        for group in &t.dims {
            let mut extent: i64 = 1;
            for i in group {
                let e = t
                    .extent(i)
                    .eval(&b)
                    .ok()
                    .as_ref()
                    .and_then(window::integer)
                    .filter(|e| *e >= 1)
                    .ok_or_else(|| {
                        let at: &[&str] = if t.name == rule.output.name {
                            &["output"]
                        } else {
                            &["inputs", &t.name]
                        };
                        rule.error_at(
                            at,
                            format!(
                                "rule `{}`: extent `{}` of `{i}` in `{}` is not a positive \
                                 integer at the audit's sizes",
                                rule.name,
                                t.extent(i),
                                t.name
                            ),
                        )
                    })?;
                extent *= e;
            }
            let devices: i64 = case
                .splits
                .iter()
                .filter(|s| group.contains(&s.index))
                .map(|s| i64::from(s.devices))
                .product();
            if extent % devices != 0 {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn choose_sizes(
    rule: &OpRule,
    shapes: &[WindowShape],
    roles: &BTreeMap<String, Role>,
    splits: &[(&str, u32)],
    geometry: Option<Geometry>,
) -> Result<BTreeMap<String, i64>> {
    let role_value = |name: &str| -> Option<i64> {
        let role = roles.get(name)?;
        geometry.map(|g| g.value(*role))
    };
    let mut sizes = BTreeMap::new();
    for p in &rule.params {
        sizes.insert(p.clone(), role_value(p).unwrap_or(PARAM_VALUE));
    }
    // (name, base, devices) of the indices whose size the audit chooses.
    let mut free: Vec<(String, i64, i64)> = Vec::new();
    for ix in &rule.indices {
        if let Some(v) = role_value(&ix.name) {
            sizes.insert(ix.name.clone(), v);
            continue;
        }
        let base = BASES.get(free.len()).copied().unwrap_or(OTHER_BASE);
        let devices = splits
            .iter()
            .find(|(i, _)| *i == ix.name)
            .map_or(1, |(_, p)| i64::from(*p));
        free.push((ix.name.clone(), base, devices));
    }
    // Kernel offsets the iteration space gains for windows whose kernel is not an index.
    let fixed = bindings(&sizes);
    let mut hidden: i64 = 1;
    let mut seen: Vec<&str> = Vec::new();
    for s in shapes {
        let is_index = s
            .kernel
            .symbols()
            .iter()
            .any(|k| rule.index(k).is_some() && s.kernel == Poly::symbol(k));
        if is_index || seen.contains(&s.index.as_str()) {
            continue;
        }
        seen.push(&s.index);
        let k = s
            .kernel
            .eval(&fixed)
            .ok()
            .as_ref()
            .and_then(window::integer)
            .unwrap_or(1);
        hidden *= k.max(1);
    }
    let fixed_volume: i64 = rule
        .indices
        .iter()
        .filter_map(|ix| role_value(&ix.name))
        .product::<i64>()
        * hidden;
    loop {
        let volume: i64 = fixed_volume * free.iter().map(|(_, b, p)| b * p).product::<i64>();
        if volume <= BUDGET {
            break;
        }
        // Shrink the largest base first; later indices first among equals.
        let Some(k) = (0..free.len())
            .filter(|&k| free[k].1 > 2)
            .max_by_key(|&k| free[k].1)
        else {
            break;
        };
        free[k].1 -= 1;
    }
    let volume: i64 = fixed_volume * free.iter().map(|(_, b, p)| b * p).product::<i64>();
    if volume > LIMIT {
        return Err(rule.error_at(
            &["indices"],
            format!(
                "rule `{}`: its iteration space has {volume} points at the smallest sizes the \
                 audit uses (at most {LIMIT})",
                rule.name
            ),
        ));
    }
    for (name, base, devices) in free {
        sizes.insert(name, base * devices);
    }
    Ok(sizes)
}
