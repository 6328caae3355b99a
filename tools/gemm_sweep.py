#!/usr/bin/env python3
"""Time bf16 GEMMs on this GPU and write the CSV `symshard calibrate gemm` reads.

    python tools/gemm_sweep.py -o sweep.csv            # about 1000 shapes, a few minutes
    python tools/gemm_sweep.py -o sweep.csv --quick    # a coarse grid, well under a minute
    symshard calibrate gemm sweep.csv --base h100-sxm -o my-h100.yaml

Each row is one `torch.matmul` of an (m, k) by a (k, n) matrix: m runs over token counts of a
micro-batch (and skinny counts as in decoding or small micro-batches), n and k over hidden and
feed-forward sizes of transformers. Each shape is warmed up, then timed with CUDA events over
enough calls to last about `--min-ms` milliseconds; the row holds the seconds of one call.
Only torch is needed.
"""

import argparse
import datetime
import sys

import torch

TOKENS = [512, 1024, 2048, 4096, 8192, 16384]
SKINNY = [1, 16, 64, 256]
HIDDEN = [512, 1024, 1536, 2048, 2560, 4096, 5120, 8192, 12288, 16384]
QUICK_TOKENS = [512, 2048, 8192]
QUICK_SKINNY = [16]
QUICK_HIDDEN = [1024, 4096, 16384]


def shapes(quick):
    tokens, skinny, hidden = (
        (QUICK_TOKENS, QUICK_SKINNY, QUICK_HIDDEN) if quick else (TOKENS, SKINNY, HIDDEN)
    )
    for m in skinny + tokens:
        for n in hidden:
            for k in hidden:
                yield m, n, k


def time_one(m, n, k, dtype, min_ms, warmup):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    for _ in range(warmup):
        torch.matmul(a, b)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    # One timed call to size the loop, then enough calls to last min_ms.
    start.record()
    torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    iters = max(3, min(1000, int(min_ms / max(start.elapsed_time(end), 1e-3))))
    start.record()
    for _ in range(iters):
        torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="-", help="CSV file (default: stdout)")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--quick", action="store_true", help="a coarse grid of 36 shapes")
    p.add_argument("--min-ms", type=float, default=20.0, help="timed milliseconds per shape")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per shape")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gemm_sweep.py: no CUDA device")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    # Time what the tensor cores do, as training stacks run them.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    out.write(f"# gpu: {torch.cuda.get_device_name()}\n")
    out.write(f"# date: {datetime.date.today().isoformat()}\n")
    out.write(f"# torch: {torch.__version__}, CUDA {torch.version.cuda}\n")
    out.write("m,n,k,dtype,seconds\n")
    for m, n, k in shapes(args.quick):
        seconds = time_one(m, n, k, dtype, args.min_ms, args.warmup)
        out.write(f"{m},{n},{k},{args.dtype},{seconds:.6e}\n")
        out.flush()
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
