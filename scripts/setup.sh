#!/usr/bin/env bash
# Set up a fresh machine for autotune: system packages, then the Python package.
#
#   scripts/setup.sh           what `autotune install` needs (a C compiler, the package)
#   scripts/setup.sh --test    also what the test suite needs (pytest, hypothesis, netlib's BLAS testers, the
#                              aarch64 cross toolchain + QEMU the Arm tests run under)
#   scripts/setup.sh --arm     the aarch64 cross toolchain + QEMU only (for --target neon|sme2)
#   scripts/setup.sh --bench   the peers `autotune bench` compares against (OpenBLAS, BLIS,
#                              LIBXSMM, MKL); --test installs them too, for their tests
#
# Idempotent: a second run installs nothing new and takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0 want_arm=0 want_bench=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1; want_arm=1; want_bench=1 ;;
    --arm) want_arm=1 ;;
    --bench) want_bench=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}"
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}")
  # A fresh machine may have no package lists yet: update once, only when needed.
  as_root "${install[@]}" 2>/dev/null || { as_root apt-get update -qq && as_root "${install[@]}"; }
}

if command -v apt-get >/dev/null 2>&1; then
  apt_install gcc libc6-dev
  # The report test renders HTML headless; the reference BLAS testers check the BLAS entries;
  # pkg-config builds the README's C recipe; a program linked with -lblas (libblas-dev) and
  # Debian's numpy (python3-numpy, on the system BLAS) run on libautotune preloaded; gfortran
  # builds the README's Fortran recipe.
  # Debian's scipy and numpy test suites run on the preloaded library (tests/test_clients.py), also
  # over the reference LAPACK (liblapack3), whose factorisations call dgemm_.
  [ "$want_test" = 1 ] && apt_install chromium libblas-test pkgconf libblas-dev python3-numpy gfortran \
    python3-scipy python3-pytest python3-hypothesis liblapack3
elif ! command -v cc >/dev/null 2>&1; then
  echo "setup: no C compiler and no apt-get; install a C compiler (Xcode command line tools on macOS)" >&2
  exit 1
fi

if [ "$want_arm" = 1 ] && [ -f scripts/setup_arm.sh ]; then
  bash scripts/setup_arm.sh
fi

if [ "$want_bench" = 1 ] && [ -f scripts/setup_bench.sh ]; then
  bash scripts/setup_bench.sh
fi

extras=""
[ "$want_test" = 1 ] && extras="[test]"
# With the build backend already installed (setuptools >= 77, as pyproject.toml asks), pip
# builds the editable install in this environment instead of a fresh isolated one that
# installs setuptools again: 3 s instead of 7 on a 2-core VM.
isolation=""
python3 -c "import setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 77)" 2>/dev/null \
  && isolation="--no-build-isolation"
python3 -m pip install --quiet --disable-pip-version-check $isolation -e ".${extras}" 2>&1 \
  | grep -v -e "Running pip as the 'root' user" -e "is ignored: it is neither a file nor a directory" || true
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
python3 -c "import autotune" && echo "setup: autotune $(python3 -c 'import autotune; print(autotune.__version__)') ready"
