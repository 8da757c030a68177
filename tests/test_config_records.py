"""Configuration loading (errors name file and key) and run-record validation."""

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opptune.shared.config import ConfigError, load_agent_config, load_daemon_config
from opptune.shared.records import (_FIELD_NAMES, RecordError, RunRecord, columns_of,
                                    mark_invalid, record_columns)


def test_defaults_when_default_file_is_absent(monkeypatch, tmp_path):
    monkeypatch.setattr("opptune.shared.config.DEFAULT_DAEMON_CONFIG", tmp_path / "none.toml")
    cfg = load_daemon_config()
    assert cfg.tolerance == 0.05 and cfg.sweep.reps == 3


def test_file_values_and_overrides(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('agent_id = "board-7"\nheartbeat_s = 1\nbench_kernels = ["compute"]\n'
                    '[[workloads]]\nname = "app"\ncommand = ["./app", "-t", "{threads}"]\n')
    cfg = load_agent_config(path, daemon="tcp://10.0.0.1:1")
    assert cfg.agent_id == "board-7" and cfg.heartbeat_s == 1.0
    assert cfg.daemon == "tcp://10.0.0.1:1"
    assert cfg.workloads[0].command == ["./app", "-t", "{threads}"]


def test_nested_table(tmp_path):
    path = tmp_path / "daemon.toml"
    path.write_text("[sweep]\nreps = 5\nfrequencies = [1000000, 1400000]\n")
    cfg = load_daemon_config(path)
    assert cfg.sweep.reps == 5 and cfg.sweep.frequencies == [1000000, 1400000]


@pytest.mark.parametrize("text, needle", [
    ("heartbeet_s = 1\n", "unknown key 'heartbeet_s'"),
    ("heartbeat_s = 'fast'\n", "key 'heartbeat_s' must be a number of seconds > 0"),
    ("[[workloads]]\nname = 'x'\n", "lacks 'command'"),
    ("[[workloads]]\nname = 'x'\ncommand = 'rm -rf /'\n", "array of strings"),
    ("agent_id = \n", "not valid TOML"),
])
def test_errors_name_file_and_key(tmp_path, text, needle):
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_agent_config(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_named_file_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_daemon_config(tmp_path / "missing.toml")


def _record(**kw):
    base = dict(platform="p", workload="compute", input="small", cores=2, cpus=[0, 1], threads=2,
                rep=0, time_s=1.5)
    base.update(kw)
    return RunRecord(**base)


def test_record_round_trip():
    rec = _record(counters={"cycles": None}, invalid={"cycles": "no PMU"})
    assert RunRecord.from_dict(rec.to_dict()) == rec


@pytest.mark.parametrize("kw, needle", [
    ({"cpus": [0]}, "cpus"),
    ({"time_s": -1.0}, "time_s"),
    ({"time_s": float("nan")}, "time_s"),
    ({"time_s": None}, "needs time_s"),
    ({"cores": 0, "cpus": []}, "cores >= 1"),
    ({"workload": 3}, "workload"),
])
def test_bad_records_are_refused_with_the_field_named(kw, needle):
    with pytest.raises(RecordError, match=needle):
        RunRecord.from_dict(_record(**kw).to_dict())


def test_unknown_record_field_refused():
    data = _record().to_dict()
    data["bogus"] = 1
    with pytest.raises(RecordError, match="bogus"):
        RunRecord.from_dict(data)


def test_failed_record_may_lack_time():
    rec = _record(ok=False, time_s=None, error="exit 1")
    assert RunRecord.from_dict(rec.to_dict()).error == "exit 1"


def test_mark_invalid_is_none_not_zero():
    rec = _record(energy_j=0.0, counters={"cycles": 0.0})
    mark_invalid(rec, "energy_j", "no sensor")
    mark_invalid(rec, "cycles", "no PMU")
    assert rec.energy_j is None and rec.counters["cycles"] is None
    assert rec.invalid == {"energy_j": "no sensor", "cycles": "no PMU"}


def test_shipped_example_configs_load():
    from pathlib import Path
    etc = Path(__file__).resolve().parent.parent / "etc"
    agent = load_agent_config(etc / "agent.toml")
    daemon = load_daemon_config(etc / "daemon.toml")
    assert agent.daemon.startswith("tcp://") and agent.bench_kernels == ["all"]
    assert daemon.tolerance == 0.05 and daemon.sweep.frequencies == []


def _example_keys(text: str) -> tuple[dict[str, set[str]], str]:
    """({section: keys named in it, live or in a '# key = value' comment}, the text with those
    comments made live where the section has no live key of that name): what etc/ shows."""
    named: dict[str, set[str]] = {}
    live: dict[str, set[str]] = {}
    section, out = "", []
    for line in text.splitlines():
        bare = re.sub(r"^#\s?", "", line) if line.startswith("#") else line
        head = re.match(r"\[+([a-z_]+)\]+\s*(#.*)?$", bare)
        key = re.match(r"([a-z_]+)\s*=", bare)
        if head:
            section = head.group(1)
            out.append(bare)
            continue
        if key:
            named.setdefault(section, set()).add(key.group(1))
            if line is bare:
                live.setdefault(section, set()).add(key.group(1))
            elif key.group(1) in live.get(section, set()):
                continue  # another value of a key set above (database = postgresql://...)
            out.append(bare)
    return named, "\n".join(out) + "\n"


@pytest.mark.parametrize("name", ["agent", "daemon"])
def test_every_key_is_shown_in_the_shipped_example_and_its_examples_load(name, tmp_path):
    """etc/ left out keys an operator can set (the daemon's [sweep] frequency_grid,
    per_cluster and adaptive repetitions, log_level, the agent's interference_max_share, a
    pyperf workload's keys), known only from the README's prose or the code. Each key of
    each table is named in its example, and the example with its commented values made live
    loads."""
    import dataclasses

    from opptune.shared.config import AgentConfig, CommandWorkload, DaemonConfig, SweepDefaults
    text = (Path(__file__).resolve().parent.parent / "etc" / f"{name}.toml").read_text()
    named, uncommented = _example_keys(text)
    tables = ({"": AgentConfig, "workloads": CommandWorkload} if name == "agent"
              else {"": DaemonConfig, "sweep": SweepDefaults})
    for section, cls in tables.items():
        fields = {f.name for f in dataclasses.fields(cls)} - set(tables)
        assert fields - named.get(section, set()) == set(), f"[{section}] of etc/{name}.toml"
        assert named.get(section, set()) <= fields
    path = tmp_path / f"{name}.toml"
    path.write_text(uncommented)
    (tmp_path / "bench.py").write_text("")  # the pyperf workload's script
    # a workload's cwd must exist: the example's /srv/work stands for one here
    path.write_text(uncommented.replace('cwd = "/srv/work"', f'cwd = "{tmp_path}"'))
    config = (load_agent_config if name == "agent" else load_daemon_config)(path)
    if name == "agent":
        assert [w.name for w in config.workloads] == ["ffmpeg-h264", "bench"]
    else:
        assert config.sweep.frequency_grid == "list" and config.sweep.adaptive is False


def test_compact_form_leaves_out_defaults_and_round_trips():
    rec = _record()
    compact = rec.to_dict()
    assert "energy_j" not in compact and "counters" not in compact and "ok" not in compact
    assert compact["time_s"] == 1.5 and compact["cpus"] == [0, 1]
    assert RunRecord.from_dict(compact) == rec
    full = rec.to_dict(compact=False)
    assert full["energy_j"] is None and full["ok"] is True
    assert RunRecord.from_dict(full) == rec


@pytest.mark.parametrize("kind, text, needle", [
    ("agent", 'daemon = "127.0.0.1:5555"\n', "key 'daemon': '127.0.0.1:5555' lacks a transport; "
                                             'write it as "tcp://127.0.0.1:5555"'),
    ("agent", 'daemon = "udp://10.0.0.1:5555"\n', "unknown transport 'udp'"),
    ("daemon", 'bind = "0.0.0.0:5555"\n', "key 'bind': '0.0.0.0:5555' lacks a transport"),
    # a bare host got 'write it as "tcp://board"', which names no port and fails again
    ("agent", 'daemon = "board"\n', 'lacks a transport; write it as "tcp://board:5555"'),
    ("daemon", "tolerance = -0.05\n", "key 'tolerance' must be >= 0"),
    # libzmq takes a port above 65535 modulo 65536: the agent would knock on port 4464
    ("agent", 'daemon = "tcp://10.0.0.1:70000"\n',
     "key 'daemon': 'tcp://10.0.0.1:70000' has the port '70000', not a number from 0 to 65535"),
    ("agent", 'daemon = "tcp://10.0.0.1"\n', "key 'daemon': 'tcp://10.0.0.1' names no port"),
])
def test_endpoint_without_transport_and_negative_tolerance_name_file_and_key(
        tmp_path, kind, text, needle):
    path = tmp_path / f"{kind}.toml"
    path.write_text(text)
    load = load_agent_config if kind == "agent" else load_daemon_config
    with pytest.raises(ConfigError) as exc:
        load(path)
    assert str(exc.value).startswith(f"{path}: ") and needle in str(exc.value)


def test_endpoint_from_the_command_line_names_the_option():
    with pytest.raises(ConfigError, match=r"^--daemon: 'board:1' lacks a transport"):
        load_agent_config(None, daemon="board:1")


_ODD = [None, True, False, 0, 1, -1, 2, 2**31, 2**63, 2**64, 0.5, -0.5, float("nan"),
        float("inf"), "", "x", "x" * 1025, b"x", [], [0], [0, 1], [True, 1], [0.0, 1], (0, 1),
        {}, {"a": 1}, {"program": "x"}, {"program": 1}]


@given(st.dictionaries(st.sampled_from(sorted(_FIELD_NAMES) + ["bogus"]),
                       st.sampled_from(_ODD), max_size=6),
       st.lists(st.sampled_from(["platform", "cores", "cpus", "threads", "rep", "workload",
                                 "input"]), max_size=2),
       st.booleans())
@settings(max_examples=3000, deadline=None)
def test_record_columns_accepts_only_what_from_dict_accepts(changes, dropped, failed):
    """The ingest path's fast read of a record (record_columns) never accepts a record that
    from_dict refuses, and reads the same columns from one it accepts."""
    data = _record(ok=not failed, time_s=None if failed else 1.5, freq_mhz=1800.0,
                   variant="v=1").to_dict()
    data.update(changes)
    for name in dropped:
        data.pop(name, None)
    cols = record_columns(data)
    try:
        rec = RunRecord.from_dict(data)
    except RecordError:
        assert cols is None
        return
    assert cols is None or cols == columns_of(rec)


def test_record_columns_reads_a_plain_record_and_leaves_extra_to_from_dict():
    data = _record(energy_j=3, marked="load", throttled=True).to_dict()
    assert record_columns(data) == columns_of(RunRecord.from_dict(data))
    assert record_columns(data).energy_j == 3 and record_columns(data).marked == "load"
    data["extra"] = {"point": {"index": 0, "done": True}}
    assert record_columns(data) is None  # the closing point is read from the full record
    # what else extra holds is stored as it came: every run of a newer agent has one
    data["extra"] = {"start_cost_s": 0.0017, "mpet": {"R": 1.0}}
    assert record_columns(data) == columns_of(RunRecord.from_dict(data))
    data["extra"] = ["not", "a", "map"]
    assert record_columns(data) is None


def test_a_records_program_digest_keeps_it_on_the_fast_read():
    """Every run of a newer agent carries its program digest in extra (agent/runner.py):
    that alone leaves the record on the ingest path's fast read, and program_of reads it.
    A digest that is not text is stored as it came and read as none; an extra that holds
    ``point`` or is not a map goes to from_dict as before."""
    from opptune.shared.records import program_of
    data = _record().to_dict()
    assert program_of(data) is None
    data["extra"] = {"program": "0123456789abcdef"}
    assert record_columns(data) == columns_of(RunRecord.from_dict(data))
    assert program_of(data) == "0123456789abcdef"
    data["extra"] = {"program": 5, "start_cost_s": 0.002}
    assert record_columns(data) == columns_of(RunRecord.from_dict(data))
    assert program_of(data) is None
    for extra in ({"program": "p", "point": {"index": 0}}, ["program"]):
        data["extra"] = extra
        assert record_columns(data) is None
        assert program_of(data) is None or extra == {"program": "p", "point": {"index": 0}}
