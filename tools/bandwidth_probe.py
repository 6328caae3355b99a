#!/usr/bin/env python3
"""Time memory copies on this machine's GPUs and write them as CSV.

    python tools/bandwidth_probe.py -o bandwidth.csv

Each row is one kind of copy at one size, timed with CUDA events over enough repetitions to last
about `--min-ms` milliseconds after a warm-up:

* `device`: a device-to-device copy within one GPU (`dst.copy_(src)`). Its rate counts the bytes
  read and the bytes written, which is how a streaming kernel's HBM traffic is counted, so it
  compares with the datasheet's memory bandwidth.
* `host-to-device`, `device-to-host`: copies between pinned host memory and the GPU, one
  direction at a time (PCIe, or the chip-to-chip link on Grace systems).
* `peer`: GPU 0 to GPU 1 where the machine has two or more and they can reach each other
  (NVLink or PCIe); the bytes are counted once.

The collective bandwidth that `symshard calibrate nccl-tests` fits comes from nccl-tests, which
needs several GPUs; this probe measures what one GPU can show. Only torch is needed.
"""

import argparse
import datetime
import sys

import torch

SIZES = [2**p for p in range(20, 33, 2)]  # 1 MiB to 4 GiB


def time_copy(dst, src, min_ms, warmup=3):
    for _ in range(warmup):
        dst.copy_(src, non_blocking=True)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    dst.copy_(src, non_blocking=True)
    end.record()
    torch.cuda.synchronize()
    iters = max(3, min(1000, int(min_ms / max(start.elapsed_time(end), 1e-3))))
    start.record()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def cases(size):
    """(kind, destination, source, bytes counted) for one size in bytes."""
    n = size  # uint8 elements
    yield "device", torch.empty(n, dtype=torch.uint8, device="cuda:0"), torch.empty(
        n, dtype=torch.uint8, device="cuda:0"
    ), 2 * size
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    yield "host-to-device", dev, host, size
    yield "device-to-host", host, dev, size
    if torch.cuda.device_count() > 1 and torch.cuda.can_device_access_peer(0, 1):
        yield "peer", torch.empty(n, dtype=torch.uint8, device="cuda:1"), dev, size


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="-", help="CSV file (default: stdout)")
    p.add_argument("--min-ms", type=float, default=50.0, help="timed milliseconds per row")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bandwidth_probe.py: no CUDA device")
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    out.write(f"# gpu: {torch.cuda.get_device_name()} (x{torch.cuda.device_count()})\n")
    out.write(f"# date: {datetime.date.today().isoformat()}\n")
    out.write(f"# torch: {torch.__version__}, CUDA {torch.version.cuda}\n")
    out.write("kind,bytes,seconds,bytes_per_second\n")
    for size in SIZES:
        for kind, dst, src, counted in cases(size):
            seconds = time_copy(dst, src, args.min_ms)
            out.write(f"{kind},{counted},{seconds:.6e},{counted / seconds:.4e}\n")
            out.flush()
            del dst, src
        torch.cuda.empty_cache()
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
