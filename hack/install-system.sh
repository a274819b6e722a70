#!/usr/bin/env bash
# System packages the build and tests need. Installs what is missing (as root, via apt).
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v make >/dev/null || missing+=(make)
command -v git >/dev/null || missing+=(git)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
# neo's memory-core (the real-client tier) runs on Node.js; better-sqlite3 compiles with g++.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v g++ >/dev/null || missing+=(g++)
# The clock-skew test runs one operator process under libfaketime (Debian's package).
compgen -G "/usr/lib/*/faketime/libfaketimeMT.so.1" >/dev/null || missing+=(libfaketime)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing system packages: ${missing[*]} (install them, e.g. with apt-get)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v go >/dev/null; then
  for candidate in /usr/local/go/bin /usr/lib/go/bin; do
    [[ -x $candidate/go ]] && { echo "note: add $candidate to PATH" >&2; }
  done
  echo "Go (>= 1.24) is required to build kube-apiserver, etcd, kubectl and helm from their Go modules" >&2
  exit 1
fi
