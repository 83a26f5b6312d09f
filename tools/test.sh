#!/usr/bin/env bash
# tools/test.sh [BUILD_DIR] — configure, build and run every CTest test.
# CLEF_SANITIZE=1 builds with ASan+UBSan.  Run from anywhere; tests need
# ../shared beside the project root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/oracle ]; then
  echo "tools/test.sh: the tests read the oracle files at ../shared/oracle, and" \
       "$(cd .. && pwd)/shared/oracle does not exist: clone clef beside the shared inputs" >&2
  exit 2
fi
dir="${1:-build}"
san=OFF; type=Release
if [ "${CLEF_SANITIZE:-0}" = 1 ]; then san=ON; type=RelWithDebInfo; fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=$type -DCLEF_SANITIZE=$san -DCLEF_WERROR=ON >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd "$dir" && ctest --output-on-failure -j"$(nproc)")
