//! Standard numeric definitions of the shipped operators, run on each device's local pieces.
//! Statistics (softmax, norms, cross-entropy) are computed from per-device partial statistics
//! combined over the axis their index is split on; windows read their neighbours' halo rows.

use super::interp::OpCtx;
use super::tensor::{bump, T};
use symshard::rules::{Flops, IndexKind, ReduceOp};

type Out = Result<Vec<T>, String>;

pub fn run(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let unary = |f: fn(f64) -> f64| Ok(ins[0].iter().map(|x| x.map(f)).collect());
    let windowed = ctx.rule.indices.iter().any(|i| i.kind == IndexKind::Window);
    match ctx.rule.name.as_str() {
        "global_avgpool" => {
            let s = ctx.e("s") as f64;
            Ok(per_device(ctx, ins, einsum)?
                .into_iter()
                .map(|t| t.map(|v| v / s))
                .collect())
        }
        "gelu" => unary(|x| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }),
        "relu" => unary(|x| x.max(0.0)),
        "silu" => unary(|x| x / (1.0 + (-x).exp())),
        "tanh" => unary(f64::tanh),
        "sigmoid" => unary(|x| 1.0 / (1.0 + (-x).exp())),
        "clip" => unary(|x| x.clamp(0.0, 6.0)),
        // The mask is the importer's constant: keeping the positive entries stands for it.
        "masked_fill" => unary(|x| if x > 0.0 { x } else { -1e4 }),
        "sub_rows" | "div_rows" => per_device(ctx, ins, |c, _, x| {
            let div = c.rule.name == "div_rows";
            Ok(T::from_fn(&x[0].shape, |i| {
                let (v, s) = (x[0].get(i), x[1].get(&[i[0]]));
                if div {
                    v / s
                } else {
                    v - s
                }
            }))
        }),
        // The exponent is the importer's constant, not the rule's: a square stands for it.
        "pow" => unary(|x| x * x),
        "erf" => unary(erf),
        // On |x|: the inputs are of either sign, and a split must reproduce the whole.
        "sqrt" => unary(|x| x.abs().sqrt()),
        "conv2d_grouped" | "conv2d_grouped_bias" => grouped_conv(ctx, ins),
        "scale" => unary(|x| 0.125 * x),
        "dropout" => per_device(ctx, ins, dropout),
        "reduce_max" => per_device(ctx, ins, reduce_max),
        "embedding" => per_device(ctx, ins, embedding),
        "rope" => per_device(ctx, ins, rope),
        "concat" => per_device(ctx, ins, |_, _, x| {
            T::concat(&[x[0].clone(), x[1].clone()], 1)
        }),
        "split" => per_device(ctx, ins, |c, _, x| x[0].slice(1, 0, c.e("m"))),
        "transpose" => per_device(ctx, ins, |_, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], s[2], s[1]], |i| {
                x[0].get(&[i[0], i[2], i[1]])
            }))
        }),
        "view" => unary(|x| x),
        "transpose_heads" => per_device(ctx, ins, |_, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], s[2], s[1], s[3]], |i| {
                x[0].get(&[i[0], i[2], i[1], i[3]])
            }))
        }),
        "transpose_keys" => per_device(ctx, ins, |_, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], s[2], s[3], s[1]], |i| {
                x[0].get(&[i[0], i[3], i[1], i[2]])
            }))
        }),
        "flatten" => per_device(ctx, ins, |_, _, x| {
            let s = &x[0].shape;
            x[0].reshape(&[s[0], s[1] * s[2]])
        }),
        "reshape" => per_device(ctx, ins, |c, _, x| {
            x[0].reshape(&[x[0].shape[0], c.local("n"), c.local("d")])
        }),
        "class_token" => per_device(ctx, ins, |_, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], s[1] + 1, s[2]], |i| match i[1] {
                0 => x[1].get(&[i[2]]),
                t => x[0].get(&[i[0], t - 1, i[2]]),
            }))
        }),
        "moe_gate" => per_device(ctx, ins, moe_gate),
        "moe_gate_topk" => per_device(ctx, ins, |c, _, x| moe_gate_topk(c, x, 1.0)),
        "moe_gate_topk_scaled" => per_device(ctx, ins, |c, _, x| moe_gate_topk(c, x, 2.5)),
        "moe_gate_group_scaled" => per_device(ctx, ins, moe_gate_group),
        "moe_gate_sigmoid_group" => per_device(ctx, ins, moe_gate_sigmoid_group),
        "sigmoid_gate" => per_device(ctx, ins, |_, _, x| {
            let (v, g) = (&x[0], &x[1]);
            Ok(T::from_fn(&v.shape, |i| {
                v.get(i) / (1.0 + (-g.get(&[i[0]])).exp())
            }))
        }),
        // The padding's place (before or after) does not change the cost; all of it after here.
        "pad2d" => per_device(ctx, ins, |c, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], s[1], c.e("h"), c.e("w")], |i| {
                if i[2] < s[2] && i[3] < s[3] {
                    x[0].get(i)
                } else {
                    0.0
                }
            }))
        }),
        "expand" => per_device(ctx, ins, |c, _, x| {
            let s = &x[0].shape;
            Ok(T::from_fn(&[s[0], c.e("r"), s[1]], |i| {
                x[0].get(&[i[0], i[2]])
            }))
        }),
        "flash_attention_mla" => per_device(ctx, ins, flash_attention_mla),
        "moe_dispatch" => per_device(ctx, ins, moe_dispatch),
        "moe_combine" => per_device(ctx, ins, moe_combine),
        "softmax" => softmax(ctx, ins),
        "flash_attention" => per_device(ctx, ins, flash_attention),
        "layernorm" | "rmsnorm" => norm(ctx, ins),
        "batchnorm" => batchnorm(ctx, ins),
        "cross_entropy" => cross_entropy(ctx, ins),
        "conv2d" | "conv2d_bias" | "maxpool2d" | "avgpool2d" => window(ctx, ins),
        _ if matches!(ctx.rule.flops, Flops::Einsum) && !windowed => per_device(ctx, ins, einsum),
        other => Err(format!(
            "no numeric semantics for `{other}`: add its definition to tests/rewrite/kernels.rs"
        )),
    }
}

fn per_device(
    ctx: &OpCtx,
    ins: &[Vec<T>],
    f: impl Fn(&OpCtx, usize, &[T]) -> Result<T, String>,
) -> Out {
    (0..ctx.devices())
        .map(|dev| {
            let xs: Vec<T> = ins.iter().map(|v| v[dev].clone()).collect();
            f(ctx, dev, &xs)
        })
        .collect()
}

/// Σ over each term's iteration space of the product of its inputs.
fn einsum(ctx: &OpCtx, _dev: usize, xs: &[T]) -> Result<T, String> {
    let rule = ctx.rule;
    let mut local = std::collections::BTreeMap::new();
    for (t, x) in rule.inputs.iter().zip(xs) {
        for (g, n) in t.dims.iter().zip(&x.shape) {
            local.insert(g[0].clone(), *n);
        }
    }
    let out_shape: Vec<usize> = rule.output.dims.iter().map(|g| local[&g[0]]).collect();
    let mut out = T::zeros(&out_shape);
    for term in &rule.terms {
        let space = rule.term_indices(term);
        let sizes: Vec<usize> = space.iter().map(|i| local[i]).collect();
        let pos = |idx: &[usize], t: &symshard::rules::Tensor| -> Vec<usize> {
            t.dims
                .iter()
                .map(|g| idx[space.iter().position(|s| *s == g[0]).unwrap_or(0)])
                .collect()
        };
        let mut idx = vec![0; space.len()];
        for _ in 0..sizes.iter().product::<usize>() {
            let mut v = 1.0;
            for &k in term {
                v *= xs[k].get(&pos(&idx, &rule.inputs[k]));
            }
            *out.at(&pos(&idx, &rule.output)) += v;
            bump(&mut idx, &sizes);
        }
    }
    Ok(out)
}

/// Keeps four elements in five, by their global position; scales by 1/0.8.
fn dropout(ctx: &OpCtx, dev: usize, xs: &[T]) -> Result<T, String> {
    let (ob, oh) = (ctx.offset(dev, "b"), ctx.offset(dev, "h"));
    Ok(T::from_fn(&xs[0].shape, |i| {
        let keep = ((i[0] + ob) * 7 + (i[1] + oh) * 3) % 5 != 0;
        if keep {
            xs[0].get(i) / 0.8
        } else {
            0.0
        }
    }))
}

fn reduce_max(_: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let s = &xs[0].shape;
    Ok(T::from_fn(&[s[0]], |i| {
        (0..s[1])
            .map(|n| xs[0].get(&[i[0], n]))
            .fold(f64::NEG_INFINITY, f64::max)
    }))
}

/// A lookup is a contraction with the one-hot matrix of the ids over the global vocabulary:
/// `y[t, h] = Σ_v onehot(ids)[t, v] · table[v, h]`, this device's rows of the vocabulary only.
fn embedding(ctx: &OpCtx, dev: usize, xs: &[T]) -> Result<T, String> {
    let (ids, table) = (&xs[0], &xs[1]);
    let off = ctx.offset(dev, "v");
    let onehot = T::from_fn(&[ids.shape[0], table.shape[0]], |i| {
        f64::from(u8::from(ids.get(&[i[0]]) as usize == off + i[1]))
    });
    Ok(T::from_fn(&[ids.shape[0], table.shape[1]], |i| {
        (0..table.shape[0])
            .map(|v| onehot.get(&[i[0], v]) * table.get(&[v, i[1]]))
            .sum()
    }))
}

fn rope(_: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let (x, cos, sin) = (&xs[0], &xs[1], &xs[2]);
    let half = x.shape[3] / 2;
    Ok(T::from_fn(&x.shape, |i| {
        let j = i[3];
        let rot = if j < half {
            -x.get(&[i[0], i[1], i[2], j + half])
        } else {
            x.get(&[i[0], i[1], i[2], j - half])
        };
        x.get(i) * cos.get(&[i[1], j]) + rot * sin.get(&[i[1], j])
    }))
}

/// softmax(q·kᵀ / 8) · v over the whole key axis (the kernel keeps keys and head dim local).
fn flash_attention(_: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let (q, k, v) = (&xs[0], &xs[1], &xs[2]);
    let (nk, nd) = (k.shape[2], k.shape[3]);
    Ok(T::from_fn(&q.shape, |i| {
        let (b, g, r, qi, d) = (i[0], i[1], i[2], i[3], i[4]);
        let score = |j: usize| -> f64 {
            (0..nd)
                .map(|e| q.get(&[b, g, r, qi, e]) * k.get(&[b, g, j, e]))
                .sum::<f64>()
                / 8.0
        };
        let m = (0..nk).map(score).fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = (0..nk).map(|j| (score(j) - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..nk).map(|j| w[j] / z * v.get(&[b, g, j, d])).sum()
    }))
}

/// As `flash_attention`, with value heads of their own width (the output's last index).
fn flash_attention_mla(_: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let (q, k, v) = (&xs[0], &xs[1], &xs[2]);
    let (nk, nd) = (k.shape[2], k.shape[3]);
    let mut shape = q.shape.clone();
    shape[4] = v.shape[3];
    Ok(T::from_fn(&shape, |i| {
        let (b, g, r, qi, d) = (i[0], i[1], i[2], i[3], i[4]);
        let score = |j: usize| -> f64 {
            (0..nd)
                .map(|e| q.get(&[b, g, r, qi, e]) * k.get(&[b, g, j, e]))
                .sum::<f64>()
                / 8.0
        };
        let m = (0..nk).map(score).fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = (0..nk).map(|j| (score(j) - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..nk).map(|j| w[j] / z * v.get(&[b, g, j, d])).sum()
    }))
}

/// Per row of a [rows, cols] tensor, `f` folded over the columns.
fn rows(x: &T, init: f64, f: impl Fn(f64, f64) -> f64) -> T {
    T::from_fn(&[x.shape[0]], |i| {
        (0..x.shape[1]).fold(init, |a, c| f(a, x.get(&[i[0], c])))
    })
}

fn softmax(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let xs = &ins[0];
    let m = ctx.reduce(
        &["n"],
        xs.iter()
            .map(|x| rows(x, f64::NEG_INFINITY, f64::max))
            .collect(),
        ReduceOp::Max,
    )?;
    let e: Vec<T> = xs
        .iter()
        .zip(&m)
        .map(|(x, m)| T::from_fn(&x.shape, |i| (x.get(i) - m.get(&[i[0]])).exp()))
        .collect();
    let s = ctx.reduce(
        &["n"],
        e.iter().map(|e| rows(e, 0.0, |a, v| a + v)).collect(),
        ReduceOp::Sum,
    )?;
    Ok(e.iter()
        .zip(&s)
        .map(|(e, s)| T::from_fn(&e.shape, |i| e.get(i) / s.get(&[i[0]])))
        .collect())
}

/// Layernorm and rmsnorm over `h` from the combined sum and sum of squares.
fn norm(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let rms = ctx.rule.name == "rmsnorm";
    let h = ctx.e("h") as f64;
    let s1 = ctx.reduce(
        &["h"],
        ins[0].iter().map(|x| rows(x, 0.0, |a, v| a + v)).collect(),
        ReduceOp::Sum,
    )?;
    let s2 = ctx.reduce(
        &["h"],
        ins[0]
            .iter()
            .map(|x| rows(x, 0.0, |a, v| a + v * v))
            .collect(),
        ReduceOp::Sum,
    )?;
    (0..ctx.devices())
        .map(|dev| {
            let x = &ins[0][dev];
            Ok(T::from_fn(&x.shape, |i| {
                let (sum, sq) = (s1[dev].get(&[i[0]]), s2[dev].get(&[i[0]]));
                let mean = if rms { 0.0 } else { sum / h };
                let var = sq / h - mean * mean;
                let y = (x.get(i) - mean) / (var + 1e-5).sqrt() * ins[1][dev].get(&[i[1]]);
                if rms {
                    y
                } else {
                    y + ins[2][dev].get(&[i[1]])
                }
            }))
        })
        .collect()
}

fn batchnorm(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let count = (ctx.e("n") * ctx.e("s")) as f64;
    let stat = |f: fn(f64) -> f64| -> Vec<T> {
        ins[0]
            .iter()
            .map(|x| {
                T::from_fn(&[x.shape[1]], |c| {
                    let mut a = 0.0;
                    for n in 0..x.shape[0] {
                        for s in 0..x.shape[2] {
                            a += f(x.get(&[n, c[0], s]));
                        }
                    }
                    a
                })
            })
            .collect()
    };
    let s1 = ctx.reduce(&["n", "s"], stat(|v| v), ReduceOp::Sum)?;
    let s2 = ctx.reduce(&["n", "s"], stat(|v| v * v), ReduceOp::Sum)?;
    (0..ctx.devices())
        .map(|dev| {
            let x = &ins[0][dev];
            Ok(T::from_fn(&x.shape, |i| {
                let mean = s1[dev].get(&[i[1]]) / count;
                let var = s2[dev].get(&[i[1]]) / count - mean * mean;
                (x.get(i) - mean) / (var + 1e-5).sqrt() * ins[1][dev].get(&[i[1]])
                    + ins[2][dev].get(&[i[1]])
            }))
        })
        .collect()
}

/// log Σ_v exp(z) − z[label] from three combined statistics: the max, the target logit, the sum
/// of exponentials.
fn cross_entropy(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let (z, labels) = (&ins[0], &ins[1]);
    let m = ctx.reduce(
        &["v"],
        z.iter()
            .map(|x| rows(x, f64::NEG_INFINITY, f64::max))
            .collect(),
        ReduceOp::Max,
    )?;
    let mut target = Vec::new();
    let mut sumexp = Vec::new();
    for dev in 0..ctx.devices() {
        let (x, off) = (&z[dev], ctx.offset(dev, "v"));
        target.push(T::from_fn(&[x.shape[0]], |t| {
            let l = labels[dev].get(&[t[0]]) as usize;
            if (off..off + x.shape[1]).contains(&l) {
                x.get(&[t[0], l - off])
            } else {
                0.0
            }
        }));
        sumexp.push(T::from_fn(&[x.shape[0]], |t| {
            (0..x.shape[1])
                .map(|v| (x.get(&[t[0], v]) - m[dev].get(&[t[0]])).exp())
                .sum()
        }));
    }
    let target = ctx.reduce(&["v"], target, ReduceOp::Sum)?;
    let sumexp = ctx.reduce(&["v"], sumexp, ReduceOp::Sum)?;
    Ok((0..ctx.devices())
        .map(|dev| {
            T::from_fn(&m[dev].shape, |t| {
                sumexp[dev].get(t).ln() + m[dev].get(t) - target[dev].get(t)
            })
        })
        .collect())
}

/// Convolution and pooling: each device computes its block of output rows and columns from its
/// input rows widened by the halo its neighbours send.
fn window(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let name = ctx.rule.name.as_str();
    let (kh, kw, stride, pad) = (ctx.e("kh"), ctx.e("kw"), ctx.e("stride"), ctx.e("pad"));
    let extent = |o: &str, k: usize| ((ctx.e(o) - 1) * stride + k) as i64 - 2 * pad as i64;
    let (eh, ew) = (extent("oh", kh), extent("ow", kw));
    let rows = ctx.halo(&ins[0], 2, "oh")?;
    let widened: Vec<T> = rows.iter().map(|(t, _)| t.clone()).collect();
    let cols = ctx.halo(&widened, 3, "ow")?;
    (0..ctx.devices())
        .map(|dev| {
            let (x, r0) = (&cols[dev].0, rows[dev].1 as i64);
            let c0 = cols[dev].1 as i64;
            let read = |n: usize, c: usize, gh: i64, gw: i64| -> Result<Option<f64>, String> {
                if gh < 0 || gh >= eh || gw < 0 || gw >= ew {
                    return Ok(None);
                }
                let (lh, lw) = (gh - r0, gw - c0);
                if lh < 0 || lw < 0 || lh as usize >= x.shape[2] || lw as usize >= x.shape[3] {
                    return Err(format!(
                        "row {gh}, column {gw} is outside this device's halo"
                    ));
                }
                Ok(Some(x.get(&[n, c, lh as usize, lw as usize])))
            };
            let (oh0, ow0) = (ctx.offset(dev, "oh") as i64, ctx.offset(dev, "ow") as i64);
            let cout = match name {
                "conv2d" | "conv2d_bias" => ins[1][dev].shape[0],
                _ => x.shape[1],
            };
            let shape = [x.shape[0], cout, ctx.local("oh"), ctx.local("ow")];
            let mut out = T::zeros(&shape);
            let mut idx = vec![0; 4];
            for _ in 0..shape.iter().product::<usize>() {
                let (n, co, o, q) = (idx[0], idx[1], idx[2] as i64, idx[3] as i64);
                let at = |i: usize, j: usize| {
                    (
                        (oh0 + o) * stride as i64 + i as i64 - pad as i64,
                        (ow0 + q) * stride as i64 + j as i64 - pad as i64,
                    )
                };
                let mut acc = if name == "maxpool2d" {
                    f64::NEG_INFINITY
                } else {
                    0.0
                };
                for i in 0..kh {
                    for j in 0..kw {
                        let (gh, gw) = at(i, j);
                        match name {
                            "conv2d" | "conv2d_bias" => {
                                for ci in 0..x.shape[1] {
                                    if let Some(v) = read(n, ci, gh, gw)? {
                                        acc += v * ins[1][dev].get(&[co, ci, i, j]);
                                    }
                                }
                            }
                            "maxpool2d" => {
                                if let Some(v) = read(n, co, gh, gw)? {
                                    acc = acc.max(v);
                                }
                            }
                            _ => acc += read(n, co, gh, gw)?.unwrap_or(0.0) / (kh * kw) as f64,
                        }
                    }
                }
                if name == "conv2d_bias" {
                    acc += ins[2][dev].get(&[co]);
                }
                *out.at(&idx) = acc;
                bump(&mut idx, &shape);
            }
            Ok(out)
        })
        .collect()
}

/// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5·10⁻⁷): one fixed function, the
/// same on every device.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    if x < 0.0 {
        -y
    } else {
        y
    }
}

/// Grouped convolution, x [n, g, ci, h, w] by w [g, co, ci, kh, kw], with halo rows and columns
/// read from the neighbours as in [`window`].
fn grouped_conv(ctx: &OpCtx, ins: &[Vec<T>]) -> Out {
    let bias = ctx.rule.name == "conv2d_grouped_bias";
    let (kh, kw, stride, pad) = (ctx.e("kh"), ctx.e("kw"), ctx.e("stride"), ctx.e("pad"));
    let extent = |o: &str, k: usize| ((ctx.e(o) - 1) * stride + k) as i64 - 2 * pad as i64;
    let (eh, ew) = (extent("oh", kh), extent("ow", kw));
    let rows = ctx.halo(&ins[0], 3, "oh")?;
    let widened: Vec<T> = rows.iter().map(|(t, _)| t.clone()).collect();
    let cols = ctx.halo(&widened, 4, "ow")?;
    (0..ctx.devices())
        .map(|dev| {
            let (x, r0, c0) = (&cols[dev].0, rows[dev].1 as i64, cols[dev].1 as i64);
            let w = &ins[1][dev];
            let (oh0, ow0) = (ctx.offset(dev, "oh") as i64, ctx.offset(dev, "ow") as i64);
            let shape = [
                x.shape[0],
                x.shape[1],
                w.shape[1],
                ctx.local("oh"),
                ctx.local("ow"),
            ];
            let mut out = T::zeros(&shape);
            let mut idx = vec![0; 5];
            for _ in 0..shape.iter().product::<usize>() {
                let (n, g, co, o, q) = (idx[0], idx[1], idx[2], idx[3] as i64, idx[4] as i64);
                let mut acc = 0.0;
                for i in 0..kh {
                    for j in 0..kw {
                        let gh = (oh0 + o) * stride as i64 + i as i64 - pad as i64;
                        let gw = (ow0 + q) * stride as i64 + j as i64 - pad as i64;
                        if gh < 0 || gh >= eh || gw < 0 || gw >= ew {
                            continue;
                        }
                        let (lh, lw) = (gh - r0, gw - c0);
                        if lh < 0
                            || lw < 0
                            || lh as usize >= x.shape[3]
                            || lw as usize >= x.shape[4]
                        {
                            return Err(format!(
                                "row {gh}, column {gw} is outside this device's halo"
                            ));
                        }
                        for ci in 0..x.shape[2] {
                            acc += x.get(&[n, g, ci, lh as usize, lw as usize])
                                * w.get(&[g, co, ci, i, j]);
                        }
                    }
                }
                if bias {
                    acc += ins[2][dev].get(&[g, co]);
                }
                *out.at(&idx) = acc;
                bump(&mut idx, &shape);
            }
            Ok(out)
        })
        .collect()
}

/// Softmax over the experts of each token, then its top k renormalised (the rest zero).
fn moe_gate(ctx: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let x = &xs[0];
    let (t, e) = (x.shape[0], x.shape[1]);
    let k = ctx.e("k").min(e);
    let mut out = T::zeros(&x.shape);
    for r in 0..t {
        let row: Vec<f64> = (0..e).map(|c| x.get(&[r, c])).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|a, b| p[*b].total_cmp(&p[*a]).then(a.cmp(b)));
        let kept: f64 = order[..k].iter().map(|&c| p[c]).sum();
        for &c in &order[..k] {
            *out.at(&[r, c]) = p[c] / kept;
        }
    }
    Ok(out)
}

/// Softmax over the experts of each token, then its top k as they are (not renormalised),
/// multiplied by `scale` (the rest zero).
fn moe_gate_topk(ctx: &OpCtx, xs: &[T], scale: f64) -> Result<T, String> {
    let x = &xs[0];
    let (t, e) = (x.shape[0], x.shape[1]);
    let k = ctx.e("k").min(e);
    let mut out = T::zeros(&x.shape);
    for r in 0..t {
        let row: Vec<f64> = (0..e).map(|c| x.get(&[r, c])).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
        let z: f64 = p.iter().sum();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|a, b| p[*b].total_cmp(&p[*a]).then(a.cmp(b)));
        for &c in &order[..k] {
            *out.at(&[r, c]) = scale * p[c] / z;
        }
    }
    Ok(out)
}

/// Softmax over the experts of each token; the experts in g equal groups scored by their largest
/// probability, the top tg groups kept; the top k within them, multiplied by 2.5 (the rest zero).
fn moe_gate_group(ctx: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let x = &xs[0];
    let (t, e) = (x.shape[0], x.shape[1]);
    let (g, tg) = (ctx.e("g").max(1), ctx.e("tg"));
    let per = e / g;
    let mut out = T::zeros(&x.shape);
    for r in 0..t {
        let row: Vec<f64> = (0..e).map(|c| x.get(&[r, c])).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = row.iter().map(|v| (v - max).exp()).collect();
        let z: f64 = p.iter().sum();
        let score = |grp: usize| (0..per).map(|j| p[grp * per + j]).fold(0.0, f64::max);
        let mut groups: Vec<usize> = (0..g).collect();
        groups.sort_by(|a, b| score(*b).total_cmp(&score(*a)).then(a.cmp(b)));
        let kept = &groups[..tg.min(g)];
        let masked: Vec<f64> = (0..e)
            .map(|c| {
                if kept.contains(&(c / per.max(1))) {
                    p[c]
                } else {
                    0.0
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|a, b| masked[*b].total_cmp(&masked[*a]).then(a.cmp(b)));
        for &c in &order[..ctx.e("k").min(e)] {
            *out.at(&[r, c]) = 2.5 * masked[c] / z;
        }
    }
    Ok(out)
}

/// Sigmoid scores; the experts in g equal groups scored by the sum of their two largest scores,
/// the top tg groups kept; the top k within them, renormalised and multiplied by 2.5 (the rest
/// zero). The choice's bias (a buffer, zero as initialised) does not change the choice here.
fn moe_gate_sigmoid_group(ctx: &OpCtx, _: usize, xs: &[T]) -> Result<T, String> {
    let x = &xs[0];
    let (t, e) = (x.shape[0], x.shape[1]);
    let (g, tg) = (ctx.e("g").max(1), ctx.e("tg"));
    let per = (e / g).max(1);
    let mut out = T::zeros(&x.shape);
    for r in 0..t {
        let p: Vec<f64> = (0..e)
            .map(|c| 1.0 / (1.0 + (-x.get(&[r, c])).exp()))
            .collect();
        let score = |grp: usize| {
            let mut v: Vec<f64> = (0..per).map(|j| p[grp * per + j]).collect();
            v.sort_by(|a, b| b.total_cmp(a));
            v.iter().take(2).sum::<f64>()
        };
        let mut groups: Vec<usize> = (0..g).collect();
        groups.sort_by(|a, b| score(*b).total_cmp(&score(*a)).then(a.cmp(b)));
        let kept = &groups[..tg.min(g)];
        let mut order: Vec<usize> = (0..e).filter(|c| kept.contains(&(c / per))).collect();
        order.sort_by(|a, b| p[*b].total_cmp(&p[*a]).then(a.cmp(b)));
        order.truncate(ctx.e("k").min(order.len()));
        let z: f64 = order.iter().map(|&c| p[c]).sum::<f64>() + 1e-20;
        for &c in &order {
            *out.at(&[r, c]) = 2.5 * p[c] / z;
        }
    }
    Ok(out)
}

/// The capacity slot of token `s` (global position): a fixed assignment, slot s mod c.
fn slot_of(s: usize, slots: usize) -> usize {
    s % slots.max(1)
}

/// `y[g, e, c, h] = Σ_s route[g, s, e] · [slot(s) = c] · x[g, s, h]` over this device's tokens.
fn moe_dispatch(ctx: &OpCtx, dev: usize, xs: &[T]) -> Result<T, String> {
    let (x, route) = (&xs[0], &xs[1]);
    let (g, s, h) = (x.shape[0], x.shape[1], x.shape[2]);
    let (e, c) = (route.shape[2], ctx.local("c"));
    let (os, oc) = (ctx.offset(dev, "s"), ctx.offset(dev, "c"));
    let slots = ctx.e("c");
    Ok(T::from_fn(&[g, e, c, h], |i| {
        (0..s)
            .filter(|&t| slot_of(t + os, slots) == i[2] + oc)
            .map(|t| route.get(&[i[0], t, i[1]]) * x.get(&[i[0], t, i[3]]))
            .sum()
    }))
}

/// `y[g, s, h] = Σ_{e, c} route[g, s, e] · [slot(s) = c] · x[g, e, c, h]` over this device's
/// experts and slots.
fn moe_combine(ctx: &OpCtx, dev: usize, xs: &[T]) -> Result<T, String> {
    let (x, route) = (&xs[0], &xs[1]);
    let (g, e, c, h) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let s = route.shape[1];
    let (os, oc) = (ctx.offset(dev, "s"), ctx.offset(dev, "c"));
    let slots = ctx.e("c");
    Ok(T::from_fn(&[g, s, h], |i| {
        let mut v = 0.0;
        for ex in 0..e {
            for sl in 0..c {
                if slot_of(i[1] + os, slots) == sl + oc {
                    v += route.get(&[i[0], i[1], ex]) * x.get(&[i[0], ex, sl, i[2]]);
                }
            }
        }
        v
    }))
}
