#!/usr/bin/env bash
# npm test: set up what is missing, type-check, run every test file (the real runtime
# included) and fail if the host is left with anything it did not have before.
set -uo pipefail
cd "$(dirname "$0")/.."
export SANDBOXD_TEST_IMAGE_DIR="$PWD/.sandboxd-test/images"
# Black-box tests drive the real server on the real runtime unless told otherwise.
export SANDBOXD_E2E_RUNTIME="${SANDBOXD_E2E_RUNTIME:-local}"
bash scripts/setup.sh --image-dir "$SANDBOXD_TEST_IMAGE_DIR" || exit 1
bash scripts/check.sh || { echo "npm test: type check failed"; exit 1; }

before=$(mktemp); after=$(mktemp)
bash scripts/host-snapshot.sh > "$before"
mapfile -t files < <(find packages test -name '*.test.ts' -not -path '*/node_modules/*' | sort)
node --import tsx --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
rc=$?
bash scripts/host-snapshot.sh > "$after"
if ! diff -u "$before" "$after" > "$after.diff"; then
  echo "npm test: the suite left the host changed (- before, + after):"
  cat "$after.diff"
  rc=1
fi
rm -f "$before" "$after" "$after.diff"
exit $rc
