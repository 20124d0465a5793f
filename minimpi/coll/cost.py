"""The alpha-beta-gamma cost model that ``auto`` uses to pick a collective algorithm.

A message of n bytes costs ``alpha + n*beta``; reducing n bytes costs ``n*gamma``. Each
algorithm's registration gives its predicted time as a formula in (p, n) - the same formula
its docstring states - and ``auto`` picks the least. The defaults were measured on the TCP
transport over loopback on a 2-core machine (``minimpi explain --calibrate`` measures
them again on yours); override them with ``MINIMPI_COST_ALPHA`` (seconds),
``MINIMPI_COST_BETA`` and ``MINIMPI_COST_GAMMA`` (seconds per byte).

Segmented (pipelined) algorithms use ``segment`` bytes per message.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class CostModel:
    alpha: float = 60e-6          # per-message latency (s)
    beta: float = 1 / 1.5e9       # per-byte transfer time (s/B)
    gamma: float = 1 / 3.0e9      # per-byte reduction time (s/B)
    segment: int = 256 * 1024     # pipeline segment size (B)

    def describe(self) -> str:
        return (f"alpha = {self.alpha * 1e6:.1f} us per message, "
                f"beta = {1 / self.beta / 1e9:.2f} GB/s, gamma = {1 / self.gamma / 1e9:.2f} GB/s "
                f"reduction, segment = {self.segment // 1024} KiB")


def default_model() -> CostModel:
    model = CostModel()
    env = os.environ
    if "MINIMPI_COST_ALPHA" in env:
        model = replace(model, alpha=float(env["MINIMPI_COST_ALPHA"]))
    if "MINIMPI_COST_BETA" in env:
        model = replace(model, beta=float(env["MINIMPI_COST_BETA"]))
    if "MINIMPI_COST_GAMMA" in env:
        model = replace(model, gamma=float(env["MINIMPI_COST_GAMMA"]))
    if "MINIMPI_COST_SEGMENT" in env:
        model = replace(model, segment=int(env["MINIMPI_COST_SEGMENT"]))
    return model


def ceil_log2(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def floor_log2(p: int) -> int:
    return p.bit_length() - 1 if p > 0 else 0


def segments(n: int, segment: int) -> int:
    return max(1, math.ceil(n / segment))
