//! `rank --emit`: the top strategy as a launch configuration — Megatron-LM command-line
//! arguments, a torchtitan TOML job config, or per-operator placements as JSON.

use super::rank::Emit;
use crate::error::Error;
use crate::model::{AttentionMode, Model};
use crate::parallel::{analyse, Evaluation, Layout};
use crate::strategy::{Knobs, Recompute, Schedule};
use crate::sym::{Bindings, Rational};
use serde::Serialize;

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
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--cp-comm-type",
    "--expert-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--micro-batch-size",
    "--global-batch-size",
    "--sequence-parallel",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--attention-backend",
    "--tp-comm-overlap",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--bf16",
];

/// Every torchtitan job-config key `--emit torchtitan` can print, as `section.key`.
pub const TORCHTITAN_KEYS: &[&str] = &[
    "job.description",
    "model.name",
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
    "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
];

/// Emits `evaluation`'s strategy of `model` as `emit` asks.
pub fn emit(
    emit: Emit,
    model: &Model,
    values: &Bindings,
    evaluation: &Evaluation,
    tp_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<Emitted, Error> {
    let k = &evaluation.knobs;
    match emit {
        Emit::Megatron => {
            let args = megatron(model, values, k)?;
            let text = format!(
                "# Megatron-LM arguments (flag names as in {MEGATRON_VERSION})\n{}",
                args.iter()
                    .map(|(f, v)| match v {
                        Some(v) => format!("{f} {v}"),
                        None => f.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" \\\n  ")
            );
            let json = serde_json::json!({
                "megatron_lm": MEGATRON_VERSION,
                "arguments": args.iter().flat_map(|(f, v)| {
                    std::iter::once(f.to_string()).chain(v.clone())
                }).collect::<Vec<String>>(),
            });
            Ok(Emitted { text, json })
        }
        Emit::Torchtitan => {
            let (toml, json) = torchtitan(model, values, k)?;
            Ok(Emitted { text: toml, json })
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
            .map_err(|e| Error::Usage(format!("--emit json: {e}")))?;
            let text = serde_json::to_string_pretty(&json)
                .map_err(|e| Error::Usage(format!("--emit json: {e}")))?;
            Ok(Emitted { text, json })
        }
    }
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
    k: &Knobs,
) -> Result<Vec<(&'static str, Option<String>)>, Error> {
    let mut a: Vec<(&'static str, Option<String>)> = Vec::new();
    let l = layers(model, values)?;
    // Model shape.
    a.push(("--num-layers", Some(l.to_string())));
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
    }
    // Parallelism.
    a.push(("--tensor-model-parallel-size", Some(k.tp.to_string())));
    a.push(("--pipeline-model-parallel-size", Some(k.pp.to_string())));
    a.push(("--context-parallel-size", Some(k.cp.to_string())));
    if k.cp > 1 {
        // Keys and values passed around the context-parallel ring point to point, as costed.
        a.push(("--cp-comm-type", Some("p2p".into())));
    }
    if k.ep > 1 {
        a.push(("--expert-model-parallel-size", Some(k.ep.to_string())));
    }
    if k.pp > 1 && k.schedule == Schedule::Interleaved {
        // Megatron-LM interleaves whenever virtual stages are set, and runs 1F1B otherwise; it
        // has no GPipe schedule.
        a.push((
            "--num-layers-per-virtual-pipeline-stage",
            Some((l / (k.pp * k.chunks)).to_string()),
        ));
    }
    if k.pp > 1 && k.schedule == Schedule::Gpipe {
        return Err(Error::Usage(
            "--emit megatron: the top strategy uses the GPipe schedule, which Megatron-LM does not run (it runs 1F1B, interleaved when virtual stages are set); rank with --schedule 1f1b or interleaved-1f1b".into(),
        ));
    }
    let (mbs, b) = micro_batch_size(model, values, k)?;
    a.push(("--micro-batch-size", Some(mbs.to_string())));
    a.push(("--global-batch-size", Some(b.to_string())));
    if k.sequence_parallel {
        a.push(("--sequence-parallel", None));
    }
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
        // and the parameters (`optim_grads_params`, ZeRO-3).
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
        }
        z => {
            return Err(Error::Usage(format!(
                "--emit megatron: ZeRO stage {z} does not exist"
            )))
        }
    }
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
    Ok(a)
}

/// A torchtitan TOML job config for strategy `k`, and the same as JSON.
fn torchtitan(
    model: &Model,
    values: &Bindings,
    k: &Knobs,
) -> Result<(String, serde_json::Value), Error> {
    let refuse = |why: String| Err(Error::Usage(format!("--emit torchtitan: {why}")));
    // torchtitan shards data parallelism with FSDP2 (ZeRO-3, or ZeRO-2 when parameters are not
    // resharded after forward) and replicates it without sharding (ZeRO-0); it has no ZeRO-1.
    let (replicate, shard, reshard) = match k.zero {
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
    let schedule = match (k.pp, k.schedule) {
        (1, _) => None,
        (_, Schedule::Gpipe) => Some("GPipe"),
        (_, Schedule::OneFOneB) => Some("1F1B"),
        (_, Schedule::Interleaved) => Some("Interleaved1F1B"),
    };
    let (mbs, b) = micro_batch_size(model, values, k)?;
    let s = role_value(values, model.roles.sequence.as_ref());
    let local = &b / Rational::from_integer(k.dp.into());
    let mut t = String::new();
    t.push_str(&format!(
        "# torchtitan job config (keys as in {TORCHTITAN_VERSION})\n[job]\ndescription = \"{} {}\"\n\n",
        model.name,
        k.describe(Some(&b)),
    ));
    if model.family.as_deref() == Some("llama") {
        t.push_str(
            "[model]\nname = \"llama3\"\n# set flavor to the torchtitan flavor of this model\n\n",
        );
    } else {
        t.push_str(&format!(
            "# [model]: torchtitan ships no model of the `{}` family; name your own\n\n",
            model.family.as_deref().unwrap_or(&model.name)
        ));
    }
    t.push_str(&format!(
        "[training]\nlocal_batch_size = {local}\nglobal_batch_size = {b}\n"
    ));
    if let Some(s) = &s {
        t.push_str(&format!("seq_len = {s}\n"));
    }
    t.push_str(&format!(
        "\n[parallelism]\ndata_parallel_replicate_degree = {replicate}\ndata_parallel_shard_degree = {shard}\n"
    ));
    if let Some(r) = reshard {
        t.push_str(&format!("fsdp_reshard_after_forward = \"{r}\"\n"));
    }
    t.push_str(&format!(
        "tensor_parallel_degree = {}\npipeline_parallel_degree = {}\n",
        k.tp, k.pp
    ));
    if let Some(s) = schedule {
        t.push_str(&format!(
            "pipeline_parallel_schedule = \"{s}\"\npipeline_parallel_microbatch_size = {mbs}\n"
        ));
        if k.schedule == Schedule::Interleaved {
            let l = layers(model, values)?;
            t.push_str(&format!(
                "pipeline_parallel_layers_per_stage = {}\n",
                l / (k.pp * k.chunks)
            ));
        }
    }
    t.push_str(&format!("context_parallel_degree = {}\n", k.cp));
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
    let json = serde_json::json!({
        "torchtitan": TORCHTITAN_VERSION,
        "toml": t,
    });
    Ok((t, json))
}
