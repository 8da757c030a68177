"""Console scripts of the central side: `opptune` and `opptune-daemon`.

A board install (``pip install .``, no extras) installs these scripts too, but they need the
``daemon`` extra (numpy, scipy, ...). Each checks for it first, so that a board says in one line
what to install instead of a traceback; this module imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
import sys

# the import names of the distributions the pyproject's "daemon" extra lists
DAEMON_EXTRA = {"numpy": "numpy", "scipy": "scipy", "scikit-learn": "sklearn", "rich": "rich",
                "matplotlib": "matplotlib", "prometheus_client": "prometheus_client",
                "psycopg": "psycopg"}

# Ctrl-C before a command ran, as 'opptune' loaded its parsers or the command its modules
LOAD_INTERRUPTED = "opptune: interrupted while loading, before the command ran"
# Ctrl-C before opptune-daemon served (its modules, the configuration, the store's opening)
DAEMON_START_INTERRUPTED = ("opptune-daemon: interrupted while starting, before it served: no "
                            "agent or command was answered; start it again")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached an operator command: raised where Ctrl-C's KeyboardInterrupt
    would be, so that a command that follows the daemon (sweep/characterize --wait, tune,
    recommend --apply) says what goes on without it, as it does for Ctrl-C, and exits
    128 + the signal's number (``timeout``, a closed terminal) instead of dying silently."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def stop_like_ctrl_c() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Terminated`; one ignored (nohup) stays ignored."""
    import signal
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _raise_terminated)


def said(exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """``exc`` marked as answered already: the command said what goes on without it (a
    sweep's jobs, a tune session, a push), so ``opptune``'s own line is not added."""
    exc.opptune_said = True  # type: ignore[attr-defined]
    return exc


def interrupted_text(command: str, exc: KeyboardInterrupt) -> str | None:
    """The line for a command that Ctrl-C or SIGTERM stopped (None: it said its own)."""
    if getattr(exc, "opptune_said", False):
        return None
    import signal  # here, as in stop_like_ctrl_c: not loaded at every command's start
    how = signal.Signals(exc.signum).name if isinstance(exc, Terminated) else "Ctrl-C"
    return f"opptune {command}: stopped by {how} before it finished"


def interrupted_status(exc: KeyboardInterrupt) -> int:
    """The exit status of a command stopped by ``exc``: 128 + the signal's number."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def missing_daemon_extra() -> list[str]:
    """Distributions of the daemon extra that cannot be imported here."""
    return [dist for dist, module in DAEMON_EXTRA.items()
            if importlib.util.find_spec(module) is None]


def _version(prog: str) -> int:
    # answered here: the commands' modules import the extra (a board asks what it has too)
    from .. import __version__
    print(f"{prog} {__version__}")
    return 0


def refuse_without_extra(prog: str, missing: list[str]) -> int:
    """Say in one line that ``prog`` needs the daemon extra's ``missing``; exit status 2."""
    # a board's 'opptune --help' must not read as if nothing worked there
    board = "; without it, 'opptune doctor' (no --agent) checks this board" \
        if prog == "opptune" else ""
    print(f"{prog}: needs the daemon extra ({', '.join(missing)} not installed): "
          f"pip install 'opptune[daemon]'{board}", file=sys.stderr)
    return 2


def operator(argv: list[str] | None = None) -> int:
    """`opptune`; ``--version`` answers without the extra."""
    argv = sys.argv[1:] if argv is None else argv
    missing = missing_daemon_extra()
    if missing and argv[:1] == ["doctor"] and not any(
            a == "--agent" or a.startswith("--agent=") for a in argv):
        # checking this machine is what a board needs, and needs no daemon extra
        from .doctor_cli import board_main
        return board_main(argv[1:])
    if missing:
        return _version("opptune") if argv == ["--version"] else refuse_without_extra("opptune", missing)
    stop_like_ctrl_c()
    try:
        from .cli import main  # a second Ctrl-C may land in its imports
    except KeyboardInterrupt as exc:
        print(LOAD_INTERRUPTED, file=sys.stderr)
        return interrupted_status(exc)
    try:
        code = main(argv)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt as exc:  # main answers those while loading and in a command
        return interrupted_status(exc)
    except BrokenPipeError:
        # the reader went away (`opptune status | head`): not an error of ours. Point stdout
        # at /dev/null so that the interpreter's own flush at exit does not fail again.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def daemon(argv: list[str] | None = None) -> int:
    """`opptune-daemon`; ``--version`` answers without the extra."""
    argv = sys.argv[1:] if argv is None else argv
    missing = missing_daemon_extra()
    if missing:
        return _version("opptune-daemon") if argv == ["--version"] else refuse_without_extra(
            "opptune-daemon", missing)
    try:
        from .service_args import build_parser
        args = build_parser().parse_args(argv)  # --help answers before the daemon's modules load
        from .service import run
        return run(args)
    except KeyboardInterrupt:
        # once it serves, SIGINT stops it through run's handler: this is its start only
        print(DAEMON_START_INTERRUPTED, file=sys.stderr)
        return 130
