"""`opptune report`: a real daemon fed by a real agent on a virtual big.LITTLE board with energy
sensors (odroid-xu4), the report written by the installed command from the daemon's answer,
its content checked, and the page rendered in headless Chromium with every figure loaded.
Also: the empty store (a page that says how to start), groups without a frequency axis or
without energy (fewer figures, saying why), and the Pareto front itself."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opptune.agent.virtual_board import make_tree
from opptune.daemon.report.analysis import pareto_front
from opptune.daemon.report.build import build_report
from opptune.shared.cpus import parse_cpu_list
from procs import Cluster, recommendations_final, run_on_terminal_stderr, write_toml

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium")

# Appended to a copy of the page by the test only (the page itself has no script): after
# the load event, every <img> must have decoded to a non-empty image.
IMG_CHECK = """<script>window.addEventListener("load", function () {
  var imgs = Array.from(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var p = document.createElement("pre");
  p.id = "img-check";
  p.textContent = JSON.stringify({total: imgs.length,
                                  bad: bad.map(function (i) { return i.getAttribute("src"); })});
  document.body.appendChild(p);
});</script>"""


def rendered_images(index: Path, tmp: Path) -> dict:
    """{total, bad} as Chromium saw the page's images (a copy beside it with IMG_CHECK)."""
    probe = index.with_name("img-check.html")
    probe.write_text(index.read_text().replace("</body>", IMG_CHECK + "</body>"))
    try:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={tmp / 'chromium-profile'}", "--dump-dom",
             probe.resolve().as_uri()], capture_output=True, text=True, timeout=60)
    finally:
        probe.unlink()
    found = re.search(r'<pre id="img-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"no check result in the DOM (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Sweep both clusters at 3 frequencies on 1..2 cores, wait for both recommendations to
    be measured, then `opptune report --json`."""
    tmp = tmp_path_factory.mktemp("report")
    root = make_tree("odroid-xu4", str(tmp / "board"))
    c = Cluster(tmp, kernels=("pi_integrate",),
                extra_agent={"virtual_board": "odroid-xu4", "sysfs_root": root})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": 2,
    }, {"sweep": {"size": "small", "reps": 2, "warmup": 0, "max_cores": 2, "per_cluster": True,
                  "frequency_grid": "list",
                  "frequencies": [600_000, 1_000_000, 1_400_000]}})
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: recommendations_final(s, 2), timeout=60,
                        what="a measured recommendation per cluster")
        out = tmp / "site"
        proc = subprocess.run([str(BIN / "opptune"), "report", "--daemon", c.endpoint,
                               "--out", str(out), "--json"], capture_output=True, text=True,
                              timeout=120)
        # a person at a terminal is told what takes the time (32 s for 66 groups), counted
        again, said = run_on_terminal_stderr([str(BIN / "opptune"), "report", "--daemon",
                                              c.endpoint, "--out", str(tmp / "again")])
        # a workload the daemon never measured: one line naming those it did, nothing written
        nope = subprocess.run([str(BIN / "opptune"), "report", "--daemon", c.endpoint,
                               "--out", str(tmp / "nope"), "--workload", "nope"],
                              capture_output=True, text=True, timeout=120)
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert proc.returncode == 0, proc.stderr
    # each count rewritten in place (\r) and its line ended at the last
    lines = said.replace("\r\n", "\n").split("\n")
    assert again.returncode == 0 and [line.split("\r")[-1] for line in lines] == [
        "opptune report: refitting models 2/2",
        f"opptune report: drawing figures into {tmp / 'again'} 2/2", ""], said
    assert nope.returncode == 2 and nope.stderr == ("opptune report: --workload nope: no runs "
                                                    "of it; measured: pi_integrate\n")
    assert not (tmp / "nope").exists()
    return {"status": st, "summary": json.loads(proc.stdout), "out": out, "tmp": tmp}


@pytest.mark.integration
def test_report_names_groups_recommendations_and_fleet(report):
    st, summary, out = report["status"], report["summary"], report["out"]
    html = (out / "index.html").read_text()
    assert summary["index"] == str(out / "index.html")
    # two groups (one per cluster), each with frequency axis and measured energy: scaling,
    # time map, energy map, time x energy = 4 figures
    assert summary["groups"] == [f"pi_integrate (small, {v}) on odroid-xu4 (virtual)"
                                 for v in ("cluster0", "cluster1")]
    assert summary["images"] == 8 and summary["listed"] == 2
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 8 and sorted(srcs) == sorted(p.name for p in out.glob("fig-*.png"))
    for label in summary["groups"]:
        assert label in html
    for rec in st["recommendations"]:
        # the cpus as the kernel lists them ("4-7"), not a Python list
        said = re.search(rf"recommended: {rec['cores']} cores \(cpus ([0-9,-]+)\) at "
                         rf"{rec['freq_khz'] / 1000:g} MHz", html)
        assert said and parse_cpu_list(said.group(1)) == sorted(rec["cpus"]), rec
        assert f"state {rec['state']}" in html
    # the fleet: the agent with 2 recommendations applied
    row = re.search(r"<tr><td>test-agent</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[0] == "odroid-xu4 (virtual)" and cells[2] == "yes"
    assert cells[5] == "0" and cells[6:8] == ["2", "2"]  # failed runs, recommendations, applied
    # the board: topology and the kernel's traits
    assert "policy0" in html and "policy4" in html and "{0-3} {4-7}" in html
    assert "frequency exponent" in html
    # energy measured at the 6 swept configurations, plus the recommended one where it was
    # not swept (its verification runs carry energy too)
    swept = {(n, f) for n in (1, 2) for f in (600_000, 1_000_000, 1_400_000)}
    for rec in sorted(st["recommendations"], key=lambda r: r["group"]["variant"]):
        n = 6 + ((rec["cores"], rec["freq_khz"]) not in swept)
        assert f"energy measured by the board&#x27;s meter at {n} configurations" in html
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert summary["bytes"] > 0


@pytest.mark.integration
def test_report_renders_in_headless_chromium_with_every_figure(report):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    seen = rendered_images(report["out"] / "index.html", report["tmp"])
    assert seen == {"total": 8, "bad": []}
    # the check can fail: a figure that is missing is reported
    broken = report["out"] / "broken.html"
    broken.write_text('<html><body><img src="nope.png"></body></html>')
    assert rendered_images(broken, report["tmp"]) == {"total": 1, "bad": ["nope.png"]}


def test_empty_store_gives_a_page_that_says_how_to_start(tmp_path):
    c = Cluster(tmp_path, auto_sweep=False)
    c.start_daemon()
    try:
        c.wait_for(lambda s: True, timeout=20, what="the daemon")
        proc = subprocess.run([str(BIN / "opptune"), "report", "--daemon", c.endpoint,
                               "--out", str(tmp_path / "site")], capture_output=True,
                              text=True, timeout=60)
    finally:
        c.stop()
    assert proc.returncode == 0, proc.stderr
    assert "nothing measured yet" in proc.stdout
    html = (tmp_path / "site" / "index.html").read_text()
    assert "Nothing measured yet" in html and "opptune sweep --agent ID --wait" in html
    assert "<img" not in html


def test_unreachable_daemon_is_one_line_and_writes_nothing(tmp_path):
    proc = subprocess.run([str(BIN / "opptune"), "report", "--daemon", "tcp://127.0.0.1:9",
                           "--timeout", "1", "--out", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # nothing listens at port 9: said at once, not after the timeout
    assert proc.stderr.startswith("opptune report: no daemon listens at tcp://127.0.0.1:9 ")
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--daemon", "127.0.0.1:5555"], "lacks a transport; write it as \"tcp://127.0.0.1:5555\""),
    (["--out", "FILE"], "is a file, not a directory"),
    (["--timeout", "-1"], "seconds > 0"),
    (["--max-groups", "-1"], "--max-groups must be >= 0, not -1"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, argv, needle):
    (tmp_path / "FILE").write_text("x")
    argv = [str(tmp_path / "FILE") if a == "FILE" else a for a in argv]
    proc = subprocess.run([str(BIN / "opptune"), "report", *argv], capture_output=True,
                          text=True, timeout=30, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


def _runs(freqs, energy):
    out = []
    for f in freqs:
        for n in (1, 2, 3, 4):
            t = (0.1 + 0.9 / n) * (1000.0 / f if f else 1.0)
            out.append([n, f, t, (1.0 + n) * t if energy else None])
    return out


def test_figures_follow_what_the_group_has(tmp_path):
    """No frequency axis: the scaling figure only; a frequency axis without energy: plus the
    time map, and the page says why there is no energy map."""
    g = {"platform": "p1", "input": "small", "variant": ""}
    data = {"agents": [{"id": "a", "board": "box", "platform": "p1", "alive": False,
                        "last_seen_s": 7200.0}],
            "platforms": {"p1": {"n_cpus": 4, "sweep_order": [0, 1, 2, 3],
                                 "clusters": [[0, 1, 2, 3]]}},
            "points": [{"group": {**g, "workload": "flat"}, "runs": _runs([None], False)},
                       {"group": {**g, "workload": "dvfs"},
                        "runs": _runs([1000.0, 2000.0], False)}],
            "recommendations": [], "runs": [{"agent": "a", "count": 24, "failed": 3}]}
    told = []
    built = build_report(data, tmp_path, told.append)
    assert [p.name.rsplit("-", 1)[1] for p in built.images] == [
        "scaling.png", "scaling.png", "time.png"]
    # 'opptune report' says on a terminal what takes the time (32 s for 66 groups)
    assert told == ["refitting the models of 2 workload groups",
                    f"drawing 2 workload groups' figures into {tmp_path}"]
    html = built.index.read_text()
    assert "no run of this group carries energy (the board has no meter)" in html
    assert "2.0 h ago" in html
    # the Fleet counts the successful runs, the failed ones apart
    assert re.search(r"<th[^>]*>runs</th>\s*<th[^>]*>failed runs</th>", html)
    assert re.search(r"<td[^>]*>24</td>\s*<td[^>]*>3</td>", html)
    # walking a virtual rpi4 with a real command: its board has a meter (the kernel's energy
    # model), which saw none of its runs; the page said "the board has no meter"
    data["platforms"]["p1"]["energy"] = {"available": True,
                                         "source": "energy-model-estimate"}
    html = build_report(data, tmp_path / "metered", told.append).index.read_text()
    assert "no run of this group carries energy (the board has a meter, but it counted none " \
           "of these runs)" in html


def test_a_report_interrupted_halfway_leaves_the_one_before_whole(tmp_path, monkeypatch):
    """Ctrl-C while the figures were drawn left DIR with the new report's first figures, the
    earlier report's index.html and none of the figures it shows (removed at the start). The
    figures are staged and take the earlier report's place only once all are drawn."""
    from opptune.daemon.report import plots
    g = {"platform": "p1", "input": "small", "variant": ""}
    data = {"agents": [{"id": "a", "board": "box", "platform": "p1", "alive": True,
                        "last_seen_s": 1.0}],
            "platforms": {"p1": {"n_cpus": 4, "sweep_order": [0, 1, 2, 3],
                                 "clusters": [[0, 1, 2, 3]]}},
            "points": [{"group": {**g, "workload": w}, "runs": _runs([None], False)}
                       for w in ("first", "second")],
            "recommendations": [], "runs": [{"agent": "a", "count": 24}]}
    before = build_report(data, tmp_path)
    held = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(held) == sorted([p.name for p in before.images] + ["index.html"])
    drawn = []
    scaling = plots.scaling

    def interrupted(view, path):
        if drawn:
            raise KeyboardInterrupt
        drawn.append(path)
        scaling(view, path)
    monkeypatch.setattr(plots, "scaling", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_report(data, tmp_path)
    assert drawn and {p.name: p.read_bytes() for p in tmp_path.iterdir()} == held


def test_ctrl_c_in_report_says_nothing_was_written(tmp_path, monkeypatch, capsys):
    """'opptune report' interrupted while it drew exited 130 without a word."""
    from opptune.daemon import cli, client
    from opptune.daemon.report import build

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(client, "query", lambda *a, **k: {})
    monkeypatch.setattr(build, "build_report", interrupted)
    assert cli.main(["report", "--out", str(tmp_path / "r"), "--daemon",
                     "tcp://127.0.0.1:9"]) == 130
    assert capsys.readouterr().err.strip() == (
        f"opptune report: interrupted: nothing written; {tmp_path / 'r'} holds what it held "
        "before")


def test_wrote_line_counts_in_words_that_agree_with_the_number():
    """A store with one group said "1 workload groups, 1 figures" (found by the README walk)."""
    from types import SimpleNamespace
    from opptune.daemon.report.cli import wrote_line
    built = SimpleNamespace(index=Path("r/index.html"), groups=["g"], images=["a.png"],
                            bytes=37 * 1024, seconds=0.21, listed=1)
    assert wrote_line(built) == "wrote r/index.html: 1 workload group, 1 figure, 37 KiB in 0.2 s"
    built.groups, built.images, built.listed = ["g", "h"], ["a.png", "b.png", "c.png"], 2
    assert wrote_line(built).startswith("wrote r/index.html: 2 workload groups, 3 figures, ")
    built.listed = 771  # a large store: the page draws some and lists all
    assert wrote_line(built).startswith("wrote r/index.html: 2 of 771 workload groups drawn "
                                        "(the page lists all), 3 figures, ")
    built.groups, built.images, built.listed = [], [], 0
    assert wrote_line(built) == ("wrote r/index.html: nothing measured yet (the page says how "
                                 "to start), 37 KiB in 0.2 s")


def test_pareto_front_keeps_only_undominated_points_fastest_first():
    t = np.array([1.0, 2.0, 3.0, 2.5, np.nan, 4.0])
    e = np.array([9.0, 5.0, 4.0, 6.0, 1.0, 4.0])
    assert pareto_front(t, e) == [0, 1, 2]


def test_energy_of_a_kernel_energy_model_is_not_called_measured(tmp_path):
    """A board whose energy comes from the kernel's energy model (an estimate, no meter): the
    page said 'energy measured by the board's meter at N configurations' where 'opptune
    recommend' says 'modelled, not measured' of the same runs."""
    g = {"platform": "p1", "input": "small", "variant": "", "workload": "dvfs"}
    plat = {"n_cpus": 4, "sweep_order": [0, 1, 2, 3], "clusters": [[0, 1, 2, 3]],
            "energy": {"available": True, "reason": None,
                       "source": "energy-model-estimate (kernel EM x /proc/stat busy time)"}}
    data = {"agents": [{"id": "a", "board": "pi", "platform": "p1", "alive": True,
                        "last_seen_s": 1.0}],
            "platforms": {"p1": plat},
            "points": [{"group": g, "runs": _runs([1000.0, 2000.0], True)}],
            "recommendations": [], "runs": [{"agent": "a", "count": 8}]}
    html = build_report(data, tmp_path / "est").index.read_text()
    assert "measured by the board" not in html
    assert "energy estimated by the kernel&#x27;s energy model (no meter) at 8 configurations" \
        in html
    # a real meter keeps its wording
    plat["energy"]["source"] = "rapl:package-0"
    html = build_report(data, tmp_path / "rapl").index.read_text()
    assert "energy measured by the board&#x27;s meter at 8 configurations" in html
    # every configuration measured: the captions said "at the other 0 it is modelled" (walk31)
    assert "at the other 0" not in html
    assert html.count("at 8 configurations, every one offered: none modelled") == 2
    # half of them measured: the other half is the time model x the power model
    data["points"][0]["runs"] = _runs([1000.0], True) + _runs([2000.0], False)
    html = build_report(data, tmp_path / "half").index.read_text()
    assert html.count("nergy measured by the board&#x27;s meter at 4 configurations; at the "
                      "other 4 it is modelled: time model x power model (") == 2


def _store(n_groups):
    """The report query's answer for ``n_groups`` groups on two boards (one agent each), the
    daemon's fit stored for each, recommendations (oldest first) for groups 1, 4 and 2."""
    plat = {"n_cpus": 4, "sweep_order": [0, 1, 2, 3], "clusters": [[0, 1, 2, 3]]}
    groups = [{"platform": f"p{i % 2}", "workload": f"w{i:02d}", "input": "small",
               "variant": ""} for i in range(n_groups)]
    return {"agents": [{"id": f"a{k}", "board": f"box{k}", "platform": f"p{k}",
                        "alive": True, "last_seen_s": 1.0} for k in (0, 1)],
            "platforms": {"p0": plat, "p1": plat},
            "points": [{"group": g, "runs": _runs([None], False)} for g in groups],
            "fits": [{"group": g, "model": "amdahl", "params": {}, "quality": {"cv_mape": 2.5},
                      "runners_up": []} for g in groups],
            "recommendations": [{"group": groups[i], "agent": f"a{i % 2}", "cores": 4,
                                 "cpus": [0, 1, 2, 3], "freq_khz": None,
                                 "predicted_time_s": 0.4, "state": "verified"}
                                for i in (1, 4, 2) if i < n_groups],
            "runs": [{"agent": "a0", "count": 4 * n_groups}]}


def test_a_large_store_draws_the_newest_recommendations_groups_and_lists_every_group(tmp_path):
    """A store of 771 groups took minutes: a refit and up to 4 figures per group. At most
    --max-groups are drawn, those of the newest recommendations first, then in order; the
    page says so, says how to get the others, and lists every group with the daemon's
    model (no refit) and a link to the figures of the drawn ones."""
    data = _store(7)
    counted = []
    built = build_report(data, tmp_path, count=lambda what, i, n: counted.append((what, i, n)),
                         max_groups=3)
    label = "w{:02d} (small) on box{}".format
    assert built.groups == [label(1, 1), label(2, 0), label(4, 0)]  # the page's order
    assert built.listed == 7 and len(built.images) == 3
    assert sorted(p.name for p in tmp_path.glob("fig-*.png")) == sorted(
        p.name for p in built.images)
    # the refits and the figures are counted, each up to the groups drawn
    assert [c for c in counted if c[0] == "refitting models"] == [
        ("refitting models", i, 3) for i in (1, 2, 3)]
    assert [c[1:] for c in counted if c[0].startswith("drawing figures")] == [
        (i, 3) for i in (1, 2, 3)]
    html = built.index.read_text()
    assert ("Figures for 3 of the 7 workload groups (--max-groups 3): those of the newest "
            "recommendations first") in html
    assert "&#x27;--max-groups 0&#x27; draws all 7" in html
    rows = re.findall(r"<tr><td>(?:<a href=\"([^\"]+)\">)?(w\d\d \(small\) on box\d)(?:</a>)?"
                      r"</td>(.*?)</tr>", html)
    assert [r[1] for r in rows] == [label(i, i % 2) for i in range(7)]
    assert {r[1] for r in rows if r[0]} == set(built.groups)
    for href, _, _ in rows:  # each link leads to its group's figures
        assert not href or f'id="{href[1:]}"' in html
    # the groups not drawn show the daemon's stored fit, the drawn ones their refit
    listed = {r[1]: r[2] for r in rows}
    assert "amdahl, cross-validated MAPE 2.5 % (the daemon&#x27;s fit)" in listed[label(0, 0)]
    assert "the daemon" not in listed[label(1, 1)]
    assert "4 cores, verified" in listed[label(4, 0)]


def test_max_groups_0_draws_every_group_and_a_small_store_has_no_table(tmp_path):
    built = build_report(_store(5), tmp_path / "all", max_groups=0)
    assert len(built.groups) == built.listed == 5
    html = built.index.read_text()
    assert "Figures for" not in html and "<th>workload group</th>" not in html


def test_the_fleet_says_what_stands_on_each_board_as_the_status_does(tmp_path):
    data = _store(2)
    a0, a1 = data["agents"]
    a0["standing"] = {"config_id": "cfg-1", "workload": "w00", "size": "small",
                      "cpus": [0, 1], "freq_khz": 1_500_000}
    a1["standing_dropped"] = "cfg-2: process 42 is gone"
    html = build_report(data, tmp_path, max_groups=0).index.read_text()
    fleet = html[html.index('id="fleet"'):html.index('id="boards"')]
    assert ("board box0 (agent a0): applied configuration cfg-1 in force: w00 on cpus 0-1 "
            "at 1500 MHz") in fleet
    assert ("board box1 (agent a1): the applied configuration was dropped when the agent "
            "restarted: cfg-2: process 42 is gone; the board is at its original settings"
            ) in fleet
    # a store with nothing measured yet: the page that says how to start lists them too
    empty = build_report({**data, "points": []}, tmp_path / "empty").index.read_text()
    assert "board box1 (agent a1): the applied configuration was dropped" in empty
    # an agent that says neither (none applied, or older than the fields): no line
    del a0["standing"]
    html = build_report(data, tmp_path, max_groups=0).index.read_text()
    assert "board box0 (agent a0)" not in html


def test_drawn_groups_order():
    from opptune.daemon.report.analysis import drawn_groups
    data = _store(7)
    entries, recs = data["points"], data["recommendations"]
    assert drawn_groups(entries, recs, 2) == [2, 4]  # the two newest recommendations
    assert drawn_groups(entries, recs, 5) == [0, 1, 2, 3, 4]  # then in order: 0, 3
    assert drawn_groups(entries, recs, 0) == list(range(7))
    assert drawn_groups(entries, [], 2) == [0, 1]


def test_workload_and_agent_choose_the_groups_or_say_what_exists(tmp_path):
    from opptune.daemon.report.build import NoGroups
    data = _store(7)
    built = build_report(data, tmp_path / "w", workload="w03")
    assert built.groups == ["w03 (small) on box1"] and built.listed == 1
    built = build_report(data, tmp_path / "a", agent="a0", max_groups=2)
    assert built.listed == 4 and built.groups == ["w02 (small) on box0", "w04 (small) on box0"]
    assert "of the 4 workload groups of --agent a0" in built.index.read_text()
    for kw, said in [({"workload": "nope"}, "--workload nope: no runs of it; measured: w00, "
                                            "w01, w02, w03, w04, w05, w06"),
                     ({"workload": "w03", "agent": "a0"}, "--workload w03: no runs of it on "
                                                          "agent a0's board; measured: w00, "
                                                          "w02, w04, w06"),
                     ({"agent": "zz"}, "--agent zz: the daemon knows no such agent; known: "
                                       "a0, a1 ('opptune status' lists them)")]:
        with pytest.raises(NoGroups) as exc:
            build_report(data, tmp_path / "none", **kw)
        assert str(exc.value) == said
        assert not (tmp_path / "none").exists()  # refused before anything is written
    with pytest.raises(NoGroups, match=r"^--workload w03: no runs of it; nothing is measured "
                                       r"there yet$"):
        build_report({**data, "points": []}, tmp_path / "none", workload="w03")


def test_benchmark_times_a_real_daemon_and_command_on_a_built_store(tmp_path):
    """benchmarks/report.py: a store written through the store's API, a real daemon on it,
    the installed command drawing part of it; the figures it prints add up."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "report.py"
    proc = subprocess.run([sys.executable, str(bench), "--groups", "7", "--max-groups", "2",
                           "--json", "--keep", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(proc.stdout)
    # 3 boards round robin: 3 rpi4 groups (4 cores), 2 xu4 (4 of a cluster), 2 x86-2numa
    # (its first cluster), each 3 clocks x 2 runs; recommendations for groups 0 and 4
    assert (fig["groups"], fig["reply_points"], fig["listed"]) == (7, 7, 7)
    assert fig["recommendations"] == 2 and fig["drawn"] == 2 and fig["images"] >= 2
    assert fig["runs"] == fig["stored_runs"] > 0  # every run written is the daemon's
    assert fig["query_s"] > 0 and fig["command_s"] >= fig["build_s"] > 0
    html = (tmp_path / "site" / "index.html").read_text()
    assert "Figures for 2 of the 7 workload groups" in html
    assert html.count("(the daemon&#x27;s fit)") == 5  # the stored fits of the 5 not drawn


def test_the_report_query_gives_each_groups_runs_and_fit_rows_from_one_pass(tmp_path):
    """The report query read each group's fit rows with a statement of its own (771 on the
    benchmark's store); now one pass gives every group's runs and fit rows: the same runs,
    medians and fit rows, marked runs and runs from before a drift left out of the fit."""
    from opptune.daemon.queries import answer
    from opptune.daemon.report.analysis import median_points
    from opptune.daemon.service import Daemon
    from opptune.daemon.store import Group, ResultIn
    from opptune.shared.config import DaemonConfig
    from opptune.shared.records import RunRecord

    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        def runs(workload, rows, received, tag):
            recs = [RunRecord(platform="p", workload=workload, input="s", cores=c,
                              cpus=list(range(c)), threads=c, rep=i, time_s=t, marked=m)
                    for i, (c, t, m) in enumerate(rows)]
            d.store.insert_results([ResultIn(f"{tag}{i}", "a1", None, None, r, r.to_dict())
                                    for i, r in enumerate(recs)], received)
        runs("w1", [(1, 9.0, None), (2, 8.0, None)], 1.0, "old")  # before w1's drift
        d.store.save_drift("a1", Group("p", "w1", "s", ""), "off twice", [], None, 2.0)
        runs("w1", [(1, 2.0, None), (1, 2.2, None), (2, 1.1, None), (2, 1.0, "busy")], 3.0,
             "w1-")
        runs("w2", [(1, 4.0, None), (3, 1.5, None)], 3.0, "w2-")
        data = answer(d, "report", {})
        assert [e["group"]["workload"] for e in data["points"]] == ["w1", "w2"]
        for e in data["points"]:
            g = Group(**e["group"])
            assert sorted(tuple(r[:5]) for r in e["runs"]) == sorted(
                (*r[:4], r[5]) for r in d.store.run_points()[g])
            assert sorted(map(tuple, e["fit_runs"])) == sorted(d.store.group_runs(g))
            # a run is fitted exactly where it says no reason to be left out
            assert sorted(tuple(r[:3]) for r in e["runs"] if r[5] is None) == \
                sorted(map(tuple, e["fit_runs"]))
        w1 = data["points"][0]
        assert sorted(map(tuple, w1["fit_runs"])) == [(1, None, 2.0), (1, None, 2.2),
                                                      (2, None, 1.1)]
        # the medians are of the fitted runs: neither the pre-drift runs (9.0, 8.0), which
        # drew the 1-core point at 2.2 and the 2-core one at 4.55, nor the marked one
        assert [(p.cores, round(p.time_s, 9), p.runs, p.left_out)
                for p in median_points(w1["runs"])] == [(1, 2.1, 2, ()), (2, 1.1, 1, ())]
    finally:
        d.close()


def test_the_report_query_reads_only_what_the_page_draws_and_draws_the_same(tmp_path):
    """The report query carried the whole status (every job, drift, re-measurement and each
    recommendation's rests_on, read per group: 0.06 s of its 0.27 s on the 771-group store);
    it now asks the status for the lists the page reads. The page built from it is the one
    built from the whole status, and those lists are the whole status's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import report as report_bench
    from opptune.daemon.queries import REPORT_SECTIONS, answer
    from opptune.daemon.service import Daemon
    from opptune.daemon.status_query import SECTIONS, status
    from opptune.shared.config import DaemonConfig

    db = tmp_path / "d.db"
    report_bench.build_store(db, 9, tmp_path)
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(db), curve="off",
                            auto_sweep=False))
    try:
        new = answer(d, "report", {})
        whole = {**status(d), "points": new["points"], "generated": new["generated"]}
    finally:
        d.close()
    assert whole["jobs"] and whole["recommendations"]
    for a, b in zip(whole["agents"], new["agents"]):  # read a moment apart
        a["last_seen_s"] = b["last_seen_s"]
    for key in REPORT_SECTIONS:
        if key == "recommendations":
            assert new[key] == [{k: v for k, v in r.items() if k != "rests_on"}
                                for r in whole[key]]
        else:
            assert new[key] == whole[key], key
    assert all(new[k] == [] for k in SECTIONS if k not in REPORT_SECTIONS)
    pages = [build_report(data, tmp_path / name, max_groups=3).index.read_text()
             for name, data in (("new", new), ("whole", whole))]
    assert pages[0] == pages[1]


def test_a_group_whose_runs_all_predate_a_drift_is_not_said_to_be_marked():
    """Runs but no fit rows: a drift (of the group, or of one of its clusters for a
    whole-board group) as well as marks leave them out; the page said 'every run is marked
    for interference or throttled' of a drifted group."""
    from opptune.daemon.report.analysis import analyse_group
    entry = {"group": {"platform": "p1", "workload": "w", "input": "small", "variant": ""},
             "runs": _runs([1000.0], False), "fit_runs": []}
    view = analyse_group(entry, {"n_cpus": 4, "sweep_order": [0, 1, 2, 3]}, "box", None)
    assert view.model_note.startswith("no runs a fit may use: every run is marked for "
                                      "interference, throttled, or from before a drift of the "
                                      "group (of one of its clusters, for a whole-board group")


def test_a_one_core_recommendation_reads_one_core():
    """The report's recommendation line said '1 cores'."""
    from opptune.daemon.report.build import _rec_text
    rec = {"cores": 1, "cpus": [3], "freq_khz": 600000, "predicted_time_s": 2.0}
    assert _rec_text(rec).startswith("recommended: 1 core (cpus 3) at 600 MHz, predicted 2 s")
    assert _rec_text({**rec, "cores": 4, "cpus": [0, 1, 2, 3]}).startswith(
        "recommended: 4 cores (cpus 0-3) at 600 MHz")


@pytest.mark.parametrize("board, expected", [
    ("x86-2numa", [("cpufreq policy0-31",
                    "cpus 0-31, a policy per cpu, 1200..3200 MHz (continuous, intel_pstate)")]),
    ("odroid-xu4", [("cpufreq policy0", "cpus {0-3}, cpufreq-dt, 13 frequencies 200-1400 MHz"),
                    ("cpufreq policy4", "cpus {4-7}, cpufreq-dt, 19 frequencies 200-2000 MHz")]),
])
def test_the_boards_policies_that_read_the_same_are_one_row(tmp_path, board, expected):
    """The board table had a row per cpufreq policy: 32 alike on the x86-2numa (intel_pstate
    makes one per cpu). Policies with the same driver and clocks are one row, their cpus as
    ranges; a big.LITTLE board's two policies differ and stay two."""
    from opptune.agent.platform import discover
    from opptune.daemon.report.analysis import topology_rows
    from opptune.shared.config import AgentConfig
    root = make_tree(board, str(tmp_path / "board"))
    plat = discover(AgentConfig(agent_id="b", bench_kernels=[], state_dir=str(tmp_path),
                                sysfs_root=root, virtual_board=board))
    rows = [r for r in topology_rows(plat) if r[0].startswith("cpufreq ")]
    assert rows == expected


def test_alike_policies_of_several_cpus_each_keep_their_sets():
    from opptune.daemon.report.analysis import policy_rows
    pol = {"driver": "cpufreq-dt", "cpuinfo_min_khz": 600_000, "cpuinfo_max_khz": 1_800_000}
    policies = [{**pol, "name": "policy0", "cpus": [0, 1]},
                {**pol, "name": "policy2", "cpus": [2, 3]},
                {**pol, "name": "policy4", "cpus": [4, 5], "driver": "scmi"}]
    table = [600_000, 1_200_000, 1_800_000]
    assert policy_rows({"policies": policies, "cpufreq": {
        "frequencies_khz": {p["name"]: table for p in policies}}}) == [
        ("cpufreq policy0,2", "cpus {0-1} {2-3}, cpufreq-dt, 3 frequencies 600-1800 MHz"),
        ("cpufreq policy4", "cpus {4-5}, scmi, 3 frequencies 600-1800 MHz")]


def test_the_scaling_legend_hides_no_measured_point_nor_the_star(tmp_path, monkeypatch):
    """The legend sat inside the axes, upper right, as wide as them (the model's whole note):
    on a virtual rpi4 it covered the one-core point of the slowest clock and the recommended
    star (found by walk31's screenshots). It goes below the axes."""
    from opptune.daemon.report import plots
    from opptune.daemon.report.analysis import analyse_group
    entry = {"group": {"platform": "p1", "workload": "pi_integrate", "input": "small",
                       "variant": ""}, "runs": _runs([600.0, 1000.0, 1500.0], True)}
    plat = {"n_cpus": 4, "sweep_order": [0, 1, 2, 3], "clusters": [[0, 1, 2, 3]]}
    rec = {"cores": 2, "cpus": [0, 1], "freq_khz": 600_000, "predicted_time_s": 0.92,
           "state": "verified", "verified_time_s": 0.92}
    view = analyse_group(entry, plat, "rpi4 (virtual)", rec)
    assert view.curves, view.model_note
    figs = []
    monkeypatch.setattr(plots.plt, "close", figs.append)  # keep the figure to look at
    plots.scaling(view, tmp_path / "scaling.png")
    fig, = figs
    fig.canvas.draw()
    ax, = fig.axes
    legend = ax.get_legend().get_window_extent()
    markers = [xy for line in ax.get_lines() if line.get_marker() not in (None, "None", "")
               for xy in ax.transData.transform(line.get_xydata())]
    assert len(markers) == 12 + 1  # 4 cores x 3 clocks, the star
    hidden = [xy for xy in markers if legend.contains(*xy)]
    assert not hidden
    assert not legend.overlaps(ax.get_window_extent())
    assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)
    plots.plt.close(fig)


def test_a_group_whose_clean_runs_are_at_one_core_count_says_why_there_is_no_model():
    """Measured at 1 and 2 cores on a loaded machine, every 2-core run marked: the page said
    "no model: no candidate model could be fitted (amdahl: fold 0: need at least 2 distinct
    core counts to fit a speedup curve; usl: ...; hold: ...)" of a group measured at two
    (walk31, this machine at load 10)."""
    from opptune.daemon.report.analysis import analyse_group
    runs = [[1, None, 0.003, None]] * 3 + [[2, None, 0.0015, None]] * 3
    entry = {"group": {"platform": "p1", "workload": "w", "input": "small", "variant": ""},
             "runs": runs, "fit_runs": [r[:3] for r in runs[:3]]}
    view = analyse_group(entry, {"n_cpus": 2, "sweep_order": [0, 1]}, "vm", None)
    assert view.model is None
    assert view.model_note == (
        "no model: the runs a fit may use are at 1 core only, and a fit needs two core "
        "counts; 3 of the 6 runs are left out: marked for interference, throttled, or from "
        "before a drift ('opptune status' says which; the daemon re-measures marked points "
        "when the board is quiet, accept_load = true fits them)")


def test_the_plotted_medians_leave_marked_runs_out_as_the_fit_does(tmp_path, monkeypatch):
    """The scaling figure's medians took every run, those marked for interference too, while
    the fit left them out: a point sat off its curve for runs nobody trusts. A point's median
    is of its clean runs; one with marked runs only is drawn hollow and said in the legend."""
    from opptune.daemon.report import plots
    from opptune.daemon.report.analysis import analyse_group, median_points
    clean = [[c, None, 4.0 / c * k, None, False] for c in (1, 2, 4) for k in (1.0, 1.02, 0.99)]
    busy = [[2, None, 9.0, None, True], [2, None, 9.5, None, True],
            [3, None, 7.0, None, True]]
    points = median_points(clean + busy)
    assert [(p.cores, round(p.time_s, 6), p.runs, p.left_out) for p in points] == [
        (1, 4.0, 3, ()), (2, 2.0, 3, ()), (3, 7.0, 1, ("marked",)), (4, 1.0, 3, ())]
    # a daemon before the mark sends 4 fields: every run counts
    assert [p.runs for p in median_points([r[:4] for r in clean + busy])] == [3, 5, 1, 3]

    entry = {"group": {"platform": "p1", "workload": "w", "input": "small", "variant": ""},
             "runs": clean + busy, "fit_runs": [r[:3] for r in clean]}
    plat = {"n_cpus": 4, "sweep_order": [0, 1, 2, 3], "clusters": [[0, 1, 2, 3]]}
    view = analyse_group(entry, plat, "board", None)
    assert view.curves, view.model_note
    figs = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    plots.scaling(view, tmp_path / "scaling.png")
    fig, = figs
    ax, = fig.axes
    drawn = {(x, y, line.get_markerfacecolor() == "none")
             for line in ax.get_lines() if line.get_marker() == "o"
             for x, y in line.get_xydata()}
    assert {(x, round(y, 6), hollow) for x, y, hollow in drawn} == {
        (1.0, 4.0, False), (2.0, 2.0, False), (3.0, 7.0, True), (4.0, 1.0, False)}
    assert "not fitted: marked" in ax.get_legend_handles_labels()[1]
    plots.plt.close(fig)


def test_runs_the_fit_leaves_out_for_a_drift_a_throttle_or_an_off_verdict_are_not_plotted(
        tmp_path, monkeypatch):
    """Only marked runs stayed out of the scaling figure's medians: runs from before a drift
    (the program changed), throttled ones and a verification judged off were drawn while the
    fit left them out. The report query says why each run is left out; the medians are of the
    fitted runs, a configuration with no fitted run is drawn hollow, and the caption counts
    what was left out and why."""
    from opptune.daemon.queries import answer
    from opptune.daemon.report import plots
    from opptune.daemon.report.analysis import median_points
    from opptune.daemon.service import Daemon
    from opptune.daemon.store import Group, ResultIn
    from opptune.shared.config import DaemonConfig
    from opptune.shared.records import RunRecord

    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        def runs(rows, received, tag, job=None):
            recs = [RunRecord(platform="p", workload="w", input="s", cores=c,
                              cpus=list(range(c)), threads=c, rep=i, time_s=t,
                              throttled=thr) for i, (c, t, thr) in enumerate(rows)]
            d.store.insert_results([ResultIn(f"{tag}{i}", "a1", job, i if job else None, r,
                                             r.to_dict()) for i, r in enumerate(recs)],
                                   received)
        runs([(1, 9.0, False), (2, 8.0, False), (4, 7.0, False)], 1.0, "old")
        d.store.save_drift("a1", Group("p", "w", "s", ""), "the program changed", [], None,
                           2.0)
        runs([(1, 4.0, False), (1, 4.1, False), (2, 2.0, False), (2, 6.0, True),
              (3, 5.0, True)], 3.0, "new")
        d.store.save_recommendation({"config_id": "rec-off", "agent": "a1", "platform": "p",
                                     "workload": "w", "input": "s", "variant": "", "cores": 2,
                                     "cpus": [0, 1], "threads": 2, "state": "off",
                                     "predicted_time_s": 2.0}, 3.5)
        runs([(2, 3.9, False)], 4.0, "verify", job="rec-off")
        data = answer(d, "report", {})
    finally:
        d.close()
    entry, = data["points"]
    assert sorted((r[0], r[2], r[5]) for r in entry["runs"]) == [
        (1, 4.0, None), (1, 4.1, None), (1, 9.0, "drift"), (2, 2.0, None), (2, 3.9, "off"),
        (2, 6.0, "throttled"), (2, 8.0, "drift"), (3, 5.0, "throttled"), (4, 7.0, "drift")]
    assert [(p.cores, round(p.time_s, 9), p.runs, p.left_out)
            for p in median_points(entry["runs"])] == [
        (1, 4.05, 2, ()), (2, 2.0, 1, ()), (3, 5.0, 1, ("throttled",)), (4, 7.0, 1, ("drift",))]

    data.update(platforms={"p": {"n_cpus": 4, "sweep_order": [0, 1, 2, 3],
                                 "clusters": [[0, 1, 2, 3]]}},
                agents=[{"id": "a1", "board": "box", "platform": "p", "alive": True,
                         "last_seen_s": 1.0}])
    figs = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    html = build_report(data, tmp_path / "site").index.read_text()
    assert ("9 runs at 4 configurations (6 left out of the fit: 3 from before a drift "
            "(&#x27;opptune status&#x27; lists drifts), 2 throttled, 1 verifying a "
            "recommendation judged off)") in html
    assert ("Left out of the fit and of the dots: 6 of the 9 runs (3 from before a drift "
            "(&#x27;opptune status&#x27; lists drifts), 2 throttled, 1 verifying a "
            "recommendation judged off); the 2 configurations that have no other runs are "
            "drawn hollow, at the median of theirs.") in html
    ax, = figs[0].axes
    drawn = {(x, y, line.get_markerfacecolor() == "none")
             for line in ax.get_lines() if line.get_marker() == "o"
             for x, y in line.get_xydata()}
    assert {(x, round(y, 6), hollow) for x, y, hollow in drawn} == {
        (1.0, 4.05, False), (2.0, 2.0, False), (3.0, 5.0, True), (4.0, 7.0, True)}
    assert "not fitted: drift, throttled" in ax.get_legend_handles_labels()[1]
    monkeypatch.undo()
    for fig in figs:
        plots.plt.close(fig)


def test_the_time_map_marks_a_configuration_measured_by_left_out_runs_only(tmp_path,
                                                                           monkeypatch):
    """The time map filled a configuration whose runs were all marked with their median,
    drawn as 'measured' like any other: a hot cell the fit never saw. Such a cell shows the
    model's prediction, as the fit sees it, with a cross of its own in the legend, said in
    the caption; the energy there is modelled too."""
    from opptune.daemon.report import plots
    from opptune.daemon.report.analysis import analyse_group
    runs = [[*r, False, None] for r in _runs([1000.0, 2000.0], True) if r[:2] != [3, 2000.0]]
    busy = [[3, 2000.0, 5.0, 40.0, True, "marked"]] * 2
    entry = {"group": {"platform": "p1", "workload": "w", "input": "small", "variant": ""},
             "runs": runs + busy, "fit_runs": [r[:3] for r in runs]}
    plat = {"n_cpus": 4, "sweep_order": [0, 1, 2, 3], "clusters": [[0, 1, 2, 3]]}
    view = analyse_group(entry, plat, "box", None)
    g = view.grid
    assert g is not None and g.left_out == [(3, 2000.0)], view.model_note
    i, j = g.cores.index(3), g.freqs_mhz.index(2000.0)
    assert g.time_s[i, j] == pytest.approx(view.curves[1].value[2])  # the model's, not 5.0
    assert not g.energy_measured[i, j] and g.energy_j[i, j] != 40.0
    assert int(g.energy_measured.sum()) == 7
    figs = []
    monkeypatch.setattr(plots.plt, "close", figs.append)
    plots.heatmap(view, "time", tmp_path / "time.png")
    ax = figs[0].axes[0]
    marks = {line.get_label(): [tuple(xy) for xy in line.get_xydata()]
             for line in ax.get_lines()}
    assert marks["not fitted: predicted"] == [(j, i)]
    assert (j, i) not in marks["measured"] and len(marks["measured"]) == 7
    monkeypatch.undo()
    plots.plt.close(figs[0])
    data = {"agents": [{"id": "a", "board": "box", "platform": "p1", "alive": True,
                        "last_seen_s": 1.0}], "platforms": {"p1": plat},
            "points": [entry], "recommendations": [], "runs": []}
    html = build_report(data, tmp_path / "site").index.read_text()
    assert ("else the model&#x27;s prediction (crosses: the 1 configuration measured only by "
            "runs the fit leaves out)") in html
    # one reason: its count once ('2 left out of the fit: 2 marked ...' said it twice)
    assert "9 runs at 8 configurations (2 left out of the fit: marked for interference)" \
        in html
    assert ("Left out of the fit and of the dots: 2 of the 9 runs (marked for "
            "interference); the 1 configuration that has no other runs is drawn hollow") in html
