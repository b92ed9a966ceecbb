#!/usr/bin/env bash
# Prove the native aarch64 path of `autotune install` on an x86-64 machine: an arm64
# Debian userland run through qemu-aarch64 registered with binfmt_misc, where detection
# (/proc/cpuinfo, HWCAP/HWCAP2, the SME vector length), the native compiler and the
# install run exactly as on an Arm machine; QEMU_CPU picks the CPU model.
#
# For each model: `autotune install --quick --only <a few kernels>` natively, then
# `autotune show --json` must list only kernels that CPU runs, the library must exist,
# and autotune.gemm from Python must match numpy.  Timings mean nothing under QEMU.
#
# Usage (as root: binfmt_misc and chroot need it):
#   scripts/check_arm_native.sh                 the models below
#   scripts/check_arm_native.sh CPU...          these QEMU CPU models, e.g. cortex-a76
#   scripts/check_arm_native.sh --userland      print the cached userland's path (any user);
#                                               a CI job can run the check only when it exists
#
# The userland (Debian trixie arm64: python3 and the Python packages autotune needs,
# gcc, make) is built once with mmdebstrap and cached as a tarball in the tools folder
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
# bind mount (no pip, no setuptools) and builds with gcc alone (no make).  python3-dev:
# without Python's headers the install builds no _atfast extension and autotune.gemm
# computes with numpy, not with the library.  matplotlib: install records the report's
# example plans.
PACKAGES=python3,python3-dev,python3-numpy,python3-pandas,python3-optuna,python3-rich,python3-platformdirs,python3-jinja2,python3-matplotlib,gcc,libc6-dev
# Modules the install imports, compiled once into the userland (below).
WARM_IMPORTS=numpy,pandas,optuna,rich.console,rich.progress,rich.table,rich.text,platformdirs,jinja2,matplotlib.figure,matplotlib.colors,matplotlib.patches,matplotlib.lines,matplotlib.cm,sqlite3,ctypes,sysconfig
# Every dpkg run happens under QEMU: skip the fsyncs of a throwaway tree and the files
# nothing here reads.  Recommends are not installed (mmdebstrap's default), and the
# essential variant leaves apt out: the host's apt installs the packages.
# Byte-compiling every installed module (py3compile in each python3-* postinst: most
# of the time under QEMU, pandas' and numpy's tests included) is diverted to true;
# the customize hook restores it and compiles only what the install imports, by
# importing it (matplotlib's font cache is built then too).
MMDEBSTRAP_OPTS=(
    --variant=essential
    --dpkgopt=force-unsafe-io
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*'
    --aptopt='Acquire::Languages "none"'
    --essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/bin/py3compile && ln -s /bin/true "$1/usr/bin/py3compile"'
    --customize-hook='rm "$1/usr/bin/py3compile" && chroot "$1" dpkg-divert --quiet --local --rename --remove /usr/bin/py3compile'
    --customize-hook="chroot \"\$1\" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root python3 -c 'import $WARM_IMPORTS'"
)
# A few kernels of each Arm family (and the portable one), every transposition among
# them, packed and in-place SME2 formats: enough for a table, a library and plans.
ONLY=(
    "at_sgemm_sme2_nt_32x32_*" "at_sgemm_sme2_nn_32x32_*" "at_dgemm_sme2_tn_8x8_*"
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

# 2. The userland: cached, or built now.
if [[ -f "$TARBALL" ]]; then
    say "userland cached: $TARBALL"
else
    for tool in mmdebstrap arch-test; do
        command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$tool"
    done
    mirror=$(bash scripts/setup_arm.sh --mirror-from /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
             /etc/apt/sources.list.d/*.sources 2>/dev/null) || mirror=http://deb.debian.org/debian
    mkdir -p "$(dirname "$TARBALL")"
    say "building the $SUITE arm64 userland with mmdebstrap (maintainer scripts run under QEMU: many minutes)"
    start=$SECONDS
    mmdebstrap --arch=arm64 --format=tar "${MMDEBSTRAP_OPTS[@]}" --include="$PACKAGES" "$SUITE" "$TARBALL.tmp" "$mirror"
    mv "$TARBALL.tmp" "$TARBALL"
    say "userland built in $((SECONDS - start)) s: $TARBALL"
fi

# 3. One chroot for every model (each gets its own AUTOTUNE_HOME).  The project is
# copied in, not bind-mounted: Python writes its bytecode beside it once, for every
# model, and nothing is ever written into the source tree.
start=$SECONDS
mkdir -p "$ROOT"
tar -xf "$TARBALL" -C "$ROOT"
mkdir -p "$ROOT/opt/autotune"
tar -C "$PROJECT" --exclude=.git --exclude=__pycache__ -cf - . | tar -C "$ROOT/opt/autotune" -xf -
mount -t proc proc "$ROOT/proc"
# rslave: unmounting the copies at exit must never propagate to the host's own mounts.
mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"
say "userland unpacked in $((SECONDS - start)) s"

failed=0
for cpu in "${CPUS[@]}"; do
    say "== QEMU_CPU=$cpu"
    start=$SECONDS
    # A hung emulated process must not hold a CI job: 30 minutes is ten times what a
    # model takes.
    if timeout --kill-after=30 1800 chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
        HOME=/root LANG=C.UTF-8 QEMU_CPU="$cpu" PYTHONPATH=/opt/autotune \
        AUTOTUNE_HOME="/tmp/home-${cpu//[^a-z0-9]/_}" \
        python3 /opt/autotune/scripts/arm_native_check.py "${ONLY[@]}"; then
        say "ok: $cpu in $((SECONDS - start)) s"
    else
        say "FAILED: $cpu after $((SECONDS - start)) s"
        failed=1
    fi
done
exit $failed
}
