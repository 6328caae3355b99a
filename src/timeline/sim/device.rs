//! One device's streams as the simulation advances them: their clocks, the events they
//! recorded, the gradient bucket that is filling.

use super::*;

pub(super) struct Device {
    /// Share of compute throughput a running collective takes (the table's contention).
    pub(super) contention: f64,
    pub(super) free: PerStream<f64>,
    pub(super) last: PerStream<Option<usize>>,
    pub(super) busy: PerStream<f64>,
    pub(super) work: f64,
    pub(super) bucket_wire: DpWire,
    pub(super) bucket_full: f64,
    pub(super) bucket_ready: Option<(usize, f64)>,
    pub(super) buckets: usize,
    /// Gradients of finished model chunks waiting for their launch (interleaved schedule):
    /// on the wire, as the bus carries them, ready at (event, time), launched after the
    /// device's backward task of this index, in this many calls.
    pub(super) pending: Vec<Pending>,
    /// Backward tasks finished.
    pub(super) backwards: usize,
    /// When its previous task's last blocking step ended: a device runs its program in order.
    pub(super) task_end: f64,
    /// Seconds of its first forward task (what an overlapped parameter gather can hide behind
    /// in the next step).
    pub(super) first_forward: Option<f64>,
}

/// A model chunk's gradients waiting for their launch.
pub(super) struct Pending {
    pub(super) wire: DpWire,
    pub(super) ready: (usize, f64),
    pub(super) after: usize,
    pub(super) calls: f64,
}

/// Where events go: kept for traces and tests, or only counted when just the times matter.
pub(super) struct Recorder {
    pub(super) keep: bool,
    pub(super) events: Vec<Event>,
    pub(super) count: usize,
}

impl Recorder {
    /// The dependencies of a new event: `prev`, when events are kept (a timing-only run
    /// allocates none).
    pub(super) fn deps(&self, prev: Option<usize>) -> Vec<usize> {
        if self.keep {
            prev.into_iter().collect()
        } else {
            Vec::new()
        }
    }
}

impl Device {
    /// Issues `e` on its stream once `ready`; returns its id, start and end.
    pub(super) fn push(&mut self, rec: &mut Recorder, e: Event, ready: f64) -> (usize, f64, f64) {
        let (stream, dur) = (e.stream, e.dur);
        self.push_with(rec, stream, dur, ready, move || e)
    }

    /// [`Device::push`] of an event of `dur` seconds on `stream` that `event` builds, called
    /// only when the events are kept (most simulations only time them).
    #[inline]
    pub(super) fn push_with(
        &mut self,
        rec: &mut Recorder,
        stream: Stream,
        mut dur: f64,
        ready: f64,
        event: impl FnOnce() -> Event,
    ) -> (usize, f64, f64) {
        let start = ready.max(self.free[stream]);
        if stream == Stream::Compute && self.contention > 0.0 {
            // A collective still running on another stream takes its share of the SMs and
            // memory bandwidth for as long as the two overlap.
            let comm_until = [
                Stream::TpComm,
                Stream::DpComm,
                Stream::P2p,
                Stream::EpComm,
                Stream::CpComm,
            ]
            .iter()
            .map(|&c| self.free[c])
            .fold(0.0, f64::max);
            let overlap = (comm_until - start).clamp(0.0, dur);
            dur += self.contention * overlap;
        }
        let end = start + dur;
        if rec.keep {
            let mut e = event();
            e.start = start;
            e.dur = dur;
            if let Some(prev) = self.last[stream] {
                if !e.deps.contains(&prev) {
                    e.deps.push(prev);
                }
            }
            rec.events.push(e);
        }
        self.free[stream] = end;
        self.busy[stream] += dur;
        let id = rec.count;
        rec.count += 1;
        self.last[stream] = Some(id);
        (id, start, end)
    }
}
