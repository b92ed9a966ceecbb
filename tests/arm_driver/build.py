"""Build the Arm validation driver with a sample of generated kernels, and run it.

Used by tests/test_arm_kernels.py; independent of autotune.build so the Arm
generators can be checked before (and apart from) the harness.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autotune import codegen, contract
from autotune.home import kernels_src
from autotune.specs import KernelSpec
from autotune.toolchain import Target

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class DriverRun:
    returncode: int
    events: tuple[dict, ...]
    stderr: str


def _registry(specs: list[KernelSpec]) -> str:
    lines = ['#include "driver_registry.h"', "", *contract.declarations(specs), ""]
    return "\n".join([*lines, *contract.record_array("drv_kernels", specs), ""])


def _compile(target: Target, source: Path, obj: Path, extra: tuple[str, ...] = ()) -> None:
    argv = [*target.cc, *target.cflags, *extra, "-c", str(source), "-o", str(obj)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"compile failed: {' '.join(argv)}\n{done.stderr}")


def build_driver(target: Target, specs: list[KernelSpec], workdir: Path,
                 edit: Callable[[KernelSpec, str], str] | None = None) -> Path:
    """Generate and compile ``specs`` (SME2 ones at their own SVL, 512 for a spec
    without), link them with the driver; the executable's path.

    ``edit`` rewrites a generated text before it is compiled: the tests break
    kernels on purpose to show the driver notices.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    sources = []
    for spec in specs:
        generated = codegen.generate(spec)
        path = workdir / generated.filename
        path.write_text(edit(spec, generated.text) if edit else generated.text)
        sources.append(path)
    registry = workdir / "registry.c"
    registry.write_text(_registry(specs))
    includes = ("-I", str(HERE), "-I", str(kernels_src() / "arm"), "-I", str(kernels_src() / "include"))
    sme = ("-DDRV_SME",) if target.isa == "sme2" else ()
    asm = ("-I", str(kernels_src() / "arm"))  # at_asm.h, for the generated and the packing assembly
    jobs = [(src, src.with_suffix(".o"), asm if src.suffix == ".S" else ()) for src in sources]
    jobs.append((registry, workdir / "registry.o", includes))
    jobs.append((HERE / "driver.c", workdir / "driver.o", includes + sme))
    # One canary caller serves the kernel and the runtime drivers.
    abi = HERE.parent / "arm_runtime" / "rt_abi.S"
    jobs.append((abi, workdir / "rt_abi.o", ("-DRT_SME",) if target.isa == "sme2" else ()))
    if target.isa == "sme2":
        jobs.append((kernels_src() / "arm" / "sme2_pack.S", workdir / "sme2_pack.o", asm))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: _compile(target, *job), jobs))
    exe = workdir / "driver"
    argv = [*target.cc, *target.cflags, *target.ldflags, *(str(j[1]) for j in jobs), "-lm", "-o", str(exe)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"link failed: {' '.join(argv)}\n{done.stderr}")
    return exe


def run_driver(target: Target, exe: Path, *args: str, timeout: float = 600) -> DriverRun:
    done = subprocess.run([*target.runner, str(exe), *args], capture_output=True, text=True,
                          timeout=timeout)
    events = tuple(json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    return DriverRun(done.returncode, events, done.stderr)
