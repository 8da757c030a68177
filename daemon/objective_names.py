"""The objectives a goal can minimise, by name: what the parsers offer without loading numpy
(objectives.py, which computes them, does)."""

OBJECTIVES = ("time", "energy", "edp", "ed2p")
