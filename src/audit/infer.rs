//! Placements inferred from element sets alone: per axis, a tensor is partial where several
//! devices of a group contribute to one element, replicated where every device of a group needs
//! the same elements, and sharded along a dimension where each device needs (at least) the block
//! its coordinate selects; halo elements are those a device needs outside its own block.

use super::count::CountedPlacement;
use super::tally::{Mesh, Slot};

/// What the element sets of one tensor say.
pub(super) struct Inferred {
    /// Per axis: the inferred placement.
    pub(super) placement: Vec<CountedPlacement>,
    /// Per axis: elements the most-receiving device touches outside its own block.
    pub(super) halo: Vec<i64>,
    /// Per axis: elements of one group that several of its devices contribute to (most groups).
    pub(super) partial: Vec<i64>,
}

/// Infers a tensor's placement on each axis from the element sets, then counts halo elements.
pub(super) fn infer(slot: &Slot, mesh: &Mesh) -> Inferred {
    let n = mesh.devices;
    let axes = mesh.axes();
    let dims = &slot.access.dims;
    let partial = partial_elements(slot, mesh);
    // projections[dev][dim][position]: whether the device touches that position.
    let projections: Vec<Vec<Vec<bool>>> = (0..n)
        .map(|d| {
            let mut pr: Vec<Vec<bool>> = dims.iter().map(|&e| vec![false; e as usize]).collect();
            for off in slot.touched[d].ones() {
                for (k, p) in pr.iter_mut().enumerate() {
                    p[slot.access.position(off, k)] = true;
                }
            }
            pr
        })
        .collect();
    let mut ranges: Vec<Vec<(usize, usize)>> =
        vec![dims.iter().map(|&e| (0, e as usize)).collect(); n];
    let mut placement = Vec::new();
    for ax in 0..axes {
        let op = slot.ops.as_ref().and_then(|o| o[ax]);
        if let (Some(op), true) = (op, partial[ax] > 0) {
            placement.push(CountedPlacement::Partial(op));
            continue;
        }
        let replicated = (0..n).all(|d| {
            let mine = &slot.touched[d];
            mine.is_empty()
                || mesh
                    .members(d, ax)
                    .all(|o| slot.touched[o].is_empty() || slot.touched[o] == *mine)
        });
        if replicated {
            placement.push(CountedPlacement::Replicate);
            continue;
        }
        let p = mesh.sizes[ax];
        let shard = (0..dims.len()).find(|&k| {
            let mut strict = false;
            for d in (0..n).filter(|&d| !slot.touched[d].is_empty()) {
                let (lo, hi) = ranges[d][k];
                if (hi - lo) % p != 0 {
                    return false;
                }
                let w = (hi - lo) / p;
                let c = mesh.coord(d, ax);
                let proj = &projections[d][k];
                if !(lo + c * w..lo + (c + 1) * w).all(|x| proj[x]) {
                    return false;
                }
                strict |= !(lo..hi).all(|x| proj[x]);
            }
            strict
        });
        match shard {
            Some(k) => {
                for (d, r) in ranges.iter_mut().enumerate() {
                    let (lo, hi) = r[k];
                    let w = (hi - lo) / p;
                    let c = mesh.coord(d, ax);
                    r[k] = (lo + c * w, lo + (c + 1) * w);
                }
                placement.push(CountedPlacement::Shard(k));
            }
            None => placement.push(CountedPlacement::Irregular),
        }
    }
    let halo = halo_elements(slot, mesh, &placement, &ranges);
    Inferred {
        placement,
        halo,
        partial,
    }
}

/// Per axis: the elements of one group that several of its devices contribute to (the most
/// over the groups); none where the tensor has no reduction.
fn partial_elements(slot: &Slot, mesh: &Mesh) -> Vec<i64> {
    let n = mesh.devices;
    let mut partial = vec![0i64; mesh.axes()];
    if slot.ops.is_none() {
        return partial;
    }
    for (ax, p) in partial.iter_mut().enumerate() {
        for first in (0..n).filter(|&d| mesh.coord(d, ax) == 0) {
            let shared = (0..slot.access.len)
                .filter(|&e| {
                    mesh.members(first, ax)
                        .filter(|&d| slot.own[ax][d].get(e))
                        .count()
                        >= 2
                })
                .count() as i64;
            *p = (*p).max(shared);
        }
    }
    partial
}

/// Halo: touched elements outside the device's block (`ranges`, per device and dimension), each
/// charged to the last axis along whose dimension it lies outside (a later exchange forwards
/// what an earlier one brought); per axis, the most over the devices.
fn halo_elements(
    slot: &Slot,
    mesh: &Mesh,
    placement: &[CountedPlacement],
    ranges: &[Vec<(usize, usize)>],
) -> Vec<i64> {
    let axes = mesh.axes();
    let mut halo = vec![0i64; axes];
    for (d, range) in ranges.iter().enumerate() {
        let mut mine = vec![0i64; axes];
        for off in slot.touched[d].ones() {
            let outside = (0..axes).rev().find(|&ax| match placement[ax] {
                CountedPlacement::Shard(k) => {
                    let pos = slot.access.position(off, k);
                    let (lo, hi) = range[k];
                    pos < lo || pos >= hi
                }
                _ => false,
            });
            if let Some(ax) = outside {
                mine[ax] += 1;
            }
        }
        for (h, m) in halo.iter_mut().zip(mine) {
            *h = (*h).max(m);
        }
    }
    halo
}
