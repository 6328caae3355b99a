//! ONNX graph → a model file with an explicit graph of shipped operator rules.
//!
//! Shapes come from the graph inputs (symbolic `dim_param`s become model symbols: the batch and
//! sequence names exporters use become `B` and `S`, the symbols symshard's layouts split), the
//! initializers, and propagation through every mapped operator and the shape computations
//! exporters write (`Shape`, `Gather`, `Unsqueeze`, `Concat`, `Slice`, …),
//! so that a file without `value_info` imports the same; `value_info` only gives the shapes of
//! what the mapping cannot follow. Initializers used as weights become the operators' parameters,
//! and a second use of one initializer ties it to the first. Nodes no rule covers are listed with
//! a reason each, root causes first, never dropped silently: an output of one whose shape is
//! inferred (elementwise operators) or given by `value_info` becomes a graph input, so that the
//! rest of the graph is still costed; outputs no node reads (Dropout masks, running statistics)
//! are ignored. The import measures its coverage, the mapped FLOPs and parameters against those
//! the unmapped nodes' shapes imply, and refuses a graph covered below [`MIN_COVERAGE_PERCENT`]
//! unless told to allow it. Runs of identical layers are written once, as a `repeat` block.

use super::onnx_coverage::Counts;
use super::onnx_infer::broadcast;
use super::onnx_map::{Emit, Mapper, Value};
use super::onnx_pb::NodeProto;
use super::onnx_pb::{GraphProto, ModelProto};
use super::onnx_shape::{
    elem_type, float_dtype, int_dtype, product, tensor_shape, tensor_vals, DimSymbol, Shape,
    Symbols,
};
use super::yaml_str;
use crate::diag::Source;
use crate::error::{Error, Result};
use crate::model::{model_cost, ModelLoader};
use crate::sym::{Bindings, Poly, Rational};
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
    /// Import a graph whose coverage is below [`MIN_COVERAGE_PERCENT`] instead of refusing it.
    pub allow_partial: bool,
}

/// The least coverage, in percent of FLOPs and of parameters, an import accepts by default.
pub const MIN_COVERAGE_PERCENT: i64 = 99;

/// An ONNX node that was not mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmapped {
    /// The ONNX operator type.
    pub op_type: String,
    /// The node's name.
    pub name: String,
    /// Why it was not mapped.
    pub reason: String,
    /// Whether it is a root cause: every input it reads is known (it is not unmapped only
    /// because an earlier unmapped node's output is of unknown shape).
    pub root: bool,
    /// The forward FLOPs its input shapes imply (a formula in the graph's symbolic sizes), when
    /// they are known.
    pub flops: Option<String>,
}

pub use super::onnx_coverage::Coverage;

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
    /// Nodes not mapped: root causes first, each group in graph (topological) order.
    pub unmapped: Vec<Unmapped>,
    /// The mapped share of the FLOPs and parameters.
    pub coverage: Coverage,
    /// Model symbols made from symbolic dimensions, with the ONNX name each stands for.
    pub symbols: Vec<(String, String)>,
    /// Integer graph inputs that index no table, taken as masks (an `attention_mask`): what
    /// the graph computes from them alone makes no operator.
    pub mask_inputs: Vec<String>,
    /// Whether every size of the model is a number (an export without dynamic axes): its batch
    /// and sequence cannot be changed, and tensor parallelism cuts the numbers themselves.
    pub fixed_sizes: bool,
    /// Model symbols of symbolic dimensions no size was given for on import: written as
    /// defaults of 1 marked `assumed`, which `cost` and `rank` name until `--set` gives them.
    pub assumed_sizes: Vec<String>,
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
    let mut w = Walk::start(graph, default_opset(&model));
    let walked = w.map_nodes(graph, progress);
    let total = graph.node.len();
    let Walk {
        mut m,
        symbols,
        mut inputs,
        mask_inputs,
    } = w;
    let Walked {
        mut unmapped,
        implied,
        unmapped_weights,
        mapped,
        weights,
    } = walked;
    inputs.extend(const_inputs(&mut m));
    if m.emitted.is_empty() {
        return Err(nothing_mapped(file, total, &unmapped));
    }
    let name = opts.name.clone().unwrap_or_else(|| file_stem(file));
    // The import's sizes: where a share of formulas cannot be bounded over every size, it is
    // taken there.
    let sizes = import_sizes(&symbols, opts);
    order_unmapped(&mut unmapped, &implied);
    // A fused projection split into equal pieces, one projection per piece.
    let mut ops = std::mem::take(&mut m.emitted);
    let unfused = super::onnx_heads::unfuse_split_projections(&mut ops, &mut |n| m.alloc(n));
    m.emitted = ops;
    // With the tokens symbolic, the hidden size and heads as symbols too, so that the split
    // search can cut features (constants are no atoms of it).
    let (mut heads, numbers) = symbolic_heads(&symbols, &mut m.emitted);
    // The model file, without coverage (to measure it) and then with it.
    let file_text = |heads: Option<&super::onnx_heads::Heads>,
                     ops: &[Emit],
                     unmapped: &[Unmapped],
                     coverage: Option<&Coverage>| {
        write(
            file,
            &model,
            graph,
            &name,
            opts,
            (&symbols, heads, unfused),
            &inputs,
            ops,
            unmapped,
            mapped,
            &m.folded,
            (&mask_inputs, &m.mask_nodes),
            coverage,
        )
    };
    let loader = ModelLoader::embedded()?;
    let skeleton = file_text(heads.as_ref(), &m.emitted, &unmapped, None);
    let mut loaded = loader.load(&Source::new(file, skeleton));
    // A number that only happens to equal the hidden size or heads (a ViT's patch grid) can
    // make the shapes disagree: then the numbers stay.
    if let (Err(_), Some(numbers)) = (&loaded, numbers) {
        m.emitted = numbers;
        heads = None;
        let skeleton = file_text(None, &m.emitted, &unmapped, None);
        loaded = loader.load(&Source::new(file, skeleton));
    }
    let loaded = loaded?;
    let unmapped_params = weights_left(&m, &unmapped_weights, &weights);
    let counts = (implied.iter().cloned().sum(), unmapped_params);
    let coverage = measure(file, &loaded, &symbols, &sizes, counts)?;
    if !coverage.complete && !opts.allow_partial {
        return Err(below_coverage(file, &coverage, &unmapped));
    }
    let yaml = file_text(heads.as_ref(), &m.emitted, &unmapped, Some(&coverage));
    Ok(OnnxImport {
        name,
        yaml,
        nodes: total,
        mapped,
        operators: m.emitted.len(),
        unmapped,
        coverage,
        symbols: symbol_sources(&symbols),
        mask_inputs,
        fixed_sizes: symbols.map.is_empty() && heads.is_none(),
        assumed_sizes: assumed_sizes(&symbols, opts),
    })
}

/// The unmapped nodes with the FLOPs their shapes imply, root causes first and each group in
/// graph order.
fn order_unmapped(unmapped: &mut [Unmapped], implied: &[Option<Poly>]) {
    for (u, f) in unmapped.iter_mut().zip(implied) {
        u.flops = f.as_ref().map(Poly::to_string);
    }
    unmapped.sort_by_key(|u| !u.root);
}

/// The parameters of the weights no mapped operator owns.
fn weights_left(m: &Mapper, unmapped: &BTreeSet<String>, weights: &BTreeMap<&str, Poly>) -> Poly {
    unmapped
        .iter()
        .filter(|w| !m.owns(w))
        .filter_map(|w| weights.get(w.as_str()).cloned())
        .sum()
}

/// The constant index tensors the mapper made graph inputs of the model file.
fn const_inputs(m: &mut Mapper) -> Vec<Input> {
    std::mem::take(&mut m.const_inputs)
        .into_iter()
        .map(|(name, dims, label)| Input {
            name,
            dims,
            dtype: Some("int64"),
            note: Some(format!("constant indices read by {label}")),
        })
        .collect()
}

/// Each model symbol made from a symbolic dimension, with the ONNX name it stands for.
fn symbol_sources(symbols: &Symbols) -> Vec<(String, String)> {
    symbols
        .map
        .iter()
        .map(|(k, v)| (k.clone(), v.onnx.clone()))
        .collect()
}

/// The model's name when none is given: the file's stem.
fn file_stem(file: &Path) -> String {
    file.file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into())
}

/// The version of the default ONNX operator set the model imports (1 when it names none).
fn default_opset(model: &ModelProto) -> i64 {
    model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .unwrap_or(1)
}

/// The import's sizes: each symbol at the size given (`--dim`), else 1. Where a share of
/// formulas cannot be bounded over every size, it is taken there.
fn import_sizes(symbols: &Symbols, opts: &OnnxOptions) -> Bindings {
    symbols
        .map
        .iter()
        .map(|(s, d)| {
            let v = given_size(opts, s, d).copied().unwrap_or(1);
            (s.clone(), Rational::from_integer(v.into()))
        })
        .collect()
}

/// The symbols no size was given for (the model file assumes them).
fn assumed_sizes(symbols: &Symbols, opts: &OnnxOptions) -> Vec<String> {
    symbols
        .map
        .iter()
        .filter(|(s, d)| given_size(opts, s, d).is_none())
        .map(|(s, _)| s.clone())
        .collect()
}

/// With the tokens symbolic, the hidden size and heads written as symbols too, so that the
/// split search can cut features (constants are no atoms of it): the heads found, and the
/// operators as they were (with numbers), to fall back on.
fn symbolic_heads(
    symbols: &Symbols,
    emitted: &mut [Emit],
) -> (Option<super::onnx_heads::Heads>, Option<Vec<Emit>>) {
    let heads = if symbols.map.contains_key("B")
        && HEAD_SYMBOLS.iter().all(|s| !symbols.map.contains_key(*s))
    {
        super::onnx_heads::find(emitted)
    } else {
        None
    };
    let numbers = heads.as_ref().map(|h| {
        let numbers = emitted.to_vec();
        super::onnx_heads::symbolize(emitted, h, HEAD_SYMBOLS);
        numbers
    });
    (heads, numbers)
}

/// The graph being read: the mapper's state, the symbols of the graph's sizes, the model file's
/// inputs and the integer inputs that only mask.
struct Walk {
    m: Mapper,
    symbols: Symbols,
    inputs: Vec<Input>,
    mask_inputs: Vec<String>,
}

/// What mapping the nodes found besides the operators: the unmapped nodes, the FLOPs each
/// unmapped root implies, the weights they read, how many nodes mapped, and the floating
/// initializers (the weights) with their elements.
struct Walked<'g> {
    unmapped: Vec<Unmapped>,
    implied: Vec<Option<Poly>>,
    unmapped_weights: BTreeSet<String>,
    mapped: usize,
    weights: BTreeMap<&'g str, Poly>,
}

impl Walk {
    /// The initializers and the graph's inputs, before any node.
    fn start(graph: &GraphProto, opset: i64) -> Walk {
        let mut m = Mapper::default();
        m.opset = opset;
        m.taken.insert(BLOCK.to_string());
        m.read = graph
            .node
            .iter()
            .flat_map(|n| n.input.iter().cloned())
            .collect();
        let mut symbols = Symbols::default();
        let mut inputs = Vec::new();
        for t in &graph.initializer {
            let name = t.name.clone().unwrap_or_default();
            // An integer or boolean initializer (indices, a traced mask) is never a parameter: no
            // origin, so that what is computed from it alone folds as constants do.
            let integer = t.data_type.is_some_and(|d| float_dtype(d).is_none());
            let v = match tensor_shape(t) {
                Some(shape) => Value::Const {
                    shape,
                    vals: tensor_vals(t),
                    origin: (!integer).then(|| name.clone()),
                },
                None => Value::Unknown(format!("initializer `{name}` is empty")),
            };
            m.values.insert(name, v);
        }
        let ids = token_id_inputs(graph);
        let mut mask_inputs: Vec<String> = Vec::new();
        for vi in &graph.input {
            let onnx_name = vi.name.clone().unwrap_or_default();
            if m.values.contains_key(&onnx_name) {
                continue; // an initializer listed as an input (IR version < 4)
            }
            let integer = elem_type(vi.r#type.as_ref()).is_some_and(|t| float_dtype(t).is_none());
            let v = match symbols.shape_of(vi.r#type.as_ref(), &onnx_name) {
                // An integer or boolean input that indexes no table (an attention mask): it carries
                // no gradient and nothing learned; what the graph computes from it alone is integer
                // and boolean work on its shape, and its values reach the data only through the
                // operators that combine the two, which are mapped.
                Some(dims) if integer && !ids.contains(&onnx_name) => {
                    m.mask_derived.insert(onnx_name.clone());
                    mask_inputs.push(onnx_name.clone());
                    Value::Const {
                        shape: dims,
                        vals: None,
                        origin: None,
                    }
                }
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
        Walk {
            m,
            symbols,
            inputs,
            mask_inputs,
        }
    }

    /// Maps every node in graph order; a node that does not map is rolled back, and its
    /// outputs read later become inputs of the model file (or unknown).
    fn map_nodes<'g>(
        &mut self,
        graph: &'g GraphProto,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Walked<'g> {
        let infos: BTreeMap<&str, _> = graph
            .value_info
            .iter()
            .chain(&graph.output)
            .filter_map(|v| Some((v.name.as_deref()?, v.r#type.as_ref())))
            .collect();
        // Floating initializers: the weights, by name, with their number of elements.
        let weights: BTreeMap<&str, Poly> = graph
            .initializer
            .iter()
            .filter(|t| t.data_type.and_then(float_dtype).is_some())
            .filter_map(|t| Some((t.name.as_deref()?, product(&tensor_shape(t)?))))
            .collect();
        let mut w = Walked {
            unmapped: Vec::new(),
            implied: Vec::new(),
            unmapped_weights: BTreeSet::new(),
            mapped: 0,
            weights,
        };
        let total = graph.node.len();
        for (i, node) in graph.node.iter().enumerate() {
            progress(i, total);
            let label = format!("ONNX {} `{}`", node.op_type(), node.name());
            self.m.begin();
            match self.m.node(node, &label) {
                Ok(()) => w.mapped += 1,
                Err(reason) => {
                    self.m.rollback();
                    self.unmapped_node(node, &label, reason, &infos, &mut w);
                }
            }
        }
        progress(total, total);
        w
    }

    /// A node that did not map: whether it is a root cause (it read only known tensors), the
    /// FLOPs it implies, the weights it read, and its outputs as inputs of the model file.
    fn unmapped_node(
        &mut self,
        node: &NodeProto,
        label: &str,
        reason: String,
        infos: &BTreeMap<&str, Option<&super::onnx_pb::TypeProto>>,
        w: &mut Walked<'_>,
    ) {
        let (m, symbols, inputs) = (&mut self.m, &mut self.symbols, &mut self.inputs);
        let (unmapped, implied, unmapped_weights, weights) = (
            &mut w.unmapped,
            &mut w.implied,
            &mut w.unmapped_weights,
            &w.weights,
        );
        let mut root = true;
        let (mut acts, mut read_weights) = (Vec::new(), Vec::new());
        for t in node.input.iter().filter(|t| !t.is_empty()) {
            match m.values.get(t) {
                Some(Value::Act { shape, .. }) => acts.push(shape.clone()),
                Some(Value::Const {
                    origin: Some(o),
                    vals: None,
                    ..
                }) => {
                    if let Some(n) = weights.get(o.as_str()) {
                        read_weights.push(n.clone());
                        unmapped_weights.insert(o.clone());
                    }
                }
                Some(Value::Const { .. }) => {}
                Some(Value::Unknown(_)) | None => root = false,
            }
        }
        implied.push(root.then(|| implied_flops(&acts, &read_weights)));
        let inferred = elementwise_shape(node, m);
        for (k, out) in node.output.iter().enumerate() {
            if out.is_empty() || !m.read.contains(out) {
                continue;
            }
            let t = infos.get(out.as_str()).copied().flatten();
            let dims = inferred
                .clone()
                .filter(|_| k == 0)
                .or_else(|| symbols.shape_of(t, out));
            let v = match dims {
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
                None => Value::Unknown(format!("it reads `{out}`, output of unmapped {label}")),
            };
            m.values.insert(out.clone(), v);
        }
        unmapped.push(Unmapped {
            op_type: node.op_type().to_string(),
            name: node.name().to_string(),
            reason,
            root,
            flops: None,
        });
    }
}

/// The first `n` unmapped nodes that are root causes (not unmapped only because an input is),
/// each as "`name` (op type): reason".
fn root_causes(unmapped: &[Unmapped], n: usize) -> Vec<String> {
    unmapped
        .iter()
        .filter(|u| u.root)
        .take(n)
        .map(|u| format!("`{}` ({}): {}", u.name, u.op_type, u.reason))
        .collect()
}

/// Nothing mapped: the kinds of node and the first root causes.
fn nothing_mapped(file: &Path, total: usize, unmapped: &[Unmapped]) -> Error {
    let kinds = by_type(unmapped.iter().map(|u| u.op_type.as_str()));
    let roots = root_causes(unmapped, 3);
    Error::Usage(format!(
        "{}: none of the {total} ONNX nodes maps to an operator rule ({}); first the root causes: {}",
        file.display(),
        kinds,
        roots.join("; ")
    ))
}

/// The mapped operators cover too little: the coverage and the first root causes.
fn below_coverage(file: &Path, coverage: &Coverage, unmapped: &[Unmapped]) -> Error {
    let roots = root_causes(unmapped, 8);
    Error::Usage(format!(
        "{}: the mapped operators cover {}{} and {}{}, below {MIN_COVERAGE_PERCENT} %; \
         {} ONNX nodes not mapped, first the root causes: {}; `symshard import onnx --allow-partial` imports it anyway",
        file.display(),
        coverage.flops_text(),
        if coverage.unmapped_flops.is_none() {
            " (unmapped nodes read tensors of unknown shape)"
        } else {
            ""
        },
        coverage.params_text(),
        basis_note(coverage),
        unmapped.len(),
        roots.join("; ")
    ))
}

/// The coverage of an import: the mapped counts of the model file as loaded, with every symbol
/// but the graph's symbolic sizes at its value. The hidden size and heads an import writes as
/// symbols are numbers of the file; left unbound, the formulas could not be compared with the
/// unmapped nodes' (which are in the sizes alone).
fn measure(
    file: &Path,
    loaded: &crate::model::Model,
    symbols: &Symbols,
    sizes: &Bindings,
    (unmapped_flops, unmapped_params): (Option<Poly>, Poly),
) -> Result<Coverage> {
    let cost = model_cost(loaded);
    let numbers: Bindings = loaded
        .values
        .iter()
        .filter(|(k, _)| !symbols.map.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let bind = |p: &Poly| {
        p.bind(&numbers).map_err(|e| {
            Error::Usage(format!(
                "{}: the import's counts cannot be evaluated: {e}",
                file.display()
            ))
        })
    };
    let counts = Counts {
        mapped_flops: bind(&cost.forward.total())?,
        unmapped_flops: unmapped_flops.as_ref().map(bind).transpose()?,
        mapped_params: bind(&cost.params)?,
        unmapped_params: bind(&unmapped_params)?,
    };
    Ok(super::onnx_coverage::coverage(&counts, sizes))
}

/// ` (the least share over B, S ≥ 1)`: where a coverage's percentages hold, when its counts
/// are formulas.
pub fn basis_note(c: &Coverage) -> String {
    if c.basis == "exact" {
        String::new()
    } else {
        format!(" ({})", c.basis)
    }
}

/// Nodes without an operator listed by operator type (`And ×1, Where ×2`), and the elements
/// of their outputs in all.
fn by_type_with_elements(nodes: &[(String, Poly)]) -> (String, Poly) {
    let kinds = by_type(nodes.iter().map(|(t, _)| t.as_str()));
    (kinds, nodes.iter().map(|(_, n)| n.clone()).sum())
}

/// The graph inputs that index a table: read, directly or through views and casts, as the
/// indices of a `Gather` whose data is an initializer (token ids into an embedding).
fn token_id_inputs(graph: &GraphProto) -> BTreeSet<String> {
    let tables: BTreeSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let mut ids = BTreeSet::new();
    for vi in &graph.input {
        let Some(start) = vi.name.as_deref() else {
            continue;
        };
        let mut reach: BTreeSet<&str> = BTreeSet::from([start]);
        let mut indexes = false;
        for node in &graph.node {
            let first = node.input.first().map(String::as_str).unwrap_or("");
            match node.op_type() {
                "Reshape" | "Flatten" | "Unsqueeze" | "Squeeze" | "Cast" | "Identity"
                    if reach.contains(first) =>
                {
                    reach.extend(node.output.iter().map(String::as_str));
                }
                "Gather"
                    if tables.contains(first)
                        && node
                            .input
                            .get(1)
                            .is_some_and(|i| reach.contains(i.as_str())) =>
                {
                    indexes = true;
                }
                _ => {}
            }
        }
        if indexes {
            ids.insert(start.to_string());
        }
    }
    ids
}

/// Forward FLOPs an unmapped node's inputs imply: one operation per element of its first
/// computed input, and for each weight a product of every row of that input (all but its last
/// dimension) by the weight, 2 FLOPs per multiply-add, as a matmul would.
fn implied_flops(acts: &[Shape], weights: &[Poly]) -> Poly {
    let Some(first) = acts.first() else {
        // Weights alone (a table nothing computed reads): no arithmetic implied.
        return Poly::zero();
    };
    let rows = product(&first[..first.len().saturating_sub(1)]);
    let w: Poly = weights.iter().cloned().sum();
    product(first) + Poly::int(2) * rows * w
}

/// The output shape of an unmapped elementwise operator: its inputs broadcast together.
fn elementwise_shape(node: &NodeProto, m: &Mapper) -> Option<Shape> {
    const ELEMENTWISE: &[&str] = &[
        "Abs",
        "Add",
        "And",
        "Ceil",
        "Clip",
        "Cos",
        "Div",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Floor",
        "Greater",
        "GreaterOrEqual",
        "HardSigmoid",
        "HardSwish",
        "IsNaN",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "Log",
        "Max",
        "Min",
        "Mish",
        "Mod",
        "Mul",
        "Neg",
        "Not",
        "Or",
        "Pow",
        "PRelu",
        "Reciprocal",
        "Round",
        "Selu",
        "Sigmoid",
        "Sign",
        "Sin",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Sub",
        "Tan",
        "Tanh",
        "Where",
        "Xor",
    ];
    if !ELEMENTWISE.contains(&node.op_type()) || node.op_type() == "Clip" && node.input.is_empty() {
        return None;
    }
    let mut out: Shape = Vec::new();
    let inputs = if node.op_type() == "Clip" {
        &node.input[..1]
    } else {
        &node.input[..]
    };
    for t in inputs.iter().filter(|t| !t.is_empty()) {
        let s = match m.values.get(t)? {
            Value::Act { shape, .. } | Value::Const { shape, .. } => shape,
            Value::Unknown(_) => return None,
        };
        out = broadcast(&out, s).ok()?;
    }
    Some(out)
}

/// Operator types counted, in name order: `And ×1, Where ×2`.
fn by_type<'a>(types: impl Iterator<Item = &'a str>) -> String {
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for t in types {
        *n.entry(t).or_insert(0) += 1;
    }
    let kinds: Vec<String> = n.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
    kinds.join(", ")
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
/// What the model file of an import is written from.
struct Parts<'a> {
    file_name: String,
    producer: String,
    graph: &'a GraphProto,
    name: &'a str,
    opts: &'a OnnxOptions,
    symbols: &'a Symbols,
    heads: Option<&'a super::onnx_heads::Heads>,
    unfused: usize,
    inputs: &'a [Input],
    ops: &'a [Emit],
    unmapped: &'a [Unmapped],
    mapped: usize,
    folded: &'a [(String, Poly)],
    mask_inputs: &'a [String],
    mask_nodes: &'a [(String, Poly)],
    coverage: Option<&'a Coverage>,
}

#[allow(clippy::too_many_arguments)]
fn write(
    file: &Path,
    model: &ModelProto,
    graph: &GraphProto,
    name: &str,
    opts: &OnnxOptions,
    (symbols, heads, unfused): (&Symbols, Option<&super::onnx_heads::Heads>, usize),
    inputs: &[Input],
    ops: &[Emit],
    unmapped: &[Unmapped],
    mapped: usize,
    folded: &[(String, Poly)],
    (mask_inputs, mask_nodes): (&[String], &[(String, Poly)]),
    coverage: Option<&Coverage>,
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
    let parts = Parts {
        file_name,
        producer,
        graph,
        name,
        opts,
        symbols,
        heads,
        unfused,
        inputs,
        ops,
        unmapped,
        mapped,
        folded,
        mask_inputs,
        mask_nodes,
        coverage,
    };
    let mut y = String::new();
    parts.comments(&mut y);
    parts.head(&mut y);
    parts.blocks(&mut y);
    parts.defaults(&mut y);
    y
}

impl Parts<'_> {
    /// The comments that open the file: where it came from, what was folded, unfused, symbolized, taken as a mask, the coverage and each node not mapped.
    fn comments(&self, y: &mut String) {
        let &Parts {
            ref file_name,
            ref producer,
            graph,
            symbols,
            heads,
            unfused,
            ops,
            unmapped,
            mapped,
            folded,
            mask_inputs,
            mask_nodes,
            coverage,
            ..
        } = self;
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
            unmapped.len()
        );
        if !folded.is_empty() {
            let (kinds, elements) = by_type_with_elements(folded);
            let _ = writeln!(
                y,
                "# {} of them computed from constants and shapes alone (the masks, indices and sizes the exporter traced: {kinds}): folded into constants, no operator; their outputs, {} elements in all, are the same at every step of one shape and are not counted; the work a folded mask does on the data is its consumer's.",
                folded.len(),
                formula(&elements)
            );
        }
        if unfused > 0 {
            let _ = writeln!(
                y,
                "# {unfused} fused projection(s) whose output the next node splits into equal pieces: written as one projection per piece, reading the same input (the same FLOPs and parameters), so that tensor parallelism can split each by columns."
            );
        }
        if let Some(h) = heads {
            let _ = writeln!(
                y,
                "# The hidden size {} and the {} attention heads are written as the symbols H and NH (the head size as H/NH), so that tensor parallelism can split them.",
                h.heads * h.head_dim,
                h.heads
            );
        }
        if symbols.map.is_empty() && heads.is_none() {
            let _ = writeln!(y, "# {FIXED_SIZES}");
        }
        if !mask_inputs.is_empty() {
            let (kinds, elements) = by_type_with_elements(mask_nodes);
            let names: Vec<String> = mask_inputs.iter().map(|n| format!("`{n}`")).collect();
            let _ = writeln!(
                y,
                "# Integer input {} indexes no table: it is taken as a mask, not as data (no gradient, no parameter, no FLOPs). {} nodes compute from it alone ({}), {} elements per step of integer and boolean work: no operator, not counted; the work the mask does on the data (adding it to the scores) is its consumer's, mapped as such.",
                names.join(", "),
                mask_nodes.len(),
                if kinds.is_empty() { "none" } else { &kinds },
                formula(&elements)
            );
        }
        if let Some(c) = coverage {
            let _ = writeln!(
                y,
                "# Coverage{}: {} ({} mapped, {} implied by unmapped nodes), {} ({} mapped, {} unmapped).",
                basis_note(c),
                c.flops_text(),
                c.mapped_flops,
                c.unmapped_flops.as_deref().unwrap_or("unknown"),
                c.params_text(),
                c.mapped_params,
                c.unmapped_params
            );
        }
        for u in unmapped {
            let cause = if u.root { "root cause" } else { "downstream" };
            let _ = writeln!(
                y,
                "# Not mapped ({cause}): {} `{}`: {}",
                u.op_type, u.name, u.reason
            );
        }
    }

    /// The model's name, doc and source, and the graph's symbols, roles and inputs.
    fn head(&self, y: &mut String) {
        let &Parts {
            ref file_name,
            graph,
            name,
            symbols,
            heads,
            inputs,
            unmapped,
            ..
        } = self;
        let _ = writeln!(y, "name: {}", yaml_str(name));
        // The doc is what `cost` shows first: it names what is missing from the count.
        let missing = by_type(unmapped.iter().map(|u| u.op_type.as_str()));
        let doc = if missing.is_empty() {
            format!("{name}, imported from the ONNX graph {file_name}.")
        } else {
            format!(
                "{name}, imported from the ONNX graph {file_name}; not mapped, so not counted: {missing}."
            )
        };
        let _ = writeln!(y, "doc: {}", yaml_str(&doc));
        let _ = writeln!(y, "source: {}", yaml_str(&format!("ONNX file {file_name}")));
        if let Some(d) = dtype(graph) {
            let _ = writeln!(y, "dtype: {d}");
        }
        let _ = writeln!(y, "graph:");
        if symbols.map.is_empty() && heads.is_none() {
            let _ = writeln!(y, "  symbols: {{}}");
        } else {
            let _ = writeln!(y, "  symbols:");
            for (s, d) in &symbols.map {
                let text = format!("ONNX dimension `{}` ({})", d.onnx, d.seen);
                let _ = writeln!(y, "    {s}: {}", yaml_str(&text));
            }
            if let Some(h) = heads {
                let [hs, nh] = HEAD_SYMBOLS;
                for (s, what) in [
                    (hs, format!("the hidden size, {} (its multiples written as multiples of {hs}, the head size as {hs}/{nh})", h.heads * h.head_dim)),
                    (nh, format!("attention heads: `{}` reshapes the hidden size into {} heads of {}", h.seen, h.heads, h.head_dim)),
                ] {
                    let _ = writeln!(y, "    {s}: {}", yaml_str(&what));
                }
            }
        }
        // The batch and sequence by the names exporters give them (`conventional` in the shape
        // naming), and the heads where found, declared.
        let mut roles: Vec<(&str, String)> = Vec::new();
        for (role, s) in [("batch", "B"), ("sequence", "S")] {
            if symbols.map.contains_key(s) {
                roles.push((role, s.to_string()));
            }
        }
        if heads.is_some() {
            let [hs, nh] = HEAD_SYMBOLS;
            roles.push(("hidden", hs.to_string()));
            roles.push(("heads", nh.to_string()));
        }
        if !roles.is_empty() {
            let _ = writeln!(y, "  roles: {}", flow(&roles));
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
    }

    /// The blocks: the operators, with identical layers written once as a repeated block.
    fn blocks(&self, y: &mut String) {
        let &Parts { inputs, ops, .. } = self;
        let _ = writeln!(y, "  blocks:");
        let names: BTreeSet<&str> = ops.iter().map(|e| e.name.as_str()).collect();
        let fresh = |base: &str| {
            let mut n = base.to_string();
            let mut k = 2;
            while names.contains(n.as_str()) || inputs.iter().any(|i| i.name == n) {
                n = format!("{base}_{k}");
                k += 1;
            }
            n
        };
        let write_ops = |y: &mut String, ops: &[Emit], rename: &dyn Fn(&str) -> String| {
            let _ = writeln!(y, "      ops:");
            for e in ops {
                let bind: Vec<(&str, String)> =
                    e.bind.iter().map(|(k, v)| (*k, formula(v))).collect();
                let ins: Vec<(&str, String)> = e.ins.iter().map(|(k, v)| (*k, rename(v))).collect();
                let mut fields = vec![
                    ("name", e.name.clone()),
                    ("op", e.rule.to_string()),
                    ("bind", flow(&bind)),
                    ("in", flow(&ins)),
                ];
                if !e.tied.is_empty() {
                    let tied: Vec<(&str, String)> =
                        e.tied.iter().map(|(k, v)| (*k, v.clone())).collect();
                    fields.push(("tied", flow(&tied)));
                }
                fields.push(("doc", yaml_str(&e.doc)));
                let _ = writeln!(y, "        - {}", flow(&fields));
            }
        };
        match super::onnx_repeat::find(ops) {
            None => {
                let _ = writeln!(y, "    - name: {BLOCK}");
                write_ops(y, ops, &|s| s.to_string());
            }
            Some(r) => {
                let end = r.start + r.period * r.count;
                if r.start > 0 {
                    let _ = writeln!(y, "    - name: {BLOCK}");
                    write_ops(y, &ops[..r.start], &|s| s.to_string());
                }
                let layers = fresh("layers");
                let first = &ops[r.start..r.start + r.period];
                let output = first[r.period - 1].name.clone();
                let last = ops[end - 1].name.clone();
                let _ = writeln!(y, "    - name: {layers}");
                let doc = format!(
                    "{} identical layers of {} operators (ONNX nodes from {} to {}), written once",
                    r.count,
                    r.period,
                    first[0].doc,
                    ops[end - 1].doc
                );
                let _ = writeln!(y, "      doc: {}", yaml_str(&doc));
                let _ = writeln!(y, "      repeat: {}", r.count);
                let _ = writeln!(y, "      input: {}", r.input);
                let _ = writeln!(y, "      output: {output}");
                let input = r.input.clone();
                write_ops(y, first, &|s| {
                    if s == input {
                        "in".to_string()
                    } else {
                        s.to_string()
                    }
                });
                if end < ops.len() {
                    let _ = writeln!(y, "    - name: {}", fresh("head"));
                    write_ops(y, &ops[end..], &|s| {
                        if s == last {
                            layers.clone()
                        } else {
                            s.to_string()
                        }
                    });
                }
            }
        }
    }

    /// The symbols' default values: the sizes given on import (1, marked assumed, where none was) and the hidden size and heads.
    fn defaults(&self, y: &mut String) {
        let &Parts {
            opts,
            symbols,
            heads,
            ..
        } = self;
        if !symbols.map.is_empty() || heads.is_some() {
            let _ = writeln!(y, "defaults:");
            for (s, d) in &symbols.map {
                let given = given_size(opts, s, d);
                // A size nobody gave is a placeholder: marked, so that results at it say so.
                let (value, assumed, source) = match given {
                    Some(v) => (
                        *v,
                        "",
                        format!("given on import for ONNX dimension `{}`", d.onnx),
                    ),
                    None => (
                        1,
                        "assumed: true, ",
                        format!(
                            "ONNX dimension `{}` has no size in the file: 1 until set (--set {s}=…)",
                            d.onnx
                        ),
                    ),
                };
                let _ = writeln!(
                    y,
                    "  {s}: {{value: {value}, {assumed}source: {}}}",
                    yaml_str(&source)
                );
            }
            if let Some(h) = heads {
                let [hs, nh] = HEAD_SYMBOLS;
                for (s, value) in [(hs, h.heads * h.head_dim), (nh, h.heads)] {
                    let source = format!("the ONNX graph's head reshape `{}`", h.seen);
                    let _ = writeln!(
                        y,
                        "  {s}: {{value: {value}, source: {}}}",
                        yaml_str(&source)
                    );
                }
            }
        }
    }
}

/// The size given on import for the model symbol `s` of ONNX dimension `d`, by either name.
fn given_size<'a>(opts: &'a OnnxOptions, s: &str, d: &DimSymbol) -> Option<&'a u64> {
    opts.dims.get(s).or_else(|| opts.dims.get(&d.onnx))
}

/// What an import whose sizes are all numbers can and cannot be used for.
pub const FIXED_SIZES: &str = "Every size of this graph is a number (it was exported without dynamic axes): its batch and sequence cannot be changed with `--set`. Tensor parallelism cuts the numbers themselves, each where the degree divides it, at what its operator's index kinds say the cut costs; which number is a token count and which a hidden size the graph does not say, so a tensor-parallel axis may cut either. Export with dynamic batch and sequence axes (`torch.onnx.export(..., dynamic_axes=...)`, or `dynamic_shapes` with the dynamo exporter) to rank other sizes.";

/// The symbols of the hidden size and the head count (see `onnx_heads`).
const HEAD_SYMBOLS: [&str; 2] = ["H", "NH"];
