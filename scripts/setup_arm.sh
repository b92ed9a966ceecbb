#!/usr/bin/env bash
# Set up the Arm cross toolchain of autotune on a Debian 12 x86-64 machine:
#   - clang-19, lld-19, the aarch64 C library and libgcc from the machine's own suites;
#   - a QEMU >= 10.1 (the first that executes SME2) from Debian's trixie-backports,
#     unpacked into the tools folder without touching the machine's apt configuration:
#     qemu-aarch64, and qemu-x86_64 for the host library under smaller x86 CPU models;
#   - Debian's arm64 netlib BLAS testers (libblas-test:arm64) and what they load at run
#     time, unpacked into <tools>/arm64-netlib as a sysroot for `qemu-aarch64 -L`.
#
# Idempotent: every step checks first and says what it found.
#
# Usage:
#   scripts/setup_arm.sh                     install what is missing
#   scripts/setup_arm.sh --mirror-from F...  print the Debian mirror named in the apt
#                                            sources files F (deb822 or one-line) and exit
#
# Environment: AUTOTUNE_TOOLS overrides the tools folder
# (default: ~/.local/share/autotune-tools, as autotune.home.tools_dir()).
set -euo pipefail

QEMU_MIN_MAJOR=10
QEMU_MIN_MINOR=1
BACKPORTS_SUITE=trixie-backports
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

say() { printf 'setup_arm: %s\n' "$*"; }
die() { printf 'setup_arm: error: %s\n' "$*" >&2; exit 1; }

# The first archive mirror (not the security archive) in the given apt sources files.
# Handles deb822 stanzas (Types/URIs/Suites fields) and one-line "deb [opts] URI suite ..." files.
mirror_from_sources() {
    awk '
        function consider(uri, suites) {
            if (found || uri == "") return
            if (uri ~ /debian-security/ || suites ~ /^[ \t]*[a-z]+-security([ \t]|$)/) return
            if (uri !~ /^(https?|ftp|file):/) return
            sub(/\/+$/, "", uri)
            print uri
            found = 1
        }
        function flush() {
            if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no") {
                n = split(uris, list, /[ \t]+/)
                for (i = 1; i <= n; i++) consider(list[i], suites)
            }
            types = ""; uris = ""; suites = ""; enabled = ""
        }
        FNR == 1 { if (NR > 1) flush(); deb822 = (FILENAME ~ /\.sources$/) }
        /^[ \t]*#/ { next }
        {
            line = $0
            if (line ~ /^[ \t]*$/) { flush(); next }
            if (line ~ /^Types:/)   { sub(/^Types:[ \t]*/, "", line);   types = line;  deb822 = 1; next }
            if (line ~ /^URIs:/)    { sub(/^URIs:[ \t]*/, "", line);    uris = line;   deb822 = 1; next }
            if (line ~ /^Suites:/)  { sub(/^Suites:[ \t]*/, "", line);  suites = line; deb822 = 1; next }
            if (line ~ /^Enabled:/) { sub(/^Enabled:[ \t]*/, "", line); enabled = tolower(line); next }
            if (!deb822 && $1 == "deb") {
                # Skip the optional "[ arch=amd64 signed-by=... ]" block.
                f = 2
                if ($f ~ /^\[/) { while (f <= NF && $f !~ /\]$/) f++; f++ }
                consider($f, $(f + 1))
            }
        }
        END { flush(); if (!found) exit 1 }
    ' "$@"
}

if [[ "${1:-}" == "--mirror-from" ]]; then
    shift
    mirror_from_sources "$@" || die "no Debian mirror found in: $*"
    exit 0
fi

tools_dir() {
    if [[ -n "${AUTOTUNE_TOOLS:-}" ]]; then
        printf '%s\n' "$AUTOTUNE_TOOLS"
    else
        printf '%s\n' "${XDG_DATA_HOME:-$HOME/.local/share}/autotune-tools"
    fi
}

# "qemu-aarch64 version 10.1.2 (Debian ...)" -> 0 when at least the minimum.
qemu_is_recent() {
    local version major minor
    version=$("$1" --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' | head -n1)
    [[ -n "$version" ]] || return 1
    read -r major minor <<<"$version"
    (( major > QEMU_MIN_MAJOR || (major == QEMU_MIN_MAJOR && minor >= QEMU_MIN_MINOR) ))
}

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

[[ "$(uname -m)" == "x86_64" ]] || {
    say "host is $(uname -m): Arm kernels build natively with the host compiler; nothing to do"
    exit 0
}

# 1. Compiler, linker and the aarch64 C library (for static linking) from bookworm.
needed=()
command -v clang-19 >/dev/null || needed+=(clang-19)
command -v ld.lld-19 >/dev/null || needed+=(lld-19)
[[ -f /usr/aarch64-linux-gnu/lib/libc.a ]] || needed+=(libc6-dev-arm64-cross)
# clang finds the aarch64 headers and start files through a cross GCC's runtime folder
# (crtbegin.o, libgcc.a); without it it falls back to the host's /usr/include.
compgen -G '/usr/lib/gcc-cross/aarch64-linux-gnu/*/libgcc.a' >/dev/null || needed+=(libgcc-12-dev-arm64-cross)
if ((${#needed[@]})); then
    say "installing ${needed[*]} with apt-get"
    if ! as_root apt-get install -y --no-install-recommends "${needed[@]}"; then
        say "apt-get install failed; refreshing the package lists once and retrying"
        as_root apt-get update
        as_root apt-get install -y --no-install-recommends "${needed[@]}"
    fi
else
    say "clang-19, lld-19, libc6-dev-arm64-cross and libgcc-12-dev-arm64-cross already installed"
fi

TOOLS=$(tools_dir)
mkdir -p "$TOOLS"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Private list, state and archive folders under $WORK/$1 for the one-line list $WORK/$1.list
# (plus any further -o options): the machine's apt configuration and caches stay as they are.
apt_private() {
    local name=$1
    shift
    mkdir -p "$WORK/$name/lists/partial" "$WORK/$name/archives/partial"
    APT_OPTS=(
        -o "Dir::Etc::SourceList=$WORK/$name.list"
        -o "Dir::Etc::SourceParts=/dev/null"
        -o "Dir::State::Lists=$WORK/$name/lists"
        -o "Dir::Cache::Archives=$WORK/$name/archives"
        -o "Dir::Cache::pkgcache="
        -o "Dir::Cache::srcpkgcache="
        -o "APT::Sandbox::User=root"
        "$@"
    )
}

machine_mirror() {
    [[ -n "${MIRROR:-}" ]] && return 0
    [[ -f "$KEYRING" ]] || die "$KEYRING missing: install debian-archive-keyring"
    local sources=() f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] && sources+=("$f")
    done
    ((${#sources[@]})) || die "no apt sources files under /etc/apt"
    MIRROR=$(mirror_from_sources "${sources[@]}") || die "no Debian mirror in ${sources[*]}"
    say "Debian mirror from the machine's apt sources: $MIRROR"
}

# 2. QEMU >= 10.1 from trixie-backports, unpacked into the tools folder: qemu-aarch64 runs
# the Arm builds, and qemu-x86_64 of the same package runs the host's own x86 library under
# smaller x86 CPU models (-cpu Nehalem, SandyBridge, Haswell) than this machine's, to check
# that a library meeting a CPU without some of its kernels' instructions leaves them out.
QEMU_ROOT="$TOOLS/qemu"
QEMU_BIN="$QEMU_ROOT/usr/bin/qemu-aarch64"
QEMU_TARGETS=(aarch64 x86_64)
qemu_unpacked() {
    local t
    for t in "${QEMU_TARGETS[@]}"; do
        [[ -x "$QEMU_ROOT/usr/bin/qemu-$t" ]] && qemu_is_recent "$QEMU_ROOT/usr/bin/qemu-$t" || return 1
    done
}
install_qemu() {
    if qemu_unpacked; then
        say "QEMU already unpacked: $("$QEMU_BIN" --version | head -n1) at $QEMU_ROOT/usr/bin (${QEMU_TARGETS[*]})"
        return 0
    fi
    machine_mirror
    printf 'deb [signed-by=%s] %s %s main\n' "$KEYRING" "$MIRROR" "$BACKPORTS_SUITE" >"$WORK/backports.list"
    apt_private backports
    say "fetching the $BACKPORTS_SUITE package list into a temporary folder"
    apt-get "${APT_OPTS[@]}" -qq update

    # trixie's qemu-user carries static binaries (qemu-user-static became a transitional
    # package); take the first of the two whose unpacked emulators all run here.
    local pkg deb t candidate ok
    for pkg in qemu-user qemu-user-static; do
        (cd "$WORK" && apt-get "${APT_OPTS[@]}" -qq download "$pkg/$BACKPORTS_SUITE") || continue
        deb=$(ls "$WORK"/"${pkg}"_*.deb 2>/dev/null | head -n1)
        [[ -n "$deb" ]] || continue
        rm -rf "$WORK/root"
        dpkg -x "$deb" "$WORK/root"
        ok=1
        for t in "${QEMU_TARGETS[@]}"; do
            candidate="$WORK/root/usr/bin/qemu-$t"
            [[ -x "$candidate" ]] || candidate="$WORK/root/usr/bin/qemu-$t-static"
            [[ -x "$candidate" ]] && qemu_is_recent "$candidate" || ok=0
        done
        if ((ok)); then
            mkdir -p "$QEMU_ROOT/usr/bin"
            for t in "${QEMU_TARGETS[@]}"; do
                candidate="$WORK/root/usr/bin/qemu-$t"
                [[ -x "$candidate" ]] || candidate="$WORK/root/usr/bin/qemu-$t-static"
                # Renamed into place: a run of the old emulator meanwhile keeps its copy.
                cp "$candidate" "$QEMU_ROOT/usr/bin/.qemu-$t.new"
                mv -f "$QEMU_ROOT/usr/bin/.qemu-$t.new" "$QEMU_ROOT/usr/bin/qemu-$t"
                say "unpacked $(basename "$deb") -> $QEMU_ROOT/usr/bin/qemu-$t"
            done
            say "$("$QEMU_BIN" --version | head -n1)"
            return 0
        fi
        say "$(basename "$deb") lacks qemu-${QEMU_TARGETS[*]} >= $QEMU_MIN_MAJOR.$QEMU_MIN_MINOR; trying the next package"
    done
    die "could not obtain qemu-${QEMU_TARGETS[*]} >= $QEMU_MIN_MAJOR.$QEMU_MIN_MINOR from $MIRROR $BACKPORTS_SUITE"
}
install_qemu

# 3. The arm64 netlib testers: the same Debian release as the x86-64 ones (libblas-test),
# from the machine's own suite, fetched for arm64 through private lists rather than
# `dpkg --add-architecture`, and unpacked (never installed) into a sysroot QEMU reads
# with -L.  The testers load libblas.so.3, libgfortran.so.5 and the C library.
NETLIB_ROOT="$TOOLS/arm64-netlib"
NETLIB_PACKAGES=(libblas-test libblas3 libgfortran5 libgcc-s1 libc6)
NETLIB_STAMP="$NETLIB_ROOT/.unpacked"
if [[ -f "$NETLIB_STAMP" && "$(cat "$NETLIB_STAMP")" == "${NETLIB_PACKAGES[*]}" ]]; then
    say "arm64 netlib testers already unpacked: $NETLIB_ROOT/usr/lib/aarch64-linux-gnu/blas"
    exit 0
fi
machine_mirror
suite=$(. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}")
[[ -n "$suite" ]] || suite=bookworm
printf 'deb [signed-by=%s] %s %s main\n' "$KEYRING" "$MIRROR" "$suite" >"$WORK/arm64.list"
apt_private arm64 -o "APT::Architecture=arm64" -o "APT::Architectures=arm64"
say "fetching the $suite arm64 package list into a temporary folder"
apt-get "${APT_OPTS[@]}" -qq update
mkdir -p "$WORK/debs"
(cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" -qq download "${NETLIB_PACKAGES[@]}") \
    || die "could not download ${NETLIB_PACKAGES[*]} (arm64) from $MIRROR $suite"
rm -rf "$NETLIB_ROOT.new"
for deb in "$WORK"/debs/*.deb; do
    dpkg-deb -x "$deb" "$NETLIB_ROOT.new"
    say "unpacked $(basename "$deb")"
done
# dpkg's alternatives would link libblas.so.3 into the library folder; the link is
# relative so that it resolves inside the sysroot, not on this machine.
blas_dir="$NETLIB_ROOT.new/usr/lib/aarch64-linux-gnu"
[[ -f "$blas_dir/blas/xblat3s" && -f "$blas_dir/blas/libblas.so.3" ]] || die "libblas-test:arm64 has no xblat3s"
ln -sfn blas/libblas.so.3 "$blas_dir/libblas.so.3"
printf '%s\n' "${NETLIB_PACKAGES[*]}" >"$NETLIB_ROOT.new/.unpacked"
rm -rf "$NETLIB_ROOT"
mv "$NETLIB_ROOT.new" "$NETLIB_ROOT"
say "arm64 netlib testers unpacked: $NETLIB_ROOT/usr/lib/aarch64-linux-gnu/blas"
