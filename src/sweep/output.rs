//! A sweep's files: the journal of finished points (JSON lines, written as points finish, read
//! back to resume), and the rows in point order as Parquet and CSV, written with the Arrow and
//! Parquet crates. Neither file holds a time or a host: the same rows give the same bytes.

use super::index::RowIndex;
use super::point::Row;
use super::spec::Loaded;
use crate::error::{Error, Result};
use crate::units;
use arrow::array::{ArrayRef, BooleanArray, Float64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the Parquet file says wrote it: fixed, so the bytes do not change with the writer's
/// version string.
pub const CREATED_BY: &str = "symshard sweep";

/// How one column is read from a row.
enum Get {
    U64(fn(&Row) -> Option<u64>),
    F64(fn(&Row) -> Option<f64>),
    Str(fn(&Row) -> Option<&str>),
    Bool(fn(&Row) -> Option<bool>),
}

/// The columns, in order: name, whether it may be empty, how it is read.
fn columns() -> Vec<(&'static str, bool, Get)> {
    use Get::*;
    vec![
        ("point", false, U64(|r| Some(r.point))),
        ("model", false, Str(|r| Some(&r.model))),
        ("machine", false, Str(|r| Some(&r.machine))),
        ("what_if", true, Str(|r| r.what_if.as_deref())),
        ("devices", false, U64(|r| Some(r.devices))),
        ("precision", false, Str(|r| Some(&r.precision))),
        ("batch", true, U64(|r| r.batch)),
        ("sequence", true, U64(|r| r.sequence)),
        ("feasible", false, Bool(|r| Some(r.feasible))),
        ("reason", true, Str(|r| r.reason.as_deref())),
        ("family", true, Str(|r| r.family.as_deref())),
        ("strategy", true, Str(|r| r.strategy.as_deref())),
        ("dp", true, U64(|r| r.dp)),
        ("tp", true, U64(|r| r.tp)),
        ("pp", true, U64(|r| r.pp)),
        ("cp", true, U64(|r| r.cp)),
        ("ep", true, U64(|r| r.ep)),
        ("micro_batch_size", true, U64(|r| r.micro_batch_size)),
        ("microbatches", true, U64(|r| r.microbatches)),
        ("schedule", true, Str(|r| r.schedule.as_deref())),
        ("chunks", true, U64(|r| r.chunks)),
        ("sequence_parallel", true, Bool(|r| r.sequence_parallel)),
        ("recompute", true, Str(|r| r.recompute.as_deref())),
        ("zero", true, U64(|r| r.zero)),
        ("layout", true, Str(|r| r.layout.as_deref())),
        ("seconds_per_step", true, F64(|r| r.seconds_per_step)),
        ("tokens_per_second", true, F64(|r| r.tokens_per_second)),
        ("mfu", true, F64(|r| r.mfu)),
        (
            "memory_per_device_bytes",
            true,
            U64(|r| r.memory_per_device_bytes),
        ),
        ("memory_limit_bytes", true, U64(|r| r.memory_limit_bytes)),
        ("fits", true, Bool(|r| r.fits)),
        (
            "gpu_hours_per_trillion_tokens",
            true,
            F64(|r| r.gpu_hours_per_trillion_tokens),
        ),
        ("tdp_watts", true, F64(|r| r.tdp_watts)),
        (
            "energy_per_step_joules",
            true,
            F64(|r| r.energy_per_step_joules),
        ),
        (
            "energy_mwh_per_trillion_tokens",
            true,
            F64(|r| r.energy_mwh_per_trillion_tokens),
        ),
        ("price_per_gpu_hour", true, F64(|r| r.price_per_gpu_hour)),
        (
            "cost_per_step_dollars",
            true,
            F64(|r| r.cost_per_step_dollars),
        ),
        (
            "cost_per_trillion_tokens_dollars",
            true,
            F64(|r| r.cost_per_trillion_tokens_dollars),
        ),
        ("note", true, Str(|r| r.note.as_deref())),
        ("stack_profile", true, Str(|r| r.stack_profile.as_deref())),
    ]
}

/// One value of a row, as its column holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A count.
    U64(Option<u64>),
    /// A float.
    F64(Option<f64>),
    /// Text.
    Str(Option<&'a str>),
    /// A yes or no.
    Bool(Option<bool>),
}

/// A row's values under the names of the Parquet file's columns, in their order: the same
/// table the files are written from.
pub fn row_values(row: &Row) -> Vec<(&'static str, Value<'_>)> {
    columns()
        .into_iter()
        .map(|(name, _, get)| {
            let v = match get {
                Get::U64(f) => Value::U64(f(row)),
                Get::F64(f) => Value::F64(f(row)),
                Get::Str(f) => Value::Str(f(row)),
                Get::Bool(f) => Value::Bool(f(row)),
            };
            (name, v)
        })
        .collect()
}

/// The rows as one Arrow record batch, in the order given.
pub fn record_batch(rows: &[Row]) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, nullable, get) in columns() {
        let (ty, array): (DataType, ArrayRef) = match get {
            Get::U64(f) => (
                DataType::UInt64,
                Arc::new(rows.iter().map(f).collect::<UInt64Array>()),
            ),
            Get::F64(f) => (
                DataType::Float64,
                Arc::new(rows.iter().map(f).collect::<Float64Array>()),
            ),
            Get::Str(f) => (
                DataType::Utf8,
                Arc::new(rows.iter().map(f).collect::<StringArray>()),
            ),
            Get::Bool(f) => (
                DataType::Boolean,
                Arc::new(rows.iter().map(f).collect::<BooleanArray>()),
            ),
        };
        let field = Field::new(name, ty, nullable);
        // A column whose figure needs its definition carries it.
        fields.push(match name {
            "mfu" => field.with_metadata(std::collections::HashMap::from([(
                "description".to_string(),
                units::MFU_MEANS.to_string(),
            )])),
            _ => field,
        });
        arrays.push(array);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| Error::Internal(format!("cannot build the sweep's table: {e}")))
}

/// Rows per record batch and per Parquet row group when a sweep's files are written: what the
/// writing holds of them at once, however many points the sweep has.
pub const ROWS_AT_ONCE: u64 = 4096;
const ROW_GROUP: usize = 16384;

/// Writes `path` through a file beside it (`NAME.part`, which `write` is given to name in its
/// errors), put in its place once whole.
fn write_streamed(
    path: &Path,
    inputs: &[&Path],
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>, &Path) -> Result<()>,
) -> Result<()> {
    crate::diag::check_output(path, inputs)?;
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let file = std::fs::File::create(&part).map_err(io(&part))?;
    let mut out = std::io::BufWriter::new(file);
    write(&mut out, &part)?;
    out.flush().map_err(io(&part))?;
    drop(out);
    std::fs::rename(&part, path).map_err(io(path))
}

/// Writes every point's row, in point order, as the Parquet file `path` and the CSV `csv` (with
/// a header line), [`ROWS_AT_ONCE`] rows at a time.
pub fn write_tables(index: &RowIndex, path: &Path, csv: &Path, inputs: &[&Path]) -> Result<()> {
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let chunks = || (0..index.points()).step_by(ROWS_AT_ONCE as usize);
    let fail = |e: parquet::errors::ParquetError| {
        Error::Internal(format!("cannot write the sweep's Parquet file: {e}"))
    };
    write_streamed(path, inputs, |out, _| {
        let props = WriterProperties::builder()
            .set_created_by(CREATED_BY.to_string())
            .set_max_row_group_row_count(Some(ROW_GROUP))
            .build();
        let schema = record_batch(&[])?.schema();
        let mut w = ArrowWriter::try_new(out, schema, Some(props)).map_err(fail)?;
        for from in chunks() {
            let rows = index.chunk(from, from + ROWS_AT_ONCE)?;
            w.write(&record_batch(&rows)?).map_err(fail)?;
        }
        w.close().map_err(fail)?;
        Ok(())
    })?;
    write_streamed(csv, inputs, |out, _| {
        let mut w = arrow::csv::WriterBuilder::new()
            .with_header(true)
            .build(out);
        for from in chunks() {
            let rows = index.chunk(from, from + ROWS_AT_ONCE)?;
            w.write(&record_batch(&rows)?)
                .map_err(|e| Error::Internal(format!("cannot write the sweep's CSV file: {e}")))?;
        }
        Ok(())
    })
}

/// Where the CSV and the journal go beside the Parquet file.
pub fn companions(parquet: &Path) -> (PathBuf, PathBuf) {
    let csv = parquet.with_extension("csv");
    let mut journal = parquet.as_os_str().to_owned();
    journal.push(".journal.jsonl");
    (csv, PathBuf::from(journal))
}

/// The journal's first line: which spec its rows belong to, and what its inputs held.
#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    symshard_sweep_journal: u32,
    spec: String,
    points: u64,
    /// A digest of what the spec's names stood for when the rows were written
    /// ([`inputs_digest`]); absent in journals written before it was kept.
    #[serde(default)]
    inputs: String,
}

/// A digest (XXH64, hexadecimal) of what a sweep's names stand for: symshard's version, every
/// machine as built (its table, what-if changes applied) and the text of every model given as a
/// file. A table or model file edited between two runs changes it, so a resumed sweep never
/// mixes rows priced on the old inputs with rows priced on the new.
pub fn inputs_digest(loaded: &Loaded) -> Result<String> {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash64::with_seed(0);
    let mut put = |bytes: &[u8]| {
        h.write_u64(bytes.len() as u64);
        h.write(bytes);
    };
    put(env!("CARGO_PKG_VERSION").as_bytes());
    for m in &loaded.machines {
        let json = serde_json::to_string(m).map_err(|e| {
            Error::Internal(format!("cannot write machine `{}` as JSON: {e}", m.name))
        })?;
        put(json.as_bytes());
    }
    for m in &loaded.spec.models {
        let path = Path::new(m);
        if path.is_file() {
            put(&std::fs::read(path).map_err(io(path))?);
        } else {
            put(m.as_bytes());
        }
    }
    Ok(format!("{:016x}", h.finish()))
}

/// The journal of a sweep: rows appended as points finish.
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<std::fs::File>,
}

/// An I/O failure on `path`, as the error that names it.
pub(super) fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Journal {
    /// Opens the journal at `path` for `spec`: which points already have a row (a resumed
    /// sweep), and the journal ready to append. A journal of another spec is refused; a line cut
    /// short by an interruption is dropped, as is a second row of a point. The journal is read
    /// and written again a line at a time, so resuming holds no rows.
    pub fn open(path: &Path, loaded: &Loaded, points: u64) -> Result<(Journal, Vec<bool>)> {
        let spec_text = serde_json::to_string(&loaded.spec)
            .map_err(|e| Error::Internal(format!("cannot write the spec as JSON: {e}")))?;
        let header = Header {
            symshard_sweep_journal: 1,
            spec: spec_text,
            points,
            inputs: inputs_digest(loaded)?,
        };
        let n = usize::try_from(points)
            .map_err(|_| Error::Usage(format!("a sweep of {points} points")))?;
        let mut done = vec![false; n];
        let mut rows = None;
        if path.exists() {
            let file = std::fs::File::open(path).map_err(io(path))?;
            let mut lines = std::io::BufReader::new(file).split(b'\n');
            let first = lines.next().transpose().map_err(io(path))?;
            let first: Option<Header> = first.and_then(|l| serde_json::from_slice(&l).ok());
            match first {
                Some(h) if h.spec == header.spec && h.points == points => {
                    if h.inputs != header.inputs {
                        return Err(Error::Usage(format!(
                            "{}: its rows were priced on other inputs than the sweep's now (a calibration table or model file changed since, or another symshard version wrote them): delete it to price every point again, or write the results elsewhere with -o",
                            path.display()
                        )));
                    }
                }
                _ => {
                    return Err(Error::Usage(format!(
                        "{} is the journal of another sweep (or not a journal): delete it, or write the results elsewhere with -o",
                        path.display()
                    )))
                }
            }
            rows = Some(lines);
        }
        // Written anew, whole lines only, then appended to.
        write_streamed(path, &[], |out, part| {
            out.write_all(json_line(&header)?.as_bytes())
                .map_err(io(part))?;
            for line in rows.into_iter().flatten() {
                let line = line.map_err(io(path))?;
                let Ok(row) = serde_json::from_slice::<Row>(&line) else {
                    continue;
                };
                match usize::try_from(row.point).ok().filter(|&i| i < n) {
                    Some(i) if !done[i] => {
                        done[i] = true;
                        out.write_all(json_line(&row)?.as_bytes())
                            .map_err(io(part))?;
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        let journal = Journal {
            path: path.to_path_buf(),
            file: std::sync::Mutex::new(file),
        };
        Ok((journal, done))
    }

    /// Appends a finished point's row, at once.
    pub fn append(&self, row: &Row) -> Result<()> {
        let line = json_line(row)?;
        let mut f = self
            .file
            .lock()
            .map_err(|_| Error::Internal("the journal's lock is poisoned".into()))?;
        f.write_all(line.as_bytes()).map_err(io(&self.path))?;
        f.flush().map_err(io(&self.path))
    }
}

fn json_line<T: serde::Serialize>(v: &T) -> Result<String> {
    let mut s =
        serde_json::to_string(v).map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    s.push('\n');
    Ok(s)
}
