//! A sweep being run, point by point, by whoever evaluates the points: the command line's
//! threads ([`SweepRun::run_local`]) or another executor that evaluates points elsewhere (a Ray
//! cluster, through the Python package) and hands back their rows ([`SweepRun::record`]). Both
//! share the journal and the writing, so a sweep gives the same files however its points ran.

use super::index::RowIndex;
use super::output::{companions, write_tables, Journal};
use super::point::Row;
use super::spec::Loaded;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// A sweep opened for running: its points, which of them have a row (in the journal: those of a
/// resumed journal too) and the files it writes. It holds no row: each goes to the journal as
/// it finishes, and the files are written from there.
pub struct SweepRun {
    /// The spec, checked.
    pub loaded: Loaded,
    spec: PathBuf,
    output: PathBuf,
    csv: PathBuf,
    journal_path: PathBuf,
    journal: Journal,
    done: Mutex<Vec<bool>>,
    resumed: usize,
}

impl SweepRun {
    /// Reads the spec at `spec` and opens the sweep that writes `output` (a `.parquet` file; the
    /// CSV and the journal go beside it). A journal already there is resumed from.
    pub fn open(spec: &Path, output: &Path) -> Result<SweepRun> {
        if output.extension().and_then(|e| e.to_str()) != Some("parquet") {
            return Err(Error::Usage(format!(
                "-o {}: give the Parquet file to write (NAME.parquet); the CSV is written beside it",
                output.display()
            )));
        }
        let loaded = Loaded::read(spec)?;
        let (csv, journal_path) = companions(output);
        for p in [output, &csv, &journal_path] {
            crate::diag::check_output(p, &[spec])?;
        }
        let points = loaded.point_count() as u64;
        let (journal, done) = Journal::open(&journal_path, &loaded, points)?;
        Ok(SweepRun {
            loaded,
            spec: spec.to_path_buf(),
            output: output.to_path_buf(),
            csv,
            journal_path,
            journal,
            resumed: done.iter().filter(|&&d| d).count(),
            done: Mutex::new(done),
        })
    }

    fn done(&self) -> Result<std::sync::MutexGuard<'_, Vec<bool>>> {
        self.done
            .lock()
            .map_err(|_| Error::Internal("a sweep's rows lock is poisoned".into()))
    }

    /// How many points the grid has.
    pub fn points(&self) -> u64 {
        self.loaded.point_count() as u64
    }

    /// How many rows came from the journal when the sweep was opened.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// The numbers of the points that have no row yet, in order.
    pub fn pending(&self) -> Result<Vec<u64>> {
        let done = self.done()?;
        Ok((0..done.len() as u64)
            .filter(|&i| !done[i as usize])
            .collect())
    }

    /// Records a point's row, evaluated elsewhere: journaled at once. A row of no point of this
    /// grid, or of a point that has one already, is refused.
    pub fn record(&self, row: Row) -> Result<()> {
        let points = self.points();
        if row.point >= points {
            return Err(Error::Usage(format!(
                "a row for point {} of a sweep of {points} points",
                row.point
            )));
        }
        let mut done = self.done()?;
        if done[row.point as usize] {
            return Err(Error::Usage(format!(
                "point {} of the sweep already has a row",
                row.point
            )));
        }
        self.journal.append(&row)?;
        done[row.point as usize] = true;
        Ok(())
    }

    /// Runs every pending point on `jobs` threads, calling `finished` with the time each took.
    pub fn run_local(&self, jobs: usize, finished: &(dyn Fn(Duration) + Sync)) -> Result<()> {
        let done = self.done()?.clone();
        self.loaded.run(&done, jobs, &|row, took| {
            self.journal.append(row)?;
            self.done()?[row.point as usize] = true;
            finished(took);
            Ok(())
        })
    }

    /// Writes the Parquet file and the CSV once every point has its row, from the journal;
    /// returns its index, which reads the rows back.
    pub fn finish(&self) -> Result<RowIndex> {
        let index = RowIndex::scan(&self.journal_path, self.points())?;
        if let Some((first, count)) = index.missing() {
            return Err(Error::Usage(format!(
                "{count} of {} points have no row yet (the first: point {first}): run them before writing {}",
                self.points(),
                self.output.display()
            )));
        }
        write_tables(&index, &self.output, &self.csv, &[self.spec.as_path()])?;
        Ok(index)
    }

    /// The Parquet file, the CSV and the journal.
    pub fn files(&self) -> [&Path; 3] {
        [&self.output, &self.csv, &self.journal_path]
    }
}

/// A row as one line of text, the journal's format: how a row evaluated in another process
/// comes back to the one that writes the files, unchanged to the last bit.
pub fn row_text(row: &Row) -> Result<String> {
    serde_json::to_string(row).map_err(|e| Error::Internal(format!("cannot write a row: {e}")))
}

/// A row from [`row_text`]'s line.
pub fn row_of_text(text: &str) -> Result<Row> {
    serde_json::from_str(text).map_err(|e| Error::Usage(format!("not a sweep row: {e}")))
}
