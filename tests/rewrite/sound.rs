//! Soundness checks: build small numeric programs for a rule, saturate, and execute every node of
//! every e-class in the reference interpreter; nodes of one class must denote the same tensor
//! with the same placement.

use super::interp::{Interp, SimMesh, Val};
use super::tensor::{Rng, T};
use egg::{AstSize, Extractor, Id, Language, RecExpr};
use std::collections::{BTreeMap, HashMap};
use symshard::rewrite::{Dist, DistEGraph};
use symshard::rules::{Dtype, IndexKind, OpRule, Placement};
use symshard::sym::Poly;

/// Numeric extents for `rule` on a mesh whose axes split into blocks of `base`.
pub fn extents(rule: &OpRule, base: usize) -> BTreeMap<String, usize> {
    let fixed: &[(&str, &str, usize)] = &[
        ("rope", "d", 4),
        ("concat", "m", 2),
        ("concat", "n", 3),
        ("split", "m", 2),
        ("split", "n", 3),
        ("conv2d", "kh", 3),
        ("conv2d", "kw", 3),
        ("conv2d_bias", "kh", 3),
        ("conv2d_bias", "kw", 3),
        ("conv2d_grouped", "kh", 3),
        ("conv2d_grouped", "kw", 3),
        ("conv2d_grouped_bias", "kh", 3),
        ("conv2d_grouped_bias", "kw", 3),
        ("maxpool2d", "kh", 3),
        ("maxpool2d", "kw", 3),
        ("avgpool2d", "kh", 2),
        ("avgpool2d", "kw", 2),
        ("avgpool2d", "stride", 2),
        ("avgpool2d", "pad", 0),
    ];
    let mut out = BTreeMap::new();
    for name in rule.indices.iter().map(|i| &i.name).chain(&rule.params) {
        let v = fixed
            .iter()
            .find(|(r, i, _)| *r == rule.name && i == name)
            .map(|(_, _, v)| *v)
            .unwrap_or(match name.as_str() {
                "stride" | "pad" => 1,
                _ => base,
            });
        out.insert(name.clone(), v);
    }
    out
}

fn poly_bind(ext: &BTreeMap<String, usize>) -> BTreeMap<String, Poly> {
    ext.iter()
        .map(|(k, v)| (k.clone(), Poly::int(*v as i64)))
        .collect()
}

/// The numeric global shape of a rule tensor.
pub fn shape(t: &symshard::rules::Tensor, ext: &BTreeMap<String, usize>) -> Vec<usize> {
    let b = poly_bind(ext);
    t.dims
        .iter()
        .map(|g| {
            g.iter()
                .map(|i| {
                    let p = t.extent(i).substitute_all(&b).expect("numeric extent");
                    usize::try_from(p.as_integer().expect("integer extent")).expect("size")
                })
                .product()
        })
        .collect()
}

/// Random global values for the rule's inputs; integer inputs (ids, labels) index the first
/// index that is neither theirs nor the output's.
pub fn inputs(rule: &OpRule, ext: &BTreeMap<String, usize>, seed: u64) -> HashMap<String, T> {
    let mut rng = Rng(seed | 1);
    let mut env = HashMap::new();
    for t in &rule.inputs {
        let s = shape(t, ext);
        let int = matches!(t.dtype, Dtype::Fixed(8));
        let bound = rule
            .indices
            .iter()
            .find(|i| !t.has(&i.name) && !rule.output.has(&i.name))
            .map(|i| ext[&i.name])
            .unwrap_or(1);
        let v = T::from_fn(&s, |_| {
            if int {
                (rng.next() % bound as u64) as f64
            } else {
                rng.float()
            }
        });
        env.insert(t.name.clone(), v);
    }
    env
}

/// `(op RULE {..} <> (tensor x [..]) ..)` with input `k` replaced by `wrap(k, tensor)`.
pub fn op_text(
    rule: &OpRule,
    ext: &BTreeMap<String, usize>,
    wrap: impl Fn(usize, String) -> String,
) -> String {
    let bind: Vec<String> = ext.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let ins: Vec<String> = rule
        .inputs
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let dims: Vec<String> = shape(t, ext).iter().map(|d| d.to_string()).collect();
            let bytes = match t.dtype {
                Dtype::Fixed(b) if b != 2 => format!(":{b}"),
                _ => String::new(),
            };
            wrap(
                k,
                format!("(tensor {} [{}]{bytes})", t.name, dims.join(",")),
            )
        })
        .collect();
    format!(
        "(op {} {{{}}} <> {})",
        rule.name,
        bind.join(","),
        ins.join(" ")
    )
}

/// Programs that exercise the rule's commuting rewrites: an input already gathered along a map
/// index; the output sharded along one.
pub fn commute_programs(
    rule: &OpRule,
    ext: &BTreeMap<String, usize>,
    axis: &str,
) -> Vec<RecExpr<Dist>> {
    let mut out = Vec::new();
    for ix in rule.indices.iter().filter(|i| i.kind == IndexKind::Map) {
        let outer =
            |t: &symshard::rules::Tensor| t.position(&ix.name).filter(|d| t.dims[*d][0] == ix.name);
        for (k, t) in rule.inputs.iter().enumerate() {
            if let Some(d) = outer(t) {
                out.push(op_text(rule, ext, |j, x| {
                    if j == k {
                        format!("(all_gather (shard {x} {d} {axis}) {d} {axis})")
                    } else {
                        x
                    }
                }));
            }
        }
        if let Some(d) = outer(&rule.output) {
            out.push(format!(
                "(shard {} {d} {axis})",
                op_text(rule, ext, |_, t| t)
            ));
        }
    }
    out.into_iter()
        .map(|p| p.parse().expect("program parses"))
        .collect()
}

/// Executes every node of every class; returns the number of nodes checked.
pub fn check_egraph(interp: &Interp, egraph: &DistEGraph) -> Result<usize, String> {
    let extractor = Extractor::new(egraph, AstSize);
    let mut memo: HashMap<Id, Val> = HashMap::new();
    let mut checked = 0;
    for class in egraph.classes() {
        let reference = class_value(interp, egraph, &extractor, &mut memo, class.id)?;
        let Val::Tensor(r) = reference else {
            continue;
        };
        let want = interp.denote(&r)?;
        for node in &class.nodes {
            let kids: Vec<Val> = node
                .children()
                .iter()
                .map(|c| class_value(interp, egraph, &extractor, &mut memo, *c))
                .collect::<Result<_, _>>()?;
            let refs: Vec<&Val> = kids.iter().collect();
            let got = interp
                .eval_node(node, &refs)
                .map_err(|e| format!("{node} in class {}: {e}", class.id))?;
            let got = got.tensor()?;
            let term = extractor.find_best(class.id).1;
            if got.layout != r.layout {
                return Err(format!(
                    "{node} placed {:?}, class {term} placed {:?}",
                    got.layout, r.layout
                ));
            }
            if !interp.denote(got)?.close(&want, 1e-9) {
                return Err(format!("{node} differs from {term}"));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

fn class_value(
    interp: &Interp,
    egraph: &DistEGraph,
    extractor: &Extractor<AstSize, Dist, symshard::rewrite::DistAnalysis>,
    memo: &mut HashMap<Id, Val>,
    class: Id,
) -> Result<Val, String> {
    let class = egraph.find(class);
    if let Some(v) = memo.get(&class) {
        return Ok(v.clone());
    }
    let node = extractor.find_best_node(class).clone();
    let kids: Vec<Val> = node
        .children()
        .iter()
        .map(|c| class_value(interp, egraph, extractor, memo, *c))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Val> = kids.iter().collect();
    let v = interp.eval_node(&node, &refs)?;
    memo.insert(class, v.clone());
    Ok(v)
}

/// The global value of a whole program.
pub fn run(interp: &Interp, expr: &RecExpr<Dist>) -> Result<(T, Vec<Placement>), String> {
    let v = interp.eval(expr)?;
    let d = v.tensor()?;
    Ok((interp.denote(d)?, d.layout.clone()))
}

/// A simulated mesh and its base extent (divisible by every axis).
pub fn meshes() -> Vec<(SimMesh, usize)> {
    let m = |axes: &[(&str, usize)]| SimMesh {
        axes: axes.iter().map(|(a, p)| (a.to_string(), *p)).collect(),
    };
    vec![
        (m(&[("a", 2)]), 4),
        (m(&[("a", 3)]), 3),
        (m(&[("a", 2), ("b", 2)]), 4),
    ]
}
