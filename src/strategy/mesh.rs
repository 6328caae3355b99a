//! Device meshes: named axes laid over nodes, each on a link tier.
//!
//! Devices are numbered with the tensor-parallel axis fastest, then context, then data, then
//! pipeline (Megatron-LM's default order `tp-cp-ep-dp-pp`), so small tensor-parallel groups
//! stay inside a node.

use serde::Serialize;
use std::fmt;

/// A class of links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// Inside a node (NVLink / NVSwitch).
    Intra,
    /// Across nodes (InfiniBand).
    Inter,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Intra => "intra-node",
            Tier::Inter => "inter-node",
        })
    }
}

/// The parallel dimensions a mesh axis can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AxisKind {
    /// Tensor (and sequence) parallelism.
    Tp,
    /// Data parallelism.
    Dp,
    /// Pipeline parallelism.
    Pp,
    /// Expert parallelism (groups of data-parallel ranks).
    Ep,
    /// Context parallelism (the sequence cut over ranks, keys and values passed in a ring).
    Cp,
}

impl AxisKind {
    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            AxisKind::Tp => "tp",
            AxisKind::Dp => "dp",
            AxisKind::Pp => "pp",
            AxisKind::Ep => "ep",
            AxisKind::Cp => "cp",
        }
    }
}

/// One axis of the mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeshAxis {
    /// What it is for.
    pub kind: AxisKind,
    /// Devices along it.
    pub size: u64,
    /// Distance in device numbers between neighbours along it.
    pub stride: u64,
    /// The slowest tier its groups cross.
    pub tier: Tier,
    /// Devices of one group inside each node it spans (= size when the group stays in a node);
    /// 1 when its groups spread over the nodes unevenly ([`Mesh::with_cp`]), whose rings then
    /// run flat over the slowest tier.
    pub per_node: u64,
}

impl MeshAxis {
    /// The two tiers of this axis (an expert-parallel group's, [`Mesh::ep_axis`]) as a collective
    /// run node by node sees them: one device per node across the nodes the group spans, at the
    /// group's per-node stride over the slowest tier; and the group's devices of one node over
    /// the intra-node links.
    pub fn by_node(&self) -> (MeshAxis, MeshAxis) {
        let per_node = self.per_node.clamp(1, self.size.max(1));
        let across = MeshAxis {
            kind: self.kind,
            size: self.size.div_ceil(per_node),
            stride: self.stride.saturating_mul(per_node),
            tier: self.tier,
            per_node: 1,
        };
        let inside = MeshAxis {
            kind: self.kind,
            size: per_node,
            stride: self.stride,
            tier: Tier::Intra,
            per_node,
        };
        (across, inside)
    }

    /// The shares of a ring collective's wire bytes per rank (all-reduce, reduce-scatter,
    /// all-gather) over this axis that cross each link tier, as `(tier, numerator,
    /// denominator)`, summing to 1. A group inside one node, or with one device per node, runs
    /// its ring on the tier it crosses. A group of `n` devices spanning `g` nodes with `k` in
    /// each runs hierarchically, as NCCL does on multi-GPU nodes and as the timeline times it:
    /// a ring among the `k` devices of each node over the intra-node links, and a ring of each
    /// device's `1/k` share among the `g` nodes over the inter-node links. Of the `(n − 1)/n · S`
    /// bytes a rank's reduce-scatter or all-gather of `S` bytes puts on the wire
    /// (all-reduce: twice that), `(k − 1)/k · S` go over the intra-node links and
    /// `(g − 1)/g · S/k` over the inter-node links: the shares `g(k − 1)/(n − 1)` and
    /// `(g − 1)/(n − 1)`.
    pub fn tier_shares(&self) -> Vec<(Tier, u64, u64)> {
        let (n, k) = (self.size, self.per_node.clamp(1, self.size.max(1)));
        if self.tier == Tier::Intra || n <= 1 || k >= n || k <= 1 {
            return vec![(self.tier, 1, 1)];
        }
        let g = n / k;
        vec![
            (Tier::Intra, g * (k - 1), n - 1),
            (Tier::Inter, g - 1, n - 1),
        ]
    }

    /// [`Self::tier_shares`] as exact fractions.
    pub fn tier_fractions(&self) -> Vec<(Tier, crate::sym::Rational)> {
        self.tier_shares()
            .into_iter()
            .map(|(tier, num, den)| (tier, crate::sym::Rational::new(num.into(), den.into())))
            .collect()
    }
}

/// A device mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mesh {
    /// Devices in all.
    pub devices: u64,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// Axes, fastest first.
    pub axes: Vec<MeshAxis>,
}

impl Mesh {
    /// A tp × dp × pp mesh over nodes of `gpus_per_node` devices.
    pub fn new(tp: u64, dp: u64, pp: u64, gpus_per_node: u64) -> Mesh {
        Mesh::with_cp(tp, 1, dp, pp, gpus_per_node)
    }

    /// The mesh of a strategy's knobs.
    pub fn of(k: &crate::strategy::Knobs, gpus_per_node: u64) -> Mesh {
        Mesh::with_cp(k.tp, k.cp, k.dp, k.pp, gpus_per_node)
    }

    /// A tp × cp × dp × pp mesh over nodes of `gpus_per_node` devices; the context-parallel
    /// axis is listed only when cp > 1.
    ///
    /// A group stays inside a node only if its block of consecutive devices does: on nodes of 8
    /// every power-of-two block of up to 8 does, but on nodes of 72 (an NVL72 rack) a block of
    /// 64, 32 or 16 devices starting at a multiple of its size crosses a rack boundary wherever
    /// the mesh spans several racks (devices 64–127 lie in racks 0 and 1). Such groups cross the
    /// inter-node links; when a group's devices are not spread evenly over the nodes it spans,
    /// its rings are timed flat over those links (`per_node` = 1, as for one device per node),
    /// since no even hierarchical split of its traffic exists.
    pub fn with_cp(tp: u64, cp: u64, dp: u64, pp: u64, gpus_per_node: u64) -> Mesh {
        let devices = tp * cp * dp * pp;
        let mut stride = 1;
        let mut axes = Vec::new();
        for (kind, size) in [
            (AxisKind::Tp, tp),
            (AxisKind::Cp, cp),
            (AxisKind::Dp, dp),
            (AxisKind::Pp, pp),
        ] {
            if kind == AxisKind::Cp && size <= 1 {
                continue;
            }
            axes.push(axis_at(kind, size, stride, gpus_per_node, devices));
            stride *= size;
        }
        Mesh {
            devices,
            gpus_per_node,
            axes,
        }
    }

    /// The context-parallel axis (size 1 when there is none).
    pub fn cp_axis(&self) -> MeshAxis {
        match self.axes.iter().find(|a| a.kind == AxisKind::Cp) {
            Some(a) => a.clone(),
            None => axis_at(
                AxisKind::Cp,
                1,
                self.axis(AxisKind::Tp).size,
                self.gpus_per_node,
                self.devices,
            ),
        }
    }

    /// The axis whose ring collectives carry a dimension's bytes where the relative cost splits
    /// them over the tiers ([`MeshAxis::tier_shares`]): the gradient reductions' group for data
    /// parallelism, the tensor-parallel axis; none for the others (all-to-alls, the
    /// context-parallel ring and pipeline sends run on the tier they cross).
    pub fn ring_axis(&self, kind: AxisKind) -> Option<MeshAxis> {
        match kind {
            AxisKind::Dp => Some(self.grad_axis()),
            AxisKind::Tp => Some(self.axis(AxisKind::Tp).clone()),
            _ => None,
        }
    }

    /// The group that holds the same weights and reduces their gradients: the data-parallel
    /// ranks of every context-parallel rank, dp × cp devices at the tensor-parallel stride
    /// (Megatron-LM's data-parallel-with-context-parallel group). Without context parallelism
    /// it is the data-parallel axis.
    pub fn grad_axis(&self) -> MeshAxis {
        let dp = self.axis(AxisKind::Dp);
        let cp = self.cp_axis();
        if cp.size <= 1 {
            return dp.clone();
        }
        MeshAxis {
            kind: AxisKind::Dp,
            ..axis_at(
                AxisKind::Dp,
                dp.size * cp.size,
                cp.stride,
                self.gpus_per_node,
                self.devices,
            )
        }
    }

    /// The axis the gradients of expert weights are reduced over under expert parallelism of
    /// degree `ep`: the dp·cp/ep ranks that hold the same experts (Megatron-Core's
    /// expert-data-parallel group). Expert-parallel groups are `ep` consecutive ranks of the
    /// cp × dp ranks at the tensor-parallel stride ([`Mesh::ep_tier`]), so the ranks holding
    /// the same experts are every `ep`-th of them, `tp × ep` devices apart. Without expert
    /// parallelism it is [`Mesh::grad_axis`].
    pub fn expert_grad_axis(&self, ep: u64) -> MeshAxis {
        let grad = self.grad_axis();
        if ep <= 1 || !grad.size.is_multiple_of(ep) {
            return grad;
        }
        let tp = self.axis(AxisKind::Tp).size;
        axis_at(
            AxisKind::Dp,
            grad.size / ep,
            tp * ep,
            self.gpus_per_node,
            self.devices,
        )
    }

    /// The axis of a kind.
    pub fn axis(&self, kind: AxisKind) -> &MeshAxis {
        self.axes
            .iter()
            .find(|a| a.kind == kind)
            .expect("every mesh has tp, dp and pp axes")
    }

    /// The tier of an expert-parallel group of `ep` ranks. Megatron-Core numbers the expert
    /// layers' ranks tp-ep-dp-pp over the same devices (its expert `RankGenerator` has cp = 1;
    /// megatron/core/parallel_state.py, see the expert-parallel pricing in `parallel::moe`): a group is `ep`
    /// consecutive ranks at the tensor-parallel stride, drawn from the cp × dp ranks,
    /// context-parallel ones first. Without context parallelism they are `ep` consecutive
    /// data-parallel ranks: blocks of tp × ep devices, which stay in a node only where the
    /// block divides the node (or the whole mesh is one node): ep = 64 on 72-GPU racks keeps the
    /// block of devices 0–63 in rack 0, but 64–127 spans racks 0 and 1.
    pub fn ep_tier(&self, ep: u64) -> Tier {
        let span = self.axis(AxisKind::Tp).size * ep;
        if ep <= 1 || stays_in_node(span, self.gpus_per_node, self.devices) {
            Tier::Intra
        } else {
            Tier::Inter
        }
    }

    /// The axis of an expert-parallel group of `ep` ranks: `ep` ranks next to each other at the
    /// tensor-parallel stride ([`Mesh::ep_tier`]), `gpus_per_node / tp` of them in each node it
    /// spans.
    pub fn ep_axis(&self, ep: u64) -> MeshAxis {
        let tp = self.axis(AxisKind::Tp).size;
        MeshAxis {
            kind: AxisKind::Ep,
            size: ep.max(1),
            stride: tp,
            tier: self.ep_tier(ep),
            per_node: (self.gpus_per_node / tp.max(1)).clamp(1, ep.max(1)),
        }
    }

    /// Whether every node an expert-parallel group of `ep` ranks spans holds as many of its
    /// ranks as the others (always where it stays in one node).
    pub fn ep_even(&self, ep: u64) -> bool {
        let a = self.ep_axis(ep);
        a.tier == Tier::Intra || a.size.is_multiple_of(a.per_node)
    }

    /// The nodes one expert-parallel group of `ep` ranks spans: 1 where it stays in a node.
    pub fn ep_nodes(&self, ep: u64) -> u64 {
        let a = self.ep_axis(ep);
        if a.tier == Tier::Intra {
            1
        } else {
            a.by_node().0.size
        }
    }

    /// The tier point-to-point traffic between adjacent pipeline stages crosses.
    pub fn p2p_tier(&self) -> Tier {
        let pp = self.axis(AxisKind::Pp);
        if pp.stride >= self.gpus_per_node {
            Tier::Inter
        } else {
            pp.tier
        }
    }
}

/// How the blocks of `span` consecutive devices that tile `devices` (the groups of an axis
/// whose ranks are consecutive: tensor parallelism, tp × cp for context parallelism, tp × ep
/// for expert parallelism, tp × cp × dp for data parallelism) lie on nodes of `gpus_per_node`:
/// `[blocks, crossing, uneven]`, the blocks, those that cross a boundary between nodes, and of
/// those the ones with unequal numbers of devices in the nodes they span. Blocks of 64 over 192
/// devices on 72-GPU racks give `[3, 2, 2]` (64–127 holds 8 devices of rack 0 and 56 of rack 1).
pub fn block_placement(span: u64, gpus_per_node: u64, devices: u64) -> [u64; 3] {
    let g = gpus_per_node.max(1);
    if span == 0 || !devices.is_multiple_of(span) {
        return [0; 3];
    }
    let blocks = devices / span;
    let (mut crossing, mut uneven) = (0, 0);
    for i in 0..blocks {
        let (first, last) = (i * span, i * span + span - 1);
        if first / g == last / g {
            continue;
        }
        crossing += 1;
        // The first and last nodes hold what the boundaries leave; those between, whole nodes.
        let head = g - first % g;
        let tail = last % g + 1;
        if head != tail || (last / g - first / g > 1 && head != g) {
            uneven += 1;
        }
    }
    [blocks, crossing, uneven]
}

/// Whether every block of `span` consecutive devices starting at a multiple of `span` lies
/// inside one node of `gpus_per_node` on a mesh of `devices`: the block divides the node, or the
/// mesh is at most one node.
fn stays_in_node(span: u64, gpus_per_node: u64, devices: u64) -> bool {
    let g = gpus_per_node.max(1);
    span <= 1 || devices <= g || (span <= g && g.is_multiple_of(span))
}

/// An axis of `size` devices `stride` apart over nodes of `gpus_per_node`, on a mesh of
/// `devices`. Its groups lie in blocks of `stride × size` consecutive devices: inside one node
/// where [`stays_in_node`]; else with `gpus_per_node / stride` devices in each node they span
/// where the stride divides the node and the node the block; else one device in each node
/// (stride of a node or more), or unevenly, which is timed as one per node.
fn axis_at(kind: AxisKind, size: u64, stride: u64, gpus_per_node: u64, devices: u64) -> MeshAxis {
    let g = gpus_per_node.max(1);
    let span = stride * size;
    let (tier, per_node) = if size <= 1 || stays_in_node(span, g, devices) {
        (Tier::Intra, size.max(1))
    } else if stride < g && g.is_multiple_of(stride) && span.is_multiple_of(g) {
        (Tier::Inter, g / stride)
    } else {
        (Tier::Inter, 1)
    };
    MeshAxis {
        kind,
        size,
        stride,
        tier,
        per_node,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring collective's bytes by tier: all on the tier of a group inside one node or with one
    /// device per node; a group spanning nodes with several devices in each puts `g(k−1)/(n−1)`
    /// of them inside the nodes and `(g−1)/(n−1)` across them, which add up to the wire bytes
    /// the ring over all `n` ranks moves. Checked against the hierarchical ring's own volumes:
    /// `(k−1)/k·S` inside and `(g−1)/g·S/k` across, of `(n−1)/n·S` on the wire.
    #[test]
    fn ring_bytes_split_over_the_tiers_their_group_crosses() {
        let dp = |tp: u64, dp: u64| Mesh::new(tp, dp, 1, 8).axis(AxisKind::Dp).clone();
        assert_eq!(dp(1, 8).tier_shares(), vec![(Tier::Intra, 1, 1)]);
        assert_eq!(dp(8, 16).tier_shares(), vec![(Tier::Inter, 1, 1)]);
        assert_eq!(
            dp(1, 64).tier_shares(),
            vec![(Tier::Intra, 56, 63), (Tier::Inter, 7, 63)]
        );
        for (tp, n) in [(1u64, 16u64), (2, 32), (4, 8), (1, 1024), (2, 12)] {
            let axis = dp(tp, n);
            let (k, g) = (axis.per_node, n / axis.per_node);
            let shares = axis.tier_shares();
            if k == 1 || k >= n {
                assert_eq!(shares, vec![(axis.tier, 1, 1)], "{tp} {n}");
                continue;
            }
            let frac = |num: u64, den: u64| num as f64 / den as f64;
            let wire = frac(n - 1, n);
            let intra = frac(k - 1, k);
            let inter = frac(g - 1, g) / k as f64;
            assert!((frac(shares[0].1, shares[0].2) * wire - intra).abs() < 1e-12);
            assert!((frac(shares[1].1, shares[1].2) * wire - inter).abs() < 1e-12);
            assert_eq!(shares[0].2, shares[1].2);
            assert_eq!(shares[0].1 + shares[1].1, shares[0].2);
        }
    }

    /// The ranks holding the same experts are `tp × ep` devices apart: with tp = 1 and ep = 8 on
    /// nodes of 8 each node holds one expert-parallel group, and an expert's replicas are one
    /// per node, their ring across the nodes alone; with ep = 2 four of them share each node.
    #[test]
    fn expert_gradients_reduce_over_the_ranks_holding_the_same_experts() {
        let mesh = Mesh::new(1, 32, 1, 8);
        let ep8 = mesh.expert_grad_axis(8);
        assert_eq!(
            (ep8.size, ep8.stride, ep8.tier, ep8.per_node),
            (4, 8, Tier::Inter, 1)
        );
        let ep2 = mesh.expert_grad_axis(2);
        assert_eq!(
            (ep2.size, ep2.stride, ep2.tier, ep2.per_node),
            (16, 2, Tier::Inter, 4)
        );
        assert_eq!(mesh.expert_grad_axis(1), mesh.grad_axis());
        // One node: the group stays inside it.
        let node = Mesh::new(1, 8, 1, 8).expert_grad_axis(4);
        assert_eq!((node.size, node.tier), (2, Tier::Intra));
        // With tp = 2 and context parallelism the expert-parallel groups are drawn from the
        // cp × dp ranks: cp = 2, dp = 4, ep = 4 leaves pairs 8 devices apart.
        let cp = Mesh::with_cp(2, 2, 4, 1, 8).expert_grad_axis(4);
        assert_eq!((cp.size, cp.stride), (2, 8));
    }

    /// On nodes of 72 (an NVL72 rack) a block of 64, 32 or 16 consecutive devices starting at a
    /// multiple of its size crosses a rack boundary once the mesh spans racks: its groups cross
    /// the inter-node links, whatever their size. Blocks that divide the rack stay in it; a
    /// mesh of one rack, or 64 of each rack's 72 used as a node, keeps them inside.
    #[test]
    fn groups_straddling_node_boundaries_cross_the_inter_node_tier() {
        let racks = Mesh::new(1, 576, 1, 72);
        assert_eq!(racks.ep_tier(64), Tier::Inter);
        assert_eq!(racks.ep_tier(32), Tier::Inter);
        assert_eq!(racks.ep_tier(8), Tier::Intra);
        assert_eq!(racks.ep_tier(72), Tier::Intra);
        assert_eq!(Mesh::new(1, 64, 1, 72).ep_tier(64), Tier::Intra);
        assert_eq!(Mesh::new(1, 576, 1, 64).ep_tier(64), Tier::Intra);
        // tp × ep devices: tp = 8, ep = 8 is a block of 64; ep = 9 fills the rack.
        assert_eq!(Mesh::new(8, 72, 1, 72).ep_tier(8), Tier::Inter);
        assert_eq!(Mesh::new(8, 72, 1, 72).ep_tier(9), Tier::Intra);
        // 64 data-parallel ranks under 9 stages: devices 64–127 form one group.
        let dp = Mesh::new(1, 64, 9, 72).axis(AxisKind::Dp).clone();
        assert_eq!((dp.tier, dp.per_node), (Tier::Inter, 1));
        assert_eq!(dp.tier_shares(), vec![(Tier::Inter, 1, 1)]);
        assert_eq!(Mesh::new(1, 64, 9, 64).axis(AxisKind::Dp).tier, Tier::Intra);
        // The context-parallel ring of tp = 8, cp = 4: blocks of 32.
        assert_eq!(Mesh::with_cp(8, 4, 2, 9, 72).cp_axis().tier, Tier::Inter);
        assert_eq!(Mesh::with_cp(8, 3, 3, 8, 72).cp_axis().tier, Tier::Intra);
        // Evenly spread groups keep the hierarchical split: 9 of 72 ranks in each rack.
        let dp = Mesh::new(8, 72, 1, 72).axis(AxisKind::Dp).clone();
        assert_eq!((dp.tier, dp.per_node), (Tier::Inter, 9));
        assert_eq!(
            dp.tier_shares(),
            vec![(Tier::Intra, 64, 71), (Tier::Inter, 7, 71)]
        );
        // Unevenly spread ones (12 ranks over nodes of 8: 8 + 4) put all their ring bytes on a
        // tier, none lost.
        for m in [Mesh::new(1, 12, 2, 8), Mesh::new(8, 24, 3, 72)] {
            let shares = m.axis(AxisKind::Dp).tier_shares();
            let sum: crate::sym::Rational = m
                .axis(AxisKind::Dp)
                .tier_fractions()
                .into_iter()
                .map(|(_, f)| f)
                .sum();
            assert_eq!(
                sum,
                crate::sym::Rational::from_integer(1.into()),
                "{shares:?}"
            );
            assert_eq!(shares, vec![(Tier::Inter, 1, 1)]);
        }
    }

    #[test]
    fn tiers_follow_node_boundaries() {
        let m = Mesh::new(8, 16, 8, 8);
        assert_eq!(m.axis(AxisKind::Tp).tier, Tier::Intra);
        assert_eq!(m.axis(AxisKind::Dp).tier, Tier::Inter);
        assert_eq!(m.axis(AxisKind::Dp).per_node, 1);
        let m = Mesh::new(2, 4, 1, 8);
        assert_eq!(m.axis(AxisKind::Dp).tier, Tier::Intra);
        let m = Mesh::new(2, 8, 1, 8);
        assert_eq!(m.axis(AxisKind::Dp).tier, Tier::Inter);
        assert_eq!(m.axis(AxisKind::Dp).per_node, 4);
        assert_eq!(Mesh::new(2, 2, 2, 8).p2p_tier(), Tier::Intra);
        assert_eq!(Mesh::new(8, 1, 4, 8).p2p_tier(), Tier::Inter);
    }

    #[test]
    fn context_parallel_sits_between_tensor_and_data_parallelism() {
        // Megatron-LM's rank order tp-cp-ep-dp-pp: tp = 4, cp = 2 fill a node of 8.
        let m = Mesh::with_cp(4, 2, 4, 2, 8);
        assert_eq!(m.devices, 64);
        assert_eq!(m.cp_axis().stride, 4);
        assert_eq!(m.cp_axis().tier, Tier::Intra);
        assert_eq!(m.axis(AxisKind::Dp).stride, 8);
        assert_eq!(m.axis(AxisKind::Pp).stride, 32);
        let g = m.grad_axis();
        assert_eq!(
            (g.size, g.stride, g.tier, g.per_node),
            (8, 4, Tier::Inter, 2)
        );
        // tp · cp beyond a node: the ring crosses nodes.
        let m = Mesh::with_cp(8, 4, 1, 1, 8);
        assert_eq!(m.cp_axis().tier, Tier::Inter);
        assert_eq!(m.grad_axis().size, 4);
        assert_eq!(m.grad_axis().tier, Tier::Inter);
        // Expert-parallel groups at the tensor-parallel stride, across cp before dp: tp = 2,
        // cp = 2, ep = 4 spans 8 devices, one node; ep = 8 spans two.
        let m = Mesh::with_cp(2, 2, 4, 1, 8);
        assert_eq!(m.ep_tier(4), Tier::Intra);
        assert_eq!(m.ep_tier(8), Tier::Inter);
        assert_eq!(Mesh::with_cp(1, 4, 2, 1, 8).ep_tier(8), Tier::Intra);
        assert_eq!(Mesh::new(2, 8, 1, 8).ep_tier(4), Tier::Intra);
        assert_eq!(Mesh::new(2, 8, 1, 8).ep_tier(8), Tier::Inter);
        // cp = 1 is the plain mesh.
        assert_eq!(Mesh::with_cp(2, 1, 4, 2, 8), Mesh::new(2, 4, 2, 8));
        assert_eq!(
            Mesh::new(2, 4, 2, 8).grad_axis(),
            *Mesh::new(2, 4, 2, 8).axis(AxisKind::Dp)
        );
    }
}
