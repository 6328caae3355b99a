//! The native half of the `symshard` Python package. `cost`, `timeline`, `rank` and `compare`
//! call the library's typed functions and return objects with attributes: exact numbers as
//! Python `int` (or `fractions.Fraction` where the library's value is a ratio), seconds as
//! `float`, warnings as data; `models` and `explain` return the library's catalogue and rule
//! explanations. Sweeps (`sweep.rs`) run their points through the library, here
//! or in Ray's workers. `run_json` runs any other command line in this process and returns its
//! JSON text; the package's own functions do not use it. No number is computed here.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;
use std::collections::BTreeMap;
use symshard::sym::Rational;

mod sweep;

create_exception!(
    _native,
    NativeError,
    PyException,
    "A symshard error: (message, exit code of the command line)."
);

fn native_error(e: symshard::Error) -> PyErr {
    NativeError::new_err((e.to_string(), e.exit_code()))
}

fn usage(message: String) -> PyErr {
    native_error(symshard::Error::Usage(message))
}

/// A headroom as Python gives it: a percentage or an amount as text (`"10%"`, `"8GB"`), or an int
/// of bytes, as `memory` takes one.
fn headroom_of(h: &Bound<'_, PyAny>) -> PyResult<symshard::Headroom> {
    use pyo3::types::{PyBool, PyInt, PyString};
    if h.is_instance_of::<PyInt>() && !h.is_instance_of::<PyBool>() {
        let bytes: num_bigint::BigInt = h.extract()?;
        if bytes < num_bigint::BigInt::from(0) {
            return Err(usage(format!(
                "headroom {bytes}: an amount of memory is not negative"
            )));
        }
        return Ok(symshard::Headroom::Bytes(Rational::from_integer(bytes)));
    }
    if h.is_instance_of::<PyString>() {
        let text: String = h.extract()?;
        return symshard::Headroom::parse_as(&text, symshard::Spelling::Python)
            .map_err(native_error);
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "headroom is a percentage or an amount as text (\"10%\", \"8GB\") or an int of bytes, not {}",
        h.get_type().name()?
    )))
}

/// Runs `symshard ARGS...` (with `--format json` where the command takes it) and returns the JSON
/// documents it prints: none for a command that only writes files, such as `report`.
#[pyfunction]
fn run_json(py: Python<'_>, args: Vec<String>) -> PyResult<Vec<String>> {
    py.detach(|| symshard::cli::run_json(&args))
        .map_err(native_error)
}

/// The package's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

// ---------------------------------------------------------------------------------------------
// Conversions

/// An exact number: a Python `int` where it is whole, else a `fractions.Fraction`.
fn exact(py: Python<'_>, r: &Rational) -> PyResult<Py<PyAny>> {
    if r.is_integer() {
        r.to_integer().into_py_any(py)
    } else {
        r.clone().into_py_any(py)
    }
}

/// An amount: an exact number, or a formula as text.
fn quantity(py: Python<'_>, q: &symshard::Quantity) -> PyResult<Py<PyAny>> {
    match q {
        symshard::Quantity::Exact(r) => exact(py, r),
        symshard::Quantity::Formula(f) => f.into_py_any(py),
    }
}

fn exact_map(py: Python<'_>, m: &BTreeMap<String, Rational>) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(k, exact(py, v)?)?;
    }
    d.into_py_any(py)
}

/// A JSON value as Python values (numbers as JSON has them: the library's exact numbers are
/// decimal strings there, as the command line prints them).
fn json(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    use serde_json::Value;
    match v {
        Value::Null => Ok(py.None()),
        Value::Bool(b) => b.into_py_any(py),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.into_py_any(py),
            (None, Some(i), _) => i.into_py_any(py),
            (None, None, Some(f)) => f.into_py_any(py),
            _ => Err(usage(format!("a JSON number out of range: {n}"))),
        },
        Value::String(s) => s.into_py_any(py),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| json(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_py_any(py)
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, json(py, x)?)?;
            }
            d.into_py_any(py)
        }
    }
}

/// `x`'s JSON (as the command line prints it) as Python values.
fn json_of<T: serde::Serialize>(py: Python<'_>, x: &T) -> PyResult<Py<PyAny>> {
    let v = serde_json::to_value(x)
        .map_err(|e| native_error(symshard::Error::Internal(format!("cannot write JSON: {e}"))))?;
    json(py, &v)
}

/// The name an enum has in JSON (`all-reduce`, `tp`, `matmul`).
fn name_of<T: serde::Serialize>(x: &T) -> String {
    match serde_json::to_value(x) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => format!("{e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// A model as asked for: a name or path, or the text of a model file or of a Hugging Face
/// config; its symbol bindings and settings.
#[pyclass(frozen, module = "symshard._native")]
struct Model(symshard::Model);

#[pymethods]
impl Model {
    /// `kind` is `name` (a shipped or user model, or a path), `yaml` (a model file's text) or
    /// `hf-config` (a Hugging Face config's JSON text); `label` names a text in messages.
    /// `symbols` binds each name to an int, a Fraction, or a value as a model file writes it.
    #[new]
    #[pyo3(signature = (source, *, kind = "name", label = None, symbols = Vec::new(), attention = None, loss = None, train_metrics = 0, dropout = None, recompute_modules = None, rules = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        source: String,
        kind: &str,
        label: Option<String>,
        symbols: Vec<(String, Bound<'_, PyAny>)>,
        attention: Option<String>,
        loss: Option<String>,
        train_metrics: u32,
        dropout: Option<bool>,
        recompute_modules: Option<Vec<String>>,
        rules: Option<std::path::PathBuf>,
    ) -> PyResult<Model> {
        let label = label.unwrap_or_else(|| "<text>".into());
        let src = match kind {
            "name" => symshard::ModelSource::Named(source),
            "yaml" => symshard::ModelSource::Yaml {
                text: source,
                label,
            },
            "hf-config" => symshard::ModelSource::HfConfig {
                text: source,
                label,
                name: "config".into(),
            },
            k => {
                return Err(usage(format!(
                    "unknown model kind `{k}` (name, yaml, hf-config)"
                )))
            }
        };
        let attention = match attention.as_deref() {
            None => None,
            Some(a) => Some(symshard::model::AttentionMode::from_name(a).ok_or_else(|| {
                usage(format!(
                    "unknown attention `{a}` (eager, flash, flash-causal)"
                ))
            })?),
        };
        let loss = match loss.as_deref() {
            None | Some("fp32") => symshard::model::LossMode::Fp32,
            Some("fused") => symshard::model::LossMode::Fused,
            Some(l) => return Err(usage(format!("unknown loss `{l}` (fp32, fused)"))),
        };
        let recompute_modules = match recompute_modules {
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| symshard::model::RecomputeModule::parse(n).map_err(usage))
                    .collect::<PyResult<Vec<_>>>()?,
            ),
        };
        let mut m = symshard::Model::new(src)
            .spelled(symshard::Spelling::Python)
            .attention(attention)
            .loss(loss)
            .train_metrics(train_metrics)
            .dropout(dropout)
            .recompute_modules(recompute_modules)
            .rules(rules);
        for (name, v) in symbols {
            m = if let Ok(i) = v.extract::<num_bigint::BigInt>() {
                m.set(name, Rational::from_integer(i))
            } else if let Ok(r) = v.extract::<Rational>() {
                m.set(name, r)
            } else {
                m.set_text(format!("{name}={}", v.str()?))
            };
        }
        Ok(Model(m))
    }
}

/// A strategy: a strategy file or a knob string (`dp=8,tp=8,mbs=1,sp`), and knobs that
/// override it.
#[pyclass(frozen, module = "symshard._native")]
struct Strategy(symshard::Strategy);

#[pymethods]
impl Strategy {
    #[new]
    #[pyo3(signature = (text = None, *, dp = None, tp = None, pp = None, ep = None, cp = None, micro_batch_size = None, microbatches = None, schedule = None, chunks = None, sequence_parallel = false, recompute = None, zero = None, precision = None, tp_comm_overlap = false, overlap_param_gather = false, no_overlap_grad_reduce = false, fp8_params = false, fp8_dispatch = false, node_dispatch = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        text: Option<String>,
        dp: Option<u64>,
        tp: Option<u64>,
        pp: Option<u64>,
        ep: Option<u64>,
        cp: Option<u64>,
        micro_batch_size: Option<u64>,
        microbatches: Option<u64>,
        schedule: Option<String>,
        chunks: Option<u64>,
        sequence_parallel: bool,
        recompute: Option<String>,
        zero: Option<u8>,
        precision: Option<String>,
        tp_comm_overlap: bool,
        overlap_param_gather: bool,
        no_overlap_grad_reduce: bool,
        fp8_params: bool,
        fp8_dispatch: bool,
        node_dispatch: bool,
    ) -> PyResult<Strategy> {
        use symshard::strategy::{Precision, Recompute, Schedule};
        let schedule_name = schedule.as_deref();
        let knobs = symshard::Strategy {
            file: None,
            dp,
            tp,
            pp,
            micro_batch_size,
            microbatches,
            schedule: match schedule_name {
                None | Some("none") => None,
                Some(s) => Some(Schedule::from_name(s).ok_or_else(|| {
                    usage(format!(
                        "unknown schedule `{s}` (gpipe, 1f1b, interleaved-1f1b; none when pp is 1)"
                    ))
                })?),
            },
            no_pipeline: schedule_name == Some("none"),
            chunks,
            sequence_parallel,
            recompute: match recompute.as_deref() {
                None => None,
                Some(s) => Some(Recompute::from_name(s).ok_or_else(|| {
                    usage(format!(
                        "unknown recomputation `{s}` (none, selective, full)"
                    ))
                })?),
            },
            zero,
            ep,
            cp,
            tp_comm_overlap,
            overlap_param_gather,
            no_overlap_grad_reduce,
            precision: match precision.as_deref() {
                None => None,
                Some(s) => Some(Precision::from_name(s).ok_or_else(|| {
                    usage(format!("unknown precision `{s}` ({})", Precision::NAMES))
                })?),
            },
            account_for_embedding_in_pipeline_split: false,
            account_for_loss_in_pipeline_split: false,
            fp8_params,
            fp8_dispatch,
            node_dispatch,
        };
        let Some(text) = text else {
            return Ok(Strategy(knobs));
        };
        let path = std::path::Path::new(&text);
        let file = path.exists() || text.ends_with(".yaml") || text.ends_with(".yml");
        let base = if text.contains('=') && !file {
            symshard::Strategy::from_knobs(&text, "strategy").map_err(native_error)?
        } else {
            symshard::Strategy::from_file(path)
        };
        Ok(Strategy(base.overlaid_by(&knobs)))
    }
}

/// A machine: a calibration table (shipped name or file; default: the reference machine),
/// what-if edits, a stack profile, devices per node and memory per device (bytes, or text with
/// a unit such as `80GB`).
#[pyclass(frozen, module = "symshard._native")]
struct Machine(symshard::Machine);

#[pymethods]
impl Machine {
    #[new]
    #[pyo3(signature = (calib = None, *, what_if = None, stack = None, gpus_per_node = None, memory = None, headroom = None))]
    fn new(
        calib: Option<String>,
        what_if: Option<String>,
        stack: Option<String>,
        gpus_per_node: Option<u64>,
        memory: Option<Bound<'_, PyAny>>,
        headroom: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Machine> {
        let mut m = match &calib {
            Some(c) => symshard::Machine::named(c),
            None => symshard::Machine::reference(),
        }
        .map_err(native_error)?
        .spelled(symshard::Spelling::Python);
        if let Some(w) = &what_if {
            m = m.with_what_if(w).map_err(native_error)?;
        }
        if let Some(s) = &stack {
            m = m.with_stack(s).map_err(native_error)?;
        }
        if let Some(g) = gpus_per_node {
            m = m.with_gpus_per_node(g).map_err(native_error)?;
        }
        if let Some(b) = memory {
            let bytes = if let Ok(i) = b.extract::<num_bigint::BigInt>() {
                Rational::from_integer(i)
            } else {
                let text: String = b.str()?.extract()?;
                symshard::search::steer::parse_memory(&text)
                    .map_err(|e| usage(format!("memory: {e}")))?
            };
            m = m.with_memory(bytes);
        }
        if let Some(h) = &headroom {
            m = m.with_headroom(headroom_of(h)?);
        }
        Ok(Machine(m))
    }

    /// Bytes a strategy may fill on one device: the memory less the headroom (10 % of the
    /// table's capacity by default; a memory given is all usable unless a headroom is given).
    #[getter]
    fn usable_memory(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        exact(py, &self.0.usable_memory().map_err(native_error)?)
    }

    /// The calibration table's name.
    #[getter]
    fn calibration(&self) -> String {
        self.0.calibration().name.clone()
    }

    /// Devices per node.
    #[getter]
    fn gpus_per_node(&self) -> u64 {
        self.0.gpus_per_node()
    }

    /// Bytes of memory per device.
    #[getter]
    fn memory(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        exact(py, &self.0.memory())
    }
}

// ---------------------------------------------------------------------------------------------
// Results

/// Memory per device, in bytes.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Memory {
    params: Py<PyAny>,
    grads: Py<PyAny>,
    optimizer: Py<PyAny>,
    activations: Py<PyAny>,
    total: Py<PyAny>,
}

impl Memory {
    fn of(py: Python<'_>, m: &symshard::parallel::Memory) -> PyResult<Py<Memory>> {
        Py::new(
            py,
            Memory {
                params: exact(py, &m.params)?,
                grads: exact(py, &m.grads)?,
                optimizer: exact(py, &m.optimizer)?,
                activations: exact(py, &m.activations)?,
                total: exact(py, &m.total)?,
            },
        )
    }
}

/// One collective the busiest device runs.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Collective {
    collective: String,
    axis: String,
    tier: String,
    bytes: Py<PyAny>,
    count: u64,
    op: String,
    tensor: String,
}

/// One pipeline stage.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Stage {
    stage: u64,
    items: Vec<(String, u64)>,
    flops: Py<PyAny>,
    hbm_cost: Py<PyAny>,
    kernel_cost: Py<PyAny>,
    memory: Py<Memory>,
}

/// The busiest device's cost under a strategy.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct DeviceCost {
    strategy: String,
    flops: Py<PyAny>,
    comm: Vec<Py<Collective>>,
    p2p_bytes: Py<PyAny>,
    grad_sum_bytes: Py<PyAny>,
    memory: Py<Memory>,
    feasible: bool,
    reason: Option<String>,
    stages: Vec<Py<Stage>>,
    per_op: Option<Vec<Py<PyAny>>>,
}

/// What `cost` finds; `raw` is `symshard cost --format json`'s document.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Cost {
    model: String,
    assumed_sizes: Py<PyAny>,
    overrides: Py<PyAny>,
    settings: BTreeMap<String, String>,
    symbols: Py<PyAny>,
    params: Py<PyAny>,
    flops: Py<PyAny>,
    activations: Py<PyAny>,
    per_op: Option<Vec<Py<PyAny>>>,
    per_device: Option<Py<DeviceCost>>,
    warnings: Vec<String>,
    raw: Py<PyAny>,
}

fn op_row(py: Python<'_>, o: &symshard::OpCost) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item("name", &o.name)?;
    d.set_item("rule", &o.rule)?;
    d.set_item("repeat", quantity(py, &o.repeat)?)?;
    d.set_item("params", quantity(py, &o.params)?)?;
    d.set_item("forward", quantity(py, &o.forward)?)?;
    d.set_item("backward", quantity(py, &o.backward)?)?;
    d.set_item("class", name_of(&o.class))?;
    d.set_item("activations", quantity(py, &o.activations)?)?;
    d.into_py_any(py)
}

fn device_op_row(py: Python<'_>, o: &symshard::DeviceOp) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item("block", &o.block)?;
    d.set_item("name", &o.name)?;
    d.set_item("dp_split", &o.dp_split)?;
    d.set_item("tp_split", &o.tp_split)?;
    d.set_item("forward", exact(py, &o.forward)?)?;
    d.set_item("backward", exact(py, &o.backward)?)?;
    d.set_item("params", exact(py, &o.params)?)?;
    d.set_item("saved", exact(py, &o.saved)?)?;
    d.into_py_any(py)
}

impl DeviceCost {
    fn of(py: Python<'_>, d: &symshard::DeviceCost) -> PyResult<Py<DeviceCost>> {
        let comm = d
            .comm
            .iter()
            .map(|c| {
                Py::new(
                    py,
                    Collective {
                        collective: name_of(&c.collective),
                        axis: name_of(&c.axis),
                        tier: name_of(&c.tier),
                        bytes: exact(py, &c.bytes)?,
                        count: c.count,
                        op: c.op.clone(),
                        tensor: c.tensor.clone(),
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let stages = d
            .stages
            .iter()
            .map(|s| {
                Py::new(
                    py,
                    Stage {
                        stage: s.stage,
                        items: s.items.clone(),
                        flops: exact(py, &s.flops)?,
                        hbm_cost: exact(py, &s.hbm_cost)?,
                        kernel_cost: exact(py, &s.kernel_cost)?,
                        memory: Memory::of(py, &s.memory)?,
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let per_op = match &d.per_op {
            Some(rows) => Some(
                rows.iter()
                    .map(|o| device_op_row(py, o))
                    .collect::<PyResult<Vec<_>>>()?,
            ),
            None => None,
        };
        Py::new(
            py,
            DeviceCost {
                strategy: d.strategy.clone(),
                flops: exact(py, &d.flops)?,
                comm,
                p2p_bytes: exact(py, &d.p2p_bytes)?,
                grad_sum_bytes: exact(py, &d.grad_sum_bytes)?,
                memory: Memory::of(py, &d.memory)?,
                feasible: d.feasible,
                reason: d.reason.as_ref().map(|r| r.to_string()),
                stages,
                per_op,
            },
        )
    }
}

fn pass(py: Python<'_>, p: &symshard::Pass) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item("matmul", quantity(py, &p.matmul)?)?;
    d.set_item("other", quantity(py, &p.other)?)?;
    d.into_py_any(py)
}

impl Cost {
    fn of(py: Python<'_>, c: &symshard::Cost) -> PyResult<Cost> {
        let flops = PyDict::new(py);
        flops.set_item("forward", pass(py, &c.flops.forward)?)?;
        flops.set_item("backward", pass(py, &c.flops.backward)?)?;
        let per_op = match &c.per_op {
            Some(rows) => Some(
                rows.iter()
                    .map(|o| op_row(py, o))
                    .collect::<PyResult<Vec<_>>>()?,
            ),
            None => None,
        };
        Ok(Cost {
            model: c.model.clone(),
            assumed_sizes: exact_map(py, &c.assumed_sizes)?,
            overrides: exact_map(py, &c.overrides)?,
            settings: c.settings.clone(),
            symbols: exact_map(py, &c.symbols)?,
            params: quantity(py, &c.params)?,
            flops: flops.into_py_any(py)?,
            activations: quantity(py, &c.activations)?,
            per_op,
            per_device: match &c.per_device {
                Some(d) => Some(DeviceCost::of(py, d)?),
                None => None,
            },
            warnings: c.warnings.clone(),
            raw: json_of(py, c)?,
        })
    }
}

/// Parameters, FLOPs and activation memory of `model`; with `strategy` the busiest device's
/// share on `machine` (default: the reference machine).
#[pyfunction]
#[pyo3(signature = (model, *, strategy = None, machine = None, symbolic = false, per_op = false))]
fn cost(
    py: Python<'_>,
    model: &Model,
    strategy: Option<&Strategy>,
    machine: Option<&Machine>,
    symbolic: bool,
    per_op: bool,
) -> PyResult<Cost> {
    let req = symshard::CostRequest {
        model: model.0.clone(),
        strategy: strategy.map(|s| s.0.clone()),
        machine: machine.map(|m| m.0.clone()),
        symbolic,
        per_op,
    };
    let c = py.detach(|| symshard::cost(&req)).map_err(native_error)?;
    Cost::of(py, &c)
}

/// One training step simulated; `raw` is `symshard timeline --format json`'s document.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Timeline {
    model: String,
    strategy: String,
    settings: BTreeMap<String, String>,
    calibration: String,
    what_if: Option<String>,
    stack_profile: Option<String>,
    device_count: u64,
    iteration_seconds: f64,
    samples_per_second: f64,
    tokens_per_second: f64,
    model_tflops_per_device: f64,
    mfu: f64,
    bubble_fraction: f64,
    slowest_device_pace: f64,
    memory_limit: f64,
    fits: Option<bool>,
    memory_per_device: Option<f64>,
    representative: String,
    devices: Py<PyAny>,
    svg: Option<String>,
    warnings: Vec<String>,
    raw: Py<PyAny>,
}

/// Simulates one training step of `model` under `strategy` on `machine`; with `svg` the
/// result carries the Gantt chart as SVG text.
#[pyfunction]
#[pyo3(signature = (model, strategy, machine, *, svg = false))]
fn timeline(
    py: Python<'_>,
    model: &Model,
    strategy: &Strategy,
    machine: &Machine,
    svg: bool,
) -> PyResult<Timeline> {
    let req = symshard::TimelineRequest {
        input: symshard::TimelineInput::Model {
            model: model.0.clone(),
            strategy: strategy.0.clone(),
        },
        machine: machine.0.clone(),
        svg,
    };
    let t = py
        .detach(|| symshard::timeline(&req))
        .map_err(native_error)?;
    let s = &t.summary;
    Ok(Timeline {
        model: s.model.clone(),
        strategy: s.strategy.clone(),
        settings: s.settings.clone(),
        calibration: s.calibration.clone(),
        what_if: s.what_if.clone(),
        stack_profile: s.stack_profile.clone(),
        device_count: s.device_count,
        iteration_seconds: s.iteration_seconds,
        samples_per_second: s.samples_per_second,
        tokens_per_second: s.tokens_per_second,
        model_tflops_per_device: s.model_tflops_per_device,
        mfu: s.mfu,
        bubble_fraction: s.bubble_fraction,
        slowest_device_pace: s.slowest_device_pace,
        memory_limit: s.memory_limit,
        fits: s.fits,
        memory_per_device: s.memory_per_device,
        representative: s.representative.clone(),
        devices: json_of(py, &s.devices)?,
        svg: t.svg.clone(),
        warnings: t.warnings.clone(),
        raw: json_of(py, s)?,
    })
}

/// The relative cost of a ranked row and its parts, in FLOP-equivalents.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct RelativeCost {
    compute: Py<PyAny>,
    kernels: Py<PyAny>,
    comm_intra: Py<PyAny>,
    comm_inter: Py<PyAny>,
    bubble: Py<PyAny>,
    hidden: Py<PyAny>,
    flop_part: Py<PyAny>,
    byte_part: Py<PyAny>,
    total: Py<PyAny>,
}

impl RelativeCost {
    fn of(py: Python<'_>, r: &symshard::parallel::RelativeCost) -> PyResult<Py<RelativeCost>> {
        Py::new(
            py,
            RelativeCost {
                compute: exact(py, &r.compute)?,
                kernels: exact(py, &r.kernels)?,
                comm_intra: exact(py, &r.comm_intra)?,
                comm_inter: exact(py, &r.comm_inter)?,
                bubble: exact(py, &r.bubble)?,
                hidden: exact(py, &r.hidden)?,
                flop_part: exact(py, &r.flop_part)?,
                byte_part: exact(py, &r.byte_part)?,
                total: exact(py, &r.total)?,
            },
        )
    }
}

/// One ranked strategy; `knobs` is the row as a `Strategy` for `cost` and `timeline`.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct RankRow {
    rank: usize,
    dp: u64,
    tp: u64,
    pp: u64,
    micro_batch_size: Option<u64>,
    microbatches: u64,
    schedule: String,
    chunks: u64,
    sequence_parallel: bool,
    recompute: String,
    zero: u8,
    ep: u64,
    cp: u64,
    overlap: BTreeMap<String, bool>,
    precision: String,
    fp8_params: bool,
    fp8_dispatch: bool,
    node_dispatch: bool,
    relative_cost: Py<PyAny>,
    relative: Py<RelativeCost>,
    memory_per_device: Py<PyAny>,
    memory: Py<Memory>,
    feasible: bool,
    reason: Option<String>,
    iteration_seconds: Option<f64>,
    knobs_that_do_not_matter: BTreeMap<String, Vec<String>>,
    strategy: String,
    stack: String,
    tie: Option<String>,
    layout: String,
    placements: Option<BTreeMap<String, String>>,
    knobs: Py<Strategy>,
}

impl RankRow {
    fn of(py: Python<'_>, r: &symshard::RankRow) -> PyResult<Py<RankRow>> {
        let overlap = [
            ("tp-comm", r.overlap.tp_comm),
            ("grad-reduce", r.overlap.grad_reduce),
            ("param-gather", r.overlap.param_gather),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let row = RankRow {
            rank: r.rank,
            dp: r.dp,
            tp: r.tp,
            pp: r.pp,
            micro_batch_size: r.micro_batch_size,
            microbatches: r.microbatches,
            schedule: r.schedule.clone(),
            chunks: r.chunks,
            sequence_parallel: r.sequence_parallel,
            recompute: r.recompute.clone(),
            zero: r.zero,
            ep: r.ep,
            cp: r.cp,
            overlap,
            precision: r.precision.to_string(),
            fp8_params: r.fp8_params,
            fp8_dispatch: r.fp8_dispatch,
            node_dispatch: r.node_dispatch,
            relative_cost: exact(py, &r.relative_cost)?,
            relative: RelativeCost::of(py, &r.relative)?,
            memory_per_device: exact(py, &r.memory_per_device)?,
            memory: Memory::of(py, &r.memory)?,
            feasible: r.feasible,
            reason: r.reason.as_ref().map(|x| x.to_string()),
            iteration_seconds: r.iteration_seconds,
            knobs_that_do_not_matter: r.knobs_that_do_not_matter.clone(),
            strategy: r.strategy.clone(),
            stack: name_of(&r.stack),
            tie: r.tie.clone(),
            layout: name_of(&r.layout),
            placements: r.placements.clone(),
            knobs: Py::new(py, Strategy(r.knobs.clone()))?,
        };
        Py::new(py, row)
    }
}

/// The best strategy on part of each NVLink domain, where the machine's domain is not a
/// power of two (`symshard::PartialDomains`).
#[pyclass(frozen, get_all, module = "symshard._native")]
struct PartialDomains {
    domain_size: u64,
    gpus_per_domain: u64,
    domains: u64,
    full_domains: u64,
    best: Py<RankRow>,
    wins: bool,
    change: Option<f64>,
    straddling: Vec<String>,
}

impl PartialDomains {
    fn of(py: Python<'_>, p: &symshard::PartialDomains) -> PyResult<Py<PartialDomains>> {
        let out = PartialDomains {
            domain_size: p.domain_size,
            gpus_per_domain: p.gpus_per_domain,
            domains: p.domains,
            full_domains: p.full_domains,
            best: RankRow::of(py, &p.best)?,
            wins: p.wins,
            change: p.change,
            straddling: p.straddling.clone(),
        };
        Py::new(py, out)
    }
}

/// What `rank` finds; `raw` is `symshard rank --format json`'s document and `warnings` the
/// warnings and notes the command line prints to stderr.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Ranking {
    model: String,
    devices: u64,
    gpus_per_node: u64,
    calibration: String,
    stack_profile: Option<String>,
    stack_supports: Option<String>,
    memory_limit: Py<PyAny>,
    by_seconds: bool,
    rows: Vec<Py<RankRow>>,
    pareto: Vec<Py<RankRow>>,
    nothing_fits: Option<String>,
    evaluated: usize,
    feasible: usize,
    rejected: BTreeMap<String, usize>,
    rejected_by_kind: BTreeMap<String, (usize, String)>,
    simulated: usize,
    balance_range: Option<(Py<PyAny>, Option<Py<PyAny>>)>,
    search_seconds: f64,
    partial_domains: Option<Py<PartialDomains>>,
    borrowed_curves: Vec<String>,
    warnings: Vec<String>,
    raw: Py<PyAny>,
}

fn rows(py: Python<'_>, rows: &[symshard::RankRow]) -> PyResult<Vec<Py<RankRow>>> {
    rows.iter().map(|r| RankRow::of(py, r)).collect()
}

impl Ranking {
    fn of(py: Python<'_>, r: &symshard::Ranked) -> PyResult<Ranking> {
        let doc = r.json().map_err(native_error)?;
        let x = &r.result;
        let balance_range = match &x.balance_range {
            Some((lo, hi)) => Some((
                exact(py, lo)?,
                match hi {
                    Some(h) => Some(exact(py, h)?),
                    None => None,
                },
            )),
            None => None,
        };
        Ok(Ranking {
            model: x.model.clone(),
            devices: x.devices,
            gpus_per_node: x.gpus_per_node,
            calibration: x.calibration.clone(),
            stack_profile: x.stack_profile.clone(),
            stack_supports: x.stack_supports.as_ref().map(|s| s.runs.clone()),
            memory_limit: exact(py, &x.memory_limit)?,
            by_seconds: x.by_seconds,
            rows: rows(py, &x.rows)?,
            pareto: rows(py, &x.pareto)?,
            nothing_fits: x.nothing_fits.clone(),
            evaluated: x.evaluated,
            feasible: x.feasible,
            rejected: x.rejected.by_message(),
            rejected_by_kind: x
                .rejected
                .by_kind()
                .into_iter()
                .map(|(k, r)| (k.to_string(), (r.count, r.example().to_string())))
                .collect(),
            simulated: x.simulated,
            balance_range,
            search_seconds: x.search_seconds,
            borrowed_curves: x.borrowed_curves.clone(),
            partial_domains: match &x.partial_domains {
                Some(p) => Some(PartialDomains::of(py, p)?),
                None => None,
            },
            warnings: x.warnings.clone(),
            raw: json(py, &doc)?,
        })
    }
}

/// A name among `names` (errors list them).
fn one_of<T: Copy>(what: &str, value: &str, names: &[(&str, T)]) -> PyResult<T> {
    names
        .iter()
        .find(|(n, _)| *n == value)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let known: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            usage(format!("unknown {what} `{value}` ({})", known.join(", ")))
        })
}

/// The search's options that `rank` and `report` share.
struct Search<'a> {
    machine: Option<&'a Machine>,
    by_seconds: Option<bool>,
    fix: Option<String>,
    max: Option<String>,
    no_sp: bool,
    headroom: Option<symshard::Headroom>,
    max_microbatches: Option<u64>,
    max_chunks: Option<u64>,
    layouts: Option<String>,
}

impl Search<'_> {
    /// The options for `devices` devices (checked when built).
    fn builder(&self, devices: u64) -> PyResult<symshard::RankOptionsBuilder> {
        use symshard::Layouts;
        let mut b = symshard::RankOptions::builder(devices).spelled(symshard::Spelling::Python);
        if let Some(m) = self.machine {
            b = b.machine(m.0.clone());
        }
        if let Some(s) = self.by_seconds {
            b = b.by_seconds(s);
        }
        if let Some(f) = &self.fix {
            b = b.fix_text(f);
        }
        if self.no_sp {
            b = b.sequence_parallel(false);
        }
        if let Some(m) = &self.max {
            b = b.max_text(m);
        }
        if let Some(h) = &self.headroom {
            b = b.headroom(h.clone());
        }
        if let Some(n) = self.max_microbatches {
            b = b.max_microbatches(n);
        }
        if let Some(n) = self.max_chunks {
            b = b.max_chunks(n);
        }
        if let Some(l) = &self.layouts {
            let named = [
                ("annotated", Layouts::Annotated),
                ("auto", Layouts::Auto),
                ("both", Layouts::Both),
            ];
            b = b.layouts(one_of("layouts", l, &named)?);
        }
        Ok(b)
    }
}

/// Writes `symshard report`'s HTML file of `model` (named `name` in errors) ranked on `devices`
/// devices to `output`, its header naming `command`; returns the bytes written.
#[pyfunction]
#[pyo3(signature = (model, name, devices, output, command, *, machine = None, by_seconds = None, top = 20, fix = None, max = None, no_sp = false, headroom = None, max_microbatches = None, max_chunks = None, layouts = None))]
#[allow(clippy::too_many_arguments)]
fn report(
    py: Python<'_>,
    model: &Model,
    name: String,
    devices: u64,
    output: std::path::PathBuf,
    command: String,
    machine: Option<&Machine>,
    by_seconds: Option<bool>,
    top: usize,
    fix: Option<String>,
    max: Option<String>,
    no_sp: bool,
    headroom: Option<Bound<'_, PyAny>>,
    max_microbatches: Option<u64>,
    max_chunks: Option<u64>,
    layouts: Option<String>,
) -> PyResult<(usize, Vec<String>)> {
    let search = Search {
        machine,
        by_seconds,
        fix,
        max,
        no_sp,
        headroom: headroom.as_ref().map(headroom_of).transpose()?,
        max_microbatches,
        max_chunks,
        layouts,
    };
    let opts = search
        .builder(devices)?
        .top(top)
        .pareto(true)
        .build()
        .map_err(native_error)?;
    let m = model.0.clone();
    let (out, warnings) = py.detach(|| {
        symshard::diag::capture_notes(|| {
            symshard::write_report(&m, &name, &opts, &command, &output)
        })
    });
    Ok((out.map_err(native_error)?, warnings))
}

/// Ranks the strategies of `model` on `devices` devices of `machine` (default: the reference
/// machine, by relative cost; a machine given ranks by simulated seconds unless `by_seconds`
/// says otherwise). `fix` and `max` are `rank --fix`/`--max` items; `emit` and `why` are the
/// command line's `--emit` and `--why`.
#[pyfunction]
#[pyo3(signature = (model, devices, *, machine = None, by_seconds = None, top = 10, fix = None, max = None, no_sp = false, headroom = None, max_microbatches = None, max_chunks = None, layouts = None, pareto = false, emit = None, why = false))]
#[allow(clippy::too_many_arguments)]
fn rank(
    py: Python<'_>,
    model: &Model,
    devices: u64,
    machine: Option<&Machine>,
    by_seconds: Option<bool>,
    top: usize,
    fix: Option<String>,
    max: Option<String>,
    no_sp: bool,
    headroom: Option<Bound<'_, PyAny>>,
    max_microbatches: Option<u64>,
    max_chunks: Option<u64>,
    layouts: Option<String>,
    pareto: bool,
    emit: Option<String>,
    why: bool,
) -> PyResult<Ranking> {
    use symshard::emit::Emit;
    let search = Search {
        machine,
        by_seconds,
        fix,
        max,
        no_sp,
        headroom: headroom.as_ref().map(headroom_of).transpose()?,
        max_microbatches,
        max_chunks,
        layouts,
    };
    let b = search.builder(devices)?.top(top).pareto(pareto);
    let emit = match &emit {
        Some(e) => {
            let named = [
                ("megatron", Emit::Megatron),
                ("torchtitan", Emit::Torchtitan),
                ("json", Emit::Json),
            ];
            Some(one_of("emit", e, &named)?)
        }
        None => None,
    };
    let opts = b.build().map_err(native_error)?;
    let m = model.0.clone();
    let r = py
        .detach(|| symshard::rank_with(&m, &opts, emit, why))
        .map_err(native_error)?;
    Ranking::of(py, &r)
}

/// One row of a comparison: A's value, B's and B − A, exact, with formulas where they exist.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Component {
    group: String,
    name: String,
    a: Py<PyAny>,
    b: Py<PyAny>,
    difference: Py<PyAny>,
    formula_a: Option<String>,
    formula_b: Option<String>,
    formula_difference: Option<String>,
}

/// Two strategies side by side; `raw` is `symshard compare --format json`'s document.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Comparison {
    model: String,
    a: String,
    b: String,
    components: Vec<Py<Component>>,
    cheaper: String,
    wins_on: Vec<(String, Py<PyAny>)>,
    loses_on: Vec<(String, Py<PyAny>)>,
    warnings: Vec<String>,
    raw: Py<PyAny>,
}

fn parts(py: Python<'_>, v: &[symshard::Part]) -> PyResult<Vec<(String, Py<PyAny>)>> {
    v.iter()
        .map(|p| Ok((p.part.clone(), exact(py, &p.amount)?)))
        .collect()
}

impl Comparison {
    fn of(py: Python<'_>, c: &symshard::Comparison, warnings: Vec<String>) -> PyResult<Self> {
        let components = c
            .components
            .iter()
            .map(|x| {
                let component = Component {
                    group: x.group.to_string(),
                    name: x.name.clone(),
                    a: exact(py, &x.a)?,
                    b: exact(py, &x.b)?,
                    difference: exact(py, &x.difference)?,
                    formula_a: x.formula_a.as_ref().map(ToString::to_string),
                    formula_b: x.formula_b.as_ref().map(ToString::to_string),
                    formula_difference: x.formula_difference.as_ref().map(ToString::to_string),
                };
                Py::new(py, component)
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Comparison {
            model: c.model.clone(),
            a: c.a.strategy.clone(),
            b: c.b.strategy.clone(),
            components,
            cheaper: c.cheaper.clone(),
            wins_on: parts(py, &c.wins_on)?,
            loses_on: parts(py, &c.loses_on)?,
            warnings,
            raw: json_of(py, c)?,
        })
    }
}

/// Strategies `a` and `b` (each a strategy file or a knob string, named in errors as the
/// command line names them) of `model` side by side on `machine` (default: the reference
/// machine); with `seconds` each step simulated, with `plateau` every kernel priced at the
/// matmul plateau.
#[pyfunction]
#[pyo3(signature = (model, a, b, *, machine = None, seconds = false, plateau = false))]
fn compare(
    py: Python<'_>,
    model: &Model,
    a: String,
    b: String,
    machine: Option<&Machine>,
    seconds: bool,
    plateau: bool,
) -> PyResult<Comparison> {
    let a = symshard::CompareSide::parse(&a, "strategy A").map_err(native_error)?;
    let b = symshard::CompareSide::parse(&b, "strategy B").map_err(native_error)?;
    let req = symshard::CompareRequest {
        model: model.0.clone(),
        a,
        b,
        machine: machine.map(|m| m.0.clone()),
        seconds,
        plateau,
    };
    let (c, warnings) = py.detach(|| symshard::diag::capture_notes(|| symshard::compare(&req)));
    let c = c.map_err(native_error)?;
    Comparison::of(py, &c, warnings)
}

/// Where strategy A stops beating strategy B as one symbol grows; `raw` is
/// `symshard crossover --format json`'s document.
#[pyclass(frozen, get_all, module = "symshard._native")]
struct Crossover {
    model: String,
    symbol: String,
    start: Py<PyAny>,
    stop: Py<PyAny>,
    step: Py<PyAny>,
    step_reason: String,
    a: String,
    b: String,
    calibration: String,
    /// `(from, to, winner)`: `"A"`, `"B"`, `"equal"` or `"invalid"`, in order.
    intervals: Vec<(Py<PyAny>, Py<PyAny>, String)>,
    /// `(value, a, b)`: both relative costs at the ends of the intervals.
    boundaries: Vec<(Py<PyAny>, Py<PyAny>, Py<PyAny>)>,
    piecewise: bool,
    raw: Py<PyAny>,
}

impl Crossover {
    fn of(py: Python<'_>, c: &symshard::CrossoverResult) -> PyResult<Self> {
        use symshard::search::versus::Winner;
        let intervals = c
            .result
            .intervals
            .iter()
            .map(|i| {
                let winner = match i.winner {
                    Winner::A => "A",
                    Winner::B => "B",
                    Winner::Equal => "equal",
                    Winner::Invalid { .. } => "invalid",
                };
                Ok((exact(py, &i.from)?, exact(py, &i.to)?, winner.to_string()))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let boundaries = c
            .boundaries
            .iter()
            .map(|b| Ok((exact(py, &b.value)?, exact(py, &b.a)?, exact(py, &b.b)?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Crossover {
            model: c.model.clone(),
            symbol: c.symbol.clone(),
            start: exact(py, &c.from)?,
            stop: exact(py, &c.to)?,
            step: exact(py, &c.step)?,
            step_reason: c.step_reason.clone(),
            a: c.a.clone(),
            b: c.b.clone(),
            calibration: c.calibration.clone(),
            intervals,
            boundaries,
            piecewise: c.piecewise,
            raw: json_of(py, c)?,
        })
    }
}

/// Where strategy `a` stops beating strategy `b` (each a strategy file or a knob string) of
/// `model` as `symbol` grows over `start, start + step, … stop` (each chosen as the command
/// line chooses it where not given), by relative cost on `machine` (default: the reference
/// machine).
#[pyfunction]
#[pyo3(signature = (model, a, b, symbol, *, start = None, stop = None, step = None, machine = None))]
#[allow(clippy::too_many_arguments)]
fn crossover(
    py: Python<'_>,
    model: &Model,
    a: String,
    b: String,
    symbol: String,
    start: Option<u64>,
    stop: Option<u64>,
    step: Option<u64>,
    machine: Option<&Machine>,
) -> PyResult<Crossover> {
    let a = symshard::CompareSide::parse(&a, "strategy A").map_err(native_error)?;
    let b = symshard::CompareSide::parse(&b, "strategy B").map_err(native_error)?;
    let machine = match machine {
        Some(m) => m.0.clone(),
        None => symshard::Machine::reference()
            .map_err(native_error)?
            .spelled(symshard::Spelling::Python),
    };
    let req = symshard::CrossoverRequest {
        model: model.0.clone(),
        spec: symshard::CrossoverSpec {
            a,
            b,
            symbol,
            from: start,
            to: stop,
            step,
            machine,
        },
    };
    let c = py
        .detach(|| symshard::crossover(&req))
        .map_err(native_error)?;
    Crossover::of(py, &c)
}

/// The models a name resolves to (the user's, then the shipped ones), each
/// `(name, family, source, params, doc)`: `params` a Python `int`, or `None` where it cannot
/// be counted.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn models(
    py: Python<'_>,
) -> PyResult<Vec<(String, Option<String>, String, Option<Py<PyAny>>, String)>> {
    let rows = py.detach(symshard::models).map_err(native_error)?;
    rows.into_iter()
        .map(|m| {
            let params = m.params.map(|p| p.into_py_any(py)).transpose()?;
            Ok((m.name, m.family, m.source, params, m.doc))
        })
        .collect()
}

/// The shipped machines: `(name, device, peak_flops, memory_bandwidth, memory_capacity,
/// gpus_per_node, intra_bandwidth, inter_bandwidth, inter_algorithm, doc)`, the numbers exact.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn machines(
    py: Python<'_>,
) -> PyResult<
    Vec<(
        String,
        String,
        Py<PyAny>,
        Py<PyAny>,
        Py<PyAny>,
        u64,
        Py<PyAny>,
        Py<PyAny>,
        String,
        String,
    )>,
> {
    let rows = py.detach(symshard::machines).map_err(native_error)?;
    rows.into_iter()
        .map(|m| {
            Ok((
                m.name,
                m.device,
                exact_map(py, &m.peak_flops)?,
                exact(py, &m.memory_bandwidth)?,
                exact(py, &m.memory_capacity)?,
                m.gpus_per_node,
                exact(py, &m.intra_bandwidth)?,
                exact(py, &m.inter_bandwidth)?,
                m.inter_algorithm,
                m.doc,
            ))
        })
        .collect()
}

/// Every number of a machine's table with its source: `(path, value, source)`.
#[pyfunction]
fn machine_sources(py: Python<'_>, name: String) -> PyResult<Vec<(String, String, String)>> {
    let (_, rows) = py
        .detach(|| symshard::machine_sources(&name))
        .map_err(native_error)?;
    Ok(rows
        .into_iter()
        .map(|r| (r.path, r.value, r.source))
        .collect())
}

/// An operator rule (a shipped name or a rule file; `rules`: a directory of rules loaded beside
/// the shipped ones) explained at `dtype_bytes` bytes per element: `(document, notes)`, the
/// document as `symshard explain --format json` writes it, the notes what loading `rules` said.
#[pyfunction]
#[pyo3(signature = (rule, *, rules = None, dtype_bytes = 2))]
fn explain(
    py: Python<'_>,
    rule: String,
    rules: Option<std::path::PathBuf>,
    dtype_bytes: u32,
) -> PyResult<(Py<PyAny>, Vec<String>)> {
    let e = py
        .detach(|| symshard::explain(&rule, rules.as_deref(), dtype_bytes))
        .map_err(native_error)?;
    Ok((json_of(py, &e)?, e.notes))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NativeError", m.py().get_type::<NativeError>())?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    // The search's defaults, so that the package states them as the library does.
    m.add(
        "DEFAULT_MAX_MICROBATCHES",
        symshard::DEFAULT_MAX_MICROBATCHES,
    )?;
    m.add("DEFAULT_MAX_CHUNKS", symshard::search::DEFAULT_MAX_CHUNKS)?;
    m.add_function(wrap_pyfunction!(cost, m)?)?;
    m.add_function(wrap_pyfunction!(timeline, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_points, m)?)?;
    m.add_class::<sweep::SweepRun>()?;
    m.add_class::<sweep::SweepResult>()?;
    m.add_class::<sweep::SweepRows>()?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(crossover, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(models, m)?)?;
    m.add_function(wrap_pyfunction!(machines, m)?)?;
    m.add_function(wrap_pyfunction!(machine_sources, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_class::<Model>()?;
    m.add_class::<Strategy>()?;
    m.add_class::<Machine>()?;
    m.add_class::<Cost>()?;
    m.add_class::<DeviceCost>()?;
    m.add_class::<Collective>()?;
    m.add_class::<Stage>()?;
    m.add_class::<Memory>()?;
    m.add_class::<Timeline>()?;
    m.add_class::<RelativeCost>()?;
    m.add_class::<RankRow>()?;
    m.add_class::<Ranking>()?;
    m.add_class::<PartialDomains>()?;
    m.add_class::<Component>()?;
    m.add_class::<Comparison>()?;
    m.add_class::<Crossover>()?;
    Ok(())
}
