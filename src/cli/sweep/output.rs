//! A sweep's files: the journal of finished points (JSON lines, written as points finish, read
//! back to resume), and the rows in point order as Parquet and CSV, written with the Arrow and
//! Parquet crates. Neither file holds a time or a host: the same rows give the same bytes.

use super::point::Row;
use super::spec::Loaded;
use crate::error::{Error, Result};
use crate::units;
use arrow::array::{ArrayRef, BooleanArray, Float64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use std::collections::BTreeMap;
use std::io::Write;
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

/// The rows as a Parquet file's bytes.
pub fn parquet_bytes(rows: &[Row]) -> Result<Vec<u8>> {
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let batch = record_batch(rows)?;
    let props = WriterProperties::builder()
        .set_created_by(CREATED_BY.to_string())
        .build();
    let fail = |e: parquet::errors::ParquetError| {
        Error::Internal(format!("cannot write the sweep's Parquet file: {e}"))
    };
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).map_err(fail)?;
    w.write(&batch).map_err(fail)?;
    w.close().map_err(fail)?;
    Ok(out)
}

/// The rows as CSV bytes, with a header line.
pub fn csv_bytes(rows: &[Row]) -> Result<Vec<u8>> {
    let batch = record_batch(rows)?;
    let mut out = Vec::new();
    {
        let mut w = arrow::csv::WriterBuilder::new()
            .with_header(true)
            .build(&mut out);
        w.write(&batch)
            .map_err(|e| Error::Internal(format!("cannot write the sweep's CSV file: {e}")))?;
    }
    Ok(out)
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

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Journal {
    /// Opens the journal at `path` for `spec`: the rows it already holds (a resumed sweep), and
    /// the journal ready to append. A journal of another spec is refused; a line cut short by an
    /// interruption is dropped.
    pub fn open(
        path: &Path,
        loaded: &Loaded,
        points: u64,
    ) -> Result<(Journal, BTreeMap<u64, Row>)> {
        let spec_text = serde_json::to_string(&loaded.spec)
            .map_err(|e| Error::Internal(format!("cannot write the spec as JSON: {e}")))?;
        let header = Header {
            symshard_sweep_journal: 1,
            spec: spec_text,
            points,
            inputs: inputs_digest(loaded)?,
        };
        let mut done = BTreeMap::new();
        if path.exists() {
            let text = crate::diag::read_text(path)?;
            let mut lines = text.lines();
            let first: Option<Header> = lines.next().and_then(|l| serde_json::from_str(l).ok());
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
            for line in lines {
                if let Ok(row) = serde_json::from_str::<Row>(line) {
                    if row.point < points {
                        done.insert(row.point, row);
                    }
                }
            }
        }
        // Written anew, whole lines only, then appended to.
        let mut text = json_line(&header)?;
        for row in done.values() {
            text.push_str(&json_line(row)?);
        }
        std::fs::write(path, text).map_err(io(path))?;
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
