//! Steering the `rank` search: knobs fixed to a value or capped (`--fix tp=8,pp=4,zero=1`,
//! `--max tp=8`), and memory given with units (`75GB`, `80GiB`) or as headroom (`10%`).

use super::error::{Rejection, SteerError};
use crate::calib::stack::Supports;
use crate::error::spelling::{OptionName, Spelling};
use crate::strategy::{Knobs, Overlap, PipelineSplit, Precision, Recompute, Schedule};
use crate::sym::Rational;
use num_traits::Signed;
use std::fmt;

/// A numeric knob's constraint: a fixed value and/or a largest value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bound {
    /// The only value allowed.
    pub fixed: Option<u64>,
    /// The largest value allowed.
    pub max: Option<u64>,
}

impl Bound {
    /// Whether `v` is allowed.
    pub fn allows(&self, v: u64) -> bool {
        self.fixed.is_none_or(|f| f == v) && self.max.is_none_or(|m| v <= m)
    }

    fn is_free(&self) -> bool {
        self.fixed.is_none() && self.max.is_none()
    }
}

/// Constraints on the knobs `rank` searches. The default constrains nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steer {
    /// Data-parallel degree.
    pub dp: Bound,
    /// Tensor-parallel degree.
    pub tp: Bound,
    /// Pipeline stages.
    pub pp: Bound,
    /// Expert-parallel degree.
    pub ep: Bound,
    /// Context-parallel degree.
    pub cp: Bound,
    /// Micro-batch size (samples per micro-batch and data-parallel rank).
    pub mbs: Bound,
    /// Micro-batch count per step.
    pub microbatches: Bound,
    /// Model chunks per device (interleaved schedule; 1 for the others).
    pub chunks: Bound,
    /// ZeRO stage.
    pub zero: Bound,
    /// Pipeline schedule (applies when pp > 1).
    pub schedule: Option<Schedule>,
    /// Sequence parallelism (applies when tp > 1).
    pub sequence_parallel: Option<bool>,
    /// Activation recomputation.
    pub recompute: Option<Recompute>,
    /// Tensor-parallel communication overlapped with its GEMMs (`--tp-comm-overlap`), where it
    /// applies (sequence parallelism over tp > 1).
    pub tp_comm_overlap: Option<bool>,
    /// Gradient reductions launched bucket by bucket during the backward pass
    /// (`--overlap-grad-reduce`; on unless fixed off).
    pub overlap_grad_reduce: Option<bool>,
    /// The distributed optimizer's weight gather overlapped with the next forward pass
    /// (`--overlap-param-gather`), where it applies (ZeRO 1–2 over more than one replica).
    pub overlap_param_gather: Option<bool>,
    /// How weights and gradients are kept in mixed precision (`--fix precision=autocast`;
    /// bf16 unless fixed).
    pub precision: Option<Precision>,
    /// The precisions that can be fastest are searched (`--fix precision=any`):
    /// [`Precision::SEARCHED`], where the machine runs them.
    pub any_precision: bool,
    /// What the interleaved schedule's split counts besides the layers
    /// (`--fix account=embedding+loss`; nothing unless fixed).
    pub pipeline_split: Option<PipelineSplit>,
    /// FP8 parameters (`--fix fp8-params=on`), where they apply: an FP8 recipe that keeps them
    /// with ZeRO 1–3 ([`Knobs::fp8_params`]).
    pub fp8_params: Option<bool>,
    /// FP8 dispatch (`--fix fp8-dispatch=on`), where it applies: an FP8 recipe with expert
    /// parallelism ([`Knobs::fp8_dispatch`]).
    pub fp8_dispatch: Option<bool>,
    /// Node-limited, two-tier dispatch (`--fix node-dispatch=on`), where it applies: expert
    /// parallelism ([`Knobs::node_dispatch`]).
    pub node_dispatch: Option<bool>,
    /// The layouts the named stack profile runs (`rank --stack NAME`, its `supports:`):
    /// strategies outside them are rejected ([`Steer::stack_refuses`]; [`Steer::allows`] does
    /// not look at it).
    pub supports: Option<Supports>,
    /// The option that fixed a knob when it was not `--fix` (`schedule` → `--schedule`), so a
    /// refusal names the flag the user typed.
    pub fixed_by: std::collections::BTreeMap<String, String>,
    /// How the caller names `--fix` and `--max` in the refusals of inconsistent constraints
    /// (the command line's flags by default; Python's `fix` and `max`).
    pub spelling: Spelling,
}

/// The knob names `--fix` and `--max` accept, with what each means.
pub const KNOBS: &[(&str, &str)] = &[
    ("dp", "data-parallel degree"),
    ("tp", "tensor-parallel degree"),
    ("pp", "pipeline stages"),
    ("ep", "expert-parallel degree"),
    ("cp", "context-parallel degree"),
    ("mbs", "micro-batch size (also `micro-batch-size`)"),
    ("microbatches", "micro-batch count (also `mb`)"),
    (
        "chunks",
        "model chunks per device, interleaved schedule (also `v`)",
    ),
    ("zero", "ZeRO stage 0–3"),
    (
        "schedule",
        "gpipe, 1f1b or interleaved-1f1b; zb-h1, zb-v, dualpipe and dualpipev are tried only when fixed so (--fix only)",
    ),
    ("sp", "sequence parallelism on/off (--fix only)"),
    ("recompute", "none, selective or full (--fix only)"),
    (
        "overlap",
        "tp-comm, param-gather, grad-reduce, no-grad-reduce, all or none, joined by + (--fix only; each applies where the strategy allows it)",
    ),
    (
        "precision",
        "bf16 (bf16 weights, fp32 master copy), autocast (fp32 weights under torch.autocast), an FP8 recipe (fp8, fp8-current, fp8-block, mxfp8) or nvfp4; any searches bf16, fp8 and nvfp4 where the machine runs them (the other FP8 recipes move more bytes at the same rate than fp8, so never rank above it) (--fix only)",
    ),
    (
        "account",
        "embedding, loss or embedding+loss: counted as layers when the interleaved schedule splits the layers over its chunks, as Megatron-Core's --account-for-…-in-pipeline-split (--fix only)",
    ),
    (
        "fp8-params",
        "on or off: FP8 parameters (Megatron-LM's --fp8-param-gather) where a row allows them, an fp8, fp8-current or fp8-block recipe with ZeRO 1 to 3; the precision column says fp8+params (--fix only)",
    ),
    (
        "fp8-dispatch",
        "on or off: DeepSeek-V3's FP8 dispatch where a row allows it, an FP8 recipe with ep > 1: the all-to-alls toward the experts in FP8 with a scale per 128 elements, those back in bf16; the precision column says +dispatch (--fix only)",
    ),
    (
        "node-dispatch",
        "on or off: DeepSeek-V3's node-limited dispatch where a row has ep > 1: a token crosses the inter-node links once per other node holding its experts, then fans out inside the node (DeepEP's internode kernels) (--fix only)",
    ),
];

/// `on` or `off` (also true/false, yes/no, 1/0).
fn on_off(value: &str) -> Option<bool> {
    match value {
        "on" | "true" | "yes" | "1" => Some(true),
        "off" | "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

fn known() -> String {
    KNOBS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl Steer {
    /// Whether nothing is constrained.
    pub fn is_free(&self) -> bool {
        *self == Steer::default()
    }

    fn bound_mut(&mut self, name: &str) -> Option<&mut Bound> {
        Some(match name {
            "dp" => &mut self.dp,
            "tp" => &mut self.tp,
            "pp" => &mut self.pp,
            "ep" => &mut self.ep,
            "cp" => &mut self.cp,
            "mbs" | "micro-batch-size" | "micro_batch_size" => &mut self.mbs,
            "microbatches" | "mb" => &mut self.microbatches,
            "chunks" | "v" => &mut self.chunks,
            "zero" => &mut self.zero,
            _ => return None,
        })
    }

    /// Adds `--fix` items (`tp=8,pp=4,zero=1`); `flag` names the option in errors.
    pub fn fix(&mut self, list: &str, flag: &str) -> Result<(), SteerError> {
        for (name, value) in items(list, flag)? {
            if flag.starts_with("--") && flag != "--fix" {
                self.fixed_by.insert(name.into(), flag.into());
            }
            let bad = |what: &str| SteerError::BadValue {
                flag: flag.into(),
                name: name.into(),
                value: value.into(),
                why: what.into(),
            };
            match name {
                "schedule" => {
                    let s = Schedule::from_name(value).ok_or_else(|| {
                        bad("unknown schedule (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe, dualpipev)")
                    })?;
                    set_once(&mut self.schedule, s, || bad("given twice"))?;
                }
                "sp" | "sequence-parallel" | "sequence_parallel" | "fp8-params" | "fp8_params"
                | "fp8-dispatch" | "fp8_dispatch" | "node-dispatch" | "node_dispatch" => {
                    let on = on_off(value).ok_or_else(|| bad("expected on or off"))?;
                    let slot = match name {
                        "fp8-params" | "fp8_params" => &mut self.fp8_params,
                        "fp8-dispatch" | "fp8_dispatch" => &mut self.fp8_dispatch,
                        "node-dispatch" | "node_dispatch" => &mut self.node_dispatch,
                        _ => &mut self.sequence_parallel,
                    };
                    set_once(slot, on, || bad("given twice"))?;
                }
                "precision" if value == "any" => {
                    if self.any_precision || self.precision.is_some() {
                        return Err(bad("given twice"));
                    }
                    self.any_precision = true;
                }
                "precision" => {
                    let p = Precision::from_name(value).ok_or_else(|| {
                        bad(&format!("unknown precision ({}, or any)", Precision::NAMES))
                    })?;
                    if self.any_precision {
                        return Err(bad("given twice"));
                    }
                    set_once(&mut self.precision, p, || bad("given twice"))?;
                }
                "account" => {
                    let split = pipeline_split_of(value)
                        .ok_or_else(|| bad("expected embedding, loss, embedding+loss or none"))?;
                    set_once(&mut self.pipeline_split, split, || bad("given twice"))?;
                }
                "recompute" => {
                    let r = Recompute::from_name(value)
                        .ok_or_else(|| bad("unknown recomputation (none, selective, full)"))?;
                    set_once(&mut self.recompute, r, || bad("given twice"))?;
                }
                "overlap" => {
                    for part in value.split('+').map(str::trim) {
                        let set = |slot: &mut Option<bool>, on: bool| {
                            set_once(slot, on, || bad("an overlap given twice"))
                        };
                        match part {
                            "tp-comm" | "tp_comm" => set(&mut self.tp_comm_overlap, true)?,
                            "param-gather" | "param_gather" => {
                                set(&mut self.overlap_param_gather, true)?
                            }
                            "grad-reduce" | "grad_reduce" => {
                                set(&mut self.overlap_grad_reduce, true)?
                            }
                            "no-grad-reduce" | "no_grad_reduce" => {
                                set(&mut self.overlap_grad_reduce, false)?
                            }
                            "all" | "none" => {
                                let on = part == "all";
                                set(&mut self.tp_comm_overlap, on)?;
                                set(&mut self.overlap_param_gather, on)?;
                                set(&mut self.overlap_grad_reduce, on)?;
                            }
                            _ => {
                                return Err(bad(
                                    "unknown overlap (tp-comm, param-gather, grad-reduce, no-grad-reduce, all, none; join several with +)",
                                ))
                            }
                        }
                    }
                }
                _ => {
                    let v = number(name, value, flag)?;
                    let b = self.bound_mut(name).ok_or_else(|| unknown(name, flag))?;
                    set_once(&mut b.fixed, v, || bad("given twice"))?;
                }
            }
        }
        self.check()
    }

    /// Adds `--max` items (`tp=8`).
    pub fn max(&mut self, list: &str, flag: &str) -> Result<(), SteerError> {
        for (name, value) in items(list, flag)? {
            if matches!(
                name,
                "schedule"
                    | "sp"
                    | "sequence-parallel"
                    | "sequence_parallel"
                    | "recompute"
                    | "overlap"
                    | "precision"
                    | "account"
                    | "fp8-params"
                    | "fp8_params"
                    | "fp8-dispatch"
                    | "fp8_dispatch"
                    | "node-dispatch"
                    | "node_dispatch"
            ) {
                return Err(SteerError::BadValue {
                    flag: flag.into(),
                    name: name.into(),
                    value: value.into(),
                    why: format!("`{name}` has no order; use --fix {name}={value}"),
                });
            }
            let v = number(name, value, flag)?;
            let b = self.bound_mut(name).ok_or_else(|| unknown(name, flag))?;
            set_once(&mut b.max, v, || SteerError::BadValue {
                flag: flag.into(),
                name: name.into(),
                value: value.into(),
                why: "given twice".into(),
            })?;
        }
        self.check()
    }

    /// An option as the caller of these constraints names it ([`Steer::spelling`]).
    fn option(&self, o: OptionName) -> &'static str {
        self.spelling.name(o)
    }

    fn check(&self) -> Result<(), SteerError> {
        for (name, b) in self.bounds() {
            if let (Some(f), Some(m)) = (b.fixed, b.max) {
                if f > m {
                    return Err(SteerError::FixAboveMax {
                        fix: self.option(OptionName::Fix),
                        max_option: self.option(OptionName::Max),
                        name,
                        fixed: f,
                        max: m,
                    });
                }
            }
        }
        if let Some(z) = self.zero.fixed {
            if z > 3 {
                return Err(SteerError::ZeroStage {
                    fix: self.option(OptionName::Fix),
                    zero: z,
                });
            }
        }
        if let (Some(s), Some(c)) = (self.schedule, self.chunks.fixed) {
            if s == Schedule::Interleaved && c < 2 {
                return Err(SteerError::InterleavedChunks {
                    fix: self.option(OptionName::Fix),
                    chunks: c,
                });
            }
            if s != Schedule::Interleaved && c > 1 {
                return Err(SteerError::ChunksWithoutInterleaving {
                    fix: self.option(OptionName::Fix),
                    chunks: c,
                    schedule: s.to_string(),
                });
            }
        }
        if self.sequence_parallel == Some(true) && self.tp.fixed == Some(1) {
            return Err(SteerError::SequenceParallelOneRank {
                fix: self.option(OptionName::Fix),
            });
        }
        if self.overlap_param_gather == Some(true) && self.overlap_grad_reduce == Some(false) {
            return Err(SteerError::BadValue {
                flag: self.option(OptionName::Fix).into(),
                name: "overlap".into(),
                value: "param-gather+no-grad-reduce".into(),
                why: "overlapping the weight gather needs the gradient reduction overlapped too (Megatron-LM asserts --overlap-param-gather with --overlap-grad-reduce)".into(),
            });
        }
        Ok(())
    }

    /// The overlaps strategy `k` runs with: the fixed ones where `k` allows them (tensor-parallel
    /// overlap needs sequence parallelism over tp > 1, the weight-gather overlap ZeRO 1–2 over
    /// more than one replica), otherwise Megatron-LM's defaults (only the gradient reduction
    /// overlapped).
    pub fn overlap_for(&self, k: &Knobs) -> Overlap {
        let d = Overlap::default();
        let grad_reduce = self.overlap_grad_reduce.unwrap_or(d.grad_reduce);
        Overlap {
            tp_comm: self.tp_comm_overlap.unwrap_or(d.tp_comm) && k.sequence_parallel && k.tp > 1,
            grad_reduce,
            param_gather: self.overlap_param_gather.unwrap_or(d.param_gather)
                && grad_reduce
                && (k.zero == 1 || k.zero == 2)
                && k.replicas() > 1,
        }
    }

    /// Whether strategy `k` keeps FP8 parameters: fixed on, and allowed by its precision and
    /// ZeRO stage.
    pub fn fp8_params_for(&self, k: &Knobs) -> bool {
        self.fp8_params == Some(true) && k.precision.keeps_fp8_params() && k.zero >= 1
    }

    /// Whether strategy `k` dispatches in FP8: fixed on, and allowed by its precision (an FP8
    /// recipe) and its expert parallelism (ep > 1).
    pub fn fp8_dispatch_for(&self, k: &Knobs) -> bool {
        self.fp8_dispatch == Some(true) && k.precision.gemm_peak() == Some("fp8") && k.ep > 1
    }

    /// Whether strategy `k` dispatches node by node: fixed on, with expert parallelism (ep > 1).
    pub fn node_dispatch_for(&self, k: &Knobs) -> bool {
        self.node_dispatch == Some(true) && k.ep > 1
    }

    fn bounds(&self) -> [(&'static str, &Bound); 9] {
        [
            ("dp", &self.dp),
            ("tp", &self.tp),
            ("pp", &self.pp),
            ("ep", &self.ep),
            ("cp", &self.cp),
            ("mbs", &self.mbs),
            ("microbatches", &self.microbatches),
            ("chunks", &self.chunks),
            ("zero", &self.zero),
        ]
    }

    /// Checks the constraints against `devices`: a fixed dp, tp, pp or cp must divide them, and
    /// so must the product of the fixed ones.
    pub fn check_devices(&self, devices: u64) -> Result<(), SteerError> {
        let mut product = 1u64;
        let mut named = Vec::new();
        for (name, b) in [
            ("dp", &self.dp),
            ("tp", &self.tp),
            ("pp", &self.pp),
            ("cp", &self.cp),
        ] {
            if let Some(f) = b.fixed {
                if !devices.is_multiple_of(f) {
                    return Err(SteerError::DegreeDevices {
                        fix: self.option(OptionName::Fix),
                        name,
                        degree: f,
                        devices,
                    });
                }
                product = product.saturating_mul(f);
                named.push(format!("{name}={f}"));
            }
        }
        if !devices.is_multiple_of(product) {
            return Err(SteerError::ProductDevices {
                fix: self.option(OptionName::Fix),
                fixed: named.join(","),
                product,
                devices,
            });
        }
        if named.len() == 4 && product != devices {
            return Err(SteerError::ProductNotDevices {
                fix: self.option(OptionName::Fix),
                fixed: named.join(","),
                product,
                devices,
            });
        }
        Ok(())
    }

    /// Whether a mesh shape is allowed.
    pub fn allows_mesh(&self, dp: u64, tp: u64, pp: u64) -> bool {
        self.dp.allows(dp) && self.tp.allows(tp) && self.pp.allows(pp)
    }

    /// Whether a strategy is allowed; `mbs` its micro-batch size.
    pub fn allows(&self, k: &Knobs, mbs: u64) -> bool {
        let applies_sched = k.pp > 1;
        self.allows_mesh(k.dp, k.tp, k.pp)
            && self.ep.allows(k.ep)
            && self.cp.allows(k.cp)
            && self.mbs.allows(mbs)
            && self.microbatches.allows(k.microbatches)
            && (self.chunks.allows(k.virtual_chunks()) || (!applies_sched && self.chunks.is_free()))
            && self.zero.allows(u64::from(k.zero))
            && (!applies_sched || self.schedule.is_none_or(|s| s == k.schedule))
            && self
                .sequence_parallel
                .is_none_or(|sp| sp == k.sequence_parallel)
            && self.recompute.is_none_or(|r| r == k.recompute)
            && (self.any_precision || self.precision.is_none_or(|p| p == k.precision))
            && self.pipeline_split.is_none_or(|p| p == k.pipeline_split)
    }

    /// Why the named stack profile's stack does not run knobs `k` ([`Supports::refuses`]):
    /// apart from [`Steer::allows`], so that `rank` counts such strategies as rejected instead
    /// of leaving them out silently.
    pub fn stack_refuses(&self, k: &Knobs) -> Option<Rejection> {
        let s = self.supports.as_ref()?;
        s.refuses(k).map(|what| Rejection::NotRunByStack {
            profile: s.profile.clone(),
            what,
        })
    }

    /// Ranks only the layouts a stack runs: refused where a fixed knob lies outside them.
    pub fn restrict_to(&mut self, s: &Supports) -> Result<(), SteerError> {
        let outside = |name: &str, value: String| {
            let item = match self.fixed_by.get(name) {
                Some(flag) => format!("{flag} {value}"),
                None => format!("--fix {name}={value}"),
            };
            SteerError::Unsupported {
                item,
                profile: s.profile.clone(),
                supports: s.describe(),
            }
        };
        for (name, m) in &s.max {
            let fixed = self.bounds().into_iter().find(|(n, _)| n == name);
            if let Some(f) = fixed.and_then(|(_, b)| b.fixed).filter(|f| f > m) {
                return Err(outside(name, f.to_string()));
            }
        }
        if let (Some(x), Some(list)) = (self.schedule, &s.schedules) {
            if !list.contains(&x) {
                return Err(outside("schedule", x.to_string()));
            }
        }
        if let (Some(p), Some(list)) = (self.precision, &s.precisions) {
            if !list.contains(&p) {
                return Err(outside("precision", p.to_string()));
            }
        }
        self.supports = Some(s.clone());
        Ok(())
    }

    /// The constraints as `--fix`/`--max` would state them.
    pub fn describe(&self) -> String {
        let mut fix = Vec::new();
        let mut max = Vec::new();
        for (name, b) in self.bounds() {
            if let Some(f) = b.fixed {
                fix.push(format!("{name}={f}"));
            }
            if let Some(m) = b.max {
                max.push(format!("{name}={m}"));
            }
        }
        if let Some(s) = self.schedule {
            fix.push(format!("schedule={s}"));
        }
        if let Some(sp) = self.sequence_parallel {
            fix.push(format!("sp={}", if sp { "on" } else { "off" }));
        }
        if let Some(r) = self.recompute {
            fix.push(format!("recompute={r}"));
        }
        if let Some(on) = self.fp8_params {
            fix.push(format!("fp8-params={}", if on { "on" } else { "off" }));
        }
        if let Some(on) = self.fp8_dispatch {
            fix.push(format!("fp8-dispatch={}", if on { "on" } else { "off" }));
        }
        if let Some(on) = self.node_dispatch {
            fix.push(format!("node-dispatch={}", if on { "on" } else { "off" }));
        }
        let mut overlaps = Vec::new();
        for (name, on) in [
            ("tp-comm", self.tp_comm_overlap),
            ("param-gather", self.overlap_param_gather),
            ("grad-reduce", self.overlap_grad_reduce),
        ] {
            match on {
                Some(true) => overlaps.push(name.to_string()),
                Some(false) if name == "grad-reduce" => overlaps.push("no-grad-reduce".into()),
                _ => {}
            }
        }
        if !overlaps.is_empty() {
            fix.push(format!("overlap={}", overlaps.join("+")));
        }
        if let Some(p) = self.precision {
            fix.push(format!("precision={p}"));
        }
        if self.any_precision {
            fix.push("precision=any".into());
        }
        if let Some(p) = self.pipeline_split {
            fix.push(format!("account={p}"));
        }
        let mut out = Vec::new();
        if !fix.is_empty() {
            out.push(format!("--fix {}", fix.join(",")));
        }
        if !max.is_empty() {
            out.push(format!("--max {}", max.join(",")));
        }
        out.join(" ")
    }
}

impl fmt::Display for Steer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let given = self.describe();
        match &self.supports {
            Some(s) if given.is_empty() => write!(f, "--stack {} ({})", s.profile, s.describe()),
            Some(s) => write!(f, "{given} on --stack {} ({})", s.profile, s.describe()),
            None => f.write_str(&given),
        }
    }
}

fn set_once<T>(
    slot: &mut Option<T>,
    v: T,
    twice: impl Fn() -> SteerError,
) -> Result<(), SteerError> {
    if slot.is_some() {
        return Err(twice());
    }
    *slot = Some(v);
    Ok(())
}

fn unknown(name: &str, flag: &str) -> SteerError {
    SteerError::UnknownKnob {
        flag: flag.into(),
        name: name.into(),
        known: known(),
    }
}

fn items<'a>(list: &'a str, flag: &str) -> Result<Vec<(&'a str, &'a str)>, SteerError> {
    let mut out = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(SteerError::EmptyItem {
                flag: flag.into(),
                list: list.into(),
            });
        }
        let (name, value) = item.split_once('=').ok_or_else(|| SteerError::NotAnItem {
            flag: flag.into(),
            item: item.into(),
        })?;
        out.push((name.trim(), value.trim()));
    }
    Ok(out)
}

fn number(name: &str, value: &str, flag: &str) -> Result<u64, SteerError> {
    let bad = |why: String| SteerError::BadValue {
        flag: flag.into(),
        name: name.into(),
        value: value.into(),
        why,
    };
    let v: u64 = value
        .parse()
        .map_err(|_| bad(format!("`{value}` is not a whole number")))?;
    let min = if name == "zero" { 0 } else { 1 };
    if v < min {
        return Err(bad(format!("`{name}` must be at least 1")));
    }
    if v > crate::strategy::MAX_DEVICES {
        return Err(bad(format!(
            "absurd (more than {})",
            crate::strategy::MAX_DEVICES
        )));
    }
    Ok(v)
}

use crate::sym::size::decimal;
pub use crate::sym::size::parse_memory;

/// Parses headroom: a percentage of the device memory kept free (`10%`, `12.5%`), or an amount
/// of memory (`8GB`). Returns the usable memory of a device of `capacity` bytes.
pub fn apply_headroom(text: &str, capacity: &Rational) -> Result<Rational, SteerError> {
    let option = "--headroom";
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%') {
        let p = decimal(p.trim()).ok_or_else(|| SteerError::HeadroomPercent {
            option,
            text: text.into(),
        })?;
        usable_after_share(&p, text, capacity, option)
    } else {
        let h = parse_memory(t).map_err(|e| SteerError::HeadroomMemory {
            option,
            error: Box::new(e.into()),
        })?;
        usable_after_bytes(&h, text, capacity, option)
    }
}

/// The whole bytes left of `capacity` with `percent` % kept free (`text`: the headroom as given,
/// and `option` the option that gave it, for the error).
pub fn usable_after_share(
    percent: &Rational,
    text: &str,
    capacity: &Rational,
    option: &'static str,
) -> Result<Rational, SteerError> {
    let hundred = Rational::from_integer(100.into());
    if percent.is_negative() {
        return Err(SteerError::HeadroomNegative {
            option,
            text: text.into(),
        });
    }
    if percent >= &hundred {
        return Err(SteerError::HeadroomAll {
            option,
            text: text.into(),
        });
    }
    Ok(crate::calib::less_share(capacity, percent))
}

/// The whole bytes left of `capacity` with `bytes` kept free (`text`: the headroom as given, and
/// `option` the option that gave it, for the error).
pub fn usable_after_bytes(
    bytes: &Rational,
    text: &str,
    capacity: &Rational,
    option: &'static str,
) -> Result<Rational, SteerError> {
    if bytes.is_negative() {
        return Err(SteerError::HeadroomNegative {
            option,
            text: text.into(),
        });
    }
    if bytes >= capacity {
        return Err(SteerError::HeadroomCapacity {
            option,
            text: text.into(),
            capacity: crate::units::bytes(capacity),
        });
    }
    Ok((capacity - bytes).floor())
}

/// What `--fix account=` counts as layers of the pipeline split: `embedding`, `loss`, both
/// (joined by `+`) or `none`; none for anything else.
fn pipeline_split_of(value: &str) -> Option<PipelineSplit> {
    let mut split = PipelineSplit::default();
    for part in value.split('+').map(str::trim) {
        match part {
            "embedding" => split.embedding = true,
            "loss" => split.loss = true,
            "none" => {}
            _ => return None,
        }
    }
    Some(split)
}
