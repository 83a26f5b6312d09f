#!/usr/bin/env bash
# tools/loadtest.sh — measure `clef serve` under load with wrk (Debian
# package `wrk`): requests/s, p50/p95/p99 latency, non-2xx count and the
# server's peak RSS (VmHWM) for each scenario, as a Markdown table.
#
#   tools/loadtest.sh [-b CLEF_BIN] [-m MODEL] [-d SECONDS] [-o RESULTS.md]
#
# Every scenario starts a fresh server on 127.0.0.1 (a free port), runs wrk
# for -d seconds (default 10) and stops the server with SIGTERM (exit status
# checked).  Server flags: SERVE_ARGS (default "-np <cores/2> -t 1"); wrk
# threads: WRK_THREADS (default cores/2).  Not part of CTest.
set -euo pipefail
cd "$(dirname "$0")/.."

clef=build/clef
model=../shared/oracle/clef-tiny/clef-tiny-a-F32.gguf
cases=../shared/oracle/clef-tiny/cases.jsonl
duration=10
out=""
while getopts "b:m:d:o:h" opt; do
  case $opt in
    b) clef=$OPTARG ;;
    m) model=$OPTARG ;;
    d) duration=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "loadtest: wrk not found (apt-get install wrk)" >&2; exit 2; }
[ -x "$clef" ] || { echo "loadtest: no clef binary at $clef (-b)" >&2; exit 2; }
cores=$(nproc)
half=$(( cores > 1 ? cores / 2 : 1 ))
serve_args=${SERVE_ARGS:--np $half -t 1}
wrk_threads=${WRK_THREADS:-$half}

work=$(mktemp -d /tmp/clef-loadtest.XXXXXX)
server_pid=""
slow_pids=()
cleanup() {
  for p in "${slow_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# ---- request bodies ---------------------------------------------------------
case_body() {   # the verbatim request of one cases.jsonl line
  grep "^{\"id\":\"$1\"," "$cases" | sed -e 's/^{"id":"[^"]*","max_length":[0-9]*,"request"://' -e 's/}[[:space:]]*$//'
}
case_body noul_basic > "$work/noul.json"
case_body mixed_three_spec_example > "$work/mixed.json"
case_body eight_questions > "$work/eight.json"
printf '{"model":"m","state":null,"questions":{}}' > "$work/invalid.json"
{ printf '{"model":"clef-tiny-a","state":"'
  for _ in $(seq 3000); do printf 'payouts failing again '; done
  printf '","questions":{"u":{"type":"noul","instructions":"Urgent?"}}}'; } > "$work/long.json"
head -c 70000 /dev/zero | tr '\0' 'a' > "$work/big.bin"

cat > "$work/req.lua" <<'EOF'
-- POST the file in $BODY (or GET when unset); print one parsable line.
local path = os.getenv("BODY")
if path and path ~= "" then
  local f = assert(io.open(path, "rb"))
  wrk.method = "POST"
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
end
local close = os.getenv("CLOSE")
if close == "1" then wrk.headers["Connection"] = "close" end
done = function(summary, latency, requests)
  local s = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format("RESULT %d %.1f %.2f %.2f %.2f %.2f %d %d\n", summary.requests,
    summary.requests / s, latency:percentile(50) / 1000, latency:percentile(95) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, e.status,
    e.connect + e.read + e.write + e.timeout))
end
EOF

# ---- one server ---------------------------------------------------------------
start_server() {   # extra flags...
  : > "$work/serve.log"
  # shellcheck disable=SC2086
  "$clef" serve -m "$model" --port 0 $serve_args "$@" 2>"$work/serve.log" &
  server_pid=$!
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log")
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "loadtest: the server did not start:" >&2; cat "$work/serve.log" >&2; exit 1
}
stop_server() {
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  [ "$rc" = 0 ] || { echo "loadtest: clef serve exited $rc" >&2; cat "$work/serve.log" >&2; exit 1; }
}
peak_rss_mib() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$server_pid/status"; }

# Slowloris: n clients that send a header byte a second and, when the
# server closes them (--header-timeout), connect again; until killed.
start_slowloris() {   # n
  local hdr="POST /v1/systemone HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
  for _ in $(seq "$1"); do
    ( while exec 3<>"/dev/tcp/127.0.0.1/$port"; do
        for ((i = 0; i < ${#hdr}; i++)); do printf '%s' "${hdr:i:1}" >&3 2>/dev/null || break; sleep 1; done
        exec 3>&-
      done 2>/dev/null
    ) & slow_pids+=($!)
  done
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
scenario() {   # name connections body(or "") close(0/1) [server flags...]
  local name=$1 conns=$2 body=$3 close=$4
  shift 4
  local slow=0
  if [ "${1:-}" = "--slowloris" ]; then slow=$2; shift 2; fi
  start_server "$@"
  [ "$slow" -gt 0 ] && start_slowloris "$slow" && sleep 1
  local t=$wrk_threads
  [ "$conns" -lt "$t" ] && t=$conns
  local line
  line=$(BODY=$body CLOSE=$close wrk -t"$t" -c"$conns" -d"${duration}s" --timeout 30s \
           -s "$work/req.lua" "http://127.0.0.1:$port${path:-/v1/systemone}" | grep '^RESULT')
  local rss
  rss=$(peak_rss_mib)
  for p in "${slow_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  slow_pids=()
  stop_server
  # shellcheck disable=SC2086
  set -- $line
  rows+=("| $name | $conns | $2 | $3 | $4 | $5 | $6 | $7 | $8 | $9 | $rss |")
  echo "loadtest: $name done" >&2
}

path=/healthz scenario "GET /healthz" 16 "" 0
path=/v1/models scenario "GET /v1/models" 16 "" 0
scenario "noul_basic, 1 client" 1 "$work/noul.json" 0
scenario "noul_basic" 16 "$work/noul.json" 0
scenario "noul_basic, connection per request" 16 "$work/noul.json" 1
scenario "mixed_three_spec_example (3 questions)" 16 "$work/mixed.json" 0
scenario "eight_questions" 16 "$work/eight.json" 0
scenario "state cut to -c 2048 (66 KB body)" 4 "$work/long.json" 0 -c 2048
scenario "bad shape (every answer 422)" 16 "$work/invalid.json" 0
scenario "70 KB body over --max-body 64K (every answer 413)" 16 "$work/big.bin" 0 --max-body 64K
scenario "noul_basic + 64 slowloris clients" 16 "$work/noul.json" 0 --slowloris 64 --header-timeout 5

{
  echo "clef serve on $(basename "$model"), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "server flags: $serve_args; wrk $wrk_threads threads, ${duration}s per scenario;"
  echo "load average before the run: $load0"
  echo
  echo "| scenario | conns | requests | req/s | p50 ms | p95 ms | p99 ms | max ms | non-2xx | socket errors | peak RSS MiB |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
