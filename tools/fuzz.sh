#!/usr/bin/env bash
# tools/fuzz.sh [SECONDS] [HARNESS...] — build the libFuzzer harnesses of
# fuzz/ (clang, ASan+UBSan, in build-fuzz) and run each for SECONDS
# (default 20) from its seed corpus fuzz/corpus/<harness>.  HARNESS names
# (fuzz_gguf ...) pick some; default all.  Exits 1 when any harness crashed,
# leaked, timed out or failed an invariant; the input that did it is kept in
# build-fuzz/fuzz-work/<harness>/crashes/ (reproduce: build-fuzz/<harness> FILE).
#
# New inputs go to build-fuzz/fuzz-work/<harness>/corpus (kept between runs,
# never into the seed directory).  Env: CLEF_FUZZ_BUILD (build dir),
# CLEF_FUZZ_JOBS (build parallelism), CLEF_FUZZ_MODEL (the tiny model).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
[ $# -gt 0 ] && shift
dir="${CLEF_FUZZ_BUILD:-build-fuzz}"
jobs="${CLEF_FUZZ_JOBS:-$(nproc)}"

if ! command -v clang >/dev/null; then
  echo "tools/fuzz.sh: clang is needed (tools/setup-debian.sh installs it)" >&2
  exit 2
fi
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCLEF_FUZZ=ON >/dev/null
cmake --build "$dir" -j"$jobs" --target clef_fuzz >/dev/null

if [ $# -gt 0 ]; then
  harnesses=("$@")
else
  harnesses=()
  for f in fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c)"); done
fi

# Per-harness options: input size limit and dictionary.
opts_for() {
  case "$1" in
    fuzz_gguf) echo "-max_len=65536 -dict=fuzz/dict/gguf.dict" ;;
    fuzz_http) echo "-max_len=8192 -dict=fuzz/dict/http.dict" ;;
    fuzz_tokenizer) echo "-max_len=4096 -dict=fuzz/dict/json.dict" ;;
    *) echo "-max_len=8192 -dict=fuzz/dict/json.dict" ;;
  esac
}

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
failed=()
printf '%-16s %10s %6s %7s %7s %s\n' harness execs secs cov ft result
for h in "${harnesses[@]}"; do
  bin="$dir/$h"
  [ -x "$bin" ] || { echo "tools/fuzz.sh: no harness $bin" >&2; exit 2; }
  work="$dir/fuzz-work/$h"
  mkdir -p "$work/corpus" "$work/crashes"
  seeds=()
  [ -d "fuzz/corpus/$h" ] && seeds=("fuzz/corpus/$h")
  rc=0
  # shellcheck disable=SC2046  # the options are words
  "$bin" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
         $(opts_for "$h") -artifact_prefix="$work/crashes/" \
         "$work/corpus" "${seeds[@]}" >"$work/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$work/log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if [ "$rc" != 0 ]; then
    result="FAILED (exit $rc; see $work/log)"
    failed+=("$h")
  fi
  printf '%-16s %10s %6s %7s %7s %s\n' "$h" "${execs:-?}" "$secs" "${cov:-?}" "${ft:-?}" "$result"
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR|invariant|SUMMARY|runtime error|Test unit written' "$work/log" | head -8 >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "tools/fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
