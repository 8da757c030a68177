"""The workloads this agent may run: its configured bench_suite kernels and command workloads
(a command line, or a pyperf benchmark script run by agent/pyperf_workload.py).

Only workloads defined in the agent's own configuration ever run; a job or config naming any
other workload is refused before anything starts.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import __version__
from ..shared.config import AgentConfig, CommandWorkload
from .program_id import (FileIds, command_files, first_command, kernel_files, program_files,
                         program_scripts, shell_files, shell_path, shell_string)
from .file_identity import file_key
from .loader_facts import HWCAPS_VARIABLES
from .shared_libs import Libraries
from .workdir import SUBDIR, dir_name

log = logging.getLogger("opptune.agent.workloads")

# what a command's arguments may hold, substituted for each run (argv_for)
PLACEHOLDERS = ("{threads}", "{size}", "{cpus}")
_BRACED = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholder_typos(args: list[str]) -> list[tuple[str, str]]:
    """(written, meant) for each ``{word}`` of ``args`` that is not substituted but close to
    a placeholder (``{thread}``, ``{CPUS}``): passed to the program as it is. Other braces
    (``${HOME}`` in a shell string, awk's ``{print}``) are the program's own."""
    names = [p[1:-1] for p in PLACEHOLDERS]
    out = []
    for arg in args:
        for m in _BRACED.finditer(arg):
            if m.group(0) in PLACEHOLDERS:
                continue
            close = difflib.get_close_matches(m.group(1).lower(), names, n=1, cutoff=0.6)
            if close and (m.group(0), f"{{{close[0]}}}") not in out:
                out.append((m.group(0), f"{{{close[0]}}}"))
    return out


class WorkloadError(ValueError):
    """An unknown workload or size, or a bad workload definition; the message says which."""


@dataclass
class Workload:
    name: str
    kind: str  # "kernel" (bench_suite) or "command"
    sizes: list[str]
    description: str = ""
    expects_json: bool = False  # kernels must print their JSON line; commands may
    command: CommandWorkload | None = field(default=None, repr=False)
    definition: str = ""  # digest of what runs (see Workloads.definition_of)
    program: str = ""  # digest of the program a run executes (see Workloads.definition_of)
    # ``program`` less the shared libraries it loads and a script's #! interpreter: what
    # ``program`` was before the agent covered them (0.4), said beside it where it differs,
    # so that the daemon takes an upgraded agent's program for the one it measured before
    # (daemon/drift.py)
    program_core: str = ""
    # its files as last digested, each with its file_key or None (missing):
    # the same again means the same digests (Workloads.refresh)
    seen: tuple = field(default=(), repr=False)
    # its files as the look before the last run found them, and those of its arguments that
    # changed during a run: the runs' output (an output file named on the command line), not
    # looked at again while the agent runs (Workloads.ran)
    at_run: tuple = field(default=(), repr=False)
    output: frozenset = field(default=frozenset(), repr=False)
    changed: list = field(default_factory=list, repr=False)  # what the last new digest saw

    def describe(self) -> dict[str, Any]:
        core = ({"program_core": self.program_core}
                if self.program_core and self.program_core != self.program else {})
        return {"name": self.name, "kind": self.kind, "sizes": list(self.sizes),
                "description": self.description, "definition": self.definition,
                "program": self.program, **core}


def _catalogue() -> dict[str, Any] | None:
    try:
        from ..bench_suite.catalogue import KERNELS
    except Exception as exc:  # missing or broken catalogue: the agent still runs commands
        log.warning("bench_suite catalogue unavailable (%s); no kernels offered", exc)
        return None
    return dict(KERNELS)


def _virtual_sizes() -> list[str] | None:
    try:
        from .virtual_board import SIZES
    except Exception as exc:
        log.warning("virtual board module unavailable (%s)", exc)
        return None
    # smallest first: a workload lacking the size a sweep asks for runs at its first (the
    # daemon's fallback), and a name sort put "large", 16 times the work, there
    return sorted(SIZES, key=SIZES.__getitem__)


def _stat_of(path: str) -> tuple:
    """``(path, *file_key)``; ``(path, None)`` where it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return (path, None)
    return (path, *file_key(st))


def _looked_at(seen: tuple, output: frozenset) -> tuple:
    """``seen`` less the runs' output files (Workloads.ran)."""
    return tuple(e for e in seen if e[0] not in output) if output else seen


def exe_dir(cw: CommandWorkload) -> str | None:
    """Where a program named by a relative path (``./app``) is found: the entry's ``cwd``,
    where its runs start; without one the agent's working directory (None), as before the
    workloads had directories of their own: the directory the agent makes for a workload holds
    no program."""
    return cw.cwd or None


def _digest(what: dict[str, Any]) -> str:
    text = json.dumps(what, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Workloads:
    """Registry built from an AgentConfig; ``argv_for`` turns (name, size, threads, cpus) into
    the command to execute."""

    def __init__(self, config: AgentConfig, catalogue: dict[str, Any] | None = None,
                 file_ids: FileIds | None = None):
        self.config = config
        # the identities of the files each workload runs, for its program digest
        self.file_ids = file_ids if file_ids is not None else FileIds()
        self.libraries = Libraries()  # the shared libraries of the programs, by their identity
        self.virtual_board = config.virtual_board
        self._items: dict[str, Workload] = {}
        self._kernel_files: list[str] | None = None  # where the kernels' modules are
        self._run_dirs: dict[tuple[str, str], str] = {}  # (name, cwd) -> run_dir's answer
        # what of the agent's own environment a run gets where its env sets nothing else
        # (its PATH, LD_LIBRARY_PATH, hwcaps variables: _env), read once: the agent never
        # changes its environment, and the look before each run reads none of it
        self._agent_path = os.environ.get("PATH", os.defpath)
        self._agent_lib_path = os.environ.get("LD_LIBRARY_PATH", "")
        self._agent_hwcaps = {n: os.environ[n] for n in HWCAPS_VARIABLES if n in os.environ}
        # a hello (link thread) reads a workload's digests while a run (worker) renews them
        self._lock = threading.Lock()
        wanted = list(config.bench_kernels)
        if wanted:
            cat = catalogue if catalogue is not None else _catalogue()
            if cat is None:
                if wanted != ["all"]:
                    log.warning("bench_kernels %s configured but the catalogue is missing",
                                wanted)
                cat = {}
            names = sorted(cat) if "all" in wanted else wanted
            vsizes = _virtual_sizes() if self.virtual_board else None
            for name in names:
                if name not in cat:
                    raise WorkloadError(
                        f"bench_kernels names unknown kernel '{name}'; the catalogue has: "
                        f"{', '.join(sorted(cat)) or '(none)'}")
                k = cat[name]
                sizes = list(getattr(k, "sizes", {}) or {"default": None})
                if vsizes:
                    sizes = vsizes  # the virtual workload models its own size classes
                self._items[name] = Workload(name, "kernel", sizes,
                                             getattr(k, "description", ""), expects_json=True)
        first: dict[str, int] = {}  # workload name -> its [[workloads]] entry (1-based)
        for i, w in enumerate(config.workloads, 1):
            if w.name in first:
                raise WorkloadError(f"workload '{w.name}' is defined twice: [[workloads]] "
                                    f"entries {first[w.name]} and {i} both have that name; "
                                    "give each its own name")
            if w.name in self._items:
                raise WorkloadError(f"[[workloads]] entry {i} is named '{w.name}', as a "
                                    "bench_suite kernel this agent offers (bench_kernels): "
                                    "give it another name, or leave that kernel out of "
                                    "bench_kernels")
            first[w.name] = i
            if w.pyperf:
                # kind "command" to the daemon and the runner alike: an external program
                # (characterised like one, no MPET accounting) that prints the JSON line
                self._items[w.name] = Workload(w.name, "command", list(w.sizes) or ["default"],
                                               f"pyperf {w.pyperf}", expects_json=True,
                                               command=w)
                continue
            if not w.command:
                raise WorkloadError(f"workload '{w.name}' has an empty command")
            self._items[w.name] = Workload(w.name, "command", list(w.sizes) or ["default"],
                                           " ".join(w.command), command=w)
        for w in self._items.values():
            w.seen = self._seen(w)
            # a command's executable missing is said by the start's check, once, as the user
            # its runs run as and with the PATH searched (workload_check.py)
            w.definition, w.program, w.program_core = self.definition_of(
                w, quiet=self._executable(w))

    def refresh(self, name: str) -> bool:
        """Whether the program of workload ``name`` changed since its digests were made (a
        file it runs replaced or edited, another found on its PATH); its digests are made
        again then, and the digests of files kept for the next start. Called before each run:
        where its files are as they were it only stats them (with ``ran`` 0.01-0.25 ms a run,
        up to 0.4 on a loaded VM: benchmarks/program_check.py)."""
        w = self._items.get(name)
        if w is None:
            return False
        seen = w.at_run = self._seen(w)
        if _looked_at(seen, w.output) == _looked_at(w.seen, w.output):
            return False
        definition, program, core = self.definition_of(w)
        old = set(w.seen)
        with self._lock:
            changed = program != w.program
            w.changed = sorted({e[0] for e in set(seen) ^ old})
            w.seen, w.definition, w.program, w.program_core = seen, definition, program, core
        self.file_ids.save()
        return changed

    def ran(self, name: str) -> None:
        """A run of workload ``name`` ended: a file among its arguments that changed during the
        run is its output (``-o out.csv``, a log it appends to), not its program: left out of
        the look before each run from then on, and logged. Taken so at its first change, for
        a drift there would leave out every run before it (a characterisation's 1-core runs).
        The program itself (the executable, a shell string's first program, the script an
        interpreter runs: ``_programs``) is never output: its edit is a drift at the next
        run. An output's content still counts at the agent's next start."""
        w = self._items.get(name)
        if w is None or not w.at_run or w.command is None or w.command.pyperf:
            return
        # looked for again: a file the run made (an output named on the command line that did
        # not exist before) is among them only now
        changed = frozenset(e[0] for e in set(self._seen(w)) ^ set(w.at_run))
        written = changed - w.output
        if written:
            written -= self._programs(w)
        if written:
            w.output |= written
            log.warning("workload %s: %s changed during a run: taken for its output, not "
                        "for its program, and no longer looked at before each run (its "
                        "content still counts at the agent's next start: name an output file "
                        "in an option such as --out=FILE, or with a placeholder such as "
                        "out-{threads}.csv, to leave it out)", name, ", ".join(sorted(written)))

    def _programs(self, w: Workload) -> frozenset:
        """The files of command workload ``w`` that are its program, never its output: the
        executable argv[0] names, the first program of a shell's command string, and the
        script either gives an interpreter (``python3 bench.py``, ``sh -c "bash run.sh"``)
        with the code its options load (``node --require setup.js``: program_scripts)."""
        cw = w.command
        path = self._path(cw)
        cwd = self.run_dir(w.name, cw)
        files = self._executable(w) + program_scripts(cw.command, cwd)
        string = shell_string(cw.command)
        if string is not None:
            first = first_command(string)[:1]
            program = shell_files(first[0], shell_path(cw.command, path),
                                  cwd) if first else []
            if program:
                files += program + program_files(program[0], self._env(cw), self.libraries,
                                                 cwd)
            files += program_scripts(first_command(string), cwd)
        return frozenset(f for f in files if f)

    def _executable(self, w: Workload) -> list[str]:
        """The file command workload ``w``'s argv[0] names, as its digest takes it ([] for a
        kernel, a pyperf script or a placeholder in argv[0])."""
        cw = w.command
        if cw is None or cw.pyperf:
            return []
        return command_files(cw.command[:1], self._env(cw), self.run_dir(w.name, cw),
                             exe_dir=exe_dir(cw), libraries=self.libraries)

    def _path(self, cw: CommandWorkload) -> str:
        """The PATH a run of ``cw`` searches: its env's, else the agent's."""
        return cw.env.get("PATH", self._agent_path)

    def _lib_path(self, cw: CommandWorkload) -> str:
        """The LD_LIBRARY_PATH of a run of ``cw``: its env's, else the agent's."""
        return cw.env.get("LD_LIBRARY_PATH", self._agent_lib_path)

    def _env(self, cw: CommandWorkload) -> dict[str, str]:
        """What of a run's environment finds its files: its PATH, LD_LIBRARY_PATH and the
        variables that change which hwcaps subdirectories the loader searches (shared_libs
        ``hwcaps_env``), each its env's, else the agent's."""
        env = {"PATH": self._path(cw), "LD_LIBRARY_PATH": self._lib_path(cw),
               **self._agent_hwcaps}
        if cw.env:
            env.update((n, cw.env[n]) for n in HWCAPS_VARIABLES if n in cw.env)
        return env

    def _seen(self, w: Workload) -> tuple:
        """``w``'s files with their file_key, None for one missing: taken
        before they are digested, so a change while they are is seen by the next look."""
        return tuple(_stat_of(f) for f in self._files(w))

    def definition_of(self, w: Workload, quiet: list[str] | tuple = ()
                      ) -> tuple[str, str, str]:
        """Two digests of ``w``: its definition, of what a run executes and how long it may
        take: its command (or pyperf script), environment, working directory (a ``cwd``
        set) and sizes, or a kernel's name and
        the agent's version (the kernels ship with it), the virtual board, the files it runs
        (program_id.py) and run_timeout_s (characterize gives up on a workload that keeps
        hanging only while it is unchanged); and its program, the same less run_timeout_s,
        the sizes and the version: what its runs measured (the daemon no longer counts a
        workload's runs from before its program changed). A longer timeout, one more size or
        an upgraded agent whose kernels are the same leave them measuring the same thing; a
        rebuilt binary, an edited script or kernels built anew do not. A file missing is
        logged, but for those in ``quiet``. Third, the program less the shared libraries and
        #! interpreters (``Workload.program_core``)."""
        cw = w.command
        runs = {"name": w.name, "kind": w.kind, "virtual_board": self.virtual_board,
                **({"command": cw.command, "env": cw.env, "threads_env": cw.threads_env,
                    "pyperf": cw.pyperf, "pyperf_args": cw.pyperf_args,
                    # only when set: a workload's digests stay those of before the key
                    **({"cwd": cw.cwd} if cw.cwd else {})} if cw is not None else {}),
                "files": [self.file_ids.of(f) for f in self._files(w)]}
        for f in runs["files"]:
            if "missing" not in f or f["path"] in quiet:
                continue
            if cw is not None and os.sep not in f["path"]:  # a name the PATH does not hold
                log.warning("workload %s: no program %r on the PATH its runs get (%s): its "
                            "runs fail until it is there", w.name, f["path"], self._path(cw))
            else:
                log.warning("workload %s: cannot read %s (%s): its runs fail until it is "
                            "there", w.name, f["path"], f["missing"])
        what = {**runs, "sizes": w.sizes, "timeout_s": self.config.run_timeout_s,
                **({} if cw is not None else {"version": __version__})}
        core = {**runs, "files": [self.file_ids.of(f) for f in self._files(w, False)]}
        return _digest(what), _digest(runs), _digest(core)

    def _files(self, w: Workload, libraries: bool = True) -> list[str]:
        """The files a run of ``w`` executes (program_id.py), its programs' shared libraries
        and #! interpreters among them unless ``libraries`` is false."""
        cw = w.command
        if cw is None:
            if self._kernel_files is not None:
                return self._kernel_files
            files = kernel_files(self.virtual_board)
            if all(os.path.isabs(f) for f in files):  # found: the modules stay there
                self._kernel_files = files
            return files
        if cw.pyperf:
            return [cw.pyperf]
        return command_files(cw.command, self._env(cw), self.run_dir(w.name, cw),
                             exe_dir(cw), self.libraries if libraries else None)

    def run_dir(self, name: str, cw: CommandWorkload) -> str:
        """The directory a run of command workload ``name`` starts in (agent/workdir.py):
        where a shell's command string finds a program named by a relative path."""
        key = (name, cw.cwd)
        found = self._run_dirs.get(key)
        if found is None:
            found = self._run_dirs[key] = cw.cwd or os.path.join(
                os.path.abspath(self.config.state_dir), SUBDIR, dir_name(name))
        return found

    def names(self) -> list[str]:
        return sorted(self._items)

    def definition(self, name: str) -> str | None:
        """The digest of workload ``name`` (None when unknown)."""
        w = self._items.get(name)
        return w.definition if w is not None else None

    def describe(self) -> list[dict[str, Any]]:
        """What hello carries: one map per workload (name, kind, sizes, description,
        definition, program)."""
        with self._lock:
            return [self._items[n].describe() for n in self.names()]

    def run_by_python(self) -> list[str]:
        """The workloads whose runs start this agent's Python: kernels (virtual ones too) and
        pyperf scripts."""
        return [n for n in self.names() if self._items[n].kind == "kernel"
                or (self._items[n].command is not None and self._items[n].command.pyperf)]

    def get(self, name: str) -> Workload:
        try:
            return self._items[name]
        except KeyError:
            raise WorkloadError(f"unknown workload '{name}': this agent only runs "
                                f"{', '.join(self.names()) or '(none configured)'}") from None

    def off_board(self, name: str) -> str | None:
        """Where a workload runs off the board the agent describes: a command of the
        configuration on a virtual board runs on this machine, where the board's clocks and
        meters never reach it (None: it runs on the board, or is a modelled kernel)."""
        w = self._items.get(name)
        if not self.virtual_board or w is None or w.kind != "command":
            return None
        return (f"workload '{name}' is a command: it runs on this machine, not on virtual "
                f"board {self.virtual_board}")

    def check(self, name: str, size: str) -> Workload:
        w = self.get(name)
        if size not in w.sizes:
            raise WorkloadError(f"workload '{name}' has no size '{size}'; sizes: "
                                f"{', '.join(w.sizes)}")
        return w

    def argv_for(self, name: str, size: str, threads: int, cpus: list[int],
                 base_env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and full environment of one run: ``base_env`` (None: this process's)
        with the workload's own ``env`` over it. Raises WorkloadError when unknown."""
        w = self.check(name, size)
        if threads < 1:
            raise WorkloadError(f"threads must be >= 1, got {threads}")
        cpu_text = ",".join(str(c) for c in cpus)
        env = dict(os.environ if base_env is None else base_env)
        if w.kind == "kernel":
            if self.virtual_board:
                argv = [sys.executable, "-m", "opptune.agent.virtual_workload",
                        # absolute: the run starts in its own directory (workdir.py)
                        "--board", self.virtual_board,
                        "--root", os.path.abspath(self.config.sysfs_root),
                        "--kernel", name, "--threads", str(threads), "--cpus", cpu_text,
                        "--size", size]
            else:
                argv = [sys.executable, "-m", "opptune.bench_suite", "run", name,
                        "--threads", str(threads), "--cpus", cpu_text, "--size", size]
            return argv, env
        cw = w.command
        assert cw is not None
        subst = dict(zip(PLACEHOLDERS, (str(threads), size, cpu_text)))
        template = cw.command
        if cw.pyperf:
            template = [sys.executable, "-m", "opptune.agent.pyperf_workload", "--cpus",
                        "{cpus}", cw.pyperf, "--", *cw.pyperf_args]
        argv = []
        for arg in template:
            for key, value in subst.items():
                arg = arg.replace(key, value)
            argv.append(arg)
        env.update({k: str(v) for k, v in cw.env.items()})
        if cw.threads_env:
            env[cw.threads_env] = str(threads)
        return argv, env
