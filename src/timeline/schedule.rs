//! Pipeline schedules: the order in which one device runs the forward and backward passes of its
//! model chunks over the micro-batches — GPipe (Huang et al. 2019), 1F1B (PipeDream-Flush) and
//! interleaved 1F1B (Narayanan et al. SC'21, as Megatron-LM orders it).

use crate::strategy::Schedule;

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward (with any recomputation).
    Backward,
}

/// One value per pass, named by pass (a block's chain seconds, its steps, what a task waits
/// for). Indexed by [`Pass`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerPass<T> {
    /// The forward pass's.
    pub forward: T,
    /// The backward pass's.
    pub backward: T,
}

impl<T> std::ops::Index<Pass> for PerPass<T> {
    type Output = T;

    fn index(&self, p: Pass) -> &T {
        match p {
            Pass::Forward => &self.forward,
            Pass::Backward => &self.backward,
        }
    }
}

impl<T> std::ops::IndexMut<Pass> for PerPass<T> {
    fn index_mut(&mut self, p: Pass) -> &mut T {
        match p {
            Pass::Forward => &mut self.forward,
            Pass::Backward => &mut self.backward,
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
        _ => interleaved(s, p, m, v.max(1)),
    }
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
        ] {
            for s in 0..4 {
                let prog = program(sched, s, 4, 8, v);
                assert_eq!(prog.len(), 2 * 8 * v);
                let mut seen = std::collections::HashSet::new();
                for t in &prog {
                    assert!(seen.insert(*t), "{t:?} twice");
                    assert_eq!(t.stage % 4, s);
                }
                // A backward never precedes its forward.
                for (i, t) in prog.iter().enumerate() {
                    if t.pass == Pass::Backward {
                        let f = Task {
                            pass: Pass::Forward,
                            ..*t
                        };
                        assert!(prog[..i].contains(&f));
                    }
                }
            }
        }
    }
}
