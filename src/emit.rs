//! `rank --emit`: the top strategy as a launch configuration — Megatron-LM command-line
//! arguments, a torchtitan TOML job config, or per-operator placements as JSON.

use crate::error::Error;
use crate::model::{AttentionMode, Model};
use crate::parallel::{analyse, Evaluation, Layout};
use crate::search::RankedRow;
use crate::strategy::{Knobs, Precision, Recompute, Schedule};
use crate::sym::{Bindings, Poly, Rational};
use serde::Serialize;

/// What `--emit` prints about the top strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// Megatron-LM command-line arguments.
    Megatron,
    /// A torchtitan TOML job config.
    Torchtitan,
    /// Full per-operator placements as JSON.
    Json,
}

/// What `--emit` produced: text for the table output, JSON for `--format json`.
pub struct Emitted {
    /// As printed after the table.
    pub text: String,
    /// As embedded in the JSON output (`emitted`).
    pub json: serde_json::Value,
}

/// Megatron-LM version whose argument parser the emitted flag names are checked against
/// (`megatron/training/arguments.py` of NVIDIA/Megatron-LM at this commit).
pub const MEGATRON_VERSION: &str = "NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c";

/// torchtitan version whose job config (`torchtitan/config/job_config.py`) the emitted TOML keys
/// are checked against.
pub const TORCHTITAN_VERSION: &str = "pytorch/torchtitan@000204a4a8bf3d0f31adc44fc29855fbb6ea13d8";

/// Every Megatron-LM flag `--emit megatron` can print (tests check each against the parser of
/// [`MEGATRON_VERSION`]).
pub const MEGATRON_FLAGS: &[&str] = &[
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--kv-channels",
    "--swiglu",
    "--normalization",
    "--position-embedding-type",
    "--untie-embeddings-and-output-weights",
    "--disable-bias-linear",
    "--seq-length",
    "--max-position-embeddings",
    "--vocab-size",
    "--num-experts",
    "--moe-router-topk",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--cp-comm-type",
    "--expert-model-parallel-size",
    "--moe-token-dispatcher-type",
    "--moe-enable-deepep",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--num-layers-per-virtual-pipeline-stage",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--micro-batch-size",
    "--global-batch-size",
    "--sequence-parallel",
    "--recompute-granularity",
    "--recompute-modules",
    "--recompute-method",
    "--recompute-num-layers",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--ckpt-format",
    "--no-gradient-accumulation-fusion",
    "--attention-backend",
    "--tp-comm-overlap",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--bf16",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-param-gather",
];

/// Every torchtitan job-config key `--emit torchtitan` can print, as `section.key`.
pub const TORCHTITAN_KEYS: &[&str] = &[
    "job.description",
    "model.name",
    "model.flavor",
    "training.local_batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.pipeline_parallel_split_points",
    "parallelism.context_parallel_degree",
    "parallelism.context_parallel_rotate_method",
    "parallelism.expert_parallel_degree",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
    "model.converters",
    "training.compile",
    "float8.recipe_name",
    "float8.filter_fqns",
    "float8.enable_fsdp_float8_all_gather",
    "float8.precompute_float8_dynamic_scale_for_fsdp",
    "mx.recipe_name",
];

/// Emits the ranked row `row` of `model` as `emit` asks. A row stands for every strategy of
/// equal cost and memory (`row.alike`); when the row's own knobs are ones the target cannot run
/// (GPipe for Megatron-LM, ZeRO-1 for torchtitan, …) the first member of the group it can run is
/// emitted instead, priced again by `reprice`, and one whose layout the target states exactly is
/// preferred to one it can only approximate.
pub fn emit_ranked(
    emit: Emit,
    model: &Model,
    values: &Bindings,
    row: &RankedRow,
    reprice: &dyn Fn(&Knobs) -> Result<Evaluation, Error>,
) -> Result<Emitted, Error> {
    let own = emit_one(
        emit,
        model,
        values,
        &row.evaluation,
        &row.layout.overrides(),
    );
    if matches!(&own, Ok((_, warnings)) if warnings.is_empty()) || row.alike.is_empty() {
        return own.map(|(e, _)| e);
    }
    let mut inexact = None;
    for k in &row.alike {
        let Ok(evaluation) = reprice(k) else {
            continue;
        };
        if let Ok((mut e, warnings)) =
            emit_one(emit, model, values, &evaluation, &row.layout.overrides())
        {
            let b = model.batch_value(values);
            let note = format!(
                "# row {} groups strategies of equal cost and memory; this is its member {}, which {} runs",
                row.rank,
                k.describe(b),
                target(emit)
            );
            e.text = format!("{note}\n{}", e.text);
            if warnings.is_empty() {
                return Ok(e);
            }
            inexact.get_or_insert(e);
        }
    }
    match (own, inexact) {
        (Ok((e, _)), _) => Ok(e),
        (Err(_), Some(e)) => Ok(e),
        (Err(Error::Usage(m)), None) => Err(Error::Usage(format!(
            "{m} (nor can any of the {} strategies of equal cost and memory grouped with it)",
            row.alike.len()
        ))),
        (Err(e), None) => Err(e),
    }
}

fn target(emit: Emit) -> &'static str {
    match emit {
        Emit::Megatron => "Megatron-LM",
        Emit::Torchtitan => "torchtitan",
        Emit::Json => "--emit json",
    }
}

/// Emits `evaluation`'s strategy of `model` as `emit` asks.
pub fn emit(
    emit: Emit,
    model: &Model,
    values: &Bindings,
    evaluation: &Evaluation,
    tp_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<Emitted, Error> {
    emit_one(emit, model, values, evaluation, tp_overrides).map(|(e, _)| e)
}

/// The emitted config and what in the ranked strategy it cannot state (also written into it).
fn emit_one(
    emit: Emit,
    model: &Model,
    values: &Bindings,
    evaluation: &Evaluation,
    tp_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<(Emitted, Vec<String>), Error> {
    let k = &evaluation.knobs;
    let strategy = k.describe(model.batch_value(values));
    match emit {
        Emit::Megatron => {
            let (args, warnings) = megatron(model, values, evaluation)?;
            let mut text =
                format!("# Megatron-LM arguments (flag names as in {MEGATRON_VERSION})\n");
            for w in &warnings {
                text.push_str(&format!("# warning: {w}\n"));
            }
            text.push_str(
                &args
                    .iter()
                    .map(|(f, v)| match v {
                        Some(v) => format!("{f} {v}"),
                        None => f.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" \\\n  "),
            );
            let json = serde_json::json!({
                "megatron_lm": MEGATRON_VERSION,
                "strategy": strategy,
                "arguments": args.iter().flat_map(|(f, v)| {
                    std::iter::once(f.to_string()).chain(v.clone())
                }).collect::<Vec<String>>(),
                "warnings": warnings,
            });
            Ok((Emitted { text, json }, warnings))
        }
        Emit::Torchtitan => {
            let (toml, warnings) = torchtitan(model, values, evaluation)?;
            let json = serde_json::json!({
                "torchtitan": TORCHTITAN_VERSION,
                "strategy": strategy,
                "toml": toml,
                "warnings": warnings,
            });
            Ok((Emitted { text: toml, json }, warnings))
        }
        Emit::Json => {
            let layout = Layout {
                sequence_parallel: k.sequence_parallel,
                tp_overrides: tp_overrides.clone(),
            };
            let analysis = analyse(model, &layout);
            #[derive(Serialize)]
            struct Placements<'a> {
                knobs: &'a Knobs,
                analysis: &'a crate::parallel::Analysis,
            }
            let json = serde_json::to_value(Placements {
                knobs: k,
                analysis: &analysis,
            })
            .map_err(|e| {
                Error::Internal(format!("--emit json: cannot write the placements: {e}"))
            })?;
            let text = serde_json::to_string_pretty(&json).map_err(|e| {
                Error::Internal(format!("--emit json: cannot write the placements: {e}"))
            })?;
            Ok((Emitted { text, json }, Vec::new()))
        }
    }
}

/// How the layers of the model lie on the pipeline stages of a priced strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Split {
    /// One stage, or the same number of layers on every stage (the training stacks' default).
    Even,
    /// Layers per stage, in order: the blocks before the layers (embedding) on the first stage,
    /// those after them (output) on the last, as both stacks place them.
    Uneven(Vec<u64>),
    /// Not a split of the layers alone (a stage without layers, a block between layers or an
    /// embedding placed elsewhere): why.
    Other(String),
}

/// The layer split of `evaluation`'s pipeline, from its stages (every stage is listed for the
/// rows `rank` shows).
fn layer_split(model: &Model, evaluation: &Evaluation) -> Split {
    let k = &evaluation.knobs;
    if k.pp <= 1 {
        return Split::Even;
    }
    let stages = &evaluation.stages;
    if stages.len() as u64 != k.pp || stages.iter().enumerate().any(|(i, s)| s.stage != i as u64) {
        return Split::Other(format!(
            "the strategy lists {} of its {} stages, so its layer split is unknown",
            stages.len(),
            k.pp
        ));
    }
    // Repeated blocks are the layers; the others lie before the first or after the last.
    let repeated: Vec<bool> = model
        .blocks
        .iter()
        .map(|b| b.repeat != Poly::one())
        .collect();
    let first = repeated.iter().position(|r| *r);
    let last = repeated.iter().rposition(|r| *r);
    let (Some(first), Some(last)) = (first, last) else {
        return Split::Other("the model has no repeated layer block".into());
    };
    let mut counts = Vec::with_capacity(stages.len());
    for (s, stage) in stages.iter().enumerate() {
        let mut n = 0;
        for (name, count) in &stage.items {
            let Some(b) = model.blocks.iter().position(|b| &b.name == name) else {
                return Split::Other(format!("stage {s} runs `{name}`, no block of the model"));
            };
            let placed = if repeated[b] {
                n += count;
                true
            } else if b < first {
                s == 0
            } else if b > last {
                s + 1 == stages.len()
            } else {
                return Split::Other(format!(
                    "block `{name}` lies between layer blocks; the stacks' flags place only layers"
                ));
            };
            if !placed {
                return Split::Other(format!(
                    "stage {s} holds block `{name}`, which both stacks place with the {} layers",
                    if b < first { "first" } else { "last" }
                ));
            }
        }
        if n == 0 {
            return Split::Other(format!("stage {s} holds no layer"));
        }
        counts.push(n);
    }
    if counts.windows(2).all(|w| w[0] == w[1]) {
        Split::Even
    } else {
        Split::Uneven(counts)
    }
}

fn list(counts: &[u64]) -> String {
    counts
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("/")
}

fn value(values: &Bindings, name: &str) -> Option<String> {
    values.get(name).map(|v| v.to_string())
}

fn whole(values: &Bindings, name: &str) -> Option<u64> {
    values
        .get(name)
        .filter(|v| v.is_integer())
        .and_then(|v| v.to_integer().try_into().ok())
}

/// The value of the symbol of a role of the model, when it has one.
fn role_value(values: &Bindings, symbol: Option<&String>) -> Option<String> {
    symbol.and_then(|s| value(values, s))
}

/// Transformer layers of the model (its `layer` role).
fn layers(model: &Model, values: &Bindings) -> Result<u64, Error> {
    model.roles.layer.as_ref().and_then(|l| whole(values, l)).ok_or_else(|| {
        Error::Usage("--emit: the model has no layer count (no symbol has the `layer` role): not a transformer Megatron-LM or torchtitan can train".into())
    })
}

fn micro_batch_size(model: &Model, values: &Bindings, k: &Knobs) -> Result<(u64, Rational), Error> {
    let b = model.batch_value(values).cloned().ok_or_else(|| {
        Error::Usage(
            "--emit: the model has no global batch (no symbol has the `batch` role)".into(),
        )
    })?;
    let mbs = k.micro_batch_size(&b).ok_or_else(|| {
        Error::Usage(format!(
            "--emit: global batch {b} over dp = {} and {} micro-batches is not a whole micro-batch size",
            k.dp, k.microbatches
        ))
    })?;
    Ok((mbs, b))
}

/// Megatron-LM's arguments for strategy `k`, in order.
fn megatron(
    model: &Model,
    values: &Bindings,
    evaluation: &Evaluation,
) -> Result<(Vec<Arg>, Vec<String>), Error> {
    let k = &evaluation.knobs;
    let mut a = Flags(Vec::new());
    let mut warnings = Vec::new();
    let l = layers(model, values)?;
    a.push(("--num-layers", Some(l.to_string())));
    megatron_shape(&mut a, model, values);
    megatron_parallelism(&mut a, &mut warnings, model, evaluation, l)?;
    let (mbs, b) = micro_batch_size(model, values, k)?;
    a.push(("--micro-batch-size", Some(mbs.to_string())));
    a.push(("--global-batch-size", Some(b.to_string())));
    if k.sequence_parallel {
        a.push(("--sequence-parallel", None));
    }
    megatron_memory(&mut a, k)?;
    if k.recompute == Recompute::Selective
        && !crate::model::RecomputeModule::is_default(&model.recompute_modules)
    {
        // Megatron-Core's `--recompute-modules` (nargs "*", default core_attn), the submodules
        // priced as recomputed.
        let names = crate::model::RecomputeModule::list(&model.recompute_modules, " ");
        a.push(("--recompute-modules", Some(names)));
    }
    megatron_runtime(&mut a, &mut warnings, model, k);
    Ok((a.0, warnings))
}

/// The model's shape: sizes, heads and query groups, the Llama-style block, sequence,
/// vocabulary and experts.
fn megatron_shape(a: &mut Flags, model: &Model, values: &Bindings) {
    let r = &model.roles;
    for (flag, sym) in [
        ("--hidden-size", r.hidden.as_ref()),
        ("--ffn-hidden-size", r.ffn.as_ref()),
    ] {
        if let Some(v) = role_value(values, sym) {
            a.push((flag, Some(v)));
        }
    }
    if let Some(v) = role_value(values, r.heads.as_ref()) {
        a.push(("--num-attention-heads", Some(v)));
    }
    let role_whole = |sym: Option<&String>| sym.and_then(|s| whole(values, s));
    let heads = role_whole(r.heads.as_ref());
    if let (Some(kv), Some(nh)) = (role_whole(r.kv_heads.as_ref()), heads) {
        if kv != nh {
            a.push(("--group-query-attention", None));
            a.push(("--num-query-groups", Some(kv.to_string())));
        }
    }
    let hidden = role_whole(r.hidden.as_ref());
    if let (Some(d), Some(h), Some(nh)) = (role_whole(r.head_dim.as_ref()), hidden, heads) {
        if d * nh != h {
            a.push(("--kv-channels", Some(d.to_string())));
        }
    }
    if matches!(model.family.as_deref(), Some("llama" | "mixtral")) {
        // Llama-style blocks: SwiGLU MLPs, RMSNorm, rotary positions, no linear biases, an
        // output projection of its own (the `llama` family; `llama_tied` ties it).
        a.push(("--swiglu", None));
        a.push(("--normalization", Some("RMSNorm".into())));
        a.push(("--position-embedding-type", Some("rope".into())));
        a.push(("--disable-bias-linear", None));
        a.push(("--untie-embeddings-and-output-weights", None));
    }
    if let Some(s) = role_value(values, r.sequence.as_ref()) {
        a.push(("--seq-length", Some(s.clone())));
        let p = role_value(values, r.positions.as_ref()).unwrap_or(s);
        a.push(("--max-position-embeddings", Some(p)));
    }
    if let Some(v) = role_value(values, r.vocab.as_ref()) {
        a.push(("--vocab-size", Some(v)));
    }
    if let Some(e) = role_value(values, r.experts.as_ref()) {
        a.push(("--num-experts", Some(e)));
        if let Some(t) = role_value(values, r.top_k.as_ref()) {
            a.push(("--moe-router-topk", Some(t)));
        }
        // Group-limited routing: "Node-limited routing: Set equal to number of nodes in EP
        // group to limit each token to experts on a subset of nodes" (arguments.py).
        let groups = role_value(values, r.expert_groups.as_ref())
            .zip(role_value(values, r.groups_per_token.as_ref()));
        if let Some((g, kept)) = groups {
            a.push(("--moe-router-num-groups", Some(g)));
            a.push(("--moe-router-group-topk", Some(kept)));
        }
    }
}

/// Refuses a row whose pipeline schedule Megatron-LM does not run (GPipe, ZB-H1, ZB-V, DualPipe,
/// DualPipeV).
fn megatron_schedule(k: &Knobs) -> Result<(), Error> {
    if k.pp > 1 && k.schedule == Schedule::Gpipe {
        return Err(Error::Usage(
            "--emit megatron: the top strategy uses the GPipe schedule, which Megatron-LM does not run (it runs 1F1B, interleaved when virtual stages are set); rank with --schedule 1f1b or interleaved-1f1b".into(),
        ));
    }
    if k.pp > 1 && matches!(k.schedule, Schedule::ZeroBubbleH1 | Schedule::ZeroBubbleV) {
        // Megatron-LM's pipeline schedules (megatron/core/pipeline_parallel/schedules.py) are
        // 1F1B and interleaved 1F1B; zero-bubble schedules live in the fork of Qi et al.
        // (sail-sg/zero-bubble-pipeline-parallelism), whose flags are not Megatron-LM's.
        return Err(Error::Usage(
            format!("--emit megatron: the top strategy uses the {} schedule, which Megatron-LM does not run (its schedules are 1F1B and interleaved 1F1B); rank with --schedule 1f1b or interleaved-1f1b", k.schedule.name().to_uppercase()),
        ));
    }
    if k.pp > 1 && k.schedule.overlaps_chunks() {
        // DualPipe and DualPipeV are DeepSeek's own (deepseek-ai/DualPipe, modules wrapping two
        // stages per rank); Megatron-LM's schedules (megatron/core/pipeline_parallel/
        // schedules.py) are 1F1B and interleaved 1F1B.
        return Err(Error::Usage(format!(
            "--emit megatron: the top strategy uses the {} schedule, which Megatron-LM does not run (its schedules are 1F1B and interleaved 1F1B; DualPipe and DualPipeV are deepseek-ai/DualPipe's own modules); rank with --schedule 1f1b or interleaved-1f1b",
            if k.schedule == Schedule::DualPipe { "DualPipe" } else { "DualPipeV" }
        )));
    }
    Ok(())
}

/// Tensor, pipeline, context and expert parallelism, and how the pipeline splits the layers.
fn megatron_parallelism(
    a: &mut Flags,
    warnings: &mut Vec<String>,
    model: &Model,
    evaluation: &Evaluation,
    l: u64,
) -> Result<(), Error> {
    let k = &evaluation.knobs;
    a.push(("--tensor-model-parallel-size", Some(k.tp.to_string())));
    a.push(("--pipeline-model-parallel-size", Some(k.pp.to_string())));
    a.push(("--context-parallel-size", Some(k.cp.to_string())));
    if k.cp > 1 {
        // Keys and values passed around the context-parallel ring point to point, as costed.
        a.push(("--cp-comm-type", Some("p2p".into())));
    }
    if k.ep > 1 {
        a.push(("--expert-model-parallel-size", Some(k.ep.to_string())));
        // As priced: the all-to-all dispatcher, or node by node through DeepEP ("Enable
        // DeepSeek/DeepEP for efficient token dispatching and combine … Only works with flex
        // token dispatcher", arguments.py). The parser's default is `allgather`.
        if k.node_dispatch {
            a.push(("--moe-token-dispatcher-type", Some("flex".into())));
            a.push(("--moe-enable-deepep", None));
        } else {
            a.push(("--moe-token-dispatcher-type", Some("alltoall".into())));
        }
    }
    megatron_schedule(k)?;
    let interleaved = k.pp > 1 && k.schedule == Schedule::Interleaved;
    let split = layer_split(model, evaluation);
    // The interleaved split counting the embedding or the loss as a layer is the flags' own
    // (arguments.py at MEGATRON_VERSION adds one layer for each before dividing by the stages
    // and the layers per virtual stage).
    let accounted = interleaved && !k.pipeline_split.is_plain();
    if accounted {
        if k.pipeline_split.embedding {
            a.push(("--account-for-embedding-in-pipeline-split", None));
        }
        if k.pipeline_split.loss {
            a.push(("--account-for-loss-in-pipeline-split", None));
        }
    }
    match &split {
        // Megatron-LM's default: L / pp layers on each stage.
        Split::Even => {}
        Split::Uneven(_) if accounted => {}
        // `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`
        // (arguments.py at MEGATRON_VERSION; TransformerConfig's num_layers_in_first/last_
        // pipeline_stage): the stages between take the remaining layers evenly, so a split is
        // stated exactly when its middle stages are equal. With virtual stages the parser asks
        // for --num-virtual-stages-per-pipeline-rank instead, and the ranked per-device split
        // does not say how each chunk holds its layers.
        Split::Uneven(c) if !interleaved && c[1..c.len() - 1].windows(2).all(|w| w[0] == w[1]) => {
            a.push(("--decoder-first-pipeline-num-layers", Some(c[0].to_string())));
            a.push(("--decoder-last-pipeline-num-layers", Some(c[c.len() - 1].to_string())));
        }
        Split::Uneven(c) => warnings.push(format!(
            "the ranked pipeline puts {} layers on its stages, which these flags cannot state ({}); Megatron-LM will place {} layers on each stage, so memory and time differ from the row",
            list(c),
            if interleaved {
                "an uneven split with virtual stages"
            } else {
                "the stages between the first and last are not equal"
            },
            l / k.pp
        )),
        Split::Other(why) => warnings.push(format!(
            "the ranked pipeline is not a split Megatron-LM's flags state: {why}; Megatron-LM will place {} layers on each stage",
            l / k.pp
        )),
    }
    if interleaved {
        // Megatron-LM interleaves whenever virtual stages are set, and runs 1F1B otherwise; it
        // has no GPipe schedule.
        let counted = if accounted {
            l + k.pipeline_split.extra()
        } else {
            l
        };
        a.push((
            "--num-layers-per-virtual-pipeline-stage",
            Some((counted / (k.pp * k.chunks)).to_string()),
        ));
    }
    Ok(())
}

/// Recomputation and how the optimizer state, gradients and weights are sharded.
fn megatron_memory(a: &mut Flags, k: &Knobs) -> Result<(), Error> {
    match k.recompute {
        Recompute::None => {}
        Recompute::Selective => a.push(("--recompute-granularity", Some("selective".into()))),
        Recompute::Full => {
            // Each layer keeps only its input: uniform, one layer per recomputed group.
            a.push(("--recompute-granularity", Some("full".into())));
            a.push(("--recompute-method", Some("uniform".into())));
            a.push(("--recompute-num-layers", Some("1".into())));
        }
    }
    match k.zero {
        0 => {}
        // Megatron-LM's distributed optimizer shards the fp32 master weights and Adam moments
        // over the data-parallel group and keeps full gradient buffers: ZeRO-1.
        1 => a.push(("--use-distributed-optimizer", None)),
        // Megatron-FSDP shards optimizer state and gradients (`optim_grads`, ZeRO-2) or those
        // and the parameters (`optim_grads_params`, ZeRO-3). What the cited version requires
        // with it: validate_args in arguments.py at MEGATRON_VERSION asserts
        // `args.ckpt_format == "fsdp_dtensor"` whenever --use-megatron-fsdp is set (the default
        // format is torch_dist), and for optim_grads[_params] warns that TransformerEngine must
        // support FSDP with gradient accumulation fusion, which is on by default: it is turned
        // off. The Megatron-FSDP README of Megatron-LM lists --use-distributed-optimizer and
        // --no-gradient-accumulation-fusion as required; the parser itself enforces only the
        // checkpoint format.
        2 | 3 => {
            a.push(("--use-megatron-fsdp", None));
            a.push((
                "--data-parallel-sharding-strategy",
                Some(
                    if k.zero == 2 {
                        "optim_grads"
                    } else {
                        "optim_grads_params"
                    }
                    .into(),
                ),
            ));
            a.push(("--use-distributed-optimizer", None));
            a.push(("--ckpt-format", Some("fsdp_dtensor".into())));
            a.push(("--no-gradient-accumulation-fusion", None));
        }
        z => {
            return Err(Error::Usage(format!(
                "--emit megatron: ZeRO stage {z} does not exist"
            )))
        }
    }
    Ok(())
}

/// The overlaps, the attention backend and the precision.
fn megatron_runtime(a: &mut Flags, warnings: &mut Vec<String>, model: &Model, k: &Knobs) {
    // The overlaps the strategy was timed with (Megatron-LM's defaults are all off).
    if k.overlap.tp_comm {
        a.push(("--tp-comm-overlap", None));
    }
    if k.overlap.grad_reduce && k.replicas() > 1 {
        a.push(("--overlap-grad-reduce", None));
    }
    if k.overlap.param_gather {
        a.push(("--overlap-param-gather", None));
    }
    let backend = match model.attention {
        Some(AttentionMode::Flash | AttentionMode::FlashCausal) => "flash",
        // Separate score, softmax and dropout kernels: Megatron-Core's unfused attention.
        Some(AttentionMode::Eager) | None => "unfused",
    };
    a.push(("--attention-backend", Some(backend.into())));
    if model.dtype_bytes == 2 {
        a.push(("--bf16", None));
    }
    // Transformer Engine's FP8 linear layers (Megatron-LM's `--fp8-recipe`): E4M3 forward and
    // E5M2 gradients under per-tensor scaling; E4M3 throughout under block scaling.
    let recipe = match k.precision {
        Precision::Fp8 => Some(("hybrid", "delayed")),
        Precision::Fp8Current => Some(("hybrid", "tensorwise")),
        Precision::Fp8Block => Some(("e4m3", "blockwise")),
        Precision::Mxfp8 => Some(("e4m3", "mxfp8")),
        Precision::Nvfp4 => {
            warnings.push(
                "the row was priced with NVFP4 linear layers (precision=nvfp4), which the cited Megatron-LM's arguments do not select: the flags below train them in bf16 (later Megatron-LM versions take `--fp4-format e2m1 --fp4-recipe nvfp4`)".into(),
            );
            None
        }
        Precision::Bf16 | Precision::Autocast => None,
    };
    if let Some((format, recipe)) = recipe {
        a.push(("--fp8-format", Some(format.into())));
        a.push(("--fp8-recipe", Some(recipe.into())));
        // FP8 parameters: "keep the compute param in fp8 … and perform the param all-gather in
        // fp8" (arguments.py), with the distributed optimizer the row's ZeRO stage selects.
        if k.fp8_params {
            a.push(("--fp8-param-gather", None));
        }
    }
    if k.fp8_dispatch {
        warnings.push(
            "the row was priced with FP8 dispatch (fp8_dispatch: the all-to-alls toward the experts in FP8), which the cited Megatron-LM does not run (its token dispatchers and DeepEP path move the activations' bf16): the flags below dispatch in bf16".into(),
        );
    }
    if k.precision == Precision::Autocast {
        warnings.push(
            "the row was priced with fp32 weights under torch.autocast (precision=autocast), which Megatron-LM does not run: --bf16 keeps bf16 weights with an fp32 master copy, so its memory and time differ from the row".into(),
        );
    }
}

/// One Megatron-LM argument: the flag and its value, if it takes one.
type Arg = (&'static str, Option<String>);

/// Megatron-LM arguments in order; each flag is one of [`MEGATRON_FLAGS`], the list the tests
/// hold to the cited parser.
struct Flags(Vec<Arg>);

impl Flags {
    fn push(&mut self, arg: Arg) {
        debug_assert!(
            MEGATRON_FLAGS.contains(&arg.0),
            "{} is missing from MEGATRON_FLAGS",
            arg.0
        );
        self.0.push(arg);
    }
}

/// torchtitan's Llama 3 flavors by shape: (flavor, layers, hidden, heads, key/value heads, FFN
/// width), as `llama3_configs` in torchtitan/models/llama3/__init__.py at
/// pytorch/torchtitan@00f555e1114a8286eb1d4e379cae67d56156b61d (the FFN width is its
/// `compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier)`: 8B 1024 and 1.3, 70B 4096 and
/// 1.3, 405B 4096 and 1.2). The vocabulary comes from the tokenizer.
const TORCHTITAN_LLAMA3_FLAVORS: &[(&str, u64, u64, u64, u64, u64)] = &[
    ("8B", 32, 4096, 32, 8, 14336),
    ("70B", 80, 8192, 64, 8, 28672),
    ("405B", 126, 16384, 128, 8, 53248),
];

/// The torchtitan Llama 3 flavor with exactly the shape of `model`, if any.
fn llama3_flavor(model: &Model, values: &Bindings) -> Option<&'static str> {
    let r = &model.roles;
    let get = |s: Option<&String>| s.and_then(|s| whole(values, s));
    let shape = (
        get(r.layer.as_ref())?,
        get(r.hidden.as_ref())?,
        get(r.heads.as_ref())?,
        get(r.kv_heads.as_ref())?,
        get(r.ffn.as_ref())?,
    );
    TORCHTITAN_LLAMA3_FLAVORS
        .iter()
        .find(|f| (f.1, f.2, f.3, f.4, f.5) == shape)
        .map(|f| f.0)
}

/// A torchtitan TOML job config for `evaluation`'s strategy, and what of it the config cannot
/// state (also written into it as comments).
fn torchtitan(
    model: &Model,
    values: &Bindings,
    evaluation: &Evaluation,
) -> Result<(String, Vec<String>), Error> {
    let k = &evaluation.knobs;
    torchtitan_schedule(k)?;
    let data_parallel = torchtitan_data_parallel(k)?;
    let l = layers(model, values)?;
    let mut warnings = Vec::new();
    let split_points = torchtitan_split_points(model, evaluation, l, &mut warnings);
    if k.precision == Precision::Autocast {
        warnings.push(
            "the row was priced with fp32 weights under torch.autocast (precision=autocast); torchtitan's FSDP casts its parameters to `training.mixed_precision_param` (bfloat16 by default) instead, so its memory and time differ from the row".into(),
        );
    }
    let quantized = torchtitan_quantization(k, &mut warnings);
    torchtitan_dualpipe_v(k, &mut warnings);
    if k.recompute == Recompute::Selective
        && !crate::model::RecomputeModule::is_default(&model.recompute_modules)
    {
        warnings.push(format!(
            "torchtitan's selective activation checkpointing (`op`) chooses what to save by operator type, not by module: the row's recompute modules ({}) are not what it runs",
            crate::model::RecomputeModule::list(&model.recompute_modules, ", ")
        ));
    }
    let (mbs, b) = micro_batch_size(model, values, k)?;
    let s = role_value(values, model.roles.sequence.as_ref());
    // torchtitan (train.py at TORCHTITAN_VERSION) runs `global_batch_size // (local_batch_size ×
    // dp)` gradient-accumulation steps of `local_batch_size` samples each; with a pipeline, each
    // such step is cut into `local_batch_size // pipeline_parallel_microbatch_size`
    // micro-batches (distributed/pipeline_parallel.py). So a row's micro-batches are pipeline
    // micro-batches when pp > 1, and accumulation steps of one micro-batch each when pp = 1.
    let local = if k.pp > 1 {
        &b / Rational::from_integer(k.dp.into())
    } else {
        Rational::from_integer(mbs.into())
    };
    let mut t = format!("# torchtitan job config (keys as in {TORCHTITAN_VERSION})\n");
    for w in &warnings {
        t.push_str(&format!("# warning: {w}\n"));
    }
    t.push_str(&format!(
        "[job]\ndescription = \"{} {}\"\n\n",
        model.name,
        k.describe(Some(&b)),
    ));
    let converter = quantized.as_ref().map(|(c, _)| *c);
    t.push_str(&torchtitan_model_section(model, values, converter));
    t.push_str(&format!(
        "[training]\nlocal_batch_size = {local}\nglobal_batch_size = {b}\n"
    ));
    if let Some(s) = &s {
        t.push_str(&format!("seq_len = {s}\n"));
    }
    if quantized.is_some() {
        // torchtitan's docs/float8.md: `--training.compile` is "required for competitive
        // performance", fusing the scaling and casting kernels the row was priced with.
        t.push_str("compile = true\n");
    }
    t.push_str(&torchtitan_parallelism(
        k,
        data_parallel,
        &split_points,
        mbs,
    ));
    t.push_str(&format!("context_parallel_degree = {}\n", k.cp));
    if k.cp > 1 {
        // The ring the cost model prices: each step passes a key/value shard to the next rank.
        // torchtitan's `alltoall` does that (PyTorch's _AllToAllRotater permutes the shard to
        // rank + 1); its default `allgather` gathers every shard at once.
        t.push_str(
            "# alltoall passes each key/value shard to the next rank, the ring that was priced\ncontext_parallel_rotate_method = \"alltoall\"\n",
        );
    }
    if k.ep > 1 {
        t.push_str(&format!("expert_parallel_degree = {}\n", k.ep));
    }
    t.push_str(&format!(
        "\n[activation_checkpoint]\nmode = \"{}\"\n",
        k.recompute
    ));
    if k.recompute == Recompute::Selective {
        t.push_str("selective_ac_option = \"op\"\n");
    }
    if let Some((_, section)) = &quantized {
        t.push('\n');
        t.push_str(section);
    }
    Ok((t, warnings))
}

/// What a DualPipeV row needs of torchtitan beyond the keys' version, and where torchtitan runs
/// its F&B chunks otherwise than they were priced. PyTorch's `ScheduleDualPipeV` runs an F&B
/// chunk's forward and backward one after the other unless a callback overlaps them;
/// torchtitan registers one (torchtitan/distributed/dual_pipe_v.py, `overlap_callback`, at
/// pytorch/torchtitan@02ef790c79614758f85880e173d2338d7de502a3) only with expert parallelism,
/// `parallelism.pipeline_parallel_expert_parallel_overlap` (default true) and, its docstring
/// says, without activation checkpointing.
fn torchtitan_dualpipe_v(k: &Knobs, warnings: &mut Vec<String>) {
    if k.pp <= 1 || k.schedule != Schedule::DualPipeV {
        return;
    }
    warnings.push(format!(
        "DualPipeV is newer than the keys' torchtitan: it needs a torchtitan whose pipeline builder imports PyTorch's ScheduleDualPipeV (pytorch/torchtitan@02ef790c79614758f85880e173d2338d7de502a3) and a PyTorch that has it; {TORCHTITAN_VERSION} does not name it"
    ));
    if k.ep <= 1 {
        warnings.push(
            "the row prices each F&B chunk's forward and backward overlapped (one's communication under the other's compute); torchtitan overlaps them only with expert parallelism (its dual_pipe_v overlap callback) and runs them one after the other here".into(),
        );
    } else if k.recompute != Recompute::None {
        warnings.push(
            "torchtitan's expert-parallel overlap under DualPipeV does not support activation checkpointing (its pipeline_parallel_expert_parallel_overlap docstring: set mode=\"none\"); with it the F&B chunks may not overlap as priced".into(),
        );
    }
}

/// Refuses a row whose pipeline schedule torchtitan does not name (ZB-H1, DualPipe).
fn torchtitan_schedule(k: &Knobs) -> Result<(), Error> {
    if k.pp > 1 && k.schedule == Schedule::ZeroBubbleH1 {
        // torchtitan's zero-bubble schedules are PyTorch's `ZBVZeroBubble` (two V-shaped
        // stages per rank, `--schedule zb-v` here) and `InterleavedZeroBubble` (several stages
        // per rank): neither is ZB-H1 with one stage per rank as priced here.
        return Err(Error::Usage(
            "--emit torchtitan: the top strategy uses the ZB-H1 schedule (one stage per rank), which torchtitan does not name (its zero-bubble schedules, ZBVZeroBubble and InterleavedZeroBubble, run several stages per rank); rank with --schedule zb-v, 1f1b or interleaved-1f1b".into(),
        ));
    }
    if k.pp > 1 && k.schedule == Schedule::DualPipe {
        // torchtitan's pipeline schedules are PyTorch's (torch/distributed/pipelining/
        // schedules.py), among them `ScheduleDualPipeV`, the cut-in-half V-shape variant
        // (`--schedule dualpipev` here), not DualPipe's pp ranks holding stages i and
        // pp − 1 − i fed from both ends as priced here.
        return Err(Error::Usage(
            "--emit torchtitan: the top strategy uses the DualPipe schedule (two stages per rank, micro-batches fed from both ends), which torchtitan does not name (its schedules are PyTorch's; DualPipeV, the V-shaped variant, is --schedule dualpipev here); rank with --schedule dualpipev, 1f1b or interleaved-1f1b".into(),
        ));
    }
    Ok(())
}

/// How torchtitan runs the row's data parallelism: (replicate degree, shard degree, FSDP2's
/// `fsdp_reshard_after_forward`). torchtitan shards data parallelism with FSDP2 (ZeRO-3, or
/// ZeRO-2 when parameters are not resharded after forward) and replicates it without sharding
/// (ZeRO-0); it has no ZeRO-1, and its tensor parallelism always runs sequence parallelism.
fn torchtitan_data_parallel(k: &Knobs) -> Result<(u64, u64, Option<&'static str>), Error> {
    let refuse = |why: String| Err(Error::Usage(format!("--emit torchtitan: {why}")));
    let dp = match k.zero {
        0 => (k.dp, 1, None),
        2 => (1, k.dp, Some("never")),
        3 => (1, k.dp, Some("always")),
        z => {
            return refuse(format!(
                "ZeRO stage {z} has no torchtitan equivalent (it shards data parallelism with FSDP2 — ZeRO-3, or ZeRO-2 without resharding after forward — or replicates it); rank with --fix zero=0, 2 or 3"
            ))
        }
    };
    if k.tp > 1 && !k.sequence_parallel {
        return refuse(
            "torchtitan's tensor parallelism always shards the norms and residuals by sequence (sequence parallelism); rank without --no-sp or --fix sp=off".into(),
        );
    }
    Ok(dp)
}

/// The `[parallelism]` section up to the context-parallel degree: data parallelism as
/// [`torchtitan_data_parallel`] gives it, the tensor-parallel degree, and the pipeline (its
/// schedule, micro-batch size `mbs` and `split_points`, where pp > 1).
fn torchtitan_parallelism(
    k: &Knobs,
    (replicate, shard, reshard): (u64, u64, Option<&str>),
    split_points: &[u64],
    mbs: u64,
) -> String {
    let mut t = format!(
        "\n[parallelism]\ndata_parallel_replicate_degree = {replicate}\ndata_parallel_shard_degree = {shard}\n"
    );
    if let Some(r) = reshard {
        t.push_str(&format!("fsdp_reshard_after_forward = \"{r}\"\n"));
    }
    t.push_str(&format!(
        "tensor_parallel_degree = {}\npipeline_parallel_degree = {}\n",
        k.tp, k.pp
    ));
    let schedule = match (k.pp, k.schedule) {
        (1, _) => None,
        (_, Schedule::Gpipe) => Some("GPipe"),
        (_, Schedule::OneFOneB) => Some("1F1B"),
        (_, Schedule::Interleaved) => Some("Interleaved1F1B"),
        // PyTorch's `ScheduleZBVZeroBubble`, with its stages placed as a "V" (torchtitan's
        // pipeline builder places rank r's stages at r and 2·pp − 1 − r for it), the split
        // points cutting 2·pp stages.
        (_, Schedule::ZeroBubbleV) => Some("ZBVZeroBubble"),
        // PyTorch's `ScheduleDualPipeV` (torch/distributed/pipelining/schedules.py,
        // `get_schedule_class`: "DualPipeV"), placed as a "V" like ZBVZeroBubble
        // (torchtitan/distributed/pipeline_parallel.py: `style = "v"` for both).
        (_, Schedule::DualPipeV) => Some("DualPipeV"),
        // Refused before (`torchtitan`): no torchtitan schedule is ZB-H1 or DualPipe.
        (_, Schedule::ZeroBubbleH1 | Schedule::DualPipe) => None,
    };
    if let Some(s) = schedule {
        let points: Vec<String> = split_points
            .iter()
            .map(|p| format!("\"layers.{p}\""))
            .collect();
        t.push_str(&format!(
            "pipeline_parallel_schedule = \"{s}\"\npipeline_parallel_microbatch_size = {mbs}\npipeline_parallel_split_points = [{}]\n",
            points.join(", ")
        ));
    }
    t
}

/// torchtitan's `pipeline_parallel_split_points`: the modules that begin each stage after the
/// first (job_config.py at TORCHTITAN_VERSION: "layers.0,layers.2" makes three stages, the first
/// up to layers.0, the second layers.0 up to layers.2, the third the rest), so the embedding
/// stays on the first stage and the output on the last. One stage per device, or `chunks` per
/// device in model order when interleaved; `l` layers. A ranked split that split points cannot
/// state adds a warning and gives even points.
fn torchtitan_split_points(
    model: &Model,
    evaluation: &Evaluation,
    l: u64,
    warnings: &mut Vec<String>,
) -> Vec<u64> {
    let k = &evaluation.knobs;
    let v = k.virtual_chunks();
    let even = |stages: u64| -> Vec<u64> { (1..stages).map(|s| s * l / stages).collect() };
    match (k.pp, layer_split(model, evaluation)) {
        (1, _) => Vec::new(),
        (_, Split::Even) => even(k.pp * v),
        (_, Split::Uneven(c)) if v == 1 => c
            .iter()
            .scan(0, |at, n| {
                *at += n;
                Some(*at)
            })
            .take(c.len() - 1)
            .collect(),
        (_, Split::Uneven(c)) => {
            warnings.push(format!(
                "the ranked pipeline puts {} layers on its devices, which split points cannot state with {v} model chunks per device (how each chunk holds its layers is not ranked); the split points below are even, so memory and time differ from the row",
                list(&c)
            ));
            even(k.pp * v)
        }
        (_, Split::Other(why)) => {
            warnings.push(format!(
                "the ranked pipeline is not a split of the layers alone: {why}; the split points below are even"
            ));
            even(k.pp * v)
        }
    }
}

/// torchtitan's model converter (torchao) that runs the row's FP8 linear layers, and its
/// section of the config: `float8` with tensorwise scaling for fp8-current (per-tensor current
/// scaling), `mx` for mxfp8. Either leaves the output layer in bf16, as the row was priced
/// (Transformer Engine's default); the attention core is never converted. With FP8 parameters
/// under FSDP (ZeRO 2–3) the float8 converter all-gathers the weights in FP8
/// (`enable_fsdp_float8_all_gather`, with one all-reduce for all scales,
/// `precompute_float8_dynamic_scale_for_fsdp`: torchtitan's docs/float8.md). The other recipes
/// have no torchtitan converter: the config trains them in bf16, with a warning, as it does
/// FP8 dispatch.
fn torchtitan_quantization(
    k: &Knobs,
    warnings: &mut Vec<String>,
) -> Option<(&'static str, String)> {
    let out = match k.precision {
        Precision::Fp8Current => {
            let mut s = String::from(
                "[float8]\nrecipe_name = \"tensorwise\"\n# the output layer stays bf16, as priced\nfilter_fqns = [\"output\"]\n",
            );
            if k.fp8_params && k.zero >= 2 {
                s.push_str("# FP8 parameters: the FSDP all-gathers move the weights in FP8\nenable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true\n");
            }
            Some(("float8", s))
        }
        Precision::Mxfp8 => Some(("mx", "[mx]\nrecipe_name = \"mxfp8\"\n".to_string())),
        p if p.is_fp8() => {
            warnings.push(format!(
                "the row was priced with FP8 linear layers under precision={p}, which torchtitan's converters (torchao's float8 with tensorwise or rowwise scaling, mx for mxfp8) do not run: the config below trains them in bf16"
            ));
            None
        }
        _ => None,
    };
    if k.fp8_dispatch {
        warnings.push(
            "the row was priced with FP8 dispatch (fp8_dispatch), which torchtitan does not run: its expert-parallel all-to-alls move bf16".into(),
        );
    }
    if k.node_dispatch {
        warnings.push(
            "the row was priced with node-limited dispatch (node_dispatch: a token crosses to each other node once, DeepEP's internode kernels), which the cited torchtitan does not run: its expert-parallel all-to-alls send every routed copy".into(),
        );
    }
    if k.fp8_params && !(k.precision == Precision::Fp8Current && k.zero >= 2) {
        warnings.push(
            "the row keeps FP8 parameters (fp8_params), which torchtitan gathers in FP8 only with tensorwise float8 under FSDP (precision=fp8-current, zero 2 or 3): the config below gathers them in bf16".into(),
        );
    }
    out
}

/// The job config's `[model]` section: torchtitan's llama3 flavor of exactly this shape, or a
/// comment saying what to add; with the model converter `converter` where the row's precision
/// has one ([`torchtitan_quantization`]).
fn torchtitan_model_section(model: &Model, values: &Bindings, converter: Option<&str>) -> String {
    let converters = converter
        .map(|c| format!("converters = [\"{c}\"]\n"))
        .unwrap_or_default();
    match (model.family.as_deref(), llama3_flavor(model, values)) {
        (Some("llama"), Some(flavor)) => format!(
            "[model]\nname = \"llama3\"\n# the flavor of exactly this shape (layers, hidden, heads, key/value heads, FFN width)\nflavor = \"{flavor}\"\n{converters}\n"
        ),
        (Some("llama"), None) => format!(
            "[model]\nname = \"llama3\"\n# no torchtitan llama3 flavor has this model's shape: add one with its layers, hidden size, heads, key/value heads and FFN width, and set flavor to it\n{converters}\n",
        ),
        (family, _) if converter.is_some() => format!(
            "[model]\n# torchtitan ships no model of the `{}` family; name your own and set its shape\n{converters}\n",
            family.unwrap_or(&model.name)
        ),
        (family, _) => format!(
            "# [model]: torchtitan ships no model of the `{}` family; name your own and set its shape\n\n",
            family.unwrap_or(&model.name)
        ),
    }
}
