# Sourced by .ci/steps/NN-name.sh (not a step itself: the loop in .ci/run runs *.sh only).
# Each step runs from the repository root after .ci/setup built ./build, keeps the output of its
# commands back unless one fails, and ends with one line "<name>: ok".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
step=$(basename "$0" .sh)
step=${step#[0-9][0-9]-}
scratch=$(mktemp -d "/tmp/c128-$step.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

fail() {
  echo "$step: FAILED: $*" >&2
  exit 1
}

# q CMD...: run CMD with its output kept back; if it fails, show the command and its output.
q() {
  if ! "$@" >"$scratch/log" 2>&1; then
    echo "$step: FAILED: $*" >&2
    cat "$scratch/log" >&2
    exit 1
  fi
}

# need COMMAND PACKAGE...: apt-get install PACKAGE... only when COMMAND is missing.
need() {
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

ok() { echo "$step: ok"; }
