//! `symshard sweep`, design-space sweeps: a grid of models, machines (shipped or what-if), device counts,
//! precisions, batch sizes and sequence lengths; at each point the fastest layout by simulated
//! seconds (`rank --calib … --top 1`) with its throughput, MFU, memory, GPU-hours, energy and
//! cost. Points run in parallel; each finished row goes to a journal at once, so an interrupted
//! sweep resumes where it stopped; the rows are written in point order as Parquet and CSV.

mod devices;
pub mod index;
pub mod output;
pub mod picture;
pub mod point;
mod run;
pub mod spec;

pub use index::RowIndex;
pub use point::{Point, Row, AXES};
pub use run::{row_of_text, row_text, SweepRun};
pub use spec::{Loaded, Spec};

use crate::error::{Error, Result};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// Most crossovers along the batch or the sequence a sweep's summary solves exactly (each a
/// `symshard crossover` of the two winning layouts).
pub const MAX_EXACT_CROSSOVERS: usize = 200;

impl Loaded {
    /// The length of each axis, in the order of [`Point::at`].
    pub fn axis_lengths(&self) -> [usize; 6] {
        [
            self.models.len(),
            self.machines.len(),
            self.spec.devices.len(),
            self.precisions.len(),
            self.spec.batch.as_ref().map_or(1, Vec::len),
            self.spec.sequence.as_ref().map_or(1, Vec::len),
        ]
    }

    /// How many points the grid has, numbered with the last axis (sequence) varying fastest.
    pub fn point_count(&self) -> usize {
        self.axis_lengths().iter().product()
    }

    /// The point numbered `index`.
    pub fn point(&self, index: u64) -> Result<Point> {
        let total = self.point_count();
        match usize::try_from(index) {
            Ok(i) if i < total => Ok(point_of(i, &self.axis_lengths())),
            _ => Err(Error::Usage(format!(
                "point {index}: the sweep has {total} points"
            ))),
        }
    }

    /// A point's value along one axis, as summaries print it.
    pub fn axis_value(&self, p: &Point, axis: usize) -> String {
        let k = p.at[axis];
        let size = |v: &Option<Vec<u64>>| v.as_ref().map_or("-".into(), |v| v[k].to_string());
        match axis {
            0 => self.spec.models[k].clone(),
            1 => self.machines[k].name.clone(),
            2 => self.spec.devices[k].to_string(),
            3 => self.precisions[k].clone(),
            4 => size(&self.spec.batch),
            _ => size(&self.spec.sequence),
        }
    }

    /// Runs the points not `done` (by number) on `jobs` threads, calling `finished` with each
    /// row and the time it took as it finishes; keeps no row.
    pub fn run(
        &self,
        done: &[bool],
        jobs: usize,
        finished: &(dyn Fn(&Row, Duration) -> Result<()> + Sync),
    ) -> Result<()> {
        let n = self.axis_lengths();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs.max(1))
            .build()
            .map_err(|e| Error::Internal(format!("cannot start {jobs} workers: {e}")))?;
        pool.install(|| {
            (0..self.point_count())
                .into_par_iter()
                .filter(|&i| !done.get(i).copied().unwrap_or(false))
                .try_for_each(|i| {
                    let start = Instant::now();
                    let row = self.evaluate(&point_of(i, &n));
                    finished(&row, start.elapsed())
                })
        })
    }

    /// Where the best layout's family changes between two points adjacent along one axis other
    /// than the model (the others equal), both feasible: from the rows' index, reading the two
    /// rows of each change from the journal.
    pub fn crossovers(&self, index: &RowIndex) -> Result<Vec<Crossover>> {
        let n = self.axis_lengths();
        let mut found = Vec::new();
        for i in 0..self.point_count() {
            let p = point_of(i, &n);
            // Models are a list, not a scale: one model against the next is no crossover.
            for axis in 1..6 {
                if p.at[axis] + 1 >= n[axis] {
                    continue;
                }
                // The next point along `axis`: its index grows by the product of the faster axes.
                let stride: usize = n[axis + 1..].iter().product();
                let q = point_of(i + stride, &n);
                if let (Some(fa), Some(fb)) = (index.family(p.index), index.family(q.index)) {
                    if fa != fb {
                        found.push((p, q, axis));
                    }
                }
            }
        }
        // The answers along the devices, the batch and the sequence, in parallel, the first
        // MAX_EXACT_CROSSOVERS of them; only those read their two rows.
        let mut along = 0;
        let found: Vec<_> = found
            .into_iter()
            .map(|(p, q, axis)| {
                let solve = matches!(axis, 2 | 4 | 5) && {
                    along += 1;
                    along <= MAX_EXACT_CROSSOVERS
                };
                (p, q, axis, solve)
            })
            .collect();
        found
            .into_par_iter()
            .map(|(p, q, axis, solve)| {
                let family = |x: &Point| index.family(x.index).unwrap_or_default().to_string();
                Ok(Crossover {
                    axis: AXES[axis],
                    from: self.axis_value(&p, axis),
                    to: self.axis_value(&q, axis),
                    at: self.others(&p, axis),
                    family_from: family(&p),
                    family_to: family(&q),
                    points: (p.index, q.index),
                    exact: match (solve, matches!(axis, 2 | 4 | 5)) {
                        (true, _) => {
                            let (a, b) = (index.row(p.index)?, index.row(q.index)?);
                            Some(if axis == 2 {
                                self.device_crossover(&p, &a, &b)
                            } else {
                                self.exact_crossover(&p, axis, &a, &b)
                            })
                        }
                        (false, true) => Some(format!(
                            "not solved: only the first {MAX_EXACT_CROSSOVERS} crossovers along the devices, the batch or the sequence are (symshard crossover solves any along the batch or the sequence)"
                        )),
                        _ => None,
                    },
                })
            })
            .collect()
    }

    /// Between two points adjacent along the batch (`axis` 4) or the sequence (5), whose best
    /// layouts `a` and `b` differ: who of the two layouts is cheaper where as that one symbol
    /// grows from `a`'s value to `b`'s, solved exactly as `symshard crossover` solves it (by
    /// relative cost, on the point's machine), or why it could not be.
    fn exact_crossover(&self, p: &Point, axis: usize, a: &Row, b: &Row) -> String {
        let model = &self.models[p.at[0]];
        let solved = (|| -> Result<String> {
            let sym = if axis == 4 {
                model.batch.clone()
            } else {
                model.roles.sequence.clone()
            }
            .ok_or_else(|| Error::Usage(format!("model `{}` has no such symbol", model.name)))?;
            let mut values = model.values.clone();
            for (k, v) in self.set_values(p, model)? {
                values.insert(k, crate::sym::Rational::from_integer(v.into()));
            }
            let value = |r: &Row| if axis == 4 { r.batch } else { r.sequence };
            // A row's strategy states its precision where it is not bf16 (the knobs' text).
            let knobs = |r: &Row| r.strategy.clone().unwrap_or_default();
            let spec = crate::api::CrossoverSpec {
                a: crate::api::CompareSide::parse(&knobs(a), "strategy A")?,
                b: crate::api::CompareSide::parse(&knobs(b), "strategy B")?,
                symbol: sym,
                from: value(a),
                to: value(b),
                step: None,
                machine: crate::api::Machine::named(&a.machine)?,
            };
            // Checked at one end, then at the other: each layout runs at its own point, not
            // necessarily at the other's.
            let at = |r: &Row| {
                let mut v = values.clone();
                let x = value(r).unwrap_or_default();
                v.insert(
                    spec.symbol.clone(),
                    crate::sym::Rational::from_integer(x.into()),
                );
                crate::api::crossover_loaded(&spec, model, &v)
            };
            let out = at(b).or_else(|_| at(a))?;
            let fa = a.family.as_deref().unwrap_or_default();
            let fb = b.family.as_deref().unwrap_or_default();
            let mut line = crate::api::winners_line(&out, fa, fb);
            // Whether the first point's layout still fits at the second point: where it does
            // not, memory decided.
            let mut v = values.clone();
            let x = value(b).unwrap_or_default();
            v.insert(
                spec.symbol.clone(),
                crate::sym::Rational::from_integer(x.into()),
            );
            let limit = b
                .memory_limit_bytes
                .map(|m| crate::sym::Rational::from_integer(m.into()));
            if let (Ok(need), Some(limit)) = (
                crate::api::crossover_memory_at(&spec, model, &v, true),
                limit,
            ) {
                if need > limit {
                    line.push_str(&format!(
                        "; memory decides: at {} = {x} {fa} needs {} per device, {} usable",
                        spec.symbol,
                        super::units::bytes(&need),
                        super::units::bytes(&limit)
                    ));
                    return Ok(line);
                }
            }
            if line.contains(" stays cheaper ") {
                line.push_str("; the winner changes by simulated seconds");
            }
            Ok(line)
        })();
        match solved {
            Ok(line) => format!("by relative cost (exact): {line}"),
            Err(e) => format!("no exact crossover by relative cost: {e}"),
        }
    }

    /// A point's other coordinates, for a crossover's line: the model, the machine, and every
    /// axis the spec lists.
    fn others(&self, p: &Point, axis: usize) -> String {
        let n = self.axis_lengths();
        (0..6)
            .filter(|&k| {
                let swept = match k {
                    4 => self.spec.batch.is_some(),
                    5 => self.spec.sequence.is_some(),
                    _ => k < 2,
                };
                k != axis && (n[k] > 1 || swept)
            })
            .map(|k| match k {
                0 | 1 | 3 => self.axis_value(p, k),
                2 => format!("{} devices", self.axis_value(p, k)),
                4 => format!("batch {}", self.axis_value(p, k)),
                _ => format!("sequence {}", self.axis_value(p, k)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The point numbered `i` of a grid of axes of lengths `n`, the last varying fastest.
fn point_of(i: usize, n: &[usize; 6]) -> Point {
    let mut at = [0usize; 6];
    let mut rest = i;
    for k in (0..6).rev() {
        at[k] = rest % n[k];
        rest /= n[k];
    }
    Point {
        index: i as u64,
        at,
    }
}

/// A change of winner between adjacent points.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Crossover {
    /// The axis along which the points are adjacent.
    pub axis: &'static str,
    /// The first point's value on it.
    pub from: String,
    /// The second's.
    pub to: String,
    /// The coordinates both share.
    pub at: String,
    /// The first point's best family.
    pub family_from: String,
    /// The second's.
    pub family_to: String,
    /// The two points' numbers.
    pub points: (u64, u64),
    /// Along the batch or the sequence: who of the two layouts is cheaper where between the two
    /// values, solved exactly by relative cost (as `symshard crossover`), or why not. Along the
    /// devices: the first count between the two where the second layout, scaled to it, is no
    /// slower than the first by simulated seconds.
    pub exact: Option<String>,
}

impl std::fmt::Display for Crossover {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} {} → {} ({}): {} → {} (points {} and {})",
            self.axis,
            self.from,
            self.to,
            self.at,
            self.family_from,
            self.family_to,
            self.points.0,
            self.points.1
        )?;
        match &self.exact {
            Some(x) => write!(f, "; {x}"),
            None => Ok(()),
        }
    }
}

/// `report --sweep`: the sweep's rows drawn in one HTML file.
pub fn report(parquet: &std::path::Path, output: &std::path::Path) -> Result<(), Error> {
    let rows = picture::read_rows(parquet)?;
    let html = picture::html(&rows, &parquet.display().to_string())?;
    crate::diag::write_output(output, html.as_bytes(), &[parquet])?;
    eprintln!("wrote {} ({} bytes)", output.display(), html.len());
    Ok(())
}
