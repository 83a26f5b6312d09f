#!/usr/bin/env bash
# tools/test-sdk.sh [CLEF_BIN] — the Node SDK compatibility tests (tests/sdk):
# start `clef serve` on the tiny oracle model, run `node --test tests/sdk/`
# with the official @typesafe-ai/sdk and ai + @ai-sdk/typesafe-ai clients,
# stop the server (SIGTERM; it must exit 0).
# The clef binary is $1, else $CLEF_BIN, else build/clef.  Exits 77 (CTest's
# "skipped") when Node >= 20 or the npm packages are not available.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-${CLEF_BIN:-build/clef}}"
model=../shared/oracle/clef-tiny/clef-tiny-a-F32.gguf
key="sdk-test-key-$$"

skip() { echo "test-sdk: SKIPPED: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed (Node >= 20 is needed)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || skip "node $(node --version) is too old (Node >= 20 is needed)"
if [ ! -d node_modules/@typesafe-ai/sdk ] || [ ! -d node_modules/@ai-sdk/typesafe-ai ] || [ ! -d node_modules/ai ]; then
  command -v npm >/dev/null || skip "npm is not installed and node_modules is missing"
  npm ci --no-audit --no-fund >&2 || skip "npm ci failed (offline?); run it once with network access"
fi
[ -x "$bin" ] || { echo "test-sdk: no clef binary at $bin" >&2; exit 1; }
[ -f "$model" ] || { echo "test-sdk: no tiny model at $model" >&2; exit 1; }

log=$(mktemp)
"$bin" serve -m "$model" --port 0 --api-key "$key" --alias clef-tiny,jev-latest --strict-model 2>"$log" &
pid=$!
cleanup() { kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

port=""
for _ in $(seq 600); do   # up to 60 s
  port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "test-sdk: clef serve exited:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "test-sdk: clef serve did not start:" >&2; cat "$log" >&2; exit 1; }

rc=0
CLEF_SDK_BASE_URL="http://127.0.0.1:$port" CLEF_SDK_API_KEY="$key" \
  node --test --test-timeout=60000 tests/sdk/ || rc=$?

kill -TERM "$pid"
src=0
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid" || src=$?
if [ "$src" != 0 ]; then
  echo "test-sdk: clef serve exited $src after SIGTERM:" >&2
  cat "$log" >&2
  [ "$rc" != 0 ] || rc=1
fi
exit "$rc"
