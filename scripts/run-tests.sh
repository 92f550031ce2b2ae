#!/usr/bin/env bash
# Runs test files (the arguments, relative to the repository or absolute; options for node's
# test runner may come first) as npm test and npm run test:soak do: one file at a time, each in
# a process of its own, the spec report on stdout. Exits non-zero when a test fails, and also
# when a file's report reached the runner incomplete (scripts/test-report-check.ts).
# --test-force-exit: a file's process that stays alive once its tests are over (a failed after
# hook that left a driver open did) is ended and reported instead of hanging the run; the
# processes it leaves show in npm test's host snapshot. node ends it with process.exit(), which
# drops what the process still had queued for a pipe: scripts/test-stdio-blocking.ts makes
# every process of the run write its stdout and stderr synchronously, so none is lost.
# Needs scripts/node-env.sh sourced (node and tsx).
set -uo pipefail
cd "$(dirname "$0")/.."
check=$(mktemp)
trap 'rm -f "$check"' EXIT
node --import tsx --import ./scripts/test-stdio-blocking.ts --test --test-concurrency=1 --test-force-exit \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=./scripts/test-report-check.ts --test-reporter-destination="$check" "$@"
rc=$?
if ! tail -n 1 "$check" | grep -q '^report check: .*, 0 incomplete$'; then
  echo "run-tests: test files whose report did not reach node's test runner whole:"
  cat "$check"
  [ -s "$check" ] || echo "(the report check wrote nothing: it did not run to the end)"
  rc=1
fi
exit $rc
