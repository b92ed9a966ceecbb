"""Build the C harness and run it: one process per (library, interface, dtype, threads, alignment).

A process per configuration keeps each library's thread pool alone on the cores
(an idle OpenBLAS pool spinning next to MKL's would tax MKL) and lets every
library read its own thread-count variable at load time.
"""

from __future__ import annotations

import hashlib
import json
import signal
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .peers import Peer, peer_environment

SOURCE = Path(__file__).with_name("bench_gemm.c")


#: op(A) op(B) as BLAS names them: "tn" is A^T B (PyTorch's x @ W.T, column-major).
TRANSPOSITIONS = ("nn", "nt", "tn", "tt")


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    K: int
    batch: int = 1
    trans: str = "nn"

    def __post_init__(self) -> None:
        if self.trans not in TRANSPOSITIONS:
            raise ValueError(f"transposition {self.trans!r} is not one of {', '.join(TRANSPOSITIONS)}")

    @property
    def label(self) -> str:
        base = f"{self.M}x{self.N}x{self.K}" + (f" {self.trans}" if self.trans != "nn" else "")
        return f"{self.batch}x({base})" if self.batch > 1 else base

    @property
    def arg(self) -> str:
        return (f"{self.M},{self.N},{self.K}" + (f",{self.batch}" if self.batch > 1 else "")
                + (f":{self.trans}" if self.trans != "nn" else ""))

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K * self.batch

    @property
    def square(self) -> bool:
        return self.M == self.N == self.K and self.batch == 1 and self.trans == "nn"


@dataclass(frozen=True)
class Config:
    dtype: str      # f32 | f64
    threads: int
    align: int      # 64: what aligned_alloc gives a C program; 16: numpy's default guarantee
    cold: int       # cold-cache samples per shape (0: hot only)


@dataclass(frozen=True)
class Point:
    """One shape measured through one peer in one configuration (times in seconds per call)."""

    peer: Peer
    config: Config
    shape: Shape
    status: str
    detail: str
    err: float
    check: bool
    best_s: float
    median_s: float
    cold_best_s: float
    cold_median_s: float
    # One core's multiply-add peak in this dtype, measured in the same process just
    # before, between and after this point's timed repeats (nan where bench_gemm has
    # no loop for the CPU).
    core_gflops: float = float("nan")


def build_harness(build_dir: Path, cc: str | None = None) -> Path:
    """Compile bench_gemm.c once per content; returns the executable."""
    compiler = cc or os.environ.get("CC") or shutil.which("cc") or "gcc"
    flags = ["-O2", "-std=c11", "-Wall", "-Wextra"]
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join([compiler, *flags]).encode()).hexdigest()[:12]
    exe = build_dir / f"bench_gemm-{digest}"
    if exe.exists():
        return exe
    build_dir.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_suffix(".tmp")
    proc = subprocess.run([compiler, *flags, "-o", str(tmp), str(SOURCE), "-ldl", "-lm"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {SOURCE.name} failed:\n{proc.stderr}")
    tmp.replace(exe)
    return exe


def _seconds(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    return number if number > 0 else float("nan")


def _gflops(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    return number if number > 0 else float("nan")


def run_peer(exe: Path, peer: Peer, config: Config, shapes: list[Shape], *, min_time: float,
             repeats: int, timeout: float = 900.0) -> list[Point]:
    """Measure every shape through one peer; a peer that cannot run yields failed points."""
    if not peer.found:
        return [Point(peer, config, s, "missing", peer.missing, float("nan"), False, *(float("nan"),) * 4)
                for s in shapes]
    env = peer_environment(peer, config.threads)
    cmd = [str(exe), "--lib", str(peer.path), "--api", peer.api, "--dtype", config.dtype,
           "--threads", str(config.threads), "--align", str(config.align), "--min-time", f"{min_time:g}",
           "--repeats", str(repeats), "--cold", str(config.cold), *(s.arg for s in shapes)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr, code = "timed out", None
    by_arg: dict[str, dict[str, object]] = {}
    fatal = ""
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "fatal" in record:
            fatal = f"{record['fatal']}: {record.get('detail', '')}"
        elif "shape" in record:
            by_arg[str(record["shape"])] = record
    points = []
    for shape in shapes:
        record = by_arg.get(shape.arg)
        if record is None:
            # The process died before this shape (a crash inside the library counts here).
            crash = f"crashed ({signal.Signals(-code).name})" if code is not None and code < 0 else ""
            why = fatal or crash or (stderr.strip().splitlines() or [f"exit status {code}"])[-1]
            points.append(Point(peer, config, shape, "failed", why[:200], float("nan"), False,
                                *(float("nan"),) * 4))
            continue
        err = float(record["err"])  # type: ignore[arg-type]
        points.append(Point(peer, config, shape, str(record["status"]), str(record.get("detail", "")),
                            err if err >= 0 else float("nan"), bool(record["check"]),
                            _seconds(record["best_s"]), _seconds(record["median_s"]),
                            _seconds(record["cold_best_s"]), _seconds(record["cold_median_s"]),
                            _gflops(record.get("core_gflops", -1))))
    return points
