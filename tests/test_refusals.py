"""Refusals are counted by code and logged at a bounded rate, saying what went unlogged."""

import logging

from opptune.shared.refusals import RefusalLog


def test_one_line_per_peer_per_interval_with_the_suppressed_count(caplog):
    now = [100.0]
    rl = RefusalLog(logging.getLogger("t.refusals"), interval_s=10, max_lines=3,
                    clock=lambda: now[0])
    caplog.set_level("WARNING", logger="t.refusals")
    for _ in range(1000):
        rl.refused(b"a", "malformed", "not msgpack")
    rl.refused(b"b", "unknown_job", "job 'x' was not issued")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a message from b'a': not msgpack (malformed)",
        "refused a message from b'b': job 'x' was not issued (unknown_job)"]
    now[0] += 10
    rl.refused(b"a", "malformed", "not msgpack")
    assert caplog.records[-1].getMessage().endswith("(999 more refusals from this peer since "
                                                    "its last line)")
    assert rl.total == 1002 and rl.by_code == {"malformed": 1001, "unknown_job": 1}
    # All peers together: at most max_lines lines per interval, whatever the peer names.
    caplog.clear()
    for i in range(100):
        rl.refused(b"peer-%d" % i, "malformed", "x")
    assert len(caplog.records) == 2 and rl.unlogged == 999 + 98
