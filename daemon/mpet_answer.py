"""The daemon's ``mpet_data`` answer (daemon/characterize.py) on the operator's side: as MPET
profiles for ``opptune predict`` (``build_database``) and as the CSV rows ``opptune eval-mpet``
reads (``store_rows``, ``write_store_csv``: ``--daemon``, ``--save-csv`` and
benchmarks/bench_suite_data.py)."""

from __future__ import annotations

from typing import Any


def build_database(data: dict[str, Any], size: str | None,
                   sizes: dict[tuple, str] | None = None,
                   clocks: dict[tuple, float | None] | None = None):
    """(profiles, platforms) for MpetDatabase from the daemon's mpet_data answer; ``sizes``
    and ``clocks``, when given, receive the size class and the frequency (MHz, None where the
    board has no cpufreq) each (workload, platform) profile was taken at."""
    profiles = {}
    for p in data["profiles"]:
        if size is not None and p["size"] != size:
            continue
        key = (p["workload"], p["platform"])
        if key in profiles:  # several sizes: keep the one with most core counts
            if len(profiles[key]["t"]) >= len(p["t"]):
                continue
        profiles[key] = {"t": {int(n): v for n, v in p["t"].items()},
                         "params": {int(n): v for n, v in p["params"].items()},
                         "counters": {int(n): v for n, v in (p.get("counters") or {}).items()}}
        if sizes is not None:
            sizes[key] = p["size"]
        if clocks is not None:
            clocks[key] = p.get("freq_mhz")
    platforms = {}
    for k, v in data["platforms"].items():
        # t(n) up to the most cores the platform's suite was measured on, not beyond
        most = max((n for (_, p), prof in profiles.items() if p == k for n in prof["t"]),
                   default=0)
        platforms[k] = {"n_nu": v["n_nu"], "n_ht": v["n_ht"],
                        "nmax": min(v["nmax"], most) if v["nmax"] else most}
    return profiles, platforms


CSV_COLUMNS = ("platform", "workload", "variant", "cores", "time_s", "size", "freq_mhz",
               "n_nu", "n_ht", "board", "platform_id")


def store_rows(data: dict[str, Any], size: str | None = None) -> list[dict[str, Any]]:
    """One row per (platform, workload, cores) of the daemon's ``mpet_data`` answer, in the
    tidy shape ``opptune eval-mpet`` reads (median time; MPET parameters R..j where the runtime
    recorded them, empty where not, e.g. an external command; counter.NAME for the derived
    counters the board gave). ``platform`` is the board's
    name, with the platform id's head when two platforms share a name."""
    from .models.mpet_curve import PARAMS
    profiles, _ = build_database(data, size)
    names: dict[str, str] = {}
    for pid, v in data["platforms"].items():
        names[pid] = v.get("board") or pid
    dup = {n for n in names.values() if list(names.values()).count(n) > 1}
    names = {pid: (f"{n} [{pid[:8]}]" if n in dup else n) for pid, n in names.items()}
    meta = {(p["workload"], p["platform"]): p for p in data["profiles"]
            if size is None or p["size"] == size}
    rows = []
    for (work, pid), prof in sorted(profiles.items(), key=lambda kv: (names[kv[0][1]],
                                                                       kv[0][0])):
        topo = data["platforms"][pid]
        for n in sorted(prof["t"]):
            row: dict[str, Any] = {
                "platform": names[pid], "workload": work, "variant": "", "cores": n,
                "time_s": f"{prof['t'][n]:.6g}", "size": meta[(work, pid)]["size"],
                "freq_mhz": meta[(work, pid)]["freq_mhz"] or "",
                "n_nu": topo.get("n_nu") or "", "n_ht": topo.get("n_ht") or "",
                "board": topo.get("board") or "", "platform_id": pid}
            params = prof["params"].get(n) or {}
            for k in PARAMS:
                v = params.get(k)
                row[k] = f"{v:.6g}" if isinstance(v, (int, float)) else ""
            for k, v in sorted((prof["counters"].get(n) or {}).items()):
                row[f"counter.{k}"] = f"{v:.6g}"
            rows.append(row)
    return rows


def write_store_csv(path: Any, rows: list[dict[str, Any]]) -> None:
    """``store_rows`` as the CSV ``--data`` reads; counter.NAME columns where any row has
    one (empty where a board could not count it)."""
    import csv
    from .models.mpet_curve import PARAMS
    counters = sorted({k for r in rows for k in r if k.startswith("counter.")})
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*CSV_COLUMNS, *PARAMS, *counters], restval="")
        w.writeheader()
        w.writerows(rows)
