"""A configuration's clock in words, one wording for the daemon (recommend, tune, status,
report, its log) and the agent (its log of the configuration a user applied): a set frequency
in MHz; where none is set, what the cpus run at where that is known (the daemon's
planner.workload_clock), else only that none is set. No import beyond the standard library: the
agent on a board has no daemon extra."""

from __future__ import annotations

# what cpus run at where no frequency is set (a recommendation's or a tune step's ``clock``)
GOVERNOR_CLOCK = "governor's choice"
OWN_CLOCK = "no set frequency (the board's own clock)"


def clock_text(freq_khz: int | None, clock: str | None = None) -> str:
    """A configuration's frequency in words ("1400 MHz"); where none is set, ``clock``, what
    its cpus run at (planner.workload_clock; None: an older daemon did not say: the
    governor's choice, as it meant)."""
    return (clock or GOVERNOR_CLOCK) if freq_khz is None else f"{freq_khz / 1000:g} MHz"


def kept_clock_text(freq_khz: int | None) -> str:
    """The clock of a kept record of the configuration in force ("at 1400 MHz"): the record
    keeps no clock of its own, so where no frequency is set what its cpus run at is not known
    from it, and no governor is named ("with no set frequency")."""
    return "with no set frequency" if freq_khz is None else f"at {clock_text(freq_khz)}"
