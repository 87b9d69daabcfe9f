#!/usr/bin/env bash
# README's Speed figures in one run: interleaved rounds of `qkv bench --torch`
# on each configuration (qkv and PyTorch side by side, the ratio per round),
# then GOMAXPROCS=1 against 2 on the nanoGPT preset, and the median of each.
# The machine is shared and noisy: read the ratios, not the milliseconds.
#
#   tools/speed/rounds.sh            # 3 rounds
#   ROUNDS=5 tools/speed/rounds.sh
#   QKV_TORCH_PYTHON=/path/python tools/speed/rounds.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
python=${QKV_TORCH_PYTHON:-/usr/bin/python3}
bin=$(mktemp -d)/qkv
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/qkv

R="--task copy --length 16 --alphabet 14 --batch 32 --dim 64 --heads 4 --hidden 256 --layers 1 --activation relu --optimizer adam --clip 0"
names=("R float32" "R float64" "sort float32" "sort float64" "nanogpt-cpu")
flags=("$R -n 50" "$R --dtype float64 -n 50" "-n 50" "--dtype float64 -n 50" "--preset nanogpt-cpu -n 20")

median() { grep . | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
declare -A ratio qkv torch allocs gc
for round in $(seq "$rounds"); do
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086 # the flags are words
    out=$("$bin" bench ${flags[$i]} --torch "$python")
    r=$(sed -n 's/^qkv \/ PyTorch.s best: \([0-9.]*\)x.*/\1/p' <<<"$out")
    q=$(sed -n 's/^qkv (gorgonia): *\([0-9.]*\) ms\/step.*/\1/p' <<<"$out")
    t=$(sed -n 's/^PyTorch.* thread(s): *\([0-9.]*\) ms\/step.*/\1/p' <<<"$out" | sort -g | head -1)
    a=$(sed -n 's/.* \([0-9]*\) allocations\/step.*/\1/p' <<<"$out")
    g=$(sed -n 's/.*GC \([0-9.]*\)% of the time.*/\1/p' <<<"$out")
    echo "round $round, ${names[$i]}: qkv $q ms, PyTorch's best $t ms, ratio $r, $a allocations/step, GC $g% (load $(cut -d' ' -f1 /proc/loadavg))"
    ratio[$i]+="$r "; qkv[$i]+="$q "; torch[$i]+="$t "; allocs[$i]+="$a "; gc[$i]+="$g "
  done
done
declare -A cores
for round in $(seq "$rounds"); do
  for p in 1 2; do
    ms=$(GOMAXPROCS=$p "$bin" bench --preset nanogpt-cpu -n 20 | sed -n 's/^qkv (gorgonia): *\([0-9.]*\) ms\/step.*/\1/p')
    echo "round $round, nanogpt-cpu, GOMAXPROCS=$p: $ms ms/step"
    cores[$p]+="$ms "
  done
done
echo
echo "medians over $rounds rounds:"
for i in "${!names[@]}"; do
  printf '%-13s qkv %s ms, PyTorch %s ms, qkv/PyTorch %s (rounds: %s), %s allocations/step, GC %s%%\n' "${names[$i]}" \
    "$(tr ' ' '\n' <<<"${qkv[$i]}" | median)" "$(tr ' ' '\n' <<<"${torch[$i]}" | median)" \
    "$(tr ' ' '\n' <<<"${ratio[$i]}" | median)" "${ratio[$i]% }" \
    "$(tr ' ' '\n' <<<"${allocs[$i]}" | median)" "$(tr ' ' '\n' <<<"${gc[$i]}" | median)"
done
one=$(tr ' ' '\n' <<<"${cores[1]}" | median)
two=$(tr ' ' '\n' <<<"${cores[2]}" | median)
echo "nanogpt-cpu   GOMAXPROCS=1 $one ms, GOMAXPROCS=2 $two ms: two cores $(awk -v a="$one" -v b="$two" 'BEGIN {printf "%.2f", a/b}')x faster"
