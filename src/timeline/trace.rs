//! Chrome Trace Event Format output (chrome://tracing, Perfetto): one process per device, one
//! thread per stream, a complete (`"X"`) event per timeline event named by layer, operator and
//! micro-batch, and metadata (`"M"`) events naming processes and threads.

use super::plan::{Step, TimingPlan};
use super::schedule::Pass;
use super::sim::{Event, Simulation, Stream, What};
use serde_json::{json, Value};
use std::io::{self, Write};

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

/// `R` for a recomputed forward, else `F`, `B` or `W` (ZB-H1's weight gradient) by pass.
fn pass_letter(recompute: bool, pass: Pass) -> &'static str {
    match (recompute, pass) {
        (true, _) => "R",
        (false, Pass::Forward) => "F",
        (false, Pass::Backward) => "B",
        (false, Pass::Weight) => "W",
    }
}

/// ` mb{j}` for micro-batch `j`, nothing outside micro-batches.
fn microbatch_suffix(j: Option<usize>) -> String {
    j.map(|j| format!(" mb{j}")).unwrap_or_default()
}

/// A short readable name for an event.
pub(crate) fn label(plan: &TimingPlan, e: &Event, item: &str) -> String {
    let recompute = matches!(
        e.what,
        What::Op {
            recompute: true,
            ..
        } | What::Comm {
            recompute: true,
            ..
        }
    );
    let pass = pass_letter(recompute, e.pass);
    let mb = microbatch_suffix(e.microbatch);
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
            Pass::Backward | Pass::Weight => format!("send gradient{mb}"),
        },
        What::Optimizer => "optimizer step".into(),
        What::GradNorm => "gradient-norm all-reduce".into(),
        What::ParamGather => "parameter all-gather (distributed optimizer)".into(),
        What::GradSum => "gradient sum with the mirrored rank (DualPipe)".into(),
    }
}

/// How much a trace shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TraceDetail {
    /// One event per layer, pass and micro-batch on each stream (operators of a layer merged
    /// into one span that carries their busy seconds, FLOPs and bytes); events outside layers
    /// (sends, gradient buckets, the optimizer) as they are.
    #[default]
    Layer,
    /// One event per operator and collective.
    Op,
}

/// What merges into one span at [`TraceDetail::Layer`]: the same device, stream, layer item,
/// micro-batch and pass (a recomputed forward apart from the forward it repeats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpanKey {
    device: usize,
    stream: Stream,
    item: usize,
    microbatch: Option<usize>,
    pass: Pass,
    recompute: bool,
}

fn span_key(e: &Event) -> Option<SpanKey> {
    let recompute = match e.what {
        What::Op { recompute, .. } | What::Comm { recompute, .. } => recompute,
        _ => return None,
    };
    Some(SpanKey {
        device: e.device,
        stream: e.stream,
        item: e.item?,
        microbatch: e.microbatch,
        pass: e.pass,
        recompute,
    })
}

/// Several events of one layer merged: from the first start to the last end.
struct Span {
    key: SpanKey,
    stage: usize,
    start: f64,
    end: f64,
    busy: f64,
    flops: f64,
    bytes: f64,
    events: usize,
}

impl Span {
    fn of(key: SpanKey, e: &Event) -> Span {
        Span {
            key,
            stage: e.stage,
            start: e.start,
            end: e.end(),
            busy: e.dur,
            flops: e.flops,
            bytes: e.bytes,
            events: 1,
        }
    }

    fn add(&mut self, e: &Event) {
        self.start = self.start.min(e.start);
        self.end = self.end.max(e.end());
        self.busy += e.dur;
        self.flops += e.flops;
        self.bytes += e.bytes;
        self.events += 1;
    }

    fn label(&self, item: &str) -> String {
        let pass = pass_letter(self.key.recompute, self.key.pass);
        let mb = microbatch_suffix(self.key.microbatch);
        match self.key.stream {
            Stream::Compute => format!("{pass} {item}{mb}"),
            s => format!("{pass} {item} {}{mb}", s.name()),
        }
    }
}

/// Writes `value` and, before it, a comma unless it is the first.
fn item<W: Write>(w: &mut W, first: &mut bool, value: &Value) -> io::Result<()> {
    if !std::mem::take(first) {
        w.write_all(b",\n")?;
    }
    serde_json::to_writer(&mut *w, value).map_err(io::Error::from)
}

/// The timeline as a Chrome trace (`{"traceEvents": [...]}`, times in microseconds), written
/// to `w` event by event: memory stays that of the simulation, whatever the trace's size.
pub fn write_chrome_trace<W: Write>(
    plan: &TimingPlan,
    sim: &Simulation,
    detail: TraceDetail,
    w: &mut W,
) -> io::Result<()> {
    let per_stage = plan.knobs.tp * plan.knobs.dp;
    let names: Vec<String> = (0..plan.items.len()).map(|i| item_name(plan, i)).collect();
    w.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    write_lane_names(w, &mut first, sim.busy.len(), per_stage)?;
    // Open spans, one per device and stream: a stream runs its events in issue order, so a
    // layer's events on it are consecutive.
    let mut open: Vec<Option<Span>> = (0..sim.busy.len() * Stream::ALL.len())
        .map(|_| None)
        .collect();
    for e in &sim.events {
        if detail == TraceDetail::Layer {
            if let Some(key) = span_key(e) {
                let slot = &mut open[e.device * Stream::ALL.len() + e.stream.index()];
                match slot {
                    Some(s) if s.key == key => s.add(e),
                    _ => {
                        if let Some(s) = slot.replace(Span::of(key, e)) {
                            write_span(w, &mut first, s, &names, per_stage)?;
                        }
                    }
                }
                continue;
            }
        }
        let item_name = e.item.map(|i| names[i].as_str()).unwrap_or("");
        let args = common_args(e.stage, e.microbatch, item_name, e.flops, e.bytes);
        item(
            w,
            &mut first,
            &complete(
                label(plan, e, item_name),
                e.stream,
                e.device as u64 * per_stage,
                e.start,
                e.dur,
                args,
            ),
        )?;
    }
    for s in open.into_iter().flatten() {
        write_span(w, &mut first, s, &names, per_stage)?;
    }
    w.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *w,
        &json!({"model": plan.model, "strategy": plan.knobs.to_string(),
            "detail": match detail { TraceDetail::Layer => "layer", TraceDetail::Op => "op" }}),
    )
    .map_err(io::Error::from)?;
    w.write_all(b"}\n")
}

/// The metadata events that name and order the trace's processes (one a pipeline stage, named
/// by its first device, `per_stage` devices apart) and their threads (one a stream).
fn write_lane_names<W: Write>(
    w: &mut W,
    first: &mut bool,
    stages: usize,
    per_stage: u64,
) -> io::Result<()> {
    for d in 0..stages {
        let pid = d as u64 * per_stage;
        item(
            w,
            first,
            &json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("device {pid} (pipeline stage {d})")}}),
        )?;
        item(
            w,
            first,
            &json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
            "args": {"sort_index": d}}),
        )?;
        for (t, s) in Stream::ALL.iter().enumerate() {
            item(
                w,
                first,
                &json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": t,
                "args": {"name": s.name()}}),
            )?;
            item(
                w,
                first,
                &json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": t,
                "args": {"sort_index": t}}),
            )?;
        }
    }
    Ok(())
}

/// A complete (`X`) event on process `pid`, in the thread of `stream`, from `start` for `dur`
/// seconds.
fn complete(
    name: String,
    stream: Stream,
    pid: u64,
    start: f64,
    dur: f64,
    args: serde_json::Map<String, Value>,
) -> Value {
    json!({
        "name": name,
        "cat": stream.name(),
        "ph": "X",
        "ts": start * 1e6,
        "dur": dur * 1e6,
        "pid": pid,
        "tid": stream as usize,
        "args": Value::Object(args),
    })
}

/// The arguments every event carries: its stage, and where they apply its micro-batch, its layer
/// (`item`), FLOPs and bytes.
fn common_args(
    stage: usize,
    microbatch: Option<usize>,
    item: &str,
    flops: f64,
    bytes: f64,
) -> serde_json::Map<String, Value> {
    let mut args = serde_json::Map::new();
    args.insert("stage".into(), json!(stage));
    if let Some(j) = microbatch {
        args.insert("microbatch".into(), json!(j));
    }
    if !item.is_empty() {
        args.insert("layer".into(), json!(item));
    }
    if flops > 0.0 {
        args.insert("flops".into(), json!(flops));
    }
    if bytes > 0.0 {
        args.insert("bytes".into(), json!(bytes));
    }
    args
}

/// A layer's span as one complete event, with the events merged into it and their busy time.
fn write_span<W: Write>(
    w: &mut W,
    first: &mut bool,
    s: Span,
    names: &[String],
    per_stage: u64,
) -> io::Result<()> {
    let name = &names[s.key.item];
    let mut args = common_args(s.stage, s.key.microbatch, name, s.flops, s.bytes);
    args.insert("events".into(), json!(s.events));
    args.insert("busy_us".into(), json!(s.busy * 1e6));
    item(
        w,
        first,
        &complete(
            s.label(name),
            s.key.stream,
            s.key.device as u64 * per_stage,
            s.start,
            s.end - s.start,
            args,
        ),
    )
}

/// The timeline as a Chrome trace value (see [`write_chrome_trace`]; this one holds the whole
/// trace in memory).
pub fn chrome_trace(plan: &TimingPlan, sim: &Simulation, detail: TraceDetail) -> Value {
    let mut buf = Vec::new();
    write_chrome_trace(plan, sim, detail, &mut buf).expect("writing to memory");
    serde_json::from_slice(&buf).expect("the trace is JSON")
}
