"""The K = N install times the quantised kernels at.

Apart from the stage that measures (:mod:`autotune.qsuite`) because what shows
the timings (the report, `autotune show`) needs the shape too, and must not
import the build and the generators to get it.
"""

MEASURE_KN = 1024
