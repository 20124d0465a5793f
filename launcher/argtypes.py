"""argparse ``type=`` converters shared by the ``minimpi`` subcommands.

Each turns a bad value into an ``argparse.ArgumentTypeError`` that says what was expected,
so every command reports bad options the same way (exit 2, usage line, one message).
"""
from __future__ import annotations

import argparse

from minimpi._start.binding import BindingError, parse_bind, parse_map
from minimpi.data.units import parse_size


def byte_size(text: str) -> int:
    """``8``, ``64KiB``, ``4MiB``, ``1GiB`` (also ``64k``; ``KB``/``MB`` are powers of 1000)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """A number of processes or ranks: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("the number of processes must be at least 1")
    return n


def seconds(text: str) -> float:
    """A positive number of seconds."""
    t = _number_of_seconds(text)
    if t <= 0:
        raise argparse.ArgumentTypeError("a timeout must be positive")
    return t


def seconds_or_off(text: str) -> float:
    """A number of seconds, or 0 to turn the feature off."""
    t = _number_of_seconds(text)
    if t < 0:
        raise argparse.ArgumentTypeError("must be 0 (off) or a positive number of seconds")
    return t


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty or contain ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _number_of_seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def bind_level(text: str) -> str:
    """``--bind-to``: none, core, hwthread, socket (package), numa, optionally ``:N``."""
    try:
        level, count = parse_bind(text)
    except BindingError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None
    return level if count == 1 else f"{level}:{count}"


def map_level(text: str) -> str:
    """``--map-by``: slot, core, hwthread, socket (package), numa, node."""
    try:
        return parse_map(text)
    except BindingError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None
