"""``python -m autotune``: the ``autotune`` command without its console script."""
from .cli import main

raise SystemExit(main())
