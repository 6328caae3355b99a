//! How a machine's links are laid out, where a table says more than "node + network": a torus
//! (TPU slices), a fully connected node (AMD Infinity Fabric, Intel Gaudi), and an
//! oversubscribed scale-out network. Optional: a table without `topology` keeps the two flat
//! tiers, each with one rate per device.
//!
//! Torus mapping rule. Devices are numbered as the mesh numbers them (tensor-parallel fastest,
//! then context, data, pipeline; [`crate::strategy::Mesh`]) and laid over the torus in mixed
//! radix, its first axis fastest: device `d` sits at coordinate `(d / P_i) mod d_i` on axis `i`,
//! `P_i` the product of the axes before it. A parallel dimension's group (`size` devices
//! `stride` apart) thus covers, on each torus axis it reaches, `len` positions `step` apart;
//! the innermost parallel dimension lands on the first torus axes. A group whose sizes do not
//! divide the torus axes (its devices are not a product of whole progressions along axes) is
//! priced as one ring over single links, no wraparound: the least the torus guarantees.
//!
//! Ring collectives run as bidirectional rings along each torus axis the group spans, all axes
//! at once (dimension-ordered, data split across them): the bandwidth a device gets is the sum
//! over those axes of the link bandwidth × 2 where the piece closes a ring through the
//! wraparound link (both directions carry a ring), × 1 on a line (no wraparound, or a piece
//! shorter than its axis), ÷ `step` (that many groups interleave on the same links).

use super::Sourced;
use crate::diag::Source;
use crate::error::Result;
use crate::sym::Rational;
use num_traits::{One, Signed, ToPrimitive};
use serde::{Deserialize, Serialize};

/// The layout of a table's links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The node is a torus of point-to-point links (one "node" = one torus).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torus: Option<Torus>,
    /// The node's devices each have one link to every other (no switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_connected: Option<FullyConnected>,
    /// The scale-out network is oversubscribed beyond a group of devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversubscription: Option<Oversubscription>,
}

/// A list of whole numbers with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcedDims {
    /// The numbers.
    pub value: Vec<u64>,
    /// Where they come from.
    pub source: String,
}

/// A torus of point-to-point links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Torus {
    /// Devices along each axis, the first fastest; their product is `gpus_per_node`.
    pub dims: SourcedDims,
    /// Whether each axis closes through a wraparound link.
    pub wraparound: Vec<bool>,
    /// Bytes per second of one link in one direction.
    pub link_bandwidth: Sourced,
}

/// Every device of a node linked directly to every other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FullyConnected {
    /// Devices so connected: `gpus_per_node`.
    pub peers: Sourced,
    /// Bytes per second of one link to one peer, one direction.
    pub link_bandwidth: Sourced,
}

/// A scale-out network with less bandwidth above a group of devices than below it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Oversubscription {
    /// Devices whose inter-node traffic runs at the full inter-node rate (a leaf switch's, or a
    /// rail's, worth), a multiple of `gpus_per_node`.
    pub group: Sourced,
    /// Bandwidth below the group ÷ bandwidth above it (2 for 2:1), at least 1.
    pub ratio: Sourced,
}

/// One torus axis a group's ring runs along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The torus axis (0 = first).
    pub axis: usize,
    /// Devices of the group along it.
    pub len: u64,
    /// Positions between them along it.
    pub step: u64,
    /// Whether their ring closes through the wraparound link.
    pub wraps: bool,
}

/// Where a group of devices lies on a torus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On whole progressions along these axes.
    Axes(Vec<Piece>),
    /// Not aligned with the axes: one ring over single links.
    Unaligned,
}

impl Torus {
    /// Where a group of `size` devices `stride` apart lies ([`Torus`] mapping rule).
    pub fn place(&self, size: u64, stride: u64) -> Placement {
        let dims = &self.dims.value;
        let (lo_all, hi_all) = (stride.max(1), stride.max(1).saturating_mul(size));
        let mut pieces = Vec::new();
        let mut covered = 1u64;
        let mut p = 1u64;
        for (axis, &d) in dims.iter().enumerate() {
            let q = p.saturating_mul(d);
            let (lo, hi) = (lo_all.max(p), hi_all.min(q));
            if lo < hi {
                if !lo.is_multiple_of(p) || !hi.is_multiple_of(lo) || !q.is_multiple_of(hi) {
                    return Placement::Unaligned;
                }
                let (step, len) = (lo / p, hi / lo);
                pieces.push(Piece {
                    axis,
                    len,
                    step,
                    wraps: self.wraparound.get(axis).copied().unwrap_or(false) && step * len == d,
                });
                covered = covered.saturating_mul(len);
            }
            p = q;
        }
        if hi_all > p || covered != size {
            return Placement::Unaligned;
        }
        Placement::Axes(pieces)
    }

    /// Bytes per second one device's share of a ring collective over the group gets, before
    /// the link efficiency: the sum over its pieces of `link × (2 if wraps else 1) ÷ step`; one
    /// link for an unaligned group.
    pub fn ring_bandwidth(&self, placement: &Placement) -> Rational {
        let link = &self.link_bandwidth.value;
        match placement {
            Placement::Unaligned => link.clone(),
            Placement::Axes(pieces) => pieces
                .iter()
                .map(|p| {
                    let links = if p.wraps { 2u64 } else { 1 };
                    link * Rational::new(links.into(), p.step.max(1).into())
                })
                .sum(),
        }
    }

    /// Latency steps of a ring reduce-scatter or all-gather over the group: `len − 1` along each
    /// axis (dimension by dimension); `size − 1` for an unaligned group.
    pub fn ring_steps(placement: &Placement, size: u64) -> u64 {
        match placement {
            Placement::Unaligned => size.saturating_sub(1),
            Placement::Axes(pieces) => pieces.iter().map(|p| p.len - 1).sum(),
        }
    }

    /// The placement in words: `torus x(4, ring) × y(2 of 8, line)`.
    pub fn describe(&self, placement: &Placement) -> String {
        const NAMES: [&str; 6] = ["x", "y", "z", "w", "v", "u"];
        match placement {
            Placement::Unaligned => "torus (unaligned: one link)".to_string(),
            Placement::Axes(pieces) if pieces.is_empty() => "torus (one device)".to_string(),
            Placement::Axes(pieces) => {
                let parts: Vec<String> = pieces
                    .iter()
                    .map(|p| {
                        let d = self.dims.value[p.axis];
                        let name = NAMES.get(p.axis).copied().unwrap_or("?");
                        let of = if p.len * p.step == d && p.step == 1 {
                            format!("{}", p.len)
                        } else if p.step == 1 {
                            format!("{} of {d}", p.len)
                        } else {
                            format!("{} of {d}, every {}", p.len, p.step)
                        };
                        let kind = if p.wraps { "ring" } else { "line" };
                        format!("{name}({of}, {kind})")
                    })
                    .collect();
                format!("torus {}", parts.join(" × "))
            }
        }
    }
}

impl FullyConnected {
    /// Bytes per second one device's share of a ring collective over `k` of the peers gets,
    /// before the link efficiency: the `k − 1` links among them.
    pub fn ring_bandwidth(&self, k: u64) -> Rational {
        &self.link_bandwidth.value * Rational::from_integer(k.saturating_sub(1).max(1).into())
    }

    /// The share of the whole node's bus bandwidth a group of `k` peers reaches:
    /// `(k − 1) / (peers − 1)`, 1 for the whole node.
    pub fn share(&self, k: u64) -> Rational {
        let n = self.peers.value.to_integer().to_u64().unwrap_or(1);
        if n <= 1 || k >= n {
            return Rational::one();
        }
        Rational::new(k.saturating_sub(1).max(1).into(), (n - 1).into())
    }
}

impl Oversubscription {
    /// Whether a group whose devices span `span` consecutive device numbers crosses the
    /// oversubscribed layer.
    pub fn applies(&self, span: u64) -> bool {
        Rational::from_integer(span.into()) > self.group.value
    }
}

/// `v` as a whole number from 1 to `max`, if it is one.
fn whole(v: &Rational, max: u64) -> Option<u64> {
    v.is_integer()
        .then(|| v.to_integer().to_u64())
        .flatten()
        .filter(|&n| (1..=max).contains(&n))
}

/// A link bandwidth in the range of [`super::MAGNITUDES`]'s link row.
fn check_link(src: &Source, path: &[&str], v: &Rational) -> Result<()> {
    let (unit, lo, hi, range) = super::MAGNITUDES[3];
    let x = v.to_f64().unwrap_or(f64::INFINITY);
    if !v.is_positive() || !(lo..=hi).contains(&x) {
        return Err(src.error_at(
            path,
            format!(
                "`{}` must be a positive link bandwidth ({range} in {unit}), not {v}",
                path.join(".")
            ),
        ));
    }
    Ok(())
}

impl Topology {
    /// Checks the topology against the node size, each mistake at its place in the file.
    pub fn check(&self, src: &Source, gpus_per_node: u64) -> Result<()> {
        if self.torus.is_some() && self.fully_connected.is_some() {
            return Err(src.error_at(
                &["topology", "fully_connected"],
                "a node is either a `torus` or `fully_connected`, not both",
            ));
        }
        if let Some(t) = &self.torus {
            check_torus(t, src, gpus_per_node)?;
        }
        if let Some(f) = &self.fully_connected {
            let at = ["topology", "fully_connected", "peers"];
            if whole(&f.peers.value, u64::MAX) != Some(gpus_per_node) {
                return Err(src.error_at(
                    &at,
                    format!(
                        "`peers` must be the node's {gpus_per_node} devices (`gpus_per_node`), not {}",
                        f.peers.value
                    ),
                ));
            }
            check_link(
                src,
                &["topology", "fully_connected", "link_bandwidth"],
                &f.link_bandwidth.value,
            )?;
        }
        if let Some(o) = &self.oversubscription {
            let group = whole(&o.group.value, u64::MAX);
            if !group.is_some_and(|g| g.is_multiple_of(gpus_per_node.max(1))) {
                return Err(src.error_at(
                    &["topology", "oversubscription", "group"],
                    format!(
                        "`group` must be a whole number of nodes ({gpus_per_node} devices each), not {}",
                        o.group.value
                    ),
                ));
            }
            let r = &o.ratio.value;
            if *r < Rational::one() || *r > Rational::from_integer(1000.into()) {
                return Err(src.error_at(
                    &["topology", "oversubscription", "ratio"],
                    format!("`ratio` must be from 1 (none) to 1000, not {r}"),
                ));
            }
        }
        Ok(())
    }
}

/// A torus: 1 to 6 axes of 1 to 4096 devices whose product is the node, one wraparound flag
/// per axis, a link bandwidth in range.
fn check_torus(t: &Torus, src: &Source, gpus_per_node: u64) -> Result<()> {
    let dims = &t.dims.value;
    let at = ["topology", "torus", "dims"];
    if dims.is_empty() || dims.len() > 6 || dims.iter().any(|&d| d == 0 || d > 4096) {
        return Err(src.error_at(
            &at,
            "`dims` must list 1 to 6 axes of 1 to 4096 devices each",
        ));
    }
    let product = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    if product != Some(gpus_per_node) {
        return Err(src.error_at(
            &at,
            format!(
                "`dims` {} hold {} devices, but a node has {gpus_per_node} (`gpus_per_node`)",
                dims.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("x"),
                product.map_or("too many".to_string(), |p| p.to_string())
            ),
        ));
    }
    if t.wraparound.len() != dims.len() {
        return Err(src.error_at(
            &["topology", "torus", "wraparound"],
            format!(
                "`wraparound` needs one true/false per axis ({}), not {}",
                dims.len(),
                t.wraparound.len()
            ),
        ));
    }
    check_link(
        src,
        &["topology", "torus", "link_bandwidth"],
        &t.link_bandwidth.value,
    )
}

impl Topology {
    /// Where one group of `size` devices `stride` apart, `per_node` of them in each node it
    /// spans, runs on these links: the torus axes or fully connected peers inside a node, then
    /// the inter-node network (oversubscribed or not).
    pub fn place_group(&self, size: u64, stride: u64, per_node: u64, inter: bool) -> String {
        let k = if inter { per_node.clamp(1, size) } else { size };
        let inside = if k <= 1 {
            None
        } else if let Some(t) = &self.torus {
            Some(t.describe(&t.place(k, stride)))
        } else if let Some(f) = &self.fully_connected {
            Some(format!(
                "{k} of {} fully connected ({} links each)",
                f.peers.value,
                k - 1
            ))
        } else {
            Some("intra-node".to_string())
        };
        if !inter {
            return inside.unwrap_or_default();
        }
        let nodes = size / k;
        let over = match &self.oversubscription {
            Some(o) if o.applies(stride.saturating_mul(size)) => {
                format!(
                    ", oversubscribed {}:1 beyond {}",
                    o.ratio.value, o.group.value
                )
            }
            _ => String::new(),
        };
        let across = format!("inter-node over {nodes} nodes{over}");
        match inside {
            Some(i) => format!("{i}, then {across}"),
            None => across,
        }
    }

    /// Each parallel dimension of `mesh` of more than one device and where its groups run
    /// ([`Topology::place_group`]): `tp 4 → torus x(4, ring)`, innermost first.
    pub fn placements(&self, mesh: &crate::strategy::Mesh) -> Vec<String> {
        mesh.axes
            .iter()
            .filter(|a| a.size > 1)
            .map(|a| {
                let inter = a.tier == crate::strategy::Tier::Inter;
                format!(
                    "{} {} → {}",
                    a.kind.name(),
                    a.size,
                    self.place_group(a.size, a.stride, a.per_node, inter)
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn torus(dims: &[u64], wrap: bool) -> Torus {
        Torus {
            dims: SourcedDims {
                value: dims.to_vec(),
                source: String::new(),
            },
            wraparound: vec![wrap; dims.len()],
            link_bandwidth: Sourced {
                value: Rational::one(),
                source: String::new(),
            },
        }
    }

    /// Every aligned placement's pieces are exactly the group: the devices `j · stride`,
    /// `j < size`, are the sums over the pieces of `position · step · P_axis`.
    #[test]
    fn placements_are_the_groups_in_mixed_radix() {
        let mut aligned = 0;
        for dims in [vec![4u64, 8, 8], vec![16, 16], vec![2, 3, 4], vec![6]] {
            let t = torus(&dims, true);
            let total: u64 = dims.iter().product();
            let place_value: Vec<u64> = dims
                .iter()
                .scan(1u64, |p, &d| {
                    let v = *p;
                    *p *= d;
                    Some(v)
                })
                .collect();
            for stride in 1..=total {
                for size in 2..=total / stride {
                    let want: std::collections::BTreeSet<u64> =
                        (0..size).map(|j| j * stride).collect();
                    let Placement::Axes(pieces) = t.place(size, stride) else {
                        continue;
                    };
                    aligned += 1;
                    let mut got = std::collections::BTreeSet::from([0u64]);
                    for p in &pieces {
                        let unit = p.step * place_value[p.axis];
                        got = got
                            .iter()
                            .flat_map(|&g| (0..p.len).map(move |i| g + i * unit))
                            .collect();
                        assert_eq!(p.wraps, p.len * p.step == dims[p.axis], "{p:?}");
                    }
                    assert_eq!(got, want, "{dims:?} size {size} stride {stride}");
                }
            }
        }
        assert!(aligned > 50, "{aligned}");
        assert_eq!(torus(&[4, 8, 8], true).place(3, 1), Placement::Unaligned);
        assert_eq!(torus(&[4, 8, 8], true).place(4, 3), Placement::Unaligned);
        assert_eq!(torus(&[4, 8], true).place(64, 1), Placement::Unaligned);
        // Without wraparound every piece is a line.
        let line = torus(&[4, 8], false);
        assert_eq!(
            line.ring_bandwidth(&line.place(32, 1)),
            Rational::from_integer(2.into())
        );
        let ring = torus(&[4, 8], true);
        assert_eq!(
            ring.ring_bandwidth(&ring.place(32, 1)),
            Rational::from_integer(4.into())
        );
    }
}
