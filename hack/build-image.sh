#!/usr/bin/env bash
# Builds the operator image from the repository's unchanged Dockerfile without a Docker
# engine or a registry, and writes it as an OCI archive that containerd imports:
#   1. a Debian bookworm root filesystem (debootstrap --variant=minbase, with python3,
#      python3-venv, python-is-python3, ca-certificates) committed with buildah as a local
#      base image, standing in for the python base image of the Dockerfile;
#   2. `buildah bud --isolation chroot --pull=never --build-arg PYTHON_IMAGE=<that base>`.
# Both are cached under ~/.cache by the content hash of what goes into them, so an unchanged
# tree does not rebuild. Docker users keep `docker build -t session-summary-operator:dev .`.
#
# Usage: hack/build-image.sh [SOURCE_DIR]    (root; SOURCE_DIR defaults to this tree, or
#        $SSO_IMAGE_SRC). Prints the archive's path on its last line; the image inside is
#        named docker.io/library/session-summary-operator:$SSO_IMAGE_TAG (default e2e).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "${1:-${SSO_IMAGE_SRC:-$here/..}}" && pwd)
tag=${SSO_IMAGE_TAG:-e2e}
image_ref="docker.io/library/session-summary-operator:$tag"
cache_root=${SSO_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-summary-operator/images}
mkdir -p "$cache_root"
log() { printf '[build-image] %s\n' "$*" >&2; }

for c in buildah debootstrap; do
  command -v "$c" >/dev/null || { log "$c is missing (hack/install-node.sh installs it)"; exit 1; }
done

# --- 1. the base image -----------------------------------------------------------------
base_pkgs=python3,python3-venv,python-is-python3,ca-certificates
base_key=$(printf 'bookworm minbase %s v1' "$base_pkgs" | sha256sum | cut -c1-16)
base_ref="localhost/sso-python-base:bookworm-$base_key"

# The Debian mirror apt is configured with (first bookworm source that is not -security).
debian_mirror() {
  python3 - <<'PY'
import glob, re
texts = []
for p in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.sources")),
          *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        texts.append(open(p).read())
    except OSError:
        pass
for text in texts:
    for stanza in re.split(r"\n\s*\n", text):
        uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
        suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
        if uris and suites and "bookworm" in suites.group(1).split() and "security" not in uris.group(1):
            print(uris.group(1)); raise SystemExit
    for line in text.splitlines():
        m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", line)
        if m and "security" not in m.group(1):
            print(m.group(1)); raise SystemExit
raise SystemExit("no bookworm source in apt's configuration")
PY
}

ensure_base() {
  if buildah inspect --type image "$base_ref" >/dev/null 2>&1; then return 0; fi
  local rootfs_tar="$cache_root/rootfs-bookworm-$base_key.tar"
  if [[ ! -s $rootfs_tar ]]; then
    local root
    root=$(mktemp -d /var/tmp/sso-rootfs.XXXXXX)
    log "debootstrap bookworm ($base_pkgs) into $root"
    local t0=$SECONDS
    debootstrap --variant=minbase --include="$base_pkgs" bookworm "$root" "$(debian_mirror)" >"$cache_root/debootstrap.log" 2>&1 ||
      { tail -20 "$cache_root/debootstrap.log" >&2; rm -rf "$root"; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$rootfs_tar.tmp" .
    mv "$rootfs_tar.tmp" "$rootfs_tar"
    rm -rf "$root"
    log "debootstrap took $((SECONDS - t0))s"
  fi
  local ctr
  ctr=$(buildah from scratch)
  buildah add "$ctr" "$rootfs_tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  buildah commit --rm "$ctr" "$base_ref" >/dev/null
  log "base image $base_ref"
}

# --- 2. the operator image -------------------------------------------------------------
# What goes into the image: the Dockerfile and what it COPYs.
content_hash() {
  (
    cd "$src"
    {
      printf 'base %s\n' "$base_ref"
      find Dockerfile requirements.lock requirements pyproject.toml README.md controller -type f \
        ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
  )
}

hash=$(content_hash)
archive="$cache_root/session-summary-operator-$hash-$tag.oci.tar"
if [[ -s $archive ]]; then
  log "unchanged tree ($hash): $archive"
  echo "$archive"
  exit 0
fi

t0=$SECONDS
ensure_base
# pip inside the build verifies certificates against the host's CA bundle and uses its pip
# configuration where one exists (read-only; harmless where not needed).
mounts=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && mounts+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
[[ -f /etc/pip.conf ]] && mounts+=(-v /etc/pip.conf:/etc/pip.conf:ro)
local_ref="localhost/session-summary-operator:$hash"
log "buildah bud of $src/Dockerfile (PYTHON_IMAGE=$base_ref)"
buildah bud --isolation chroot --pull=never --layers=false "${mounts[@]}" \
  --build-arg PYTHON_IMAGE="$base_ref" -f "$src/Dockerfile" -t "$local_ref" "$src" >"$cache_root/build-$hash.log" 2>&1 ||
  { tail -40 "$cache_root/build-$hash.log" >&2; exit 1; }
rm -f "$archive.tmp"
buildah push "$local_ref" "oci-archive:$archive.tmp:$image_ref" >/dev/null 2>&1
mv "$archive.tmp" "$archive"
buildah rmi "$local_ref" >/dev/null 2>&1 || true
# Keep only the newest archives (each is ~0.8 GB).
ls -1t "$cache_root"/session-summary-operator-*.oci.tar 2>/dev/null | tail -n +3 | xargs -r rm -f
log "image built in $((SECONDS - t0))s: $archive"
echo "$archive"
