"""How fits are shown to people: parameters of one model, weights of a combination."""

from opptune.daemon.status_view import params_text


def test_a_model_shows_its_numeric_parameters():
    assert params_text("amdahl", {"parallel_fraction": 0.91234, "note": "x", "smt": True}) == \
        "parallel_fraction=0.912"


def test_a_combination_shows_its_members_weights_only():
    params = {"w.amdahl": 0.25, "w.usl+anchor": 0.75, "amdahl.parallel_fraction": 0.9,
              "usl.contention": 0.1}
    assert params_text("combo", params) == "amdahl=0.25, usl+anchor=0.75"


def test_no_parameters_is_an_empty_text():
    assert params_text("hold", None) == ""


def test_status_shows_boards_job_states_fit_errors_and_off_recommendations():
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    group = {"platform": "4a62bc91a3a64086", "workload": "triad", "input": "small",
             "variant": ""}
    data = {
        "daemon": {"instance": "i1", "endpoint": "tcp://127.0.0.1:5555", "uptime_s": 3.0,
                   "database": "d.db"},
        "agents": [{"id": "a1", "board": "odroid-7", "platform": "4a62bc91a3a64086",
                    "alive": True, "last_seen_s": 0.5, "outbox": 0}],
        "runs": [], "fits": [],
        "jobs": [{"job_id": "job-1", "agent": "a1", "board": "odroid-7", "workload": "triad",
                  "size": "huge", "expected": 4, "received": 0, "state": "failed",
                  "reason": "agent a1 refused the job: no size 'huge' (bad_job)",
                  "created": 1.0, "updated": 2.0}],
        "fit_errors": [{"group": group, "error": "no model: needs two core counts",
                        "agent": "a1", "job_id": "job-1"}],
        "recommendations": [{"config_id": "cfg-1", "agent": "a1", "group": group, "cores": 2,
                             "cpus": [0, 1], "freq_khz": None, "predicted_time_s": 1.0,
                             "predicted_lower_s": 0.9, "predicted_upper_s": 1.1,
                             "state": "off", "verified_time_s": 1.25, "off_pct": 25.0,
                             "error": "off by +25.0 % (measured 1.25 s)"}],
    }
    console = Console(record=True, width=250)
    print_status(data, console)
    text = console.export_text()
    assert "odroid-7" in text and "4a62bc91a3a64086 " not in text.split("fit failed")[0]
    assert "failed: agent a1 refused the job: no size 'huge' (bad_job)" in text
    # groups are named by board, not by the platform's hash
    assert "fit failed for odroid-7/triad/small: no model: needs two core counts" in text
    assert "off (off by +25.0 %" in text and "0.9..1.1" in text
    assert "None" not in text and "governor's" in text
    narrow = Console(record=True, width=80)
    print_status(data, narrow)
    assert "\u2026" not in narrow.export_text()  # cells wrap; none is cut with an ellipsis


def test_status_writes_a_many_cpu_boards_cpu_sets_as_ranges():
    """A configuration on one NUMA node of the virtual x86-2numa (its 8 cores and their 8 SMT
    siblings) filled the recommendations table's cpus cell and the applied configuration's
    line with 16 numbers."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    node0 = [*range(8), *range(16, 24)]
    group = {"platform": "p-x86", "workload": "triad", "input": "small", "variant": ""}
    data = {"daemon": {}, "runs": [], "jobs": [], "fits": [],
            "agents": [{"id": "x86", "board": "x86-2numa", "platform": "p-x86", "alive": True,
                        "last_seen_s": 0.5, "outbox": 0,
                        "standing": {"config_id": "cfg-1", "workload": "triad",
                                     "size": "small", "cpus": node0, "freq_khz": 2_400_000}}],
            "recommendations": [{"config_id": "cfg-1", "agent": "x86", "group": group,
                                 "cores": 16, "cpus": node0, "freq_khz": 2_400_000,
                                 "predicted_time_s": 1.0, "state": "verified",
                                 "verified_time_s": 1.01}]}
    console = Console(record=True, width=250)
    print_status(data, console)
    text = console.export_text()
    assert "board x86-2numa (agent x86): applied configuration cfg-1 in force: triad on cpus " \
           "0-7,16-23 at 2400 MHz" in text
    (row,) = [ln for ln in text.splitlines() if "cfg-1" not in ln and "triad" in ln
              and "│" in ln]
    assert [c.strip() for c in row.split("│")][2:5] == ["16", "0-7,16-23", "2400 MHz"], row
    # an agent's hello is not checked as a job's points are: what is not a cpu list is shown
    from opptune.daemon.status_view import standing_lines
    odd = {"id": "x86", "standing": {"config_id": "cfg-2", "workload": "triad", "cpus": ["a", 1]}}
    (line,) = standing_lines(odd, "b")
    assert line.endswith("triad on cpus a,1 with no set frequency")


def _agents_table(platforms):
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {}, "agents": [
        {"id": "a1", "board": "odroid-7", "platform": "p1", "alive": True, "last_seen_s": 0.1,
         "outbox": 0},
        {"id": "a2", "board": "old-agent", "platform": "p2", "alive": False,
         "last_seen_s": 9.0, "outbox": 0}], "platforms": platforms}
    console = Console(record=True, width=250)
    print_status(data, console)
    return console.export_text().split("runs")[0]


def test_status_shows_each_boards_arch_kernel_and_distribution():
    text = _agents_table({"p1": {"arch": "armv7l", "kernel": "6.1.0-21-armmp-lpae",
                                 "distribution": {"pretty_name": "Debian GNU/Linux 12 (bookworm)",
                                                  "id": "debian", "version_id": "12"}},
                          "p2": {"arch": "aarch64", "kernel": None,
                                 "distribution": {"pretty_name": None, "id": "debian",
                                                  "version_id": "11"}}})
    line1 = next(ln for ln in text.splitlines() if "odroid-7" in ln)
    assert "armv7l" in line1 and "6.1.0-21-armmp-lpae" in line1
    assert "Debian GNU/Linux 12 (bookworm)" in line1
    line2 = next(ln for ln in text.splitlines() if "old-agent" in ln)
    assert "aarch64" in line2 and "unknown" in line2 and "debian 11" in line2


def test_status_shows_unknown_for_a_platform_without_these_facts():
    # an older agent's facts, a platform the store lost, or none at all: never a crash
    for platforms in ({"p1": {"hostname": "b"}}, {"p1": None}, {}, None):
        text = _agents_table(platforms)
        line1 = next(ln for ln in text.splitlines() if "odroid-7" in ln)
        assert line1.count("unknown") == 3, line1
        assert "None" not in text


def test_status_says_why_a_group_is_measured_again():
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    group = {"platform": "p1", "workload": "triad", "input": "small", "variant": ""}
    data = {"daemon": {}, "agents": [{"id": "a1", "board": "rpi4", "platform": "p1",
                                      "alive": True, "last_seen_s": 0.1, "outbox": 0}],
            "drift": [{"agent": "a1", "group": group, "since": 5.0,
                       "reason": "2 consecutive verifications outside the prediction interval "
                                 "(last: off by +100.0 %)", "job_ids": ["job-9"],
                       "job_states": ["done"], "error": None, "recommendation": "cfg-7"},
                      {"agent": "a1", "group": group, "since": 9.0, "reason": "2 consecutive",
                       "job_ids": [], "job_states": [], "recommendation": None,
                       "error": "cannot re-characterise: agent 'a1' has not connected"}]}
    console = Console(record=True, width=250)
    print_status(data, console)
    text = console.export_text()
    assert ("drift on rpi4/triad/small: 2 consecutive verifications outside the prediction "
            "interval (last: off by +100.0 %); re-characterising (job-9 done); recommended "
            "again: cfg-7") in text
    assert ("drift on rpi4/triad/small: 2 consecutive; cannot re-characterise: agent 'a1' has "
            "not connected") in text


def test_a_drift_without_a_sweep_or_an_error_says_what_measures_it_again():
    """A drift event that sent no sweep and recorded no error printed '; None'. It says none
    was sent and the sweep that measures the group again; a cluster's group needs the daemon
    to sweep per cluster."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {}, "agents": [{"id": "a1", "board": "rpi4", "platform": "p1",
                                      "alive": True, "last_seen_s": 0.1, "outbox": 0}],
            "drift": [{"agent": "a1", "since": 5.0, "reason": "2 consecutive", "job_ids": [],
                       "job_states": [], "error": None, "recommendation": None,
                       "group": {"platform": "p1", "workload": "triad", "input": "small",
                                 "variant": v}} for v in ("", "cluster1")]}
    console = Console(record=True, width=250)
    print_status(data, console)
    text = console.export_text()
    assert "None" not in text
    assert ("drift on rpi4/triad/small: 2 consecutive; no sweep was sent to measure it "
            "again: opptune sweep --agent a1 --workload triad --size small\n") in text
    assert ("drift on rpi4/triad/small/cluster1: 2 consecutive; no sweep was sent to measure "
            "it again: opptune sweep --agent a1 --workload triad --size small with [sweep] "
            "per_cluster = true in the daemon's configuration\n") in text


def test_marked_points_waiting_are_counted_in_words():
    """'flaky (default) on vm: 1 marked points waiting (retry 2, in 25.1 s)' (walk32)."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {}, "remeasure": [
        {"agent": "vm", "workload": "flaky", "size": "default", "state": "waiting", "retry": 2,
         "due_in_s": 25.1, "points": [{"cores": 1}]},
        {"agent": "vm", "workload": "omp", "size": "default", "state": "measuring", "retry": 1,
         "points": [{"cores": 1}, {"cores": 2}]}]}
    con = Console(record=True, width=200)
    print_status(data, con)
    text = con.export_text()
    assert "flaky (default) on vm: 1 marked point waiting (retry 2, in 25.1 s)\n" in text
    assert "omp (default) on vm: 2 marked points measuring (retry 1)\n" in text


def test_a_new_daemons_status_says_none_instead_of_empty_tables():
    """A daemon with nothing yet printed five grids of headers without a row (found by the
    README walk); each says 'none' in one line, and a table with rows is still a table."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {"instance": "i1", "endpoint": "tcp://127.0.0.1:5555", "uptime_s": 3.0,
                       "database": "d.db"},
            "agents": [], "runs": [], "jobs": [], "fits": [], "recommendations": []}
    con = Console(record=True, width=200)
    print_status(data, con)
    assert con.export_text().splitlines() == [
        "daemon i1 at tcp://127.0.0.1:5555, up 3 s, database d.db", "agents: none",
        "runs: none", "jobs: none", "fits: none", "recommendations: none"]
    data["runs"] = [{"agent": "a1", "workload": "triad", "input": "small", "count": 3,
                     "marked": 0}]
    con = Console(record=True, width=200)
    print_status(data, con)
    text = con.export_text()
    assert "runs: none" not in text
    assert "┃ agent ┃ workload ┃ input ┃ runs ┃ failed ┃ marked ┃" in text


def test_open_tune_sessions_are_a_table_after_the_jobs_and_only_while_there_are_any():
    import time

    from rich.console import Console

    from opptune.daemon.status_view import print_status
    row = {"tune_id": "tune-4f1c", "agent": "xu4", "workload": "triad", "size": "small",
           "goal_text": "minimum energy", "state": "measuring", "measured": 3, "budget": 8,
           "started": 1800000000.0, "updated": 1800000005.0}
    data = {"daemon": {}, "agents": [], "runs": [], "jobs": [], "fits": [],
            "recommendations": [], "tunes": [row, {**row, "tune_id": "tune-77aa"}],
            "page": {"total": {"tunes": 3}}}
    con = Console(record=True, width=200)
    print_status(data, con, limit=2)
    text = con.export_text()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1800000000.0))
    assert text.index("jobs: none") < text.index("tune sessions (open)") < \
        text.index("fits: none")
    assert any(all(w in line for w in ("tune-4f1c", "xu4", "triad (small)", "minimum energy",
                                       "measuring", "3 of 8 (budget)", since))
               for line in text.splitlines()), text
    assert "1 more of 3 open tune sessions: opptune status --all" in text
    data["tunes"] = []
    con = Console(record=True, width=200)
    print_status(data, con)
    assert "tune" not in con.export_text()


def _piped_status(capsys) -> str:
    from opptune.daemon.status_view import print_status
    print_status({"daemon": {}, "platforms": {"p1": {
        "arch": "armv7l", "kernel": "6.1.0-21-armmp-lpae",
        "distribution": {"pretty_name": "Debian GNU/Linux 12 (bookworm)"}}},
        "agents": [{"id": "odroid-7-in-rack-3", "board": "odroid-xu4 (virtual)",
                    "platform": "p1", "alive": True, "last_seen_s": 0.1, "outbox": 0}]})
    return capsys.readouterr().out


def test_piped_status_keeps_every_cell_on_one_line(capsys, monkeypatch):
    """`opptune status | grep`, a log or a CI transcript: stdout is no terminal, and rich's
    80 columns split 'distribu/tion' and the board's name over lines."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = _piped_status(capsys)
    head = next(ln for ln in out.splitlines() if "agent" in ln and "alive" in ln)
    assert "distribution" in head and "last seen (s)" in head, out
    row = next(ln for ln in out.splitlines() if "odroid-7-in-rack-3" in ln)
    assert "odroid-xu4 (virtual)" in row and "Debian GNU/Linux 12 (bookworm)" in row, out
    lines = out.splitlines()
    # title, top rule, head, rule, row, bottom rule: one line each
    assert lines.index("runs: none") - lines.index(head) == 4, out


def test_piped_status_keeps_the_width_the_user_set(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    out = _piped_status(capsys)
    assert max(len(ln) for ln in out.splitlines()) <= 60, out


def test_status_says_once_per_board_that_one_without_cpufreq_is_swept_over_cores_only():
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    off = {"available": False, "reason": "no cpufreq policies under "
                                         "/sys/devices/system/cpu/cpufreq"}
    data = {"daemon": {}, "agents": [
        {"id": "a1", "board": "vm", "platform": "p1", "alive": True, "outbox": 0},
        {"id": "a2", "board": "vm", "platform": "p1", "alive": True, "outbox": 0},
        {"id": "a3", "board": "rpi4", "platform": "p2", "alive": True, "outbox": 0},
        {"id": "a4", "board": "old", "platform": "p3", "alive": True, "outbox": 0}],
        "platforms": {"p1": {"cpufreq": off}, "p2": {"cpufreq": {"available": True}},
                      "p3": {"hostname": "old"}}}
    console = Console(record=True, width=250)
    print_status(data, console)
    said = [ln for ln in console.export_text().splitlines() if "not swept" in ln]
    assert said == ["frequencies not swept on board vm: no cpufreq policies under "
                    "/sys/devices/system/cpu/cpufreq; its cores are swept at its own frequency"]


def test_an_agent_online_through_another_daemon_says_where():
    """alive: connected here; via: the endpoint of the fleet's daemon that holds it."""
    from opptune.daemon.status_view import alive_text
    assert alive_text({"alive": True, "via": None}) == "yes"
    assert alive_text({"alive": False, "via": None}) == "no"
    assert alive_text({"alive": False}) == "no"  # a daemon older than the field
    assert alive_text({"alive": False, "via": "tcp://d1:5555"}) == \
        "no; online through tcp://d1:5555"


def test_a_jobs_long_reason_goes_under_the_table_which_keeps_to_120_columns():
    """The reason of a job the agent stopped for its timeouts (stop_after_timeouts) filled
    the state cell: the jobs table was 328 columns wide on a pipe, and on a 120-column
    terminal the cell folded into 12 lines and the job ids were cut in two. The cell says
    'stopped, see below' (it read 'done' where the agent stopped it) and the whole reason is
    one line under the table; a short one stays."""
    from rich.console import Console

    from opptune.daemon.console import UNBOUNDED_WIDTH
    from opptune.daemon.status_view import print_status
    reason = ("timed out after 600 s (at warmup 0; the rest of the point was not run); the "
              "job stopped after 2 points in a row timed out (points 0, 1 of 12; "
              "stop_after_timeouts = 2 in the agent's configuration): 10 of 12 points not run")
    job = {"agent": "xu4", "board": "odroid-xu4 (virtual)", "workload": "pi_integrate",
           "size": "small", "expected": 24, "received": 24}
    data = {"daemon": {}, "agents": [], "runs": [], "fits": [], "recommendations": [],
            "jobs": [{**job, "job_id": "job-75be4d9ff3f14b5283aa", "state": "done",
                      "reason": reason, "stopped": {"after_timeouts": 2}},
                     {**job, "job_id": "job-58ad30cf9a02462a90fd", "state": "failed",
                      "reason": "no answer"}]}
    for width in (UNBOUNDED_WIDTH, 120):
        console = Console(record=True, width=width)
        print_status(data, console)
        lines = console.export_text().splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "jobs")
        end = next(i for i, ln in enumerate(lines) if ln.startswith("\u2514"))
        table = lines[start:end + 1]
        assert max(map(len, table)) <= 120, table
        assert len(table) == 7, table  # title, header (3 lines), 2 rows, bottom: none folded
        assert "job-75be4d9ff3f14b5283aa" in table[4] and "stopped, see below" in table[4]
        assert "failed: no answer" in table[5]
        assert lines[end + 1] == f"job job-75be4d9ff3f14b5283aa stopped: {reason}"
        assert lines[end + 2] == "fits: none"


def test_a_cancelled_job_reads_cancelled_not_stopped():
    """A cancelled job (opptune cancel) carries its cancel in ``stopped``: its cell says
    'cancelled' (not 'stopped', which is a job the agent stopped for its timeouts)."""
    from opptune.daemon.status_view import job_state_cell
    reason = "cancelled by the user at 2026-11-27 15:20:01 UTC"
    job = {"job_id": "job-1", "state": "cancelled", "reason": reason,
           "stopped": {"cancelled": True, "at": 1.0, "held": False}}
    assert job_state_cell(job) == ("cancelled, see below", f"job job-1 cancelled: {reason}")


def _jobs(n: int) -> list[dict]:
    return [{"job_id": f"job-{i}", "agent": "a1", "board": "b", "workload": "w", "size": "s",
             "expected": 2, "received": 2, "state": "done", "reason": None} for i in range(n)]


def test_a_page_says_how_many_rows_it_left_out_and_how_to_see_them():
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {}, "agents": [], "runs": [], "jobs": _jobs(2), "fits": [],
            "recommendations": [], "page": {"limit": 2, "agent": None,
                                            "total": {"jobs": 30, "runs": 0}}}
    con = Console(record=True, width=200)
    print_status(data, con, limit=2)
    lines = con.export_text().splitlines()
    assert lines[lines.index("runs: none") + 1].strip() == "jobs"  # nothing left out there
    assert "28 more of 30 jobs: opptune status --all for every row, --agent ID for one "\
           "board's" in lines
    con = Console(record=True, width=200)
    print_status(data, con, limit=2, agent="a1")
    assert "28 more of 30 jobs: opptune status --all for every row" in \
        con.export_text().splitlines()


def test_an_older_daemons_whole_lists_are_cut_to_the_newest_rows_here():
    """A daemon that predates paging ignores the limit and sends every row (no ``page``):
    the terminal gets the same page, the newest jobs, and the same line."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    data = {"daemon": {}, "agents": [], "runs": [], "jobs": _jobs(5), "fits": [],
            "recommendations": []}
    con = Console(record=True, width=200)
    print_status(data, con, limit=2)
    text = con.export_text()
    assert "job-3" in text and "job-4" in text and "job-2" not in text
    assert "3 more of 5 jobs: opptune status --all" in text
    con = Console(record=True, width=200)
    print_status(data, con)  # --all: every row, no line
    assert "job-0" in con.export_text() and "more" not in con.export_text()


def test_status_names_the_fleets_silent_daemons_and_the_refused_keys():
    """A killed daemon of a fleet (its row stays in the store) and an agent whose key was
    revoked: the status said nothing of either (the agent only looked offline). Each gets a
    line saying what it is and what to do; a daemon alone prints no fleet line."""
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    daemon = {"instance": "i2", "endpoint": "tcp://d2:5555", "uptime_s": 30.0,
              "database": "postgresql://db/o", "keys_pending": [],
              "keys_refused": [{"id": "0e074b55e13c", "agent": "xu4", "state": "revoked",
                                "first_seen": 1.0, "updated": 2.0}],
              "fleet": [{"instance": "i1", "endpoint": "tcp://d1:5555", "started": 1.0,
                         "last_seen_s": 132.4, "answering": False},
                        {"instance": "i2", "endpoint": "tcp://d2:5555", "started": 1.0,
                         "last_seen_s": 0.3, "answering": True},
                        {"instance": "i3", "endpoint": "tcp://d3:5555", "started": 1.0,
                         "last_seen_s": 0.6, "answering": True}]}
    data = {"daemon": daemon, "runs": [], "jobs": [], "fits": [], "recommendations": [],
            "agents": [{"id": "xu4", "board": "odroid-xu4", "platform": "p", "alive": False,
                        "last_seen_s": 20.0, "outbox": 0}]}
    con = Console(record=True, width=300)
    print_status(data, con)
    lines = con.export_text().splitlines()
    assert lines[1:3] == [
        "fleet: daemon i1 at tcp://d1:5555 not answering: no heartbeat for 132 s (killed, or "
        "its host is down; its agents fail over to the daemons that answer; its row stays "
        "until a daemon starts at that endpoint)",
        "fleet: daemon i3 at tcp://d3:5555 answering (heartbeat 1 s ago)"]
    assert ("key 0e074b55e13c of agent xu4 was revoked by the operator: its messages are "
            "refused and it gets no jobs; to let it in again: opptune keys accept "
            "0e074b55e13c") in lines
    row = next(ln for ln in lines if "xu4" in ln and "│" in ln)
    assert "no; key revoked" in row
    # a daemon that drops silent rows says when (fleet_forget_s)
    for forget_s, when in ((86400.0, "1 day"), (5400.0, "90 min"), (30.0, "30 s")):
        daemon["fleet_forget_s"] = forget_s
        con = Console(record=True, width=300)
        print_status(data, con)
        assert con.export_text().splitlines()[1] == (
            "fleet: daemon i1 at tcp://d1:5555 not answering: no heartbeat for 132 s (killed, "
            "or its host is down; its agents fail over to the daemons that answer; its row is "
            f"dropped once it is silent for {when} (fleet_forget_s), or when a daemon starts "
            "at that endpoint)")
    daemon["fleet"] = daemon["fleet"][1:2]
    con = Console(record=True, width=300)
    print_status(data, con)
    assert not [ln for ln in con.export_text().splitlines() if ln.startswith("fleet:")]


def test_status_says_what_a_user_applied_stands_or_why_a_restart_dropped_it():
    """A daemon that knows one per board sends ``standing`` alone: read as it was."""
    from opptune.daemon.status_view import standing_lines
    a = {"id": "a1", "standing": {"config_id": "cfg-1", "workload": "triad", "size": "small",
                                  "cpus": [4, 5], "freq_khz": 1_800_000}}
    assert standing_lines(a, "odroid-7") == ["board odroid-7 (agent a1): applied configuration "
                                             "cfg-1 in force: triad on cpus 4-5 at 1800 MHz"]
    a["standing"].update(freq_khz=None, target={"kind": "pid", "pid": 4242})
    # a standing record keeps no clock (a virtual board's cpus run at theirs, not a governor's)
    assert standing_lines(a, "odroid-7")[0].endswith(
        "triad on cpus 4-5 with no set frequency, process 4242")
    dropped = {"id": "a1", "standing": None, "standing_dropped": "cfg-1: process 4242 is gone"}
    assert standing_lines(dropped, "odroid-7") == [
        "board odroid-7 (agent a1): the applied configuration was dropped when the agent "
        "restarted: cfg-1: process 4242 is gone; the board is at its original settings"]
    # nothing applied, or an agent older than the field
    assert standing_lines({"id": "a1", "standing": None}, "b") == []
    assert standing_lines({"id": "a1"}, "b") == []


def test_status_says_each_target_s_configuration_a_clock_overridden_and_what_is_not_known():
    from opptune.daemon.status_view import standing_lines
    a = {"id": "a1", "standing_known": True, "standings_dropped": ["cfg-0: unit web is gone"],
         "standings": [
             {"config_id": "cfg-1", "workload": "triad", "cpus": [0, 1], "freq_khz": 1_500_000,
              "clock_overridden": [{"policy": "policy0", "by": "cfg-2",
                                    "freq_khz": 1_000_000}]},
             {"config_id": "cfg-2", "workload": "w", "cpus": [2], "freq_khz": 1_000_000,
              "target": {"kind": "pid", "pid": 42}, "clock_overridden": None}]}
    assert standing_lines(a, "rpi4") == [
        "board rpi4 (agent a1): applied configuration cfg-1 in force: triad on cpus 0-1 at "
        "1500 MHz; its clock is overridden on policy0 by cfg-2 (1000 MHz), applied after it",
        "board rpi4 (agent a1): applied configuration cfg-2 in force: w on cpus 2 at 1000 MHz, "
        "process 42",
        "board rpi4 (agent a1): the applied configuration was dropped when the agent "
        "restarted: cfg-0: unit web is gone; the others stand"]
    # after the daemon's restart, before the agent's hello: not known, not "nothing stands"
    (line,) = standing_lines({"id": "a1", "standing_known": False, "standings": []}, "rpi4")
    assert line.startswith("board rpi4 (agent a1): what stands on it is not known to this "
                           "daemon: its agent has not said hello to it since the daemon "
                           "started"), line
    # held by another daemon of the fleet, the store keeping nothing of it: not known
    (line,) = standing_lines({"id": "a1", "standing_known": False, "via": "tcp://d2:5555",
                              "standings_as_of": None, "standings": []}, "rpi4")
    assert line == ("board rpi4 (agent a1): what stands on it is not known to this daemon: its "
                    "agent said hello to the daemon at tcp://d2:5555 (opptune status --daemon "
                    "tcp://d2:5555 shows it)")


def test_a_fleet_daemon_that_does_not_hold_the_agent_shows_the_holder_s_standings():
    """Before, only 'said hello to the daemon at ...' where the store kept what stands (the
    holder writes it at each hello): now the holder's, as of when, not said unconfirmed."""
    import time
    from opptune.daemon.status_view import standing_lines
    at = time.mktime((2026, 11, 28, 0, 12, 3, 0, 0, -1))
    a = {"id": "a1", "standing_known": False, "via": "tcp://d2:5555", "standings_as_of": at,
         "standings": [{"config_id": "cfg-1", "workload": "w", "cpus": [0, 1],
                        "freq_khz": 1_500_000, "clock_overridden": None,
                        "target": {"kind": "unit", "unit": "web.service"}}]}
    assert standing_lines(a, "rpi4") == [
        "board rpi4 (agent a1): applied configuration cfg-1 in force as of 2026-11-28 "
        "00:12:03, as the daemon at tcp://d2:5555 that holds its agent keeps it: w on cpus 0-1 "
        "at 1500 MHz, unit web.service"]
    assert standing_lines({**a, "standings": []}, "rpi4") == [
        "board rpi4 (agent a1): no applied configuration in force as of 2026-11-28 00:12:03, "
        "as the daemon at tcp://d2:5555 that holds its agent keeps it"]


def test_after_the_daemon_s_restart_status_shows_what_stood_as_of_the_last_hello():
    """Before, nothing but 'not known' until the agent's hello; now the store's, said as of
    when and not yet confirmed."""
    import time
    from opptune.daemon.status_view import standing_lines
    at = time.mktime((2026, 11, 28, 0, 12, 3, 0, 0, -1))
    a = {"id": "a1", "standing_known": False, "standings_as_of": at, "standings": [
        {"config_id": "cfg-1", "workload": "w", "cpus": [0, 1], "freq_khz": 1_500_000,
         "clock_overridden": None}]}
    assert standing_lines(a, "rpi4") == [
        "board rpi4 (agent a1): applied configuration cfg-1 in force as of 2026-11-28 "
        "00:12:03, not yet confirmed: w on cpus 0-1 at 1500 MHz"]
    assert standing_lines({**a, "standings": []}, "rpi4") == [
        "board rpi4 (agent a1): no applied configuration in force as of 2026-11-28 00:12:03, "
        "not yet confirmed (its agent has not said hello to this daemon since it started)"]


def test_status_says_whose_cpu_set_holds_for_a_process_in_a_confined_unit():
    from opptune.daemon.status_view import standing_lines
    unit = {"config_id": "cfg-1", "workload": "w", "cpus": [0, 1], "freq_khz": None,
            "target": {"kind": "unit", "unit": "web.service"}}
    proc = {"config_id": "cfg-2", "workload": "w", "cpus": [1], "freq_khz": None,
            "target": {"kind": "pid", "pid": 42, "in_unit": "web.service"}}
    a = {"id": "a1", "standing_known": True, "standings": [
        {**unit, "cpus_overridden": [{"pid": 42, "by": "cfg-2", "cpus": [1]}]},
        {**proc, "cpus_overridden": None}]}
    assert standing_lines(a, "rpi4") == [
        "board rpi4 (agent a1): applied configuration cfg-1 in force: w on cpus 0-1 with no set "
        "frequency, unit web.service; its cpu set is overridden for process 42 by cfg-2 (cpus "
        "1), the process's own: the narrower target holds for it",
        "board rpi4 (agent a1): applied configuration cfg-2 in force: w on cpus 1 with no set "
        "frequency, process 42 in unit web.service"]
    a["standings"] = [{**unit, "cpus": [0], "cpus_overridden": None},
                      {**proc, "cpus_overridden": [{"unit": "web.service", "by": "cfg-1",
                                                    "cpus": [0]}]}]
    assert standing_lines(a, "rpi4")[1].endswith(
        "process 42 in unit web.service; its cpu set is overridden by cfg-1 (unit web.service, "
        "cpus 0): a process stays within its unit's cpus")


def test_a_fit_made_before_a_drift_says_so_and_what_measures_it_again(tmp_path):
    """A cluster group's drift leaves the whole-board group's earlier runs out too: its stored
    fit is kept (what the recommendations made then rest on) but no longer reads as current."""
    from opptune.daemon.service import Daemon
    from opptune.daemon.status_query import status
    from rich.console import Console

    from opptune.daemon.status_view import predates_text, print_status
    from opptune.daemon.store import Group
    from opptune.shared.config import DaemonConfig
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            curve="off", auto_sweep=False))
    try:
        for v in ("", "cluster0", "cluster1"):
            d.store.save_fit(Group("p1", "w", "small", v), "amdahl", {}, {}, [], now=10.0)
        d.store.save_drift("a1", Group("p1", "w", "small", "cluster1"), "2 off verdicts",
                           [], None, now=20.0)
        d.store.save_fit(Group("p1", "w2", "small", ""), "amdahl", {}, {}, [], now=10.0)
        d.store.save_fit(Group("p1", "w", "small", "cluster1"), "amdahl", {}, {}, [], now=30.0)
        d.store.save_drift("a1", Group("p1", "w2", "small", ""), "2 off verdicts", [], None,
                           now=5.0)  # older than w2's fit
        fits = {(f["group"]["workload"], f["group"]["variant"]): f
                for f in status(d, {})["fits"]}
    finally:
        d.close()
    assert fits["w", ""]["predates_drift"] == {"agent": "a1", "variant": "cluster1",
                                               "since": 20.0, "job_ids": [],
                                               "agent_only": False}
    # refitted after its own drift; another cluster's; a drift before the fit: current
    assert fits["w", "cluster1"]["predates_drift"] is None
    assert fits["w", "cluster0"]["predates_drift"] is None
    assert fits["w2", ""]["predates_drift"] is None
    names = {"p1": "box"}
    assert predates_text(fits["w", ""], names) == (
        "the fit of box/w/small predates the drift of its cluster1 group on agent a1: its "
        "runs from before no longer count (they ran on that cluster too); opptune "
        "characterize --agent a1 measures it again")
    own = {**fits["w", "cluster1"], "predates_drift": {"agent": "a1", "variant": "cluster1",
                                                       "since": 40.0}}
    assert predates_text(own, names) == (
        "the fit of box/w/small/cluster1 predates its drift on agent a1: its runs from "
        "before no longer count; the drift's sweep measures it again and refits it")
    # a drift that sent no sweep (a changed program, drift.REDEFINED) named one all the same
    none_sent = {**fits["w", ""], "predates_drift": {"agent": "a1", "variant": "",
                                                     "since": 40.0, "job_ids": []}}
    assert predates_text(none_sent, names) == (
        "the fit of box/w/small predates its drift on agent a1: its runs from before no "
        "longer count; opptune characterize --agent a1 --size small measures it again and "
        "refits it")
    # a changed program's drift ends that agent's runs only (drift.Drift.redefined)
    mine = {**none_sent, "predates_drift": {**none_sent["predates_drift"], "agent_only": True}}
    assert predates_text(mine, names) == (
        "the fit of box/w/small predates its drift on agent a1: agent a1's runs from before "
        "no longer count (the platform's other agents' stay in); opptune characterize --agent "
        "a1 --size small measures it again and refits it")
    assert predates_text({**own, "predates_drift": {**own["predates_drift"], "job_ids": []}},
                         names).endswith(
        "opptune sweep --agent a1 --workload w --size small with [sweep] per_cluster = true in "
        "the daemon's configuration measures it again and refits it")
    console = Console(record=True, width=200)
    print_status({"agents": [{"id": "a1", "board": "box", "platform": "p1"}],
                  "fits": [fits["w", ""], fits["w", "cluster0"]]}, console)
    out = console.export_text()
    assert "amdahl (predates a drift)" in out and out.count("predates") == 2
    # the report's table of groups says it of the stored fit too
    from opptune.daemon.report.analysis import stored_fit_note
    assert stored_fit_note(fits["w", ""]) == (
        "amdahl (the daemon's fit, made before a drift of its cluster1 group: the runs it "
        "rests on no longer count)")
    assert stored_fit_note(own).endswith("made before a drift of the group: the runs it rests "
                                         "on no longer count)")
    assert stored_fit_note(fits["w", "cluster0"]) == "amdahl (the daemon's fit)"
    # a changed program's drift left that agent's runs only out of the fit (schema 17)
    assert stored_fit_note(mine) == (
        "amdahl (the daemon's fit, made before a drift of the group: agent a1's runs it rests "
        "on no longer count, the platform's other agents' stay in)")


def test_status_names_both_agents_of_one_id_and_the_key_that_parts_them():
    """Two agents connected with one id (status agents[].id_clash): one line naming both
    boards, which gets the jobs, and agent_id; the agent processes where the platforms are
    the same; none without a clash."""
    from rich.console import Console

    from opptune.daemon.status_view import clash_text, print_status
    boards = [{"board": "raspberrypi", "platform": "p1", "instance": "aa11", "holds": True},
              {"board": "raspberrypi", "platform": "p2", "instance": "bb22", "holds": False}]
    a = {"id": "raspberrypi", "board": "raspberrypi", "platform": "p1", "alive": True,
         "last_seen_s": 0.2, "outbox": 0,
         "id_clash": {"since_s": 4.0, "key": "agent_id", "boards": boards}}
    con = Console(record=True, width=400)
    print_status({"daemon": {}, "agents": [a]}, con)
    line = ("agent raspberrypi: two agents use this id at once: raspberrypi (platform p1) holds "
            "it and gets the jobs, raspberrypi (platform p2) is connected too (its results are "
            "stored, it gets no jobs); set agent_id in each board's agent.toml to a name of its "
            "own (default: the host name) and restart its agent")
    assert line in con.export_text().splitlines()
    boards[1]["platform"] = "p1"  # two VMs of one kind: the agent processes tell them apart
    assert "raspberrypi (platform p1, agent instance aa11) holds it" in clash_text(a)
    assert "raspberrypi (platform p1, agent instance bb22) is connected" in clash_text(a)
    # two boards of one platform: the hashed ids that part them, as each agent's start line
    # shows them (the boot id for two of one cloned image)
    boards[0].update(machine="9a1e24c0" + "0" * 24, boot="1e0be647" + "0" * 24)
    boards[1].update(machine="5d6e7f80" + "0" * 24, boot="2a3b4c5d" + "0" * 24)
    assert "raspberrypi (platform p1, machine 9a1e24c0, agent instance aa11) holds" in \
        clash_text(a)
    assert "raspberrypi (platform p1, machine 5d6e7f80, agent instance bb22) is" in \
        clash_text(a)
    boards[1]["machine"] = boards[0]["machine"]
    assert "raspberrypi (platform p1, boot 2a3b4c5d, agent instance bb22) is" in clash_text(a)
    # the holder's daemon, where another daemon of the fleet refuses the other board
    boards[1]["daemon"] = "tcp://d2:5555"
    assert "agent instance bb22) is connected too through the daemon at tcp://d2:5555 (its " \
           "results are stored" in clash_text(a)
    assert clash_text({"id": "x", "id_clash": None}) is None


def test_a_clusters_fit_made_before_a_whole_board_drift_says_so(tmp_path):
    """A drift of the whole-board group leaves its cluster groups' earlier runs out too (they
    ran on the cores that drifted): their stored fits read as predating it, with the sweep that
    measures them again; another size's cluster stays current. Before, only the whole-board
    group's fit did."""
    from opptune.daemon.report.analysis import stored_fit_note
    from opptune.daemon.service import Daemon
    from opptune.daemon.status_query import status
    from opptune.daemon.status_view import predates_text
    from opptune.daemon.store import Group
    from opptune.shared.config import DaemonConfig
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            curve="off", auto_sweep=False))
    try:
        for size, v in (("small", ""), ("small", "cluster0"), ("large", "cluster0")):
            d.store.save_fit(Group("p1", "w", size, v), "amdahl", {}, {}, [], now=10.0)
        d.store.save_drift("a1", Group("p1", "w", "small", ""), "2 off verdicts", [], None,
                           now=20.0)
        fits = {(f["group"]["input"], f["group"]["variant"]): f
                for f in status(d, {})["fits"]}
    finally:
        d.close()
    assert fits["small", "cluster0"]["predates_drift"] == {"agent": "a1", "variant": "",
                                                           "since": 20.0, "job_ids": [],
                                                           "agent_only": False}
    assert fits["large", "cluster0"]["predates_drift"] is None
    assert predates_text(fits["small", "cluster0"], {"p1": "box"}) == (
        "the fit of box/w/small/cluster0 predates the drift of its whole-board group on agent "
        "a1: its runs from before no longer count (they ran on the cores that drifted); "
        "opptune sweep --agent a1 --workload w --size small with [sweep] per_cluster = true "
        "in the daemon's configuration measures it again")
    assert stored_fit_note(fits["small", "cluster0"]) == (
        "amdahl (the daemon's fit, made before a drift of its whole-board group: the runs it "
        "rests on no longer count)")


def test_a_cancelled_jobs_runs_not_run_are_not_shown_as_received():
    """The runs an agent recorded as not run at a cancel count in ``received`` (stored), so a
    cancelled job read '4/4' as if every run was measured. Its cell says how many were; a
    job whose runs failed (measured) and a job from a daemon without ``not_run`` as before."""
    from rich.console import Console

    from opptune.daemon.console import UNBOUNDED_WIDTH
    from opptune.daemon.status_view import print_status
    job = {"job_id": "job-1", "agent": "a1", "board": "b", "workload": "w", "size": "s",
           "expected": 4, "received": 4, "reason": None}
    data = {"daemon": {}, "agents": [], "runs": [], "fits": [], "recommendations": [],
            "jobs": [{**job, "job_id": "job-c", "state": "cancelled", "not_run": 3},
                     {**job, "job_id": "job-f", "state": "failed", "not_run": 0},
                     {**job, "job_id": "job-o", "state": "done"}]}
    console = Console(record=True, width=UNBOUNDED_WIDTH)
    print_status(data, console)
    rows = {ln.split()[1]: ln for ln in console.export_text().splitlines()
            if ln.startswith("\u2502 job-")}
    assert "\u2502 1/4 measured, 3 not run \u2502 cancelled" in rows["job-c"], rows
    assert "\u2502 4/4 " in rows["job-f"] and "\u2502 4/4 " in rows["job-o"], rows


def test_the_runs_table_and_the_reports_fleet_count_failed_runs_apart():
    """58 'runs' of which 4 failed: status' runs table and the report's Fleet counted the
    failed runs as runs; they say 54 and 4 failed (a daemon older than the key: '-')."""
    from rich.console import Console

    from opptune.daemon.report.analysis import fleet_rows
    from opptune.daemon.status_view import print_status
    row = {"agent": "a1", "platform": "p", "workload": "triad", "input": "small",
           "count": 54, "failed": 4, "marked": 2}
    data = {"daemon": {}, "agents": [{"id": "a1", "board": "box", "platform": "p"}],
            "runs": [row, {**row, "workload": "old", "count": 7, "failed": None}],
            "jobs": [], "fits": [], "recommendations": []}
    con = Console(record=True, width=200)
    print_status(data, con)
    lines = con.export_text().splitlines()
    head = [c.strip() for c in next(ln for ln in lines if "marked" in ln and "┃" in ln
                                    ).split("┃")]
    assert head[4:7] == ["runs", "failed", "marked"], head
    cells = {c[2]: c[4:7] for c in ([x.strip() for x in ln.split("│")] for ln in lines
                                    if "│" in ln and "small" in ln)}
    assert cells == {"triad": ["54", "4", "2"], "old": ["7", "-", "2"]}
    (fleet,) = fleet_rows(data)
    assert (fleet["runs"], fleet["failed"]) == (61, 4)


def test_a_unit_that_stopped_while_the_agent_ran_is_said_so_not_taken_for_a_restart():
    """Before, only a process's 'exited while the agent ran' read as a drop while the agent
    ran; a unit's stop (agent/apply.py) read 'dropped when the agent restarted'."""
    from opptune.daemon.status_view import standing_lines
    why = "c2: unit web.service stopped while the agent ran (ActiveState=failed)"
    assert standing_lines({"id": "a1", "standings": [], "standings_dropped": [why]}, "b") == [
        f"board b (agent a1): the applied configuration was dropped while the agent ran: {why}; "
        "the board is at its original settings"]
