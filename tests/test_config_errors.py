"""Every class of invalid configuration value, through the real entry points (opptune-daemon
and opptune-agent): exit status 2, one line on stderr that names the file, the key and the
expected form, no traceback, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opptune.agent.cli import main as agent_main
from opptune.daemon.service import main as daemon_main
from procs import RUN_AS_OPTION

# (program, TOML text, what the one line must say besides the file's path)
CASES = [
    # wrong type
    ("daemon", "heartbeat_s = 'fast'", ["key 'heartbeat_s'", "a number of seconds > 0",
                                        "got text 'fast'"]),
    ("daemon", "auto_sweep = 'yes'", ["key 'auto_sweep'", "true or false"]),
    ("agent", "bench_kernels = 'triad'", ["key 'bench_kernels'", "an array of kernel names"]),
    ("daemon", "sweep = 3", ["[sweep] must be a table"]),
    ("agent", "[[workloads]]\nname = 'w'\ncommand = 'make run'",
     ["[[workloads]] entry 1", "'command' must be an array of strings"]),
    ("agent", "[[workloads]]\nname = 'w'\ncommand = ['x']\nsizes = 'small'",
     ["[[workloads]] entry 1", "'sizes' must be a non-empty array of size names"]),
    # bad duration and size strings: plain numbers only
    ("agent", "run_timeout_s = '10m'", ["key 'run_timeout_s'", "a number of seconds > 0",
                                        "got text '10m'"]),
    ("daemon", "max_message_bytes = '1MiB'", ["key 'max_message_bytes'",
                                              "a byte count from 1024 to 1048576"]),
    # out of range
    ("agent", "heartbeat_s = 0", ["key 'heartbeat_s'", "a number of seconds > 0", "0.0"]),
    ("daemon", "agent_timeout_s = nan", ["key 'agent_timeout_s'", "a number of seconds > 0",
                                         "nan"]),
    ("daemon", "max_message_bytes = 100", ["key 'max_message_bytes'", "from 1024 to 1048576",
                                           "100"]),
    ("daemon", "tolerance = 5.0", ["key 'tolerance'", ">= 0 and <= 1"]),
    ("daemon", "verify_reps = 0", ["key 'verify_reps'", "a whole number >= 1"]),
    ("daemon", "[sweep]\nreps = 0", ["key 'sweep.reps'", "a whole number >= 1"]),
    ("daemon", "[sweep]\nfrequencies = ['1.2GHz']", ["key 'sweep.frequencies'",
                                                    "frequencies in kHz"]),
    ("daemon", "[sweep]\nfrequency_grid = 'some'", ["'sweep.frequency_grid'", "\"none\""]),
    # a number is a grid too (3 below), but not 0 nor a fraction: the message gives the form
    ("daemon", "[sweep]\nfrequency_grid = 0", ["'sweep.frequency_grid' must be \"none\"",
                                               "got 0"]),
    ("daemon", "[sweep]\nfrequency_grid = 2.5", ["'sweep.frequency_grid' must be \"none\"",
                                                 "got number 2.5"]),
    ("agent", "agent_id = ''", ["key 'agent_id'", "1 to 64 characters"]),
    ("agent", f"agent_id = '{'b' * 65}'", ["key 'agent_id'", "1 to 64 characters"]),
    ("daemon", "log_level = 'loud'", ["key 'log_level'", "\"DEBUG\", \"INFO\""]),
    ("daemon", "curve = 'yes'", ["key 'curve'", "\"auto\""]),
    # unknown key: the closest known one suggested
    ("agent", "hearbeat_s = 1.0", ["unknown key 'hearbeat_s'", "did you mean 'heartbeat_s'?"]),
    ("daemon", "[sweep]\nrepz = 2", ["unknown key 'sweep.repz'", "did you mean 'sweep.reps'?"]),
    ("agent", "[[workloads]]\nname = 'w'\ncommand = ['x']\nsize = ['s']",
     ["[[workloads]] entry 1", "unknown key 'size'"]),
    # a workload's working directory: an existing directory
    ("agent", "[[workloads]]\nname = 'w'\ncommand = ['x']\ncwd = 'no-such-dir'",
     ["[[workloads]] entry 1", "no-such-dir does not exist; create it", "leave 'cwd' out"]),
    ("agent", "[[workloads]]\nname = 'w'\ncommand = ['x']\ncwd = '/dev/null'",
     ["[[workloads]] entry 1", "'cwd' /dev/null is not a directory", "leave 'cwd' out"]),
    ("agent", "[[workloads]]\nname = 'w'\ncommand = ['x']\ncwd = 3",
     ["[[workloads]] entry 1", "'cwd' must be the path of a directory", "got integer 3"]),
    # a misspelt 'command' was "entry 1 lacks 'command'", the typo never named
    ("agent", "[[workloads]]\nname = 'w'\ncomand = ['./app']",
     ["[[workloads]] entry 1", "unknown key 'comand'", "did you mean 'command'?"]),
    # bad endpoint
    ("agent", "daemon = 'daemon-host:5555'", ["key 'daemon'", "write it as \"tcp://"]),
    ("daemon", "bind = 'udp://0.0.0.0:5555'", ["key 'bind'", "unknown transport"]),
    ("agent", "failover_daemons = ['tcp://a:1', 'b:2']", ["key 'failover_daemons' entry 2",
                                                          "tcp://b:2"]),
    ("daemon", "metrics_endpoint = 'localhost'", ["key 'metrics_endpoint'", "HOST:PORT"]),
    ("daemon", "database = 'mysql://h/db'", ["key 'database'", "postgresql://"]),
    # bad user
    ("agent", "run_as = 'no-such-user-opptune'", ["key 'run_as'", "no-such-user-opptune"]),
    # a directory that does not exist (read as a board of 0 cpus before)
    ("agent", "sysfs_root = '/nonexistent-opptune-tree'", ["key 'sysfs_root'",
                                                           "/nonexistent-opptune-tree",
                                                           "no such directory"]),
    # not TOML at all
    ("daemon", "bind = ", ["not valid TOML"]),
]


def _run(program: str, path, tmp_path, capsys) -> tuple[int, str]:
    if program == "daemon":
        code = daemon_main(["--config", str(path)])
    else:
        # as root, the workloads' user given (unless the case is about it): the cases are
        # refused for their own key
        user = [] if b"run_as" in path.read_bytes() else RUN_AS_OPTION  # some are not text
        code = agent_main(["--config", str(path), "--state-dir", str(tmp_path / "state"),
                           *user])
    out = capsys.readouterr()
    assert out.out == ""
    return code, out.err


@pytest.mark.parametrize("program, text, says", CASES,
                         ids=[f"{p}:{t.splitlines()[-1][:30]}" for p, t, _ in CASES])
def test_invalid_value_names_file_key_and_form(tmp_path, capsys, program, text, says):
    path = tmp_path / f"{program}.toml"
    path.write_text(text + "\n")
    code, err = _run(program, path, tmp_path, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith(f"opptune-{program}: ") and str(path) in line
    assert "Traceback" not in err
    for part in says:
        assert part in line, line
    assert not (tmp_path / "opptune.db").exists()
    assert not (tmp_path / "state").exists()  # the agent's: no outbox made for a refused one


def test_a_state_dir_the_agent_cannot_create_names_the_key_without_errno(tmp_path, capsys):
    # was "... is not usable: [Errno 20] Not a directory: '...'"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = tmp_path / "agent.toml"
    path.write_text(f"daemon = 'tcp://127.0.0.1:9'\nstate_dir = '{blocker}/state'\n")
    assert agent_main(["--config", str(path), *RUN_AS_OPTION]) == 2
    out = capsys.readouterr()
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"opptune-agent: configuration error: {path}: key 'state_dir' "
                           f"({blocker}/state) is not usable: ")
    assert "Errno" not in line and line.endswith("give a directory the agent may create and "
                                                 "write")


def test_a_state_dir_given_as_option_is_named_as_the_option(tmp_path, capsys):
    """'opptune-agent --state-dir FILE' said "configuration: key 'state_dir' (FILE) is not
    usable", naming a key of no file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert agent_main(["--daemon", "tcp://127.0.0.1:9", "--state-dir", str(blocker),
                       *RUN_AS_OPTION]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"opptune-agent: configuration error: --state-dir ({blocker}) is "
                           "not usable: ")


def test_command_line_values_are_named_as_options(capsys):
    assert agent_main(["--config", "/nonexistent-dir/none.toml"]) == 2
    assert "configuration file not found" in capsys.readouterr().err
    assert agent_main(["--heartbeat=-1", "--config", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "--heartbeat must be a number of seconds > 0" in err and err.count("\n") == 1


@pytest.mark.parametrize("module", ["opptune.daemon.service", "opptune.agent"])
def test_processes_exit_2_with_one_line(tmp_path, module):
    """As a process: no traceback, one line, status 2."""
    path = tmp_path / "c.toml"
    path.write_text("heartbeat_s = '2s'\n")
    proc = subprocess.run([sys.executable, "-m", module, "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{path}: key 'heartbeat_s' must be a number of seconds > 0" in proc.stderr


@pytest.mark.parametrize("key, extra", [
    ("database", {"bind": "tcp://127.0.0.1:0"}),
    ("keys_dir", {"bind": "tcp://0.0.0.0:0", "curve": "on"}),
])
def test_a_path_the_daemon_cannot_create_names_the_file_and_key(tmp_path, capsys, key, extra):
    """A database or keys_dir under a regular file (or anywhere the daemon's user may not
    write): one line naming the configuration file, the key and what to give, exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    values = {"database": str(tmp_path / "db" / "opptune.db"), **extra,
              key: str(blocker / ("x.db" if key == "database" else "keys"))}
    path = tmp_path / "daemon.toml"
    path.write_text("".join(f"{k} = '{v}'\n" for k, v in values.items()))
    code = daemon_main(["--config", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"opptune-daemon: {path}: key '{key}' ({blocker}/"), line
    assert "Errno" not in line and "may create and write" in line


@pytest.mark.parametrize("program", ["daemon", "agent", "operator"])
def test_a_file_that_is_not_text_is_refused_in_one_line(tmp_path, capsys, program):
    """A binary file given as --config (was a UnicodeDecodeError traceback from tomllib, in
    every program): one line naming the file, exit 2."""
    from opptune.daemon.cli import main as operator_main
    path = tmp_path / "c.toml"
    path.write_bytes(b"bind = \"tcp://\xd0\x00\xff\"\n\x7fELF\x02\x01")
    if program == "operator":
        code, err = operator_main(["status", "--config", str(path)]), capsys.readouterr().err
    else:
        code, err = _run(program, path, tmp_path, capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "Traceback" not in err and str(path) in line
    assert "not valid TOML" in line and "UTF-8" in line


def test_an_unknown_virtual_board_is_named_as_the_option_given(tmp_path, capsys):
    """--virtual-board NAME on the command line had been reported as "configuration: key
    'virtual_board'", a file and key the user never wrote; the file's key stays named so."""
    state = str(tmp_path / "state")
    assert agent_main(["--virtual-board", "rpi5", "--config", "/dev/null",
                       "--state-dir", state]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("opptune-agent: configuration error: --virtual-board: unknown virtual "
                    "board 'rpi5'; known: odroid-xu4, x86-2numa, rpi4")
    path = tmp_path / "agent.toml"
    path.write_text("virtual_board = 'rpi5'\n")
    assert agent_main(["--config", str(path), "--state-dir", state]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"opptune-agent: configuration error: {path}: key 'virtual_board': "
                           "unknown virtual board 'rpi5'")


def test_a_frequency_grid_of_a_number_is_taken_as_the_quoted_one(tmp_path):
    """'frequency_grid = 3' was refused ("must be text, got integer 3") while its form says
    "a number of evenly spread frequencies" and the planner takes a number."""
    from opptune.daemon.planner import grid_asks_frequencies
    from opptune.shared.config import load_daemon_config
    for value, want in (("3", 3), ('"3"', "3"), ('"all"', "all")):
        path = tmp_path / "daemon.toml"
        path.write_text(f"[sweep]\nfrequency_grid = {value}\n")
        sweep = load_daemon_config(path).sweep
        assert sweep.frequency_grid == want
        assert grid_asks_frequencies(sweep, None) is True


def test_relative_paths_in_a_file_are_taken_from_its_directory(tmp_path, monkeypatch):
    """A relative state_dir (or database) was taken from the working directory: started from
    /tmp it made /tmp/relative-state, under systemd (working directory /) a path on the
    read-only root. Now from the file's directory, as a pyperf script's path already was; a
    command-line option stays relative to where the command runs, a URL is left alone."""
    from opptune.shared.config import load_agent_config, load_daemon_config
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "agent.toml").write_text('state_dir = "state"\nsysfs_root = "../fake"\n')
    (conf / "daemon.toml").write_text('database = "db/opptune.db"\nkeys_dir = "keys"\n')
    (conf / "pg.toml").write_text('database = "postgresql://u@h/db"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    agent = load_agent_config(conf / "agent.toml")
    assert agent.state_dir == str(conf / "state")
    assert agent.sysfs_root == str(tmp_path / "fake")
    daemon = load_daemon_config(conf / "daemon.toml")
    assert daemon.database == str(conf / "db/opptune.db") and daemon.keys_dir == str(
        conf / "keys")
    assert load_daemon_config(conf / "pg.toml").database == "postgresql://u@h/db"
    assert load_agent_config(conf / "agent.toml", state_dir="mine").state_dir == "mine"
    # the same through a relative --config path
    assert load_agent_config("../etc/agent.toml").state_dir == str(conf / "state")


@pytest.fixture
def read_only_dir(tmp_path):
    """(directory, its source, seal): ``seal()`` makes the directory one the test's user
    cannot write: mode 0555, or for root (whom modes do not stop) a read-only bind mount of
    the source, unmounted afterwards. Files made in the source before show through."""
    made = tmp_path / "ro-src"
    made.mkdir()
    if os.geteuid() != 0:
        yield made, made, lambda: made.chmod(0o555)
        made.chmod(0o755)
        return
    ro = tmp_path / "ro"
    ro.mkdir()

    def seal() -> None:
        for argv in (["mount", "--bind", str(made), str(ro)],
                     ["mount", "-o", "remount,bind,ro", str(ro)]):
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode:
                pytest.skip(f"cannot make a read-only bind mount: {res.stderr.strip()}")

    yield ro, made, seal
    # the daemon's refused store held the database open: umount said 'target is busy'
    res = subprocess.run(["umount", str(ro)], capture_output=True, text=True)
    assert res.returncode == 0 or "not mounted" in res.stderr, res.stderr


@pytest.mark.parametrize("existing", [False, True])
def test_a_database_in_a_read_only_directory_says_the_directory_and_what_to_do(
        tmp_path, capsys, read_only_dir, existing):
    """A database in a directory the daemon may not write reported only SQLite's text
    ('unable to open database file', or for a writable file 'attempt to write a readonly
    database'). The line now names the directory, why SQLite needs it writable (its
    journal beside the database) and what to do."""
    import sqlite3
    where, source, seal = read_only_dir
    if existing:  # made before the directory became read-only
        sqlite3.connect(source / "opptune.db").close()
    seal()
    path = tmp_path / "daemon.toml"
    path.write_text(f"bind = 'tcp://127.0.0.1:0'\ndatabase = '{where / 'opptune.db'}'\n")
    code = daemon_main(["--config", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"opptune-daemon: {path}: key 'database' ({where}/opptune.db): "
                           "cannot open the SQLite database: "), line
    assert f"the directory {where} is not writable" in line, line
    assert "opptune.db-wal, opptune.db-shm" in line and "make the directory writable" in line
    assert ("creates its journal" in line) == existing, line
    assert sorted(p.name for p in where.iterdir()) == (["opptune.db"] if existing else [])


@pytest.mark.parametrize("damage", ["not a database", "truncated"])
def test_a_damaged_database_says_so_not_to_fix_its_permissions(tmp_path, capsys, damage):
    """A database file SQLite cannot read (another file given by mistake, a copy cut short)
    got the advice for a path the daemon may not write ('give a path the daemon's user may
    create and write'), which it may. The line now says the file is damaged, that it was left
    as it is, and what to do; the file is unchanged."""
    import sqlite3
    db = tmp_path / "opptune.db"
    if damage == "truncated":  # a real store, cut in half
        from opptune.daemon.store import open_store
        open_store(str(db)).close()
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        data = db.read_bytes()
        db.write_bytes(data[:len(data) // 2])
    else:
        db.write_bytes(b"CSV? no: " * 200)
    before = db.read_bytes()
    path = tmp_path / "daemon.toml"
    path.write_text(f"bind = 'tcp://127.0.0.1:0'\ndatabase = '{db}'\n")
    code = daemon_main(["--config", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"opptune-daemon: {path}: key 'database' ({db}): cannot open the "
                           "SQLite database: "), line
    assert line.endswith("the file is damaged or not an opptune store, and the daemon left it "
                         "as it is: restore it from a backup, or move it aside (or give "
                         "another --database) to start an empty store"), line
    assert db.read_bytes() == before


def test_a_damaged_outbox_says_so_not_to_fix_the_state_directory(tmp_path, capsys):
    """An outbox.db SQLite cannot read (an SD card's damage) got "--state-dir (...) is not
    usable: file is not a database; give a directory the agent may create and write": the
    directory was fine. The line names the file, says it was left as it is and what to do."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    box = state / "outbox.db"
    box.write_bytes(b"not sqlite " * 400)
    before = box.read_bytes()
    code = agent_main(["--daemon", "tcp://127.0.0.1:9", "--state-dir", str(state),
                       *RUN_AS_OPTION])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line == (f"opptune-agent: the outbox {box} is damaged (file is not a database) and "
                    "was left as it is: the results in it that the daemon had not acknowledged "
                    f"cannot be read; move it aside (mv {box} {box}.damaged) and start the "
                    "agent again, which makes a new one"), line
    assert box.read_bytes() == before


def test_a_sysfs_root_holding_no_sys_or_proc_is_refused_as_opptune_doctor_refuses_it(
        tmp_path):
    """Walking a board: 'opptune-agent --sysfs-root EMPTY' (an existing directory, not a
    tree) ran, saying hello as a board 'unknown, 0 cpus', where 'opptune doctor --sysfs-root
    EMPTY' refused it; only a directory that was not there was refused."""
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([sys.executable, "-m", "opptune.agent", "--daemon", "tcp://127.0.0.1:9",
                        "--state-dir", str(tmp_path / "state"), "--sysfs-root", str(empty),
                        *RUN_AS_OPTION], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"opptune-agent: configuration error: --sysfs-root ({empty}): "
                                "holds no sys/ or proc/; give the root of a sysfs/procfs tree "
                                "(tests), or leave it out for /")
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("tables", [["notes"], ["runs", "notes"], ["schema_version"]])
def test_another_programs_database_is_refused_and_left_as_it_is(tmp_path, capsys, tables):
    """An SQLite database of another program given as the store: the daemon wrote opptune's
    schema into it beside its own tables and switched it to WAL mode ('store ... created'), or,
    where a table's name was one of opptune's, stopped with 'table runs already exists; give a
    path the daemon's user may create and write' after switching it all the same. The line now
    says it is not an opptune store, names its tables and what to do; the file is unchanged
    and no journal is left beside it."""
    import sqlite3
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    for name in tables:
        con.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute(f"INSERT INTO {tables[0]} VALUES (1, 'kept')")
    con.commit()
    con.close()
    before = db.read_bytes()
    path = tmp_path / "daemon.toml"
    path.write_text(f"bind = 'tcp://127.0.0.1:0'\ndatabase = '{db}'\n")
    code = daemon_main(["--config", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line == (f"opptune-daemon: {path}: key 'database' ({db}): cannot open the SQLite "
                    "database: it is an SQLite database of another program, not an opptune "
                    f"store (its tables: {', '.join(sorted(tables))}); the daemon left it as "
                    "it is: give the store a path of its own (--database, or 'database' in "
                    "the configuration; a new path starts an empty store)"), line
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "daemon.toml"]


def test_an_empty_sqlite_file_becomes_a_store(tmp_path):
    """An SQLite file with no table yet (touched, or made by sqlite3 and left empty) is no
    other program's data: it is made a store, as a new path is."""
    import sqlite3
    from opptune.daemon.store import open_store
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    db.touch()
    store = open_store(str(db))
    try:
        assert store.schema_version() > 0
    finally:
        store.close()


def test_another_programs_postgresql_database_is_refused_and_left_as_it_is(
        pg_url, tmp_path, capsys):
    """The same for a PostgreSQL database of another program: the daemon created its schema
    beside the other's tables (or failed on a table named like one of its own)."""
    import psycopg
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO runs VALUES (1, 'kept')")
    path = tmp_path / "daemon.toml"
    path.write_text(f"bind = 'tcp://127.0.0.1:0'\ndatabase = '{pg_url}'\n")
    code = daemon_main(["--config", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line == (f"opptune-daemon: {path}: key 'database' ({pg_url}): cannot use the "
                    "database: it is a PostgreSQL database of another program, not an opptune "
                    "store (its tables: runs); the daemon left it as it is: give the store a "
                    "database of its own (createdb opptune, its URL as --database or "
                    "'database' in the configuration)"), line
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert con.execute("SELECT table_name FROM information_schema.tables WHERE "
                           "table_schema = current_schema()").fetchall() == [("runs",)]
        assert con.execute("SELECT body FROM runs").fetchall() == [("kept",)]
