#!/usr/bin/env bash
# Session 37's check of the new default (large_page_mb:32, Note [Large pages]) on the GPU: gpu_dropin.py in native and
# LD_PRELOAD mode (PyTorch's behaviour check by check), and sleep_checks.py (a tagged torch.compile'd module paused
# and resumed bit-identical, NCCL across a pause), fragfree's defaults.
. bench/gpu/call_prelude.sh
# (The call ran the same two runs written out, with the same file names.)
OUT="$OUT0" bench/gpu/dropin_modes.sh $B/lib/libfragfree.so native preload
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}" FRAGFREE_LIBRARY="$PWD/$B/lib/libfragfree.so"
timeout 90 python3 bench/gpu/sleep_checks.py > "$OUT0/sleep_checks.json" 2> "$OUT0/sleep_checks.err"
echo "sleep_checks rc=$? at $((SECONDS - T0)) s"
tail -c 600 "$OUT0/sleep_checks.json"
