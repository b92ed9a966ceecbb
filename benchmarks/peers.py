"""The libraries a user would pick instead of autotune: where they are, how to load them.

Every peer is looked up the way its package installs it (Debian's multiarch
directories for OpenBLAS, BLIS and LIBXSMM, the Python prefix for MKL from PyPI).
A peer that is not found is still returned, with the reason, so the run reports it
as missing instead of leaving its column out.

LIBXSMM 1.17 is packaged by Debian as static archives only; :func:`build_xsmm_shim`
links them into a private shared object so the harness can dlopen it like the rest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# interface -> the harness's --api value
INTERFACES = ("cblas", "plan")


@dataclass(frozen=True)
class Peer:
    """One library measured through one interface (``cblas`` or ``plan``)."""

    library: str          # "autotune", "openblas", "blis", "mkl", "libxsmm"
    interface: str        # "cblas": cblas_?gemm; "plan": a handle created once (plan, JIT kernel)
    api: str              # the harness's --api: cblas | plan | xsmm | mkljit
    path: Path | None     # the shared object to dlopen; None when missing
    missing: str = ""     # why it is missing ("" when found)
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # extra environment

    @property
    def found(self) -> bool:
        return self.path is not None and not self.missing


def _ldconfig_paths() -> dict[str, Path]:
    """soname -> path for the host's architecture, from the dynamic linker's cache."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return {}
    found: dict[str, Path] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        # Keep the 64-bit x86 entry when a 32-bit one is listed too.
        if m and ("x86-64" in m.group(2) or m.group(1) not in found):
            found[m.group(1)] = Path(m.group(3))
    return found


def _system_library(sonames: tuple[str, ...], package: str) -> tuple[Path | None, str]:
    cache = _ldconfig_paths()
    for soname in sonames:
        if soname in cache and cache[soname].exists():
            return cache[soname].resolve(), ""
        for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"):
            candidate = Path(directory) / soname
            if candidate.exists():
                return candidate.resolve(), ""
    return None, f"{sonames[0]} not found (install the Debian package {package}: scripts/setup_bench.sh)"


def _python_lib_dirs() -> list[Path]:
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        dirs.append(Path(user_base) / "lib")
    return list(dict.fromkeys(dirs))


def find_mkl() -> tuple[Path | None, str]:
    """libmkl_rt from PyPI's ``mkl`` wheel: it lands in the Python prefix's lib/."""
    for directory in _python_lib_dirs():
        candidates = sorted(directory.glob("libmkl_rt.so*"), key=lambda p: (len(p.name), p.name))
        versioned = [p for p in candidates if re.fullmatch(r"libmkl_rt\.so\.\d+", p.name)]
        chosen = (versioned or candidates)[-1:] if candidates else []
        if chosen:
            return chosen[0], ""
    return None, "libmkl_rt.so not found under the Python prefix (pip install mkl mkl-devel)"


def _xsmm_archives() -> list[Path]:
    names = ("libxsmmnoblas.a", "libxsmm.a")
    for directory in ("/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"):
        paths = [Path(directory) / n for n in names]
        if all(p.exists() for p in paths):
            return paths
    return []


def build_xsmm_shim(build_dir: Path, cc: str = "cc") -> tuple[Path | None, str]:
    """Link Debian's static LIBXSMM into a shared object the harness can dlopen.

    ``libxsmmnoblas`` supplies LIBXSMM's BLAS fallback symbols as stubs, so the shim
    never binds to (and never clashes with) another library's sgemm_.
    """
    archives = _xsmm_archives()
    if not archives:
        return None, "libxsmm.a not found (install the Debian package libxsmm-dev: scripts/setup_bench.sh)"
    digest = hashlib.sha256()
    for archive in archives:
        stat = archive.stat()
        digest.update(f"{archive}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    out = build_dir / f"libxsmm_bench-{digest.hexdigest()[:12]}.so"
    if out.exists():
        return out, ""
    build_dir.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-shared", "-o", str(out), "-Wl,--whole-archive", *map(str, archives),
           "-Wl,--no-whole-archive", "-lpthread", "-lm", "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None, f"linking LIBXSMM into a shared object failed: {proc.stderr.strip()[:300]}"
    return out, ""


def discover(autotune_library: Path, build_dir: Path) -> list[Peer]:
    """Every (library, interface) pair of the comparison, found or with the reason it is not."""
    ours_missing = "" if autotune_library.exists() else (
        f"{autotune_library} does not exist (run `autotune install` with this AUTOTUNE_HOME)")
    ours = autotune_library if not ours_missing else None
    openblas, openblas_why = _system_library(("libopenblas.so.0", "libopenblas.so"), "libopenblas-dev")
    blis, blis_why = _system_library(("libblis.so.4", "libblis.so"), "libblis-dev")
    mkl, mkl_why = find_mkl()
    xsmm, xsmm_why = build_xsmm_shim(build_dir)
    # MKL's runtime dlopens its threading and kernel layers from its own directory.
    mkl_env = (("LD_LIBRARY_PATH", os.pathsep.join(
        [str(mkl.parent)] + ([os.environ["LD_LIBRARY_PATH"]] if os.environ.get("LD_LIBRARY_PATH") else []))),
    ) if mkl else ()
    return [
        Peer("autotune", "cblas", "cblas", ours, ours_missing),
        Peer("openblas", "cblas", "cblas", openblas, openblas_why),
        Peer("blis", "cblas", "cblas", blis, blis_why, blis_environment(blis) if blis else ()),
        Peer("mkl", "cblas", "cblas", mkl, mkl_why, mkl_env),
        Peer("autotune", "plan", "plan", ours, ours_missing),
        Peer("libxsmm", "plan", "xsmm", xsmm, xsmm_why),
        Peer("mkl", "plan", "mkljit", mkl, mkl_why, mkl_env),
    ]


# Variables that pin a peer to a code path chosen for another CPU.  A shell may carry
# them (this machine's sets OPENBLAS_CORETYPE=Haswell, which halves OpenBLAS's speed on
# an AVX-512 core); every peer runs without them so each picks its own best path.
PINNING_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "BLIS_ARCH_TYPE", "MKL_ENABLE_INSTRUCTIONS",
                     "MKL_CBWR")

# BLIS 0.9 does not know Zen 5 and falls back to its portable 'generic' sub-configuration
# (about 35 GFLOPS fp32 at 512^3); 'skx' is the AVX-512 one such a CPU can run.  Pinning it
# anywhere else is wrong: on an AVX2-only CPU the skx kernels die of SIGILL.
_BLIS_CHOICE = """
import ctypes, sys
blis = ctypes.CDLL(sys.argv[1])
blis.bli_init()
blis.bli_arch_string.restype = ctypes.c_char_p
names = [blis.bli_arch_string(i) for i in range(64)]
print(names[blis.bli_arch_query_id()].decode())
print(" ".join(n.decode() for n in names if n))
"""


def blis_pin(own_choice: str, sub_configs: list[str], cpu_features: set[str]) -> tuple[tuple[str, str], ...]:
    """The BLIS_ARCH_TYPE to run BLIS with: none where it chose a tuned sub-configuration itself,
    'skx' where it fell back to 'generic' on an AVX-512 CPU.  BLIS 0.9 reads the variable with
    atoi, so the pin is the sub-configuration's index in its own list."""
    if own_choice == "generic" and "avx512f" in cpu_features and "skx" in sub_configs:
        return (("BLIS_ARCH_TYPE", str(sub_configs.index("skx"))),)
    return ()


def blis_environment(library: Path) -> tuple[tuple[str, str], ...]:
    """Ask the installed BLIS, in a child process without any pin, which sub-configuration it
    picks on this CPU, and pin a better one only where it picked the portable fallback."""
    from autotune.host import detect_cpu

    env = {k: v for k, v in os.environ.items() if k not in PINNING_VARIABLES}
    try:
        proc = subprocess.run([sys.executable, "-c", _BLIS_CHOICE, str(library)], capture_output=True,
                              text=True, env=env, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        return ()
    # BLIS runs on the whole CPU, whatever AUTOTUNE_ISA caps for autotune.
    return blis_pin(lines[0], lines[1].split(), set(detect_cpu().features))


def peer_environment(peer: Peer, threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a peer runs in: the caller's minus pinning variables, plus thread counts."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in PINNING_VARIABLES}
    env.update(thread_env(threads))
    env.update(dict(peer.env))
    return env


def pinned_in_environment() -> dict[str, str]:
    """The pinning variables the caller's environment sets (reported, then dropped)."""
    return {k: os.environ[k] for k in PINNING_VARIABLES if k in os.environ}


def thread_env(threads: int) -> dict[str, str]:
    """Every library's own thread-count variable, so each runs with the same count."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "BLIS_NUM_THREADS": n,
            "MKL_NUM_THREADS": n, "AUTOTUNE_NUM_THREADS": n, "MKL_DYNAMIC": "FALSE"}
