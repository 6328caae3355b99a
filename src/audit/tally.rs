//! Tallying points: who computes each point of a space, and per device the FLOPs, the elements
//! of every tensor touched, the elements written by points that are not replicated along an axis,
//! and the normalised rows whose points lie on several devices.

use super::count::{CollectiveKey, CountedCollective, PassCount, TensorCount, STATISTIC_BYTES};
use super::infer::infer;
use super::plan::Case;
use super::space::{Access, Space};
use crate::error::Result;
use crate::rules::law::ReduceOp;
use crate::rules::Tensor;
use crate::sym::Rational;
use num_traits::Zero;
use std::collections::HashMap;

/// The devices of a mesh of one or two axes, numbered with axis `a` fastest.
#[derive(Debug, Clone)]
pub(super) struct Mesh {
    pub(super) sizes: Vec<usize>,
    pub(super) strides: Vec<usize>,
    pub(super) devices: usize,
}

impl Mesh {
    pub(super) fn new(case: &Case) -> Mesh {
        let sizes: Vec<usize> = case.splits.iter().map(|s| s.devices as usize).collect();
        let mut strides = Vec::new();
        let mut devices = 1;
        for s in &sizes {
            strides.push(devices);
            devices *= s;
        }
        Mesh {
            sizes,
            strides,
            devices,
        }
    }

    pub(super) fn axes(&self) -> usize {
        self.sizes.len()
    }

    pub(super) fn coord(&self, dev: usize, ax: usize) -> usize {
        dev / self.strides[ax] % self.sizes[ax]
    }

    /// The first device of `dev`'s group along `ax` (the devices differing only on `ax`).
    pub(super) fn group(&self, dev: usize, ax: usize) -> usize {
        dev - self.coord(dev, ax) * self.strides[ax]
    }

    /// The devices in `dev`'s group along `ax`.
    pub(super) fn members(&self, dev: usize, ax: usize) -> impl Iterator<Item = usize> + '_ {
        let first = self.group(dev, ax);
        (0..self.sizes[ax]).map(move |c| first + c * self.strides[ax])
    }

    /// Every device matching per-axis coordinates (`None`: any).
    pub(super) fn expand(&self, coords: &[Option<usize>], out: &mut Vec<usize>) {
        out.clear();
        out.push(0);
        for (ax, c) in coords.iter().enumerate() {
            match c {
                Some(c) => out.iter_mut().for_each(|d| *d += c * self.strides[ax]),
                None => {
                    let base = std::mem::take(out);
                    for c in 0..self.sizes[ax] {
                        out.extend(base.iter().map(|d| d + c * self.strides[ax]));
                    }
                }
            }
        }
    }
}

/// Who computes a point, along one axis.
#[derive(Debug, Clone)]
pub(super) enum Assign {
    /// The owner of the coordinate's block.
    Block { coord: usize, block: i64 },
    /// The owner of the windowed row `coord·stride + kernel − pad`, clamped into the tensor.
    Owner {
        coord: usize,
        kernel: usize,
        stride: i64,
        pad: i64,
        extent: i64,
        block: i64,
    },
    /// Rank 0.
    First,
    /// Every rank.
    All,
}

impl Assign {
    fn device(&self, point: &[i64], devices: usize) -> Option<usize> {
        let c = match self {
            Assign::Block { coord, block } => point[*coord] / block,
            Assign::Owner {
                coord,
                kernel,
                stride,
                pad,
                extent,
                block,
            } => (point[*coord] * stride + point[*kernel] - pad).clamp(0, extent - 1) / block,
            Assign::First => 0,
            Assign::All => return None,
        };
        Some((c as usize).min(devices - 1))
    }
}

/// Normalised rows whose points lie on several devices of an axis.
#[derive(Debug)]
pub(super) struct StatJob {
    axis: usize,
    coords: Vec<(usize, i64)>,
    pass: &'static str,
    tensor: String,
    calls: u32,
    /// (group, row) → bit mask of the axis coordinates that hold points of the row.
    spans: HashMap<(usize, i64), u64>,
}

impl StatJob {
    pub(super) fn new(
        space: &Space,
        axis: usize,
        rows: &[String],
        pass: &'static str,
        tensor: &str,
        calls: u32,
    ) -> StatJob {
        let mut coords = Vec::new();
        let mut mult = 1;
        for r in rows.iter().rev() {
            if let Some(c) = space.position(r) {
                coords.push((c, mult));
                mult *= space.sizes[c];
            }
        }
        StatJob {
            axis,
            coords,
            pass,
            tensor: tensor.to_string(),
            calls,
            spans: HashMap::new(),
        }
    }
}

/// The points of one space, who computes them, their FLOPs and what they touch.
pub(super) struct Job {
    pub(super) assign: Vec<Assign>,
    pub(super) weight: Rational,
    pub(super) reads: Vec<(usize, Access)>,
    pub(super) writes: Vec<(usize, Access)>,
    pub(super) stats: Vec<StatJob>,
}

impl Job {
    pub(super) fn new(
        case: &Case,
        space: &Space,
        weight: Rational,
        assign: impl Fn(Option<usize>, &str) -> Assign,
    ) -> Job {
        Job {
            assign: case
                .splits
                .iter()
                .map(|s| assign(space.position(&s.index), &s.index))
                .collect(),
            weight,
            reads: Vec::new(),
            writes: Vec::new(),
            stats: Vec::new(),
        }
    }
}

/// A dense set of element offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn new(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }
    pub(super) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub(super) fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub(super) fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(k, w)| {
            (0..64)
                .filter(move |b| w >> b & 1 == 1)
                .map(move |b| k * 64 + b)
        })
    }
}

/// One tensor of a pass, with what every device touched.
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) bytes: i64,
    pub(super) access: Access,
    /// For written tensors, per axis: the reduction partial contributions await (`None`: they
    /// are finished by statistics).
    pub(super) ops: Option<Vec<Option<ReduceOp>>>,
    pub(super) touched: Vec<Bits>,
    /// Per axis, per device: elements written by points not replicated along that axis.
    pub(super) own: Vec<Vec<Bits>>,
}

pub(super) struct PassBuilder<'m> {
    mesh: &'m Mesh,
    flops: Vec<Rational>,
    /// Per device: bytes its kernels read and write, each kernel (job) counting the distinct
    /// elements it touches of every tensor it reads or writes.
    io: Vec<i64>,
    /// Whether the whole pass is one kernel (the forward pass).
    pub(super) one_kernel: bool,
    slots: Vec<Slot>,
    collectives: Vec<CountedCollective>,
}

impl<'m> PassBuilder<'m> {
    pub(super) fn new(mesh: &'m Mesh) -> Self {
        PassBuilder {
            mesh,
            flops: vec![Rational::zero(); mesh.devices],
            io: vec![0; mesh.devices],
            one_kernel: false,
            slots: Vec::new(),
            collectives: Vec::new(),
        }
    }

    /// The slot of tensor `name` (created on first use).
    pub(super) fn slot(
        &mut self,
        name: &str,
        t: &Tensor,
        case: &Case,
        space: &Space,
        ops: Option<Vec<Option<ReduceOp>>>,
    ) -> Result<usize> {
        if let Some(k) = self.slots.iter().position(|s| s.name == name) {
            return Ok(k);
        }
        let access = Access::new(case, space, t)?;
        let n = self.mesh.devices;
        let own = match ops {
            Some(_) => (0..self.mesh.axes())
                .map(|_| (0..n).map(|_| Bits::new(access.len)).collect())
                .collect(),
            None => Vec::new(),
        };
        self.slots.push(Slot {
            name: name.to_string(),
            bytes: i64::from(t.dtype.bytes(super::DTYPE_BYTES)),
            touched: (0..n).map(|_| Bits::new(access.len)).collect(),
            own,
            ops,
            access,
        });
        Ok(self.slots.len() - 1)
    }

    pub(super) fn run(&mut self, space: &Space, mut job: Job) {
        let mesh = self.mesh;
        let mut units = vec![0i64; mesh.devices];
        let mut coords: Vec<Option<usize>> = vec![None; mesh.axes()];
        let mut devs = Vec::with_capacity(mesh.devices);
        // This kernel's own touched elements, per tensor access and device.
        let mut mine: Vec<Vec<Bits>> = job
            .reads
            .iter()
            .chain(&job.writes)
            .map(|(slot, _)| {
                let len = self.slots[*slot].access.len;
                (0..mesh.devices).map(|_| Bits::new(len)).collect()
            })
            .collect();
        let n_reads = job.reads.len();
        let mut points = space.points();
        while points.advance() {
            let point = points.point();
            for (ax, a) in job.assign.iter().enumerate() {
                coords[ax] = a.device(point, mesh.sizes[ax]);
            }
            mesh.expand(&coords, &mut devs);
            for &d in &devs {
                units[d] += 1;
            }
            for (k, (slot, access)) in job.reads.iter().enumerate() {
                if let Some(off) = access.offset(point) {
                    let s = &mut self.slots[*slot];
                    for &d in &devs {
                        s.touched[d].set(off);
                        mine[k][d].set(off);
                    }
                }
            }
            for (k, (slot, access)) in job.writes.iter().enumerate() {
                if let Some(off) = access.offset(point) {
                    let s = &mut self.slots[*slot];
                    for &d in &devs {
                        s.touched[d].set(off);
                        mine[n_reads + k][d].set(off);
                        for (ax, c) in coords.iter().enumerate() {
                            if c.is_some() {
                                s.own[ax][d].set(off);
                            }
                        }
                    }
                }
            }
            for st in &mut job.stats {
                let row: i64 = st.coords.iter().map(|(c, m)| point[*c] * m).sum();
                for &d in &devs {
                    let key = (mesh.group(d, st.axis), row);
                    *st.spans.entry(key).or_insert(0) |= 1 << mesh.coord(d, st.axis);
                }
            }
        }
        for (d, u) in units.into_iter().enumerate() {
            self.flops[d] += &job.weight * Rational::from_integer(u.into());
        }
        for ((slot, _), per_device) in job.reads.iter().chain(&job.writes).zip(&mine) {
            let bytes = self.slots[*slot].bytes;
            for (d, bits) in per_device.iter().enumerate() {
                self.io[d] += bits.ones().count() as i64 * bytes;
            }
        }
        for st in job.stats {
            let mut per_group: HashMap<usize, i64> = HashMap::new();
            for ((group, _), mask) in &st.spans {
                if mask.count_ones() >= 2 {
                    *per_group.entry(*group).or_insert(0) += 1;
                }
            }
            let rows = per_group.values().copied().max().unwrap_or(0);
            if rows > 0 {
                self.collectives.push(CountedCollective {
                    key: CollectiveKey::Statistics {
                        pass: st.pass.to_string(),
                        tensor: st.tensor,
                    },
                    axis: st.axis,
                    size: rows * STATISTIC_BYTES,
                    calls: st.calls,
                });
            }
        }
    }

    pub(super) fn finish(mut self) -> PassCount {
        let flops = self
            .flops
            .iter()
            .max()
            .cloned()
            .unwrap_or_else(Rational::zero);
        let mut tensors = Vec::new();
        for slot in &self.slots {
            if slot.name.starts_with(super::count::SAVED_PREFIX) {
                // Read by the backward kernel only to count its bytes.
                continue;
            }
            let inferred = infer(slot, self.mesh);
            for (ax, n) in inferred.partial.iter().enumerate() {
                let op = slot.ops.as_ref().and_then(|o| o[ax]);
                if let (Some(op), true) = (op, *n > 0) {
                    self.collectives.push(CountedCollective {
                        key: CollectiveKey::Reduce {
                            tensor: slot.name.clone(),
                            op,
                        },
                        axis: ax,
                        size: n * slot.bytes,
                        calls: 1,
                    });
                }
            }
            for (ax, n) in inferred.halo.iter().enumerate() {
                if *n > 0 {
                    self.collectives.push(CountedCollective {
                        key: CollectiveKey::Halo {
                            tensor: slot.name.clone(),
                        },
                        axis: ax,
                        size: n * slot.bytes,
                        calls: 1,
                    });
                }
            }
            tensors.push(TensorCount {
                name: slot.name.clone(),
                written: slot.ops.is_some(),
                placement: inferred.placement,
            });
        }
        // The forward pass is one kernel (an einsum's terms are summed in it): each tensor's
        // distinct elements once. Backward passes are a kernel per job (per input gradient).
        let io = if self.one_kernel {
            (0..self.mesh.devices)
                .map(|d| {
                    self.slots
                        .iter()
                        .map(|s| s.touched[d].ones().count() as i64 * s.bytes)
                        .sum::<i64>()
                })
                .max()
                .unwrap_or(0)
        } else {
            self.io.iter().copied().max().unwrap_or(0)
        };
        PassCount {
            flops,
            io_bytes: io,
            tensors,
            collectives: self.collectives,
        }
    }
}
