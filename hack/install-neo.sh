#!/usr/bin/env bash
# Installs neo's memory-core (neo.mjs, the client agents run) and the few packages its
# memory-core services import, from the npm registry, for the real-client test tier
# (tests/integration/test_neo_client.py). Nothing of neo is kept in this repository:
# tests/neo/package.json pins the versions and tests/neo/package-lock.json the sha512 of
# every package, which `npm ci` verifies. better-sqlite3 compiles from source against the
# Node headers of the system's nodejs package (no prebuilt binary is downloaded).
#
# Cached under ~/.cache/session-summary-operator/neo/<sha256 of the lockfile>, so a second
# run is instant and a changed lockfile installs anew. Prints the neo.mjs package directory
# (what tests/neo/driver.mjs reads as NEO_CLIENT_DIR) on its last line.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
spec="$top/tests/neo"
log() { printf '[install-neo] %s\n' "$*" >&2; }

command -v node >/dev/null || { log "Node.js (>= 20) is required for the real-client tier"; exit 1; }
command -v npm >/dev/null || { log "npm is required for the real-client tier"; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || { log "Node.js >= 20 is required (found $(node --version))"; exit 1; }

key=$(cat "$spec/package.json" "$spec/package-lock.json" | sha256sum | cut -c1-16)
cache_root=${SSO_NEO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-summary-operator/neo}
dest="$cache_root/$key"
pkg="$dest/node_modules/neo.mjs"
config="$pkg/ai/mcp/server/memory-core/config.mjs"
sqlite_addon="$dest/node_modules/better-sqlite3/build/Release/better_sqlite3.node"

if [[ -f "$dest/.complete" && -f "$config" && -f "$sqlite_addon" ]]; then
  echo "$pkg"
  exit 0
fi

headers=${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}
[[ -f "$headers/include/node/node.h" ]] || {
  log "Node's C headers are missing under $headers/include/node (better-sqlite3 compiles against them;"
  log "Debian's nodejs package has them); set npm_config_nodedir to the directory that holds include/node"
  exit 1
}

log "installing neo.mjs and its memory-core imports into $dest (about 2 minutes the first time)"
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
cp "$spec/package.json" "$spec/package-lock.json" "$dest.tmp/"
(
  cd "$dest.tmp"
  # npm ci installs exactly the lockfile and checks every package's integrity hash.
  npm_config_nodedir=$headers npm ci --omit=optional --no-audit --no-fund --loglevel=error >&2
)
[[ -f "$dest.tmp/node_modules/better-sqlite3/build/Release/better_sqlite3.node" ]] || {
  log "better-sqlite3 did not build (see the npm output above)"
  exit 1
}
# neo's own setup step: memory-core reads config.mjs, a copy of its config.template.mjs
# (settings then come from NEO_* environment variables).
cp "$dest.tmp/node_modules/neo.mjs/ai/mcp/server/memory-core/config.template.mjs" \
  "$dest.tmp/node_modules/neo.mjs/ai/mcp/server/memory-core/config.mjs"
version=$(node -p "require('$dest.tmp/node_modules/neo.mjs/package.json').version")
log "neo.mjs $version installed"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
touch "$dest/.complete"
echo "$pkg"
