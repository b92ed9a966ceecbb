"""Host detection: what machine is this, and what may its kernels use.

Detection lives in the parse functions below, each a pure function of recorded
text (``/proc/cpuinfo``, HWCAP words, ``sysctl`` output, sysfs cache files) so the
tests can replay machines this one is not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, asdict, field


@dataclass(frozen=True)
class CacheLevel:
    level: int
    kind: str  # "data", "instruction" or "unified"
    size: int  # bytes
    line: int  # bytes
    ways: int
    sets: int
    shared_by: int = 1  # logical CPUs sharing one instance


@dataclass(frozen=True)
class HostInfo:
    arch: str  # "x86_64" | "aarch64"
    os: str  # "linux" | "darwin"
    cpu: str  # model name as the OS reports it
    features: tuple[str, ...]  # sorted, lower case: "avx512f", "fma", "asimd", "sme2", ...
    svl_bits: int = 0  # SME streaming vector length; 0 without SME
    caches: tuple[CacheLevel, ...] = field(default_factory=tuple)
    cores: int = 1
    compiler: str = ""  # e.g. "gcc 12.2.0"; not part of the fingerprint

    def has(self, *features: str) -> bool:
        return all(f in self.features for f in features)

    def cache(self, level: int, kind: str = "data") -> CacheLevel | None:
        for cache in self.caches:
            if cache.level == level and cache.kind in (kind, "unified"):
                return cache
        return None

    @property
    def fingerprint(self) -> str:
        """Stable identity of the hardware: everything a tuned table depends on.

        The compiler is left out on purpose: a compiler upgrade rebuilds kernels
        through the content-hashed build cache, it does not make a different host.
        """
        identity = {k: v for k, v in self.to_dict().items() if k != "compiler"}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["features"] = list(self.features)
        data["caches"] = [asdict(c) for c in self.caches]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "HostInfo":
        return cls(
            arch=data["arch"],
            os=data["os"],
            cpu=data["cpu"],
            features=tuple(data["features"]),
            svl_bits=int(data.get("svl_bits", 0)),
            caches=tuple(CacheLevel(**c) for c in data.get("caches", [])),
            cores=int(data.get("cores", 1)),
            compiler=data.get("compiler", ""),
        )
