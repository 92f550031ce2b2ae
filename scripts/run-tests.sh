#!/usr/bin/env bash
# Runs test files (the arguments, relative to the repository or absolute; options for node's
# test runner may come first) as npm test and npm run test:soak do: each in a process of its
# own, one at a time unless told otherwise, the spec report on stdout. Exits non-zero when a test fails, and also
# when a file's report reached the runner incomplete (scripts/test-report-check.ts).
# A file's process still alive a while after its tests (a failed after hook that left a driver
# open was) is ended and fails (scripts/test-watchdog.ts); the processes it leaves show in npm
# test's host snapshot. Not node's --test-force-exit, which loses tests silently (see there).
# SANDBOXD_TEST_CONCURRENCY (default 1): how many files run at a time. Prints the slowest files
# after node's summary.
# Needs scripts/node-env.sh sourced (node and tsx).
set -uo pipefail
cd "$(dirname "$0")/.."
check=$(mktemp)
trap 'rm -f "$check"' EXIT
node --import tsx --import ./scripts/test-watchdog.ts --test --test-concurrency="${SANDBOXD_TEST_CONCURRENCY:-1}" \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=./scripts/test-report-check.ts --test-reporter-destination="$check" "$@"
rc=$?
# Where the time went (the check's `duration` lines): the slowest
# files, seconds of wall time. On stderr: stdout ends with node's summary.
if grep -q '^duration' "$check"; then
  {
    echo "run-tests: the slowest of $(grep -c '^duration' "$check") files (s):"
    grep '^duration' "$check" | cut -f2- | sort -rn | head -n 12 | sed 's/^/  /'
  } >&2
fi
if ! tail -n 1 "$check" | grep -q '^report check: .*, 0 incomplete$'; then
  echo "run-tests: test files whose report did not reach node's test runner whole:"
  grep -v '^duration' "$check"
  [ -s "$check" ] || echo "(the report check wrote nothing: it did not run to the end)"
  rc=1
fi
exit $rc
