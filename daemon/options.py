"""Checks of command-line options that several ``opptune`` commands share (the commands' own
modules and ``cli`` import it; it imports none of them)."""

from __future__ import annotations

import argparse
import math
import re
import sys


def below_least(cmd: str, args: argparse.Namespace, least: dict[str, int]) -> bool:
    """Whether an option of ``least`` (its dest -> its least value) was given below it; the
    first such is said in one line naming the option typed (the daemon checks them too, for
    other clients, but names its own keys)."""
    for key, low in least.items():
        v = getattr(args, key)
        if isinstance(v, int) and v < low:
            print(f"opptune {cmd}: --{key.replace('_', '-')} must be >= {low}, not {v}",
                  file=sys.stderr)
            return True
    return False


_FREQUENCY = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([kmg]hz)?$")
_HZ = {"khz": 1e3, "mhz": 1e6, "ghz": 1e9}


def parse_frequencies(text: str, unit: str) -> list[float]:
    """Comma-separated frequencies in ``unit`` ("kHz" or "MHz": what a bare number means to
    the command; sysfs counts kHz, the tables print MHz). Each may carry its own unit, so
    "1.4GHz", "1400MHz" and "1400000kHz" are one clock to every command. ValueError saying
    what was wrong, for the caller to prefix with its option."""
    out = []
    for part in text.split(","):
        m = _FREQUENCY.match(part.strip().lower().replace(" ", ""))
        value = float(m.group(1)) * _HZ[m.group(2) or unit.lower()] / _HZ[unit.lower()] \
            if m else math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{part.strip()!r} is not a frequency: give numbers above 0 in "
                             f"{unit} or with a unit, separated by commas, e.g. "
                             f"{'1400000,1800000' if unit == 'kHz' else '1400,1800'} or "
                             f"1.4GHz,1.8GHz")
        out.append(value)
    return out


# how long a follower (sweep/characterize --wait, tune) keeps asking a daemon that stopped
# answering, unless --reconnect-s says otherwise: a restarted daemon goes on with the jobs (or
# session) of its store
RECONNECT_S = 60.0


def _reconnect_seconds(text: str) -> float:
    """--reconnect-s: seconds, 0 or more (0: give up at the first unanswered poll)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds: give 0 or more (default {RECONNECT_S:g})")
    return value


def add_reconnect_option(p: argparse.ArgumentParser, what: str) -> None:
    """--reconnect-s of a command that follows ``what`` through the daemon to their end."""
    p.add_argument("--reconnect-s", type=_reconnect_seconds, default=RECONNECT_S, metavar="S",
                   help=f"while following {what}: how long to keep asking a daemon that "
                        "stopped answering (a restarted one goes on from its store) before "
                        "giving up, exit 1 (default %(default)g; 0: at once); another daemon "
                        "of its fleet that answers is followed at once all the same")
