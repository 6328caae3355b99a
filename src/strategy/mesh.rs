//! Device meshes: named axes laid over nodes, each on a link tier.
//!
//! Devices are numbered with the tensor-parallel axis fastest, then data, then pipeline
//! (Megatron-LM's default order), so small tensor-parallel groups stay inside a node.

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
}

impl AxisKind {
    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            AxisKind::Tp => "tp",
            AxisKind::Dp => "dp",
            AxisKind::Pp => "pp",
            AxisKind::Ep => "ep",
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
    /// Devices of one group inside one node (= size when the group stays in a node).
    pub per_node: u64,
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
        let mut stride = 1;
        let mut axes = Vec::new();
        for (kind, size) in [(AxisKind::Tp, tp), (AxisKind::Dp, dp), (AxisKind::Pp, pp)] {
            let span = stride * size;
            let per_node = if stride >= gpus_per_node {
                1
            } else {
                size.min(gpus_per_node / stride).max(1)
            };
            let tier = if size <= 1 || span <= gpus_per_node {
                Tier::Intra
            } else {
                Tier::Inter
            };
            axes.push(MeshAxis {
                kind,
                size,
                stride,
                tier,
                per_node,
            });
            stride = span;
        }
        Mesh {
            devices: tp * dp * pp,
            gpus_per_node,
            axes,
        }
    }

    /// The axis of a kind.
    pub fn axis(&self, kind: AxisKind) -> &MeshAxis {
        self.axes
            .iter()
            .find(|a| a.kind == kind)
            .expect("every mesh has tp, dp and pp axes")
    }

    /// The tier of an expert-parallel group of `ep` consecutive data-parallel ranks.
    pub fn ep_tier(&self, ep: u64) -> Tier {
        let span = self.axis(AxisKind::Tp).size * ep;
        if ep <= 1 || span <= self.gpus_per_node {
            Tier::Intra
        } else {
            Tier::Inter
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
