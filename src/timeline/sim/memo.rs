//! The steady-state shortcut: a device's state after a layer or a task, compared with the one
//! before, so that a run of equal layers or tasks is advanced without simulating each.

use super::*;

/// Whether two times near `t` are equal to rounding: within relative 1e-12 of `t` (what the
/// steady-state shortcuts of [`Layout::run_task`] and [`Layout::run_layers`] compare their
/// states with).
pub(super) fn near_at(t: f64) -> impl Fn(f64, f64) -> bool {
    let tol = 1e-12 * t.abs().max(1e-9);
    move |x, y| (x - y).abs() <= tol
}

/// The streams that issued events between two states: those whose last event changed.
pub(super) fn used_streams(
    before: &PerStream<Option<usize>>,
    after: &PerStream<Option<usize>>,
) -> PerStream<bool> {
    after.zip(*before).map(|(a, b)| a != b)
}

/// A device's state after a layer of a task, for recognising the steady state of a run of
/// equal layers (see [`Layout::run_layers`]): when a layer changed it exactly as the layer before did, shifted
/// by the same seconds, so does every further layer of the run.
#[derive(Clone, Copy)]
pub(super) struct Snapshot {
    /// The layer's block.
    pub(super) block: usize,
    /// The task's time (what the next layer waits for).
    pub(super) t: f64,
    /// Each stream's free time, busy seconds and last event.
    pub(super) free: PerStream<f64>,
    pub(super) busy: PerStream<f64>,
    pub(super) last: PerStream<Option<usize>>,
    /// The last blocking event and the last compute step (start, end).
    pub(super) prev: Option<usize>,
    pub(super) last_compute: Option<(f64, f64)>,
    /// Events issued so far.
    pub(super) count: usize,
}

impl Snapshot {
    pub(super) fn of(dev: &Device, cur: &Cursor, count: usize) -> Snapshot {
        Snapshot {
            block: usize::MAX,
            t: cur.t,
            free: dev.free,
            busy: dev.busy,
            last: dev.last,
            prev: cur.prev,
            last_compute: cur.last_compute,
            count,
        }
    }

    /// The streams used between `from` and `to` (their last event changed).
    pub(super) fn used(from: &Snapshot, to: &Snapshot) -> PerStream<bool> {
        used_streams(&from.last, &to.last)
    }

    /// Whether `self` has the `used` streams as far from its task's time as `to` has them, the
    /// other streams free by `idle_by`, and the last compute step where `to` has it. Equal to
    /// rounding: relative 1e-12 of the times.
    pub(super) fn placed_as(&self, to: &Snapshot, used: PerStream<bool>, idle_by: f64) -> bool {
        let near = near_at(self.t);
        let streams = Stream::ALL.iter().all(|&s| {
            if used[s] {
                near(self.free[s] - self.t, to.free[s] - to.t)
            } else {
                self.free[s] <= idle_by
            }
        });
        let compute = match (self.last_compute, to.last_compute) {
            (Some((s1, e1)), Some((s0, e0))) => {
                near(s1 - self.t, s0 - to.t) && near(e1 - self.t, e0 - to.t)
            }
            (None, None) => true,
            _ => false,
        };
        streams && compute
    }

    /// Whether the layer that led from `b` to `self` left the device as the layer before left
    /// it in `b`: every stream it used is as far from the task's time, every stream it did not
    /// use was free before the layer began (so it delayed neither this layer, through
    /// contention, nor any later one), and the last compute step sits where it sat. Then
    /// `b → self` is a steady step: every further layer of the run repeats it.
    pub(super) fn repeats(&self, b: &Snapshot) -> bool {
        let shift = self.t - b.t;
        !shift.is_nan() && shift > 0.0 && self.placed_as(b, Snapshot::used(b, self), b.t)
    }

    /// Whether `self` (after a layer of a run) is the state the steady step `from → to` leads
    /// to: the streams that step uses as far from the task's time as in `to`, the others free,
    /// the last compute step where it sat. Every further layer of the run then repeats that
    /// step.
    pub(super) fn is_steady(&self, from: &Snapshot, to: &Snapshot) -> bool {
        self.placed_as(to, Snapshot::used(from, to), self.t)
    }

    /// `self` moved on by `n` more layers, each the step from `from` to `to`: the times shifted
    /// by `to.t − from.t`, the same busy seconds added and as many events issued.
    pub(super) fn advance(&mut self, from: &Snapshot, to: &Snapshot, n: usize) {
        let shift = to.t - from.t;
        let events = to.count - from.count;
        let x = n as f64;
        let used = Snapshot::used(from, to);
        for s in Stream::ALL {
            if used[s] {
                self.free[s] += x * shift;
                self.busy[s] += x * (to.busy[s] - from.busy[s]);
                self.last[s] = self.last[s].map(|id| id + n * events);
            }
        }
        self.t += x * shift;
        self.last_compute = self
            .last_compute
            .map(|(s, e)| (s + x * shift, e + x * shift));
        self.prev = self.prev.map(|id| id + n * events);
        self.count += n * events;
    }

    /// Writes the state back.
    pub(super) fn store(&self, dev: &mut Device, cur: &mut Cursor, count: &mut usize) {
        dev.free = self.free;
        dev.busy = self.busy;
        dev.last = self.last;
        cur.t = self.t;
        cur.prev = self.prev;
        cur.last_compute = self.last_compute;
        *count = self.count;
    }
}

/// The most device states remembered per virtual stage and pass (a pipeline's tasks meet one
/// or two in its steady phase, a few more while it fills and drains).
pub(super) const MEMOS_PER_TASK: usize = 8;

/// A device as a task of layers finds it: its start, each stream's free time after the start
/// (0 when the stream is free by then: it can delay nothing the task issues, since everything
/// the task issues is ready at the start or later), and the counters the task adds to.
pub(super) struct TaskEntry {
    pub(super) t0: f64,
    pub(super) after: PerStream<f64>,
    pub(super) busy: PerStream<f64>,
    pub(super) last: PerStream<Option<usize>>,
    pub(super) count: usize,
}

impl TaskEntry {
    pub(super) fn of(dev: &Device, t0: f64, count: usize) -> TaskEntry {
        TaskEntry {
            t0,
            after: dev.free.map(|f| (f - t0).max(0.0)),
            busy: dev.busy,
            last: dev.last,
            count,
        }
    }
}

/// What a task's layers did to its device, relative to the state it met ([`TaskEntry`]): a
/// later task of the same stage and pass that meets the same state (to rounding: relative 1e-12
/// of the times) does the same, shifted to its own start, because the event loop only takes
/// maxima and sums of times.
#[derive(Clone, Copy)]
pub(super) struct TaskMemo {
    /// The state met: each stream's free time after the start.
    pub(super) entry: PerStream<f64>,
    /// The streams the task used, their free times after it (from its start) and their busy
    /// seconds added.
    pub(super) used: PerStream<bool>,
    pub(super) free: PerStream<f64>,
    pub(super) busy: PerStream<f64>,
    /// The task's end and its first event's start, from its start.
    pub(super) end: f64,
    pub(super) started: Option<f64>,
    /// Events issued; each used stream's last event and the last blocking event, counted from
    /// the task's first.
    pub(super) events: usize,
    pub(super) last: PerStream<Option<usize>>,
    pub(super) prev: Option<usize>,
}

impl TaskMemo {
    pub(super) fn of(e: &TaskEntry, dev: &Device, cur: &Cursor, count: usize) -> TaskMemo {
        let used = used_streams(&e.last, &dev.last);
        TaskMemo {
            entry: e.after,
            used,
            free: dev.free.map(|f| f - e.t0),
            busy: dev.busy.zip(e.busy).map(|(now, then)| now - then),
            end: cur.t - e.t0,
            started: cur.started.map(|s| s - e.t0),
            events: count - e.count,
            last: dev
                .last
                .zip(used)
                .map(|(last, used)| last.filter(|_| used).map(|id| id - e.count)),
            prev: cur.prev.filter(|&id| id >= e.count).map(|id| id - e.count),
        }
    }

    /// Whether `e` is the state this task met.
    pub(super) fn met(&self, e: &TaskEntry) -> bool {
        let near = near_at(e.t0);
        // The streams whose free times tell states apart most often first (a task starts on a
        // free compute stream): the same answer in fewer comparisons.
        const ORDER: [Stream; 6] = [
            Stream::P2p,
            Stream::DpComm,
            Stream::TpComm,
            Stream::EpComm,
            Stream::CpComm,
            Stream::Compute,
        ];
        ORDER.iter().all(|&s| near(e.after[s], self.entry[s]))
    }

    /// Does to `dev` (from the task's start, `cur.t`) what the remembered task did.
    pub(super) fn apply(&self, dev: &mut Device, cur: &mut Cursor, count: &mut usize) {
        let (t0, base) = (cur.t, *count);
        for s in Stream::ALL {
            if self.used[s] {
                dev.free[s] = t0 + self.free[s];
                dev.busy[s] += self.busy[s];
                dev.last[s] = self.last[s].map(|o| base + o);
            }
        }
        if let Some(o) = self.prev {
            cur.prev = Some(base + o);
        }
        cur.started = self.started.map(|s| t0 + s);
        *count = base + self.events;
        cur.t = t0 + self.end;
    }
}
