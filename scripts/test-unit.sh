#!/usr/bin/env bash
# npm run test:unit: every test that needs neither root nor the runtime (scripts/unit-files.sh):
# the packages' own tests (server on the fake driver, store, proxy, HTTP, SDK, protocol).
# Runs without root: it installs only what is missing of the npm dependencies. (npm test runs
# these files as an unprivileged user, two at a time: scripts/test.sh.)
# Extra arguments go to node's test runner (e.g. --test-name-pattern=proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
bash scripts/npm-deps.sh full
mapfile -t files < <(bash scripts/unit-files.sh)
exec node --import tsx --test "$@" "${files[@]}"
