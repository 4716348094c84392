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

# NCCL as pip installs it (the nvidia-nccl-cu13 wheel: nvidia/nccl/{include,lib}, libnccl.so.2 and
# no libnccl.so), into .deps/nccl-wheel once, for the test install.nccl_wheel. Where pip is
# missing or the download fails, the test is not registered, and this says so.
devicekit_fetch_nccl_wheel() {
  local dir=.deps/nccl-wheel
  [ ! -f "$dir/nvidia/nccl/include/nccl.h" ] || return 0
  [ "${DEVICEKIT_SKIP_DEPS:-0}" != 1 ] || return 0
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "devicekit: no pip for python3; install.nccl_wheel (NCCL from its pip wheel) is not run"
    return 0
  fi
  echo "devicekit: fetching the nvidia-nccl-cu13 wheel into $dir (once)"
  rm -rf "$dir"
  # --target installs outside any environment, so PEP 668's "externally managed" rule is not hit.
  if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" nvidia-nccl-cu13 >/dev/null 2>&1; then
    rm -rf "$dir"
    echo "devicekit: could not fetch the nvidia-nccl-cu13 wheel; install.nccl_wheel is not run"
  fi
}
