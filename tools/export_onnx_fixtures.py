#!/usr/bin/env python3
"""Exports small real models to ONNX the way users do, for the import tests.

Each model is a transformers implementation (GPT-2, BERT, ViT, ResNet-18, MobileNetV2,
EfficientNet-B0 layouts) at a reduced width and depth, built from a config in this file with
random weights (drawn again after construction, so that no two tensors are equal and the
exporter cannot merge them), in training mode (as one exports a graph to analyse its training:
batch normalisation stays a node with its parameters instead of being folded into the
convolution before it, and dropout stays), exported with `torch.onnx.export`:

* `*_dynamo.onnx`: the default exporter of PyTorch 2.9 and later (`dynamo=True`, opset 18);
* `*_ts.onnx`: the TorchScript exporter (`dynamo=False`, opset 17), which writes no shapes of
  intermediate tensors. GPT-2 is given an all-ones attention mask there: without one,
  transformers' mask construction uses `aten::diff`, which that exporter cannot write.
* `*_ts_dynamic.onnx` (GPT-2, BERT, ViT): the same exporter with `dynamic_axes`, the batch
  (`batch`) and, for the text models, the sequence (`seq`) symbolic, so that the masks and
  index tensors it traces are computed from the input's shape at run time.

* `*_dynamo_mask.onnx`, `*_ts_mask.onnx`, `*_ts_dynamic_mask.onnx` (GPT-2, BERT): the same
  three exports with the attention mask as a second graph input (`attention_mask`, int64, the
  second sequence padded after 20 tokens), as a model serving padded batches is exported. Its
  forward matmul FLOPs are the unmasked ones (the script checks it).

Float initializers of more than 256 elements are then emptied (their dims kept, their data
removed) and the nodes' metadata (stack traces, name scopes) dropped, so that the fixtures stay
small: the importer reads the shapes of weights, never their values. Everything else is the
exporter's output, unchanged.

Next to the files, `reference.json` records for each model, from PyTorch itself:

* `params`: `sum(p.numel() for p in model.parameters())`;
* `matmul_flops`: the forward FLOPs `torch.utils.flop_counter.FlopCounterMode` counts
  (matmul-like operators: mm, addmm, bmm, baddbmm, convolutions) for the exported input;
* `batchnorm_channels`: the channels of all batch normalisations (the dynamo exporter folds
  each into the convolution before it: its weight and bias, 2·C parameters, become that
  convolution's bias of C);
* `token_type_params`: BERT's token-type table, whose lookup by constant indices the dynamo
  exporter folds into a constant.

    python -m venv /tmp/onnxref && /tmp/onnxref/bin/pip install torch transformers onnx onnxscript
    /tmp/onnxref/bin/python tools/export_onnx_fixtures.py
    /tmp/onnxref/bin/python tools/export_onnx_fixtures.py --mask-only   # only the *_mask files
    /tmp/onnxref/bin/python tools/export_onnx_fixtures.py --wide-only   # only gpt2_wide_ts_dynamic

The outputs are committed under tests/fixtures/onnx/exported/; the tests read them and need
neither Python nor a network.
"""

import json
import os
import sys

import onnx
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "onnx", "exported")
KEEP = 256
# The models also exported with symbolic input dimensions, and which (axis → name).
DYNAMIC = {"gpt2": {0: "batch", 1: "seq"}, "bert": {0: "batch", 1: "seq"}, "vit": {0: "batch"}}


# The models also exported with the attention mask as a graph input.
MASKED = ["gpt2", "bert"]


def padding_mask(x):
    """All ones but the second sequence, padded after 20 tokens."""
    mask = torch.ones_like(x)
    mask[1, 20:] = 0
    return mask


class Masked(torch.nn.Module):
    """The model's first output for token ids and an attention mask, both graph inputs."""

    def __init__(self, model, kwargs):
        super().__init__()
        self.model = model
        self.kwargs = kwargs

    def forward(self, x, attention_mask):
        out = self.model(x, attention_mask=attention_mask, return_dict=False, **self.kwargs)
        return out[0]


class Logits(torch.nn.Module):
    """The model's first output only (no cache, no dict), as users export it."""

    def __init__(self, model, kwargs, mask=False):
        super().__init__()
        self.model = model
        self.kwargs = kwargs
        self.mask = mask

    def forward(self, x):
        kwargs = dict(self.kwargs)
        if self.mask:
            kwargs["attention_mask"] = torch.ones_like(x)
        out = self.model(x, return_dict=False, **kwargs)
        return out[0]


def models():
    t = transformers
    B, S = 2, 32
    ids = torch.randint(0, 1000, (B, S), generator=torch.Generator().manual_seed(1))
    img = lambda side: torch.randn(B, 3, side, side, generator=torch.Generator().manual_seed(2))
    yield "gpt2", t.GPT2LMHeadModel(
        t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=S,
                     attn_implementation="eager", use_cache=False)
    ), ids, {"use_cache": False}
    yield "bert", t.BertModel(
        t.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                     intermediate_size=256, vocab_size=1000, max_position_embeddings=S,
                     type_vocab_size=2, attn_implementation="eager"),
        add_pooling_layer=False,
    ), ids, {}
    yield "vit", t.ViTModel(
        t.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    intermediate_size=256, image_size=32, patch_size=8,
                    attn_implementation="eager"),
        add_pooling_layer=False,
    ), img(32), {}
    yield "resnet18", t.ResNetModel(
        t.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[8, 16, 32, 64],
                       embedding_size=8)
    ), img(64), {}
    yield "mobilenet_v2", t.MobileNetV2Model(
        t.MobileNetV2Config(image_size=64, depth_multiplier=0.25)
    ), img(64), {}
    yield "efficientnet_b0", t.EfficientNetModel(
        t.EfficientNetConfig(image_size=64, width_coefficient=0.25, depth_coefficient=0.5,
                             hidden_dim=320)
    ), img(64), {}


def randomise(model):
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02 + 0.01 * torch.rand(1, generator=g))


def reference(model, x, kwargs):
    params = sum(p.numel() for p in model.parameters())
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x, **kwargs)
    bn = sum(m.num_features for m in model.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    tt = sum(m.weight.numel() for n, m in model.named_modules() if n.endswith("token_type_embeddings"))
    return {"params": int(params), "matmul_flops": int(counter.get_total_flops()),
            "batchnorm_channels": int(bn), "token_type_params": int(tt)}


def shrink(path):
    m = onnx.load(path, load_external_data=True)
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                           onnx.TensorProto.BFLOAT16) and n > KEEP:
            name, dims = t.name, list(t.dims)
            t.Clear()
            t.name = name
            t.dims.extend(dims)
            t.data_type = onnx.TensorProto.FLOAT
            t.doc_string = "data removed to keep the fixture small; shape as exported"
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for f in os.listdir(os.path.dirname(path)):
        if f.startswith(os.path.basename(path)) and f != os.path.basename(path):
            os.remove(os.path.join(os.path.dirname(path), f))
    onnx.save(m, path)


def export_one(name, kind, module, args, dynamo, extra, ref):
    """Exports `module` on `args` to `<name>_<kind>.onnx` and records the file (or why the
    export failed) in `ref["files"]`."""
    path = os.path.join(OUT, f"{name}_{kind}.onnx")
    try:
        torch.onnx.export(module, args, path, dynamo=dynamo, opset_version=18 if dynamo else 17,
                          external_data=dynamo, **extra)
    except Exception as e:  # noqa: BLE001 - the failure is recorded, not hidden
        ref["files"][kind] = f"export failed: {type(e).__name__}: {str(e)[:200]}"
        print(f"{name} {kind}: export failed: {e!r}"[:300], file=sys.stderr)
        return
    shrink(path)
    ref["files"][kind] = os.path.basename(path)
    print(f"{name} {kind}: {os.path.getsize(path)} bytes", file=sys.stderr)


def export_masked(name, model, x, kwargs, ref):
    """The `*_mask` files of one model, recorded in `ref["files"]`."""
    mask = padding_mask(x)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x, attention_mask=mask, **kwargs)
    assert int(counter.get_total_flops()) == ref["matmul_flops"], name
    for kind in ["dynamo_mask", "ts_mask", "ts_dynamic_mask"]:
        dynamo = kind == "dynamo_mask"
        extra = {"input_names": ["x", "attention_mask"]}
        if not dynamo:
            extra["training"] = torch.onnx.TrainingMode.TRAINING
        if kind == "ts_dynamic_mask":
            extra["dynamic_axes"] = {"x": DYNAMIC[name], "attention_mask": DYNAMIC[name]}
        export_one(name, kind, Masked(model, kwargs), (x, mask), dynamo, extra, ref)


def wide():
    """GPT-2 at its real width (hidden 768, 12 heads, vocabulary 50257) with 2 layers, exported
    by the TorchScript exporter with symbolic batch and sequence (`gpt2_wide_ts_dynamic.onnx`):
    the graph on which `rank` must find tensor parallelism of its own (tests/rank_auto.rs)."""
    t = transformers
    model = t.GPT2LMHeadModel(
        t.GPT2Config(n_layer=2, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                     attn_implementation="eager", use_cache=False)
    )
    x = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(1))
    kwargs = {"use_cache": False}
    model.train()
    randomise(model)
    ref = reference(model, x, kwargs)
    ref["input"] = list(x.shape)
    ref["files"] = {}
    extra = {"training": torch.onnx.TrainingMode.TRAINING, "input_names": ["x"],
             "dynamic_axes": {"x": DYNAMIC["gpt2"]}}
    export_one("gpt2_wide", "ts_dynamic", Logits(model, kwargs, mask=True), (x,), False, extra,
               ref)
    return ref


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    if "--wide-only" in sys.argv:
        with open(os.path.join(OUT, "reference.json")) as f:
            refs = json.load(f)
        refs["models"]["gpt2_wide"] = wide()
        with open(os.path.join(OUT, "reference.json"), "w") as f:
            json.dump(refs, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    if "--mask-only" in sys.argv:
        with open(os.path.join(OUT, "reference.json")) as f:
            refs = json.load(f)
        for name, model, x, kwargs in models():
            if name in MASKED:
                model.train()
                randomise(model)
                export_masked(name, model, x, kwargs, refs["models"][name])
        with open(os.path.join(OUT, "reference.json"), "w") as f:
            json.dump(refs, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    refs = {
        "generator": "tools/export_onnx_fixtures.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "models": {},
    }
    for name, model, x, kwargs in models():
        model.train()
        randomise(model)
        ref = reference(model, x, kwargs)
        ref["input"] = list(x.shape)
        ref["files"] = {}
        kinds = ["dynamo", "ts"] + (["ts_dynamic"] if name in DYNAMIC else [])
        for kind in kinds:
            dynamo = kind == "dynamo"
            wrapped = Logits(model, kwargs, mask=(name == "gpt2" and not dynamo))
            extra = {} if dynamo else {"training": torch.onnx.TrainingMode.TRAINING}
            if kind == "ts_dynamic":
                extra["input_names"] = ["x"]
                extra["dynamic_axes"] = {"x": DYNAMIC[name]}
            export_one(name, kind, wrapped, (x,), dynamo, extra, ref)
        if name in MASKED:
            export_masked(name, model, x, kwargs, ref)
        refs["models"][name] = ref
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(refs, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
