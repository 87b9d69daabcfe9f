#!/usr/bin/env bash
# README's Speed figures in one run: interleaved rounds of `qkv bench --torch`
# on each configuration (qkv and PyTorch side by side, the ratio per round),
# then GOMAXPROCS=1 against 2 on the nanoGPT preset, and the median of each.
# The machine is shared and noisy: read the ratios, not the milliseconds.
# Each run records the load average before and after it, the CPU time the
# other processes took meanwhile (/proc/stat's busy and stolen time less the
# run's own) and the run's CPU time against its wall time; a run during
# which the machine was busy (others took more than BUSY_CORES, 0.5, of a
# core on average, or the run's CPU time fell below CPU_WALL, 0.8, of its
# wall time: its threads waited for a core) is printed with the reason and
# left out of the medians, and a configuration with no quiet run reports no
# ratio. See docs/speed-peak.md.
#
# With LONG=1 it adds the nanoGPT preset at contexts 256 and 1024, fused
# and flash, and prints each configuration's matrix-product GFLOP per
# second of step: the long-context rows of docs/speed.md.
#
#   tools/speed/rounds.sh            # 3 rounds
#   ROUNDS=5 tools/speed/rounds.sh
#   LONG=1 ROUNDS=1 tools/speed/rounds.sh
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
if [[ ${LONG:-} == 1 ]]; then
  names+=("ctx 256 fused" "ctx 256 flash" "ctx 1024 fused" "ctx 1024 flash")
  flags+=("--preset nanogpt-cpu --context 256 -n 5" "--preset nanogpt-cpu --context 256 --attention flash -n 5"
    "--preset nanogpt-cpu --context 1024 -n 2" "--preset nanogpt-cpu --context 1024 --attention flash -n 2")
fi

cores=$(nproc)
busy_cores=${BUSY_CORES:-0.5}
cpu_wall=${CPU_WALL:-0.8}
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $cores cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# stat prints the machine's busy (not idle, not iowait) CPU ticks, stolen
# ones included, and the clock's ticks a second.
stat() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {print $2+$3+$4+$7+$8+$9, hz; exit}' /proc/stat; }

# timed runs "$@", its output in $out, and sets $busy to why the machine
# was busy during it ("" if it was not) and $note to its measurements.
timed() {
  local l0 l1 s0 s1 hz t0 t1 c0 c1
  l0=$(cut -d' ' -f1 /proc/loadavg); read -r s0 hz < <(stat)
  t0=$(awk '{print $1}' /proc/uptime)
  # This shell's CPU ticks and its waited-for children's: the run's
  # command substitution and, through it, the run.
  c0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  out=$("$@")
  c1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  t1=$(awk '{print $1}' /proc/uptime)
  read -r s1 hz < <(stat)
  l1=$(cut -d' ' -f1 /proc/loadavg)
  read -r busy note < <(awk -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" -v hz="$hz" -v t0="$t0" -v t1="$t1" \
    -v l0="$l0" -v l1="$l1" -v bc="$busy_cores" -v cw="$cpu_wall" 'BEGIN {
      wall = t1 - t0; own = (c1 - c0) / hz; others = (s1 - s0) / hz - own
      if (wall <= 0) wall = 0.01
      if (others < 0) others = 0
      why = "-"
      if (others / wall > bc) why = sprintf("others_took_%.2f_cores", others / wall)
      else if (own < cw * wall) why = sprintf("CPU_time_%.2f_of_wall_time", own / wall)
      printf "%s load %s->%s, others %.2f cores, CPU/wall %.2f\n", why, l0, l1, others / wall, own / wall }')
  [[ $busy == - ]] && busy=""
  busy=${busy//_/ }
}

median() { grep . | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
declare -A ratio qkv torch allocs gc peak peakOf rate
for round in $(seq "$rounds"); do
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086 # the flags are words
    timed "$bin" bench ${flags[$i]} --torch "$python"
    r=$(sed -n 's/^qkv \/ PyTorch.s best: \([0-9.]*\)x.*/\1/p' <<<"$out")
    q=$(sed -n 's/^qkv (gorgonia): *\([0-9.]*\) ms\/step.*/\1/p' <<<"$out")
    t=$(sed -n 's/^PyTorch.* thread(s)[^:]*: *\([0-9.]*\) ms\/step.*/\1/p' <<<"$out" | sort -g | head -1)
    a=$(sed -n 's/.* \([0-9]*\) allocations\/step.*/\1/p' <<<"$out")
    g=$(sed -n 's/.*GC \([0-9.]*\)% of the time.*/\1/p' <<<"$out")
    # These runs have every core (GOMAXPROCS unset): their share of all
    # the cores' peak, which bench prints beside one core's (only one
    # core's on a machine of one).
    pk=$(sed -n "s/^matrix products:.* \([0-9.]*\)% of [0-9]* cores' .*/\1/p" <<<"$out")
    of="the $cores cores'"
    if [[ -z $pk ]]; then
      pk=$(sed -n "s/^matrix products:.* \([0-9.]*\)% of one core's.*/\1/p" <<<"$out")
      of="one core's"
    fi
    peakOf[$i]=$of
    gf=$(sed -n 's/^matrix products:.*, \([0-9.]*\) GFLOP\/s:.*/\1/p' <<<"$out")
    if [[ $round == 1 && $i == 0 ]]; then # PyTorch's BLAS and its kernels (torchref.py chooses them)
      echo "PyTorch's BLAS: $(sed -n 's/^PyTorch.* thread(s)[^(]*(BLAS \(.*\))$/\1/p' <<<"$out" | head -1)"
    fi
    if [[ -n $busy ]]; then
      echo "round $round, ${names[$i]}: no ratio: the machine was busy ($busy; $note): qkv $q ms, PyTorch's best $t ms"
      continue
    fi
    echo "round $round, ${names[$i]}: qkv $q ms, PyTorch's best $t ms, ratio $r, $a allocations/step, GC $g%, $gf GFLOP/s, $pk% of $of peak ($note)"
    ratio[$i]+="$r "; qkv[$i]+="$q "; torch[$i]+="$t "; allocs[$i]+="$a "; gc[$i]+="$g "; peak[$i]+="$pk "; rate[$i]+="$gf "
  done
done
# 60 steps a run (20 until 2026-12-06): at two cores 20 steps were 0.4 s,
# and one run's step moved by a tenth from the next's.
declare -A procs
onepeak="" # the one-core runs' % of the peak
for round in $(seq "$rounds"); do
  for p in 1 2; do
    timed env GOMAXPROCS=$p "$bin" bench --preset nanogpt-cpu -n 60
    ms=$(sed -n 's/^qkv (gorgonia): *\([0-9.]*\) ms\/step.*/\1/p' <<<"$out")
    pk=$(sed -n "s/^matrix products:.* \([0-9.]*\)% of one core's float32 FMA peak (\([0-9.]*\) GFLOP\/s).*/\1% of \2/p" <<<"$out")
    if [[ -n $busy ]]; then
      echo "round $round, nanogpt-cpu, GOMAXPROCS=$p: not counted: the machine was busy ($busy; $note): $ms ms/step"
      continue
    fi
    echo "round $round, nanogpt-cpu, GOMAXPROCS=$p: $ms ms/step, $pk GFLOP/s of one core's FMA peak ($note)"
    procs[$p]+="$ms "
    if [[ $p == 1 ]]; then
      onepeak+="${pk%%\%*} "
    fi
  done
done
echo
echo "medians over $rounds rounds:"
for i in "${!names[@]}"; do
  if [[ -z ${ratio[$i]:-} ]]; then
    printf '%-13s no ratio: the machine was busy in every round (see above)\n' "${names[$i]}"
    continue
  fi
  printf '%-14s qkv %s ms, PyTorch %s ms, qkv/PyTorch %s (quiet rounds: %s), %s allocations/step, GC %s%%, %s GFLOP/s, %s%% of %s peak\n' "${names[$i]}" \
    "$(tr ' ' '\n' <<<"${qkv[$i]}" | median)" "$(tr ' ' '\n' <<<"${torch[$i]}" | median)" \
    "$(tr ' ' '\n' <<<"${ratio[$i]}" | median)" "${ratio[$i]% }" \
    "$(tr ' ' '\n' <<<"${allocs[$i]}" | median)" "$(tr ' ' '\n' <<<"${gc[$i]}" | median)" \
    "$(tr ' ' '\n' <<<"${rate[$i]}" | median)" "$(tr ' ' '\n' <<<"${peak[$i]}" | median)" "${peakOf[$i]}"
done
if [[ -z ${procs[1]:-} || -z ${procs[2]:-} ]]; then
  echo "nanogpt-cpu   no GOMAXPROCS ratio: the machine was busy in every round of GOMAXPROCS=1 or 2 (see above)"
else
  one=$(tr ' ' '\n' <<<"${procs[1]}" | median)
  two=$(tr ' ' '\n' <<<"${procs[2]}" | median)
  echo "nanogpt-cpu   GOMAXPROCS=1 $one ms, GOMAXPROCS=2 $two ms: two cores $(awk -v a="$one" -v b="$two" 'BEGIN {printf "%.2f", a/b}')x faster"
  echo "nanogpt-cpu   GOMAXPROCS=1: $(tr ' ' '\n' <<<"$onepeak" | median)% of one core's float32 FMA peak (median; per round: ${onepeak% })"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
