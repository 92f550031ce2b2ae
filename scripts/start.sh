#!/usr/bin/env bash
# npm start: set up what is missing, then serve the API and console (port 8080 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node --import tsx packages/server/src/main.ts
