# Shared by the scripts: find or install what devicekit's build needs on a Debian machine.
# Sourced, not run.

# Debian packages the build, the tests and the tools need. The CUDA toolkit is not among them:
# it is found at /usr/local/cuda when present, and everything builds for the CPU without it.
DEVICEKIT_APT_PACKAGES=(cmake ninja-build g++ catch2 libboost-dev nlohmann-json3-dev libcli11-dev ccache
                        libopenmpi-dev openmpi-bin python3 clang-format)

devicekit_missing_packages() {
  local p missing=()
  for p in "${DEVICEKIT_APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  # A python3 that is not Debian's (pyenv, conda) serves as well.
  if command -v python3 >/dev/null 2>&1; then
    local m=() q
    for q in "${missing[@]}"; do [ "$q" = python3 ] || m+=("$q"); done
    missing=("${m[@]}")
  fi
  echo "${missing[@]}"
}

devicekit_ensure_deps() {
  local missing
  # On a machine with no package registry (the lent GPU machine), dependencies come from
  # CMAKE_PREFIX_PATH (.devdeps) instead: set DEVICEKIT_SKIP_DEPS=1.
  if [ "${DEVICEKIT_SKIP_DEPS:-0}" = 1 ]; then
    command -v nvcc >/dev/null 2>&1 || [ ! -x /usr/local/cuda/bin/nvcc ] || export PATH="/usr/local/cuda/bin:$PATH"
    return 0
  fi
  missing=$(devicekit_missing_packages)
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "devicekit: installing $missing"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      # shellcheck disable=SC2086
      apt-get install -y -qq $missing >/dev/null
    else
      echo "devicekit: missing packages: $missing"
      echo "Install them with:"
      echo "  sudo apt-get install -y $missing"
      exit 1
    fi
  fi
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "devicekit: no CUDA toolkit found (nvcc); building for the CPU only"
  fi
}

devicekit_jobs() { nproc 2>/dev/null || echo 2; }
