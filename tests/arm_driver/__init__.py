"""A C driver that checks generated Arm kernels under QEMU (see build.py, driver.c)."""
