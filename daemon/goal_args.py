"""The parsers of ``opptune recommend`` and ``opptune tune``; goal_cli runs them. Kept apart so
that building every command's parser loads neither numpy nor rich (goal_cli does)."""

from __future__ import annotations

import argparse
from typing import Any

from .objective_names import OBJECTIVES
from .options import add_reconnect_option


def _recommend(args: argparse.Namespace) -> int:
    from .goal_cli import cmd_recommend
    return cmd_recommend(args)


def _tune(args: argparse.Namespace) -> int:
    from .goal_cli import cmd_tune
    return cmd_tune(args)


def add_goal_options(p: argparse.ArgumentParser, tune: bool = False) -> None:
    # tune checks --agent and --workload itself: --follow and --stop take neither
    p.add_argument("--agent", metavar="ID", required=not tune, help="agent id (see opptune status)")
    p.add_argument("--workload", required=not tune, help="workload name")
    p.add_argument("--size", help="input size class (default: the one measured, where the "
                                  "workload was measured at one; else [sweep] size of the "
                                  "daemon's configuration)" if tune else
                                  "input size class (default: the one measured)")
    p.add_argument("--objective", default=None if tune else "time",  # None: not given
                   help=f"what to minimise: {', '.join(OBJECTIVES)} (default time; edp = "
                        "energy x time, ed2p = energy x time²)")
    p.add_argument("--deadline", help="at most this time per run, e.g. 2.5s or 300ms")
    p.add_argument("--power-cap", help="at most this mean power during a run, e.g. 4W or 500mW")
    p.add_argument("--cluster", type=int,
                   help="only this cluster (index into the board's clusters)" if tune else
                   "only this cluster (index; needs a per-cluster sweep or tune)")
    p.add_argument("--max-cores", type=int,
                   help="at most this many cores: 1 to the board's cpus, or the cluster's with "
                        "--cluster")
    p.add_argument("--accept-load", action="store_true",
                   help="count the runs marked for interference too: the "
                        + ("measurements and the recommendation then hold" if tune else
                           "recommendation then holds")
                        + " for the board under that load (default: the daemon's "
                          "accept_load, false: clean runs only)")


def add_parsers(sub: Any, link_options: Any) -> None:
    p = sub.add_parser("recommend", help="the best configuration for a goal (time, energy, "
                                         "EDP, ED2P; deadline, power cap) from what was measured",
                       description="Ask the daemon which cores and frequencies best serve a "
                                   "goal for an agent's workload, from the runs it stored. "
                                   "When no configuration meets --deadline / --power-cap it "
                                   "shows the closest, applies nothing and exits 3.")
    link_options(p)
    add_goal_options(p)
    p.add_argument("--apply", action="store_true",
                   help="push it to the agent, which applies and verifies it (by running the "
                        "workload there)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--pid", type=int, metavar="PID",
                        help="apply it to this running process on the board instead (every "
                             "thread's affinity, the policies' frequencies; implies --apply)")
    target.add_argument("--unit", metavar="NAME",
                        help="apply it to this systemd unit on the board instead (its cgroup's "
                             "AllowedCPUs, the policies' frequencies; implies --apply)")
    p.set_defaults(func=_recommend)

    p = sub.add_parser("tune", help="measure a few configurations chosen for a goal, then "
                                    "apply and verify the best one",
                       description="The daemon measures configurations one at a time, each "
                                   "where it most helps to find the goal's optimum, stops "
                                   "when one more would not change the answer, recommends, "
                                   "and has the agent apply and verify it. The session lives "
                                   "in the daemon: interrupting this command does not stop it; "
                                   "in a fleet, it is followed through another daemon when "
                                   "this one stops answering; 'opptune status' lists the "
                                   "open sessions; --follow ID follows one again, --stop "
                                   "ID ends it. One session per agent at a time (one "
                                   "board, one set of clocks): a second is refused. "
                                   "When no configuration meets --deadline / --power-cap it "
                                   "shows the closest, applies nothing and exits 3.",
                       usage="opptune tune --agent ID --workload W [goal and session "
                             "options] [link options] [--json]\n"
                             "       opptune tune --follow TUNE_ID [--no-progress] "
                             "[link options] [--json]\n"
                             "       opptune tune --stop TUNE_ID [link options] [--json]")
    link_options(p)
    add_goal_options(p, tune=True)
    p.add_argument("--budget", type=int, help="at most this many configurations")
    p.add_argument("--reps", type=int, help="runs per configuration (default: [sweep] reps)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--follow", metavar="TUNE_ID",
                       help="follow a session going on (after Ctrl-C, or from another "
                            "terminal) until it ends: the same progress, verdict and exit "
                            "status as the tune that started it")
    which.add_argument("--stop", metavar="TUNE_ID",
                       help="end a session going on (state 'stopped'): it measures no more "
                            "configurations and applies nothing; a configuration it already "
                            "pushed stays. 'opptune status' lists the open sessions")
    add_reconnect_option(p, "the session")
    p.set_defaults(func=_tune)
