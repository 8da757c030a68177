"""What identifies the code a workload's run executes, for its program digest
(agent/workloads.py): the content of the files it runs, so that a binary rebuilt or upgraded
in place, or opptune's kernels built anew, make a new program though the configuration did not
change.

A command's files are its executable (argv[0] resolved on the PATH its run gets, a relative
entry from the directory the run starts in: ``find_program``) with the
shared libraries it loads (shared_libs.py), or of a script the interpreter its ``#!`` line
names (``shebang``) and that one's libraries, and each argument that names a regular file (a
script, ``python3 bench.py``), and of ``sh -c STRING`` those STRING's first command names
plainly (``shell_files``: not its expansions, functions or later commands; nor, for a login
shell, ``bash -lc``, a first word named without a path: its profile may set another PATH; a
pyenv/asdf shim is the shim script, whose choice of interpreter is not guessed); a pyperf
workload's is its script; a bench_suite kernel's the built extension all kernels are in (any
kernel rebuilt makes every kernel's program new) and its accounting; a
virtual board's kernel the modules that model it. Each file is known by its resolved path and a
SHA-256 of its content, a large one (past ``HASH_MAX_BYTES``, e.g. a data set on the command
line) by its size and mtime. Hashing costs 0.2-0.4 s for a 50 MB binary on a loaded 2-core
x86 VM (sha256 with SHA-NI; more on a small board), so the digests are kept in
``state_dir/program-ids.json`` by the file's (device, inode, size, mtime, ctime:
file_identity.py): an agent restarted with its files unchanged only stats them, and so does
the look before each run (agent/workloads.py ``Workloads.refresh``) that notices a file replaced while the
agent runs. A file that is missing is said to be (its runs fail as before; the hello still goes
out).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
from dataclasses import dataclass
from typing import IO, Any, Mapping

from .file_identity import file_key
from .private import open_private
from .loader_facts import hwcaps_env
from .shared_libs import Libraries

log = logging.getLogger("opptune.agent.workloads")

HASH_MAX_BYTES = 256 << 20

CACHE_FILENAME = "program-ids.json"
_CACHE_MAX = 1000  # entries kept: the files of every workload, several times over


class FileIds:
    """File identities, cached by ``file_key`` in ``cache_path`` (None: in memory only)."""

    def __init__(self, cache_path: str | None = None):
        self.cache_path = cache_path
        self._cache: dict[str, str] = {}
        self._dirty = False
        if cache_path:
            try:
                with open(cache_path, encoding="utf-8") as f:
                    data = json.load(f)
                if isinstance(data, dict):
                    self._cache = {k: v for k, v in data.items()
                                   if isinstance(k, str) and isinstance(v, str)}
            except (OSError, ValueError):
                pass  # none yet, or unreadable: the files are hashed again

    def of(self, path: str) -> dict[str, Any]:
        """``{"path", "sha256"}`` (or ``"size"`` and ``"mtime_ns"`` past HASH_MAX_BYTES) of the
        file at ``path``; ``{"path", "missing": why}`` where it cannot be read."""
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
            if st.st_size > HASH_MAX_BYTES:
                return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            key = ":".join(map(str, (*file_key(st), real)))
            digest = self._cache.get(key)
            if digest is None:
                with open(real, "rb") as f:
                    digest = content_digest(f)
                self._cache[key] = digest
                self._dirty = True
        except OSError as exc:
            return {"path": path, "missing": exc.strerror or str(exc)}
        return {"path": real, "sha256": digest}

    def save(self) -> None:
        """Keep the digests for the next start (best effort: a read-only state_dir costs the
        hashing again, nothing else)."""
        if not (self.cache_path and self._dirty):
            return
        items = list(self._cache.items())[-_CACHE_MAX:]
        tmp = f"{self.cache_path}.tmp"
        try:
            with open_private(tmp, encoding="utf-8") as f:
                json.dump(dict(items), f)
            os.replace(tmp, self.cache_path)
            self._dirty = False
        except OSError as exc:
            log.warning("cannot keep the program digests in %s (%s): they are computed again "
                        "at the next start", self.cache_path, exc)


_ELF_LAYOUT = {  # ELF class -> (e_shoff, its format, e_shentsize's offset, section header)
    1: (0x20, "I", 0x2E, "IIIIIIIIII"),
    2: (0x28, "Q", 0x3A, "IIQQQQIIQQ"),
}
_SHF_ALLOC, _SHT_NOBITS = 0x2, 8
_BUILD_ID = b".note.gnu.build-id"


def content_digest(f: IO[bytes]) -> str:
    """SHA-256 of what a file executes: of an ELF file the sections loaded at run time (code,
    data) less its build id; of any other file (a script) its bytes. The same sources built in
    another directory give another binary (the build id and the debug information hold the
    build's paths: two pip builds of one opptune differed there only), and that is not a new
    program."""
    head = f.read(64)
    if head[:4] == b"\x7fELF":
        try:
            return _elf_digest(f, head)
        except (struct.error, ValueError, KeyError, OSError):
            pass  # not an ELF file after all: its bytes say what it is
    f.seek(0)
    return hashlib.file_digest(f, "sha256").hexdigest()


def _elf_digest(f: IO[bytes], head: bytes) -> str:
    shoff_at, shoff_fmt, shent_at, sh_fmt = _ELF_LAYOUT[head[4]]
    end = {1: "<", 2: ">"}[head[5]]
    shoff, = struct.unpack_from(end + shoff_fmt, head, shoff_at)
    shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, shent_at)
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    headers = [struct.unpack_from(end + sh_fmt, table, i * shentsize) for i in range(shnum)]
    # (name, type, flags, addr, offset, size, ...): the names are in section shstrndx
    f.seek(headers[shstrndx][4])
    names = f.read(headers[shstrndx][5])
    h = hashlib.sha256(b"ELF")
    for sh in headers:
        name = names[sh[0]:names.index(b"\0", sh[0])]
        if not sh[2] & _SHF_ALLOC or name == _BUILD_ID:
            continue
        h.update(name + struct.pack("<QQ", sh[3], sh[5]))
        if sh[1] != _SHT_NOBITS:
            f.seek(sh[4])
            left = sh[5]
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    raise ValueError("section past the end of the file")
                h.update(chunk)
                left -= len(chunk)
    return h.hexdigest()


def command_files(argv: list[str], env: Mapping[str, str], cwd: str | None = None,
                  exe_dir: str | None = None, libraries: Libraries | None = None
                  ) -> list[str]:
    """The files a command line runs: argv[0] as the run's PATH finds it (as given when not
    found: FileIds says it is missing; a relative path with a slash from ``exe_dir``, None:
    this process's directory, as the runner takes it), with ``libraries`` what it loads
    (``program_files``: its shared libraries through the run's LD_LIBRARY_PATH and hwcaps
    variables, a script's ``#!`` interpreter; without, the files agents before 0.5 digested)
    and each argument naming a regular file in ``cwd``, the directory the run starts in (None:
    this process's).
    Arguments with a ``{...}`` placeholder are left out (they change from run to run). Of
    ``sh|bash|dash -c STRING`` also the files of STRING's first command (``shell_files``) and
    what its program loads."""
    if not argv:
        return []
    path = env.get("PATH", os.defpath)
    exe = argv[0]
    if "{" not in exe:
        exe = _under(exe_dir, exe) if os.sep in exe else find_program(exe, path, cwd) or exe
    files = [exe] if "{" not in exe else []
    if libraries is not None and files:
        files += program_files(exe, env, libraries, cwd)
    # where the run opens them: its own directory, not the agent's
    files += [f for f in (_under(cwd, a) for a in argv[1:] if "{" not in a)
              if os.path.isfile(f)]
    string = shell_string(argv)
    if string is not None:
        known = shell_path(argv, path)
        found = shell_files(string, known, cwd)
        first = first_command(string)[:1]
        if libraries is not None and first and (os.sep in first[0] or known is not None):
            # found[0] is that program
            found[1:1] = program_files(found[0], env, libraries, cwd)
        files += [f for f in found if f not in files]
    return files


_SHEBANG_MAX = 256  # what Linux reads of a #! line (BINPRM_BUF_SIZE; 128 before 5.1)
_NESTING = 4  # interpreters Linux follows, each a script of its own (binfmt_script)


def shebang(path: str, search_path: str, cwd: str | None = None) -> list[str]:
    """The interpreter a script's ``#!`` line names, then what it runs: ``#!/usr/bin/env
    python3`` is env and python3 as ``search_path`` (the run's PATH) finds it (``env -S
    python3 -u`` too; a bare name not found is given as it is: FileIds says it is missing);
    [] for a file with no ``#!`` line or none readable. A relative interpreter
    (``#!../bin/python``, even ``#!python3``) is where Linux opens it: from the directory
    the run starts in, ``cwd`` (None: this process's), as is env's program with a slash."""
    line = _shebang_line(path)
    if not line:
        return []
    # Linux passes what follows the interpreter as one argument
    interp, _, arg = line.replace("\t", " ").partition(" ")
    if not interp:
        return []
    interp = _under(cwd, interp)
    out = [interp]
    if os.path.basename(interp) != "env":
        return out
    arg = arg.strip()
    if arg.startswith("-S"):
        words = arg[2:].split()
    elif arg.startswith("--split-string="):
        words = arg[len("--split-string="):].split()
    elif arg.startswith("-"):
        return out  # another option of env's, not parsed here
    else:
        words = [arg]  # env takes it whole: ``env 'python3 -u'`` (no such program)
    words = [w for w in words if w and "=" not in w]  # NAME=VALUE sets a variable
    if words and not words[0].startswith("-"):
        name = words[0]
        out.append(_under(cwd, name) if os.sep in name
                   else find_program(name, search_path, cwd) or name)
    return out


_LINES: dict[tuple, str] = {}  # (path, *file_key) -> its #! line


def _shebang_line(path: str) -> str:
    """The ``#!`` line of the file at ``path`` less the ``#!`` (\"\" for none), kept by the
    file's identity: the look before each run reads no file unchanged."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    key = (path, *file_key(st))
    line = _LINES.get(key)
    if line is None:
        try:
            with open(path, "rb") as f:
                head = f.read(_SHEBANG_MAX)
        except OSError:
            return ""
        line = (head[2:].split(b"\n", 1)[0].decode(errors="replace").strip()
                if head.startswith(b"#!") else "")
        if len(_LINES) > 1000:
            _LINES.clear()
        _LINES[key] = line
    return line


def program_files(program: str, env: Mapping[str, str], libraries: Libraries,
                  cwd: str | None = None) -> list[str]:
    """The files beside ``program`` that a run of it loads, in the run's environment ``env``
    (its PATH, LD_LIBRARY_PATH and hwcaps variables: ``hwcaps_env``) and directory ``cwd``:
    its shared libraries, or for a script the interpreters its ``#!`` line names
    (``shebang``: in turn, where one is a script too) and their libraries. Not in
    ``program_core``: agents before 0.5 did not cover them."""
    search_path = env.get("PATH", os.defpath)
    lib_path = env.get("LD_LIBRARY_PATH", "")
    loader_env = hwcaps_env(env)
    out = list(libraries.of(program, lib_path, loader_env, cwd))
    if out:
        return out  # a dynamic ELF program: no script
    current = [program]
    for _ in range(_NESTING):
        interps = [i for f in current for i in shebang(f, search_path, cwd)]
        if not interps:
            break
        for i in interps:
            out += [i] + libraries.of(i, lib_path, loader_env, cwd)
        current = interps[-1:]
    return list(dict.fromkeys(out))


SHELLS = frozenset({"sh", "bash", "dash"})
# words a shell runs itself, never from the PATH: POSIX's reserved words and the builtins of
# dash (which bash has too). A command string starting with one runs no program of its own
# (``exec``'s is its next word)
_SHELL_WORDS = frozenset(
    "! { } case do done elif else esac fi for if in then until while . : [ alias bg break "
    "cd chdir command continue echo eval exit export false fc fg getopts hash jobs kill "
    "local printf pwd read readonly return set shift test times trap true type ulimit umask "
    "unalias unset wait".split())
# a word the shell takes as it is: no quote, expansion, glob, assignment, redirection or
# operator, no placeholder of opptune's
_PLAIN = re.compile(r"[A-Za-z0-9_./+,:@%-]+")
_OPERATOR = re.compile(r"[;&|<>()#\n]")


def _shell_options(argv: list[str]) -> tuple[str, int] | None:
    """(the option letters, the index of the first operand) of ``sh|bash|dash [options]
    ...`` (options as clusters such as ``-ec``, ``-o NAME``); None for another command line
    or a long option (``--norc``: not parsed here)."""
    if not argv or os.path.basename(argv[0]) not in SHELLS:
        return None
    given, i = "", 1
    while i < len(argv) and argv[i][:1] in ("-", "+") and argv[i] not in ("-", "+"):
        if argv[i] == "--":
            i += 1
            break
        letters = argv[i][1:]
        if not letters.isalpha():
            return None
        given += letters
        i += 2 if letters.endswith("o") else 1  # -o NAME
    return given, i


def shell_string(argv: list[str]) -> str | None:
    """The command string of ``sh|bash|dash [options] -c STRING ...``; None for any other
    command line."""
    opts = _shell_options(argv)
    if opts is None or "c" not in opts[0] or opts[1] >= len(argv):
        return None
    return argv[opts[1]]


def reads_profile(argv: list[str]) -> bool:
    """Whether a shell's command line makes it a login or interactive shell (``bash -lc``,
    ``-ic``): it reads a profile or rc file first, which may set another PATH than its
    environment's, so its string's first program found by name is not known here."""
    opts = _shell_options(argv)
    return opts is not None and bool(set(opts[0]) & {"l", "i"})


def shell_path(argv: list[str], path: str) -> str | None:
    """The PATH on which a shell's command string's first word is found: ``path``, the
    run's; None where it is not known here: a login or interactive shell's
    (``reads_profile``), or bash's where one of its entries starts with ``~``, which bash
    expands with the HOME of the run (dash, execvp and bash as ``sh`` take it as it is)."""
    if reads_profile(argv):
        return None
    if os.path.basename(argv[0]) == "bash" and any(
            d.startswith("~") for d in path.split(os.pathsep)):
        return None
    return path


def first_command(string: str) -> list[str]:
    """The words of a shell command string's first command (after ``exec``) where its first
    word names a program plainly; [] where it has an expansion, quote, assignment or
    placeholder, or is one the shell runs itself (a reserved word or builtin)."""
    words = []
    for word in string.split():
        if _OPERATOR.search(word):
            break  # the first command ends here (a redirection's target is no program)
        words.append(word)
    if words[:1] == ["exec"]:
        words = words[1:]
    if not words or not _PLAIN.fullmatch(words[0]) or words[0] in _SHELL_WORDS \
            or words[0].startswith("-"):  # exec's options (-a NAME): not parsed here
        return []
    return words


def shell_files(string: str, path: str | None, cwd: str | None) -> list[str]:
    """The files the first command of a shell's command string runs, where the string says
    them plainly (``first_command``): its first word as the shell finds it on ``path`` (a
    word with a slash: relative to ``cwd``; None: a PATH not known here, a login shell's, so
    a bare name is left out), and each later word of that command naming a regular file
    there. Later commands (after ``;``, ``|``, ``&&``), functions and what expansions make
    are not covered."""
    words = first_command(string)
    if not words:
        return []
    first = words[0]
    if os.sep in first:
        files = [_under(cwd, first)]
    elif path is None:
        files = []
    else:
        files = [find_program(first, path, cwd) or first]
    for word in words[1:]:
        if _PLAIN.fullmatch(word) and os.path.isfile(_under(cwd, word)):
            files.append(_under(cwd, word))
    return files


# programs that run a script named by their first argument that is not an option
# (``python3 -u bench.py``, ``bash run.sh``): that script is their program as much as they are
_INTERPRETER = re.compile(r"(?:python|pypy|perl|ruby|php|lua|luajit|tclsh|Rscript|julia|node"
                          r"|nodejs|sh|bash|dash|zsh|ksh|mksh|busybox)[0-9.]*")
# options after which no script follows: inline code or a module (``-c``, ``-m``, ``-e``); a
# shell's is a cluster with ``c`` (``-ec``)
_INLINE = frozenset({"-c", "-m", "-e", "-E", "--eval", "--print"})


@dataclass(frozen=True)
class _Options:
    """An interpreter's options as its manual gives them: single letters after which the rest
    of the cluster, else the next argument, is inline code or a module (no script follows);
    letters followed by digits only (``-l0``); letters whose value is the rest of the cluster
    (``-Mstrict``), and of those the ones that
    take the next argument where nothing follows them (``-I dir``); long options taking the
    next argument (or ``=VALUE``); long ones taking none, named or by their prefix; and those
    whose value is code the run loads (``node --require setup.js``), part of the program."""
    inline: str = ""
    digits: str = ""
    attached: str = ""
    separate: str = ""
    long_value: frozenset = frozenset()
    long_flag: frozenset = frozenset()
    long_inline: frozenset = frozenset()
    flag_prefixes: tuple = ()
    code: frozenset = frozenset()


_OPTIONS = {
    # python(1): -c CMD, -m MOD; -W ARG, -X OPT; --check-hash-based-pycs MODE
    "python": _Options(inline="cm", attached="WX", separate="WX",
                       long_value=frozenset({"--check-hash-based-pycs"}),
                       long_flag=frozenset({"--help", "--version", "--help-env",
                                            "--help-xoptions", "--help-all"})),
    # perlrun(1): -e/-E CODE; -I DIR (or attached); -i -x -C -M -m -d -D -V take the rest, -l
    # and -0 octal digits
    "perl": _Options(inline="eE", digits="l0", attached="IixCMmdDV", separate="I"),
    # ruby(1): -e CODE; -I -r -C -E take the next argument where nothing is attached
    "ruby": _Options(inline="e", digits="0", attached="IrCExiKTWF", separate="IrCE",
                     long_value=frozenset({"--encoding", "--external-encoding",
                                           "--internal-encoding", "--enable", "--disable"}),
                     long_flag=frozenset({"--verbose", "--version", "--help", "--yydebug",
                                          "--jit", "--yjit", "--copyright"}),
                     code=frozenset({"-r"})),
    # node(1): -e/-p CODE; -r/--require, --import, --loader MODULE (code), -C, --title...
    "node": _Options(inline="ep", separate="rC",
                     long_value=frozenset({"--require", "--import", "--loader",
                                           "--experimental-loader", "--conditions",
                                           "--input-type", "--title", "--env-file",
                                           "--inspect-port", "--redirect-warnings",
                                           "--disable-warning", "--stack-size"}),
                     long_flag=frozenset({"--expose-gc", "--enable-source-maps",
                                          "--abort-on-uncaught-exception", "--inspect",
                                          "--inspect-brk", "--preserve-symlinks", "--check",
                                          "--interactive", "--help", "--version"}),
                     flag_prefixes=("--no-", "--experimental-", "--trace-", "--harmony"),
                     long_inline=frozenset({"--eval", "--print"}),
                     code=frozenset({"-r", "--require", "--import", "--loader",
                                     "--experimental-loader"})),
    # bash(1), dash(1): -c STRING; -o/+o NAME, -O/+O NAME; --rcfile/--init-file FILE
    "sh": _Options(inline="c", separate="oO",
                   long_value=frozenset({"--rcfile", "--init-file"}),
                   long_flag=frozenset({"--norc", "--noprofile", "--posix", "--login",
                                        "--noediting", "--restricted", "--verbose",
                                        "--version", "--help", "--debugger",
                                        "--dump-strings", "--dump-po-strings", "--pretty-print"})),
}
_FLAVOUR = {"pypy": "python", "nodejs": "node", "bash": "sh", "dash": "sh"}


def _flavour(name: str) -> str:
    base = name.rstrip("0123456789.")
    return _FLAVOUR.get(base, base)


def program_scripts(argv: list[str], cwd: str | None) -> list[str]:
    """The files of an interpreter's command line that are its program: the script it runs
    (``script_of``) and the code an option loads (``node --require setup.js``, ``ruby -r``).
    Where an option is not known (another interpreter's, or one not in its table), the file
    after it, its value or the script, is taken (the one after that is an argument: output
    where a run changes it)."""
    return _parse_interpreter(argv, cwd)[1]


def script_of(argv: list[str], cwd: str | None) -> str | None:
    """The script an interpreter's command line runs: its first argument that is no option
    nor an option's value and names a regular file in ``cwd``; None for another program,
    inline code or a module (``python3 -c``, ``-m``, ``sh -c``), or no such file. The
    options of python, perl, ruby, node and sh/bash/dash are known (``-W``'s value, ``node
    --require``'s, ``bash --rcfile``'s are no script); of another interpreter an option's
    value is told from the script only by being no file (``php -d x=1 b.php``)."""
    return _parse_interpreter(argv, cwd)[0]


def _parse_interpreter(argv: list[str], cwd: str | None) -> tuple[str | None, list[str]]:
    """(the script, the files that are the program: ``program_scripts``)."""
    name = os.path.basename(argv[0]) if argv else ""
    if len(argv) < 2 or not _INTERPRETER.fullmatch(name):
        return None, []
    flavour = _flavour(name)
    table = _OPTIONS.get(flavour)
    shell = flavour in {"sh", "zsh", "ksh", "mksh", "busybox"}
    program: list[str] = []

    def file(arg: str) -> str | None:
        path = _under(cwd, arg)
        return path if "{" not in arg and os.path.isfile(path) else None

    def option(arg: str) -> bool:
        return arg[:1] == "-" or shell and arg[:1] == "+"

    i = 1
    while i < len(argv) and option(argv[i]) and argv[i] not in ("-", "+"):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        # takes: the option's value is the next argument (True), none (False), not known (None)
        takes: bool | None = False
        if table is None:
            if (arg[1:].isalpha() and "c" in arg) if shell else arg in _INLINE:
                return None, []
            takes = False if arg.startswith("--") and "=" in arg else None
        elif arg.startswith("--"):
            opt, eq, attached = arg.partition("=")
            if opt in table.long_inline:
                return None, []
            if opt in table.long_value:
                takes = not eq
                if eq and opt in table.code and file(attached):
                    program.append(attached)
            elif not eq and opt not in table.long_flag \
                    and not opt.startswith(table.flag_prefixes):
                takes = None  # ``--opt=value`` takes no more, whatever it is
        else:
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter in table.inline:
                    return None, []
                if letter in table.digits:  # perl -l0 -0777: octal digits, then more letters
                    j += 1
                    while j < len(arg) and arg[j].isdigit():
                        j += 1
                    continue
                if letter in table.attached or letter in table.separate:
                    rest = arg[j + 1:]
                    takes = not rest and letter in table.separate
                    if rest and f"-{letter}" in table.code and file(rest):
                        program.append(rest)
                    break
                if not letter.isalpha():
                    takes = None
                    break
                j += 1
        if takes is None:
            after = argv[i + 1] if i + 1 < len(argv) else ""
            if after and not option(after) and file(after):
                # the option's value or the script: taken for the program. Not the file
                # after it too: were that an output (``out.csv``), every run that writes it
                # would be a new program, each run out of the fits; a script there is still
                # noticed, as another argument, at the agent's next start
                found = file(after)
                return found, list(dict.fromkeys([file(p) or p for p in program] + [found]))
            if after and not option(after):
                i += 1  # a value naming no file
        elif takes and i + 1 < len(argv):
            if (opt if arg.startswith("--") else "-" + arg[-1]) in table.code \
                    and file(argv[i + 1]):
                program.append(argv[i + 1])
            i += 1
        i += 1
    script = file(argv[i]) if i < len(argv) else None
    return script, list(dict.fromkeys([file(p) or p for p in program]
                                      + ([script] if script else [])))


def find_program(name: str, search_path: str, cwd: str | None) -> str | None:
    """The file a run started in ``cwd`` executes for ``name`` (no slash), as execvp and the
    shells search ``search_path``: its directories in turn, a relative one (``bin``, ``.``,
    an empty one: the directory itself) from ``cwd`` (None: this process's), not from the
    agent's; the first executable file that is no directory. None where there is none."""
    for d in search_path.split(os.pathsep):
        where = d if d not in ("", ".") else ""
        candidate = _under(cwd, os.path.join(where, name))
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _under(cwd: str | None, path: str) -> str:
    """``path`` as a process started in ``cwd`` finds it."""
    return os.path.join(cwd, path) if cwd and not os.path.isabs(path) else path


def kernel_files(virtual_board: str) -> list[str]:
    """The files a bench_suite kernel's run executes: the built extension and the accounting
    of its MPET parameters, or on a virtual board the modules that model the kernels (the
    extension is not run there)."""
    from importlib.util import find_spec
    names = (["opptune.agent.virtual_workload", "opptune.agent.virtual_board"]
             if virtual_board else ["opptune.bench_suite._kernels",
                                    "opptune.bench_suite.accounting"])
    out = []
    for name in names:
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            spec = None
        # not built: FileIds says so by the name (the kernels' runs fail as before)
        out.append(spec.origin if spec is not None and spec.origin else name)
    return out
