#!/usr/bin/env bash
# Prints the unit test files, one per line, sorted: every test file of packages/ that needs
# neither root nor the runtime. Not the runtime's (packages/server/src/runtime/local, and
# runtime/remote's driver.test.ts whose runner wraps a real local driver), which need root
# and crun. The fleet's tests (runtime/remote/fleet, fake runners) and the discovery's are in.
# `--nobody`: only those npm test runs as an unprivileged user, i.e. without the few that
# also hold tests for root (they ask process.getuid(): chown, tar --same-owner, builds on the
# real runtime), which npm test runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
list() {
  find packages -name node_modules -prune -o -path packages/server/src/runtime/local -prune \
    -o -path packages/server/src/runtime/remote/driver.test.ts -prune -o -name '*.test.ts' -print | sort
}
if [ "${1:-}" = --nobody ]; then
  list | while read -r f; do grep -q 'getuid' "$f" || echo "$f"; done
else
  list
fi
