"""libautotune exports its public API and the BLAS names, nothing else.

The kernels (hundreds of at_sgemm_<isa>_... symbols), the generated tables and
the at__ internals are local: a program, or another BLAS in the same process,
can neither bind to them nor interpose on them.  The public set is derived from
autotune.h (link.public_symbols); this checks the built library against it, and
the derivation against a pattern and the names callers rely on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from autotune import plans
from autotune.link import public_symbols
from autotune.runtime import loader

PUBLIC = re.compile(r"^(at_[a-z0-9_]+|cblas_[sd]gemm(_batch(_strided)?)?|[sd]gemm_|RowMajorStrg|CBLAS_CallFromC)$")
RELIED_ON = {"at_gemm", "at_gemm_batch_strided", "at_last_error", "at_plan_create", "at_plan_execute",
             "at_kernel_get", "at_params_set", "at_cpu_check", "sgemm_", "dgemm_",
             "cblas_sgemm", "cblas_dgemm", "cblas_sgemm_batch", "cblas_dgemm_batch_strided", "RowMajorStrg"}
#: The host's handlers: a BLAS consumer defines them (or its BLAS does); the library
#: calls them and must never define them, or preloaded it replaces everyone's.
HOST_NAMES = {"xerbla_", "cblas_xerbla"}


def dynamic_symbols(path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_the_public_set_is_the_header_and_the_blas_names():
    names = set(public_symbols())
    assert RELIED_ON <= names, RELIED_ON - names
    assert all(PUBLIC.match(n) for n in names), [n for n in names if not PUBLIC.match(n)]
    assert not any(n.startswith("at__") for n in names)
    assert not names & HOST_NAMES


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_library_exports_exactly_the_public_set(built):
    exported = dynamic_symbols(built.library)
    assert exported == set(public_symbols()), (exported ^ set(public_symbols()))
    kernels = set(plans.kernel_names(loader.load(built.library)))
    assert kernels and not kernels & exported


# A library with its own xerbla_, loaded RTLD_LOCAL, as numpy's lapack_lite is: its
# LAPACK calls its own handler and the preloaded BLAS for products.
HOST_LIBRARY = r"""
#include <stddef.h>
#include <stdio.h>
void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *, const int *);
void xerbla_(const char *srname, const int *info, size_t len)
{
    printf("host xerbla %.*s %d\n", (int)len, srname, *info);
    fflush(stdout);
}
void host_check(void)
{
    int info = 7;
    xerbla_("DGESV ", &info, 6);                   /* the host's LAPACK reporting its own error */
    int m = -1, n = 1, k = 1, ld = 1;
    float one = 1, a = 1, b = 1, c = 0;
    sgemm_("N", "N", &m, &n, &k, &one, &a, &ld, &b, &ld, &one, &c, &ld);  /* a bad product */
}
"""

PROGRAM = r"""
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#ifdef OWN_XERBLA
void xerbla_(const char *srname, const int *info, size_t len)
{
    printf("program xerbla %.*s %d\n", (int)len, srname, *info);
    fflush(stdout);
}
#endif
int main(int argc, char **argv)
{
    void *host = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!host) { printf("dlopen: %s\n", dlerror()); return 1; }
    ((void (*)(void))dlsym(host, "host_check"))();
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("program_handler", [False, True], ids=["no-program-handler", "program-handler"])
def test_preloaded_the_library_leaves_the_host_s_xerbla_alone(built, tmp_path, program_handler):
    """Preloaded, the library's own xerbla_ replaced the host's: numpy's LAPACK argument
    errors stopped raising and its test_xerbla_override was skipped."""
    (tmp_path / "host.c").write_text(HOST_LIBRARY)
    (tmp_path / "main.c").write_text(PROGRAM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libhost.so"), str(tmp_path / "host.c")],
                   check=True, timeout=120)
    subprocess.run(["cc", *(["-DOWN_XERBLA", "-rdynamic"] if program_handler else []), "-o",
                    str(tmp_path / "main"), str(tmp_path / "main.c"), "-ldl"], check=True, timeout=120)
    done = subprocess.run([str(tmp_path / "main"), str(tmp_path / "libhost.so")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "LD_PRELOAD": str(built.library)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    if program_handler:
        # The program's handler is in the global scope: the host's LAPACK binds to it
        # as it would without the preload, and the library reports through it too.
        assert lines == ["program xerbla DGESV  7", "program xerbla SGEMM  3"], done.stdout + done.stderr
        assert "On entry" not in done.stderr
        return
    # The host library's LAPACK reaches its own handler, not the library's.
    assert lines[0] == "host xerbla DGESV  7", done.stdout + done.stderr
    # No handler in reach of the library (the host's is local to it): printed as BLAS
    # does, and the call returns.
    assert lines[1:] == [] and "On entry to SGEMM parameter number  3" in done.stderr, done.stderr
