//! Seconds from exact amounts: a roofline per operator and α–β per collective (REFERENCE.md:
//! ring all-reduce `2(n−1)·α + 2(n−1)/n·S/β`, ring all-gather and reduce-scatter
//! `(n−1)·α + (n−1)/n·S/β`). An axis whose groups span nodes is timed hierarchically: the
//! intra-node part among the group's devices in one node, then the inter-node part among nodes.
//! This is the only place where amounts become floating-point seconds.

use super::plan::Collective;
use crate::calib::Calibration;
use crate::strategy::{MeshAxis, Tier};
use crate::sym::Rational;
use num_traits::ToPrimitive;

/// One link tier's achievable rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkRate {
    /// Bytes per second (datasheet × efficiency).
    pub bandwidth: f64,
    /// Seconds per step (α).
    pub latency: f64,
    /// Whether collectives use a tree (logarithmic steps) rather than a ring.
    pub tree: bool,
}

/// A machine's achievable rates, as floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Achievable FLOP/s of matmul-like work (bf16 peak × matmul efficiency).
    pub matmul_flops: f64,
    /// Achievable FLOP/s of other work (the fp32 peak of the vector units × the same factor).
    pub other_flops: f64,
    /// Achievable HBM bytes per second.
    pub memory_bandwidth: f64,
    /// Peak bf16 FLOP/s (for MFU).
    pub peak_flops: f64,
    /// Inside a node.
    pub intra: LinkRate,
    /// Across nodes.
    pub inter: LinkRate,
}

fn f(r: &Rational) -> f64 {
    r.to_f64().unwrap_or(f64::MAX)
}

impl Rates {
    /// The rates of a calibration table.
    pub fn of(c: &Calibration) -> Rates {
        let d = &c.device;
        let eff = f(&d.efficiency.matmul.value);
        let peak = f(&d.peak_flops["bf16"].value);
        let vector = d
            .peak_flops
            .get("fp32")
            .map(|s| f(&s.value))
            .unwrap_or(peak);
        let link = |t: Tier| {
            let l = c.link(t);
            LinkRate {
                bandwidth: f(&c.achievable_bandwidth(t)),
                latency: f(&l.latency.value),
                tree: l.algorithm == "tree",
            }
        };
        Rates {
            matmul_flops: peak * eff,
            other_flops: vector * eff,
            memory_bandwidth: f(&d.memory_bandwidth.value) * f(&d.efficiency.memory_bound.value),
            peak_flops: peak,
            intra: link(Tier::Intra),
            inter: link(Tier::Inter),
        }
    }

    /// The rates of a tier.
    pub fn link(&self, t: Tier) -> LinkRate {
        match t {
            Tier::Intra => self.intra,
            Tier::Inter => self.inter,
        }
    }

    /// Roofline time of an operator: the larger of its FLOPs at the achievable FLOP/s of its
    /// class and its bytes at the achievable memory bandwidth.
    pub fn op_seconds(&self, flops: f64, bytes: f64, matmul: bool) -> f64 {
        let rate = if matmul {
            self.matmul_flops
        } else {
            self.other_flops
        };
        (flops / rate).max(bytes / self.memory_bandwidth)
    }

    /// Seconds of one call of a collective moving `wire` bytes per rank over `axis`.
    pub fn collective_seconds(&self, kind: Collective, wire: f64, axis: &MeshAxis) -> f64 {
        let n = axis.size;
        if n <= 1 || wire <= 0.0 {
            return 0.0;
        }
        let k = axis.per_node.clamp(1, n);
        if kind == Collective::OneStep || kind == Collective::AllToAll {
            // Every rank talks to others over the slowest tier the group crosses.
            let l = self.link(axis.tier);
            let steps = if kind == Collective::OneStep {
                1.0
            } else {
                (n - 1) as f64
            };
            return steps * l.latency + wire / l.bandwidth;
        }
        let full = wire / bus_factor(kind, n);
        if k >= n || axis.tier == Tier::Intra {
            return ring(kind, n, full, self.intra);
        }
        if k == 1 {
            return ring(kind, n, full, self.inter);
        }
        // Hierarchical: reduce-scatter inside the node, the collective of each device's 1/k
        // share across the n/k nodes, all-gather inside the node (for all-reduce); the
        // intra-node half alone for reduce-scatter and all-gather.
        let g = n / k;
        let intra_half = ring(Collective::ReduceScatter, k, full, self.intra);
        match kind {
            Collective::AllReduce => {
                2.0 * intra_half + ring(Collective::AllReduce, g, full / k as f64, self.inter)
            }
            _ => intra_half + ring(kind, g, full / k as f64, self.inter),
        }
    }

    /// Seconds of a point-to-point transfer of `bytes` over tier `t`.
    pub fn p2p_seconds(&self, bytes: f64, t: Tier) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        let l = self.link(t);
        l.latency + bytes / l.bandwidth
    }
}

/// The wire bytes per rank of a collective as a fraction of the logical tensor (nccl-tests bus
/// factors): `2(n−1)/n` for all-reduce, `(n−1)/n` for the others.
pub fn bus_factor(kind: Collective, n: u64) -> f64 {
    let frac = (n as f64 - 1.0) / n as f64;
    match kind {
        Collective::AllReduce => 2.0 * frac,
        Collective::OneStep => 1.0,
        _ => frac,
    }
}

/// Latency steps of a collective over `n` ranks: `2(n−1)` for a ring all-reduce, `n−1` for the
/// others; `2⌈log₂n⌉` and `⌈log₂n⌉` on a tree.
pub fn steps(kind: Collective, n: u64, tree: bool) -> f64 {
    let per = if tree {
        (n as f64).log2().ceil()
    } else {
        (n - 1) as f64
    };
    match kind {
        Collective::AllReduce => 2.0 * per,
        Collective::OneStep => 1.0,
        _ => per,
    }
}

/// α–β time of a flat collective of a `full`-byte logical tensor over `n` ranks of one tier.
fn ring(kind: Collective, n: u64, full: f64, l: LinkRate) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    steps(kind, n, l.tree) * l.latency + bus_factor(kind, n) * full / l.bandwidth
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::{AxisKind, Mesh};

    #[test]
    fn ring_all_reduce_matches_the_formula() {
        let c = Calibration::reference().unwrap();
        let r = Rates::of(&c);
        let m = Mesh::new(8, 1, 1, 8);
        let s = 1e9;
        let wire = 2.0 * 7.0 / 8.0 * s;
        let t = r.collective_seconds(Collective::AllReduce, wire, m.axis(AxisKind::Tp));
        let want = 14.0 * 3e-6 + wire / (450e9 * 0.8);
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
    }

    #[test]
    fn hierarchical_when_the_axis_spans_nodes() {
        let c = Calibration::reference().unwrap();
        let r = Rates::of(&c);
        // dp = 4 with tp = 4 on 8-GPU nodes: 2 dp ranks per node, 2 nodes.
        let m = Mesh::new(4, 4, 1, 8);
        let ax = m.axis(AxisKind::Dp);
        assert_eq!((ax.per_node, ax.tier), (2, Tier::Inter));
        let s = 1e9;
        let wire = 2.0 * 3.0 / 4.0 * s;
        let t = r.collective_seconds(Collective::AllReduce, wire, ax);
        let intra = 3e-6 + 0.5 * s / (450e9 * 0.8);
        let inter = 2.0 * 10e-6 + (s / 2.0) / (50e9 * 0.8);
        assert!((t - (2.0 * intra + inter)).abs() < 1e-12);
    }
}
