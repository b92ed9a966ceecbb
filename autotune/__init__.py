"""autotune: install-time autotuned GEMM with input-aware kernel executing plans."""

__version__ = "0.1.0"
