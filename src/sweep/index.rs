//! A finished sweep's rows where they already are, in its journal: a byte offset per point and
//! what the summary asks of each row (its layout family, whether it is feasible), a dozen bytes
//! per point. The Parquet file, the CSV, the summary and the crossovers read the rows from the
//! journal a chunk at a time, so a sweep's memory does not grow by a row's kilobyte per point.

use super::output::io;
use super::point::Row;
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// No row (an offset), or no family (a family number).
const NONE: u64 = u64::MAX;
const NO_FAMILY: u32 = u32::MAX;

/// The rows of a sweep's journal, by point.
pub struct RowIndex {
    path: PathBuf,
    /// Where each point's line starts ([`NONE`]: no row).
    offsets: Vec<u64>,
    /// Each point's layout family, a number into `families` ([`NO_FAMILY`]: infeasible, or none).
    family: Vec<u32>,
    families: Vec<String>,
    /// Infeasible points, and the first of them (its number and reason).
    infeasible: u64,
    first_infeasible: Option<(u64, String)>,
    reader: Mutex<BufReader<std::fs::File>>,
}

impl std::fmt::Debug for RowIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowIndex")
            .field("path", &self.path)
            .field("points", &self.points())
            .field("rows", &self.rows())
            .field("infeasible", &self.infeasible)
            .finish()
    }
}

impl RowIndex {
    /// Reads the journal at `path` (its header line first) for a sweep of `points` points. A
    /// line that is not a row of one of them is passed over, as is a second row of a point (the
    /// first stands), as resuming does.
    pub fn scan(path: &Path, points: u64) -> Result<RowIndex> {
        let n = usize::try_from(points)
            .map_err(|_| Error::Usage(format!("a sweep of {points} points")))?;
        let file = std::fs::File::open(path).map_err(io(path))?;
        let mut reader = BufReader::new(file);
        let mut index = RowIndex {
            path: path.to_path_buf(),
            offsets: vec![NONE; n],
            family: vec![NO_FAMILY; n],
            families: Vec::new(),
            infeasible: 0,
            first_infeasible: None,
            reader: Mutex::new(BufReader::new(std::fs::File::open(path).map_err(io(path))?)),
        };
        let mut line = Vec::new();
        let mut at = 0u64;
        let mut header = true;
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(io(path))?;
            if read == 0 {
                break;
            }
            let start = at;
            at += read as u64;
            if std::mem::take(&mut header) {
                continue;
            }
            if let Ok(row) = serde_json::from_slice::<Row>(&line) {
                index.add(start, row);
            }
        }
        Ok(index)
    }

    fn add(&mut self, offset: u64, row: Row) {
        let Some(slot) = usize::try_from(row.point)
            .ok()
            .filter(|&i| i < self.offsets.len() && self.offsets[i] == NONE)
        else {
            return;
        };
        self.offsets[slot] = offset;
        if !row.feasible {
            self.infeasible += 1;
            if self
                .first_infeasible
                .as_ref()
                .is_none_or(|(p, _)| row.point < *p)
            {
                self.first_infeasible = Some((row.point, row.reason.unwrap_or_default()));
            }
            return;
        }
        if let Some(f) = row.family {
            let number = match self.families.iter().position(|g| *g == f) {
                Some(i) => i,
                None => {
                    self.families.push(f);
                    self.families.len() - 1
                }
            };
            self.family[slot] = number as u32;
        }
    }

    /// Points in the grid.
    pub fn points(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// Points with a row.
    pub fn rows(&self) -> u64 {
        self.offsets.iter().filter(|&&o| o != NONE).count() as u64
    }

    /// The first point without a row, and how many have none.
    pub fn missing(&self) -> Option<(u64, u64)> {
        let first = self.offsets.iter().position(|&o| o == NONE)?;
        let count = self.offsets.iter().filter(|&&o| o == NONE).count();
        Some((first as u64, count as u64))
    }

    /// Infeasible points.
    pub fn infeasible(&self) -> u64 {
        self.infeasible
    }

    /// The first infeasible point (by number) and its reason.
    pub fn first_infeasible(&self) -> Option<(u64, &str)> {
        self.first_infeasible
            .as_ref()
            .map(|(p, r)| (*p, r.as_str()))
    }

    /// A feasible point's layout family.
    pub fn family(&self, point: u64) -> Option<&str> {
        let f = *self.family.get(usize::try_from(point).ok()?)?;
        (f != NO_FAMILY).then(|| self.families[f as usize].as_str())
    }

    /// The row of `point`, read from the journal.
    pub fn row(&self, point: u64) -> Result<Row> {
        let offset = usize::try_from(point)
            .ok()
            .and_then(|i| self.offsets.get(i).copied())
            .filter(|&o| o != NONE)
            .ok_or_else(|| Error::Internal(format!("point {point} has no row in the journal")))?;
        let mut reader = self
            .reader
            .lock()
            .map_err(|_| Error::Internal("the journal reader's lock is poisoned".into()))?;
        reader
            .seek(SeekFrom::Start(offset))
            .map_err(io(&self.path))?;
        let mut line = Vec::new();
        reader
            .read_until(b'\n', &mut line)
            .map_err(io(&self.path))?;
        let changed = |why: String| {
            Error::Usage(format!(
                "{}: point {point}'s row is no longer where the sweep left it ({why}): the journal \
                 was changed after the sweep finished",
                self.path.display()
            ))
        };
        let row: Row = serde_json::from_slice(&line).map_err(|e| changed(e.to_string()))?;
        if row.point != point {
            return Err(changed(format!("the line there is point {}'s", row.point)));
        }
        Ok(row)
    }

    /// The rows of points `from..to`, in point order.
    pub fn chunk(&self, from: u64, to: u64) -> Result<Vec<Row>> {
        (from..to.min(self.points())).map(|p| self.row(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::output::{write_tables, ROWS_AT_ONCE};

    /// A row of point `i` (feasible unless `i` is a multiple of 7), as the journal holds it.
    fn line(i: u64) -> String {
        let (feasible, family) = if i.is_multiple_of(7) {
            ("false", "null".to_string())
        } else {
            (
                "true",
                format!("\"{}\"", if i.is_multiple_of(3) { "dp" } else { "dp+tp" }),
            )
        };
        format!(
            "{{\"point\":{i},\"model\":\"m\",\"machine\":\"x\",\"what_if\":null,\"devices\":8,\"precision\":\"bf16\",\"batch\":{i},\"sequence\":null,\"feasible\":{feasible},\"reason\":\"r{i}\",\"family\":{family},\"strategy\":null,\"dp\":null,\"tp\":null,\"pp\":null,\"cp\":null,\"ep\":null,\"micro_batch_size\":null,\"microbatches\":null,\"schedule\":null,\"chunks\":null,\"sequence_parallel\":null,\"recompute\":null,\"zero\":null,\"layout\":null,\"seconds_per_step\":\"0.5\",\"tokens_per_second\":null,\"mfu\":null,\"memory_per_device_bytes\":null,\"memory_limit_bytes\":null,\"fits\":null,\"gpu_hours_per_trillion_tokens\":null,\"tdp_watts\":null,\"energy_per_step_joules\":null,\"energy_mwh_per_trillion_tokens\":null,\"price_per_gpu_hour\":null,\"cost_per_step_dollars\":null,\"cost_per_trillion_tokens_dollars\":null,\"note\":null,\"stack_profile\":null}}\n"
        )
    }

    #[test]
    fn tables_of_more_rows_than_a_chunk_are_written_in_point_order_from_the_journal() {
        use parquet::file::reader::FileReader;
        let dir = std::env::temp_dir().join(format!("symshard-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = dir.join("r.parquet.journal.jsonl");
        // More points than a Parquet row group holds, journaled out of order (as workers finish),
        // with a second row of one point, a line cut short and a row of no point of the grid.
        let points = 3 * ROWS_AT_ONCE * 2 + 5;
        let mut text = String::from("{\"header\":true}\n");
        let mut order: Vec<u64> = (0..points).collect();
        order.reverse();
        order.swap(3, 1000);
        for &i in &order {
            text.push_str(&line(i));
        }
        text.push_str(&line(5).replace("\"r5\"", "\"second\""));
        text.push_str(&line(points));
        text.push_str(&line(9)[..40]);
        std::fs::write(&journal, text).unwrap();

        let index = RowIndex::scan(&journal, points).unwrap();
        assert_eq!((index.rows(), index.missing()), (points, None));
        let infeasible = (0..points).filter(|i| i.is_multiple_of(7)).count() as u64;
        assert_eq!(index.infeasible(), infeasible);
        assert_eq!(index.first_infeasible(), Some((0, "r0")));
        assert_eq!(index.family(3), Some("dp"));
        assert_eq!(index.family(4), Some("dp+tp"));
        assert_eq!(index.family(7), None);
        // The first row of a point stands.
        assert_eq!(index.row(5).unwrap().reason.as_deref(), Some("r5"));

        let (parquet, csv) = (dir.join("r.parquet"), dir.join("r.csv"));
        write_tables(&index, &parquet, &csv, &[]).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(
            std::fs::File::open(&parquet).unwrap(),
        )
        .unwrap();
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows() as u64, points);
        assert_eq!(meta.num_row_groups(), 2, "16,384 rows a group");
        let csv_text = std::fs::read_to_string(&csv).unwrap();
        let mut lines = csv_text.lines();
        assert!(lines.next().unwrap().starts_with("point,model,"));
        let numbers: Vec<u64> = lines
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(numbers, (0..points).collect::<Vec<_>>());
        assert!(!dir.join("r.parquet.part").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
