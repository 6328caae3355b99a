//! `rank --emit megatron|torchtitan`: every flag and key printed is one of the cited parsers', the
//! numbers printed are the ranked row's, and the strategy read back from the printed flags prices
//! (through `cost`) to the row's memory and pipeline split.

use serde_json::Value;
use std::collections::BTreeMap;

mod common;
use common::{json, refused, symshard};

/// Megatron-LM flags defined by `megatron/training/arguments.py` of NVIDIA/Megatron-LM at commit
/// 000c4ac24f61159c138b0975def722c65245983c (each `group.add_argument('--…')` of the network
/// size, training, checkpointing, distributed, mixed precision, tokenizer, data and MoE groups
/// that `--emit megatron` may print).
const MEGATRON_PARSER_FLAGS: &[&str] = &[
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--attention-backend",
    "--kv-channels",
    "--group-query-attention",
    "--num-query-groups",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--normalization",
    "--swiglu",
    "--untie-embeddings-and-output-weights",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-activations",
    "--recompute-granularity",
    "--recompute-modules",
    "--recompute-method",
    "--recompute-num-layers",
    "--disable-bias-linear",
    "--sequence-parallel",
    "--no-gradient-accumulation-fusion",
    "--bf16",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-param-gather",
    "--ckpt-format",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--num-layers-per-virtual-pipeline-stage",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--tp-comm-overlap",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--use-torch-fsdp2",
    "--context-parallel-size",
    "--cp-comm-type",
    "--vocab-size",
    "--seq-length",
    "--expert-model-parallel-size",
    "--num-experts",
    "--moe-router-topk",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--moe-token-dispatcher-type",
    "--moe-enable-deepep",
];

/// torchtitan job-config keys defined by `torchtitan/config/job_config.py` of pytorch/torchtitan
/// at commit 000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 (dataclass fields, `section.field`).
const TORCHTITAN_CONFIG_KEYS: &[&str] = &[
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
    "parallelism.pipeline_parallel_split_points",
    "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
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

#[test]
fn every_flag_emit_can_print_is_in_the_cited_parsers() {
    use symshard::emit::{MEGATRON_FLAGS, TORCHTITAN_KEYS};
    for f in MEGATRON_FLAGS {
        assert!(
            MEGATRON_PARSER_FLAGS.contains(f),
            "{f} is not a Megatron-LM flag"
        );
    }
    for k in TORCHTITAN_KEYS {
        assert!(
            TORCHTITAN_CONFIG_KEYS.contains(k),
            "{k} is not a torchtitan key"
        );
    }
}

/// `rank MODEL --devices N --top 1 --emit TARGET --format json` with `extra`.
fn ranked(model: &str, devices: u64, target: &str, extra: &[&str]) -> Value {
    let n = devices.to_string();
    json(
        &[
            &[
                "rank",
                model,
                "--devices",
                &n,
                "--top",
                "1",
                "--emit",
                target,
                "--format",
                "json",
            ][..],
            extra,
        ]
        .concat(),
    )
}

/// The emitted Megatron-LM arguments, as (flag, value).
fn megatron_args(v: &Value) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for a in v["emitted"]["arguments"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        if a.starts_with("--") {
            out.push((a.to_string(), None));
        } else {
            out.last_mut().expect("a value before any flag").1 = Some(a.to_string());
        }
    }
    out
}

fn arg<'a>(args: &'a [(String, Option<String>)], flag: &str) -> Option<&'a Option<String>> {
    args.iter().find(|(f, _)| f == flag).map(|(_, v)| v)
}

fn num_arg(args: &[(String, Option<String>)], flag: &str) -> Option<u64> {
    arg(args, flag).map(|v| {
        v.as_deref()
            .unwrap_or_else(|| panic!("{flag} without a value"))
            .parse()
            .unwrap_or_else(|e| panic!("{flag}: {e}"))
    })
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// A strategy as read back from a launch config, in `cost`'s flags.
#[derive(Debug, Clone, Default)]
struct ReadBack {
    dp: u64,
    tp: u64,
    pp: u64,
    cp: u64,
    ep: u64,
    zero: u64,
    mbs: u64,
    recompute: String,
    sp: bool,
    /// Model chunks per device when interleaved.
    chunks: Option<u64>,
    /// Layers per pipeline stage as the config places them.
    split: Vec<u64>,
}

impl ReadBack {
    fn cost_args(&self, model: &str) -> Vec<String> {
        let mut c: Vec<String> = vec!["cost".into(), model.into()];
        for (f, v) in [
            ("--dp", self.dp),
            ("--tp", self.tp),
            ("--pp", self.pp),
            ("--cp", self.cp),
            ("--ep", self.ep),
            ("--zero", self.zero),
            ("--micro-batch-size", self.mbs),
        ] {
            c.extend([f.to_string(), v.to_string()]);
        }
        c.extend(["--recompute".into(), self.recompute.clone()]);
        if self.sp {
            c.push("--sequence-parallel".into());
        }
        match self.chunks {
            Some(v) => c.extend([
                "--schedule".into(),
                "interleaved-1f1b".into(),
                "--chunks".into(),
                v.to_string(),
            ]),
            None if self.pp > 1 => c.extend(["--schedule".into(), "1f1b".into()]),
            None => {}
        }
        c.extend(["--format".into(), "json".into()]);
        c
    }
}

/// Reads the strategy back from Megatron-LM arguments, as Megatron-LM's parser would: dp is the
/// world size over tp·pp·cp, ZeRO from the distributed-optimizer and Megatron-FSDP flags, the
/// stages from `--decoder-first/last-pipeline-num-layers` (the middle stages even) or L / pp.
fn read_megatron(args: &[(String, Option<String>)], world: u64) -> ReadBack {
    let get = |f: &str| num_arg(args, f).unwrap_or(1);
    let (tp, pp, cp, ep) = (
        get("--tensor-model-parallel-size"),
        get("--pipeline-model-parallel-size"),
        get("--context-parallel-size"),
        get("--expert-model-parallel-size"),
    );
    let layers = num_arg(args, "--num-layers").expect("--num-layers");
    let zero = match arg(args, "--data-parallel-sharding-strategy")
        .cloned()
        .flatten()
        .as_deref()
    {
        Some("optim_grads") => 2,
        Some("optim_grads_params") => 3,
        Some(other) => panic!("sharding strategy {other}"),
        None if arg(args, "--use-distributed-optimizer").is_some() => 1,
        None => 0,
    };
    let recompute = arg(args, "--recompute-granularity")
        .cloned()
        .flatten()
        .unwrap_or_else(|| "none".into());
    let chunks = num_arg(args, "--num-layers-per-virtual-pipeline-stage").map(|per| {
        assert_eq!(layers % (pp * per), 0, "{layers} layers, pp {pp}, {per}");
        layers / pp / per
    });
    let first = num_arg(args, "--decoder-first-pipeline-num-layers");
    let last = num_arg(args, "--decoder-last-pipeline-num-layers");
    let split = if first.is_none() && last.is_none() {
        vec![layers / pp; pp as usize]
    } else {
        let middle = pp - first.is_some() as u64 - last.is_some() as u64;
        let rest = layers - first.unwrap_or(0) - last.unwrap_or(0);
        let each = if middle > 0 {
            assert_eq!(rest % middle, 0, "Megatron-LM needs even middle stages");
            rest / middle
        } else {
            0
        };
        let mut s = vec![each; pp as usize];
        if let Some(f) = first {
            s[0] = f;
        }
        if let Some(l) = last {
            s[pp as usize - 1] = l;
        }
        s
    };
    ReadBack {
        dp: world / (tp * pp * cp),
        tp,
        pp,
        cp,
        ep,
        zero,
        mbs: num_arg(args, "--micro-batch-size").expect("--micro-batch-size"),
        recompute,
        sp: arg(args, "--sequence-parallel").is_some(),
        chunks,
        split,
    }
}

/// Layers per stage of a `cost --format json` output: the counts of the repeated block (the
/// one all stages together run most often).
fn cost_split(cost: &Value) -> Vec<u64> {
    let stages = cost["per_device"]["stages"].as_array().unwrap();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for s in stages {
        for item in s["items"].as_array().unwrap() {
            *totals.entry(item[0].as_str().unwrap().into()).or_default() += u(&item[1]);
        }
    }
    let (layer, n) = totals.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(*n > 1, "{totals:?}");
    stages
        .iter()
        .map(|s| {
            s["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i[0].as_str() == Some(layer.as_str()))
                .map(|i| u(&i[1]))
                .sum()
        })
        .collect()
}

/// The knobs of a strategy string as `rank` prints it (`dp=8 … 1f1b … zero=1`).
fn knobs_of(strategy: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for w in strategy.split_whitespace() {
        match w.split_once('=') {
            Some((k, v)) if !w.starts_with("interleaved") => {
                m.insert(k.to_string(), v.to_string());
            }
            _ => {
                m.insert("schedule".into(), w.split('(').next().unwrap().into());
            }
        }
    }
    m
}

/// Checks the emitted strategy against the ranked row: the same knob, or one the row says does
/// not matter (a grouped row's member).
fn same_or_grouped(row: &Value, emitted: &str, knob: &str, row_value: &str) {
    let e = knobs_of(emitted);
    let got = e.get(knob).map(String::as_str).unwrap_or("1");
    if got != row_value {
        let alike: Vec<&str> = row["knobs_that_do_not_matter"][knob]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect())
            .unwrap_or_default();
        assert!(
            alike.contains(&got),
            "{knob}: emitted {got}, row {row_value}, equal-cost values {alike:?}"
        );
    }
}

/// One emitted Megatron-LM config checked against its row: flags in the cited parser and in
/// MEGATRON_FLAGS, numbers equal to the row's, and the strategy read back from the flags priced
/// by `cost` to the row's memory and (unless the config warns it cannot) the row's split.
fn check_megatron(model: &str, devices: u64, fix: &str) -> (Value, Vec<(String, Option<String>)>) {
    use symshard::emit::MEGATRON_FLAGS;
    let v = ranked(model, devices, "megatron", &["--fix", fix]);
    let args = megatron_args(&v);
    let case = format!("{model} --fix {fix}");
    for (f, _) in &args {
        assert!(MEGATRON_PARSER_FLAGS.contains(&f.as_str()), "{case}: {f}");
        assert!(MEGATRON_FLAGS.contains(&f.as_str()), "{case}: {f}");
    }
    let row = &v["strategies"][0];
    let emitted = v["emitted"]["strategy"].as_str().unwrap();
    let back = read_megatron(&args, devices);
    assert_eq!(back.tp, u(&row["tp"]), "{case}");
    assert_eq!(back.pp, u(&row["pp"]), "{case}");
    assert_eq!(back.cp, u(&row["cp"]), "{case}");
    assert_eq!(back.ep, u(&row["ep"]), "{case}");
    assert_eq!(back.dp, u(&row["dp"]), "{case}: dp = world / (tp·pp·cp)");
    assert_eq!(back.mbs, u(&row["micro_batch_size"]), "{case}");
    assert_eq!(
        arg(&args, "--global-batch-size")
            .cloned()
            .flatten()
            .as_deref(),
        v["global_batch"].as_str(),
        "{case}"
    );
    assert_eq!(
        back.sp,
        row["sequence_parallel"].as_bool().unwrap(),
        "{case}"
    );
    same_or_grouped(row, emitted, "zero", &back.zero.to_string());
    same_or_grouped(row, emitted, "recompute", &back.recompute);
    assert_eq!(back.zero.to_string(), knobs_of(emitted)["zero"], "{case}");
    assert_eq!(back.recompute, knobs_of(emitted)["recompute"], "{case}");
    let schedule = row["schedule"].as_str().unwrap();
    match back.chunks {
        Some(c) => {
            assert_eq!(schedule, "interleaved-1f1b", "{case}");
            assert_eq!(c, u(&row["chunks"]), "{case}: virtual stages");
        }
        None if back.pp > 1 => {
            same_or_grouped(row, emitted, "schedule", "1f1b");
            assert_eq!(knobs_of(emitted)["schedule"], "1f1b", "{case}");
        }
        None => {}
    }
    if back.zero >= 2 {
        // arguments.py at the cited commit asserts fsdp_dtensor checkpoints with Megatron-FSDP.
        assert_eq!(
            arg(&args, "--ckpt-format"),
            Some(&Some("fsdp_dtensor".into())),
            "{case}"
        );
        assert!(
            arg(&args, "--use-distributed-optimizer").is_some(),
            "{case}"
        );
        assert!(
            arg(&args, "--no-gradient-accumulation-fusion").is_some(),
            "{case}"
        );
    }
    // Priced again from the flags alone.
    let c = back.cost_args(model);
    let refs: Vec<&str> = c.iter().map(String::as_str).collect();
    let cost = json(&refs);
    assert_eq!(
        cost["per_device"]["memory"]["total"], row["memory"]["total"],
        "{case}: {c:?}"
    );
    let priced = cost_split(&cost);
    let warnings = v["emitted"]["warnings"].as_array().unwrap();
    if warnings.is_empty() {
        assert_eq!(back.split, priced, "{case}: the flags' stages");
    } else {
        // The config says which split it cannot state.
        let said = priced
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("/");
        assert!(
            warnings.iter().any(|w| w.as_str().unwrap().contains(&said)),
            "{case}: {warnings:?} does not name {said}"
        );
        let text = symshard()
            .args([
                "rank",
                model,
                "--devices",
                &devices.to_string(),
                "--top",
                "1",
            ])
            .args(["--fix", fix, "--emit", "megatron"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("# warning: "), "{case}: {text}");
    }
    (v, args)
}

#[test]
fn emitted_megatron_flags_are_the_parsers_and_read_back_to_the_row() {
    // tp/pp/cp/ep, interleaved, sp on/off, recompute full/selective, ZeRO 0–3, MoE.
    for (model, devices, fix) in [
        ("llama3-8b", 64, "tp=8,pp=2,zero=1"),
        ("llama3-8b", 64, "tp=8,pp=4,zero=0,schedule=1f1b"),
        ("llama3-8b", 64, "tp=8,pp=8,schedule=1f1b"),
        (
            "llama3-8b",
            64,
            "tp=4,pp=4,schedule=interleaved-1f1b,chunks=2,zero=1",
        ),
        ("llama3-8b", 64, "tp=8,cp=2,zero=2,recompute=full"),
        ("llama3-8b", 64, "tp=4,sp=off,zero=3,recompute=selective"),
        (
            "gpt3-1.3b",
            64,
            "tp=2,pp=4,schedule=interleaved-1f1b,zero=0",
        ),
        ("mixtral-8x7b", 64, "ep=4,tp=4,recompute=full,zero=1"),
        ("mixtral-8x7b", 256, "ep=2,pp=4,tp=8,zero=3"),
    ] {
        check_megatron(model, devices, fix);
    }
}

#[test]
fn megatron_fsdp_comes_with_what_the_cited_parser_requires() {
    for zero in ["2", "3"] {
        let (_, args) = check_megatron("llama3-8b", 64, &format!("zero={zero},tp=8"));
        assert!(arg(&args, "--use-megatron-fsdp").is_some());
        assert_eq!(
            arg(&args, "--ckpt-format"),
            Some(&Some("fsdp_dtensor".into()))
        );
    }
}

#[test]
fn an_uneven_pipeline_is_emitted_as_ranked() {
    // llama3-8b at tp = 4, pp = 2 is ranked 17/15 (the embedding stage is the lighter per
    // layer). At tp = 8 the layers' smaller GEMMs weigh more against the head and it is 16/16.
    let (_, args) = check_megatron("llama3-8b", 64, "tp=4,pp=2,schedule=1f1b");
    assert_eq!(
        num_arg(&args, "--decoder-first-pipeline-num-layers"),
        Some(17)
    );
    assert_eq!(
        num_arg(&args, "--decoder-last-pipeline-num-layers"),
        Some(15)
    );
    let v = ranked(
        "llama3-8b",
        64,
        "torchtitan",
        &["--fix", "tp=4,pp=2,zero=3,schedule=1f1b"],
    );
    let toml = v["emitted"]["toml"].as_str().unwrap();
    assert!(
        toml.contains("pipeline_parallel_split_points = [\"layers.17\"]"),
        "{toml}"
    );
}

#[test]
fn a_grouped_row_emits_the_member_megatron_runs() {
    // The #1 row is `gpipe|1f1b` (equal cost): 1F1B is emitted, not a refusal for GPipe.
    // (cp = 1: at ep = 2 with context parallelism the top row is an interleaved one.)
    let v = ranked("mixtral-8x7b", 256, "megatron", &["--fix", "ep=2,cp=1"]);
    let row = &v["strategies"][0];
    let alike: Vec<&str> = row["knobs_that_do_not_matter"]["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        alike.contains(&"gpipe") && alike.contains(&"1f1b"),
        "{alike:?}"
    );
    let emitted = v["emitted"]["strategy"].as_str().unwrap();
    assert_eq!(knobs_of(emitted)["schedule"], "1f1b", "{emitted}");
    check_megatron("mixtral-8x7b", 256, "ep=2");
    // A row that is GPipe alone is still refused.
    let e = refused(&[
        "rank",
        "gpt3-1.3b",
        "--devices",
        "64",
        "--top",
        "1",
        "--fix",
        "pp=4",
        "--schedule",
        "gpipe",
        "--emit",
        "megatron",
    ]);
    assert!(e.contains("GPipe"), "{e}");
}

/// The keys and values of a TOML job config, as `section.key` → value text.
fn toml_keys(toml: &str) -> BTreeMap<String, String> {
    let mut section = String::new();
    let mut out = BTreeMap::new();
    for line in toml.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[') {
            section = s.trim_end_matches(']').to_string();
            continue;
        }
        let (key, value) = line.split_once('=').unwrap();
        out.insert(
            format!("{section}.{}", key.trim()),
            value.trim().trim_matches('"').to_string(),
        );
    }
    out
}

#[test]
fn emitted_torchtitan_keys_are_the_parsers_and_read_back_to_the_row() {
    use symshard::emit::TORCHTITAN_KEYS;
    for (model, devices, fix) in [
        ("llama3-8b", 64, "tp=8,pp=2,zero=3,schedule=1f1b"),
        ("llama3-8b", 64, "tp=8,pp=4,zero=2,schedule=1f1b"),
        ("llama3-8b", 64, "tp=8,cp=2,zero=0,recompute=selective"),
        (
            "llama3-8b",
            64,
            "tp=4,pp=4,schedule=interleaved-1f1b,chunks=2,zero=3",
        ),
        ("mixtral-8x7b", 64, "ep=4,tp=4,zero=2"),
        // pp = 1 with gradient accumulation: torchtitan's local batch is then one micro-batch.
        ("llama3-8b", 64, "zero=3"),
        // torchao's float8 converter (tensorwise) with FP8 all-gathers under FSDP.
        (
            "llama3-8b",
            64,
            "zero=3,precision=fp8-current,fp8-params=on",
        ),
        ("llama3-8b", 64, "tp=8,zero=2,mbs=2"),
        // PyTorch's ZBVZeroBubble: two stages per rank, placed as a "V".
        ("llama3-8b", 64, "tp=4,pp=4,schedule=zb-v,zero=3"),
        // PyTorch's ScheduleDualPipeV, placed as a "V" too.
        ("llama3-8b", 64, "tp=4,pp=4,schedule=dualpipev,zero=3"),
    ] {
        let case = format!("{model} --fix {fix}");
        let v = ranked(model, devices, "torchtitan", &["--fix", fix]);
        let toml = v["emitted"]["toml"].as_str().unwrap();
        let keys = toml_keys(toml);
        for k in keys.keys() {
            assert!(TORCHTITAN_CONFIG_KEYS.contains(&k.as_str()), "{case}: {k}");
            assert!(TORCHTITAN_KEYS.contains(&k.as_str()), "{case}: {k}");
        }
        let row = &v["strategies"][0];
        let n = |k: &str| -> u64 { keys.get(k).map(|s| s.parse().unwrap()).unwrap_or(1) };
        assert_eq!(
            n("parallelism.tensor_parallel_degree"),
            u(&row["tp"]),
            "{case}"
        );
        assert_eq!(
            n("parallelism.pipeline_parallel_degree"),
            u(&row["pp"]),
            "{case}"
        );
        assert_eq!(
            n("parallelism.context_parallel_degree"),
            u(&row["cp"]),
            "{case}"
        );
        assert_eq!(
            n("parallelism.expert_parallel_degree"),
            u(&row["ep"]),
            "{case}"
        );
        let dp = n("parallelism.data_parallel_replicate_degree")
            * n("parallelism.data_parallel_shard_degree");
        assert_eq!(dp, u(&row["dp"]), "{case}");
        let b: u64 = v["global_batch"].as_str().unwrap().parse().unwrap();
        assert_eq!(n("training.global_batch_size"), b, "{case}");
        // Read back as torchtitan does (train.py at TORCHTITAN_VERSION): global ÷ (local × dp)
        // accumulation steps, each cut into local ÷ pipeline_parallel_microbatch_size pipeline
        // micro-batches when pp > 1 (distributed/pipeline_parallel.py).
        let local = n("training.local_batch_size");
        assert_eq!(b % (local * dp), 0, "{case}: torchtitan asserts this");
        let accumulation = b / (local * dp);
        let (mbs, per_step) = if u(&row["pp"]) > 1 {
            let m = n("parallelism.pipeline_parallel_microbatch_size");
            assert_eq!(local % m, 0, "{case}: torchtitan raises on this");
            (m, local / m)
        } else {
            (local, 1)
        };
        assert_eq!(mbs, u(&row["micro_batch_size"]), "{case}");
        assert_eq!(accumulation * per_step, u(&row["microbatches"]), "{case}");
        // The ring the model prices, not torchtitan's all-gather default.
        assert_eq!(
            keys.get("parallelism.context_parallel_rotate_method")
                .map(String::as_str),
            (u(&row["cp"]) > 1).then_some("alltoall"),
            "{case}"
        );
        // The row's memory from `cost` at the micro-batch and schedule the config states.
        let pp = u(&row["pp"]);
        // Stages per rank as torchtitan builds them: the schedule's (two under ZBVZeroBubble
        // and DualPipeV, the row's chunks under Interleaved1F1B, one otherwise).
        let schedule = keys
            .get("parallelism.pipeline_parallel_schedule")
            .map(String::as_str);
        let vee = matches!(schedule, Some("ZBVZeroBubble" | "DualPipeV"));
        let named = row["schedule"].as_str().unwrap_or("");
        let v_schedule = match named {
            "zb-v" => Some("ZBVZeroBubble"),
            "dualpipev" => Some("DualPipeV"),
            _ => None,
        };
        // A V-placed row is emitted as its own V schedule, and no other row as either.
        assert_eq!(vee, v_schedule.is_some(), "{case}");
        if vee {
            assert_eq!(schedule, v_schedule, "{case}");
        }
        let chunks = if vee { 2 } else { u(&row["chunks"]) };
        let mut c = vec![
            "cost".to_string(),
            model.into(),
            "--dp".into(),
            dp.to_string(),
        ];
        for (f, k) in [
            ("--tp", "tp"),
            ("--pp", "pp"),
            ("--cp", "cp"),
            ("--ep", "ep"),
        ] {
            c.extend([f.to_string(), u(&row[k]).to_string()]);
        }
        c.extend([
            "--micro-batch-size".into(),
            mbs.to_string(),
            "--zero".into(),
            row["zero"].to_string(),
            "--recompute".into(),
            keys["activation_checkpoint.mode"].clone(),
            "--format".into(),
            "json".into(),
        ]);
        if u(&row["tp"]) > 1 {
            c.push("--sequence-parallel".into());
        }
        // torchao's tensorwise float8 converter is per-tensor current scaling; its FSDP FP8
        // all-gather keeps FP8 parameters.
        if keys.get("model.converters").map(String::as_str) == Some("[\"float8\"]") {
            assert_eq!(keys["float8.recipe_name"], "tensorwise", "{case}");
            c.extend(["--precision".into(), "fp8-current".into()]);
            if keys
                .get("float8.enable_fsdp_float8_all_gather")
                .map(String::as_str)
                == Some("true")
            {
                c.push("--fp8-params".into());
            }
        }
        if vee {
            c.extend(["--schedule".into(), named.into()]);
        } else if chunks > 1 {
            c.extend([
                "--schedule".into(),
                "interleaved-1f1b".into(),
                "--chunks".into(),
                chunks.to_string(),
            ]);
        } else if pp > 1 {
            c.extend(["--schedule".into(), "1f1b".into()]);
        }
        let refs: Vec<&str> = c.iter().map(String::as_str).collect();
        let cost = json(&refs);
        assert_eq!(
            cost["per_device"]["memory"]["total"], row["memory"]["total"],
            "{case}: {c:?}"
        );
        if pp > 1 {
            // Split points read back as layers per stage, against `cost`'s stages.
            let points: Vec<u64> = keys["parallelism.pipeline_parallel_split_points"]
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|p| {
                    p.trim()
                        .trim_matches('"')
                        .strip_prefix("layers.")
                        .unwrap()
                        .parse()
                        .unwrap()
                })
                .collect();
            assert_eq!(points.len() as u64, pp * chunks - 1, "{case}: {points:?}");
            let priced = cost_split(&cost);
            let total: u64 = priced.iter().sum();
            let mut at = 0;
            let mut stages = Vec::new();
            for p in points.iter().chain(std::iter::once(&total)) {
                stages.push(p - at);
                at = *p;
            }
            let warnings = v["emitted"]["warnings"].as_array().unwrap();
            if chunks == 1 {
                assert_eq!(stages, priced, "{case}");
                assert!(warnings.is_empty(), "{case}: {warnings:?}");
            } else if priced.windows(2).all(|w| w[0] == w[1]) {
                assert!(stages.iter().all(|s| *s == total / (pp * chunks)), "{case}");
            } else {
                // Uneven devices with model chunks: the config says it cannot state them.
                let said = priced
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join("/");
                assert!(
                    warnings.iter().any(|w| w.as_str().unwrap().contains(&said)),
                    "{case}: {warnings:?}"
                );
                assert!(toml.contains("# warning: "), "{case}");
            }
        }
    }
}

#[test]
fn emit_megatron_states_the_model_shape() {
    // llama3-8b (models/llama3-8b.yaml, from the Hugging Face config of Meta-Llama-3-8B): L 32,
    // H 4096, NH 32, KV 8, F 14336, V 128256, S 8192, flash attention.
    let v = ranked("llama3-8b", 64, "megatron", &[]);
    let args = megatron_args(&v);
    for (flag, value) in [
        ("--num-layers", "32"),
        ("--hidden-size", "4096"),
        ("--num-attention-heads", "32"),
        ("--num-query-groups", "8"),
        ("--ffn-hidden-size", "14336"),
        ("--vocab-size", "128256"),
        ("--seq-length", "8192"),
        ("--attention-backend", "flash"),
    ] {
        assert_eq!(arg(&args, flag), Some(&Some(value.into())), "{flag}");
    }
}

#[test]
fn the_torchtitan_flavor_is_set_only_for_an_exact_shape() {
    // llama3-8b is torchtitan's llama3 "8B" (32 layers, 4096 hidden, 32 heads, 8 key/value heads,
    // FFN 14336: torchtitan/models/llama3/__init__.py); llama2-7b (32 key/value heads, FFN
    // 11008) is no torchtitan llama3 flavor.
    let v = ranked("llama3-8b", 64, "torchtitan", &["--fix", "zero=3"]);
    let keys = toml_keys(v["emitted"]["toml"].as_str().unwrap());
    assert_eq!(keys.get("model.flavor").map(String::as_str), Some("8B"));
    let v = ranked("llama2-7b", 64, "torchtitan", &["--fix", "zero=3"]);
    let toml = v["emitted"]["toml"].as_str().unwrap();
    assert!(!toml_keys(toml).contains_key("model.flavor"), "{toml}");
    assert!(toml.contains("no torchtitan llama3 flavor"), "{toml}");
}

#[test]
fn emit_refuses_what_it_cannot_say_and_prints_after_the_table() {
    // torchtitan has no ZeRO-1.
    let e = refused(&[
        "rank",
        "llama3-8b",
        "--devices",
        "64",
        "--top",
        "1",
        "--fix",
        "zero=1",
        "--emit",
        "torchtitan",
    ]);
    assert!(
        e.contains("ZeRO stage 1 has no torchtitan equivalent"),
        "{e}"
    );
    // Table output ends with the launch config.
    let out = symshard()
        .args([
            "rank",
            "gpt3-1.3b",
            "--devices",
            "64",
            "--top",
            "1",
            "--emit",
            "megatron",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--tensor-model-parallel-size"), "{text}");
    assert!(text.contains("--attention-backend unfused"), "{text}");
}

#[test]
fn the_fix_help_lists_every_knob_the_parser_takes() {
    let out = symshard().args(["rank", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--fix"))
        .nth(1)
        .unwrap_or_else(|| panic!("{help}"));
    for (knob, _) in symshard::search::steer::KNOBS {
        assert!(
            // Knob names may hold a hyphen (`fp8-params`).
            line.split(|c: char| !(c.is_alphanumeric() || c == '-'))
                .any(|w| w == *knob),
            "--fix help omits {knob}: {line}"
        );
        // And the parser takes it.
        let value = match *knob {
            "schedule" => "1f1b",
            "sp" => "on",
            "recompute" => "full",
            "overlap" => "tp-comm",
            "precision" => "autocast",
            "account" => "embedding+loss",
            _ => "1",
        };
        let mut s = symshard::search::Steer::default();
        s.fix(&format!("{knob}={value}"), "--fix")
            .unwrap_or_else(|e| panic!("{knob}: {e}"));
    }
}

/// FP8 rows name torchtitan's converter that runs them (torchtitan/config/job_config.py at
/// TORCHTITAN_VERSION: `model.converters`, the `float8` and `mx` sections): fp8-current is
/// torchao's tensorwise float8, all-gathered in FP8 under FSDP with FP8 parameters
/// (docs/float8.md: `enable_fsdp_float8_all_gather`, `precompute_float8_dynamic_scale_for_fsdp`,
/// and `training.compile` "required for competitive performance"); mxfp8 is the `mx` converter.
/// The output layer stays bf16, as priced. A recipe torchtitan has no converter for says so.
#[test]
fn torchtitan_configs_name_the_fp8_converter_the_row_was_priced_with() {
    let v = ranked(
        "llama3-8b",
        64,
        "torchtitan",
        &[
            "--calib",
            "h100-sxm",
            "--fix",
            "zero=3,precision=fp8-current,fp8-params=on",
        ],
    );
    let keys = toml_keys(v["emitted"]["toml"].as_str().unwrap());
    assert_eq!(keys["model.converters"], "[\"float8\"]");
    assert_eq!(keys["float8.recipe_name"], "tensorwise");
    assert_eq!(keys["float8.filter_fqns"], "[\"output\"]");
    assert_eq!(keys["float8.enable_fsdp_float8_all_gather"], "true");
    assert_eq!(
        keys["float8.precompute_float8_dynamic_scale_for_fsdp"],
        "true"
    );
    assert_eq!(keys["training.compile"], "true");
    let v = ranked(
        "llama3-8b",
        64,
        "torchtitan",
        &["--calib", "b200", "--fix", "zero=3,precision=mxfp8"],
    );
    let keys = toml_keys(v["emitted"]["toml"].as_str().unwrap());
    assert_eq!(keys["model.converters"], "[\"mx\"]");
    assert_eq!(keys["mx.recipe_name"], "mxfp8");
    assert!(!keys.contains_key("float8.enable_fsdp_float8_all_gather"));
    // Delayed scaling has no torchtitan converter: bf16, with a warning.
    let v = ranked(
        "llama3-8b",
        64,
        "torchtitan",
        &["--calib", "h100-sxm", "--fix", "zero=3,precision=fp8"],
    );
    let toml = v["emitted"]["toml"].as_str().unwrap();
    assert!(!toml_keys(toml).contains_key("model.converters"), "{toml}");
    assert!(
        toml.contains("# warning: ") && toml.contains("precision=fp8"),
        "{toml}"
    );
}

/// torchtitan's selective checkpointing chooses by operator type, so a row recomputing named
/// modules (here the layer norms beside the attention core) runs otherwise under it: the config
/// says so in its header comments, as it does every other warning, and the JSON lists it.
#[test]
fn torchtitan_configs_warn_of_recompute_modules_in_their_header() {
    let v = ranked(
        "llama3-8b",
        64,
        "torchtitan",
        &[
            "--fix",
            "zero=3,recompute=selective",
            "--recompute-modules",
            "core_attn,layernorm",
        ],
    );
    let toml = v["emitted"]["toml"].as_str().unwrap();
    let say = "torchtitan's selective activation checkpointing (`op`) chooses what to save by operator type";
    assert!(toml.contains(&format!("# warning: {say}")), "{toml}");
    let warned = v["emitted"]["warnings"].as_array().unwrap();
    assert!(
        warned.iter().any(|w| w.as_str().unwrap().starts_with(say)),
        "{warned:?}"
    );
}
