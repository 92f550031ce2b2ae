#!/usr/bin/env bash
# npm run test:unit: every test that needs neither root nor the runtime, in well under a
# minute: the packages' own tests (server on the fake driver, store, proxy, HTTP, SDK,
# protocol) except the runtime's (packages/server/src/runtime/local, and runtime/remote's
# driver.test.ts whose runner wraps a real local driver), which need root and crun. The
# fleet's tests (runtime/remote/fleet, fake runners) and the discovery's are in. Runs without root: it installs only what is missing of the npm dependencies.
# Extra arguments go to node's test runner (e.g. --test-name-pattern=proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
bash scripts/npm-deps.sh full
mapfile -t files < <(find packages -name node_modules -prune -o -path packages/server/src/runtime/local -prune \
  -o -path packages/server/src/runtime/remote/driver.test.ts -prune -o -name '*.test.ts' -print | sort)
exec node --import tsx --test "$@" "${files[@]}"
