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
mapfile -t all < <(find packages test -name '*.test.ts' -not -path '*/node_modules/*' | sort)
# The unit files (scripts/unit-files.sh --nobody) run as an unprivileged user (uid 65534, a
# home and temp dir of its own), which proves what npm run test:unit promises, two at a time
# (they neither share nor wait on the host). Every other file runs as root, one at a time; a
# file's process that stays alive after its tests is ended (the processes it leaves show in
# the snapshot below); a report that arrives incomplete fails the run.
mapfile -t unit < <(bash scripts/unit-files.sh --nobody)
mapfile -t rest < <(printf '%s\n' "${all[@]}" | grep -vxFf <(printf '%s\n' "${unit[@]}"))
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
home="$tmp/nobody"
mkdir -p "$home"
# Sticky, as a shared temp dir is (/tmp): backup and restore refuse dirs others can rename in.
chmod 1777 "$tmp" "$home"
if ! "${as_nobody[@]}" test -r "$PWD/package.json"; then
  echo "npm test: uid 65534 cannot read $PWD (a folder above it is not o+x): the unit files run as root"
  as_nobody=()
fi
# NODE_TEST_CONTEXT is not set here; SANDBOXD_TEST_CONCURRENCY reaches run-tests.sh.
"${as_nobody[@]}" env HOME="$home" TMPDIR="$home" SANDBOXD_TEST_CONCURRENCY=2 \
  bash scripts/run-tests.sh "${unit[@]}" | tee "$tmp/unit.out"
rc_unit=${PIPESTATUS[0]}
bash scripts/run-tests.sh "${rest[@]}" | tee "$tmp/rest.out"
rc=${PIPESTATUS[0]}
[ "$rc_unit" -ne 0 ] && rc=$rc_unit
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
# Both runs in one line (each printed node's summary of its own files above).
count() { sed -n "s/^ℹ $1 \([0-9]*\)$/\1/p" "$tmp/unit.out" "$tmp/rest.out" | awk '{s+=$1} END {print s+0}'; }
echo "npm test: the unit files (as uid 65534) and the rest (as root) together:"
echo "$(count pass) passed, $(count fail) failed"
exit $rc
