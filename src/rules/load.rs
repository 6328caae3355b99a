//! Loading and validating operator rule files.

use super::law::IndexKind;
use super::rule::{Dtype, FlopClass, Flops, Index, OpRule, Role, Tensor};
use super::spec::{RuleFile, SavedSpec, TensorSpec};
use crate::diag::Source;
use crate::error::{Error, Result};
use crate::sym::Poly;
use std::collections::BTreeSet;
use std::path::Path;

/// Names that rules may not use for indices or parameters: the axis sizes of split tables.
pub const RESERVED: [&str; 6] = ["p_a", "p_b", "p_dp", "p_tp", "p_cp", "output"];

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses and validates one rule file. `expect_name` (the file stem) must equal its `name`.
pub fn load_rule(src: &Source, expect_name: Option<&str>) -> Result<OpRule> {
    let spec: RuleFile = src.parse()?;
    Validator { src, spec: &spec }.build(expect_name)
}

/// Loads a rule from a file on disk.
pub fn load_rule_file(path: &Path) -> Result<OpRule> {
    let src = Source::read(path)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string);
    load_rule(&src, stem.as_deref())
}

struct Validator<'a> {
    src: &'a Source,
    spec: &'a RuleFile,
}

impl Validator<'_> {
    fn err(&self, path: &[&str], msg: impl Into<String>) -> Error {
        self.src.error_at(path, msg)
    }

    fn build(&self, expect_name: Option<&str>) -> Result<OpRule> {
        let spec = self.spec;
        if !is_identifier(&spec.name) {
            return Err(self.err(
                &["name"],
                format!("rule name `{}` is not an identifier", spec.name),
            ));
        }
        let indices = self.indices()?;
        let inputs = self.inputs(&indices)?;
        let output = self.tensor(&["output"], "y", &spec.output, &indices)?;
        if output.param {
            return Err(self.err(&["output"], "the output cannot be a parameter"));
        }
        self.check_kinds(&indices, &inputs, &output)?;
        let flops = self.flops()?;
        let terms = self.terms(&inputs, &flops)?;
        let class = self.class(&indices, &flops)?;
        let saved = self.saved(&inputs, &output, &indices)?;
        let io = match &spec.io {
            Some(io) => Some((
                self.formula(&["io", "read"], &io.read)?,
                self.formula(&["io", "write"], &io.write)?,
            )),
            None => None,
        };
        let fused_attention = match spec.kernel.as_deref() {
            None => false,
            Some("fused-attention") => true,
            Some(k) => {
                return Err(self.err(
                    &["kernel"],
                    format!("unknown kernel `{k}` (expected fused-attention)"),
                ))
            }
        };
        let recompute_flops = self.recompute_flops(&flops)?;
        self.check_kernel_flags(&flops, &inputs, &output)?;
        let role = self.role(&inputs)?;
        let ring = self.named_inputs("ring", &self.spec.ring, &inputs)?;
        let router = self.named_inputs("router", &self.spec.router, &inputs)?;
        // Last: a file that is wrong in itself reports that first.
        if let Some(stem) = expect_name {
            if stem != spec.name {
                return Err(self.err(
                    &["name"],
                    format!(
                        "rule name `{}` differs from its file name `{stem}`",
                        spec.name
                    ),
                ));
            }
        }
        Ok(OpRule {
            role,
            ring,
            router,
            fused_attention,
            recompute_flops,
            param_grad_kernel: spec.param_grad_kernel,
            fp32_passes: spec.fp32_passes,
            name: spec.name.clone(),
            doc: spec.doc.clone(),
            file: self.src.file.clone(),
            class,
            params: spec.params.clone(),
            indices,
            inputs,
            output,
            terms,
            flops,
            saved,
            io,
        })
    }

    /// The parameters' and indices' names (each once), and the indices with their kinds.
    fn indices(&self) -> Result<Vec<Index>> {
        let spec = self.spec;
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for p in &spec.params {
            self.check_name(&["params", p], p, "parameter")?;
            if !names.insert(p) {
                return Err(self.err(&["params", p], format!("duplicate name `{p}`")));
            }
        }
        let mut indices = Vec::new();
        for (name, ix) in &spec.indices.0 {
            self.check_name(&["indices", name], name, "index")?;
            if !names.insert(name) {
                return Err(self.err(
                    &["indices", name],
                    format!("duplicate name `{name}`: already a parameter"),
                ));
            }
            let kind = IndexKind::from_name(&ix.kind).ok_or_else(|| {
                self.err(
                    &["indices", name, &ix.kind],
                    format!(
                        "unknown index kind `{}` for index `{name}` (expected one of: map, reduce-sum, reduce-max, stat, window, opaque)",
                        ix.kind
                    ),
                )
            })?;
            if (ix.stats.is_some() || ix.backward_stats.is_some()) && kind != IndexKind::Stat {
                return Err(self.err(
                    &["indices", name, "stats"],
                    format!("index `{name}` is `{kind}`: only stat indices take `stats`"),
                ));
            }
            if ix.halo.is_some() && kind != IndexKind::Window {
                return Err(self.err(
                    &["indices", name, "halo"],
                    format!("index `{name}` is `{kind}`: only window indices take `halo`"),
                ));
            }
            let stats = ix.stats.unwrap_or(1);
            if kind == IndexKind::Stat && stats == 0 {
                return Err(self.err(
                    &["indices", name, "stats"],
                    format!("index `{name}`: `stats` must be at least 1"),
                ));
            }
            let halo = match (&ix.halo, kind) {
                (Some(h), _) => Some(self.formula(&["indices", name, "halo"], h)?),
                (None, IndexKind::Window) => {
                    return Err(self.err(
                        &["indices", name],
                        format!("window index `{name}` needs a `halo` formula"),
                    ))
                }
                _ => None,
            };
            indices.push(Index {
                name: name.clone(),
                kind,
                stats,
                backward_stats: ix.backward_stats.unwrap_or(stats),
                halo,
                doc: ix.doc.clone(),
            });
        }
        if indices.is_empty() {
            return Err(self.err(&["indices"], "a rule needs at least one index"));
        }
        Ok(indices)
    }

    /// The inputs, in index notation (`y` is the output's).
    fn inputs(&self, indices: &[Index]) -> Result<Vec<Tensor>> {
        let spec = self.spec;
        let mut inputs = Vec::new();
        for (name, t) in &spec.inputs.0 {
            self.check_name(&["inputs", name], name, "input")?;
            if name == "y" {
                return Err(self.err(
                    &["inputs", name],
                    "input name `y` is reserved for the output",
                ));
            }
            inputs.push(self.tensor(&["inputs", name], name, t, indices)?);
        }
        if inputs.is_empty() {
            return Err(self.err(&["inputs"], "a rule needs at least one input"));
        }
        Ok(inputs)
    }

    /// How the FLOPs are known: both formulas stated, or neither (an einsum).
    fn flops(&self) -> Result<Flops> {
        let spec = self.spec;
        Ok(match (&spec.flops, &spec.backward_flops) {
            (None, None) => Flops::Einsum,
            (Some(f), Some(b)) => Flops::Explicit {
                forward: self.formula(&["flops"], f)?,
                backward: self.formula(&["backward_flops"], b)?,
            },
            (Some(_), None) => return Err(self.err(
                &["flops"],
                "`flops` is given but `backward_flops` is not: give both, or neither for an einsum",
            )),
            (None, Some(_)) => return Err(self.err(
                &["backward_flops"],
                "`backward_flops` is given but `flops` is not: give both, or neither for an einsum",
            )),
        })
    }

    /// The FLOP class: stated, or matmul for an einsum that reduces.
    fn class(&self, indices: &[Index], flops: &Flops) -> Result<FlopClass> {
        let spec = self.spec;
        Ok(match spec.class.as_deref() {
            Some("matmul") => FlopClass::Matmul,
            Some("other") => FlopClass::Other,
            Some(c) => {
                return Err(self.err(
                    &["class", c],
                    format!("unknown class `{c}` (expected matmul or other)"),
                ))
            }
            None => {
                let reduces = indices.iter().any(|i| i.kind == IndexKind::ReduceSum);
                if matches!(flops, Flops::Einsum) && reduces {
                    FlopClass::Matmul
                } else {
                    FlopClass::Other
                }
            }
        })
    }

    /// The tensors kept for the backward pass: inputs, the output, or new tensors with dims.
    fn saved(&self, inputs: &[Tensor], output: &Tensor, indices: &[Index]) -> Result<Vec<Tensor>> {
        let spec = self.spec;
        let mut saved = Vec::new();
        let mut saved_names = BTreeSet::new();
        for s in &spec.saved {
            let t =
                match s {
                    SavedSpec::Name(n) if n == "output" => output.clone(),
                    SavedSpec::Name(n) => inputs
                        .iter()
                        .find(|t| &t.name == n)
                        .cloned()
                        .ok_or_else(|| {
                            self.err(
                                &["saved", n],
                                format!("saved tensor `{n}` is neither an input nor `output`"),
                            )
                        })?,
                    SavedSpec::Tensor(st) => {
                        if inputs.iter().any(|t| t.name == st.name) || st.name == "output" {
                            return Err(self.err(
                                &["saved", &st.name],
                                format!(
                                    "duplicate name `{}`: saved tensors with dims need a new name",
                                    st.name
                                ),
                            ));
                        }
                        let ts = TensorSpec {
                            dims: st.dims.clone(),
                            dtype: st.dtype.clone(),
                            grad: Some(false),
                            ..TensorSpec::default()
                        };
                        self.tensor(&["saved", &st.name], &st.name, &ts, indices)?
                    }
                };
            if !saved_names.insert(t.name.clone()) {
                return Err(self.err(
                    &["saved", &t.name],
                    format!("duplicate name `{}` in saved", t.name),
                ));
            }
            saved.push(t);
        }
        Ok(saved)
    }

    /// FLOPs the backward kernel spends recomputing forward work (explicit-FLOP rules only).
    fn recompute_flops(&self, flops: &Flops) -> Result<Poly> {
        let spec = self.spec;
        Ok(match &spec.recompute_flops {
            Some(f) => {
                if matches!(flops, Flops::Einsum) {
                    return Err(self.err(
                        &["recompute_flops"],
                        "`recompute_flops` needs explicit `flops` and `backward_flops`",
                    ));
                }
                self.formula(&["recompute_flops"], f)?
            }
            None => Poly::zero(),
        })
    }

    /// `param_grad_kernel` and `fp32_passes` only where they mean something.
    fn check_kernel_flags(&self, flops: &Flops, inputs: &[Tensor], output: &Tensor) -> Result<()> {
        let spec = self.spec;
        if spec.param_grad_kernel {
            if matches!(flops, Flops::Einsum) {
                return Err(self.err(
                    &["param_grad_kernel"],
                    "`param_grad_kernel` is for rules with explicit `flops` (an einsum's terms of \
                     one parameter alone are their own kernel already)",
                ));
            }
            if !inputs.iter().any(|t| t.param) {
                return Err(self.err(
                    &["param_grad_kernel"],
                    "`param_grad_kernel` needs a parameter input (`param: true`)",
                ));
            }
        }
        let over_logits = inputs
            .first()
            .is_some_and(|t| t.grad && t.dims.len() > output.dims.len());
        if spec.fp32_passes && (matches!(flops, Flops::Einsum) || !over_logits) {
            return Err(self.err(
                &["fp32_passes"],
                "`fp32_passes` is for rules with explicit `flops` whose first input takes a \
                 gradient and has more dimensions than the output (a loss over logits)",
            ));
        }
        Ok(())
    }

    /// The declared role, if any: a known name; an expert GEMM has the experts' stacked weights
    /// (a parameter of three or more dimensions, experts first), and a gate names its router's
    /// logits.
    fn role(&self, inputs: &[Tensor]) -> Result<Option<Role>> {
        let Some(name) = self.spec.role.as_deref() else {
            return Ok(None);
        };
        let role = Role::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Role::ALL.iter().map(|(n, _)| *n).collect();
            self.err(
                &["role"],
                format!(
                    "unknown role `{name}` (expected one of: {})",
                    known.join(", ")
                ),
            )
        })?;
        if role == Role::ExpertGemm && !inputs.iter().any(|t| t.param && t.dims.len() >= 3) {
            return Err(self.err(
                &["role"],
                "role `expert-gemm` needs the experts' stacked weights: a parameter input of \
                 three or more dimensions",
            ));
        }
        if role == Role::MoeGate && self.spec.router.is_empty() {
            return Err(self.err(
                &["role"],
                "role `moe-gate` needs `router:`, the input that holds the router's logits",
            ));
        }
        Ok(Some(role))
    }

    /// The inputs a field names (`ring`: what a context-parallel ring passes; `router`: what
    /// holds a router's logits): each one of the rule's inputs, once, and not a parameter.
    fn named_inputs(
        &self,
        field: &str,
        names: &[String],
        inputs: &[Tensor],
    ) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        for name in names {
            let path = [field, name.as_str()];
            match inputs.iter().find(|t| t.name == *name) {
                None => {
                    return Err(self.err(
                        &path,
                        format!("`{field}` names `{name}`, which is no input"),
                    ))
                }
                Some(t) if t.param => {
                    return Err(self.err(
                        &path,
                        format!("`{field}` names `{name}`, a parameter: it names inputs that other operators make"),
                    ))
                }
                Some(_) if out.contains(name) => {
                    return Err(self.err(&path, format!("`{field}` names `{name}` twice")))
                }
                Some(_) => out.push(name.clone()),
            }
        }
        Ok(out)
    }

    fn check_name(&self, path: &[&str], name: &str, what: &str) -> Result<()> {
        if !is_identifier(name) {
            return Err(self.err(path, format!("{what} name `{name}` is not an identifier")));
        }
        if RESERVED.contains(&name) {
            return Err(self.err(path, format!("{what} name `{name}` is reserved")));
        }
        Ok(())
    }

    /// Parses a formula whose symbols must be the rule's indices or parameters.
    fn formula(&self, path: &[&str], text: &str) -> Result<Poly> {
        let poly = Poly::parse(text).map_err(|e| {
            let (line, column) = self.src.locate(path);
            Error::at(
                &self.src.file,
                line,
                column,
                format!("malformed formula `{text}`: {e}"),
            )
        })?;
        for s in poly.symbols() {
            let known = self.spec.params.contains(&s) || self.spec.indices.0.contains_key(&s);
            if !known {
                let mut p: Vec<&str> = path.to_vec();
                p.push(&s);
                return Err(self.err(&p, format!("undefined symbol `{s}` in formula `{text}` (not an index or parameter of this rule)")));
            }
        }
        Ok(poly)
    }

    fn tensor(
        &self,
        path: &[&str],
        name: &str,
        t: &TensorSpec,
        indices: &[Index],
    ) -> Result<Tensor> {
        let mut dims = Vec::new();
        let mut seen = BTreeSet::new();
        for d in &t.dims {
            let group: Vec<String> = d.split('*').map(|s| s.trim().to_string()).collect();
            for i in &group {
                let mut p = path.to_vec();
                p.push(i);
                if !indices.iter().any(|x| &x.name == i) {
                    return Err(self.err(&p, format!("undefined index `{i}` in tensor `{name}`")));
                }
                if !seen.insert(i.clone()) {
                    return Err(
                        self.err(&p, format!("index `{i}` appears twice in tensor `{name}`"))
                    );
                }
            }
            dims.push(group);
        }
        let dtype = match &t.dtype {
            None => Dtype::Compute,
            Some(n) => Dtype::from_name(n).ok_or_else(|| {
                let mut p = path.to_vec();
                p.push(n);
                self.err(&p, format!("unknown dtype `{n}` for tensor `{name}`"))
            })?,
        };
        let mut extents = Vec::new();
        for (i, f) in &t.extents {
            let mut p = path.to_vec();
            p.push("extents");
            p.push(i);
            if !seen.contains(i) {
                return Err(self.err(
                    &p,
                    format!("extent given for index `{i}`, which tensor `{name}` does not have"),
                ));
            }
            extents.push((i.clone(), self.formula(&p, f)?));
        }
        let float = Dtype::carries_gradient(t.dtype.as_deref());
        let grad = t.grad.unwrap_or(float);
        if grad && !float {
            return Err(self.err(
                path,
                format!("tensor `{name}` has integer dtype and cannot take a gradient"),
            ));
        }
        Ok(Tensor {
            name: name.to_string(),
            dims,
            param: t.param,
            grad,
            dtype,
            extents,
        })
    }

    fn check_kinds(&self, indices: &[Index], inputs: &[Tensor], output: &Tensor) -> Result<()> {
        for ix in indices {
            let n = &ix.name;
            let in_out = output.has(n);
            let in_inputs = inputs.iter().any(|t| t.has(n));
            let in_extents = inputs
                .iter()
                .chain(std::iter::once(output))
                .flat_map(|t| t.extents.iter())
                .any(|(_, e)| e.symbols().contains(n));
            let path = ["indices", n.as_str()];
            if !in_out && !in_inputs && !in_extents {
                return Err(self.err(&path, format!("index `{n}` is used by no tensor")));
            }
            match ix.kind {
                IndexKind::Map | IndexKind::Window if !in_out => {
                    return Err(self.err(
                        &path,
                        format!(
                            "{} index `{n}` must appear in the output (did you mean reduce-sum?)",
                            ix.kind
                        ),
                    ));
                }
                IndexKind::ReduceSum | IndexKind::ReduceMax if in_out => {
                    return Err(self.err(
                        &path,
                        format!(
                            "{} index `{n}` must not appear in the output (did you mean map?)",
                            ix.kind
                        ),
                    ));
                }
                IndexKind::Map
                | IndexKind::ReduceSum
                | IndexKind::ReduceMax
                | IndexKind::Window
                | IndexKind::Stat
                    if !in_inputs =>
                {
                    return Err(self.err(
                        &path,
                        format!("{} index `{n}` appears in no input", ix.kind),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn terms(&self, inputs: &[Tensor], flops: &Flops) -> Result<Vec<Vec<usize>>> {
        let Some(spec_terms) = &self.spec.terms else {
            return Ok(vec![(0..inputs.len()).collect()]);
        };
        if !matches!(flops, Flops::Einsum) {
            return Err(self.err(
                &["terms"],
                "`terms` describe an einsum; a rule with explicit `flops` has none",
            ));
        }
        let mut used = vec![false; inputs.len()];
        let mut out = Vec::new();
        for term in spec_terms {
            let mut t = Vec::new();
            for name in term {
                let k = inputs.iter().position(|i| &i.name == name).ok_or_else(|| {
                    self.err(
                        &["terms", name],
                        format!("term names `{name}`, which is not an input"),
                    )
                })?;
                if used[k] {
                    return Err(self.err(
                        &["terms", name],
                        format!("input `{name}` is in more than one term"),
                    ));
                }
                used[k] = true;
                t.push(k);
            }
            if t.is_empty() {
                return Err(self.err(&["terms"], "empty term"));
            }
            out.push(t);
        }
        if let Some(k) = used.iter().position(|u| !u) {
            return Err(self.err(
                &["terms"],
                format!("input `{}` is in no term", inputs[k].name),
            ));
        }
        Ok(out)
    }
}
