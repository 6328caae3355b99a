"""How a sweep scales with workers: times `symshard.sweep` on an 800-point grid with the local
executor (threads) or a local Ray cluster, at the worker count given.

    python tools/sweep_scaling.py local 1
    python tools/sweep_scaling.py ray 2

Run it on an idle machine, each setting more than once; the Parquet files of every run are the
same bytes. Needs the Python package (and Ray for `ray`) installed, as `.ci/python` installs them.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import symshard

SPEC = """\
models: [llama3-8b]
machines: [h100-sxm, a100-80gb, h200-sxm, b200, a100-40gb]
devices: [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
precisions: [bf16]
batch: [128, 256, 512, 1024]
sequence: [2048, 4096, 8192, 16384]
"""


def main() -> None:
    executor, workers = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(SPEC)
        out = Path(tmp) / "s.parquet"
        if executor == "ray":
            import ray

            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)

            @ray.remote
            def warm() -> int:
                return 0

            # Workers started before the clock.
            ray.get([warm.remote() for _ in range(workers)])
            start = time.perf_counter()
            r = symshard.sweep(spec, out, executor="ray")
            seconds = time.perf_counter() - start
            ray.shutdown()
        else:
            start = time.perf_counter()
            r = symshard.sweep(spec, out, jobs=workers)
            seconds = time.perf_counter() - start
        print(f"{executor} {workers}: {r.points} points in {seconds:.2f} s")


if __name__ == "__main__":
    main()
