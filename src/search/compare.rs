//! One transformer layer's tensor-parallel layouts side by side: the family's Megatron-LM
//! annotations, the exact per-operator optimum, and D-Rec's recursive bisection — all priced
//! by the same exact model of cost (FLOP-equivalents per device).

use super::drec::drec;
use super::error::{AnnotatedDegree, SearchError};
use super::problem::{Axis, Choice, Problem};
use super::sp::{solve_bounded, Bounded, Search};
use crate::calib::Calibration;
use crate::model::Model;
use crate::sym::{Bindings, Rational};
use serde::Serialize;
use std::collections::BTreeMap;

/// One layout of the layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutRow {
    /// How it was found.
    pub method: String,
    /// Its exact cost, FLOP-equivalents per device for the whole batch.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub cost: Rational,
    /// Per operator: the cut on each axis (`index:atom`, or `-` for replicated).
    pub choices: BTreeMap<String, String>,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    /// Block analysed.
    pub block: String,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Layouts, cheapest first where known.
    pub rows: Vec<LayoutRow>,
    /// Notes on what could not be computed.
    pub notes: Vec<String>,
}

/// The family's annotated (`tp:`) layout: the annotated index cut on a feature atom, the rest
/// replicated.
pub fn annotated(model: &Model, bi: usize, p: &Problem) -> Vec<Choice> {
    let ann: BTreeMap<&str, Option<&str>> = model.blocks[bi]
        .ops()
        .map(|o| (o.name.as_str(), o.tp.as_deref()))
        .collect();
    p.ops
        .iter()
        .map(|o| {
            let i = ann.get(o.name.as_str()).copied().flatten();
            let cut = i.and_then(|i| {
                o.cuts
                    .iter()
                    .position(|c| c.index == i && is_feature(model, &c.atom, false))
            });
            vec![cut; p.axes.len()]
        })
        .collect()
}

fn labels(p: &Problem, a: &[Choice]) -> BTreeMap<String, String> {
    p.ops
        .iter()
        .zip(a)
        .filter(|(o, _)| !o.is_source())
        .map(|(o, c)| {
            let cuts: Vec<String> = c
                .iter()
                .map(|x| match x {
                    Some(k) => format!("{}:{}", o.cuts[*k].index, o.cuts[*k].atom),
                    None => "-".into(),
                })
                .collect();
            (o.name.clone(), cuts.join(" "))
        })
        .collect()
}

/// Leaves the batch to data parallelism and, unless `sequence`, the sequence to context and
/// sequence parallelism: a tensor-parallel axis cuts feature atoms only (hidden, heads, head
/// dimension, MLP, vocabulary). Cutting the batch or the sequence of an operator with weights
/// over it replicates those weights, their gradients and optimizer states on every device of
/// the axis and reduces the weight gradients over it: data (or context) parallelism under
/// another name, whose memory this comparison does not price and which `rank` already
/// searches as dp and cp. With `B·S` large such a layout is much cheaper than Megatron-LM's,
/// because a weight-gradient reduction moves far fewer bytes than per-token activation
/// all-reduces.
pub fn tensor_only(model: &Model, mut p: Problem, sequence: bool) -> Problem {
    for o in &mut p.ops {
        o.cuts.retain(|c| is_feature(model, &c.atom, sequence));
    }
    p
}

/// Whether a tensor-parallel axis may cut `atom`: not the model's batch, nor its sequence
/// (its `sequence` role; an image side is not one) unless `sequence` allows it.
pub(crate) fn is_feature(model: &Model, atom: &str, sequence: bool) -> bool {
    model.batch.as_deref() != Some(atom)
        && (sequence || model.roles.sequence.as_deref() != Some(atom))
}

/// Choice expansions the programme may make per operator before it keeps a beam: the number of
/// states kept is this divided by the operator's most choices, so each operator costs at most
/// about this many steps (a few seconds in all on one core).
pub const EXPANSIONS: usize = 250_000;

/// The search of `p`: exact when its states stay within [`EXPANSIONS`] per operator, otherwise
/// a beam of the cheapest states that reports a proven lower bound.
pub fn search_for(p: &Problem, bound: Option<Rational>, guide: Option<Vec<Choice>>) -> Search {
    // Counted up to the expansions only: beyond them the beam is one state anyway, and an
    // operator over many axes may have millions of choices.
    let widest = (0..p.ops.len())
        .map(|v| p.count_choices(v, EXPANSIONS).unwrap_or(EXPANSIONS))
        .max()
        .unwrap_or(1)
        .max(1);
    Search {
        bound,
        beam: Some((EXPANSIONS / widest).max(1)),
        guide,
        budget: Some(super::sp::MAX_WORK),
    }
}

/// Refuses a degree `tp` that block `bi` cannot use, before any search: every cut of the
/// family's annotated layout `meg` (over `p`'s one axis) must divide its atom — the heads of
/// attention, the MLP width — or the reference row could not be priced and the comparison
/// would silently lose it. A block without annotations needs one cut the degree divides, or
/// the axis would have nothing to cut.
fn check_degree(
    model: &Model,
    bi: usize,
    p: &Problem,
    meg: &[Choice],
    tp: u64,
) -> Result<(), SearchError> {
    let block = model.blocks[bi].name.clone();
    // (operator, cut) of every annotated cut, and which of them the degree does not divide.
    let cuts: Vec<(usize, usize)> = meg
        .iter()
        .enumerate()
        .filter_map(|(v, c)| c.first().copied().flatten().map(|k| (v, k)))
        .collect();
    if cuts.is_empty() {
        let divides = p
            .ops
            .iter()
            .any(|o| !o.is_source() && o.cuts.iter().any(|c| c.value().is_multiple_of(tp)));
        return match divides {
            true => Ok(()),
            false => Err(SearchError::NothingToCut { tp, block }),
        };
    }
    let failing: Vec<&(usize, usize)> = cuts
        .iter()
        .filter(|(v, k)| !p.ops[*v].cuts[*k].value().is_multiple_of(tp))
        .collect();
    let Some(&&(v, k)) = failing.first() else {
        return Ok(());
    };
    let usable = cuts.iter().fold(0u64, |g, (v, k)| {
        num_integer::gcd(g, p.ops[*v].cuts[*k].value())
    });
    let cut = &p.ops[v].cuts[k];
    Err(SearchError::AnnotatedDegree(Box::new(AnnotatedDegree {
        tp,
        block,
        op: p.ops[v].name.clone(),
        index: cut.index.clone(),
        what: atom_in_words(model, &cut.atom, cut.value()),
        others: failing.len() - 1,
        usable: divisors_listed(usable),
    })))
}

/// An atom and its value in words: `the 96 heads (`NH`)` where the model gives the symbol a role,
/// `` `H/NH` = 128 `` otherwise.
fn atom_in_words(model: &Model, atom: &str, value: u64) -> String {
    let r = &model.roles;
    let roles = [
        (&r.heads, "heads"),
        (&r.kv_heads, "key/value heads"),
        (&r.head_dim, "head dimensions"),
        (&r.hidden, "hidden features"),
        (&r.ffn, "MLP features"),
        (&r.vocab, "vocabulary entries"),
        (&r.experts, "experts"),
    ];
    match roles.iter().find(|(s, _)| s.as_deref() == Some(atom)) {
        Some((_, words)) => format!("the {value} {words} (`{atom}`)"),
        None => format!("`{atom}` = {value}"),
    }
}

/// The divisors of `n` from 2 up: all of them when there are at most twelve, else the first
/// eleven, `…` and `n` (`none` when n < 2). Trial division stops at a million, so a huge
/// atom costs nothing noticeable.
fn divisors_listed(n: u64) -> String {
    if n < 2 {
        return "none".into();
    }
    let mut found: Vec<u64> = (2..=n.min(1_000_000))
        .filter(|&d| n.is_multiple_of(d))
        .take(12)
        .collect();
    if found.last() == Some(&n) {
        return join(&found);
    }
    found.truncate(11);
    let mut parts: Vec<String> = found.iter().map(u64::to_string).collect();
    parts.push("…".into());
    parts.push(n.to_string());
    parts.join(", ")
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// How a row was found: `what`, marked bounded with its gap where the beam dropped states.
fn method(what: &str, b: &Bounded) -> String {
    match (b.exact(), b.gap_percent()) {
        (true, _) => format!("exact, {what}"),
        (false, Some(g)) => format!("bounded (gap ≤ {g:.1}%), {what}"),
        (false, None) => format!("bounded, {what}"),
    }
}

/// Compares the layouts of `model`'s repeated layer at tensor-parallel degree `tp`.
pub fn compare_layer(
    model: &Model,
    values: &Bindings,
    tp: u64,
    calib: &Calibration,
    gpus_per_node: u64,
) -> Result<LayerReport, SearchError> {
    compare_layer_with_progress(
        model,
        values,
        tp,
        calib,
        gpus_per_node,
        false,
        &mut |_, _, _| {},
    )
}

/// [`compare_layer`], letting the searches cut the sequence over the tensor-parallel axis when
/// `sequence` (see [`tensor_only`]), and reporting (search name, operators placed, operators)
/// as it goes.
pub fn compare_layer_with_progress(
    model: &Model,
    values: &Bindings,
    tp: u64,
    calib: &Calibration,
    gpus_per_node: u64,
    sequence: bool,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<LayerReport, SearchError> {
    if tp < 2 {
        return Err(SearchError::CompareNeedsTp);
    }
    let bi = model
        .first_repeated_block()
        .ok_or_else(|| SearchError::NoRepeatedLayer(model.name.clone()))?;
    let empty = BTreeMap::new();
    let one = tensor_only(
        model,
        Problem::from_block(
            model,
            bi,
            values,
            Problem::tp_axis(tp, gpus_per_node, calib),
            &empty,
        )?
        .with_hbm_balance(calib.hbm_balance()),
        sequence,
    );
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let meg = annotated(model, bi, &one);
    check_degree(model, bi, &one, &meg, tp)?;
    if let Ok(c) = one.cost(&meg) {
        rows.push(LayoutRow {
            method: "annotated (Megatron-LM)".into(),
            cost: c,
            choices: labels(&one, &meg),
        });
    }
    let b = solve_bounded(
        &one,
        &search_for(&one, None, Some(meg.clone())),
        &mut |d, n| progress("one axis", d, n),
    )?;
    let best = b
        .solution
        .clone()
        .ok_or_else(|| SearchError::NoLayout(one.name.clone()))?;
    rows.push(LayoutRow {
        method: method(&format!("one axis of {tp}"), &b),
        cost: best.cost.clone(),
        choices: labels(&one, &best.assignment),
    });
    if tp.is_power_of_two() {
        let (more, said) = halvings(model, bi, values, &one, calib, sequence, progress)?;
        rows.extend(more);
        notes.extend(said);
    } else {
        notes.push(format!("D-Rec needs a power-of-two degree, not {tp}"));
    }
    rows.sort_by(|a, b| a.cost.cmp(&b.cost));
    Ok(LayerReport {
        block: model.blocks[bi].name.clone(),
        tp,
        rows,
        notes,
    })
}

/// D-Rec's layout of block `bi` and the search over the same halvings, as rows and notes: D-Rec
/// bisects the devices, log2(tp) binary axes on the tier of `one`'s axis. The search is skipped,
/// with a note saying so, when its choices exceed the budget
/// ([`MAX_PRICED_CHOICES`](super::sp::MAX_PRICED_CHOICES)).
fn halvings(
    model: &Model,
    bi: usize,
    values: &Bindings,
    one: &Problem,
    calib: &Calibration,
    sequence: bool,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<(Vec<LayoutRow>, Vec<String>), SearchError> {
    let tp = one.axes[0].size;
    let empty = BTreeMap::new();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let tier = one.axes[0].kappa.clone();
    let axes: Vec<Axis> = (0..tp.trailing_zeros())
        .map(|i| Axis {
            name: format!("tp{i}"),
            size: 2,
            kappa: tier.clone(),
        })
        .collect();
    let bin = tensor_only(
        model,
        Problem::from_block(model, bi, values, axes, &empty)?.with_hbm_balance(calib.hbm_balance()),
        sequence,
    );
    let d = drec(&bin)?;
    rows.push(LayoutRow {
        method: format!("D-Rec, {} halvings", tp.trailing_zeros()),
        cost: d.cost.clone(),
        choices: labels(&bin, &d.assignment),
    });
    let search = search_for(&bin, Some(d.cost.clone()), Some(d.assignment.clone()));
    match solve_bounded(&bin, &search, &mut |d, n| progress("halvings", d, n)) {
        Ok(b) => match &b.solution {
            Some(s) => rows.push(LayoutRow {
                method: method("same halvings", &b),
                cost: s.cost.clone(),
                choices: labels(&bin, &s.assignment),
            }),
            None if b.exact() => notes.push("no layout on the halvings beats D-Rec's".into()),
            None => notes
                .push("the bounded search on the halvings found nothing cheaper than D-Rec".into()),
        },
        Err(e @ SearchError::TooManyChoices { .. }) => notes.push(format!(
            "the search on the {} halvings was skipped, D-Rec's layout stands alone: {e}",
            tp.trailing_zeros()
        )),
        Err(e) => notes.push(format!("search on the halvings gave up: {e}")),
    }
    Ok((rows, notes))
}
