#!/usr/bin/env bash
# npm run teardown: removes the sandboxd instance that `npm start` with the same config and
# environment runs from this host (sandboxes, mounts, loop devices, network, cgroups, run
# dir); keeps the database and the volumes' files. Refused while that instance runs.
# Installs nothing: it runs with what `npm start` set up.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
exec node --import tsx packages/server/src/teardown.ts
