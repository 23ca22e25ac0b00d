#!/usr/bin/env bash
# Session 32, call 2 (main's build in .carry/gpu): (1) the driver calls behind FSDP-style's events
# (BM_EventCalls) and its step's allocator calls (BM_HandoffStep), primary context current; (2) the steady-state
# hot path, cuda and host backends alternated, pinned CPU 5; (3) the mapping path; (4) step time, lockstep, every
# workload of step_time.py, every way in, as many rounds as fit: FSDP, MoE and GPT-2 first (FIRST_S seconds), then
# GPT-2 + ckpt and Llama + ckpt (A_WL, B_WL: other workloads).   BUDGET=S [HOT_S=S] [FIRST_S=S] run32b.sh
set -u
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
{ nvidia-smi -L; lscpu; cat /proc/loadavg; } > "$OUT/machine.txt" 2>&1
grep -E "GPU 0|Model name|BogoMIPS|L3|load" "$OUT/machine.txt"
FRAGFREE_BENCH_BACKEND=cuda taskset -c 5 timeout 60 $B/bin/steady_state_bench --benchmark_filter='EventCalls|Handoff' \
  --benchmark_min_time=0.5 --benchmark_repetitions=3 > "$OUT/events.log" 2>&1; echo "events rc=$?"
timeout $(( ${HOT_S:-45} + 90 )) python3 bench/micro/hot_ab.py --rounds 30 --budget-s "${HOT_S:-45}" --cpu 5 \
  --backends cuda,host main=$B/bin/steady_state_bench > "$OUT/hot_backends.log" 2>&1
echo "hot rc=$? at $((SECONDS - T0)) s"
FRAGFREE_BENCH_BACKEND=cuda taskset -c 5 timeout 60 $B/bin/steady_state_bench --benchmark_filter='MapPages|CreateRelease' \
  --benchmark_min_time=0.1 > "$OUT/map_path.log" 2>&1; echo "map_path rc=$?"
steps() {  # NAME SECONDS WORKLOADS
  [ "$2" -ge 60 ] || return 0
  mkdir -p "$OUT/$1"
  OUT="$OUT/$1" timeout $(( $2 + 20 )) bench/gpu/step_suite.sh $B/lib/libfragfree.so steps -- --lockstep --rounds 14 \
    --warmup 8 --steps 8 --pin-cpus 2-7 --timeout 120 --workloads "$3" \
    --modes 'torch,ff-native@time_calls:False,ff-preload@time_calls:False,ff-pluggable@time_calls:False' \
    --budget-s "$2" > "$OUT/$1/steps.log" 2>&1
  echo "steps $1 rc=$? at $((SECONDS - T0)) s"
}
left=$(( ${BUDGET:-570} - (SECONDS - T0) - 30 ))
first=$(( left < ${FIRST_S:-270} ? left : ${FIRST_S:-270} ))
steps a "$first" "${A_WL:-fsdp,moe,gpt2}"
steps b "$(( ${BUDGET:-570} - (SECONDS - T0) - 25 ))" "${B_WL:-gpt2+ckpt,llama+ckpt}"
echo "=== events, ns a call"; grep -E "^BM_(EventCalls|HandoffStep)_median" "$OUT/events.log" | sed -E 's/ +/ /g' | cut -c1-260
echo "=== hot path by backend"; grep -v "^round" "$OUT/hot_backends.log" | tail -12
echo "=== map path"; grep -E "^BM_" "$OUT/map_path.log" | cut -c1-150
for d in a b; do
  [ -f "$OUT/$d/steps.log" ] || continue
  echo "=== steps $d: $(grep -c FAILED "$OUT/$d/steps.log") failed"; grep -h "a round takes" "$OUT/$d/steps.log"
  sed -n '/^| workload | mode | step ms/,/^$/p' "$OUT/$d/steps.log" | cut -d'|' -f2-6
  sed -n '/^| workload | mode | median \[95% CI\]/,/^$/p' "$OUT/$d/steps.log" | cut -d'|' -f2-3,7-8
done
