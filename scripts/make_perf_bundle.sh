#!/usr/bin/env bash
# Packs this machine's perf into .carry/perf (git-ignored) for the GPU machine,
# which has none: the binary and the shared libraries ldd lists for it, less
# those every machine here has (libc, libm, libstdc++, libgcc, zlib, the
# loader). Run it there as LD_LIBRARY_PATH=.carry/perf/lib .carry/perf/perf
# (bench/gpu/cpu_profile.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
PERF="$(readlink -f "$(command -v perf)")"
D=.carry/perf
rm -rf "$D" && mkdir -p "$D/lib"
cp -L "$PERF" "$D/perf"
ldd "$PERF" | awk '/=> \//{print $3}' |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libz|libpthread|libdl)\.so' |
  xargs -r -I{} cp -L {} "$D/lib/"
LD_LIBRARY_PATH="$D/lib" "$D/perf" --version
du -sh "$D"
