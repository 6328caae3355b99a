#!/usr/bin/env python3
"""Time bf16 GEMMs on this GPU and write the CSV `symshard calibrate gemm` reads.

    python tools/gemm_sweep.py -o sweep.csv            # about 1000 shapes, a few minutes
    python tools/gemm_sweep.py -o sweep.csv --quick    # a coarse grid, well under a minute
    python tools/gemm_sweep.py -o sweep.csv --soak 120 # at the clocks of a long training run
    symshard calibrate gemm sweep.csv --base h100-sxm -o my-h100.yaml

Each row is one `torch.matmul` of an (m, k) by a (k, n) matrix: m runs over token counts of a
micro-batch (and skinny counts as in decoding or small micro-batches), n and k over hidden and
feed-forward sizes of transformers. Each shape is warmed up, then timed with CUDA events over
enough calls to last about `--min-ms` milliseconds; the row holds the seconds of one call.
Only torch is needed.

A GPU that has idled runs its first seconds of work at boost clocks; under sustained load a
power limit (700 W on an H100 SXM) pulls the clocks down, and a training run spends its hours
there. `--soak SECONDS` first runs large GEMMs back to back for that long, then keeps them
running between shapes, so the sweep times the GPU in that state. Where torch can read them
(it uses pynvml), the SM clock and power draw before and after the soak and at the end are
written as comment lines.
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


def soak(seconds, dtype):
    """Large GEMMs back to back for `seconds` of wall time."""
    if seconds <= 0:
        return
    a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(20):
            torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        if start.elapsed_time(end) >= seconds * 1e3:
            return


def device_state():
    """`SM clock N MHz, power P W` where torch can read them (pynvml), else None."""
    parts = []
    for name, read, unit, scale in (
        ("SM clock", getattr(torch.cuda, "clock_rate", None), "MHz", 1),
        ("power", getattr(torch.cuda, "power_draw", None), "W", 1e-3),
    ):
        if read is None:
            continue
        try:
            parts.append(f"{name} {read() * scale:.0f} {unit}")
        except Exception:  # pynvml missing or the query unsupported
            continue
    return ", ".join(parts) or None


def product(m, n, k, dtype):
    """A zero-argument function that runs one GEMM of (m, k) by (k, n) in `dtype`.

    FP8 is an e4m3 GEMM through `torch._scaled_mm` with per-tensor scales and a bf16 output,
    as Transformer Engine's per-tensor recipes run their linear layers; cuBLASLt needs the
    second operand column-major and every size a multiple of 16.
    """
    if dtype == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda", dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return lambda: torch.matmul(a, b)


def time_one(m, n, k, dtype, min_ms, warmup):
    run = product(m, n, k, dtype)
    for _ in range(warmup):
        run()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    # One timed call to size the loop, then enough calls to last min_ms.
    start.record()
    run()
    end.record()
    torch.cuda.synchronize()
    iters = max(3, min(1000, int(min_ms / max(start.elapsed_time(end), 1e-3))))
    start.record()
    for _ in range(iters):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="-", help="CSV file (default: stdout)")
    p.add_argument(
        "--dtype",
        choices=["bf16", "fp16", "fp8"],
        default="bf16",
        help="fp8: e4m3 through torch._scaled_mm (Hopper and later); shapes whose sizes are "
        "not multiples of 16 are skipped",
    )
    p.add_argument("--quick", action="store_true", help="a coarse grid of 36 shapes")
    p.add_argument("--min-ms", type=float, default=20.0, help="timed milliseconds per shape")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per shape")
    p.add_argument(
        "--soak",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run large GEMMs this long first, and 0.2 s between shapes, to time the GPU at "
        "the clocks it holds under sustained load (default 0: as it comes)",
    )
    args = p.parse_args()
    if args.soak < 0:
        sys.exit("gemm_sweep.py: --soak must be 0 or more seconds")
    if not torch.cuda.is_available():
        sys.exit("gemm_sweep.py: no CUDA device")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": "fp8"}[args.dtype]
    soak_dtype = torch.bfloat16 if dtype == "fp8" else dtype
    # Time what the tensor cores do, as training stacks run them.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    out.write(f"# gpu: {torch.cuda.get_device_name()}\n")
    out.write(f"# date: {datetime.date.today().isoformat()}\n")
    out.write(f"# torch: {torch.__version__}, CUDA {torch.version.cuda}\n")
    if args.soak > 0:
        before = device_state()
        soak(args.soak, soak_dtype)
        after = device_state()
        out.write(f"# soak: {args.soak:g} s of 8192x8192x8192 GEMMs before the sweep\n")
        if before and after:
            out.write(f"# before the soak: {before}; after: {after}\n")
    out.write("m,n,k,dtype,seconds\n")
    for m, n, k in shapes(args.quick):
        if dtype == "fp8" and (m % 16 or n % 16 or k % 16):
            continue
        if args.soak > 0:
            soak(0.2, soak_dtype)
        seconds = time_one(m, n, k, dtype, args.min_ms, args.warmup)
        out.write(f"{m},{n},{k},{args.dtype},{seconds:.6e}\n")
        out.flush()
    if args.soak > 0:
        end = device_state()
        if end:
            out.write(f"# at the end: {end}\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
