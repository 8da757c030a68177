"""The datasets shipped with opptune (``opptune.data``: the repository's ``data/`` in a clone or
an editable install, a copy beside the package in a regular one), found by their folder name
from any directory, as the docs write them (``--data data/bench_suite_rpi4/data.csv``)."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def shipped() -> list[str]:
    """The folder names of the shipped datasets (each with its SOURCE.md)."""
    if not DATA_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in DATA_DIR.glob("*/SOURCE.md"))


def find_data(given: str) -> str:
    """``given`` where that file is; else, where it names a shipped dataset by its folder
    (``NAME``, ``data/NAME``, ``data/NAME/FILE``; FILE defaults to data.csv), the shipped
    file; else ``given`` as it is (its reader then says what is missing). An absolute path is
    the user's own file: it is never swapped for a shipped one."""
    path = Path(given)
    if path.exists() or path.is_absolute():
        return given
    parts = path.parts[1:] if path.parts[:1] == ("data",) else path.parts
    if not 1 <= len(parts) <= 2 or parts[0] not in shipped():
        return given
    found = DATA_DIR.joinpath(*parts, *(("data.csv",) if len(parts) == 1 else ()))
    return str(found) if found.is_file() else given


def not_found_hint(given: str) -> str:
    """For a relative path that is not there (perhaps a dataset's, as the docs write them):
    the datasets found by name, to give instead. An absolute path was the user's own file."""
    names = shipped()
    if not names or Path(given).is_absolute():
        return ""
    return (f"; the datasets opptune carries, found by name from any directory: "
            f"{', '.join(names)} (e.g. --data {names[0]})")
