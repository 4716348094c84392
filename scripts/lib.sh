# Shared by the scripts: find or install what devicekit's build needs on a Debian machine.
# Sourced, not run.

# Debian packages the build, the tests and the tools need (doxygen: the API reference, scripts/docs;
# valgrind: callgrind and its client-request header for the instruction-count test
# overhead.manager_instructions, reported skipped without it).
# The CUDA toolkit is not among them: it is found at /usr/local/cuda when present, and everything
# builds for the CPU without it.
DEVICEKIT_APT_PACKAGES=(cmake ninja-build g++ catch2 libboost-dev nlohmann-json3-dev libcli11-dev ccache
                        libopenmpi-dev openmpi-bin python3 clang-format doxygen valgrind libgtest-dev)

# The fuzz stage's compiler (scripts/fuzz: libFuzzer is part of clang's compiler-rt, which Debian
# ships as libclang-rt-16-dev). scripts/test installs them as root; without them, or as another
# user, the stage is reported skipped, and nothing else needs them.
DEVICEKIT_FUZZ_APT_PACKAGES=(clang-16 libclang-rt-16-dev)

devicekit_missing_packages() {  # [package...]: those not installed (default: DEVICEKIT_APT_PACKAGES)
  local p missing=() wanted=("$@")
  [ ${#wanted[@]} -gt 0 ] || wanted=("${DEVICEKIT_APT_PACKAGES[@]}")
  for p in "${wanted[@]}"; do
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
  # nvcc must run, not merely be on PATH: a wrapper left behind by a removed toolkit is no toolkit.
  if ! nvcc --version >/dev/null 2>&1; then
    echo "devicekit: no CUDA toolkit found (nvcc); building for the CPU only"
    devicekit_ensure_cccl
  fi
}

# clang-16 and its libFuzzer runtime for scripts/fuzz: installed as root (CI), otherwise only named,
# since the fuzz stage is then reported skipped rather than stopping the tests. Never an error.
devicekit_ensure_fuzz_deps() {
  [ "${DEVICEKIT_SKIP_DEPS:-0}" != 1 ] || return 0
  local missing
  missing=$(devicekit_missing_packages "${DEVICEKIT_FUZZ_APT_PACKAGES[@]}")
  [ -n "$missing" ] || return 0
  if [ "$(id -u)" = 0 ]; then
    echo "devicekit: installing $missing (the fuzz stage)"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! { apt-get update -qq && apt-get install -y -qq $missing >/dev/null; }; then
      echo "devicekit: could not install $missing: the fuzz stage is skipped"
    fi
  else
    echo "devicekit: the fuzz stage needs $missing (sudo apt-get install -y $missing); it is skipped without"
  fi
}

# CCCL's headers without the CUDA toolkit, for shaped arrays: libcu++'s cuda::std::mdspan compiles
# in plain g++ host code, and g++ 12/13's libstdc++ has no <mdspan>. NVIDIA publishes the headers
# on PyPI as the nvidia-cuda-cccl wheel (nvidia/cu13/include/cccl inside); they are unpacked into
# .deps/cccl (git-ignored), where devicekit_find_cccl (cmake/devicekitDependencies.cmake) looks.
# Without pip or a network the build goes on without them: shaped leaves are then unavailable and
# their tests are reported skipped.
DEVICEKIT_CCCL_WHEEL="nvidia-cuda-cccl>=13,<14"
devicekit_ensure_cccl() {
  local root=.deps/cccl tmp whl found
  [ -f "$root/include/cccl/cuda/std/mdspan" ] && return 0
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "devicekit: no pip, so no CCCL headers (cuda::std::mdspan): shaped arrays are unavailable"
    return 0
  fi
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$tmp" "$DEVICEKIT_CCCL_WHEEL" >/dev/null 2>&1 &&
    whl=$(ls "$tmp"/nvidia_cuda_cccl-*.whl 2>/dev/null | head -n 1) && [ -n "$whl" ] &&
    python3 -m zipfile -e "$whl" "$tmp/x" &&
    found=$(find "$tmp/x" -path '*/include/cccl/cuda/std/mdspan' | head -n 1) && [ -n "$found" ]; then
    # ${found%/cccl/...} is the wheel's include/, whose cccl/ holds cuda/, cub/, thrust/ and nv/.
    rm -rf "$root" && mkdir -p "$root" && cp -r "${found%/cccl/cuda/std/mdspan}" "$root/include"
    echo "devicekit: CCCL headers from PyPI's $(basename "$whl") in $root (for cuda::std::mdspan)"
  else
    echo "devicekit: could not fetch CCCL's headers ($DEVICEKIT_CCCL_WHEEL) with pip: shaped arrays are unavailable"
  fi
  rm -rf "$tmp"
}

devicekit_jobs() { nproc 2>/dev/null || echo 2; }

# Fetches a pip package set into .deps/<dir> once (--target: outside any environment, so PEP 668's
# "externally managed" rule does not apply): dir, a file that shows it is there, then the
# requirements. Says why when it cannot; the tests or builds that need it are then left out.
devicekit_fetch_wheels() {
  local dir=.deps/$1 marker=$2
  shift 2
  [ ! -e "$dir/$marker" ] || return 0
  [ "${DEVICEKIT_SKIP_DEPS:-0}" != 1 ] || return 1
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "devicekit: no pip for python3, so no $*"; return 1
  fi
  echo "devicekit: fetching $* into $dir (once)"
  rm -rf "$dir"
  if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "$@" >/dev/null 2>&1; then
    rm -rf "$dir"; echo "devicekit: could not fetch $*"; return 1
  fi
}

# NCCL as pip installs it (the nvidia-nccl-cu13 wheel: nvidia/nccl/{include,lib}, libnccl.so.2 and
# no libnccl.so), into .deps/nccl-wheel once, for the test install.nccl_wheel. Where pip is
# missing or the download fails, the test is not registered, and this says so.
devicekit_fetch_nccl_wheel() {
  devicekit_fetch_wheels nccl-wheel nvidia/nccl/include/nccl.h nvidia-nccl-cu13 ||
    echo "devicekit: install.nccl_wheel (NCCL from its pip wheel) is not run"
}

# RMM's wheels for benchmarks/rmm (devicekit's pool against RMM's), which scripts/test builds: the
# versions it was checked with, since RMM's headers bring their own CCCL.
DEVICEKIT_RMM_WHEELS=(librmm-cu13==26.10.0 rapids-logger==0.3.0)
devicekit_fetch_rmm_wheels() {
  devicekit_fetch_wheels rmm-site librmm/include/rmm/mr/pool_memory_resource.hpp "${DEVICEKIT_RMM_WHEELS[@]}" ||
    echo "devicekit: benchmarks/rmm is not built"
}

# RMM's wheels for tests/rmm (RMM's own memory-resource tests against devicekit's resources, on
# simulated GPUs): the release whose source third_party/rmm holds (its tests and the few compiled
# functions they call), into .deps/rmm-tests-site once.
DEVICEKIT_RMM_TEST_WHEELS=(librmm-cu13==26.6.0 rapids-logger==0.2.3)
devicekit_fetch_rmm_test_wheels() {
  devicekit_fetch_wheels rmm-tests-site librmm/include/rmm/resource_ref.hpp "${DEVICEKIT_RMM_TEST_WHEELS[@]}" ||
    echo "devicekit: RMM's tests (tests/rmm) are not built"
}
