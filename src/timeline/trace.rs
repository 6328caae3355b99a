//! Chrome Trace Event Format output (chrome://tracing, Perfetto): one process per device, one
//! thread per stream, a complete (`"X"`) event per timeline event named by layer, operator and
//! micro-batch, and metadata (`"M"`) events naming processes and threads.

use super::plan::{Step, TimingPlan};
use super::schedule::Pass;
use super::sim::{Event, Simulation, Stream, What};
use serde_json::{json, Value};

/// The name of a layer item: its block and, for a repeated block, its copy number.
fn item_name(plan: &TimingPlan, item: usize) -> String {
    let b = plan.items[item];
    let name = &plan.blocks[b].name;
    let copies = plan.items.iter().filter(|&&x| x == b).count();
    if copies > 1 {
        let n = plan.items[..item].iter().filter(|&&x| x == b).count();
        format!("{name}{n}")
    } else {
        name.clone()
    }
}

/// A short readable name for an event.
pub(crate) fn label(plan: &TimingPlan, e: &Event, item: &str) -> String {
    let pass = match (e.pass, &e.what) {
        (
            _,
            What::Op {
                recompute: true, ..
            },
        )
        | (
            _,
            What::Comm {
                recompute: true, ..
            },
        ) => "R",
        (Pass::Forward, _) => "F",
        (Pass::Backward, _) => "B",
    };
    let mb = e.microbatch.map(|j| format!(" mb{j}")).unwrap_or_default();
    match e.what {
        What::Op { block, op, .. } => {
            format!("{pass} {item}.{}{mb}", plan.blocks[block].ops[op].name)
        }
        What::Comm {
            block,
            step,
            recompute,
        } => {
            let b = &plan.blocks[block];
            let steps = if e.pass == Pass::Forward || recompute {
                &b.forward
            } else {
                &b.backward
            };
            let what = match steps.get(step) {
                Some(Step::Collective(c))
                | Some(Step::Overlapped(c))
                | Some(Step::AfterDgrad(c)) => {
                    format!("{} {}", c.kind.name(), c.name)
                }
                _ => "collective".into(),
            };
            format!("{pass} {item} {what}{mb}")
        }
        What::Grad { bucket } => match e.stream {
            Stream::DpComm => format!("gradient reduction, bucket {bucket}"),
            _ => format!("gradient reduction {item}"),
        },
        What::Send => match e.pass {
            Pass::Forward => format!("send activation{mb}"),
            Pass::Backward => format!("send gradient{mb}"),
        },
        What::Optimizer => "optimizer step".into(),
        What::GradNorm => "gradient-norm all-reduce".into(),
        What::ParamGather => "parameter all-gather (distributed optimizer)".into(),
    }
}

/// The timeline as a Chrome trace (`{"traceEvents": [...]}`); times in microseconds.
pub fn chrome_trace(plan: &TimingPlan, sim: &Simulation) -> Value {
    let per_stage = plan.knobs.tp * plan.knobs.dp;
    let names: Vec<String> = (0..plan.items.len()).map(|i| item_name(plan, i)).collect();
    let mut out = Vec::with_capacity(sim.events.len() + 8 * sim.busy.len());
    for d in 0..sim.busy.len() {
        let pid = d as u64 * per_stage;
        out.push(
            json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("device {pid} (pipeline stage {d})")}}),
        );
        out.push(
            json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
            "args": {"sort_index": d}}),
        );
        for (t, s) in Stream::ALL.iter().enumerate() {
            out.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": t,
                "args": {"name": s.name()}}),
            );
            out.push(
                json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": t,
                "args": {"sort_index": t}}),
            );
        }
    }
    for e in &sim.events {
        let item = e.item.map(|i| names[i].as_str()).unwrap_or("");
        let mut args = serde_json::Map::new();
        args.insert("stage".into(), json!(e.stage));
        if let Some(j) = e.microbatch {
            args.insert("microbatch".into(), json!(j));
        }
        if !item.is_empty() {
            args.insert("layer".into(), json!(item));
        }
        if e.flops > 0.0 {
            args.insert("flops".into(), json!(e.flops));
        }
        if e.bytes > 0.0 {
            args.insert("bytes".into(), json!(e.bytes));
        }
        out.push(json!({
            "name": label(plan, e, item),
            "cat": e.stream.name(),
            "ph": "X",
            "ts": e.start * 1e6,
            "dur": e.dur * 1e6,
            "pid": e.device as u64 * per_stage,
            "tid": e.stream as usize,
            "args": Value::Object(args),
        }));
    }
    json!({"traceEvents": out, "displayTimeUnit": "ms",
        "otherData": {"model": plan.model, "strategy": plan.knobs.to_string()}})
}
