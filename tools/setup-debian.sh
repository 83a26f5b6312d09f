#!/usr/bin/env bash
# tools/setup-debian.sh — install the Debian packages clef builds and tests with.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS="build-essential cmake pkg-config libpcre2-dev libutf8proc-dev libjansson-dev libmicrohttpd-dev libcmocka-dev clang libclang-rt-14-dev valgrind wrk"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi
# npm packages of the SDK tests (tools/test-sdk.sh), when Node is installed.
if [ -f "$(dirname "$0")/../package-lock.json" ] && command -v npm >/dev/null; then
  (cd "$(dirname "$0")/.." && npm ci --no-audit --no-fund)
fi
