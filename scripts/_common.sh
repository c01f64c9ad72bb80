# Shared helpers for scripts/*.sh (sourced, not run).

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*"; }

# True when the Debian package $1 is installed.
deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

# apt-get install "$@" as root (directly when root, as in CI; through sudo otherwise),
# running apt-get update first. Only call it with packages that are really missing.
apt_install() {
  local as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      as_root=(sudo)
    else
      log "error: not root and no sudo; install these Debian packages first: $*" >&2
      return 1
    fi
  fi
  log "installing missing Debian packages: $*"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@"
}
