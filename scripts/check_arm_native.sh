#!/usr/bin/env bash
# Prove the native aarch64 path of `autotune install` on an x86-64 machine: an arm64
# Debian userland run through qemu-aarch64 registered with binfmt_misc, where detection
# (/proc/cpuinfo, HWCAP/HWCAP2, the SME vector length), the native compiler and the
# install run exactly as on an Arm machine; QEMU_CPU picks the CPU model.
#
# For each model: `autotune install --quick --only <a few kernels>` natively, then
# `autotune show --json` must list only kernels that CPU runs, the library must exist,
# and autotune.gemm from Python must match numpy.  Timings mean nothing under QEMU.
# The first model runs alone; the others then run side by side (each QEMU process is
# one thread), their homes seeded with the first one's build cache: objects are keyed
# by their source, compiler and flags, none of which depends on the CPU model, so a
# later model compiles only what is its own (its SVL's kernels, its table, its runtime
# variant) and links its harnesses and library itself.
#
# Usage (as root: binfmt_misc and chroot need it):
#   scripts/check_arm_native.sh                 the models below
#   scripts/check_arm_native.sh CPU...          these QEMU CPU models, e.g. cortex-a76
#   scripts/check_arm_native.sh --userland      print the cached userland's path (any user);
#                                               a CI job can run the check only when it exists
#
# The userland (Debian trixie arm64: python3 and the Python packages autotune needs,
# gcc) is built once with mmdebstrap and cached as a tarball in the tools folder
# ($AUTOTUNE_TOOLS, default ~/.local/share/autotune-tools).  A binfmt entry this script
# registers is removed when it ends; the machine's apt configuration is never changed.
set -euo pipefail
# The braces make bash read the whole script before running any of it: a run takes
# long enough that the file may be edited (or checked out) under it.
{
cd "$(dirname "$0")/.."
PROJECT=$(pwd)

SUITE=trixie  # its python3-pandas/optuna/platformdirs/matplotlib meet pyproject's minimums; bookworm's do not
# What `autotune install` imports and runs, nothing more: the project is imported from a
# copy (no pip, no setuptools) and builds with gcc alone (no make).  python3-dev:
# without Python's headers the install builds no _atfast extension and autotune.gemm
# computes with numpy, not with the library.  matplotlib: install records the report's
# example plans.
PACKAGES=python3,python3-dev,python3-numpy,python3-pandas,python3-optuna,python3-rich,python3-platformdirs,python3-jinja2,python3-matplotlib,gcc,libc6-dev
# Modules the install imports, compiled once into the userland (below).
WARM_IMPORTS=numpy,pandas,optuna,rich.console,rich.progress,rich.table,rich.text,platformdirs,jinja2,matplotlib.figure,matplotlib.colors,matplotlib.patches,matplotlib.lines,matplotlib.cm,sqlite3,ctypes,sysconfig
# The packages and their dependencies are only unpacked, by the host's dpkg-deb and tar
# (--variant=extract): dpkg and the maintainer scripts under QEMU were 18 of the 19
# minutes of a build (2026-11-26, load 7-10).  Of what the maintainer scripts do, this
# userland needs the merged /usr links (the ELF interpreter is /lib/ld-linux-aarch64.so.1),
# the alternatives numpy loads BLAS and LAPACK through, cc, and a root account; byte
# code is compiled for what the install imports, by importing it (matplotlib's font
# cache is built then too), not for every module as each python3-* postinst would.
# No ld.so.cache is needed: every library is in the loader's default directories.
USERLAND_SETUP='for d in bin sbin lib; do mkdir -p "$1/usr/$d" && ln -s "usr/$d" "$1/$d"; done'
USERLAND_FIXUP='set -e
mkdir -p "$1/proc" "$1/sys" "$1/root"
printf "root:x:0:0:root:/root:/bin/sh\n" >"$1/etc/passwd"
printf "root:x:0:\n" >"$1/etc/group"
ln -s gcc "$1/usr/bin/cc"
ln -s blas/libblas.so.3 "$1/usr/lib/aarch64-linux-gnu/libblas.so.3"
ln -s lapack/liblapack.so.3 "$1/usr/lib/aarch64-linux-gnu/liblapack.so.3"
rm -rf "$1/usr/share/doc" "$1/usr/share/man" "$1/usr/share/info" "$1/usr/share/locale"'
MMDEBSTRAP_OPTS=(
    --variant=extract
    --aptopt='Acquire::Languages "none"'
    --setup-hook="$USERLAND_SETUP"
    --extract-hook="$USERLAND_FIXUP"
    --extract-hook="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot \"\$1\" python3 -c 'import $WARM_IMPORTS'"
)
# A few kernels of each Arm family (and the portable one), every transposition among
# them, packed and in-place SME2 formats: enough for a table, a library and plans.
# SME2 kernels of both precisions at each SVL (32x32 fp32 exists at 512 only; at 256
# its 2x2-tile twin is 16x16); the NEON ones are the same for every model.
ONLY=(
    "at_sgemm_sme2_nt_32x32_*" "at_sgemm_sme2_nn_32x32_*" "at_dgemm_sme2_tn_8x8_*"
    "at_sgemm_sme2_nt_16x16_*_vl256" "at_sgemm_sme2_nn_16x16_*_vl256"
    "at_sgemm_neon_nn_8x4_*" "at_sgemm_neon_tt_4x4_*" "at_dgemm_neon_nt_4x4_*" "at_dgemm_neon_tn_2x2_*"
)

say() { printf 'check_arm_native: %s\n' "$*"; }
die() { printf 'check_arm_native: error: %s\n' "$*" >&2; exit 1; }

# The userland tarball, keyed by everything that decides its contents.
TOOLS=${AUTOTUNE_TOOLS:-${XDG_DATA_HOME:-$HOME/.local/share}/autotune-tools}
key=$(printf '%s\n' "$SUITE" "$PACKAGES" "${MMDEBSTRAP_OPTS[@]}" | sha256sum | cut -c1-12)
TARBALL=$TOOLS/arm64-userland/$SUITE-arm64-$key.tar
if [[ "${1:-}" == "--userland" ]]; then
    printf '%s\n' "$TARBALL"
    exit 0
fi
CPUS=("$@")
((${#CPUS[@]})) || CPUS=("max,sme512=on" "max,sme256=on" "cortex-a76")

[[ $(id -u) -eq 0 ]] || die "run as root: registering binfmt_misc and entering the chroot need it"
[[ "$(uname -m)" == "x86_64" ]] || die "this emulates aarch64 on x86-64; on an Arm machine run autotune install itself"

bash scripts/setup_arm.sh >/dev/null
QEMU=$TOOLS/qemu/usr/bin/qemu-aarch64
[[ -x "$QEMU" ]] || die "no $QEMU after scripts/setup_arm.sh"

WORK=$(mktemp -d)
ROOT=$WORK/root
registered=""
cleanup() {
    # Whatever still runs inside the chroot (a timed-out model's compilers) goes first.
    local proc
    for proc in /proc/[0-9]*; do
        [[ "$(readlink "$proc/root" 2>/dev/null)" == "$ROOT" ]] && kill -KILL "${proc#/proc/}" 2>/dev/null
    done
    for m in "$ROOT/dev" "$ROOT/sys" "$ROOT/proc"; do
        mountpoint -q "$m" 2>/dev/null && umount -R "$m" 2>/dev/null || { mountpoint -q "$m" && umount -l "$m"; }
    done
    [[ -n "$registered" ]] && echo -1 >"/proc/sys/fs/binfmt_misc/$registered"
    [[ -n "${TARBALL:-}" ]] && rm -f "$TARBALL.tmp"  # a build cut short
    rm -rf "$WORK"
}
trap cleanup EXIT

# 1. binfmt_misc: aarch64 ELF executables (ET_EXEC and ET_DYN) run through QEMU.  The F
# flag opens the interpreter now, so the chroot needs no QEMU inside; P keeps argv[0].
# mmdebstrap looks for the entry under the name qemu-aarch64.
BINFMT=/proc/sys/fs/binfmt_misc
mountpoint -q "$BINFMT" || mount -t binfmt_misc binfmt_misc "$BINFMT"
if [[ -e "$BINFMT/qemu-aarch64" ]]; then
    grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" \
        || die "$BINFMT/qemu-aarch64 exists without the F flag; a chroot cannot reach its interpreter"
    interp=$(sed -n 's/^interpreter //p' "$BINFMT/qemu-aarch64")
    say "using the registered binfmt entry qemu-aarch64 ($interp)"
else
    printf ':qemu-aarch64:M::%s:%s:%s:FP\n' \
        '\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00' \
        '\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff' \
        "$QEMU" >"$BINFMT/register"
    registered=qemu-aarch64
    say "registered binfmt qemu-aarch64 -> $QEMU (removed at exit)"
fi

# 2. The userland: cached and unpacked, or built now (straight into the chroot's folder,
# then cached).
CHROOT=$(command -v chroot)
start=$SECONDS
if [[ -f "$TARBALL" ]]; then
    say "userland cached: $TARBALL"
    mkdir -p "$ROOT"
    tar -xf "$TARBALL" -C "$ROOT"
    say "userland unpacked in $((SECONDS - start)) s"
else
    missing=()
    for tool in mmdebstrap arch-test; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if ((${#missing[@]})); then
        # A fresh machine's package lists may be stale: refresh them once if the install fails.
        apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; }
        apt_install || { apt-get update -qq && apt_install; }
    fi
    mirror=$(bash scripts/setup_arm.sh --mirror-from /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
             /etc/apt/sources.list.d/*.sources 2>/dev/null) || mirror=http://deb.debian.org/debian
    mkdir -p "$(dirname "$TARBALL")"
    say "building the $SUITE arm64 userland with mmdebstrap (unpacked on the host; the warm import runs under QEMU)"
    mmdebstrap --arch=arm64 --format=directory "${MMDEBSTRAP_OPTS[@]}" --include="$PACKAGES" "$SUITE" "$ROOT" "$mirror"
    tar -C "$ROOT" -cf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    say "userland built in $((SECONDS - start)) s: $TARBALL"
fi

# 3. One chroot for every model (each gets its own AUTOTUNE_HOME).  The project is
# copied in, not bind-mounted: Python writes its bytecode beside it once, for every
# model, and nothing is ever written into the source tree.
mkdir -p "$ROOT/opt/autotune" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev"
tar -C "$PROJECT" --exclude=.git --exclude=__pycache__ -cf - . | tar -C "$ROOT/opt/autotune" -xf -
mount -t proc proc "$ROOT/proc"
# rslave: unmounting the copies at exit must never propagate to the host's own mounts.
mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"

home_of() { printf '/tmp/home-%s\n' "${1//[^a-z0-9]/_}"; }
# One model; its lines prefixed with its name when it shares the terminal.
check_model() {
    local cpu=$1 prefix=$2 start=$SECONDS
    # A hung emulated process must not hold a CI job: 30 minutes is three times what
    # the slowest model takes.
    if timeout --kill-after=30 1800 env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 QEMU_CPU="$cpu" \
        PYTHONPATH=/opt/autotune AUTOTUNE_HOME="$(home_of "$cpu")" \
        "$CHROOT" "$ROOT" python3 /opt/autotune/scripts/arm_native_check.py "${ONLY[@]}" 2>&1 \
        | sed -u "s/^/$prefix/"; then
        say "ok: $cpu in $((SECONDS - start)) s"
    else
        say "FAILED: $cpu after $((SECONDS - start)) s"
        return 1
    fi
}

failed=0
say "== QEMU_CPU=${CPUS[0]}"
check_model "${CPUS[0]}" "" || failed=1
if ((${#CPUS[@]} > 1)); then
    say "== QEMU_CPU=${CPUS[*]:1} (side by side)"
    pids=()
    for cpu in "${CPUS[@]:1}"; do
        home=$ROOT$(home_of "$cpu")
        mkdir -p "$home"
        # Hard links: a compile replaces an object by rename, never writes into one.
        [[ -d "$ROOT$(home_of "${CPUS[0]}")/build" ]] && cp -al "$ROOT$(home_of "${CPUS[0]}")/build" "$home/build"
        check_model "$cpu" "[$cpu] " &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
fi
exit $failed
}
