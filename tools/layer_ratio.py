#!/usr/bin/env python3
"""Layer scaling of `rank` by seconds: `rank gpt3-175b --devices D --calib a100-80gb --set L=12`
against `--set L=192`, run in turn N times each, wall time; prints the medians and the median of
the paired ratios (issue 40 asks for at most 1.2x at every device count).

    python3 tools/layer_ratio.py target/release/symshard 512,1024,2048 15
"""
import statistics
import subprocess
import sys
import time


def main() -> None:
    binary, devices, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for d in [int(x) for x in devices.split(",")]:
        times = {12: [], 192: []}
        for _ in range(pairs):
            for layers in (12, 192):
                start = time.perf_counter()
                subprocess.run(
                    [binary, "rank", "gpt3-175b", "--devices", str(d), "--calib", "a100-80gb",
                     "--set", f"L={layers}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                times[layers].append(time.perf_counter() - start)
        paired = [b / a for a, b in zip(times[12], times[192])]
        print(f"{d} devices: L=12 {statistics.median(times[12]):.4f} s, "
              f"L=192 {statistics.median(times[192]):.4f} s, "
              f"median paired ratio {statistics.median(paired):.3f}")


if __name__ == "__main__":
    main()
