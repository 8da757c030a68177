"""What each workload's runs will meet, checked once at the agent's start as the user they run
as: the directory they start in (its ``cwd``, or its own under the state directory:
workdir.py) and the program a command executes. Found only at the first run, a directory that
user cannot enter failed every run of the workload with a line in a job's reason, and a command
name not on the PATH failed each run with only "No such file or directory".

A directory the user cannot enter stops the agent at start (the caller refuses, exit 2): it
stays so until someone changes its permissions or the configuration. A program that is not
found is said in one warning instead: it may appear after the agent started (a build, a mount
that comes up late, a package installed), and a refusal would stop every workload of the board,
the kernels included, with an exit status the unit does not restart after.

The check runs in a forked child that drops to the user as the workload's child does (its
groups, gid, uid) and tries what the run will do: enter the directory, look for the program on
the PATH the run gets (os.get_exec_path of its environment, as subprocess searches it). No exec:
nothing of the user's runs, and an interpreter the user may not run does not matter here.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import stat
from dataclasses import dataclass, field
from typing import Any, Mapping

from .child import RunAs
from .workloads import PLACEHOLDERS, placeholder_typos

MAX_REPLY = 1 << 16


@dataclass
class Found:
    """What the user met: ``enter`` (None: it entered ``cwd``; else why not), ``writable``
    (it may write there), ``program`` (the path the run executes, None where none is found),
    ``not_executable`` (candidates that exist and that the user may not execute)."""
    enter: str | None = None
    writable: bool = True
    program: str | None = None
    not_executable: list[str] = field(default_factory=list)


def candidates(argv0: str, env: Mapping[str, str], exe_dir: str | None = None) -> list[str]:
    """Where a run looks for ``argv0``: itself where it names a path (a relative one from
    ``exe_dir``, the entry's cwd, or None: the agent's working directory, as the runner takes
    it: workloads.exe_dir), else each directory of the PATH the run gets."""
    if os.sep in argv0:
        return [os.path.abspath(os.path.join(exe_dir or "", argv0))]
    return [os.path.join(d or ".", argv0) for d in os.get_exec_path(dict(env))]


def _look(cwd: str, paths: list[str]) -> dict[str, Any]:
    """In the child, as the user: enter ``cwd``, and the first of ``paths`` it may execute."""
    out: dict[str, Any] = {"enter": None, "writable": True, "program": None, "denied": []}
    try:
        os.chdir(cwd)
        out["writable"] = os.access(".", os.W_OK)
    except OSError as exc:
        out["enter"] = exc.strerror or str(exc)
    for p in paths:
        try:
            st = os.stat(p)
        except PermissionError:  # a directory on the way is closed to the user
            out["denied"].append(p)
            continue
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            if os.access(p, os.X_OK):
                out["program"] = p
                break
            out["denied"].append(p)
    return out


def probe(cwd: str, paths: list[str], run_as: RunAs | None) -> Found:
    """What the user ``run_as`` (None: the agent's own) meets entering ``cwd`` and looking
    for a program at ``paths``, in order. OSError where the child cannot be made."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: system calls only, then _exit (no cleanup of the agent's)
        code = 0
        try:
            os.close(r)
            if run_as is not None:
                os.setgroups(list(run_as.groups))
                os.setgid(run_as.gid)
                os.setuid(run_as.uid)
            data = json.dumps(_look(cwd, paths)).encode()[:MAX_REPLY]
            while data:
                data = data[os.write(w, data):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        chunks = []
        while chunk := os.read(r, MAX_REPLY):
            chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not chunks:
        raise OSError(errno.EPERM, "the check could not take the user's identity")
    got = json.loads(b"".join(chunks))
    return Found(got["enter"], got["writable"], got["program"], got["denied"])


def user_name(run_as: RunAs | None) -> str:
    """'nobody', or the agent's own user's name where the workloads run as it."""
    if run_as is not None:
        return run_as.name
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def cwd_refusal(workload: str, cwd: str, configured: bool, why: str,
                run_as: RunAs | None) -> str:
    """The start's refusal of a directory the user cannot enter, with what to do."""
    who = user_name(run_as)
    fix = ("give it search permission (x) on each directory of that path, set the entry's "
           "'cwd' to a directory it may enter, or leave 'cwd' out (a directory of its own "
           "under the state directory)") if configured else (
        "give it search permission (x) on each directory above the state directory, or "
        "choose a state directory it can reach (/var/lib/opptune-agent), or set the entry's "
        "'cwd'")
    return (f"workload '{workload}': its runs run as user {who!r}, who cannot enter their "
            f"working directory {cwd} ({why}); {fix}")


def program_warning(workload: str, argv0: str, env: Mapping[str, str], found: Found,
                    run_as: RunAs | None, cwd: str = "") -> str | None:
    """The start's warning of a program a run would not find or may not execute (None: it
    finds it); ``cwd``: the entry's, where a relative path is taken from."""
    if found.program is not None:
        return None
    later = "; each run fails until it is there"
    if found.not_executable:
        return (f"workload '{workload}': user {user_name(run_as)!r} may not execute "
                f"{found.not_executable[0]} (no permission to reach or execute it); each "
                "run fails until it may: give the file execute permission for that user "
                "(chmod +x) and search permission (x) on each directory above it, or set "
                "run_as to a user who may")
    if os.sep not in argv0:
        path = os.pathsep.join(os.get_exec_path(dict(env)))
        return (f"workload '{workload}': no program {argv0!r} on the PATH its runs get "
                f"({path}){later}: give its absolute path in 'command', or set PATH in the "
                f"entry's env{tilde_hint(env)}")
    if os.path.isabs(argv0):
        return f"workload '{workload}': no program {argv0}{later}"
    if cwd:
        where = os.path.normpath(os.path.join(cwd, argv0))
        return (f"workload '{workload}': no program {where} ({argv0} is taken from the "
                f"entry's cwd){later}: give its absolute path in 'command'")
    return (f"workload '{workload}': no program {os.path.abspath(argv0)} ({argv0} is taken "
            f"from the agent's working directory {os.getcwd()}, as the entry sets no "
            f"'cwd'){later}: give its absolute path in 'command', or set the entry's 'cwd' "
            "to its directory")


def tilde_hint(env: Mapping[str, str]) -> str:
    """What to write for each entry of the run's PATH that starts with ``~`` ("" for none):
    a run's program is looked for there as execvp does, which does not expand it (a
    directory named ``~`` in the run's directory), unlike a shell's command line."""
    tilde = [d for d in os.get_exec_path(dict(env)) if d.startswith("~")]
    if not tilde:
        return ""
    home = env.get("HOME", "")
    said = ", ".join(f"{d} as {home}{d[1:]}" if home and d[1:2] in ("", "/") else d
                     for d in tilde)
    return (f" (a '~' in PATH is not expanded for the run: write its entries out in full, "
            f"{said})")


class Refused(ValueError):
    """A workload whose runs could not start: the message names it and what to do."""


def check_workloads(workloads: Any, workdirs: Any, run_as: RunAs | None) -> list[str]:
    """Check each workload of ``workloads`` (a :class:`~.workloads.Workloads`): its directory
    made where it is its own (``workdirs``, a :class:`~.workdir.WorkDirs`) and entered as
    ``run_as``, and a command's program looked for as that user. Returns the warnings (a
    program not found, a configured directory the user may not write); raises
    :class:`Refused` for a directory that cannot be made or entered."""
    from .child import user_env
    warnings = []
    for name in workloads.names():
        w = workloads.get(name)
        configured = w.command.cwd if w.command is not None else ""
        try:
            cwd = workdirs.of(name, configured)
        except OSError as exc:
            why = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror or str(exc)
            raise Refused(f"workload '{name}': cannot make its working directory under "
                          f"{workdirs.base} ({why}); give the agent a state directory it may "
                          "write, or set the entry's 'cwd'") from None
        argv0, env = None, {}
        if w.command is not None and not w.command.pyperf and "{" not in w.command.command[0]:
            argv, env = workloads.argv_for(name, w.sizes[0], 1, [0], user_env(run_as))
            argv0 = argv[0]
        try:
            found = probe(cwd, candidates(argv0, env, configured or None) if argv0 else [],
                          run_as)
        except OSError as exc:  # no child to be had: its runs will tell
            warnings.append(f"workload '{name}': its working directory and program were not "
                            f"checked as user {user_name(run_as)!r} "
                            f"({exc.strerror or exc})")
            continue
        if found.enter is not None:
            raise Refused(cwd_refusal(name, cwd, bool(configured), found.enter, run_as))
        if configured and not found.writable:
            warnings.append(f"workload '{name}': user {user_name(run_as)!r} may not write in "
                            f"its working directory {cwd}: a run that writes a file there "
                            "fails")
        if argv0:
            text = program_warning(name, argv0, env, found, run_as, configured)
            if text:
                warnings.append(text)
        if w.command is not None:
            warnings += [f"workload '{name}': its command holds {written}, which the agent "
                         f"does not substitute (it substitutes {', '.join(PLACEHOLDERS)}): "
                         f"did you mean {meant}? Its runs get {written} as it is"
                         for written, meant in placeholder_typos(
                             [*w.command.command, *w.command.pyperf_args])]
    return warnings


def start_failure(argv0: str, env: Mapping[str, str], exc: OSError,
                  cwd: str | None = None) -> str:
    """Why a run's program did not start, for its record: a name the PATH does not hold is
    said with the PATH searched, not as a bare "No such file or directory"; a relative
    entry of it looked at in ``cwd``, the directory the run started in (None: this
    process's)."""
    if exc.errno == errno.ENOENT and os.sep not in argv0 and \
            not any(os.path.isfile(os.path.join(cwd or "", p))
                    for p in candidates(argv0, env)):
        return (f"no program {argv0!r} on the PATH of its run "
                f"({os.pathsep.join(os.get_exec_path(dict(env)))}){tilde_hint(env)}")
    if exc.errno == errno.EACCES and exc.filename == argv0:  # the exec, not a cwd (child.py)
        return (f"{exc.strerror}: the user the run runs as may not execute it: give it "
                "execute permission (chmod +x) and search permission (x) on each directory "
                "above it, or set run_as to a user who may")
    return exc.strerror or str(exc)
