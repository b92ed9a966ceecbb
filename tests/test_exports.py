"""libautotune exports its public API and the BLAS names, nothing else.

The kernels (hundreds of at_sgemm_<isa>_... symbols), the generated tables and
the at__ internals are local: a program, or another BLAS in the same process,
can neither bind to them nor interpose on them.  The public set is derived from
autotune.h (link.public_symbols); this checks the built library against it, and
the derivation against a pattern and the names callers rely on.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from autotune import plans
from autotune.link import public_symbols
from autotune.runtime import loader

PUBLIC = re.compile(r"^(at_[a-z0-9_]+|cblas_[sd]gemm(_batch(_strided)?)?|cblas_xerbla|[sd]gemm_|xerbla_"
                    r"|RowMajorStrg|CBLAS_CallFromC)$")
RELIED_ON = {"at_gemm", "at_gemm_batch_strided", "at_last_error", "at_plan_create", "at_plan_execute",
             "at_kernel_get", "at_params_set", "at_cpu_check", "sgemm_", "dgemm_", "xerbla_", "cblas_xerbla",
             "cblas_sgemm", "cblas_dgemm", "cblas_sgemm_batch", "cblas_dgemm_batch_strided", "RowMajorStrg"}


def dynamic_symbols(path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_the_public_set_is_the_header_and_the_blas_names():
    names = set(public_symbols())
    assert RELIED_ON <= names, RELIED_ON - names
    assert all(PUBLIC.match(n) for n in names), [n for n in names if not PUBLIC.match(n)]
    assert not any(n.startswith("at__") for n in names)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_library_exports_exactly_the_public_set(built):
    exported = dynamic_symbols(built.library)
    assert exported == set(public_symbols()), (exported ^ set(public_symbols()))
    kernels = set(plans.kernel_names(loader.load(built.library)))
    assert kernels and not kernels & exported
