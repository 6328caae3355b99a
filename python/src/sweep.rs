//! Sweeps from Python: a sweep opened here journals and writes its files as the command line's
//! does; its points run on this machine's cores (`run_local`) or anywhere else — Ray workers call
//! [`sweep_points`] in their own processes and the driver records the rows they return. The rows
//! travel between processes as the journal's lines, which Python passes on without reading.

use crate::native_error;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;
use rayon::prelude::*;
use std::path::PathBuf;
use symshard::sweep::output::{row_values, Value};
use symshard::sweep::{row_of_text, row_text, Loaded, Row, RowIndex};

/// A sweep being run: its grid, the rows finished so far (a journal beside the output is
/// resumed from) and the files it writes.
#[pyclass(frozen, module = "symshard._native")]
pub struct SweepRun(symshard::sweep::SweepRun);

#[pymethods]
impl SweepRun {
    /// Opens the sweep of the spec at `spec` that writes `output` (`NAME.parquet`; the CSV and
    /// the journal go beside it).
    #[new]
    fn new(py: Python<'_>, spec: PathBuf, output: PathBuf) -> PyResult<SweepRun> {
        py.detach(|| symshard::sweep::SweepRun::open(&spec, &output))
            .map(SweepRun)
            .map_err(native_error)
    }

    /// Points in the grid.
    #[getter]
    fn points(&self) -> u64 {
        self.0.points()
    }

    /// Rows read back from the journal when the sweep was opened.
    #[getter]
    fn resumed(&self) -> usize {
        self.0.resumed()
    }

    /// The numbers of the points without a row, in order.
    fn pending(&self) -> PyResult<Vec<u64>> {
        self.0.pending().map_err(native_error)
    }

    /// Runs every pending point on `jobs` threads of this process (default: one per core).
    #[pyo3(signature = (jobs = None))]
    fn run_local(&self, py: Python<'_>, jobs: Option<usize>) -> PyResult<()> {
        let jobs = jobs.unwrap_or_else(rayon::current_num_threads);
        py.detach(|| self.0.run_local(jobs, &|_| ()))
            .map_err(native_error)
    }

    /// Records rows that [`sweep_points`] returned, journaling each at once.
    fn record(&self, py: Python<'_>, rows: Vec<String>) -> PyResult<()> {
        py.detach(|| rows.iter().try_for_each(|t| self.0.record(row_of_text(t)?)))
            .map_err(native_error)
    }

    /// Writes the Parquet file and the CSV, once every point has its row.
    fn finish(&self, py: Python<'_>) -> PyResult<SweepResult> {
        let (index, crossovers) = py
            .detach(|| {
                let index = self.0.finish()?;
                let crossovers = self.0.loaded.crossovers(&index)?;
                Ok::<_, symshard::Error>((index, crossovers))
            })
            .map_err(native_error)?;
        let [output, csv, journal] = self.0.files().map(|p| p.display().to_string());
        let crossovers = crossovers.iter().map(ToString::to_string).collect();
        Ok(SweepResult {
            output,
            csv,
            journal,
            points: index.points(),
            resumed: self.0.resumed() as u64,
            infeasible: index.infeasible(),
            crossovers,
            rows: Py::new(py, SweepRows(index))?,
        })
    }
}

/// What a finished sweep wrote and found.
#[pyclass(frozen, get_all, module = "symshard._native")]
pub struct SweepResult {
    output: String,
    csv: String,
    journal: String,
    points: u64,
    resumed: u64,
    infeasible: u64,
    crossovers: Vec<String>,
    rows: Py<SweepRows>,
}

/// A finished sweep's rows, where they are: in its journal, read when asked for (a byte offset
/// per point is all that is held).
#[pyclass(frozen, module = "symshard._native")]
pub struct SweepRows(RowIndex);

#[pymethods]
impl SweepRows {
    fn __len__(&self) -> usize {
        self.0.points() as usize
    }

    /// The row of point `point`, as a dict of the Parquet file's columns.
    fn row(&self, py: Python<'_>, point: u64) -> PyResult<Py<PyAny>> {
        let row = py.detach(|| self.0.row(point)).map_err(native_error)?;
        row_dict(py, &row)
    }

    /// The rows of points `start..stop`, in point order.
    fn chunk(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<Py<PyAny>>> {
        let rows = py
            .detach(|| self.0.chunk(start, stop))
            .map_err(native_error)?;
        rows.iter().map(|r| row_dict(py, r)).collect()
    }
}

/// A row as a dict of the Parquet file's columns.
fn row_dict(py: Python<'_>, row: &Row) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    for (name, v) in row_values(row) {
        let v = match v {
            Value::U64(x) => x.into_py_any(py)?,
            Value::F64(x) => x.into_py_any(py)?,
            Value::Str(x) => x.into_py_any(py)?,
            Value::Bool(x) => x.into_py_any(py)?,
        };
        d.set_item(name, v)?;
    }
    d.into_py_any(py)
}

/// Evaluates the points numbered `indices` of the spec at `spec` on `jobs` threads of this
/// process (default 1: an executor that runs many of these at once gives each one core) and
/// returns their rows as the journal's lines, in the order asked.
#[pyfunction]
#[pyo3(signature = (spec, indices, *, jobs = 1))]
pub fn sweep_points(
    py: Python<'_>,
    spec: PathBuf,
    indices: Vec<u64>,
    jobs: usize,
) -> PyResult<Vec<String>> {
    py.detach(|| {
        let loaded = Loaded::read(&spec)?;
        let points = indices
            .iter()
            .map(|&i| loaded.point(i))
            .collect::<symshard::Result<Vec<_>>>()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs.max(1))
            .build()
            .map_err(|e| symshard::Error::Internal(format!("cannot start {jobs} workers: {e}")))?;
        pool.install(|| {
            points
                .par_iter()
                .map(|p| row_text(&loaded.evaluate(p)))
                .collect::<symshard::Result<Vec<_>>>()
        })
    })
    .map_err(native_error)
}
