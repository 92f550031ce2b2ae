#!/usr/bin/env bash
# Installs the npm dependencies when the lock file, the Node ABI or the kind of install
# changed; quick otherwise. Usage: scripts/npm-deps.sh prod|full
#   prod  what serving needs (npm start)
#   full  with the devDependencies (tests, linters)
# A stamp in node_modules records what is installed; a full install also serves.
# Expects scripts/node-env.sh to have been sourced (SANDBOXD_NODE, SANDBOXD_NODE_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:?usage: npm-deps.sh prod|full}"
want="$kind $("$SANDBOXD_NODE" -p process.versions.modules) $(sha256sum package-lock.json | cut -c1-16)"
stamp=node_modules/.sandboxd-install
have="$(cat "$stamp" 2>/dev/null || true)"
[ "$have" = "$want" ] || [ "$have" = "full ${want#* }" ] && exit 0
echo "sandboxd set-up: installing npm dependencies ($([ "$kind" = full ] && echo 'with' || echo 'without') devDependencies, for Node $("$SANDBOXD_NODE" --version))"
# Any addon built from source is built against this Node's headers (not a nodedir of the
# machine's npm config, which may name an older Node's).
if [ "$kind" = full ]; then
  npm_config_nodedir="$SANDBOXD_NODE_DIR" npm ci --no-audit --no-fund --loglevel=error
else
  npm_config_nodedir="$SANDBOXD_NODE_DIR" npm ci --omit=dev --no-audit --no-fund --loglevel=error
fi
echo "$want" > "$stamp"
