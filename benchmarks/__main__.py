"""`python -m benchmarks`: autotune against its peers, side by side in one run."""

from . import main

raise SystemExit(main())
