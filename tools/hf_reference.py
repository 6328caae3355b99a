#!/usr/bin/env python3
"""Reference parameter counts and forward matmul FLOPs of Hugging Face configs.

For each config.json named on the command line (default: the fixtures listed in FIXTURES) this
builds the transformers model the config describes, with no weights, and writes:

* `params`: learnable parameters of the full published config, each tied tensor once
  (`sum(p.numel() for p in model.parameters())`, which yields a shared tensor once), built on the
  meta device so that no memory is allocated;
* `flops`: forward FLOPs of `model(input_ids)` as `torch.utils.flop_counter.FlopCounterMode`
  counts them (matmul-like operators: mm, addmm, bmm, baddbmm, scaled-dot-product attention,
  convolutions), on the CPU in bfloat16 with random weights and random tokens, with eager attention, at batch `B`, sequence `S` and the
  config's layer count reduced to `L` (FLOPs are linear in the layer count; the reduced count
  keeps the script fast and is recorded next to the number); for the fixtures of PARAMS_ONLY
  `flops` is null and `flops_not_measured` says why;
* `state_dict_buffers`: the elements of the state dict that are not parameters (persistent
  buffers, such as DeepSeek-V3's e_score_correction_bias), stored but not learned.

Only PyTorch and transformers are needed; nothing is downloaded (the configs are local files).

    python -m venv /tmp/hfref && /tmp/hfref/bin/pip install torch transformers
    /tmp/hfref/bin/python tools/hf_reference.py -o tests/fixtures/hf/reference.json

The output is committed; the tests read it and need neither Python nor a network.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "hf")

# The fixtures measured, and the reduced shape the FLOPs are counted at.
FIXTURE_NAMES = [
    "Qwen2.5-7B",
    "Qwen2-0.5B",
    "Qwen3-8B",
    "Qwen3-0.6B",
    "gemma-7b",
    "gemma-2b",
    "gemma-2-9b",
    "gemma-2-2b",
    "Phi-3-mini-4k-instruct",
    "phi-2",
    "opt-1.3b",
    "pythia-1.4b",
    "falcon-7b",
    "Qwen3-30B-A3B",
    "Qwen1.5-MoE-A2.7B",
    "DeepSeek-V2-Lite",
    "DeepSeek-V2",
    "DeepSeek-V3",
    "DeepSeek-V3-tiny",
]
B, S, L = 2, 64, 2

# Fixtures whose parameters are counted but whose FLOPs are not measured, and why. DeepSeek-V3
# has three dense layers before the first sparse one, so a reduced model with a sparse layer has
# four layers of the full width (about 15 billion parameters, more memory than the CPU run may
# take); its FLOPs are measured on DeepSeek-V3-tiny, the same architecture at small sizes.
PARAMS_ONLY = {
    "DeepSeek-V3": "four full-width layers (three dense, one sparse) do not fit the CPU run; "
    "the architecture's FLOPs are measured on DeepSeek-V3-tiny",
}


def build(cfg):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")


def count(path, name):
    cfg = AutoConfig.from_pretrained(path)
    model = build(cfg)
    params = sum(p.numel() for p in model.parameters())
    # Tensors of the state dict that are not parameters: persistent buffers (DeepSeek-V3's
    # e_score_correction_bias), stored in a checkpoint but not learned by back-propagation.
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = sum(t.numel() for n, t in model.state_dict().items() if n not in names)
    del model
    if name in PARAMS_ONLY:
        return {
            "model_type": cfg.model_type,
            "class": type(build(cfg)).__name__,
            "params": int(params),
            "state_dict_buffers": int(buffers),
            "flops": None,
            "flops_not_measured": PARAMS_ONLY[name],
        }
    small = AutoConfig.from_pretrained(path)
    # One reduced count of layers for every architecture; for Gemma 2 the two layers are one
    # sliding-window and one global layer, for DeepSeek-V2 one dense and one MoE layer.
    small.num_hidden_layers = L
    if hasattr(small, "layer_types") and small.layer_types is not None:
        small.layer_types = small.layer_types[:L]
    # The reduced model is built on the CPU with transformers' own random initialisation: masks
    # and routing need real values (uninitialised weights can route no token to any expert).
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    # Experts run one expert at a time (`eager`): the counter does not count the grouped GEMM
    # of the default implementation.
    moe = hasattr(small, "num_experts") or hasattr(small, "num_local_experts")
    kwargs = {"experts_implementation": "eager"} if moe else {}
    model = AutoModelForCausalLM.from_config(small, attn_implementation="eager", **kwargs).eval()
    torch.set_default_dtype(torch.float32)
    ids = torch.randint(0, small.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids, use_cache=False)
    per_op = {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()}
    return {
        "model_type": cfg.model_type,
        "class": type(model).__name__,
        "params": int(params),
        "state_dict_buffers": int(buffers),
        "flops": {"B": B, "S": S, "L": L, "forward": int(counter.get_total_flops()), "by_op": per_op},
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="*", help="config.json files (default: the fixtures)")
    ap.add_argument("-o", "--output", default=os.path.join(FIXTURES, "reference.json"))
    ap.add_argument("--merge", action="store_true", help="keep the other models already in the output")
    args = ap.parse_args()
    paths = args.configs or [os.path.join(FIXTURES, n + ".json") for n in FIXTURE_NAMES]
    out = {
        "tool": "tools/hf_reference.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": {},
    }
    if args.merge and os.path.exists(args.output):
        with open(args.output) as f:
            old = json.load(f)
        if (old.get("torch"), old.get("transformers")) != (out["torch"], out["transformers"]):
            sys.exit("--merge: the output was made with other torch/transformers versions")
        out["models"] = old["models"]
    for p in paths:
        if not os.path.exists(p):
            print(f"skipped (absent): {p}", file=sys.stderr)
            continue
        name = os.path.splitext(os.path.basename(p))[0]
        out["models"][name] = count(p, name)
        flops = out["models"][name]["flops"]
        print(name, out["models"][name]["params"], flops and flops["forward"], file=sys.stderr)
    with open(args.output, "w") as f:
        json.dump(out, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
