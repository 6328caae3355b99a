#!/bin/bash
# Runs a fixed set of `rank`, `cost` and `timeline` commands with two symshard binaries and
# reports every output that differs (stdout, stderr, exit code), ignoring lines that hold
# timings (a `seconds` field, or a line ending in `0.15 s`). For refactorings that must not
# change any number:
#
#     git stash; cargo build --release; cp target/release/symshard /tmp/symshard.before
#     git stash pop; cargo build --release
#     tools/same_outputs.sh /tmp/symshard.before target/release/symshard
#
# Exit status 0 when all outputs agree, 1 otherwise.
set -u
before=$1
after=$2
dir=$(mktemp -d)
status=0
i=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  i=$((i + 1))
  for bin in before after; do
    # shellcheck disable=SC2086
    "${!bin}" $line >"$dir/$bin.out" 2>"$dir/$bin.err"
    echo $? >"$dir/$bin.rc"
  done
  for x in out err rc; do
    if ! diff <(grep -Ev 'seconds|[0-9] s$' "$dir/before.$x") <(grep -Ev 'seconds|[0-9] s$' "$dir/after.$x") >/dev/null; then
      echo "differs ($x): symshard $line"
      status=1
    fi
  done
done <<'CMDS'
rank gpt3-175b --devices 1024 --format json
rank resnet50 --devices 64 --format json
rank mixtral-8x7b --devices 256 --format json
rank llama3-8b --devices 64 --format json
rank gpt3-175b --devices 1024 --calib a100-80gb --format json
rank llama2-7b --devices 32 --calib h100-sxm --format json
rank mixtral-8x7b --devices 256 --calib h100-sxm --format json
rank gpt3-175b --devices 1024
cost gpt3-175b --tp 8 --pp 8 --dp 16 --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --recompute selective --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --recompute full --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --sequence-parallel --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --schedule interleaved-1f1b --chunks 2 --microbatches 16 --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --schedule gpipe --recompute full --zero 1 --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16 --calib a100-80gb --format json
cost gpt3-175b --tp 8 --pp 8 --dp 16
cost llama3-8b --tp 2 --dp 8 --zero 3 --format json
cost llama3-8b --tp 2 --cp 2 --dp 4 --format json
cost llama3-8b --tp 4 --cp 2 --dp 4 --recompute selective --sequence-parallel --format json
cost llama3-8b --tp 2 --pp 4 --cp 2 --dp 4 --recompute full --zero 3 --format json
cost mixtral-8x7b --tp 2 --ep 8 --dp 8 --format json
cost mixtral-8x7b --tp 2 --ep 4 --dp 8 --pp 4 --zero 2 --format json
cost mixtral-8x7b --tp 2 --ep 8 --dp 8 --pp 2 --recompute selective --zero 3 --format json
cost bert-large --tp 2 --dp 4 --pp 2 --format json
cost resnet50 --dp 64 --format json
cost gpt3-175b --tp 8 --pp 7 --dp 16 --format json
cost gpt3-175b --tp 7 --pp 8 --dp 16 --format json
cost gpt3-175b --tp 8 --pp 1000 --dp 16 --format json
cost mixtral-8x7b --tp 2 --ep 3 --dp 8 --format json
timeline gpt3-175b --tp 8 --pp 8 --dp 16 --micro-batch-size 1 --sequence-parallel --recompute selective --calib a100-80gb --format json
timeline gpt3-175b --tp 8 --pp 8 --dp 16 --schedule interleaved-1f1b --chunks 2 --microbatches 16 --calib a100-80gb --format json
timeline llama3-8b --set B=64 --dp 8 --micro-batch-size 1 --calib a100-80gb --format json
timeline mixtral-8x7b --tp 2 --ep 8 --dp 8 --calib a100-80gb --format json
CMDS
rm -rf "$dir"
[ $status = 0 ] && echo "all $i commands agree"
exit $status
