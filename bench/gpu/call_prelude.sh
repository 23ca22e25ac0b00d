# What a GPU call script (bench/results/raw/*/run*.sh) sets up before it measures, sourced from the repository
# root: OUT0 (where logs go: $OUT, else ./gpu-out), B (the build bundle, .carry/gpu, made by
# scripts/make_gpu_bundle.sh) with its libraries on LD_LIBRARY_PATH, T0 (the call's start), N / P / L (fragfree's
# native, pluggable and LD_PRELOAD modes with its defaults, for step_suite.sh's --modes), left (the seconds of
# BUDGET, default 540, still free, less 25 for the summary), and the machine's description in $OUT0/machine.txt.
# On the device (OUT set), the call's files are packed into $OUT/call.tgz when the script exits (gpu_call.sh pack).
set -u
[ -n "${OUT:-}" ] && trap 'bench/gpu/gpu_call.sh pack' EXIT
OUT0="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT0"
B=.carry/gpu
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B/deps:${LD_LIBRARY_PATH:-}"
T0=$SECONDS
N=ff-native@time_calls:False; P=ff-pluggable@time_calls:False; L=ff-preload@time_calls:False
left() { echo $(( ${BUDGET:-540} - (SECONDS - T0) - 25 )); }
bench/gpu/gpu_call.sh machine
