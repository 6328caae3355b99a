//! [`cost`]: a model's parameters, FLOPs and activation memory, exact, and under a strategy the
//! busiest device's share.

use super::{Machine, Model, Resolved, Strategy};
use crate::error::Error;
use crate::model::{model_cost, op_costs, ModelCost};
use crate::parallel::moe::held_share;
use crate::parallel::Evaluation;
use crate::rules::RuleSet;
use crate::sym::{ser_rational, Bindings, Poly, Rational};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// What [`cost`] is asked: a model, and optionally a strategy on a machine.
#[derive(Debug, Clone)]
pub struct CostRequest {
    /// The model, its sizes and settings.
    pub model: Model,
    /// A strategy to price the busiest device of; `None`: the model's totals only.
    pub strategy: Option<Strategy>,
    /// The machine the strategy runs on; `None`: the reference machine.
    pub machine: Option<Machine>,
    /// Formulas in the model's symbols instead of numbers (the device's share stays exact).
    pub symbolic: bool,
    /// Also each operator's cost.
    pub per_op: bool,
}

impl CostRequest {
    /// The model's totals at its sizes.
    pub fn new(model: Model) -> CostRequest {
        CostRequest {
            model,
            strategy: None,
            machine: None,
            symbolic: false,
            per_op: false,
        }
    }
}

/// An amount: an exact number, or a formula in the model's symbols (`symbolic`).
#[derive(Debug, Clone, PartialEq)]
pub enum Quantity {
    /// An exact number.
    Exact(Rational),
    /// A formula, as symshard prints it (`2*B*H^2*L + 3/2*S`).
    Formula(String),
}

impl Quantity {
    /// `p` at `b`, or its formula when `symbolic`.
    fn of(p: &Poly, b: &Bindings, symbolic: bool) -> Result<Quantity, Error> {
        if symbolic {
            return Ok(Quantity::Formula(p.to_string()));
        }
        p.eval(b)
            .map(Quantity::Exact)
            .map_err(|e| Error::Usage(format!("cannot evaluate: {e} (bind it with --set)")))
    }

    /// The exact number, where it is one.
    pub fn exact(&self) -> Option<&Rational> {
        match self {
            Quantity::Exact(r) => Some(r),
            Quantity::Formula(_) => None,
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quantity::Exact(r) => write!(f, "{r}"),
            Quantity::Formula(s) => f.write_str(s),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// FLOPs of one pass.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    /// Matmul-like FLOPs.
    pub matmul: Quantity,
    /// Other FLOPs.
    pub other: Quantity,
}

/// FLOPs of a training step's passes.
#[derive(Debug, Clone, Serialize)]
pub struct Flops {
    /// The forward pass.
    pub forward: Pass,
    /// The backward pass.
    pub backward: Pass,
}

/// One operator's totals.
#[derive(Debug, Clone, Serialize)]
pub struct OpCost {
    /// The operator.
    pub name: String,
    /// Its rule.
    pub rule: String,
    /// Times it runs per forward pass.
    pub repeat: Quantity,
    /// Parameters.
    pub params: Quantity,
    /// Forward FLOPs.
    pub forward: Quantity,
    /// Backward FLOPs.
    pub backward: Quantity,
    /// Matmul-like or other.
    pub class: crate::rules::FlopClass,
    /// Bytes saved for the backward pass.
    pub activations: Quantity,
}

/// One collective the busiest device runs.
#[derive(Debug, Clone, Serialize)]
pub struct Collective {
    /// Its kind.
    pub collective: crate::rules::CollectiveKind,
    /// Mesh axis.
    pub axis: crate::strategy::AxisKind,
    /// Link tier.
    pub tier: crate::strategy::Tier,
    /// Wire bytes per call per rank.
    #[serde(serialize_with = "ser_rational")]
    pub bytes: Rational,
    /// Calls per training step.
    pub count: u64,
    /// Operator or edge.
    pub op: String,
    /// Tensor moved.
    pub tensor: String,
}

/// One operator on the busiest device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceOp {
    /// Its block.
    pub block: String,
    /// The operator.
    pub name: String,
    /// The index split across data-parallel ranks.
    pub dp_split: Option<String>,
    /// The index split across tensor-parallel ranks, with what it cuts.
    pub tp_split: Option<String>,
    /// Forward FLOPs per micro-batch.
    #[serde(serialize_with = "ser_rational")]
    pub forward: Rational,
    /// Backward FLOPs per micro-batch.
    #[serde(serialize_with = "ser_rational")]
    pub backward: Rational,
    /// Parameters.
    #[serde(serialize_with = "ser_rational")]
    pub params: Rational,
    /// Bytes saved for the backward pass per micro-batch.
    #[serde(serialize_with = "ser_rational")]
    pub saved: Rational,
}

/// The busiest device's cost under a strategy.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceCost {
    /// The strategy, described.
    pub strategy: String,
    /// FLOPs per step (busiest stage, one device, with recomputation).
    #[serde(serialize_with = "ser_rational")]
    pub flops: Rational,
    /// Its collectives.
    pub comm: Vec<Collective>,
    /// Point-to-point bytes per step.
    #[serde(serialize_with = "ser_rational")]
    pub p2p_bytes: Rational,
    /// Of `p2p_bytes`, under DualPipe, the sum of the rank's copies' gradients with its
    /// mirror's; zero, and absent from JSON, under the other schedules.
    #[serde(
        serialize_with = "ser_rational",
        skip_serializing_if = "num_traits::Zero::is_zero"
    )]
    pub grad_sum_bytes: Rational,
    /// Memory by kind.
    pub memory: crate::parallel::Memory,
    /// Whether it fits the machine's memory: the fullest device needs no more than
    /// `memory_limit`.
    pub feasible: bool,
    /// Bytes a strategy may fill on one device: the capacity less the headroom
    /// ([`crate::Machine::usable_memory`]), as `rank` states it.
    #[serde(serialize_with = "ser_rational")]
    pub memory_limit: Rational,
    /// Why not, where it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::parallel::Infeasible>,
    /// Each pipeline stage.
    pub stages: Vec<crate::parallel::evaluate::Stage>,
    /// Each operator (`per_op`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_op: Option<Vec<DeviceOp>>,
}

/// What [`cost`] finds. Its JSON ([`serde_json::to_value`]) is `symshard cost --format json`'s.
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// The model's name.
    pub model: String,
    /// Sizes at the model file's placeholders (defaults marked `assumed`) that no binding gave.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "crate::sym::ser_rational_map"
    )]
    pub assumed_sizes: BTreeMap<String, Rational>,
    /// The symbols the bindings changed, with their values.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "crate::sym::ser_rational_map"
    )]
    pub overrides: BTreeMap<String, Rational>,
    /// The settings that change how its operators run.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// Every symbol's value.
    #[serde(serialize_with = "crate::sym::ser_rational_map")]
    pub symbols: BTreeMap<String, Rational>,
    /// Parameters.
    pub params: Quantity,
    /// FLOPs per pass.
    pub flops: Flops,
    /// Bytes of activations saved for the backward pass.
    #[serde(rename = "memory", serialize_with = "ser_activations")]
    pub activations: Quantity,
    /// Each operator's totals (`per_op`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_op: Option<Vec<OpCost>>,
    /// The busiest device's share under the strategy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_device: Option<DeviceCost>,
    /// Warnings and notes (`warning: …`, `note: …`), as the command line prints them.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

fn ser_activations<S: Serializer>(q: &Quantity, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Memory<'a> {
        activations: &'a Quantity,
    }
    Memory { activations: q }.serialize(s)
}

/// What the command line prints beside a [`Cost`].
pub(crate) struct CostDetail {
    /// The model loaded.
    pub model: crate::model::Model,
    /// Its symbols' values.
    pub values: Bindings,
    /// Its totals as formulas.
    pub totals: ModelCost,
    /// Under a strategy: what the busiest device's table needs.
    pub device: Option<DeviceDetail>,
}

/// What the table of a strategy's busiest device needs beside its [`DeviceCost`].
pub(crate) struct DeviceDetail {
    /// The evaluation.
    pub evaluation: Evaluation,
    /// The calibration's name and the device memory.
    pub machine: (String, Rational),
    /// With `per_op`: what the split columns mean.
    pub legend: String,
}

/// A model's parameters, FLOPs and activation memory, and under a strategy the busiest
/// device's share. Warnings and notes (a strategy that does not fit, a note on its nodes) are
/// returned in [`Cost::warnings`], not printed.
pub fn cost(req: &CostRequest) -> Result<Cost, Error> {
    let (out, notes) = crate::diag::capture_notes(|| cost_in_full(req));
    let mut c = out?.0;
    c.warnings = notes;
    Ok(c)
}

/// [`cost`] with what a table of it needs.
pub(crate) fn cost_in_full(req: &CostRequest) -> Result<(Cost, CostDetail), Error> {
    let loaded = req.model.load()?;
    let (model, values) = (loaded.model, loaded.values);
    let totals = model_cost(&model);
    let st = match &req.strategy {
        Some(s) => {
            let machine = match &req.machine {
                Some(m) => m.clone(),
                None => Machine::reference()?,
            };
            Some(s.resolve_for(&machine, &model, &values)?)
        }
        None => None,
    };
    let ask = Asked {
        bound: &loaded.bound,
        symbolic: req.symbolic,
        per_op: req.per_op,
    };
    let (out, device) = document(&model, &values, &totals, &ask, st.as_ref(), &loaded.rules)?;
    let detail = CostDetail {
        model,
        values,
        totals,
        device,
    };
    Ok((out, detail))
}

/// What a `cost` document is asked to show.
pub(crate) struct Asked<'a> {
    /// The symbols bound (sizes not bound are named as assumed).
    pub bound: &'a [String],
    /// Formulas instead of numbers.
    pub symbolic: bool,
    /// Each operator's row.
    pub per_op: bool,
}

/// `cost`'s result for `model` at `values`: its totals, and with a strategy `st` the busiest
/// device's (with what its table needs beside it).
pub(crate) fn document(
    model: &crate::model::Model,
    values: &Bindings,
    cost: &ModelCost,
    ask: &Asked<'_>,
    st: Option<&Resolved>,
    rules: &RuleSet,
) -> Result<(Cost, Option<DeviceDetail>), Error> {
    let s = |p: &Poly| Quantity::of(p, values, ask.symbolic);
    let per_op = if ask.per_op {
        Some(op_rows(model, &s)?)
    } else {
        None
    };
    let overrides = values
        .iter()
        .filter(|(k, v)| model.values.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Formulas alone (no strategy to evaluate) hold at every size.
    let assumed_sizes = if ask.symbolic && st.is_none() {
        BTreeMap::new()
    } else {
        assumed_sizes(model, ask.bound, values)
    };
    let mut out = Cost {
        model: model.name.clone(),
        assumed_sizes,
        overrides,
        settings: crate::timeline::setting_map(model),
        symbols: values.clone().into_iter().collect(),
        params: s(&cost.params)?,
        flops: Flops {
            forward: Pass {
                matmul: s(&cost.forward.matmul)?,
                other: s(&cost.forward.other)?,
            },
            backward: Pass {
                matmul: s(&cost.backward.matmul)?,
                other: s(&cost.backward.other)?,
            },
        },
        activations: s(&cost.activations)?,
        per_op,
        per_device: None,
        warnings: Vec::new(),
    };
    let device = match st {
        Some(st) => {
            let (d, evaluation, legend) = per_device(st, ask.per_op, model, values, rules)?;
            out.per_device = Some(d);
            Some(DeviceDetail {
                evaluation,
                machine: (st.calib.name.clone(), st.memory.clone()),
                legend,
            })
        }
        None => None,
    };
    Ok((out, device))
}

/// The model's assumed sizes (defaults its file marks `assumed`: placeholders for sizes its
/// source does not give) that no binding of `bound` chose, with their values.
pub(crate) fn assumed_sizes(
    model: &crate::model::Model,
    bound: &[String],
    values: &Bindings,
) -> BTreeMap<String, Rational> {
    model
        .assumed
        .iter()
        .filter(|s| !bound.contains(s))
        .filter_map(|s| Some((s.clone(), values.get(s)?.clone())))
        .collect()
}

/// The model's operators, each with its totals, shown by `s`.
fn op_rows(
    model: &crate::model::Model,
    s: &dyn Fn(&Poly) -> Result<Quantity, Error>,
) -> Result<Vec<OpCost>, Error> {
    op_costs(model)
        .into_iter()
        .map(|o| {
            Ok(OpCost {
                name: o.name,
                rule: o.rule,
                repeat: s(&o.repeat)?,
                params: s(&o.params)?,
                forward: s(&o.forward.total())?,
                backward: s(&o.backward.total())?,
                class: o.class,
                activations: s(&o.activations)?,
            })
        })
        .collect()
}

/// Evaluates the strategy `st` on the busiest device: its cost, the evaluation, and with
/// `per_op` the legend of the split columns.
fn per_device(
    st: &Resolved,
    per_op: bool,
    model: &crate::model::Model,
    values: &Bindings,
    rules: &RuleSet,
) -> Result<(DeviceCost, Evaluation, String), Error> {
    let (analysis, e) = st.evaluate(model, values, None)?;
    let legend = if per_op {
        split_legend(&analysis, rules)
    } else {
        String::new()
    };
    let b = crate::parallel::evaluate::microbatch_bindings(model, values, &st.knobs);
    let ev = |p: &Poly| {
        p.eval(&b)
            .map_err(|e| Error::Usage(format!("cannot evaluate: {e} (bind it with --set)")))
    };
    let per_op = if per_op {
        let mut rows = Vec::new();
        for blk in &analysis.blocks {
            for o in &blk.ops {
                rows.push(DeviceOp {
                    block: blk.name.clone(),
                    name: o.name.clone(),
                    dp_split: o.plan.dp.clone(),
                    tp_split: o.plan.tp.as_ref().map(|(i, t)| format!("{i} ({t:?})")),
                    forward: ev(&o.forward)?,
                    backward: ev(&o.backward)?,
                    // Under expert parallelism a device holds the weights of E/ep experts.
                    params: ev(&o.params)? * held_share(o.role, st.knobs.ep),
                    saved: ev(&o.saved)?,
                });
            }
        }
        Some(rows)
    } else {
        None
    };
    let d = DeviceCost {
        strategy: e.knobs.describe(model.batch_value(values)),
        flops: e.flops.clone(),
        comm: e
            .comm
            .iter()
            .map(|c| Collective {
                collective: c.collective,
                axis: c.axis,
                tier: c.tier,
                bytes: c.bytes.clone(),
                count: c.count,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
            })
            .collect(),
        p2p_bytes: e.p2p_bytes.clone(),
        grad_sum_bytes: e.grad_sum_bytes.clone(),
        memory: e.memory.clone(),
        feasible: e.feasible,
        memory_limit: st.memory.clone(),
        reason: e.reason.clone(),
        stages: e.stages.clone(),
        per_op,
    };
    Ok((d, e, legend))
}

/// The legend of the per-operator `dp` and `tp` columns: what each index letter shown stands
/// for, as the operators' rules document it.
fn split_legend(analysis: &crate::parallel::Analysis, rules: &RuleSet) -> String {
    let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in analysis.blocks.iter().flat_map(|b| &b.ops) {
        let letters = o.plan.dp.iter().chain(o.plan.tp.iter().map(|(i, _)| i));
        for letter in letters {
            let doc = rules
                .get(&o.rule)
                .and_then(|r| r.indices.iter().find(|i| &i.name == letter))
                .and_then(|i| i.doc.clone())
                .unwrap_or_else(|| format!("an index of `{}`", o.rule));
            let e = docs.entry(letter.clone()).or_default();
            if !e.contains(&doc) {
                e.push(doc);
            }
        }
    }
    let letters: Vec<String> = docs
        .iter()
        .map(|(l, d)| format!("{l} = {}", d.join(" | ")))
        .collect();
    format!(
        "dp, tp: the index of the operator's rule split across data- or tensor-parallel ranks (`symshard explain RULE` lists a rule's indices), with what the tensor-parallel split cuts (Batch, Seq, Feature); -: not split\n  index letters: {}",
        letters.join("; ")
    )
}
