"""Set-up shared by several test modules: a throwaway PostgreSQL server (tests/pgserver.py),
and SIGINT handled by the programs the tests start."""

import signal

from pgserver import pg_server, pg_url  # noqa: F401  (fixtures, found by name)

# Tests send Ctrl-C (SIGINT) to the commands they start. A shell without job control starts
# background commands with SIGINT ignored (`./.ci/run &` from a script), the children inherit
# that and Python then keeps it ignored: the command ran to its end and the tests failed. A
# handler set here is reset to the default in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
