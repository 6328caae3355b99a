//! Pipeline schedules: the order in which one device runs the forward and backward passes of its
//! model chunks over the micro-batches — GPipe (Huang et al. 2019), 1F1B (PipeDream-Flush) and
//! interleaved 1F1B (Narayanan et al. SC'21, as Megatron-LM orders it) and ZB-H1 (Qi et al.,
//! ICLR 2024, arXiv:2401.10241), its V-shaped ZB-V (the same paper, §6), DualPipe
//! (DeepSeek-V3 Technical Report, arXiv:2412.19437, §3.2.1) and its V-shaped DualPipeV
//! (deepseek-ai/DualPipe, dualpipe/dualpipev.py).

use crate::strategy::Schedule;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

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

/// The program of pipeline rank `s` of `p`, with `m` micro-batches and `v` chunks per rank
/// (ZB-V: always two, [`rank_of`] places them).
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
            let mut out: Vec<Task> = Vec::with_capacity(2 * m);
            out.extend((0..warm).map(|j| task(Pass::Forward, 0, j)));
            for i in 0..m - warm {
                out.push(task(Pass::Forward, 0, warm + i));
                out.push(task(Pass::Backward, 0, i));
            }
            out.extend((m - warm..m).map(|j| task(Pass::Backward, 0, j)));
            out
        }
        Schedule::ZeroBubbleH1 => zero_bubble_h1(s, p, m),
        Schedule::DualPipe if p > 1 => dualpipe(s, p, m).0,
        // One rank: each backward and its weight gradient, one after the other.
        Schedule::DualPipe => zero_bubble_h1(s, p, m),
        Schedule::ZeroBubbleV if p > 1 => zero_bubble_v(s, p, m),
        Schedule::DualPipeV if p > 1 => dualpipe_v(s, p, m).0,
        Schedule::ZeroBubbleV | Schedule::DualPipeV => zero_bubble_h1(s, p, m),
        _ => interleaved(s, p, m, v.max(1)),
    }
}

/// [`program`] with [`paired`] and [`sends_after_next`] of its tasks, from one walk of it.
pub fn program_with_pairs(
    schedule: Schedule,
    s: usize,
    p: usize,
    m: usize,
    v: usize,
) -> (Vec<Task>, Vec<bool>, Vec<bool>) {
    match schedule {
        Schedule::DualPipe if p > 1 => dualpipe(s, p, m),
        Schedule::DualPipeV if p > 1 => dualpipe_v(s, p, m),
        _ => {
            let tasks = program(schedule, s, p, m, v);
            let none = vec![false; tasks.len()];
            (tasks, none.clone(), none)
        }
    }
}

/// Per task of [`program`] (`len` tasks), whether it runs overlapped with the next one: under
/// DualPipe and DualPipeV the forward of an F&B chunk, with the backward that follows it;
/// false everywhere else.
pub fn paired(schedule: Schedule, s: usize, p: usize, m: usize, len: usize) -> Vec<bool> {
    match schedule {
        Schedule::DualPipe if p > 1 => dualpipe(s, p, m).1,
        Schedule::DualPipeV if p > 1 => dualpipe_v(s, p, m).1,
        _ => vec![false; len],
    }
}

/// Per task of [`program`], whether what it sends waits for the next task: under DualPipe a
/// full backward chunk (its input gradient, then its weight gradient) sends its gradient when
/// the whole chunk is done, as `DualPipe._backward_chunk` does (and an F&B chunk both its
/// outputs); the same under DualPipeV (`DualPipeV._backward_chunk`); false everywhere else.
/// `len`: the tasks of the rank's [`program`].
pub fn sends_after_next(schedule: Schedule, s: usize, p: usize, m: usize, len: usize) -> Vec<bool> {
    match schedule {
        Schedule::DualPipe if p > 1 => dualpipe(s, p, m).2,
        Schedule::DualPipeV if p > 1 => dualpipe_v(s, p, m).2,
        _ => vec![false; len],
    }
}

/// The pipeline rank that holds virtual stage `stage` of `p` ranks (its own copy, under
/// DualPipe): its position modulo `p` (interleaving places chunk c of rank s as stage c·p + s),
/// except under ZB-V, whose second chunks run back up the ranks: stage j ≥ p on rank
/// 2p − 1 − j (PyTorch's `generate_stage_to_rank_mapping(..., style="v")`).
pub fn rank_of(schedule: Schedule, stage: usize, p: usize) -> usize {
    if schedule.v_shaped() && stage >= p && stage < 2 * p {
        2 * p - 1 - stage
    } else {
        stage % p
    }
}

/// The pipeline ranks that hold virtual stage `stage` of `p` ranks: [`rank_of`], and under
/// DualPipe also rank p − 1 − stage, which holds the mirrored copy (DualPipe needs p even, so
/// the two differ).
pub fn stage_ranks(schedule: Schedule, stage: usize, p: usize) -> impl Iterator<Item = usize> {
    let own = rank_of(schedule, stage, p);
    let mirror = (schedule.bidirectional() && p > 1 && stage < p && p - 1 - stage != own)
        .then(|| p - 1 - stage);
    std::iter::once(own).chain(mirror)
}

/// Under DualPipe, the micro-batches whose activations rank `s` of `p` (even, more than 1)
/// holds at once with `m` micro-batches, as pairs (of its own stage s, of its mirrored stage
/// p − 1 − s): every state of its [`program`] that no other state exceeds in both, in program
/// order. A micro-batch is held from its forward to its weight gradient, the last task that
/// reads its activations. Their largest sum is the DeepSeek-V3 report's PP + 1 (arXiv:2412.19437,
/// Table 2) on every rank; how it divides between the rank's two stages differs: rank 0, first
/// in one direction and last in the other, holds p micro-batches of stage 0 and one of
/// stage p − 1.
pub fn dualpipe_held(s: usize, p: usize, m: usize) -> Vec<Vec<u64>> {
    by_parts(Schedule::DualPipe, (s, p, m, 1), &[0, 1])
}

/// The micro-batches whose activations rank `s` of `p` holds at once with `m` micro-batches, per
/// class of its parts, where it runs more than one: under DualPipe (p even, more than 1) its
/// own stage s and its mirrored stage p − 1 − s ([`dualpipe_held`]); under ZB-V (p > 1) its
/// chunks s and 2p − 1 − s ([`zero_bubble_v_frontier`]); interleaved with `v` > 1 chunks, its
/// chunks in order ([`interleaved_frontier`]; `m` a multiple of `p`). `class` gives each
/// part's class, one per part (parts of one class hold the same per micro-batch, so their counts
/// add): the
/// states whose class counts no other exceeds in every class. Empty under the other schedules.
/// Each walk is kept per thread: a search asks for the same few ranks of many strategies.
pub fn rank_held(
    schedule: Schedule,
    (s, p, m, v): (usize, usize, usize, usize),
    class: &[usize],
) -> Rc<[Vec<u64>]> {
    // Per shape, the walks of each class vector seen (a few).
    type Walked = HashMap<(Schedule, [usize; 4]), Vec<(Vec<usize>, Rc<[Vec<u64>]>)>>;
    thread_local! {
        static WALKED: RefCell<Walked> = RefCell::new(HashMap::new());
    }
    let key = (schedule, [s, p, m, v]);
    let known = WALKED.with(|w| {
        let w = w.borrow();
        let seen = w.get(&key)?;
        seen.iter()
            .find(|(c, _)| c == class)
            .map(|(_, x)| x.clone())
    });
    if let Some(x) = known {
        return x;
    }
    let held: Rc<[Vec<u64>]> = by_parts(schedule, (s, p, m, v), class).into();
    WALKED.with(|w| {
        let mut w = w.borrow_mut();
        w.entry(key)
            .or_default()
            .push((class.to_vec(), held.clone()));
    });
    held
}

/// The walk of [`rank_held`]: the program of rank `s` of `p` with `m` micro-batches and `v`
/// chunks, as far as its states can differ (DualPipe's past 2p micro-batches only repeats its
/// main step, whose F&B chunks each forward and fully backward a micro-batch of both phases;
/// ZB-V's and interleaving's, [`zero_bubble_v_frontier`] and [`interleaved_frontier`]), its
/// states counted per class of parts, and their frontier.
fn by_parts(
    schedule: Schedule,
    (s, p, m, v): (usize, usize, usize, usize),
    class: &[usize],
) -> Vec<Vec<u64>> {
    let (program, by_chunk) = match schedule {
        Schedule::DualPipe if p > 1 => (dualpipe(s, p, m.min(2 * p)).0, false),
        Schedule::ZeroBubbleV if p > 1 => (zero_bubble_v(s, p, m.min(2 * p)), false),
        // DualPipeV's main step (each of its iterations a forward and a full backward of both
        // chunks) repeats the same states: 2p micro-batches, the fewest it runs, hold them all.
        Schedule::DualPipeV if p > 1 => (dualpipe_v(s, p, 2 * p).0, false),
        // Interleaving runs the micro-batches in groups of p: no order for other counts.
        Schedule::Interleaved if p > 1 && v > 1 && m.is_multiple_of(p) => {
            let m = if m > 3 * p { 3 * p } else { m };
            (interleaved(s, p, m, v), true)
        }
        _ => return Vec::new(),
    };
    // A stage's part of the rank: its chunk (interleaved), or whether it is not stage s.
    let of = |stage: usize| {
        class[if by_chunk {
            stage / p
        } else {
            usize::from(stage != s)
        }]
    };
    let classes = class.iter().max().map_or(0, |c| c + 1);
    frontier(held_states(program, classes, of, release(schedule)))
}

/// The states of `states` that no other exceeds in every part, in order of first appearance.
fn frontier(states: impl Iterator<Item = Vec<u64>>) -> Vec<Vec<u64>> {
    let under = |x: &[u64], y: &[u64]| x.iter().zip(y).all(|(a, b)| a <= b);
    let mut out: Vec<Vec<u64>> = Vec::new();
    for held in states {
        if !out.iter().any(|x| under(&held, x)) {
            out.retain(|x| !under(x, &held));
            out.push(held);
        }
    }
    out
}

/// Under ZB-V, the chunk micro-batches rank `s` of `p` holds of its chunks s and 2p − 1 − s:
/// every state of its [`program`] that no other exceeds in both, a micro-batch held from its
/// forward to its weight gradient. From 2p − 1 micro-batches on the program's warm-up is the
/// same and its steady step repeats two states, (2p − s, s) and (2p − s − 1, s + 1), so the walk
/// stops at 2p micro-batches whatever `m` is. Their largest sum is [`zero_bubble_v_held`].
pub fn zero_bubble_v_frontier(s: usize, p: usize, m: usize) -> Vec<Vec<u64>> {
    by_parts(Schedule::ZeroBubbleV, (s, p, m, 2), &[0, 1])
}

/// Interleaved with `v` chunks, the micro-batches rank `s` of `p` holds of each of its chunks
/// (in chunk order): every state of its [`program`] that no other exceeds in every chunk, a
/// micro-batch held from its forward to its backward. Past the warm-up, the forward of virtual
/// micro-batch w + i and the backward of i both advance a whole round of every chunk every p·v
/// steps, so the states repeat with period p·v; 3p micro-batches (a multiple of p, as
/// interleaving needs) hold a whole period after any warm-up, which is under (v + 1)·p virtual
/// micro-batches. So the walk stops at 3p micro-batches whatever `m` is. Their largest sum is
/// [`interleaved_peak`].
pub fn interleaved_frontier(s: usize, p: usize, m: usize, v: usize) -> Vec<Vec<u64>> {
    let class: Vec<usize> = (0..v).collect();
    by_parts(Schedule::Interleaved, (s, p, m, v), &class)
}

/// The pass after which a micro-batch's activations are freed: the weight gradient where the
/// schedule splits the backward, else the backward.
fn release(schedule: Schedule) -> Pass {
    if schedule.splits_backward() {
        Pass::Weight
    } else {
        Pass::Backward
    }
}

/// The micro-batches a rank holds of each of its `parts` after each forward and each `release`
/// of `program`, in program order; `part` gives a stage's part.
fn held_states(
    program: Vec<Task>,
    parts: usize,
    part: impl Fn(usize) -> usize,
    release: Pass,
) -> impl Iterator<Item = Vec<u64>> {
    let mut held = vec![0u64; parts];
    program.into_iter().filter_map(move |t| {
        let i = part(t.stage);
        match t.pass {
            Pass::Forward => held[i] += 1,
            x if x == release => held[i] -= 1,
            _ => return None,
        }
        Some(held.clone())
    })
}

/// Under DualPipe, the micro-batches rank `s` of `p` holds of its own stage and of its mirrored
/// stage after each forward and each weight gradient of its whole [`program`] with `m`
/// micro-batches, in program order.
#[cfg(test)]
fn dualpipe_states(s: usize, p: usize, m: usize) -> impl Iterator<Item = Vec<u64>> {
    let part = move |stage: usize| usize::from(stage != s);
    held_states(dualpipe(s, p, m).0, 2, part, Pass::Weight)
}

/// The pipeline rank that runs `stage` for `microbatch`: the stage's own rank ([`rank_of`]),
/// except under DualPipe, whose second half of the micro-batches (`m/2..m`) enters at rank
/// p − 1 and runs stage i on rank p − 1 − i.
pub fn device_of(schedule: Schedule, stage: usize, microbatch: usize, p: usize, m: usize) -> usize {
    if schedule.bidirectional() && p > 1 && microbatch >= m / 2 {
        p - 1 - stage
    } else {
        rank_of(schedule, stage, p)
    }
}

/// Under ZB-V, the most micro-batches' activations rank `s` of `p` holds at once, in chunks
/// (a micro-batch of one of its two chunks each): min(2m, m + s + 1, 2p). From 2p − 1
/// micro-batches on every rank holds 2p, p micro-batches of a whole stage, what 1F1B's first
/// stage holds (Qi et al., arXiv:2401.10241, §6: ZB-V keeps 1F1B's peak memory). A test walks
/// the program for it.
pub fn zero_bubble_v_held(s: usize, p: usize, m: usize) -> u64 {
    (2 * m).min(m + s + 1).min(2 * p) as u64
}

/// One DualPipe rank's program being written: its tasks, which run paired with the next, and
/// the count of forwards and backwards so far of each of its two phases.
struct DualProgram {
    s: usize,
    p: usize,
    m: usize,
    /// DualPipeV: phase 0 is chunk s, phase 1 chunk 2p − 1 − s, every micro-batch through both.
    vee: bool,
    tasks: Vec<Task>,
    paired: Vec<bool>,
    joined: Vec<bool>,
    forwards: [usize; 2],
    backwards: [usize; 2],
    /// Backwards whose weight gradient waits for a W of its own, oldest first.
    deferred: std::collections::VecDeque<Task>,
}

impl DualProgram {
    /// An empty program of rank `s` of `p` with `m` micro-batches (DualPipeV's where `vee`).
    fn new(s: usize, p: usize, m: usize, vee: bool) -> DualProgram {
        DualProgram {
            s,
            p,
            m,
            vee,
            tasks: Vec::new(),
            paired: Vec::new(),
            joined: Vec::new(),
            forwards: [0, 0],
            backwards: [0, 0],
            deferred: Default::default(),
        }
    }

    /// The stage and the first micro-batch of `phase` on this rank: phase 0 is the direction
    /// in which the rank is stage h = min(s, p − 1 − s), phase 1 the one in which it is stage
    /// p − 1 − h (deepseek-ai/DualPipe: "For the first half of the ranks: phase 0 means forward
    /// direction, phase 1 means reverse direction", the other way round for the second half).
    fn phase(&self, phase: usize) -> (usize, usize) {
        if self.vee {
            let stage = if phase == 0 {
                self.s
            } else {
                2 * self.p - 1 - self.s
            };
            return (stage, 0);
        }
        let h = self.s.min(self.p - 1 - self.s);
        let second_half = self.s >= self.p / 2;
        let direction = phase ^ usize::from(second_half);
        let stage = if phase == 0 { h } else { self.p - 1 - h };
        (stage, direction * (self.m / 2))
    }

    fn push(&mut self, pass: Pass, stage: usize, microbatch: usize, paired: bool) {
        self.tasks.push(Task {
            pass,
            stage,
            microbatch,
        });
        self.paired.push(paired);
        self.joined.push(false);
    }

    /// A forward chunk of `phase` (the first of an F&B chunk when `paired`).
    fn forward(&mut self, phase: usize, paired: bool) {
        let (stage, base) = self.phase(phase);
        self.push(Pass::Forward, stage, base + self.forwards[phase], paired);
        self.forwards[phase] += 1;
    }

    /// A backward chunk of `phase`: its weight gradient right after it, or with `zb` deferred
    /// to a later [`DualProgram::weight`].
    fn backward(&mut self, phase: usize, zb: bool) {
        let (stage, base) = self.phase(phase);
        let mb = base + self.backwards[phase];
        self.backwards[phase] += 1;
        self.push(Pass::Backward, stage, mb, false);
        if zb {
            let t = *self.tasks.last().expect("just pushed");
            self.deferred.push_back(t);
        } else {
            *self.joined.last_mut().expect("just pushed") = true;
            self.push(Pass::Weight, stage, mb, false);
        }
    }

    /// The weight gradient of the oldest deferred backward.
    fn weight(&mut self) {
        if let Some(t) = self.deferred.pop_front() {
            self.push(Pass::Weight, t.stage, t.microbatch, false);
        }
    }

    /// An F&B chunk: the forward of `f` and the full backward of `b`, overlapped.
    fn forward_backward(&mut self, f: usize, b: usize) {
        self.forward(f, true);
        self.backward(b, false);
    }
}

/// DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1, Figure 5)
/// on rank `s` of `p` (even) with `m` micro-batches (even, at least 2p), half fed from each end:
/// the [`eight_steps`] of `DualPipe.step` in deepseek-ai/DualPipe (dualpipe/dualpipe.py) on the
/// rank h = min(s, p − 1 − s) places from the nearer end of p/2, the two middle ranks
/// innermost. Returns the tasks, which run paired with the next (an F&B chunk's forward), and
/// which send only after the next: a full backward is its input gradient then its weight
/// gradient, two tasks, and sends when both are done.
fn dualpipe(s: usize, p: usize, m: usize) -> (Vec<Task>, Vec<bool>, Vec<bool>) {
    eight_steps(
        DualProgram::new(s, p, m, false),
        p / 2,
        s.min(p - 1 - s),
        m / 2,
    )
}

/// The eight steps `DualPipe.step` and `DualPipeV.step` share, on a rank `k` places from the
/// nearer end of `n` (DualPipe: h of p/2; DualPipeV: s of p) with `per_end` micro-batches fed
/// from each end (DualPipe: m/2; DualPipeV: all m down the V): 2(n − k − 1) forwards of phase 0;
/// k + 1 pairs of forwards of phases 0 and 1; n − k − 1 of (backward 1 with its W deferred, a W,
/// forward 1); the main step, per_end − 2n + k + 1 times an F&B chunk of (0, 1) and one of
/// (1, 0), where the innermost rank's (k = n − 1) first (0, 1) runs its forward and backward one
/// after the other; n − k − 1 of (backward 1, F&B (1, 0)); k + 1 of (backward 1, backward 0),
/// from the middle of them on with their W's deferred; n − k − 1 of (W, backward 0 with its W
/// deferred); and the W's left.
fn eight_steps(
    mut d: DualProgram,
    n: usize,
    k: usize,
    per_end: usize,
) -> (Vec<Task>, Vec<bool>, Vec<bool>) {
    let innermost = k + 1 == n;
    for _ in 0..2 * (n - k - 1) {
        d.forward(0, false);
    }
    for _ in 0..=k {
        d.forward(0, false);
        d.forward(1, false);
    }
    for _ in 0..n - k - 1 {
        d.backward(1, true);
        d.weight();
        d.forward(1, false);
    }
    for i in 0..(per_end + k + 1).saturating_sub(2 * n) {
        if i == 0 && innermost {
            d.forward(0, false);
            d.backward(1, false);
        } else {
            d.forward_backward(0, 1);
        }
        d.forward_backward(1, 0);
    }
    for _ in 0..n - k - 1 {
        d.backward(1, false);
        d.forward_backward(1, 0);
    }
    // From the middle of these k + 1 pairs on (`step_6 // 2`, step_6 = k + 1), the weight
    // gradients are deferred: before the pair's first backward where k is odd, its second
    // where k is even.
    let (mut zb, mid) = (false, k.div_ceil(2));
    for i in 0..=k {
        if i == mid && !k.is_multiple_of(2) {
            zb = true;
        }
        d.backward(1, zb);
        if i == mid && k.is_multiple_of(2) {
            zb = true;
        }
        d.backward(0, zb);
    }
    for _ in 0..n - k - 1 {
        d.weight();
        d.backward(0, true);
    }
    while !d.deferred.is_empty() {
        d.weight();
    }
    (d.tasks, d.paired, d.joined)
}

/// DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py, `DualPipeV.step`; PyTorch's
/// `ScheduleDualPipeV._calculate_single_rank_operations`, torch/distributed/pipelining/
/// schedules.py, the same order) on rank `s` of `p` with `m` micro-batches (at least 2p): the
/// [`eight_steps`] on its chunks s (phase 0) and 2p − 1 − s (phase 1), the rank s places from
/// the V's ends and every micro-batch down it, the last rank innermost. Returns what
/// [`dualpipe`] does.
fn dualpipe_v(s: usize, p: usize, m: usize) -> (Vec<Task>, Vec<bool>, Vec<bool>) {
    eight_steps(DualProgram::new(s, p, m, true), p, s, m)
}

/// Under DualPipeV, the most chunk micro-batches rank `s` of `p` holds at once with `m`
/// micro-batches (at least 2p): 2p + 1 on every rank, a micro-batch held from its forward to
/// its weight gradient (deepseek-ai/DualPipe's README: "Activation Per Device" PP + 1 for PP
/// stages, 2p here). A test walks the program for it.
pub fn dualpipe_v_held(p: usize) -> u64 {
    2 * p as u64 + 1
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
    let mut out: Vec<Task> = Vec::with_capacity(3 * m);
    out.extend((0..warm).map(|j| task(Pass::Forward, j)));
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

/// ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, §6) on
/// rank `s` of `p` with `m` micro-batches, in the order of PyTorch's `ScheduleZBVZeroBubble`
/// (pytorch/pytorch, torch/distributed/pipelining/schedules.py,
/// `_calculate_single_rank_operations`). Chunk 0 is virtual stage s, chunk 1 stage 2p − 1 − s.
/// With n = max(m, 2p − 1) micro-batches: 2(p − s) − 1 forwards of chunk 0; s pairs of
/// forwards of chunks 1 and 0; p − s of (forward, B and W of chunk 1); then, until every
/// forward has run, (forward of chunk 0 while any is left, B and W of chunk 0, forward, B and
/// W of chunk 1); s of (B of chunk 0, B of chunk 1); p − s of (B of chunk 0, the oldest W of
/// chunk 0 left); the W's of chunk 1 left, then those of chunk 0. The tasks of micro-batches
/// past m are dropped, as PyTorch drops them.
fn zero_bubble_v(s: usize, p: usize, m: usize) -> Vec<Task> {
    let n = m.max(2 * p - 1);
    let chunk = [s, 2 * p - 1 - s];
    let mut out: Vec<Task> = Vec::with_capacity(6 * n);
    let (mut f, mut b, mut w) = ([0usize; 2], [0usize; 2], [0usize; 2]);
    let mut push = |pass: Pass, c: usize, count: &mut [usize; 2]| {
        out.push(Task {
            pass,
            stage: chunk[c],
            microbatch: count[c],
        });
        count[c] += 1;
    };
    for _ in 0..2 * (p - s) - 1 {
        push(Pass::Forward, 0, &mut f);
    }
    for _ in 0..s {
        push(Pass::Forward, 1, &mut f);
        push(Pass::Forward, 0, &mut f);
    }
    for _ in 0..p - s {
        push(Pass::Forward, 1, &mut f);
        push(Pass::Backward, 1, &mut b);
        push(Pass::Weight, 1, &mut w);
    }
    while f[1] < f[0] || f[0] < n {
        if f[0] < n {
            push(Pass::Forward, 0, &mut f);
        }
        push(Pass::Backward, 0, &mut b);
        push(Pass::Weight, 0, &mut w);
        push(Pass::Forward, 1, &mut f);
        push(Pass::Backward, 1, &mut b);
        push(Pass::Weight, 1, &mut w);
    }
    for _ in 0..s {
        push(Pass::Backward, 0, &mut b);
        push(Pass::Backward, 1, &mut b);
    }
    for _ in 0..p - s {
        push(Pass::Backward, 0, &mut b);
        push(Pass::Weight, 0, &mut w);
    }
    while w[1] < b[1] {
        push(Pass::Weight, 1, &mut w);
    }
    while w[0] < b[0] {
        push(Pass::Weight, 0, &mut w);
    }
    debug_assert!(f == b && b == w && f == [n, n]);
    out.retain(|t| t.microbatch < m);
    out
}

/// The forwards rank `s` of `p` runs before its first backward, interleaved with `v` chunks and
/// `m` micro-batches (`m·v` virtual micro-batches): Megatron-Core's `(p − s − 1)·2 + (v − 1)·p`,
/// all of them where that reaches `m·v` (`get_pp_rank_microbatches` in
/// megatron/core/pipeline_parallel/schedules.py, `microbatch_group_size_per_vp_stage` at its
/// default of `p`; since NVIDIA/Megatron-LM@4295be1a6c, 2024-11, Megatron-Core 0.10). Before it
/// every rank ran all its forwards first when `m = p`; now only the ranks whose count reaches
/// `m·v` do (rank 0 always at `m = p`, the last rank never).
fn interleaved_warm_up(s: usize, p: usize, m: usize, v: usize) -> usize {
    ((p - s - 1) * 2 + (v - 1) * p).min(m * v)
}

/// Interleaved with `v` chunks, the most chunk micro-batches rank `s` of `p` holds at once with
/// `m` micro-batches: its warm-up's forwards and the steady state's next one, at most all `m·v`.
/// Rank 0 holds (v + 1)·p − 1 from 2p micro-batches on, Narayanan et al.'s (1 + (p − 1)/(p·v))
/// times 1F1B's p micro-batches of a whole stage (SC'21, §2.2); the later ranks hold more than
/// that formula scaled by their 1F1B counts, (v − 1)·p + 1 on the last rank, as every rank runs
/// (v − 1)·p forwards before any backward. A test walks the program for it.
pub fn interleaved_peak(s: usize, p: usize, m: usize, v: usize) -> u64 {
    (interleaved_warm_up(s, p, m, v) + 1).min(m * v) as u64
}

/// Megatron-LM's interleaved order: virtual micro-batch `k` runs chunk `(k / p) mod v` on
/// micro-batch `(k / (p·v))·p + k mod p`; backward visits chunks in reverse. Needs `m` to be
/// a multiple of `p` (checked by the plan).
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
    let warm = interleaved_warm_up(s, p, m, v);
    let mut out: Vec<Task> = Vec::with_capacity(2 * total);
    out.extend((0..warm).map(fwd));
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

    /// deepseek-ai/DualPipe's README ("Pipeline Bubbles and Memory Usage Comparison"):
    /// DualPipeV holds PP + 1 micro-batches of one of its PP stages' activations per device,
    /// PP = 2p chunks here, whatever the rank and the micro-batch count (at least 2p).
    #[test]
    fn dualpipe_v_holds_two_pp_plus_one_on_every_rank() {
        for p in [2usize, 3, 4, 5, 8] {
            for m in [2 * p, 2 * p + 1, 3 * p, 5 * p + 2] {
                for s in 0..p {
                    let prog = program(Schedule::DualPipeV, s, p, m, 2);
                    let part = move |stage: usize| usize::from(stage != s);
                    let peak = held_states(prog.clone(), 2, part, Pass::Weight)
                        .map(|h| h.iter().sum::<u64>())
                        .max();
                    assert_eq!(peak, Some(dualpipe_v_held(p)), "p {p} m {m} rank {s}");
                    // The walk's frontier, bounded at 2p micro-batches, is the whole program's.
                    let whole = frontier(held_states(prog, 2, part, Pass::Weight));
                    assert_eq!(
                        whole,
                        by_parts(Schedule::DualPipeV, (s, p, m, 2), &[0, 1]),
                        "p {p} m {m} rank {s}"
                    );
                }
            }
        }
    }

    /// `DualPipeV.step` (deepseek-ai/DualPipe, dualpipe/dualpipev.py) on 2 ranks and 4
    /// micro-batches, written out by hand from its eight steps. Rank 0 (chunks 0 and 3): step 1
    /// two forwards of chunk 0; step 2 one pair of forwards; step 3 (B of chunk 3 with its W
    /// deferred, that W, a forward of chunk 3); step 4 once (4 − 4 + 0 + 1) F&B(0, 3) then
    /// F&B(3, 0); step 5 (a full backward of chunk 3, F&B(3, 0)); step 6 one pair, its second
    /// backward's W deferred (rank 0 even); step 7 (that W, a backward of chunk 0 with its W
    /// deferred); step 8 the last W. Rank 1, the last (chunks 1 and 2): step 2 two pairs; step 4
    /// twice, its first (1, 2) a forward and a full backward one after the other, not
    /// overlapped; step 6 two pairs, the second's W's deferred (rank 1 odd: from its first
    /// backward); step 8 two W's. `f`, `b`, `w`: forward, input gradient, weight gradient, of
    /// chunk.micro-batch; `&`: runs overlapped with the next.
    #[test]
    fn dualpipe_v_order_for_two_ranks() {
        let show = |s: usize| -> String {
            let prog = program(Schedule::DualPipeV, s, 2, 4, 2);
            let pairs = paired(Schedule::DualPipeV, s, 2, 4, prog.len());
            prog.iter()
                .zip(&pairs)
                .map(|(t, pair)| {
                    let c = match t.pass {
                        Pass::Forward => 'f',
                        Pass::Backward => 'b',
                        Pass::Weight => 'w',
                    };
                    format!(
                        "{c}{}.{}{}",
                        t.stage,
                        t.microbatch,
                        if *pair { "&" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            show(0),
            "f0.0 f0.1 f0.2 f3.0 b3.0 w3.0 f3.1 f0.3& b3.1 w3.1 f3.2& b0.0 w0.0 b3.2 w3.2 \
             f3.3& b0.1 w0.1 b3.3 w3.3 b0.2 w0.2 b0.3 w0.3"
        );
        assert_eq!(
            show(1),
            "f1.0 f2.0 f1.1 f2.1 f1.2 b2.0 w2.0 f2.2& b1.0 w1.0 f1.3& b2.1 w2.1 f2.3& b1.1 w1.1 \
             b2.2 w2.2 b1.2 w1.2 b2.3 b1.3 w2.3 w1.3"
        );
    }

    #[test]
    fn every_pass_once() {
        for (sched, v) in [
            (Schedule::Gpipe, 1),
            (Schedule::OneFOneB, 1),
            (Schedule::Interleaved, 2),
            (Schedule::Interleaved, 3),
            (Schedule::ZeroBubbleH1, 1),
            (Schedule::ZeroBubbleV, 2),
            (Schedule::DualPipeV, 2),
        ] {
            for s in 0..4 {
                let prog = program(sched, s, 4, 8, v);
                let passes = if sched.splits_backward() { 3 } else { 2 };
                assert_eq!(prog.len(), passes * 8 * v);
                let mut seen = std::collections::HashSet::new();
                for t in &prog {
                    assert!(seen.insert(*t), "{t:?} twice");
                    assert_eq!(rank_of(sched, t.stage, 4), s);
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

    /// DeepSeek-V3 Technical Report (arXiv:2412.19437), Table 2: DualPipe's activation memory
    /// is PP + 1 micro-batches of a stage. The program holds that many at its peak on every
    /// rank, and its states' frontier agrees with a count over the whole program.
    #[test]
    fn dualpipe_holds_pp_plus_one_on_every_rank() {
        for (p, m) in [
            (2, 4),
            (4, 8),
            (4, 10),
            (8, 16),
            (8, 20),
            (16, 32),
            (16, 120),
        ] {
            for s in 0..p {
                let frontier = dualpipe_held(s, p, m);
                let peak = frontier.iter().map(|x| x[0] + x[1]).max().unwrap();
                assert_eq!(peak, p as u64 + 1, "p={p} m={m} s={s}: {frontier:?}");
                let prog = program(Schedule::DualPipe, s, p, m, 1);
                assert_eq!(
                    peak as usize,
                    peak_in_flight(&prog, true),
                    "p={p} m={m} s={s}"
                );
                // No state dominates another.
                for a in &frontier {
                    for b in &frontier {
                        assert!(a == b || a[0] < b[0] || a[1] < b[1], "{frontier:?}");
                    }
                }
            }
            // Rank 0 is the first stage of one direction and the last of the other.
            assert!(
                dualpipe_held(0, p, m).contains(&vec![p as u64, 1]),
                "p={p} m={m}"
            );
        }
    }

    /// The states past 2p micro-batches repeat: the bounded walk of [`dualpipe_held`] finds
    /// what a walk of the whole program finds.
    #[test]
    fn dualpipe_held_is_bounded_in_the_micro_batches() {
        for (p, m) in [
            (2, 6),
            (4, 10),
            (4, 30),
            (8, 18),
            (8, 64),
            (16, 34),
            (16, 120),
        ] {
            for s in 0..p {
                let states: Vec<Vec<u64>> = dualpipe_states(s, p, m).collect();
                let frontier = dualpipe_held(s, p, m);
                // Every state of the whole program is at or under one of the frontier's, and
                // every frontier state occurs in it.
                for x in &states {
                    assert!(
                        frontier.iter().any(|f| f[0] >= x[0] && f[1] >= x[1]),
                        "p={p} m={m} s={s}: {x:?} not under {frontier:?}"
                    );
                }
                for f in &frontier {
                    assert!(states.contains(f), "p={p} m={m} s={s}: {f:?}");
                }
            }
        }
    }

    /// ZB-V's held chunks: [`zero_bubble_v_held`] against a walk of the program, and from
    /// 2p − 1 micro-batches on, 2p on every rank: 1F1B's first stage's p micro-batches of a
    /// whole stage (Qi et al., arXiv:2401.10241, §6).
    #[test]
    fn zb_v_holds_what_1f1b_holds_on_rank_0() {
        for p in [2usize, 3, 4, 8] {
            for m in [1usize, 2, 3, p, 2 * p - 1, 2 * p, 4 * p + 3] {
                for s in 0..p {
                    let prog = program(Schedule::ZeroBubbleV, s, p, m, 2);
                    assert_eq!(prog.len(), 6 * m, "p={p} m={m} s={s}");
                    let walked = peak_in_flight(&prog, true) as u64;
                    assert_eq!(walked, zero_bubble_v_held(s, p, m), "p={p} m={m} s={s}");
                    if m >= 2 * p - 1 {
                        let ofob = peak_in_flight(&program(Schedule::OneFOneB, 0, p, m, 1), false);
                        assert_eq!(walked, 2 * ofob as u64, "p={p} m={m} s={s}");
                    }
                }
            }
        }
    }

    /// ZB-V's frontier: the bounded walk finds what a walk of the whole program finds, and its
    /// largest sum is [`zero_bubble_v_held`].
    #[test]
    fn zb_v_frontier_is_bounded_in_the_micro_batches() {
        for p in [2usize, 3, 4, 8] {
            for m in [1usize, 2, p, 2 * p - 1, 2 * p, 2 * p + 1, 5 * p + 3] {
                for s in 0..p {
                    let part = |j: usize| usize::from(j != s);
                    let states: Vec<Vec<u64>> =
                        held_states(zero_bubble_v(s, p, m), 2, part, Pass::Weight).collect();
                    let front = zero_bubble_v_frontier(s, p, m);
                    for x in &states {
                        assert!(
                            front.iter().any(|f| f[0] >= x[0] && f[1] >= x[1]),
                            "p={p} m={m} s={s}: {x:?} not under {front:?}"
                        );
                    }
                    for f in &front {
                        assert!(states.contains(f), "p={p} m={m} s={s}: {f:?}");
                    }
                    let peak = front.iter().map(|x| x[0] + x[1]).max().unwrap();
                    assert_eq!(peak, zero_bubble_v_held(s, p, m), "p={p} m={m} s={s}");
                }
            }
        }
        // Rank 0 at its fullest: 2p micro-batches of its first chunk, or 2p − 1 and one of its
        // last (the head's).
        assert_eq!(
            zero_bubble_v_frontier(0, 4, 16),
            vec![vec![7, 1], vec![8, 0]]
        );
    }

    /// The order of PyTorch's `ScheduleZBVZeroBubble` for 2 ranks and 4 micro-batches, as its
    /// `_calculate_single_rank_operations` lists it (stages 0..3; rank 0 holds 0 and 3, rank 1
    /// holds 1 and 2), written out by hand from that function's steps.
    #[test]
    fn zb_v_order_for_two_ranks() {
        let names = |s: usize| {
            program(Schedule::ZeroBubbleV, s, 2, 4, 2)
                .iter()
                .map(|t| {
                    let c = match t.pass {
                        Pass::Forward => 'F',
                        Pass::Backward => 'I',
                        Pass::Weight => 'W',
                    };
                    format!("{}{c}{}", t.stage, t.microbatch)
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        // Rank 0: 3 forwards of stage 0; no pairs; 2 of (F, I, W of stage 3); the steady
        // loop until stage 3 has run 4 forwards; no (I, I) pairs; 2 of (I 0, W 0); the rest.
        assert_eq!(
            names(0),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 \
             0I2 0W2 0I3 0W3"
        );
        // Rank 1: 1 forward of stage 1; a pair (stage 2, stage 1); 1 of (F, I, W of stage 2);
        // the steady loop; 1 pair of I's; 1 of (I 1, W 1); the W's of stage 2, then of stage 1.
        assert_eq!(
            names(1),
            "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 \
             1I2 2I3 1I3 1W2 2W3 1W3"
        );
    }

    /// Interleaving: the most chunk micro-batches a rank holds ([`interleaved_peak`]) against a
    /// walk of the program; rank 0's is Narayanan et al.'s (1 + (p − 1)/(p·v)) times 1F1B's
    /// (SC'21, §2.2) from 2p micro-batches on, the last rank's (v − 1)·p + 1; and the walk
    /// bounded at 3p micro-batches finds the frontier of the whole program.
    #[test]
    fn interleaving_holds_its_warm_up_and_one() {
        for p in [2usize, 3, 4, 8] {
            for v in [2usize, 3, 4] {
                for m in [p, 2 * p, 3 * p, 4 * p, 7 * p] {
                    for s in 0..p {
                        let prog = program(Schedule::Interleaved, s, p, m, v);
                        let walked = peak_in_flight(&prog, false) as u64;
                        let at = format!("p={p} v={v} m={m} s={s}");
                        assert_eq!(walked, interleaved_peak(s, p, m, v), "{at}");
                        let states: Vec<Vec<u64>> =
                            held_states(prog, v, |j| j / p, Pass::Backward).collect();
                        let front = interleaved_frontier(s, p, m, v);
                        for x in &states {
                            let under = |f: &Vec<u64>| f.iter().zip(x).all(|(a, b)| a >= b);
                            assert!(front.iter().any(under), "{at}: {x:?} not under {front:?}");
                        }
                        for f in &front {
                            assert!(states.contains(f), "{at}: {f:?}");
                        }
                        let peak = front.iter().map(|x| x.iter().sum::<u64>()).max();
                        assert_eq!(peak, Some(walked), "{at}");
                    }
                    if m >= 2 * p {
                        let first = interleaved_peak(0, p, m, v) as usize;
                        let ofob = peak_in_flight(&program(Schedule::OneFOneB, 0, p, m, 1), false);
                        // (1 + (p − 1)/(p·v)) · p micro-batches of a stage, in chunks of 1/v.
                        assert_eq!(first, ofob * v + p - 1, "p={p} v={v} m={m}");
                        assert_eq!(interleaved_peak(p - 1, p, m, v) as usize, (v - 1) * p + 1);
                    }
                }
            }
        }
        // Rank 3 of 4 with 2 chunks holds its first chunk's 4 micro-batches and one of its
        // second (the last virtual stage, which turns at once).
        assert!(interleaved_frontier(3, 4, 8, 2).contains(&vec![4, 1]));
    }

    /// Megatron-Core 0.10 on (`get_pp_rank_microbatches`, NVIDIA/Megatron-LM@4295be1a6c): with
    /// as many micro-batches as stages a rank runs all its forwards first only where its warm-up
    /// count reaches them all. With p = 4, v = 2 and m = 4 (8 chunk micro-batches) rank 0's count
    /// is 6 + 4 = 10 (all 8 first), rank 2's 2 + 4 = 6 and the last rank's 4, each followed by
    /// the steady state's first forward: the last rank turns after 5 forwards and holds 5, where
    /// the older rule (every forward first at m = p) held 8.
    #[test]
    fn interleaving_at_as_many_micro_batches_as_stages_warms_up_as_megatron_core() {
        let firsts = |s: usize| {
            program(Schedule::Interleaved, s, 4, 4, 2)
                .iter()
                .take_while(|t| t.pass == Pass::Forward)
                .count()
        };
        assert_eq!([firsts(0), firsts(1), firsts(2), firsts(3)], [8, 8, 7, 5]);
        assert_eq!(interleaved_peak(3, 4, 4, 2), 5);
        assert_eq!(interleaved_peak(0, 4, 4, 2), 8);
        for (p, v) in [(2usize, 2usize), (4, 3), (8, 2)] {
            assert_eq!(interleaved_peak(p - 1, p, p, v) as usize, (v - 1) * p + 1);
        }
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
