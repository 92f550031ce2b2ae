#!/usr/bin/env bash
# Runs this checkout's `sandboxd` command (packages/server/bin/sandboxd.js) under the project's
# Node.js (scripts/node-env.sh: the machine's when it is 24 or newer, else the one set-up
# fetched), from any directory: `sudo bash scripts/sandboxd.sh install`, `... version`.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/node-env.sh
source "$here/scripts/node-env.sh"
exec node "$here/packages/server/bin/sandboxd.js" "$@"
