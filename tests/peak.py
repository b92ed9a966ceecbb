"""A child Python process's own peak memory, as source the child runs (``PEAK_KIB``
defines ``peak_kib()``).

Not getrusage's ``ru_maxrss`` alone: Linux keeps it across fork and exec, so a
child of the test runner reports the runner's peak if that is higher (458 MB in one
fresh clone's suite, and five bounded-memory tests failed).  ``VmHWM`` belongs to
the new image; ``ru_maxrss`` is the fallback where there is no /proc (macOS counts
it in bytes).
"""

PEAK_KIB = '''
def peak_kib():
    try:
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
    except (OSError, StopIteration):
        import resource, sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak // 1024 if sys.platform == "darwin" else peak
'''
