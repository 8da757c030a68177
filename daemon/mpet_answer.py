"""The daemon's ``mpet_data`` answer (daemon/characterize.py) on the operator's side: as MPET
profiles for ``opptune predict`` (``build_database``) and as the CSV rows ``opptune eval-mpet``
reads (``store_rows``, ``write_store_csv``: ``--daemon``, ``--save-csv`` and
benchmarks/bench_suite_data.py), every clock a board was measured at asked for with
``clock_queries`` and ``merge_answer``."""

from __future__ import annotations

from typing import Any


def _chosen(data: dict[str, Any], size: str | None, key) -> dict[tuple, dict[str, Any]]:
    """The answer's profiles by ``key(profile)``, of ``size`` where given; where several sizes
    share a key, the one with most core counts."""
    out: dict[tuple, dict[str, Any]] = {}
    for p in data["profiles"]:
        if size is not None and p["size"] != size:
            continue
        k = key(p)
        if k not in out or len(out[k]["t"]) < len(p["t"]):
            out[k] = p
    return out


def _profile(p: dict[str, Any]) -> dict[str, Any]:
    return {"t": {int(n): v for n, v in p["t"].items()},
            "params": {int(n): v for n, v in p["params"].items()},
            "counters": {int(n): v for n, v in (p.get("counters") or {}).items()}}


def build_database(data: dict[str, Any], size: str | None,
                   sizes: dict[tuple, str] | None = None,
                   clocks: dict[tuple, float | None] | None = None):
    """(profiles, platforms) for MpetDatabase from the daemon's mpet_data answer; ``sizes``
    and ``clocks``, when given, receive the size class and the frequency (MHz, None where the
    board has no cpufreq) each (workload, platform) profile was taken at."""
    profiles = {}
    for key, p in _chosen(data, size, lambda p: (p["workload"], p["platform"])).items():
        profiles[key] = _profile(p)
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
    """One row per (platform, clock, workload, cores) of the daemon's ``mpet_data`` answer
    (several clocks where ``merge_answer`` gathered them), in the tidy shape ``opptune
    eval-mpet`` reads (median time; MPET parameters R..j where the runtime recorded them, empty
    where not, e.g. an external command; counter.NAME for the derived counters the board gave;
    freq_mhz, from which its reader makes one platform per clock). ``platform`` is the board's
    name, with the platform id's head when two platforms share a name."""
    from .models.mpet_curve import PARAMS
    chosen = _chosen(data, size, lambda p: (p["workload"], p["platform"], p.get("freq_mhz")))
    names: dict[str, str] = {}
    for pid, v in data["platforms"].items():
        names[pid] = v.get("board") or pid
    dup = {n for n in names.values() if list(names.values()).count(n) > 1}
    names = {pid: (f"{n} [{pid[:8]}]" if n in dup else n) for pid, n in names.items()}
    rows = []
    for (work, pid, freq), p in sorted(chosen.items(), key=lambda kv: (
            names[kv[0][1]], kv[0][2] or 0.0, kv[0][0])):
        topo, prof = data["platforms"][pid], _profile(p)
        for n in sorted(prof["t"]):
            row: dict[str, Any] = {
                "platform": names[pid], "workload": work, "variant": "", "cores": n,
                "time_s": f"{prof['t'][n]:.6g}", "size": p["size"], "freq_mhz": freq or "",
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


def clock_queries(data: dict[str, Any]) -> list[dict[str, float]]:
    """The ``clock`` arguments of the further ``mpet_data`` queries that give, beside ``data``
    (an answer without one: each group at its highest clock), every other clock its platforms
    were measured at: the i-th holds each platform's (i+1)-th highest. One query per clock,
    not one answer with all: each answer stays the size of the first, where all clocks in one
    would be about three times it (characterize measures 3 per policy; the daemon builds and
    sends a reply in its loop, shared/protocol.py MAX_REPLY_BYTES). An answer without
    ``clocks`` (a daemon older than them) asks nothing more."""
    ranks = {pid: sorted(v.get("clocks") or (), reverse=True)
             for pid, v in data["platforms"].items()}
    most = max((len(r) for r in ranks.values()), default=0)
    return [{pid: r[i] for pid, r in ranks.items() if len(r) > i} for i in range(1, most)]


def merge_answer(data: dict[str, Any], more: dict[str, Any]) -> None:
    """``more``'s profiles (the answer to a ``clock_queries`` query) into ``data``, each
    (workload, platform, size, clock) once: a platform the query did not name, or a daemon
    that ignores ``clock``, answers the profiles ``data`` already holds."""
    have = {(p["workload"], p["platform"], p["size"], p.get("freq_mhz"))
            for p in data["profiles"]}
    for p in more["profiles"]:
        key = (p["workload"], p["platform"], p["size"], p.get("freq_mhz"))
        if key not in have:
            have.add(key)
            data["profiles"].append(p)
    for pid, v in more["platforms"].items():
        data["platforms"].setdefault(pid, v)


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
