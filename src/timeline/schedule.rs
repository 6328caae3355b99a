//! Pipeline schedules: the order in which one device runs the forward and backward passes of its
//! model chunks over the micro-batches — GPipe (Huang et al. 2019), 1F1B (PipeDream-Flush) and
//! interleaved 1F1B (Narayanan et al. SC'21, as Megatron-LM orders it) and ZB-H1 (Qi et al.,
//! ICLR 2024, arXiv:2401.10241).

use crate::strategy::Schedule;

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward (with any recomputation); under a schedule that splits the backward
    /// ([`Schedule::splits_backward`]), only the gradient of the stage's input.
    Backward,
    /// The gradient of the weights, deferred from the backward (ZB-H1's W).
    Weight,
}

/// One value per pass, named by pass (a block's chain seconds, its steps, what a task waits
/// for). Indexed by [`Pass`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerPass<T> {
    /// The forward pass's.
    pub forward: T,
    /// The backward pass's.
    pub backward: T,
    /// The weight-gradient pass's (empty or zero unless the schedule splits the backward).
    pub weight: T,
}

impl<T> std::ops::Index<Pass> for PerPass<T> {
    type Output = T;

    fn index(&self, p: Pass) -> &T {
        match p {
            Pass::Forward => &self.forward,
            Pass::Backward => &self.backward,
            Pass::Weight => &self.weight,
        }
    }
}

impl<T> std::ops::IndexMut<Pass> for PerPass<T> {
    fn index_mut(&mut self, p: Pass) -> &mut T {
        match p {
            Pass::Forward => &mut self.forward,
            Pass::Backward => &mut self.backward,
            Pass::Weight => &mut self.weight,
        }
    }
}

/// One unit of a device's program: a pass of a model chunk over a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Task {
    /// Forward or backward.
    pub pass: Pass,
    /// Virtual stage (`chunk × pp + device stage`).
    pub stage: usize,
    /// Micro-batch.
    pub microbatch: usize,
}

/// The program of pipeline rank `s` of `p`, with `m` micro-batches and `v` chunks per rank.
pub fn program(schedule: Schedule, s: usize, p: usize, m: usize, v: usize) -> Vec<Task> {
    let task = |pass, chunk: usize, microbatch| Task {
        pass,
        stage: chunk * p + s,
        microbatch,
    };
    match schedule {
        Schedule::Gpipe => (0..m)
            .map(|j| task(Pass::Forward, 0, j))
            .chain((0..m).map(|j| task(Pass::Backward, 0, j)))
            .collect(),
        Schedule::OneFOneB if v <= 1 => {
            let warm = (p - s - 1).min(m);
            let mut out: Vec<Task> = (0..warm).map(|j| task(Pass::Forward, 0, j)).collect();
            for i in 0..m - warm {
                out.push(task(Pass::Forward, 0, warm + i));
                out.push(task(Pass::Backward, 0, i));
            }
            out.extend((m - warm..m).map(|j| task(Pass::Backward, 0, j)));
            out
        }
        Schedule::ZeroBubbleH1 => zero_bubble_h1(s, p, m),
        _ => interleaved(s, p, m, v.max(1)),
    }
}

/// ZB-H1 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024,
/// arXiv:2401.10241, §3.1 and its Figure 3): 1F1B's forwards and backwards (B, the input
/// gradient, sent upstream at once), with each micro-batch's weight gradient W deferred. Rank
/// `s` runs its first `s` backwards without a W, then a W (of the oldest micro-batch still
/// waiting for one) after each further backward, and the `s` W's left at the end; so the last
/// ranks, whose bubble is at the start of the cooldown, fill it with W's, and no rank holds
/// more than `min(m, p)` micro-batches' activations (rank 0's count under 1F1B). PyTorch's
/// `ScheduleInterleavedZeroBubble` with one stage per rank orders it so (pytorch/pytorch,
/// torch/distributed/pipelining/schedules.py: `_get_1f1b_rank_ops` with
/// `num_1f1b_microbatches = rank`, `enable_zero_bubble=True`).
fn zero_bubble_h1(s: usize, p: usize, m: usize) -> Vec<Task> {
    let task = |pass, microbatch| Task {
        pass,
        stage: s,
        microbatch,
    };
    let warm = (p - s - 1).min(m);
    let mut out: Vec<Task> = (0..warm).map(|j| task(Pass::Forward, j)).collect();
    let mut weights = 0;
    for j in 0..m {
        if j + warm < m {
            out.push(task(Pass::Forward, j + warm));
        }
        out.push(task(Pass::Backward, j));
        if j >= s {
            out.push(task(Pass::Weight, weights));
            weights += 1;
        }
    }
    out.extend((weights..m).map(|j| task(Pass::Weight, j)));
    out
}

/// Megatron-LM's interleaved order: virtual micro-batch `k` runs chunk `(k / p) mod v` on
/// micro-batch `(k / (p·v))·p + k mod p`; backward visits chunks in reverse. Needs `m` to be
/// a multiple of `p` (checked by the plan); with `m = p` every forward comes first, as there.
fn interleaved(s: usize, p: usize, m: usize, v: usize) -> Vec<Task> {
    let total = m * v;
    let mb = |k: usize| (k / (p * v)) * p + k % p;
    let fwd = |k: usize| Task {
        pass: Pass::Forward,
        stage: ((k / p) % v) * p + s,
        microbatch: mb(k),
    };
    let bwd = |k: usize| Task {
        pass: Pass::Backward,
        stage: (v - 1 - (k / p) % v) * p + s,
        microbatch: mb(k),
    };
    let warm = if m == p {
        total
    } else {
        ((p - s - 1) * 2 + (v - 1) * p).min(total)
    };
    let mut out: Vec<Task> = (0..warm).map(fwd).collect();
    for i in 0..total - warm {
        out.push(fwd(warm + i));
        out.push(bwd(i));
    }
    out.extend((total - warm..total).map(bwd));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_once() {
        for (sched, v) in [
            (Schedule::Gpipe, 1),
            (Schedule::OneFOneB, 1),
            (Schedule::Interleaved, 2),
            (Schedule::Interleaved, 3),
            (Schedule::ZeroBubbleH1, 1),
        ] {
            for s in 0..4 {
                let prog = program(sched, s, 4, 8, v);
                let passes = if sched.splits_backward() { 3 } else { 2 };
                assert_eq!(prog.len(), passes * 8 * v);
                let mut seen = std::collections::HashSet::new();
                for t in &prog {
                    assert!(seen.insert(*t), "{t:?} twice");
                    assert_eq!(t.stage % 4, s);
                }
                // A backward never precedes its forward, a weight gradient its backward.
                for (i, t) in prog.iter().enumerate() {
                    let before = match t.pass {
                        Pass::Forward => continue,
                        Pass::Backward => Pass::Forward,
                        Pass::Weight => Pass::Backward,
                    };
                    let f = Task { pass: before, ..*t };
                    assert!(prog[..i].contains(&f));
                }
            }
        }
    }

    /// The most micro-batches rank `s` holds at once: forwards run, weight gradients (the last
    /// step that reads a micro-batch's activations) not yet, or backwards not yet where the
    /// schedule does not split them.
    fn peak_in_flight(prog: &[Task], split: bool) -> usize {
        let done = if split { Pass::Weight } else { Pass::Backward };
        let (mut held, mut peak) = (0usize, 0usize);
        for t in prog {
            if t.pass == Pass::Forward {
                held += 1;
            } else if t.pass == done {
                held -= 1;
            }
            peak = peak.max(held);
        }
        peak
    }

    #[test]
    fn zb_h1_holds_what_1f1b_holds_on_rank_0() {
        for (p, m) in [(4, 8), (4, 4), (4, 2), (8, 5), (2, 9), (1, 3)] {
            let zb: Vec<usize> = (0..p)
                .map(|s| peak_in_flight(&program(Schedule::ZeroBubbleH1, s, p, m, 1), true))
                .collect();
            let ofob: Vec<usize> = (0..p)
                .map(|s| peak_in_flight(&program(Schedule::OneFOneB, s, p, m, 1), false))
                .collect();
            // Every ZB-H1 rank holds min(m, p), 1F1B's rank-0 count and its peak over ranks.
            assert!(zb.iter().all(|&n| n == m.min(p)), "p={p} m={m}: {zb:?}");
            assert_eq!(zb.iter().max(), ofob.iter().max(), "p={p} m={m}");
        }
    }

    #[test]
    fn zb_h1_defers_rank_s_weights_by_s_backwards() {
        let prog = program(Schedule::ZeroBubbleH1, 3, 4, 6, 1);
        let names: Vec<String> = prog
            .iter()
            .map(|t| {
                let c = match t.pass {
                    Pass::Forward => 'F',
                    Pass::Backward => 'B',
                    Pass::Weight => 'W',
                };
                format!("{c}{}", t.microbatch)
            })
            .collect();
        assert_eq!(
            names.join(" "),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5"
        );
        let first = program(Schedule::ZeroBubbleH1, 0, 4, 6, 1);
        assert_eq!(
            first[3],
            Task {
                pass: Pass::Forward,
                stage: 0,
                microbatch: 3
            }
        );
        assert_eq!(first[4].pass, Pass::Backward);
        assert_eq!(
            first[5],
            Task {
                pass: Pass::Weight,
                stage: 0,
                microbatch: 0
            }
        );
    }
}
