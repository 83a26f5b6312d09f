#!/usr/bin/env bash
# tools/check-arm.sh — compile every library and CLI source for AArch64
# (every warning, -Werror; nothing linked), so the NEON path and the
# portable code stay buildable there.  Needs Debian's gcc-aarch64-linux-gnu;
# the third-party headers are the host's (-idirafter /usr/include), which is
# enough for a compile check.  The full cross build with tests under qemu is
# in README "ARM".
set -euo pipefail
cd "$(dirname "$0")/.."
cc=aarch64-linux-gnu-gcc
command -v "$cc" >/dev/null || { echo "tools/check-arm.sh: $cc not found (apt-get install gcc-aarch64-linux-gnu)" >&2; exit 2; }
n=0
for f in src/*/*.c; do
  "$cc" -std=c17 -O2 -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror -D_GNU_SOURCE \
        -Iinclude -Isrc -idirafter /usr/include -c -o /dev/null "$f"
  n=$((n + 1))
done
echo "aarch64: $n sources compile clean"
