//! Iteration spaces and how a tensor's elements are addressed from their points.

use super::plan::Case;
use super::window;
use crate::error::{Error, Result};
use crate::rules::Tensor;

/// An iteration space: named coordinates with sizes. The rule's indices, plus one kernel-offset
/// coordinate `#o` for each window index `o` whose kernel is not itself a coordinate.
#[derive(Debug, Clone)]
pub struct Space {
    /// Coordinate names.
    pub names: Vec<String>,
    /// Coordinate sizes.
    pub sizes: Vec<i64>,
}

impl Space {
    /// The space of `indices`, widened by kernel offsets for the windows of `tensors`.
    pub fn new(case: &Case, indices: &[String], tensors: &[&Tensor]) -> Space {
        let mut names = indices.to_vec();
        let mut sizes: Vec<i64> = names.iter().map(|n| case.size(n)).collect();
        for t in tensors {
            for w in case.windows.iter().filter(|w| w.tensor == t.name) {
                if !names.contains(&w.index) {
                    continue;
                }
                let kernel_in_space = w.kernel_index.as_ref().is_some_and(|k| names.contains(k));
                let hidden = hidden_name(&w.index);
                if !kernel_in_space && !names.contains(&hidden) {
                    names.push(hidden);
                    sizes.push(w.kernel);
                }
            }
        }
        Space { names, sizes }
    }

    /// The position of coordinate `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Number of points.
    pub fn volume(&self) -> i64 {
        self.sizes.iter().product()
    }

    /// Number of kernel offsets per point of the rule's indices.
    pub fn hidden_volume(&self) -> i64 {
        self.names
            .iter()
            .zip(&self.sizes)
            .filter(|(n, _)| n.starts_with('#'))
            .map(|(_, s)| *s)
            .product()
    }

    /// Visits every point in row-major order.
    pub fn points(&self) -> Odometer {
        Odometer {
            sizes: self.sizes.clone(),
            point: vec![0; self.sizes.len()],
            started: false,
        }
    }
}

/// The kernel-offset coordinate of window index `index`.
pub fn hidden_name(index: &str) -> String {
    format!("#{index}")
}

/// Row-major enumeration of a space's points.
#[derive(Debug)]
pub struct Odometer {
    sizes: Vec<i64>,
    point: Vec<i64>,
    started: bool,
}

impl Odometer {
    /// Moves to the next point; false when there is none.
    pub fn advance(&mut self) -> bool {
        if !self.started {
            self.started = true;
            return self.sizes.iter().all(|&s| s > 0);
        }
        for k in (0..self.point.len()).rev() {
            self.point[k] += 1;
            if self.point[k] < self.sizes[k] {
                return true;
            }
            self.point[k] = 0;
        }
        false
    }

    /// The current point.
    pub fn point(&self) -> &[i64] {
        &self.point
    }
}

/// How one index of a tensor is read from a point.
#[derive(Debug, Clone)]
struct Part {
    coord: usize,
    mult: usize,
    extent: i64,
    /// `(stride, kernel-offset coordinate, pad)` for a window.
    window: Option<(i64, usize, i64)>,
}

/// How a tensor is addressed from the points of a space: row-major over its dimensions, a merged
/// dimension row-major over its indices, a window index at `o·stride + r − pad`.
#[derive(Debug, Clone)]
pub struct Access {
    /// Extent of each dimension.
    pub dims: Vec<i64>,
    /// Elements between consecutive positions of each dimension.
    pub strides: Vec<usize>,
    /// Number of elements.
    pub len: usize,
    parts: Vec<Part>,
}

impl Access {
    /// The addressing of `tensor` from `space`; every index of the tensor must be a coordinate.
    pub fn new(case: &Case, space: &Space, tensor: &Tensor) -> Result<Access> {
        let b = case.bindings();
        let mut dims = Vec::new();
        let mut group_parts: Vec<Vec<Part>> = Vec::new();
        for group in &tensor.dims {
            let mut parts = Vec::new();
            for i in group {
                let coord = space.position(i).ok_or_else(|| {
                    Error::Usage(format!(
                        "rule `{}`: index `{i}` of `{}` is not in the iteration space",
                        case.rule, tensor.name
                    ))
                })?;
                let (extent, window) = match case.window(&tensor.name, i) {
                    Some(w) => {
                        let k = w
                            .kernel_index
                            .as_deref()
                            .and_then(|k| space.position(k))
                            .or_else(|| space.position(&hidden_name(i)))
                            .ok_or_else(|| {
                                Error::Usage(format!(
                                    "rule `{}`: the kernel of window `{i}` is not in the \
                                     iteration space",
                                    case.rule
                                ))
                            })?;
                        (w.extent, Some((w.stride, k, w.pad)))
                    }
                    None => {
                        let e = tensor
                            .extent(i)
                            .eval(&b)
                            .ok()
                            .as_ref()
                            .and_then(window::integer)
                            .filter(|e| *e >= 1)
                            .ok_or_else(|| {
                                Error::Usage(format!(
                                    "rule `{}`: extent of `{i}` in `{}` is not a positive integer",
                                    case.rule, tensor.name
                                ))
                            })?;
                        (e, None)
                    }
                };
                parts.push(Part {
                    coord,
                    mult: 1,
                    extent,
                    window,
                });
            }
            dims.push(parts.iter().map(|p| p.extent).product::<i64>());
            group_parts.push(parts);
        }
        let mut strides = vec![1usize; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * dims[d + 1] as usize;
        }
        let mut parts = Vec::new();
        for (d, mut group) in group_parts.into_iter().enumerate() {
            let mut inner = 1usize;
            for p in group.iter_mut().rev() {
                p.mult = inner * strides[d];
                inner *= p.extent as usize;
            }
            parts.extend(group);
        }
        let len = dims.iter().product::<i64>() as usize;
        Ok(Access {
            dims,
            strides,
            len,
            parts,
        })
    }

    /// The element `point` reads, or `None` where a window reads zero padding.
    pub fn offset(&self, point: &[i64]) -> Option<usize> {
        let mut off = 0usize;
        for p in &self.parts {
            let pos = match p.window {
                None => point[p.coord],
                Some((stride, k, pad)) => point[p.coord] * stride + point[k] - pad,
            };
            if pos < 0 || pos >= p.extent {
                return None;
            }
            off += pos as usize * p.mult;
        }
        Some(off)
    }

    /// The position of element `offset` along dimension `d`.
    pub fn position(&self, offset: usize, d: usize) -> usize {
        offset / self.strides[d] % self.dims[d] as usize
    }
}
