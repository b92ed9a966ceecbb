"""fork while other threads are inside libautotune: the child can still plan and compute.

A lock held by another thread at the moment of fork() stays locked forever in
the child, which has only the forking thread.  The library's atfork handlers
take every lock before the fork and release (parent) or reset (child) them
after, so a child never inherits one mid-update or held.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_children_forked_under_load_plan_and_compute(built, tmp_path):
    exe = tmp_path / "fork_client"
    lib_dir = built.library.parent
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Werror", "-pthread", str(ROOT / "tests/c/fork_client.c"),
                    f"-I{lib_dir}", "-o", str(exe), str(built.library), f"-Wl,-rpath,{lib_dir}", "-lm"],
                   check=True)
    done = subprocess.run([str(exe), "2000"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
