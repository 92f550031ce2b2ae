#!/usr/bin/env bash
# Installs gVisor's runsc (the gvisor isolation tier) from Debian: bookworm's own build
# (2022-12-19) cannot serve sandboxd's images (GNU coreutils' statx fails: `ls` says "Invalid
# argument"; OCI seccomp stops threads; it refuses every network namespace on Linux 6;
# it cannot save open connections), so a build of 2024 or later is installed from Debian
# trixie's archive, fetched and verified by apt with the archive keys already on the host.
# Nothing is added to the host's apt sources. Quick when a recent enough runsc is there.
set -euo pipefail

MIN_BUILD=20240101
build() { runsc --version 2>/dev/null | sed -n 's/^runsc version 0\.0~\([0-9]\{8\}\).*/\1/p' | head -n 1; }
have=$(build || true)
if [ -n "$have" ] && [ "$have" -ge "$MIN_BUILD" ]; then exit 0; fi

command -v apt-get >/dev/null || { echo "sandboxd set-up: runsc ${have:-missing} is older than $MIN_BUILD and there is no apt-get to fetch a newer one: the gvisor tier will not be offered" >&2; exit 0; }
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "sandboxd set-up: no $keyring: cannot verify Debian trixie's runsc; the gvisor tier will not be offered" >&2; exit 0; }
echo "sandboxd set-up: installing gVisor's runsc from Debian trixie (found: ${have:-none})"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
cat > "$work/parts/trixie.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: $keyring
SOURCES
opts=(-o "Dir::Etc::sourcelist=-" -o "Dir::Etc::sourceparts=$work/parts" -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
# A failure here (no network to Debian's archive, say) leaves the gvisor tier unoffered, and
# the rest of the set-up goes on.
if ! {
  apt-get "${opts[@]}" update -qq &&
    (cd "$work" && apt-get "${opts[@]}" download runsc >/dev/null) &&
    # runsc is one static binary: no dependency to resolve.
    DEBIAN_FRONTEND=noninteractive dpkg -i "$work"/runsc_*.deb >/dev/null
}; then
  echo "sandboxd set-up: could not install runsc from Debian trixie: the gvisor tier will not be offered" >&2
  exit 0
fi
echo "sandboxd set-up: $(runsc --version | head -n 1)"
