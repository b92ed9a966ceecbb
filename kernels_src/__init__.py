"""The C sources of autotune (harness, runtime, templates), shipped as package data."""
