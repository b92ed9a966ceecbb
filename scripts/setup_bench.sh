#!/usr/bin/env bash
# Install the peers `python -m benchmarks` (`autotune bench`) compares against.
#
#   OpenBLAS, BLIS, LIBXSMM   Debian packages libopenblas-dev, libblis-dev, libxsmm-dev
#   MKL                       PyPI packages mkl, mkl-devel (libmkl_rt.so under the prefix's lib/)
#   numpy, pandas, rich       PyPI
#   onnxruntime, onnx         PyPI (pyproject's `bench` extra): the ONNX Runtime MatMulNBits peer
#                             of `--quantised`
#   torch==2.13.0 (optional)  PyPI, the CPU build: the peers of `--quantised` (int4 weight-only
#                             and dynamic int8 matmuls); a wheel of it is on these machines' disk
#
# A peer that fails to install is listed at the end and the script goes on: the
# benchmark then reports that peer as missing instead of dropping it silently.
# Idempotent: packages already present are not reinstalled.
set -uo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
failed=()
updated=0

apt_one() {
  local pkg=$1
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && return 0
  command -v apt-get >/dev/null 2>&1 || { failed+=("$pkg (no apt-get)"); return 1; }
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg")
  echo "setup_bench: installing $pkg"
  if ! as_root "${install[@]}" >/dev/null 2>&1; then
    # Package lists may be missing or stale on a fresh machine: refresh once.
    if [ "$updated" = 0 ]; then as_root apt-get update -qq >/dev/null 2>&1; updated=1; fi
    as_root "${install[@]}" >/dev/null 2>&1 || { failed+=("$pkg"); return 1; }
  fi
}

for pkg in gcc libc6-dev libopenblas-dev libblis-dev libxsmm-dev; do apt_one "$pkg"; done

pip_install() {
  python3 -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | grep -v -e "Running pip as the 'root' user" -e "is ignored: it is neither a file nor a directory" || true
}
for pkg in numpy pandas rich "mkl" "mkl-devel" "onnxruntime>=1.17" "onnx>=1.15"; do
  name=${pkg%%[<>=]*}
  python3 -m pip show -q "$name" >/dev/null 2>&1 && continue
  echo "setup_bench: pip install $pkg"
  pip_install "$pkg"
  python3 -m pip show -q "$name" >/dev/null 2>&1 || failed+=("$pkg (PyPI)")
done

# The quantised benchmark's peer; optional: without it `--quantised` reports PyTorch as missing.
if ! python3 -m pip show -q torch >/dev/null 2>&1; then
  echo "setup_bench: pip install torch==2.13.0 (optional peer of --quantised)"
  pip_install "torch==2.13.0"
  python3 -m pip show -q torch >/dev/null 2>&1 || failed+=("torch==2.13.0 (PyPI, optional)")
fi

# Where the benchmark will find each peer (the same search it does itself).
python3 -m benchmarks --list-peers 2>/dev/null || true

if [ ${#failed[@]} -gt 0 ]; then
  echo "setup_bench: could not install: ${failed[*]} (reported as missing by the benchmark)" >&2
fi
exit 0
