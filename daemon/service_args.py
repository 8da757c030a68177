"""The options of ``opptune-daemon``; service runs the daemon. Kept apart so that
``opptune-daemon --help`` loads none of the daemon's modules (numpy, zmq, the store)."""

from __future__ import annotations

import argparse

from .. import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opptune-daemon",
        description="Run the opptune daemon: agents connect to it and send their results; it "
                    "stores them, fits performance models, and sends each board the "
                    "configuration (cores, CPU frequency) it recommends. 'opptune status' shows "
                    "what it knows.")
    parser.add_argument("--version", action="version", version=f"opptune-daemon {__version__}")
    parser.add_argument("--config", metavar="FILE.toml",
                        help="daemon configuration (default /etc/opptune/daemon.toml; "
                             "etc/daemon.toml is an example)")
    parser.add_argument("--bind", metavar="ENDPOINT",
                        help="where to listen, e.g. tcp://0.0.0.0:5555, tcp://127.0.0.1:0 "
                             "(a free port), ipc:///run/opptune.sock")
    parser.add_argument("--database", metavar="FILE", help="SQLite file of the measurements, or a "
                        "postgresql://user@host/dbname URL")
    parser.add_argument("--log-level", metavar="LEVEL",
                        help="DEBUG, INFO (default), WARNING or ERROR")
    parser.add_argument("--auto-sweep", action="store_true", default=None,
                        help="sweep every agent that connects")
    parser.add_argument("--metrics-endpoint", metavar="HOST:PORT",
                        help="serve Prometheus metrics over HTTP here, e.g. 127.0.0.1:9464 "
                             "(default: metrics_endpoint of the configuration; empty: off)")
    parser.add_argument("--endpoint-file", metavar="FILE",
                        help="write the endpoint to this file once listening (useful with a "
                             "free port)")
    return parser
