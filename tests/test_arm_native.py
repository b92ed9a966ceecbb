"""The native aarch64 install, proven in an arm64 Debian userland under QEMU.

scripts/check_arm_native.sh registers qemu-aarch64 with binfmt_misc, builds (once,
cached) a Debian arm64 userland and runs, per CPU model, `autotune install --quick
--only ...` natively inside it: detection from HWCAP/HWCAP2 and the SME vector
length, the host compiler, the table, the library, and autotune.gemm against numpy
(scripts/arm_native_check.py).  It is left out of the default run (pytest.ini);
CI runs it as a stage of its own (.ci/run), as `pytest -m arm_native` does.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_arm_native.sh"
CPUS = ("max,sme512=on", "max,sme256=on", "cortex-a76")


@pytest.mark.arm_native
def test_native_install_on_each_cpu_model():
    if platform.machine() != "x86_64":
        pytest.skip("emulates aarch64 on an x86-64 host; on Arm, `autotune install` is the test")
    if os.geteuid() != 0:
        pytest.skip("needs root: binfmt_misc registration and chroot")
    if not Path("/proc/sys/fs/binfmt_misc").is_dir():
        pytest.skip("the kernel has no binfmt_misc")
    userland = subprocess.run(["bash", str(SCRIPT), "--userland"], capture_output=True, text=True,
                              check=True).stdout.strip()
    # Without the cached userland the script builds it, installing mmdebstrap with apt if need be.
    if not Path(userland).is_file() and not shutil.which("mmdebstrap") and not shutil.which("apt-get"):
        pytest.skip(f"needs mmdebstrap (or apt-get to install it) or the cached userland {userland}")
    done = subprocess.run(["bash", str(SCRIPT), *CPUS], capture_output=True, text=True, timeout=3 * 3600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    for cpu in CPUS:
        assert re.search(rf"^check_arm_native: ok: {re.escape(cpu)} in \d+ s$", log, re.M), log[-4000:]
    assert log.count("products match numpy") == len(CPUS)
    # Each model's host was seen as emulated, and its table says so.
    # (repr() quotes it with " since the text has an apostrophe: "on the host's ...")
    for cpu in CPUS:
        assert re.search(rf"""emulator=["']aarch64 emulated by QEMU -cpu {re.escape(cpu)} """, log), log[-4000:]
    assert Path(userland).is_file()  # built, or kept, for the next run
