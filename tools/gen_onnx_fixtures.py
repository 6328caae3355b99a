#!/usr/bin/env python3
"""Writes the ONNX test fixtures under tests/fixtures/onnx/.

    pip install onnx numpy
    python3 tools/gen_onnx_fixtures.py

The files are committed: the tests read them and never run this script. Every graph is checked
with onnx.checker and carries the value_info of onnx.shape_inference, as exporters write it.

* transformer.onnx — a two-layer GPT-style decoder: token and position embeddings (Gather), per
  layer LayerNormalization, a fused QKV MatMul + Add split in three (Split), heads made by Reshape
  and Transpose, Q·Kᵀ and P·V as MatMuls of two activations, a scalar Mul, Softmax, the output
  projection, residual Adds and a Gelu MLP; a final LayerNormalization and a language-model head
  tied to the token embedding (MatMul by the transposed embedding initializer). Symbolic batch and
  sequence.
* cnn.onnx — a small CNN: Conv (with and without bias), BatchNormalization, Relu, MaxPool, two
  Conv branches joined by Concat, AveragePool, GlobalAveragePool, Flatten and a Gemm classifier.
  Symbolic batch `N`.
* transformer_traced.onnx, cnn_traced.onnx — the same graphs as the TorchScript exporter
  (torch.onnx.export without shape inference) writes them: no value_info at all, Constant nodes,
  and the transformer's reshape targets computed by Shape -> Gather -> Unsqueeze -> Concat with
  the head size from a Div, and the positions from a Range. Built by hand with onnx.helper following the exporter's patterns,
  not exported from torch.
* unsupported.onnx — LpNormalization and Hardmax, operators with no rule whose output shapes
  the importer does not infer, so that what follows them is of unknown size; no value_info.
* training.onnx — a training-mode export: BatchNormalization's running statistics and Dropout's
  mask are outputs no node reads; no value_info.
* mobile.onnx — a MobileNet/EfficientNet-style block without value_info: depthwise and grouped
  Conv, SiLU and squeeze-excitation (Sigmoid, broadcasting Mul), the exact GELU written out with
  Div, Erf, Add and Mul, and a Sqrt.
* elementwise.onnx — Clip (ReLU6), Pow by a constant and ReduceMean over the last axis.
* padded.onnx — an explicit Pad (TensorFlow-style "same" padding, one more row and column
  after) before a stride-2 convolution without padding of its own.
* written_out.onnx — a normalisation written out (ReduceMean, Sub, Pow, Add, Sqrt, Div with
  per-row statistics broadcast), a MatMul, a causal mask by Where and Softmax.
* unmapped.onnx — a tiny MLP with a Softplus and a Sin, which no shipped rule covers.
* truncated.onnx — the first half of transformer.onnx.
* garbage.onnx — text and random bytes.
"""

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "onnx")
OPSET = 20
RNG = np.random.default_rng(0)


def init(name, *shape):
    return numpy_helper.from_array(
        (RNG.standard_normal(shape) * 0.02).astype(np.float32), name
    )


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(model, name, infer=True):
    """Checks and writes a model; with `infer`, with the value_info of onnx shape inference."""
    onnx.checker.check_model(model)
    if infer:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model)
    else:
        assert not model.graph.value_info
    path = os.path.join(OUT, name)
    onnx.save(model, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return path


def const(nodes, name, values):
    """A Constant node holding int64 values, as the TorchScript exporter writes them."""
    nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/Constant", value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values)))
    return name


def dims_of(nodes, x, axes, tag):
    """Shape -> Gather -> Unsqueeze for each axis: the sizes of `x` as 1-D tensors."""
    nodes.append(helper.make_node("Shape", [x], [f"{tag}/shape"], name=f"{tag}/Shape"))
    out = []
    for a in axes:
        idx = f"{tag}/idx{a}"
        nodes.append(helper.make_node("Constant", [], [idx], name=f"{idx}/Constant", value=helper.make_tensor(idx, TensorProto.INT64, [], [a])))
        nodes.append(helper.make_node("Gather", [f"{tag}/shape", idx], [f"{tag}/d{a}"], name=f"{tag}/Gather_{a}", axis=0))
        axes_c = const(nodes, f"{tag}/ax{a}", [0])
        nodes.append(helper.make_node("Unsqueeze", [f"{tag}/d{a}", axes_c], [f"{tag}/u{a}"], name=f"{tag}/Unsqueeze_{a}"))
        out.append(f"{tag}/u{a}")
    return out


def transformer(traced=False):
    """The decoder; `traced` writes it as the TorchScript exporter does: reshape targets computed
    by Shape -> Gather -> Unsqueeze -> Concat (the head size by a Div), Constant nodes instead of
    shape initializers, positions computed by Range and Unsqueeze (a [1, seq] constant gathered
    from the position table, then broadcast over the batch), and no value_info."""
    V, P, H, NH, F, L = 96, 64, 32, 4, 128, 2
    DH = H // NH
    nodes, inits = [], [init("wte", V, H), init("wpe", P, H)]
    if traced:
        const(nodes, "split_qkv", [H, H, H])
    else:
        inits += [ints("split_qkv", [H, H, H]), ints("heads", [0, 0, NH, DH]), ints("merge", [0, 0, H])]
    inits.append(numpy_helper.from_array(np.array(1.0 / math.sqrt(DH), dtype=np.float32), "inv_sqrt_dh"))
    positions = "position_ids"
    if traced:
        # Positions as GPT-2's forward makes them: arange(seq).unsqueeze(0), a [1, seq] constant.
        _, seq = dims_of(nodes, "input_ids", [0, 1], "/positions/size")
        nodes.append(helper.make_node("Constant", [], ["/positions/zero"], name="/positions/zero/Constant", value=helper.make_tensor("z", TensorProto.INT64, [], [0])))
        nodes.append(helper.make_node("Constant", [], ["/positions/one"], name="/positions/one/Constant", value=helper.make_tensor("o", TensorProto.INT64, [], [1])))
        nodes.append(helper.make_node("Squeeze", ["/positions/size/u1"], ["/positions/seq"], name="/positions/Squeeze"))
        nodes.append(helper.make_node("Range", ["/positions/zero", "/positions/seq", "/positions/one"], ["/positions/range"], name="/positions/Range"))
        nodes.append(helper.make_node("Unsqueeze", ["/positions/range", const(nodes, "/positions/ax", [0])], ["/positions/ids"], name="/positions/Unsqueeze"))
        positions = "/positions/ids"
    nodes += [
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"], name="/wte/Gather"),
        helper.make_node("Gather", ["wpe", positions], ["pos"], name="/wpe/Gather"),
        helper.make_node("Add", ["tok", "pos"], ["h0"], name="/embed/Add"),
    ]
    x = "h0"
    for i in range(L):
        p = f"/h.{i}"
        inits += [
            init(f"h{i}.ln1.g", H), init(f"h{i}.ln1.b", H),
            init(f"h{i}.qkv.w", H, 3 * H), init(f"h{i}.qkv.b", 3 * H),
            init(f"h{i}.o.w", H, H), init(f"h{i}.o.b", H),
            init(f"h{i}.ln2.g", H), init(f"h{i}.ln2.b", H),
            init(f"h{i}.fc.w", H, F), init(f"h{i}.fc.b", F),
            init(f"h{i}.proj.w", F, H), init(f"h{i}.proj.b", H),
        ]
        t = lambda s: f"{p}/{s}"  # noqa: E731
        heads, merge = "heads", "merge"
        if traced:
            # The split pieces' sizes: batch, sequence, heads and head size = width / heads.
            b, s_, w = dims_of(nodes, x, [0, 1, 2], t("attn/size"))
            nh = const(nodes, t("attn/nh"), [NH])
            nodes.append(helper.make_node("Div", [w, nh], [t("attn/dh")], name=t("attn/Div")))
            nodes.append(helper.make_node("Concat", [b, s_, nh, t("attn/dh")], [t("attn/heads")], name=t("attn/Concat_heads"), axis=0))
            nodes.append(helper.make_node("Concat", [b, s_, w], [t("attn/merge")], name=t("attn/Concat_merge"), axis=0))
            heads, merge = t("attn/heads"), t("attn/merge")
        nodes += [
            helper.make_node("LayerNormalization", [x, f"h{i}.ln1.g", f"h{i}.ln1.b"], [t("ln1")], name=t("ln_1/LayerNormalization"), axis=-1),
            helper.make_node("MatMul", [t("ln1"), f"h{i}.qkv.w"], [t("qkv_mm")], name=t("attn/c_attn/MatMul")),
            helper.make_node("Add", [t("qkv_mm"), f"h{i}.qkv.b"], [t("qkv")], name=t("attn/c_attn/Add")),
            helper.make_node("Split", [t("qkv"), "split_qkv"], [t("q"), t("k"), t("v")], name=t("attn/Split"), axis=-1),
            helper.make_node("Reshape", [t("q"), heads], [t("q4")], name=t("attn/Reshape_q")),
            helper.make_node("Reshape", [t("k"), heads], [t("k4")], name=t("attn/Reshape_k")),
            helper.make_node("Reshape", [t("v"), heads], [t("v4")], name=t("attn/Reshape_v")),
            helper.make_node("Transpose", [t("q4")], [t("qT")], name=t("attn/Transpose_q"), perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", [t("k4")], [t("kT")], name=t("attn/Transpose_k"), perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", [t("v4")], [t("vT")], name=t("attn/Transpose_v"), perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [t("qT"), t("kT")], [t("scores")], name=t("attn/MatMul_qk")),
            helper.make_node("Mul", [t("scores"), "inv_sqrt_dh"], [t("scaled")], name=t("attn/Mul_scale")),
            helper.make_node("Softmax", [t("scaled")], [t("probs")], name=t("attn/Softmax"), axis=-1),
            helper.make_node("MatMul", [t("probs"), t("vT")], [t("ctx")], name=t("attn/MatMul_pv")),
            helper.make_node("Transpose", [t("ctx")], [t("ctxT")], name=t("attn/Transpose_ctx"), perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [t("ctxT"), merge], [t("ctx2")], name=t("attn/Reshape_ctx")),
            helper.make_node("MatMul", [t("ctx2"), f"h{i}.o.w"], [t("o_mm")], name=t("attn/c_proj/MatMul")),
            helper.make_node("Add", [t("o_mm"), f"h{i}.o.b"], [t("o")], name=t("attn/c_proj/Add")),
            helper.make_node("Add", [x, t("o")], [t("r1")], name=t("Add_1")),
            helper.make_node("LayerNormalization", [t("r1"), f"h{i}.ln2.g", f"h{i}.ln2.b"], [t("ln2")], name=t("ln_2/LayerNormalization"), axis=-1),
            helper.make_node("MatMul", [t("ln2"), f"h{i}.fc.w"], [t("fc_mm")], name=t("mlp/c_fc/MatMul")),
            helper.make_node("Add", [t("fc_mm"), f"h{i}.fc.b"], [t("fc")], name=t("mlp/c_fc/Add")),
            helper.make_node("Gelu", [t("fc")], [t("act")], name=t("mlp/Gelu"), approximate="tanh"),
            helper.make_node("MatMul", [t("act"), f"h{i}.proj.w"], [t("proj_mm")], name=t("mlp/c_proj/MatMul")),
            helper.make_node("Add", [t("proj_mm"), f"h{i}.proj.b"], [t("proj")], name=t("mlp/c_proj/Add")),
            helper.make_node("Add", [t("r1"), t("proj")], [t("out")], name=t("Add_2")),
        ]
        x = t("out")
    inits += [init("ln_f.g", H), init("ln_f.b", H)]
    nodes += [
        helper.make_node("LayerNormalization", [x, "ln_f.g", "ln_f.b"], ["final"], name="/ln_f/LayerNormalization", axis=-1),
        helper.make_node("Transpose", ["wte"], ["wte_T"], name="/lm_head/Transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["final", "wte_T"], ["logits"], name="/lm_head/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
        + ([] if traced else [helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])]),
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", V])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    if traced:
        return save(model, "transformer_traced.onnx", infer=False)
    return save(model, "transformer.onnx")


def cnn(traced=False):
    inits = [
        init("conv1.w", 16, 3, 3, 3), init("conv1.b", 16),
        init("bn1.g", 16), init("bn1.b", 16), init("bn1.mean", 16), numpy_helper.from_array(np.ones(16, np.float32), "bn1.var"),
        init("conv2.w", 32, 16, 3, 3),
        init("bn2.g", 32), init("bn2.b", 32), init("bn2.mean", 32), numpy_helper.from_array(np.ones(32, np.float32), "bn2.var"),
        init("branch_a.w", 16, 32, 1, 1), init("branch_a.b", 16),
        init("branch_b.w", 16, 32, 3, 3), init("branch_b.b", 16),
        init("fc.w", 10, 32), init("fc.b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "bn1.g", "bn1.b", "bn1.mean", "bn1.var"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["a1"], name="relu1"),
        helper.make_node("MaxPool", ["a1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.w"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn2.g", "bn2.b", "bn2.mean", "bn2.var"], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["a2"], name="relu2"),
        helper.make_node("Conv", ["a2", "branch_a.w", "branch_a.b"], ["ba"], name="branch_a"),
        helper.make_node("Conv", ["a2", "branch_b.w", "branch_b.b"], ["bb"], name="branch_b", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["ba", "bb"], ["cat"], name="concat", axis=1),
        helper.make_node("Relu", ["cat"], ["a3"], name="relu3"),
        helper.make_node("AveragePool", ["a3"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    if traced:
        return save(model, "cnn_traced.onnx", infer=False)
    return save(model, "cnn.onnx")


def unmapped():
    inits = [init("w1", 8, 8), init("w2", 8, 4)]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Softplus", ["h"], ["s"], name="gate"),
        helper.make_node("Mul", ["h", "s"], ["swish"], name="swish"),
        helper.make_node("MatMul", ["swish", "w2"], ["y"], name="fc2"),
        helper.make_node("Sin", ["y"], ["out"], name="sin"),
    ]
    graph = helper.make_graph(
        nodes,
        "unmapped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "unmapped.onnx")


def unsupported():
    """An operator with no rule and no shape inference (LpNormalization) whose output feeds a
    MatMul and a Relu, and a second one (Hardmax) later in graph order: no value_info."""
    inits = [init("w1", 16, 16), init("w2", 16, 8)]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("LpNormalization", ["h"], ["n"], name="norm", axis=-1, p=2),
        helper.make_node("MatMul", ["n", "w2"], ["y"], name="fc2"),
        helper.make_node("Relu", ["y"], ["out"], name="relu"),
        helper.make_node("Hardmax", ["x"], ["hm"], name="hardmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 8]), helper.make_tensor_value_info("hm", TensorProto.FLOAT, ["batch", 16])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "unsupported.onnx", infer=False)


def training():
    """A training-mode export: BatchNormalization with its running-statistics outputs and
    Dropout with its mask, outputs no node reads; no value_info."""
    inits = [
        init("conv.w", 8, 4, 3, 3),
        init("bn.g", 8), init("bn.b", 8), init("bn.mean", 8), numpy_helper.from_array(np.ones(8, np.float32), "bn.var"),
        init("fc.w", 10, 8), init("fc.b", 10),
        numpy_helper.from_array(np.array(0.1, dtype=np.float32), "ratio"),
        numpy_helper.from_array(np.array(True), "train"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv.w"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "bn.g", "bn.b", "bn.mean", "bn.var"], ["n", "running_mean", "running_var"], name="bn", training_mode=1),
        helper.make_node("Relu", ["n"], ["a"], name="relu"),
        helper.make_node("Dropout", ["a", "ratio", "train"], ["d", "mask"], name="dropout"),
        helper.make_node("GlobalAveragePool", ["d"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "training",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "training.onnx", infer=False)


def mobile():
    """A MobileNet/EfficientNet-style block as the TorchScript exporter writes it (no value_info,
    scalars as Constant nodes): 1x1 expansion Conv, SiLU as Sigmoid and Mul, a depthwise 3x3 Conv
    (group 16) of stride 2, squeeze-excitation (GlobalAveragePool, Conv, Relu, Conv, Sigmoid, a
    broadcasting Mul), a grouped 3x3 Conv (group 4), pooling, a Gemm, the exact GELU written out
    (Div, Erf, Add, Mul, Mul) and a Sqrt of a square plus epsilon."""
    inits = [
        init("expand.w", 16, 8, 1, 1), init("expand.b", 16),
        init("dw.w", 16, 1, 3, 3), init("dw.b", 16),
        init("se1.w", 4, 16, 1, 1), init("se1.b", 4),
        init("se2.w", 16, 4, 1, 1), init("se2.b", 16),
        init("gc.w", 16, 4, 3, 3),
        init("fc.w", 10, 16), init("fc.b", 10),
    ]
    nodes = []

    def scalar(name, value):
        nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/Constant", value=helper.make_tensor(name, TensorProto.FLOAT, [], [value])))
        return name

    nodes += [
        helper.make_node("Conv", ["images", "expand.w", "expand.b"], ["e"], name="expand", kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["e"], ["e_sig"], name="silu/Sigmoid"),
        helper.make_node("Mul", ["e", "e_sig"], ["e_act"], name="silu/Mul"),
        helper.make_node("Conv", ["e_act", "dw.w", "dw.b"], ["d"], name="depthwise", group=16, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["d"], ["sq"], name="se/pool"),
        helper.make_node("Conv", ["sq", "se1.w", "se1.b"], ["s1"], name="se/reduce", kernel_shape=[1, 1]),
        helper.make_node("Relu", ["s1"], ["s1a"], name="se/relu"),
        helper.make_node("Conv", ["s1a", "se2.w", "se2.b"], ["s2"], name="se/expand", kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["s2"], ["gate"], name="se/Sigmoid"),
        helper.make_node("Mul", ["gate", "d"], ["excited"], name="se/Mul"),
        helper.make_node("Conv", ["excited", "gc.w"], ["g"], name="grouped", group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["g"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["z"], name="fc", transB=1),
        helper.make_node("Div", ["z", scalar("sqrt2", math.sqrt(2.0))], ["z_s"], name="gelu/Div"),
        helper.make_node("Erf", ["z_s"], ["z_erf"], name="gelu/Erf"),
        helper.make_node("Add", ["z_erf", scalar("one", 1.0)], ["z_1"], name="gelu/Add"),
        helper.make_node("Mul", ["z", "z_1"], ["z_m"], name="gelu/Mul"),
        helper.make_node("Mul", ["z_m", scalar("half", 0.5)], ["y"], name="gelu/Mul_half"),
        helper.make_node("Mul", ["y", "y"], ["y2"], name="norm/Mul"),
        helper.make_node("Add", ["y2", scalar("eps", 1e-6)], ["y2e"], name="norm/Add"),
        helper.make_node("Sqrt", ["y2e"], ["out"], name="norm/Sqrt"),
    ]
    graph = helper.make_graph(
        nodes,
        "mobile",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 8, 16, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "mobile.onnx", infer=False)


def elementwise():
    """Clip (ReLU6, bounds as Constant inputs), Pow by a constant exponent and ReduceMean over the
    last axis, as exporters write them; no value_info."""
    inits = [init("w", 8, 8)]
    nodes = []
    for name, v in [("lo", 0.0), ("hi", 6.0), ("two", 2.0)]:
        nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/Constant", value=helper.make_tensor(name, TensorProto.FLOAT, [], [v])))
    nodes += [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Clip", ["h", "lo", "hi"], ["c"], name="relu6"),
        helper.make_node("Pow", ["c", "two"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq", const(nodes, "axes", [-1])], ["out"], name="mean", keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "elementwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 1])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "elementwise.onnx", infer=False)


def padded():
    """TensorFlow-style "same" padding as an explicit Pad (one more row and column after than
    before, constant pads) before a stride-2 convolution with no padding of its own; no
    value_info."""
    inits = [init("w", 8, 4, 3, 3), ints("pads", [0, 0, 0, 0, 0, 0, 1, 1])]
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Conv", ["p", "w"], ["out"], name="conv", strides=[2, 2], kernel_shape=[3, 3]),
    ]
    graph = helper.make_graph(
        nodes,
        "padded",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 16, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 8, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "padded.onnx", infer=False)


def written_out():
    """A normalisation written out as exporters write an unfused one (ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div with [batch, 4, 1] statistics broadcast over the rows), then scores
    by a MatMul, a causal mask applied by Where with a constant boolean mask and a Constant fill,
    and Softmax; no value_info."""
    inits = [init("w", 8, 4), numpy_helper.from_array(np.tril(np.ones((4, 4), dtype=bool)), "causal")]
    nodes = []
    for name, v in [("two", 2.0), ("eps", 1e-5), ("fill", -1e4)]:
        nodes.append(helper.make_node("Constant", [], [name], name=f"{name}/Constant", value=helper.make_tensor(name, TensorProto.FLOAT, [], [v])))
    axes = const(nodes, "axes", [-1])
    nodes += [
        helper.make_node("ReduceMean", ["x", axes], ["mean"], name="norm/mean", keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["d"], name="norm/Sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="norm/Pow"),
        helper.make_node("ReduceMean", ["d2", axes], ["var"], name="norm/var", keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["var_eps"], name="norm/Add"),
        helper.make_node("Sqrt", ["var_eps"], ["std"], name="norm/Sqrt"),
        helper.make_node("Div", ["d", "std"], ["normed"], name="norm/Div"),
        helper.make_node("MatMul", ["normed", "w"], ["scores"], name="scores"),
        helper.make_node("Where", ["causal", "scores", "fill"], ["masked"], name="mask"),
        helper.make_node("Softmax", ["masked"], ["out"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "written_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4, 4])],
        inits,
    )
    model = helper.make_model(graph, producer_name="gen_onnx_fixtures", opset_imports=[helper.make_opsetid("", OPSET)])
    return save(model, "written_out.onnx", infer=False)


def must_not_parse(data):
    try:
        onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - any parse failure is what is wanted
        return True
    return False


def corrupted(source):
    data = open(source, "rb").read()
    cut = len(data) // 2
    while not must_not_parse(data[:cut]):
        cut += 1
    with open(os.path.join(OUT, "truncated.onnx"), "wb") as f:
        f.write(data[:cut])
    garbage = b"this is not an ONNX model\n" + np.random.default_rng(1).bytes(200)
    assert must_not_parse(garbage)
    with open(os.path.join(OUT, "garbage.onnx"), "wb") as f:
        f.write(garbage)
    print("wrote truncated.onnx and garbage.onnx")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    path = transformer()
    cnn()
    unmapped()
    transformer(traced=True)
    cnn(traced=True)
    unsupported()
    training()
    mobile()
    elementwise()
    written_out()
    padded()
    corrupted(path)
