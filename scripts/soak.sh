#!/usr/bin/env bash
# npm run test:soak: the long suites, outside CI. The full load (200 sandboxes, 500 exec/s for
# 2 minutes, 50 terminals streaming; test/soak/load.ts; its memory criterion is the server's
# live set and RSS after forced full collections), the chaos soak (10 minutes of mixed workload
# under kill -9s of the server, a runner, an api replica and PostgreSQL, hostile sandboxes and
# a full disk; test/soak/chaos.ts), then the SANDBOXD_SOAK=1 variants of test/security/*.test.ts,
# and fails if the host is left with anything it did not have before.
# Env: SOAK_LOAD_ARGS overrides the load's arguments (see `node --import tsx test/soak/load.ts --help`),
# SOAK_CHAOS_ARGS the chaos soak's (`node --import tsx test/soak/chaos.ts --help`).
set -uo pipefail
cd "$(dirname "$0")/.."
export SANDBOXD_TEST_IMAGE_DIR="$PWD/.sandboxd-test/images"
export SANDBOXD_E2E_RUNTIME=local
export SANDBOXD_SOAK=1
bash scripts/setup.sh --test --image-dir "$SANDBOXD_TEST_IMAGE_DIR" || exit 1
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh

before=$(mktemp); after=$(mktemp)
bash scripts/host-snapshot.sh > "$before"
loops=$(mktemp)
bash scripts/loop-devices.sh list > "$loops"
rc=0
# shellcheck disable=SC2086
node --import tsx test/soak/load.ts ${SOAK_LOAD_ARGS:---sandboxes 200 --rate 500 --duration 120 --terminals 50} || rc=1
# shellcheck disable=SC2086
node --import tsx test/soak/chaos.ts ${SOAK_CHAOS_ARGS:---single 360 --fleet 240} || rc=1
mapfile -t files < <(find test/security -name '*.test.ts' 2>/dev/null | sort)
if [ "${#files[@]}" -gt 0 ]; then
  bash scripts/run-tests.sh "${files[@]}" || rc=1
fi
left=$(bash scripts/loop-devices.sh remove-new "$loops")
if [ -n "$left" ]; then
  echo "npm run test:soak: loop devices left (bound or held open):" $left
  rc=1
fi
rm -f "$loops"
bash scripts/host-snapshot.sh > "$after"
if ! diff -u "$before" "$after" > "$after.diff"; then
  echo "npm run test:soak: the host changed (- before, + after):"
  cat "$after.diff"
  rc=1
fi
rm -f "$before" "$after" "$after.diff"
exit $rc
