"""Byte sizes as people write them: ``64KiB``, ``4MiB``, ``1GB``, ``8`` (bytes)."""
from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(text: str) -> int:
    """Parse ``'64KiB'`` -> 65536. Raises ValueError with the accepted forms."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a byte size: {text!r} (expected e.g. 8, 64KiB, 4MiB, 1GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: int) -> str:
    """``16777216`` -> ``'16 MiB'``, ``1536`` -> ``'1.5 KiB'``, ``100`` -> ``'100 B'``."""
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    if unit == "B":
        return f"{n} B"
    return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
