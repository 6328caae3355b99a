//! Loading and validating model and family files.

use super::graph::{
    check_size, AttentionMode, Block, LossMode, Model, OpNode, Producer, RecomputeModule, Roles,
};
use super::spec::{FamilyFile, GraphSpec, ModelFile, SymbolValue};
use crate::diag::Source;
use crate::embedded;
use crate::error::{Error, Result};
use crate::rules::{Dtype, OpRule, RuleSet};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::Signed;
use petgraph::algo::toposort;
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Where a model's pieces come from: the rules and the family files.
pub struct ModelLoader {
    /// Operator rules.
    pub rules: RuleSet,
    families: BTreeMap<String, Source>,
    /// The attention mode asked for on the command line (overrides model and family).
    pub attention: Option<AttentionMode>,
    /// How the loss runs, as asked for on the command line (default: fp32 passes).
    pub loss: LossMode,
    /// Evaluations of the loss as a training metric per micro-batch (default none).
    pub train_metrics: u32,
    /// Whether dropout runs, as asked for on the command line (overrides the model file).
    pub dropout: Option<bool>,
    /// What selective recomputation recomputes, as asked for on the command line (overrides
    /// the model file; default `core_attn`).
    pub recompute_modules: Option<Vec<RecomputeModule>>,
}

impl ModelLoader {
    /// A loader with the shipped rules and families.
    pub fn embedded() -> Result<ModelLoader> {
        let mut families = BTreeMap::new();
        for (stem, text) in embedded::FAMILIES {
            families.insert(
                stem.to_string(),
                Source::new(embedded::display_path("models/families", stem), *text),
            );
        }
        Ok(ModelLoader {
            rules: RuleSet::embedded()?,
            families,
            attention: None,
            loss: LossMode::default(),
            train_metrics: 0,
            dropout: None,
            recompute_modules: None,
        })
    }

    /// The same loader, building models whose selective recomputation recomputes `modules`
    /// when given (the model file's `recompute_modules`, else `core_attn`, otherwise).
    pub fn with_recompute_modules(mut self, modules: Option<Vec<RecomputeModule>>) -> ModelLoader {
        self.recompute_modules = modules;
        self
    }

    /// The same loader, building models with attention run as `mode` when given.
    pub fn with_attention(mut self, mode: Option<AttentionMode>) -> ModelLoader {
        self.attention = mode;
        self
    }

    /// The same loader, building models whose loss runs as `mode`.
    pub fn with_loss(mut self, mode: LossMode) -> ModelLoader {
        self.loss = mode;
        self
    }

    /// The same loader, building models that evaluate the loss `n` more times per micro-batch
    /// as training metrics.
    pub fn with_train_metrics(mut self, n: u32) -> ModelLoader {
        self.train_metrics = n;
        self
    }

    /// The same loader, building models with dropout on or off when given (the model file's
    /// `dropout`, else on, otherwise).
    pub fn with_dropout(mut self, on: Option<bool>) -> ModelLoader {
        self.dropout = on;
        self
    }

    /// Names of the shipped families.
    pub fn family_names(&self) -> impl Iterator<Item = &str> {
        self.families.keys().map(String::as_str)
    }

    /// Loads a model named on the command line: a path to a model file, or the name of a
    /// shipped model.
    pub fn resolve(&self, arg: &str) -> Result<Model> {
        let path = Path::new(arg);
        // JSON is also YAML: a Hugging Face config must be recognised first.
        if arg.ends_with(".json") {
            return self.load(&crate::model::import::model_source_from_hf(path)?);
        }
        if arg.ends_with(".onnx") {
            return self.load(&crate::model::import::model_source_from_onnx(path)?);
        }
        if arg.ends_with(".yaml") || arg.ends_with(".yml") || path.is_file() {
            if embedded::MODELS.iter().any(|(s, _)| *s == arg) {
                // The command line's only channel for a note that is not an error.
                crate::diag::note(format!(
                    "note: reading the file `{arg}` in this directory, not the shipped model of that name"
                ));
            }
            return self.load(&Source::read(path)?);
        }
        let stem = arg.trim_end_matches(".yaml");
        // A user's models by name: `./models/NAME.yaml`, then each directory of
        // `SYMSHARD_MODEL_PATH`, before the shipped ones (which they shadow, with a note).
        if is_plain_name(stem) {
            for dir in user_model_dirs() {
                let file = dir.join(format!("{stem}.yaml"));
                if file.is_file() {
                    let src = Source::read(&file)?;
                    let shipped = embedded::MODELS.iter().find(|(s, _)| *s == stem);
                    if shipped.is_some_and(|(_, text)| *text != src.text) {
                        crate::diag::note(format!(
                            "note: reading `{}`, which shadows the shipped model `{stem}`",
                            file.display()
                        ));
                    }
                    return self.load(&src);
                }
            }
        }
        match embedded::MODELS.iter().find(|(s, _)| *s == stem) {
            Some((s, text)) => self.load(&Source::new(embedded::display_path("models", s), *text)),
            None => {
                let names: Vec<&str> = embedded::MODELS.iter().map(|(s, _)| *s).collect();
                Err(Error::Usage(format!(
                    "unknown model `{arg}`: not a file, nor a shipped model{} (shipped: {})",
                    crate::suggest::did_you_mean(arg, names.iter().copied()),
                    names.join(", ")
                )))
            }
        }
    }

    /// Loads a model from its source text.
    pub fn load(&self, src: &Source) -> Result<Model> {
        let mut spec: ModelFile = src.parse()?;
        let (graph_src, mut graph, family, doc) =
            self.graph_of(src, spec.family.as_deref(), spec.graph.take())?;
        let dtype_bytes = match spec.dtype.as_deref() {
            None => 2,
            Some(d) => match Dtype::from_name(d) {
                Some(Dtype::Fixed(b)) => b,
                _ => return Err(src.error_at(&["dtype"], format!("unknown dtype `{d}`"))),
            },
        };
        let symbols: BTreeMap<String, String> = graph.symbols.0.clone().into_iter().collect();
        let SymbolValues {
            values,
            sources,
            assumed,
        } = symbol_values(src, &spec, &symbols)?;
        let (batch, mut roles) = symbol_roles(&graph_src, &graph, &symbols)?;
        let attention = self.select_attention(src, &spec.attention, &graph_src, &mut graph)?;
        let has_dropout = graph
            .blocks
            .iter()
            .any(|b| b.ops.iter().any(|o| o.op == DROPOUT_RULE));
        let dropout = self.dropout.or(spec.dropout).unwrap_or(true);
        if !dropout {
            without_dropout(&mut graph);
        }
        let builder = GraphBuilder {
            src: &graph_src,
            rules: &self.rules,
            applied: Default::default(),
            symbols: &symbols,
            values: &values,
        };
        let (inputs, blocks) = builder.build(&graph)?;
        let recompute_modules =
            self.recompute_modules(src, &spec.name, &spec.recompute_modules, &blocks)?;
        check_layer_role(&graph_src, &mut roles, &blocks)?;
        Ok(Model {
            name: spec.name,
            doc: spec.doc.unwrap_or(doc),
            file: src.file.clone(),
            source: spec.source,
            family,
            symbols,
            values,
            sources,
            assumed,
            dtype_bytes,
            inputs,
            blocks,
            attention,
            loss: self.loss,
            train_metrics: self.train_metrics,
            dropout: has_dropout.then_some(dropout),
            recompute_modules,
            batch,
            roles,
        })
    }

    /// The graph a model file states: its own `graph`, or its `family`'s (with the file it comes
    /// from, the family's name and its doc).
    fn graph_of(
        &self,
        src: &Source,
        family: Option<&str>,
        graph: Option<GraphSpec>,
    ) -> Result<(Source, GraphSpec, Option<String>, String)> {
        Ok(match (family, graph) {
            (Some(f), None) => {
                let fsrc = self.families.get(f).ok_or_else(|| {
                    let known: Vec<&str> = self.family_names().collect();
                    src.error_at(
                        &["family"],
                        format!("unknown family `{f}` (known: {})", known.join(", ")),
                    )
                })?;
                let ff: FamilyFile = fsrc.parse()?;
                let (name, fdoc, g) = ff.into_graph();
                (fsrc.clone(), g, Some(name), fdoc)
            }
            (None, Some(g)) => (src.clone(), g, None, String::new()),
            (Some(_), Some(_)) => {
                return Err(src.error_at(&["graph"], "give either `family` or `graph`, not both"))
            }
            (None, None) => {
                return Err(src.error_at(&["name"], "a model needs a `family` or a `graph`"))
            }
        })
    }

    /// The modules selective recomputation recomputes: the command line's, then the model
    /// file's, then `core_attn`; sorted, without repeats. A module other than `core_attn` that
    /// no operator of the graph belongs to is refused (its family declares none).
    fn recompute_modules(
        &self,
        src: &Source,
        model: &str,
        from_file: &Option<Vec<String>>,
        blocks: &[Block],
    ) -> Result<Vec<RecomputeModule>> {
        let mut modules = match (&self.recompute_modules, from_file) {
            (Some(m), _) => m.clone(),
            (None, Some(names)) => names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    RecomputeModule::parse(n)
                        .map_err(|m| src.error_at(&["recompute_modules", &i.to_string()], m))
                })
                .collect::<Result<_>>()?,
            (None, None) => RecomputeModule::default_set(),
        };
        modules.sort();
        modules.dedup();
        let declared = declared_modules(blocks);
        if let Some(m) = modules.iter().find(|m| !declared.contains(m)) {
            return Err(Error::Usage(format!(
                "recompute module `{}`: no operator of model `{model}` belongs to it (its graph declares `recompute: {}` on none; known here: {})",
                m.name(),
                m.name(),
                RecomputeModule::list(&declared, ", ")
            )));
        }
        Ok(modules)
    }

    /// Keeps the operators of the attention mode in effect (command line, then model file, then
    /// the graph's default, then eager) and returns it; `None` for graphs without tagged
    /// operators.
    fn select_attention(
        &self,
        src: &Source,
        model_mode: &Option<String>,
        graph_src: &Source,
        graph: &mut GraphSpec,
    ) -> Result<Option<AttentionMode>> {
        let parse = |s: &Source, path: &[&str], text: &str| {
            AttentionMode::from_name(text).ok_or_else(|| {
                s.error_at(
                    path,
                    format!("unknown attention mode `{text}` (eager, flash or flash-causal)"),
                )
            })
        };
        let mut tagged = false;
        for b in &graph.blocks {
            for o in &b.ops {
                if let Some(t) = &o.attention {
                    if t != "eager" && t != "flash" {
                        return Err(graph_src.error_at(
                            &["blocks", &b.name, &o.name, "attention"],
                            format!(
                                "operator `{}`: attention tag `{t}` is neither eager nor flash",
                                o.name
                            ),
                        ));
                    }
                    tagged = true;
                }
            }
        }
        let from_model = match model_mode {
            Some(m) => Some(parse(src, &["attention"], m)?),
            None => None,
        };
        let from_graph = match &graph.attention {
            Some(m) => Some(parse(graph_src, &["attention"], m)?),
            None => None,
        };
        if !tagged {
            if let Some(m) = self.attention.or(from_model) {
                if m != AttentionMode::Eager {
                    return Err(Error::Usage(format!(
                        "attention `{}`: this model's graph has no fused-attention operators (tag them `attention: flash`)",
                        m.name()
                    )));
                }
            }
            return Ok(None);
        }
        let mode = self
            .attention
            .or(from_model)
            .or(from_graph)
            .unwrap_or(AttentionMode::Eager);
        for b in &mut graph.blocks {
            b.ops
                .retain(|o| o.attention.as_deref().is_none_or(|t| t == mode.tag()));
            if mode == AttentionMode::FlashCausal {
                for o in b.ops.iter_mut().filter(|o| o.attention.is_some()) {
                    if let Some(w) = o.bind.0.get_mut("w") {
                        *w = super::spec::FormulaText("1/2".into());
                    }
                }
            }
        }
        Ok(Some(mode))
    }
}

/// The rule whose operators `dropout: false` takes out.
pub const DROPOUT_RULE: &str = "dropout";

/// `graph` with its dropout operators (rule [`DROPOUT_RULE`]) taken out, each reader of one
/// reading the dropout's own input instead: dropout at probability 0 returns its input
/// (PyTorch's `dropout` runs no kernel then, and autograd keeps no mask). A block's `input` or
/// `output` that names a dropout names that input too.
fn without_dropout(graph: &mut GraphSpec) {
    // Dropout name → its input, over the blocks so far (a block's `input` names an operator
    // of an earlier block).
    let mut through: BTreeMap<String, String> = BTreeMap::new();
    let resolve = |map: &BTreeMap<String, String>, name: &str| -> String {
        let mut n = name.to_string();
        // A chain of dropouts ends; the bound keeps a malformed self-reference from looping.
        for _ in 0..=map.len() {
            match map.get(&n) {
                Some(next) if *next != n => n = next.clone(),
                _ => break,
            }
        }
        n
    };
    for b in &mut graph.blocks {
        if let Some(i) = &b.input {
            b.input = Some(resolve(&through, i));
        }
        let mut local: BTreeMap<String, String> = BTreeMap::new();
        for o in &b.ops {
            if o.op == DROPOUT_RULE && o.inputs.0.len() == 1 {
                if let Some((_, x)) = o.inputs.0.iter().next() {
                    local.insert(o.name.clone(), x.clone());
                }
            }
        }
        if local.is_empty() {
            continue;
        }
        b.ops
            .retain(|o| !(o.op == DROPOUT_RULE && local.contains_key(&o.name)));
        for o in &mut b.ops {
            for (_, v) in o.inputs.0.iter_mut() {
                *v = resolve(&local, v);
            }
        }
        if let Some(out) = &b.output {
            b.output = Some(resolve(&local, out));
        }
        through.extend(local.keys().map(|k| (k.clone(), resolve(&local, k))));
    }
}

/// The role of the global batch's symbol (`roles: {batch: B}` in a graph).
pub const ROLE_BATCH: &str = "batch";

/// The symbol roles a graph may declare, each with the conventional name a graph that declares
/// no roles is read with.
pub const SYMBOL_ROLES: [(&str, &str); 14] = [
    (ROLE_BATCH, "B"),
    ("sequence", "S"),
    ("vocab", "V"),
    ("heads", "NH"),
    ("layer", "L"),
    ("hidden", "H"),
    ("ffn", "F"),
    ("kv_heads", "KV"),
    ("head_dim", "D"),
    ("positions", "P"),
    ("experts", "E"),
    ("top_k", "K"),
    ("expert_groups", "NG"),
    ("groups_per_token", "TG"),
];

/// The batch symbol and the other roles a graph declares (`roles: {batch: SYMBOL, sequence:
/// SYMBOL, …}`), refusing unknown roles, symbols the graph does not have and a symbol given two
/// roles, at their line. A graph that declares no roles gets the roles of the conventional names
/// it has ([`SYMBOL_ROLES`]), as graphs written before roles were declared (imports) do; the
/// inference is recorded in [`Roles::inferred`].
fn symbol_roles(
    src: &Source,
    graph: &GraphSpec,
    symbols: &BTreeMap<String, String>,
) -> Result<(Option<String>, Roles)> {
    let mut found: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut inferred = Vec::new();
    if graph.roles.0.is_empty() {
        for (role, name) in SYMBOL_ROLES {
            if symbols.contains_key(name) {
                found.insert(role, name.to_string());
                inferred.push((role, name.to_string()));
            }
        }
    }
    let known: Vec<&str> = SYMBOL_ROLES.iter().map(|(r, _)| *r).collect();
    for (role, symbol) in &graph.roles.0 {
        let Some(&(role, _)) = SYMBOL_ROLES.iter().find(|(r, _)| r == role) else {
            return Err(src.error_at(
                &["roles", role],
                format!(
                    "unknown role `{role}` (the symbol roles: {})",
                    known.join(", ")
                ),
            ));
        };
        if !symbols.contains_key(symbol) {
            return Err(src.error_at(
                &["roles", role],
                format!(
                    "role `{role}`: unknown symbol `{symbol}` (the graph's symbols: {})",
                    symbols.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if let Some((other, _)) = found.iter().find(|(_, s)| *s == symbol) {
            return Err(src.error_at(
                &["roles", role],
                format!("role `{role}`: symbol `{symbol}` already has the role `{other}`"),
            ));
        }
        found.insert(role, symbol.clone());
    }
    let mut take = |role: &str| found.remove(role);
    let batch = take(ROLE_BATCH);
    let roles = Roles {
        sequence: take("sequence"),
        vocab: take("vocab"),
        heads: take("heads"),
        layer: take("layer"),
        hidden: take("hidden"),
        ffn: take("ffn"),
        kv_heads: take("kv_heads"),
        head_dim: take("head_dim"),
        positions: take("positions"),
        experts: take("experts"),
        top_k: take("top_k"),
        expert_groups: take("expert_groups"),
        groups_per_token: take("groups_per_token"),
        inferred,
    };
    Ok((batch, roles))
}

/// The role of attention's core operators (`role: attention-core` in a graph).
pub const ROLE_ATTENTION_CORE: &str = "attention-core";

/// Whether `s` names a model rather than a path (no separators, not empty).
fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && !s.contains(['/', '\\']) && s != "." && s != ".."
}

/// Directories searched for users' models by name: `./models`, then those of
/// `SYMSHARD_MODEL_PATH` (separated as `PATH` is), in order.
pub fn user_model_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = vec![std::path::PathBuf::from("models")];
    if let Some(p) = std::env::var_os("SYMSHARD_MODEL_PATH") {
        dirs.extend(std::env::split_paths(&p).filter(|d| !d.as_os_str().is_empty()));
    }
    dirs
}

/// Parses a symbol's value: a positive exact number.
pub fn symbol_value(v: &SymbolValue) -> std::result::Result<Rational, String> {
    let p = Poly::parse(&v.value).map_err(|e| format!("malformed value `{}`: {e}", v.value))?;
    let r = p
        .as_constant()
        .ok_or_else(|| format!("value `{}` must be a number", v.value))?;
    if !r.is_positive() {
        return Err(format!("value `{}` must be positive", v.value));
    }
    Ok(r)
}

/// Graph inputs with their shapes.
type GraphInputs = Vec<(String, Vec<Poly>)>;

struct GraphBuilder<'a> {
    src: &'a Source,
    rules: &'a RuleSet,
    /// The rules applied so far, one copy each, shared by the operators applying them.
    applied: std::cell::RefCell<BTreeMap<String, std::sync::Arc<OpRule>>>,
    symbols: &'a BTreeMap<String, String>,
    values: &'a Bindings,
}

/// A resolved name: what it is and its shape.
#[derive(Clone)]
enum Named {
    Input(Vec<Poly>),
    Op {
        block: usize,
        node: NodeIndex,
        shape: Vec<Poly>,
    },
}

impl GraphBuilder<'_> {
    fn err(&self, path: &[&str], msg: impl Into<String>) -> Error {
        self.src.error_at(path, msg)
    }

    fn formula(&self, path: &[&str], text: &str) -> Result<Poly> {
        self.formula_from(path, text, false)
    }

    /// A formula that must be positive, or also zero where `zero_ok` (rule parameters such as
    /// a convolution's padding, which are not sizes).
    fn formula_from(&self, path: &[&str], text: &str, zero_ok: bool) -> Result<Poly> {
        let p = Poly::parse(text)
            .map_err(|e| self.err(path, format!("malformed formula `{text}`: {e}")))?;
        for s in p.symbols() {
            if !self.symbols.contains_key(&s) {
                let mut q = path.to_vec();
                q.push(&s);
                return Err(self.err(&q, format!("undefined symbol `{s}` in `{text}`")));
            }
        }
        if p.is_zero() {
            if zero_ok {
                return Ok(p);
            }
            return Err(self.err(path, format!("size `{text}` is zero")));
        }
        // Sizes must be positive integers wherever the symbols have values.
        if p.symbols().iter().all(|s| self.values.contains_key(s)) {
            if let Err(e) = p.eval(self.values) {
                return Err(self.err(path, format!("size `{text}`: {e}")));
            }
            check_size(|| "size".into(), &p, self.values, zero_ok)
                .map_err(|e| self.err(path, e.to_string()))?;
        }
        Ok(p)
    }

    fn build(&self, g: &GraphSpec) -> Result<(GraphInputs, Vec<Block>)> {
        let mut names: BTreeMap<String, Named> = BTreeMap::new();
        let mut inputs = Vec::new();
        for (name, spec) in &g.inputs.0 {
            if let Some(d) = &spec.dtype {
                if Dtype::from_name(d).is_none() {
                    return Err(self.err(
                        &["inputs", name, d],
                        format!("unknown dtype `{d}` for input `{name}`"),
                    ));
                }
            }
            let dims = spec
                .dims
                .iter()
                .map(|d| self.formula(&["inputs", name], d))
                .collect::<Result<Vec<_>>>()?;
            names.insert(name.clone(), Named::Input(dims.clone()));
            inputs.push((name.clone(), dims));
        }
        if g.blocks.is_empty() {
            return Err(self.err(
                &["blocks"],
                "the graph has no blocks: a model needs at least one operator",
            ));
        }
        let mut blocks = Vec::new();
        for (bi, b) in g.blocks.iter().enumerate() {
            if b.ops.is_empty() {
                return Err(self.err(
                    &["blocks", &b.name],
                    format!("block `{}` has no operators", b.name),
                ));
            }
            if names.contains_key(&b.name) {
                return Err(self.err(&["blocks", &b.name], format!("duplicate name `{}`", b.name)));
            }
            let repeat = match &b.repeat {
                Some(r) => self.formula(&["blocks", &b.name, "repeat"], r)?,
                None => Poly::one(),
            };
            let block_input = match &b.input {
                Some(i) => Some(self.lookup(&names, &["blocks", &b.name, "input"], i)?),
                None => None,
            };
            if b.repeat.is_some() && (b.input.is_none() || b.output.is_none()) {
                return Err(self.err(
                    &["blocks", &b.name, "repeat"],
                    format!("repeated block `{}` needs `input` and `output`", b.name),
                ));
            }
            let (mut graph, local) =
                self.block_graph(bi, b, &names, &blocks, block_input.as_ref())?;
            mark_routers(bi, &mut graph, &mut blocks);
            let order = toposort(&graph, None).map_err(|cycle| {
                let name = graph[cycle.node_id()].name.clone();
                self.err(
                    &["blocks", &name],
                    format!("cycle: operator `{name}` depends on its own output"),
                )
            })?;
            let output = self.block_output(b, &graph, &local, &order, block_input.as_ref())?;
            register(&mut names, bi, &b.name, &graph, &local, output);
            blocks.push(Block {
                name: b.name.clone(),
                doc: b.doc.clone(),
                repeat,
                graph,
                order,
                output,
            });
        }
        Ok((inputs, blocks))
    }

    /// The operator graph of block `bi` (`b`): its nodes first, so that references in any order
    /// resolve and cycles are seen, then each operator's inputs, edges and shapes; with the node
    /// of each operator's name.
    fn block_graph(
        &self,
        bi: usize,
        b: &super::spec::BlockSpec,
        names: &BTreeMap<String, Named>,
        blocks: &[Block],
        block_input: Option<&Named>,
    ) -> Result<(DiGraph<OpNode, ()>, BTreeMap<String, NodeIndex>)> {
        let mut graph: DiGraph<OpNode, ()> = DiGraph::new();
        let mut local: BTreeMap<String, NodeIndex> = BTreeMap::new();
        // First pass: nodes, so that references in any order resolve and cycles are seen.
        for op in &b.ops {
            if names.contains_key(&op.name) || local.contains_key(&op.name) || op.name == "in" {
                return Err(self.err(
                    &["blocks", &op.name],
                    format!("duplicate name `{}`", op.name),
                ));
            }
            let node = graph.add_node(self.op_node(op)?);
            local.insert(op.name.clone(), node);
        }
        // Second pass: inputs, edges and shapes.
        for op in &b.ops {
            let node = local[&op.name];
            let rule = graph[node].rule.clone();
            for key in op.inputs.0.keys().chain(op.tied.0.keys()) {
                if rule.input(key).is_none() {
                    return Err(self.err(
                        &["blocks", &op.name, key],
                        format!(
                            "operator `{}` ({}) has no input `{key}`",
                            op.name, rule.name
                        ),
                    ));
                }
            }
            let ins = self.op_inputs(
                op,
                node,
                &rule,
                &Scope {
                    bi,
                    block: b,
                    names,
                    local: &local,
                    blocks,
                    block_input,
                },
                &mut graph,
            )?;
            graph[node].inputs = ins;
        }
        Ok((graph, local))
    }

    /// The rule `op` applies, one shared copy per rule.
    fn applied_rule(&self, op: &super::spec::OpSpec) -> Result<std::sync::Arc<OpRule>> {
        if let Some(r) = self.applied.borrow().get(&op.op) {
            return Ok(r.clone());
        }
        let rule = self.rules.get(&op.op).cloned().ok_or_else(|| {
            self.err(
                &["blocks", &op.name, "op", &op.op],
                format!("unknown operator `{}` in `{}`", op.op, op.name),
            )
        })?;
        let rule = std::sync::Arc::new(rule);
        self.applied
            .borrow_mut()
            .insert(op.op.clone(), rule.clone());
        Ok(rule)
    }

    /// An operator's node: its rule, its bindings checked against the rule, its `tp` split and
    /// its role (the first pass over a block, before any input is wired).
    fn op_node(&self, op: &super::spec::OpSpec) -> Result<OpNode> {
        let rule = self.applied_rule(op)?;
        let mut bind = BTreeMap::new();
        for (k, f) in &op.bind.0 {
            let known = rule.index(k).is_some() || rule.params.contains(k);
            if !known {
                return Err(self.err(
                    &["blocks", &op.name, "bind", k],
                    format!(
                        "operator `{}` ({}) has no index or parameter `{k}`",
                        op.name, rule.name
                    ),
                ));
            }
            let zero_ok = rule.index(k).is_none();
            bind.insert(
                k.clone(),
                self.formula_from(&["blocks", &op.name, "bind", k], &f.0, zero_ok)?,
            );
        }
        for needed in rule
            .indices
            .iter()
            .map(|i| &i.name)
            .chain(rule.params.iter())
        {
            if !bind.contains_key(needed) {
                return Err(self.err(
                    &["blocks", &op.name, "bind"],
                    format!(
                        "operator `{}` ({}) does not bind `{needed}`",
                        op.name, rule.name
                    ),
                ));
            }
        }
        if let Some(tp) = &op.tp {
            if rule.index(tp).is_none() {
                return Err(self.err(
                    &["blocks", &op.name, "tp"],
                    format!(
                        "operator `{}` ({}) has no index `{tp}` to split",
                        op.name, rule.name
                    ),
                ));
            }
        }
        let recompute = match op.recompute.as_deref() {
            None => None,
            Some(n) => match RecomputeModule::parse(n) {
                Ok(m) if m != RecomputeModule::CoreAttn => Some(m),
                _ => {
                    let declarable: Vec<RecomputeModule> = RecomputeModule::ALL
                        .into_iter()
                        .filter(|m| *m != RecomputeModule::CoreAttn)
                        .collect();
                    return Err(self.err(
                        &["blocks", &op.name, "recompute"],
                        format!(
                            "operator `{}`: unknown recompute module `{n}` (known: {}; the attention core is `role: {ROLE_ATTENTION_CORE}`)",
                            op.name,
                            RecomputeModule::list(&declarable, ", ")
                        ),
                    ));
                }
            },
        };
        let attention_core = match op.role.as_deref() {
                    None => op.attention.as_deref() == Some(AttentionMode::Eager.tag()),
                    Some(ROLE_ATTENTION_CORE) => true,
                    Some(other) => {
                        return Err(self.err(
                            &["blocks", &op.name, "role"],
                            format!(
                                "operator `{}`: unknown role `{other}` (the one role is `{ROLE_ATTENTION_CORE}`)",
                                op.name
                            ),
                        ))
                    }
                };
        Ok(OpNode {
            name: op.name.clone(),
            rule,
            bind,
            inputs: Vec::new(),
            tp: op.tp.clone(),
            doc: op.doc.clone(),
            attention_core,
            recompute,
            router: false,
        })
    }

    /// An operator's inputs, each with its producer (another operator, the block's or the
    /// graph's input, a parameter, a tied parameter or a buffer), edges added and shapes checked.
    fn op_inputs(
        &self,
        op: &super::spec::OpSpec,
        node: NodeIndex,
        rule: &crate::rules::OpRule,
        scope: &Scope,
        graph: &mut DiGraph<OpNode, ()>,
    ) -> Result<Vec<(String, Producer)>> {
        let (names, local, blocks, block_input) =
            (scope.names, scope.local, scope.blocks, scope.block_input);
        let (bi, b) = (scope.bi, scope.block);
        let mut ins = Vec::new();
        for t in &rule.inputs {
            let path = ["blocks", op.name.as_str(), t.name.as_str()];
            let given = op.inputs.0.get(&t.name);
            let tied = op.tied.0.get(&t.name);
            let producer = match (given, tied) {
                        (Some(_), Some(_)) => return Err(self.err(&path, format!("input `{}` of `{}` is both given and tied", t.name, op.name))),
                        (None, Some(target)) => {
                            if !t.param {
                                return Err(self.err(&path, format!("only parameters can be tied; `{}` of `{}` is not one", t.name, op.name)));
                            }
                            self.check_tied(blocks, graph, target, &path)?;
                            Producer::Tied(target.clone())
                        }
                        (Some(_), None) if t.param => {
                            return Err(self.err(&path, format!("`{}` is a parameter of `{}`: it is owned, not given (use `tied` to share one)", t.name, op.name)))
                        }
                        (None, None) if t.param => Producer::Param,
                        (None, None) if !t.grad && !t.dims.is_empty() && matches!(t.dtype, Dtype::Compute) => Producer::Buffer,
                        (None, None) => return Err(self.err(&["blocks", &op.name, "in"], format!("operator `{}` ({}) needs input `{}`", op.name, rule.name, t.name))),
                        (Some(r), None) => {
                            let (producer, shape) = if r == "in" {
                                match block_input {
                                    Some(Named::Input(s)) | Some(Named::Op { shape: s, .. }) => (Producer::BlockInput, s.clone()),
                                    None => return Err(self.err(&path, format!("`in` used in block `{}`, which has no `input`", b.name))),
                                }
                            } else if let Some(&n) = local.get(r) {
                                graph.add_edge(n, node, ());
                                let shape = graph[n].shape(&graph[n].rule.output);
                                (Producer::Op { block: bi, node: n }, shape)
                            } else {
                                match self.lookup(names, &path, r)? {
                                    Named::Input(s) => (Producer::GraphInput(r.clone()), s),
                                    Named::Op { block, node, shape } => (Producer::Op { block, node }, shape),
                                }
                            };
                            self.check_shape(&graph[node], t, &shape, r, &path)?;
                            producer
                        }
                    };
            ins.push((t.name.clone(), producer));
        }
        Ok(ins)
    }

    /// A block's output (its `output`, else its last operator), and for a repeated block the
    /// check that it keeps its input's shape.
    fn block_output(
        &self,
        b: &super::spec::BlockSpec,
        graph: &DiGraph<OpNode, ()>,
        local: &BTreeMap<String, NodeIndex>,
        order: &[NodeIndex],
        block_input: Option<&Named>,
    ) -> Result<Option<NodeIndex>> {
        let output = match &b.output {
            Some(o) => Some(*local.get(o).ok_or_else(|| {
                self.err(
                    &["blocks", &b.name, "output"],
                    format!(
                        "block output `{o}` is not an operator of block `{}`",
                        b.name
                    ),
                )
            })?),
            None => order.last().copied(),
        };
        if let (Some(out), Some(input), true) = (output, block_input, b.repeat.is_some()) {
            let in_shape = match input {
                Named::Input(s) | Named::Op { shape: s, .. } => s,
            };
            let out_shape = graph[out].shape(&graph[out].rule.output);
            let a: Poly = in_shape.iter().cloned().product();
            let o: Poly = out_shape.iter().cloned().product();
            if a != o {
                return Err(self.err(&["blocks", &b.name, "output"], format!("repeated block `{}` must keep its shape: input has {a} elements, output {o}", b.name)));
            }
        }
        Ok(output)
    }

    fn lookup(&self, names: &BTreeMap<String, Named>, path: &[&str], r: &str) -> Result<Named> {
        names.get(r).cloned().ok_or_else(|| {
            let mut p = path.to_vec();
            p.push(r);
            self.err(
                &p,
                format!("unknown tensor `{r}`: not a graph input, an earlier operator or block"),
            )
        })
    }

    fn check_tied(
        &self,
        blocks: &[Block],
        graph: &DiGraph<OpNode, ()>,
        target: &str,
        path: &[&str],
    ) -> Result<()> {
        let found = target.split_once('.').and_then(|(op, input)| {
            blocks
                .iter()
                .map(|b| &b.graph)
                .chain(std::iter::once(graph))
                .flat_map(|g| g.node_weights())
                .find(|n| n.name == op)
                .and_then(|n| n.rule.input(input).map(|t| t.param))
        });
        match found {
            Some(true) => Ok(()),
            _ => Err(self.err(path, format!("tied target `{target}` is not `operator.parameter` of an operator defined so far"))),
        }
    }

    fn check_shape(
        &self,
        node: &OpNode,
        t: &crate::rules::Tensor,
        shape: &[Poly],
        from: &str,
        path: &[&str],
    ) -> Result<()> {
        // Window inputs' extents are the least input that yields the output: the real input may
        // be up to stride − 1 larger, so only their element counts' other factors are compared.
        if !t.extents.is_empty() {
            return Ok(());
        }
        let want = node.elements(t);
        let have: Poly = shape.iter().cloned().product();
        if want != have {
            let dims: Vec<String> = node.shape(t).iter().map(|p| p.to_string()).collect();
            let got: Vec<String> = shape.iter().map(|p| p.to_string()).collect();
            return Err(self.err(path, format!(
                "shape mismatch: `{}` input `{}` expects [{}] ({} elements) but `{from}` gives [{}] ({} elements)",
                node.name, t.name, dims.join(", "), want, got.join(", "), have
            )));
        }
        Ok(())
    }
}
/// Marks the routers of block `bi` (`graph`, not yet in `blocks`): the operators, in it or in an
/// earlier block, whose output an operator reads through an input its rule names in `router:`.
fn mark_routers(bi: usize, graph: &mut DiGraph<OpNode, ()>, blocks: &mut [Block]) {
    let routers: Vec<(usize, NodeIndex)> = graph
        .node_weights()
        .flat_map(|n| {
            n.inputs
                .iter()
                .filter(|(name, _)| n.rule.router.contains(name))
        })
        .filter_map(|(_, p)| match p {
            Producer::Op { block, node } => Some((*block, *node)),
            _ => None,
        })
        .collect();
    for (block, node) in routers {
        if block == bi {
            graph[node].router = true;
        } else if let Some(b) = blocks.get_mut(block) {
            b.graph[node].router = true;
        }
    }
}

/// Names a block's operators, and the block itself by its output, for the blocks after it.
fn register(
    names: &mut BTreeMap<String, Named>,
    bi: usize,
    block: &str,
    graph: &DiGraph<OpNode, ()>,
    local: &BTreeMap<String, NodeIndex>,
    output: Option<NodeIndex>,
) {
    for (name, &n) in local {
        let shape = graph[n].shape(&graph[n].rule.output);
        names.insert(
            name.clone(),
            Named::Op {
                block: bi,
                node: n,
                shape,
            },
        );
    }
    if let Some(out) = output {
        let shape = graph[out].shape(&graph[out].rule.output);
        names.insert(
            block.to_string(),
            Named::Op {
                block: bi,
                node: out,
                shape,
            },
        );
    }
}

/// What an operator's inputs may name while a block is built: the names of earlier blocks and
/// inputs, the block's own operators, the blocks built so far and the block's input.
struct Scope<'a> {
    /// The block's index and spec.
    bi: usize,
    block: &'a super::spec::BlockSpec,
    names: &'a BTreeMap<String, Named>,
    local: &'a BTreeMap<String, NodeIndex>,
    blocks: &'a [Block],
    block_input: Option<&'a Named>,
}

/// The recompute modules some operator of `blocks` belongs to, `core_attn` (which needs no
/// declaration) first, in order.
fn declared_modules(blocks: &[Block]) -> Vec<RecomputeModule> {
    let mut found = vec![RecomputeModule::CoreAttn];
    found.extend(
        blocks
            .iter()
            .flat_map(|b| b.ops().filter_map(|o| o.recompute)),
    );
    found.sort();
    found.dedup();
    found
}

/// The values a model file binds (`symbols`, then `defaults`), where each came from, and the
/// defaults marked `assumed`.
struct SymbolValues {
    values: Bindings,
    sources: BTreeMap<String, String>,
    assumed: BTreeSet<String>,
}

/// Reads the values of `spec`'s `symbols` and `defaults`: each names a symbol of the graph
/// (`symbols`), once, and only a default may be `assumed`.
fn symbol_values(
    src: &Source,
    spec: &ModelFile,
    symbols: &BTreeMap<String, String>,
) -> Result<SymbolValues> {
    let mut values = Bindings::new();
    let mut sources = BTreeMap::new();
    let mut assumed = BTreeSet::new();
    for (section, map) in [("symbols", &spec.symbols), ("defaults", &spec.defaults)] {
        for (name, v) in &map.0 {
            if !symbols.contains_key(name) {
                return Err(src.error_at(
                    &[section, name],
                    format!(
                        "unknown symbol `{name}` (the graph's symbols: {})",
                        symbols.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if values.contains_key(name) {
                return Err(src.error_at(&[section, name], format!("duplicate name `{name}`")));
            }
            let value = symbol_value(v)
                .map_err(|m| src.error_at(&[section, name], format!("symbol `{name}`: {m}")))?;
            values.insert(name.clone(), value);
            if let Some(s) = &v.source {
                sources.insert(name.clone(), s.clone());
            }
            if v.assumed {
                // A placeholder for a size, not a property of the model.
                if section != "defaults" {
                    return Err(src.error_at(
                            &[section, name],
                            format!("symbol `{name}`: `assumed` marks a default (in `defaults`), not one of the model's own values"),
                        ));
                }
                assumed.insert(name.clone());
            }
        }
    }
    Ok(SymbolValues {
        values,
        sources,
        assumed,
    })
}

/// The layer role names what a block repeats: a declared role that no block repeats is refused;
/// an inferred one is dropped.
fn check_layer_role(graph_src: &Source, roles: &mut Roles, blocks: &[Block]) -> Result<()> {
    if let Some(l) = roles.layer.clone() {
        if !blocks.iter().any(|b| b.repeat.degree_in(&l).1 >= 1) {
            if roles.inferred.is_empty() {
                return Err(graph_src.error_at(
                    &["roles", "layer"],
                    format!("role `layer`: no block repeats `{l}` times"),
                ));
            }
            roles.layer = None;
            roles.inferred.retain(|(r, _)| *r != "layer");
        }
    }
    Ok(())
}
