"""Reader for the tidy CSV exchange format (one row per measurement) -> Observations per group.

Columns: platform, workload, variant, cores, freq_mhz, time_s (required), input, rep, energy_j,
power_w (optional) and any other columns. Without an ``input`` column the ``size`` column of the
layout eval-mpet reads (data/bench_suite_*) names the input, and without either each group is
one input; ``rep`` is never needed (rows of one configuration are repetitions either way).
Extra columns whose non-empty cells are all numbers become counters; text columns (hardware
descriptions, sources) are ignored. Empty cell = missing.
The file is UTF-8 (a byte-order mark is allowed). Core counts are whole numbers >= 1, times are
> 0 (``zero_time="missing"`` reads a time of 0, a run shorter than its timer's resolution, as
missing instead), frequencies > 0; anything else is an error naming the line.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .analysis_args import ZERO_TIME
from .models.base import Observations

KEY = ("platform", "workload", "input", "variant")
REQUIRED = ("platform", "workload", "variant", "cores", "freq_mhz", "time_s")
INPUT_COLUMNS = ("input", "size")  # the first present names a group's input
NUMERIC = ("cores", "freq_mhz", "rep", "time_s", "energy_j", "power_w")


class TidyError(ValueError):
    """A tidy CSV that cannot be read; the message names file, line and column."""


@dataclass
class Group:
    """The measurements of one (platform, workload, input, variant)."""
    key: tuple[str, str, str, str]
    obs: Observations
    lines: np.ndarray  # CSV line number of each row (header = line 1)

    @property
    def label(self) -> str:
        return "/".join(k for k in self.key if k)


def _number(text: str, where: str, column: str) -> float:
    text = text.strip()
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise TidyError(f"{where}: column '{column}': {text!r} is not a number") from None




def read_tidy(path: str | Path, zero_time: str = "error") -> list[Group]:
    """Groups of the tidy CSV at ``path`` in order of first appearance."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TidyError(f"{path}: cannot open: {exc.strerror or exc}") from None
    if b"\0" in raw[:65536]:
        # no text holds NUL: a database, an archive, a binary given by mistake, which no
        # re-encoding (the advice below) makes a CSV
        raise TidyError(f"{path}: not a text file (it holds NUL bytes: a database, an archive "
                        "or another binary file); give a CSV of measurements, one row per "
                        "run")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise TidyError(f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                        "save the file as UTF-8, e.g. iconv -f latin1 -t utf-8 "
                        f"{path.name} > utf8.csv") from None
    return parse_tidy(io.StringIO(text, newline=""), str(path), zero_time=zero_time)


def _check_row(vals: list[float], row: list[str], col: dict[str, int], where: str,
               zero_time: str) -> None:
    """Refuse values no measurement can have (cores, time, frequency); vals follows NUMERIC."""
    cores, freq, time_s = vals[0], vals[1], vals[3]
    if math.isnan(cores):
        raise TidyError(f"{where}: column 'cores' is empty")
    if cores < 1 or cores != int(cores):
        raise TidyError(f"{where}: column 'cores': {row[col['cores']]!r} is not a whole "
                        "number >= 1")
    if freq <= 0 or math.isinf(freq):
        raise TidyError(f"{where}: column 'freq_mhz': {row[col['freq_mhz']]!r} is not a "
                        "frequency > 0 (MHz; leave the cell empty where it is unknown)")
    if time_s == 0 and zero_time == "missing":
        vals[3] = math.nan
    elif time_s <= 0 or math.isinf(time_s):
        raise TidyError(f"{where}: column 'time_s': {row[col['time_s']]!r} is not a time > 0 "
                        "(seconds; leave the cell empty where the run has no time"
                        + (", or give --zero-times missing to read 0 as missing)"
                           if time_s == 0 else ")"))


def parse_tidy(lines: Iterable[str], name: str = "<csv>", zero_time: str = "error"
               ) -> list[Group]:
    """Groups from CSV text lines; ``name`` labels error messages; ``zero_time`` is "error"
    (a time of 0 is refused) or "missing" (read as an empty cell)."""
    if zero_time not in ZERO_TIME:
        raise ValueError(f"zero_time must be one of {ZERO_TIME}, not {zero_time!r}")
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TidyError(f"{name}: empty file (no header line)") from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TidyError(f"{name}: line 1: missing column(s) {', '.join(missing)}; "
                        f"header is {', '.join(header)}")
    col = {h: i for i, h in enumerate(header)}
    input_col = next((c for c in INPUT_COLUMNS if c in col), None)
    extra = [h for h in header if h not in REQUIRED and h not in NUMERIC and h
             and h not in ("input", input_col)]
    rows: list[list[str]] = []
    numbers: list[list[float]] = []
    line_no: list[int] = []
    for row in reader:
        lineno = reader.line_num
        if not row or all(c.strip() == "" for c in row):
            continue
        if len(row) != len(header):
            raise TidyError(f"{name}: line {lineno}: {len(row)} fields, header has {len(header)}")
        where = f"{name}: line {lineno}"
        vals = [_number(row[col[c]], where, c) if c in col else math.nan for c in NUMERIC]
        _check_row(vals, row, col, where, zero_time)
        rows.append(row)
        numbers.append(vals)
        line_no.append(lineno)
    if not rows:
        raise TidyError(f"{name}: no data rows after the header line: nothing to fit "
                        f"(one row per run with {', '.join(REQUIRED)})")
    counters = _counter_columns(rows, extra, col)
    num = np.array(numbers, dtype=float).reshape(-1, len(NUMERIC))
    keys = [tuple(r[col[k]].strip() if k != "input" else
                  (r[col[input_col]].strip() if input_col else "") for k in KEY) for r in rows]
    order: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        order.setdefault(k, []).append(i)
    groups = []
    for key, idx in order.items():
        ix = np.array(idx)
        size = np.array([_maybe_float(keys[i][2]) for i in idx])
        obs = Observations(
            cores=num[ix, 0], time_s=num[ix, 3], freq_mhz=num[ix, 1],
            input_size=size, variant=np.array([key[3]] * len(idx), dtype=object),
            counters={c: v[ix] for c, v in counters.items()},
            energy_j=num[ix, 4] if "energy_j" in col else None,
            power_w=num[ix, 5] if "power_w" in col else None)
        groups.append(Group(key=key, obs=obs, lines=np.array(line_no)[ix]))  # type: ignore[arg-type]
    return groups


def _maybe_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _counter_columns(rows: list[list[str]], extra: list[str], col: dict[str, int]) -> dict[str, np.ndarray]:
    # a column is a counter when every non-empty cell is a number; text columns are metadata
    out = {}
    for name in extra:
        cells = [r[col[name]].strip() for r in rows]
        vals = [_maybe_float(c) if c else math.nan for c in cells]
        if all(not c or not math.isnan(v) for c, v in zip(cells, vals)):
            out[name] = np.array(vals, dtype=float)
    return out


def median_reps(obs: Observations) -> Observations:
    """One row per (cores, freq_mhz): the median over repetitions of every numeric column
    (NaNs ignored; a configuration whose times are all missing keeps NaN)."""
    fq = obs.freq_mhz if obs.freq_mhz is not None else np.full(len(obs), np.nan)
    keys = np.column_stack([obs.cores, np.nan_to_num(fq, nan=-1.0)])
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = np.asarray(inv).ravel()

    def med(a: np.ndarray | None) -> np.ndarray | None:
        if a is None:
            return None
        out = np.full(len(uniq), np.nan)
        for j in range(len(uniq)):
            v = a[inv == j]
            v = v[np.isfinite(v)]
            if v.size:
                out[j] = np.median(v)
        return out

    first = np.array([np.flatnonzero(inv == j)[0] for j in range(len(uniq))])
    return Observations(
        cores=uniq[:, 0], time_s=med(obs.time_s),
        freq_mhz=None if obs.freq_mhz is None else np.where(uniq[:, 1] < 0, np.nan, uniq[:, 1]),
        input_size=None if obs.input_size is None else obs.input_size[first],
        variant=None if obs.variant is None else obs.variant[first],
        counters={k: med(v) for k, v in obs.counters.items()},
        energy_j=med(obs.energy_j), power_w=med(obs.power_w))
