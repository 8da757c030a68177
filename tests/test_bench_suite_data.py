"""The bench_suite measurements kept in data/bench_suite_* (one board per file) are evaluated
together by ``opptune eval-mpet --combine``; alone, each file has one platform and nothing to
evaluate (exit 2, one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOARDS = ("local", "rpi4", "odroid_xu4")
FILES = [str(REPO / f"data/bench_suite_{b}/data.csv") for b in BOARDS]


def eval_mpet(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", *argv],
                          capture_output=True, text=True, timeout=300, cwd="/")


def test_each_board_has_its_source_and_the_13_kernels():
    for b, f in zip(BOARDS, FILES):
        assert (REPO / f"data/bench_suite_{b}/SOURCE.md").read_text().startswith(
            f"# bench_suite_{b}")
        text = Path(f).read_text().splitlines()
        assert len({ln.split(",")[1] for ln in text[1:]}) == 13


def test_combined_evaluation():
    p = eval_mpet("--combine", *[x for f in FILES for x in ("--data", f)], "--json")
    assert p.returncode == 0, p.stderr
    (res,) = json.loads(p.stdout)["results"]
    assert res["platforms"] == 3 and res["workloads"] == 13
    assert res["predictions"] == 39  # every kernel on every board, from the other two
    assert res["data"] == " + ".join(FILES)
    for kind in ("t1", "scaling", "full"):
        assert res["summary"]["mpet"][kind]["count"] == 39
    # scenario (b) on the combined files: every kernel on every board from its 1-core runs
    p = eval_mpet("--combine", *[x for f in FILES for x in ("--data", f)], "--scenario", "b",
                  "--json")
    assert p.returncode == 0, p.stderr
    (res,) = json.loads(p.stdout)["results"]
    assert res["scenario"] == "b" and res["predictions"] == 39
    assert res["summary"]["mpet"]["scaling"]["count"] == 39
    assert res["summary"]["mpet"]["t1"] == {"count": 0}


@pytest.mark.parametrize("argv, msg", [
    (("--data", FILES[0]), "no workload is measured on two platforms that share another "
                           "workload (it holds 1 platform); nothing to evaluate: add another "
                           "platform's measurements (--combine evaluates several --data files "
                           "and the store as one database)"),
    (("--combine",), "--combine needs --data FILE.csv"),
    (("--save-csv", "x.csv"), "--size and --save-csv go with --daemon ENDPOINT"),
    (("--combine", "--data", FILES[0], "--data", "/nonexistent.csv"),
     "cannot read /nonexistent.csv"),
])
def test_bad_sources_are_one_line(argv, msg):
    p = eval_mpet(*argv)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("opptune eval-mpet: ") and msg in line, line


def _rows(board: str) -> list[dict]:
    import csv
    with open(REPO / f"data/bench_suite_{board}/data.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("board", ["rpi4", "odroid_xu4"])
def test_virtual_boards_tell_kernels_apart_and_close_eq3(board):
    rows = _rows(board)
    t = {(r["workload"], int(r["cores"])): float(r["time_s"]) for r in rows}
    speedup = {(k, n): t[k, 1] / t[k, n] for k, n in t}
    # the board's first 4 cores: bandwidth saturates, a lock contends, compute scales
    assert speedup["triad", 4] < speedup["pi_integrate", 4]
    assert speedup["locked_update", 4] < speedup["matmul", 4]
    assert speedup["triangle", 2] < 0.8 * speedup["pi_integrate", 2]
    for r in rows:
        n = int(r["cores"])
        U = 1 - sum(float(r[k]) for k in "lwcdsj")
        # eq. 3 within the CSV's 6 significant digits
        assert t[r["workload"], 1] * float(r["R"]) / (n * U) == pytest.approx(
            float(r["time_s"]), rel=1e-4), r
    assert max(float(r["l"]) for r in rows if r["workload"] == "locked_update") > 0.2
    assert all(float(r["l"]) == 0 for r in rows if r["workload"] == "pi_integrate")
