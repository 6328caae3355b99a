#!/usr/bin/env python3
"""Where `symshard rank` places the layouts of published runs.

For each step-time row of the given validation files (default: every file in validation/ whose
rows state a layout on 8 devices or more), ranks the row's model on its device count, machine,
sizes and precision, with the run's software settings (its overlaps, FP8 weights, pipeline
split, activation recomputation and sequence parallelism) fixed for every layout and the whole
device memory usable (`--headroom 0%`, as `validate` checks a row's fit), and prints the place of the first ranked row with the published degrees
(dp, tp, pp, cp, ep, the ZeRO stage, the micro-batch size where the row states it and, for an
interleaved row, its chunk count), its simulated seconds, and
the #1 with its seconds. A published layout far down the list, or absent from the top 100,
is a layout the model's mechanisms do not favour although a team chose it: the ranking question
beside validate's step-time error. Needs a release build:

    cargo build --release && python3 tools/published_places.py [--stack NAME] [validation/FILE.yaml ...]

`--stack auto` ranks each row on the profile of the stack it assumes (`rank --stack`).

PyYAML reads the files (pip install pyyaml); `SYMSHARD=PATH` runs another binary.
"""
import glob
import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("SYMSHARD", os.path.join(ROOT, "target", "release", "symshard"))
TOP = 100


def degrees(strategy):
    return tuple(strategy.get(k, 1) for k in ("dp", "tp", "pp", "cp", "ep"))


def states_a_layout(text):
    """Whether a validation file's rows name a pipeline or tensor-parallel degree."""
    return "pp:" in text or "tp:" in text


def main(files, stack=None):
    for path in files:
        data = yaml.safe_load(open(path))
        for run in data.get("runs", []):
            strategy = run.get("strategy")
            if not isinstance(strategy, dict) or run.get("measure", "step") != "step":
                continue
            dp, tp, pp, cp, _ = degrees(strategy)
            devices = dp * tp * pp * cp
            if devices < 8:
                continue
            machine = str(run.get("machine", data.get("machine")))
            args = [BINARY, "rank", run["model"], "--devices", str(devices), "--calib", machine]
            # The whole device memory, as validate checks a row's fit: a layout that trained
            # fitted, whatever rank's default headroom keeps free.
            args += ["--top", str(TOP), "--format", "json", "--headroom", "0%"]
            if stack:
                args += ["--stack", stack]
            for sym, value in (run.get("set") or {}).items():
                args += ["--set", f"{sym}={value}"]
            fix = []
            if strategy.get("precision"):
                fix.append(f"precision={strategy['precision']}")
            # The run's software settings hold for every layout ranked: its overlaps and FP8
            # weights, so that layouts are compared under the settings the team ran.
            overlap = strategy.get("overlap") or {}
            on = [k for k, v in overlap.items() if v and k != "grad-reduce"]
            if overlap.get("grad-reduce") is False:
                on.append("no-grad-reduce")
            if on:
                fix.append("overlap=" + "+".join(on))
            if strategy.get("fp8_params"):
                fix.append("fp8-params=on")
            fix.append(f"recompute={strategy.get('recompute', 'none')}")
            fix.append("sp=" + ("on" if strategy.get("sequence_parallel") else "off"))
            split = strategy.get("pipeline_split") or {}
            counted = [k for k in ("embedding", "loss") if split.get(k)]
            if counted:
                # The published split counts them as layers: rank tries that only when asked.
                fix.append("account=" + "+".join(counted))
            if fix:
                args += ["--fix", ",".join(fix)]
            if strategy.get("chunks", 1) > 8:
                args += ["--max-chunks", str(strategy["chunks"])]
            if strategy.get("gpus_per_node"):
                args += ["--gpus-per-node", str(strategy["gpus_per_node"])]
            elif "nvl72" in machine and devices % 72 and devices % 64 == 0:
                # Runs on NVL72 racks hold 64 GPUs of each 72-GPU NVLink domain (the MLPerf
                # GB200 file's systems: "4x NVIDIA GB200 NVL72" for 256 GPUs, and so on).
                args += ["--gpus-per-node", "64"]
            for key in ("attention", "loss"):
                if run.get(key):
                    args += [f"--{key}", str(run[key])]
            if "dropout" in run:
                args += ["--dropout", "on" if run["dropout"] else "off"]
            if run.get("train_metrics"):
                args += ["--train-metrics", str(run["train_metrics"])]
            out = subprocess.run(args, capture_output=True, text=True)
            name = f"{os.path.basename(path)[:-5]}: {run['name']}"
            if out.returncode != 0:
                print(f"{name}: rank refused: {out.stderr.strip()[:200]}")
                continue
            rows = json.loads(out.stdout)["strategies"]
            chunks = strategy.get("chunks", 1)
            mbs = strategy.get("micro_batch_size")
            batch = (run.get("set") or {}).get("B")
            if mbs is None and strategy.get("microbatches") and batch:
                mbs = batch // (dp * strategy["microbatches"])
            same = [
                r for r in rows
                if (r["dp"], r["tp"], r["pp"], r["cp"], r["ep"]) == degrees(strategy)
                and (r.get("chunks") or 1) == chunks
                and r["zero"] == strategy.get("zero", 0)
                and (mbs is None or r["micro_batch_size"] == mbs)
            ]
            shown = f"dp {dp} tp {tp} pp {pp} cp {cp}" + (f" v {chunks}" if chunks > 1 else "")
            place = f"#{same[0]['rank']} ({same[0]['iteration_seconds']:.3f} s)" if same else f"not in the top {TOP}"
            best = f"{rows[0]['strategy']} ({rows[0]['iteration_seconds']:.3f} s)" if rows else "none fits"
            print(f"{name}: published {shown}: {place}; #1 {best}")


if __name__ == "__main__":
    argv, stack = sys.argv[1:], None
    if argv[:1] == ["--stack"]:
        stack, argv = argv[1], argv[2:]
    chosen = argv or [
        p for p in sorted(glob.glob(os.path.join(ROOT, "validation", "*.yaml")))
        if states_a_layout(open(p).read())
    ]
    main(chosen, stack)
