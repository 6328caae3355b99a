#!/usr/bin/env bash
# One GPU's measurements for the calibration tables, in one go (about six minutes on one GPU):
# the memory-copy probe, the full bf16 GEMM sweep at sustained-load clocks, and an FP8 sweep.
# Writes into the folder named by $OUT (default: ./device-checks).
#
#     bash tools/device_checks.sh
#     symshard calibrate gemm device-checks/gemm-bf16.csv --base h200-sxm -o my-h200.yaml
set -u
out="${OUT:-device-checks}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
here="$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv >"$out/nvidia-smi.csv" 2>&1
timeout 90 python3 "$here/bandwidth_probe.py" -o "$out/bandwidth.csv" || echo "bandwidth probe failed: $?"
timeout 360 python3 "$here/gemm_sweep.py" --soak 30 -o "$out/gemm-bf16.csv" || echo "bf16 sweep failed: $?"
timeout 120 python3 "$here/gemm_sweep.py" --dtype fp8 -o "$out/gemm-fp8.csv" || echo "fp8 sweep failed: $?"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >>"$out/nvidia-smi.csv" 2>&1
ls -la "$out"
