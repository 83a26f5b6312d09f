#!/usr/bin/env bash
# tools/valgrind.sh [BUILD_DIR] — build the Release configuration (the one
# tools/test.sh builds, default dir "build") and run every CTest program
# tests/test_*.c under valgrind memcheck, from the project root as CTest
# does.  A test fails here when valgrind reports a memory error or a
# definite/indirect leak (exit 99 → "VALGRIND"), or when the test itself
# fails under valgrind.  Exits 1 if any test failed.
#
# Logs: BUILD_DIR/valgrind/<test>.log (valgrind) and .out (the test).
# Env: CLEF_VALGRIND_SKIP="test_a test_b" skips tests (say why where you
# set it); CLEF_VALGRIND_TIMEOUT per-test seconds (default 3600);
# CLEF_VALGRIND_ONLY="test_x ..." runs just those.
# Child processes (the CLI tests run the clef binary) are not traced: they
# run natively, so only the test program itself is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
if ! command -v valgrind >/dev/null; then
  echo "tools/valgrind.sh: valgrind is needed (tools/setup-debian.sh installs it)" >&2
  exit 2
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCLEF_SANITIZE=OFF -DCLEF_WERROR=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null

export CLEF_BIN="$PWD/$dir/clef"
skip=" ${CLEF_VALGRIND_SKIP:-} "
only=" ${CLEF_VALGRIND_ONLY:-} "
logs="$dir/valgrind"
mkdir -p "$logs"
supp=()
[ -f tools/valgrind.supp ] && supp=(--suppressions=tools/valgrind.supp)
failed=()
printf '%-28s %8s  %s\n' test seconds result
for src in tests/test_*.c; do
  name="$(basename "$src" .c)"
  if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then continue; fi
  if [[ "$skip" == *" $name "* ]]; then
    printf '%-28s %8s  %s\n' "$name" - skipped
    continue
  fi
  if [ ! -x "$dir/$name" ]; then   # a test added after the build above
    printf '%-28s %8s  %s\n' "$name" - "NOT BUILT (re-run)"
    failed+=("$name")
    continue
  fi
  t0=$(date +%s)
  rc=0
  timeout "${CLEF_VALGRIND_TIMEOUT:-3600}" valgrind --tool=memcheck --leak-check=full \
      --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
      --error-exitcode=99 --num-callers=30 "${supp[@]}" --log-file="$logs/$name.log" \
      "$dir/$name" >"$logs/$name.out" 2>&1 || rc=$?
  secs=$(( $(date +%s) - t0 ))
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$logs/$name.log" 2>/dev/null | tail -1 || true)
  case "$rc" in
    0) result="ok (${errors:-0} errors)" ;;
    99) result="VALGRIND: ${errors:-?} errors, see $logs/$name.log"; failed+=("$name") ;;
    124) result="TIMEOUT"; failed+=("$name") ;;
    *) result="FAILED (exit $rc), see $logs/$name.out"; failed+=("$name") ;;
  esac
  printf '%-28s %8s  %s\n' "$name" "$secs" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "tools/valgrind.sh: failed: ${failed[*]}" >&2
  exit 1
fi
