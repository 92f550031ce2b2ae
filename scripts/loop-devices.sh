#!/usr/bin/env bash
# The kernel adds a loop device whenever none is free (each root layer and volume of a
# sandbox takes one) and keeps it after its detach, ~60 KiB each: a run of the suite leaves
# ~200, a 2,000-sandbox benchmark ~2,000. The test, soak and benchmark scripts list the
# devices before their run and remove, after it, the ones it made that are unbound again.
# Usage: scripts/loop-devices.sh list > FILE
#        scripts/loop-devices.sh remove-new FILE   (prints the new ones still there, if any)
set -euo pipefail
cd "$(dirname "$0")/.."
list() { ls /sys/block 2>/dev/null | grep -E '^loop[0-9]+$' | sort || true; }
case "${1:-}" in
  list) list ;;
  remove-new)
    before="${2:?remove-new needs the file that list wrote before the run}"
    mapfile -t made < <(comm -13 "$before" <(list) | sed 's/^loop//')
    # Bound or open devices are refused by the kernel and stay (a leak the caller reports).
    if [ "${#made[@]}" -gt 0 ]; then build/bin/idmap-mount loop-remove "${made[@]}" > /dev/null; fi
    comm -13 "$before" <(list)
    ;;
  *) echo "usage: $0 list | remove-new FILE" >&2; exit 2 ;;
esac
