#!/usr/bin/env bash
# qkv and nanoGPT's PyTorch training side by side, in one run on this
# machine: nanoGPT's CPU configuration of shakespeare_char on Go's net/http
# source (qkv train --preset nanogpt-cpu; nanogpt_chars.py's defaults), both
# scored every 250 steps on the same 2400 fixed validation windows. Prints
# the table README gives and writes the figure.
#
#   tools/nanogpt/side_by_side.sh [OUT_DIR]      (default runs/side-by-side)
#
# THREADS lists PyTorch's thread counts (default "1 2"); PYTHON is the
# python with torch (default /usr/bin/python3). About 15 minutes here.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/side-by-side}
python=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
go build -o "$out/qkv" ./cmd/qkv
echo "qkv: $(date -u +%T)"
"$out/qkv" train --preset nanogpt-cpu --test-size 2400 --out "$out/qkv-run" --force
jsons=()
for threads in ${THREADS:-1 2}; do
  echo "PyTorch, $threads thread(s): $(date -u +%T)"
  "$python" tools/nanogpt/nanogpt_chars.py --threads "$threads" --eval-iters 20 --fixed-windows 2400 \
    --out-json "$out/torch-$threads.json" >/dev/null
  jsons+=("$out/torch-$threads.json")
done
go run ./tools/nanogpt/compare --qkv "$out/qkv-run" --plot "$out/side-by-side.png" "${jsons[@]}"
