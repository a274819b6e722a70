# Sourced by hack/install-tools.sh and hack/install-node.sh (they set bin_dir first).
# A cached binary is trusted only if its sha256 matches the one recorded when it was built
# and it was built from the version asked for now.
cached_ok() {
  local name=$1 version=$2
  [[ -x "$bin_dir/$name" && -f "$bin_dir/$name.sha256" ]] || return 1
  [[ "$(cat "$bin_dir/$name.version" 2>/dev/null)" == "$version" ]] || return 1
  (cd "$bin_dir" && sha256sum --quiet -c "$name.sha256") >/dev/null 2>&1
}

record_sum() {
  local name=$1 version=$2
  (cd "$bin_dir" && sha256sum "$name" >"$name.sha256" && printf '%s\n' "$version" >"$name.version")
}
