//! ONNX graph → a model file with an explicit graph of shipped operator rules.
//!
//! Shapes come from the graph inputs (symbolic `dim_param`s become model symbols: the batch and
//! sequence names exporters use become `B` and `S`, the symbols symshard's layouts split), the
//! initializers, and propagation through every mapped operator and the shape computations
//! exporters write (`Shape`, `Gather`, `Unsqueeze`, `Concat`, `Slice`, … — [`super::onnx_infer`]),
//! so that a file without `value_info` imports the same; `value_info` only gives the shapes of
//! what the mapping cannot follow. Initializers used as weights become the operators' parameters,
//! and a second use of one initializer ties it to the first. Nodes no rule covers are listed by
//! operator type with a reason each, never dropped silently: an output of one whose shape
//! `value_info` gives becomes a graph input, so that the rest of the graph is still costed.

use super::onnx_map::{Emit, Mapper, Value};
use super::onnx_pb::{GraphProto, ModelProto};
use super::onnx_shape::{elem_type, float_dtype, int_dtype, tensor_shape, tensor_vals, Symbols};
use super::yaml_str;
use crate::diag::Source;
use crate::error::{Error, Result};
use crate::sym::Poly;
use prost::Message as _;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// Choices of an ONNX import.
#[derive(Debug, Clone, Default)]
pub struct OnnxOptions {
    /// The model's name (the file's stem when `None`).
    pub name: Option<String>,
    /// Sizes of symbolic dimensions, by ONNX `dim_param` or by model symbol (default 1).
    pub dims: BTreeMap<String, u64>,
}

/// Nodes of one operator type that were not mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmapped {
    /// The ONNX operator type.
    pub op_type: String,
    /// How many nodes.
    pub count: usize,
    /// Each node's name and why it was not mapped.
    pub nodes: Vec<(String, String)>,
}

/// An ONNX graph turned into a model file.
#[derive(Debug, Clone, Serialize)]
pub struct OnnxImport {
    /// The model's name.
    pub name: String,
    /// The model file's text.
    pub yaml: String,
    /// ONNX nodes in the graph.
    pub nodes: usize,
    /// Nodes mapped (to operators, or to nothing for views and constants).
    pub mapped: usize,
    /// Operators in the model file.
    pub operators: usize,
    /// Nodes not mapped, by operator type.
    pub unmapped: Vec<Unmapped>,
    /// Model symbols made from symbolic dimensions, with the ONNX name each stands for.
    pub symbols: Vec<(String, String)>,
}

fn invalid(file: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{}: not a valid ONNX model: {msg}", file.display()))
}

/// Decodes an ONNX file and checks that it holds a graph whose nodes read only tensors defined
/// before them.
pub fn decode(file: &Path, bytes: &[u8]) -> Result<ModelProto> {
    let model = ModelProto::decode(bytes).map_err(|e| invalid(file, e))?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| invalid(file, "it has no graph"))?;
    if model.ir_version.is_none() {
        return Err(invalid(file, "it has no ir_version"));
    }
    if graph.node.is_empty() {
        return Err(invalid(file, "its graph has no nodes"));
    }
    let mut defined: BTreeSet<&str> = graph
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .chain(graph.initializer.iter().filter_map(|t| t.name.as_deref()))
        .collect();
    for (i, n) in graph.node.iter().enumerate() {
        for t in n.input.iter().filter(|t| !t.is_empty()) {
            if !defined.contains(t.as_str()) {
                return Err(invalid(
                    file,
                    format!(
                        "node {i} (`{}`, {}) reads `{t}`, which no graph input, initializer or earlier node defines",
                        n.name(),
                        n.op_type()
                    ),
                ));
            }
        }
        defined.extend(n.output.iter().map(String::as_str));
    }
    Ok(model)
}

/// Reads and converts the ONNX file at `path`; `progress(done, total)` is told of each node.
pub fn import_onnx(
    path: &Path,
    opts: &OnnxOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<OnnxImport> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    import_onnx_bytes(path, &bytes, opts, progress)
}

/// The model file of an ONNX graph with default options, as a [`Source`] named after the file
/// (what [`crate::model::ModelLoader`] loads when given a `.onnx` path).
pub fn model_source_from_onnx(path: &Path) -> Result<Source> {
    let imported = import_onnx(path, &OnnxOptions::default(), &mut |_, _| {})?;
    Ok(Source::new(path, imported.yaml))
}

/// A graph input of the model file.
struct Input {
    name: String,
    dims: Vec<Poly>,
    dtype: Option<&'static str>,
    note: Option<String>,
}

/// Converts the bytes of an ONNX file; `file` names it in messages.
pub fn import_onnx_bytes(
    file: &Path,
    bytes: &[u8],
    opts: &OnnxOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<OnnxImport> {
    let model = decode(file, bytes)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| invalid(file, "no graph"))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .unwrap_or(1);
    let mut m = Mapper::default();
    m.opset = opset;
    m.taken.insert(BLOCK.to_string());
    let mut symbols = Symbols::default();
    let mut inputs = Vec::new();
    for t in &graph.initializer {
        let name = t.name.clone().unwrap_or_default();
        let v = match tensor_shape(t) {
            Some(shape) => Value::Const {
                shape,
                vals: tensor_vals(t),
                origin: Some(name.clone()),
            },
            None => Value::Unknown(format!("initializer `{name}` is empty")),
        };
        m.values.insert(name, v);
    }
    for vi in &graph.input {
        let onnx_name = vi.name.clone().unwrap_or_default();
        if m.values.contains_key(&onnx_name) {
            continue; // an initializer listed as an input (IR version < 4)
        }
        let v = match symbols.shape_of(vi.r#type.as_ref(), &onnx_name) {
            Some(dims) => {
                let name = m.alloc(&onnx_name);
                let dtype = elem_type(vi.r#type.as_ref()).and_then(int_dtype);
                inputs.push(Input {
                    name: name.clone(),
                    dims: dims.clone(),
                    dtype,
                    note: None,
                });
                Value::Act { name, shape: dims }
            }
            None => Value::Unknown(format!("graph input `{onnx_name}` has no tensor shape")),
        };
        m.values.insert(onnx_name, v);
    }
    let infos: BTreeMap<&str, _> = graph
        .value_info
        .iter()
        .chain(&graph.output)
        .filter_map(|v| Some((v.name.as_deref()?, v.r#type.as_ref())))
        .collect();
    // Tensors some node reads: only those of an unmapped node become graph inputs.
    let read: BTreeSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .collect();
    let mut unmapped: BTreeMap<String, Unmapped> = BTreeMap::new();
    let mut mapped = 0;
    let total = graph.node.len();
    for (i, node) in graph.node.iter().enumerate() {
        progress(i, total);
        let label = format!("ONNX {} `{}`", node.op_type(), node.name());
        m.begin();
        match m.node(node, &label) {
            Ok(()) => mapped += 1,
            Err(reason) => {
                m.rollback();
                let entry = unmapped
                    .entry(node.op_type().to_string())
                    .or_insert_with(|| Unmapped {
                        op_type: node.op_type().to_string(),
                        count: 0,
                        nodes: Vec::new(),
                    });
                entry.count += 1;
                entry.nodes.push((node.name().to_string(), reason));
                for out in node.output.iter().filter(|o| !o.is_empty()) {
                    let t = infos.get(out.as_str()).copied().flatten();
                    let t = t.filter(|_| read.contains(out.as_str()));
                    let v = match symbols.shape_of(t, out) {
                        Some(dims) => {
                            let name = m.alloc(out);
                            inputs.push(Input {
                                name: name.clone(),
                                dims: dims.clone(),
                                dtype: elem_type(t).and_then(int_dtype),
                                note: Some(format!("output of unmapped {label}")),
                            });
                            Value::Act { name, shape: dims }
                        }
                        None => {
                            Value::Unknown(format!("it reads `{out}`, output of unmapped {label}"))
                        }
                    };
                    m.values.insert(out.clone(), v);
                }
            }
        }
    }
    progress(total, total);
    let unmapped: Vec<Unmapped> = unmapped.into_values().collect();
    if m.emitted.is_empty() {
        let kinds: Vec<String> = unmapped
            .iter()
            .map(|u| format!("{} ×{}", u.op_type, u.count))
            .collect();
        return Err(Error::Usage(format!(
            "{}: none of the {total} ONNX nodes maps to an operator rule ({})",
            file.display(),
            kinds.join(", ")
        )));
    }
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let name = opts.name.clone().unwrap_or(stem);
    let yaml = write(
        file, &model, graph, &name, opts, &symbols, &inputs, &m.emitted, &unmapped, mapped,
    );
    Ok(OnnxImport {
        name,
        yaml,
        nodes: total,
        mapped,
        operators: m.emitted.len(),
        unmapped,
        symbols: symbols
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.onnx.clone()))
            .collect(),
    })
}

/// The name of the one block of an imported graph.
const BLOCK: &str = "graph";

/// A formula as a YAML scalar: plain when it is a number or a product of symbols.
fn formula(p: &Poly) -> String {
    let t = p.to_string();
    if t.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*')
    {
        t
    } else {
        yaml_str(&t)
    }
}

fn flow(pairs: &[(&str, String)]) -> String {
    let items: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", items.join(", "))
}

/// The model's dtype: the element type of its first floating initializer or input.
fn dtype(graph: &GraphProto) -> Option<&'static str> {
    graph
        .initializer
        .iter()
        .filter_map(|t| t.data_type.and_then(float_dtype))
        .chain(
            graph
                .input
                .iter()
                .filter_map(|v| elem_type(v.r#type.as_ref()).and_then(float_dtype)),
        )
        .next()
}

#[allow(clippy::too_many_arguments)]
fn write(
    file: &Path,
    model: &ModelProto,
    graph: &GraphProto,
    name: &str,
    opts: &OnnxOptions,
    symbols: &Symbols,
    inputs: &[Input],
    ops: &[Emit],
    unmapped: &[Unmapped],
    mapped: usize,
) -> String {
    let file_name = file
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let producer = [model.producer_name(), model.producer_version()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Imported by `symshard import onnx` from {file_name}{}.",
        if producer.is_empty() {
            String::new()
        } else {
            format!(" (written by {producer})")
        }
    );
    let _ = writeln!(
        y,
        "# {} ONNX nodes: {mapped} mapped, to {} operators; {} not mapped.",
        graph.node.len(),
        ops.len(),
        unmapped.iter().map(|u| u.count).sum::<usize>()
    );
    for u in unmapped {
        let _ = writeln!(y, "# Not mapped: {} ×{}", u.op_type, u.count);
        for (n, why) in &u.nodes {
            let _ = writeln!(y, "#   `{n}`: {why}");
        }
    }
    let _ = writeln!(y, "name: {}", yaml_str(name));
    // The doc is what `cost` shows first: it names what is missing from the count.
    let missing: Vec<String> = unmapped
        .iter()
        .map(|u| format!("{} ×{}", u.op_type, u.count))
        .collect();
    let doc = if missing.is_empty() {
        format!("{name}, imported from the ONNX graph {file_name}.")
    } else {
        format!(
            "{name}, imported from the ONNX graph {file_name}; not mapped, so not counted: {}.",
            missing.join(", ")
        )
    };
    let _ = writeln!(y, "doc: {}", yaml_str(&doc));
    let _ = writeln!(y, "source: {}", yaml_str(&format!("ONNX file {file_name}")));
    if let Some(d) = dtype(graph) {
        let _ = writeln!(y, "dtype: {d}");
    }
    let _ = writeln!(y, "graph:");
    if symbols.map.is_empty() {
        let _ = writeln!(y, "  symbols: {{}}");
    } else {
        let _ = writeln!(y, "  symbols:");
        for (s, d) in &symbols.map {
            let text = format!("ONNX dimension `{}` ({})", d.onnx, d.seen);
            let _ = writeln!(y, "    {s}: {}", yaml_str(&text));
        }
    }
    if inputs.is_empty() {
        let _ = writeln!(y, "  inputs: {{}}");
    } else {
        let _ = writeln!(y, "  inputs:");
    }
    for i in inputs {
        if let Some(n) = &i.note {
            let _ = writeln!(y, "    # {n}, taken as a graph input");
        }
        let dims: Vec<String> = i.dims.iter().map(formula).collect();
        let mut fields = vec![("dims", format!("[{}]", dims.join(", ")))];
        if let Some(d) = i.dtype {
            fields.push(("dtype", d.to_string()));
        }
        let _ = writeln!(y, "    {}: {}", i.name, flow(&fields));
    }
    let _ = writeln!(y, "  blocks:");
    let _ = writeln!(y, "    - name: {BLOCK}");
    let _ = writeln!(y, "      ops:");
    for e in ops {
        let bind: Vec<(&str, String)> = e.bind.iter().map(|(k, v)| (*k, formula(v))).collect();
        let ins: Vec<(&str, String)> = e.ins.iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut fields = vec![
            ("name", e.name.clone()),
            ("op", e.rule.to_string()),
            ("bind", flow(&bind)),
            ("in", flow(&ins)),
        ];
        if !e.tied.is_empty() {
            let tied: Vec<(&str, String)> = e.tied.iter().map(|(k, v)| (*k, v.clone())).collect();
            fields.push(("tied", flow(&tied)));
        }
        fields.push(("doc", yaml_str(&e.doc)));
        let _ = writeln!(y, "        - {}", flow(&fields));
    }
    if !symbols.map.is_empty() {
        let _ = writeln!(y, "defaults:");
        for (s, d) in &symbols.map {
            let given = opts.dims.get(s).or_else(|| opts.dims.get(&d.onnx));
            let (value, source) = match given {
                Some(v) => (
                    *v,
                    format!("given on import for ONNX dimension `{}`", d.onnx),
                ),
                None => (
                    1,
                    format!(
                        "ONNX dimension `{}` has no size in the file: 1 until set (--set {s}=…)",
                        d.onnx
                    ),
                ),
            };
            let _ = writeln!(
                y,
                "  {s}: {{value: {value}, source: {}}}",
                yaml_str(&source)
            );
        }
    }
    y
}
