#!/usr/bin/env bash
# npm test: set up what is missing (test tools included), run the checks (types, lint,
# format, OpenAPI), run every test file (the real runtime included) and fail if the host is
# left with anything it did not have before. Temporary files go even when interrupted.
set -uo pipefail
cd "$(dirname "$0")/.."
export SANDBOXD_TEST_IMAGE_DIR="$PWD/.sandboxd-test/images"
# Black-box tests drive the real server on the real runtime unless told otherwise.
export SANDBOXD_E2E_RUNTIME="${SANDBOXD_E2E_RUNTIME:-local}"

tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash scripts/setup.sh --test --image-dir "$SANDBOXD_TEST_IMAGE_DIR" || exit 1
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
bash scripts/check.sh || { echo "npm test: npm run check failed"; exit 1; }

bash scripts/host-snapshot.sh > "$tmp/before"
bash scripts/loop-devices.sh list > "$tmp/loops"
# Egress turns IPv4 forwarding on host-wide (as any router does) and leaves it on: the suite
# puts back what the host had.
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
mapfile -t files < <(find packages test -name '*.test.ts' -not -path '*/node_modules/*' | sort)
# One file at a time; a file's process that stays alive after its tests is ended (the processes
# it leaves show in the snapshot below); a report that arrives incomplete fails the run.
bash scripts/run-tests.sh "${files[@]}"
rc=$?
echo "$forward_before" > /proc/sys/net/ipv4/ip_forward
left=$(bash scripts/loop-devices.sh remove-new "$tmp/loops")
if [ -n "$left" ]; then
  echo "npm test: the suite left loop devices it made (bound or held open):" $left
  rc=1
fi
bash scripts/host-snapshot.sh > "$tmp/after"
if ! diff -u "$tmp/before" "$tmp/after" > "$tmp/diff"; then
  echo "npm test: the suite left the host changed (- before, + after):"
  cat "$tmp/diff"
  rc=1
fi
exit $rc
