//! A strategy's relative communication cost split by collective kind and link tier: the parts
//! of [`RelativeCost::comm_intra`](super::RelativeCost) and `comm_inter`, exactly.
//!
//! The evaluation prices the bytes of each axis at the balance κ of the tier the axis runs on
//! (a gradient reduction or tensor-parallel collective whose group spans nodes as the
//! hierarchical ring it runs as, its bytes split over both tiers:
//! [`MeshAxis::tier_shares`](crate::strategy::MeshAxis::tier_shares)); this module prices the
//! same bytes collective by collective (the busiest stage's rows of
//! [`Evaluation::comm`], each `bytes × count`, and the pipeline's point-to-point bytes). The
//! data-parallel gradient reduction is listed as the step runs it (the evaluation's rows follow
//! [`zero_reduction`](super::amount::zero_reduction)): one all-reduce without ZeRO; under ZeRO 1
//! a reduce-scatter and an all-gather of the updated weights; under ZeRO 2 a reduce-scatter
//! every micro-batch; under ZeRO 3 also an all-gather before every forward and backward.
//! Data-parallel collectives of every micro-batch (synchronised batch-norm statistics) are not
//! part of the relative cost, and so not of this split either.

use super::Evaluation;
use crate::calib::Calibration;
use crate::rules::CollectiveKind;
use crate::strategy::{AxisKind, Tier};
use crate::sym::Rational;
use num_traits::Zero;

/// One part of the communication cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CommPart {
    /// The collective (`send-recv` for pipeline exchanges).
    pub kind: CollectiveKind,
    /// The link tier it crosses.
    pub tier: Tier,
    /// κ of the tier × bytes, in FLOP-equivalents (busiest device, one step).
    pub cost: Rational,
}

/// The relative communication cost of `e` by collective kind and tier, in a fixed order (tier,
/// then kind), without zero parts. Their sum is `comm_intra + comm_inter` of `e.relative`.
pub fn comm_by_kind(e: &Evaluation, calib: &Calibration) -> Vec<CommPart> {
    let mut parts: Vec<CommPart> = Vec::new();
    let mut add = |kind: CollectiveKind, tier: Tier, bytes: Rational| {
        if bytes.is_zero() {
            return;
        }
        let cost = calib.balance(tier) * bytes;
        match parts.iter_mut().find(|p| p.kind == kind && p.tier == tier) {
            Some(p) => p.cost += cost,
            None => parts.push(CommPart { kind, tier, cost }),
        }
    };
    for c in &e.comm {
        if c.axis == AxisKind::Dp && !c.gradient {
            // A data-parallel collective of every micro-batch (the statistics of a batch norm
            // synchronised across data-parallel ranks): the relative cost leaves it out.
            continue;
        }
        let bytes = &c.bytes * Rational::from_integer(c.count.into());
        // Gradient reductions and tensor-parallel collectives run as rings, hierarchical where
        // their group spans nodes (an expert weight's, the ranks holding the same experts):
        // their bytes split over the tiers as the evaluation prices them.
        let axis = if c.expert_group {
            Some(e.mesh.expert_grad_axis(e.knobs.ep))
        } else {
            e.mesh.ring_axis(c.axis)
        };
        match axis {
            Some(axis) => {
                for (tier, share) in axis.tier_fractions() {
                    add(c.collective, tier, &bytes * share);
                }
            }
            None => add(c.collective, c.tier, bytes),
        }
    }
    add(
        CollectiveKind::SendRecv,
        e.mesh.p2p_tier(),
        e.p2p_bytes.clone(),
    );
    let order = |p: &CommPart| (p.tier == Tier::Inter, p.kind as u8);
    parts.sort_by_key(order);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelLoader;
    use crate::parallel::{evaluate_strategy, Layout};
    use crate::strategy::{Knobs, Schedule};

    /// The parts add up to the evaluation's communication cost, exactly, for data, tensor,
    /// pipeline, expert and context parallelism, every ZeRO stage, sequence parallelism and nodes of
    /// several sizes.
    #[test]
    fn the_parts_add_up_to_the_relative_communication_cost() {
        let loader = ModelLoader::embedded().unwrap();
        let calib = Calibration::reference().unwrap();
        let mut checked = 0;
        let mut experts = 0;
        for name in ["gpt3-1.3b", "llama2-7b", "mixtral-8x7b", "resnet50"] {
            let model = loader.resolve(name).unwrap();
            // A batch every mesh below divides into 4 micro-batches per data-parallel rank.
            let mut values = model.values.clone();
            if let Some(b) = &model.batch {
                values.insert(b.clone(), Rational::from_integer(64.into()));
            }
            for (dp, tp, pp, ep, cp) in [
                (8, 1, 1, 1, 1),
                (4, 2, 2, 1, 1),
                (2, 4, 4, 1, 1),
                (16, 8, 2, 1, 1),
                (8, 2, 2, 4, 1),
                (4, 2, 1, 1, 2),
                (2, 2, 2, 1, 4),
            ] {
                for zero in 0..=3u8 {
                    for sp in [false, true] {
                        for gpn in [4, 8] {
                            let mut k = Knobs::data_parallel(dp);
                            k.tp = tp;
                            k.pp = pp;
                            k.ep = ep;
                            k.cp = cp;
                            k.zero = zero;
                            k.sequence_parallel = sp;
                            k.microbatches = 4;
                            k.schedule = Schedule::OneFOneB;
                            let layout = Layout {
                                sequence_parallel: sp,
                                ..Layout::default()
                            };
                            let memory = Rational::from_integer(1_000_000_000_000u64.into());
                            let on = crate::calib::MachineRef::new(&calib, gpn, &memory);
                            let Ok((_, e)) = evaluate_strategy(&model, &values, &k, &layout, on)
                            else {
                                continue;
                            };
                            let parts = comm_by_kind(&e, &calib);
                            let sum: Rational = parts.iter().map(|p| &p.cost).sum();
                            assert_eq!(
                                sum,
                                &e.relative.comm_intra + &e.relative.comm_inter,
                                "{name} {k} on nodes of {gpn}: {parts:?}"
                            );
                            for tier in [Tier::Intra, Tier::Inter] {
                                let t: Rational = parts
                                    .iter()
                                    .filter(|p| p.tier == tier)
                                    .map(|p| &p.cost)
                                    .sum();
                                let want = if tier == Tier::Intra {
                                    &e.relative.comm_intra
                                } else {
                                    &e.relative.comm_inter
                                };
                                assert_eq!(&t, want, "{name} {k} {tier}");
                            }
                            checked += 1;
                            experts += usize::from(ep > 1);
                        }
                    }
                }
            }
        }
        assert!(checked > 100, "{checked}");
        assert!(experts > 0, "no strategy with expert parallelism priced");
    }
}
