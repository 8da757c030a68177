"""The registry's rule for two connections that say hello with one agent id."""

from __future__ import annotations

from opptune.daemon.registry import Registry

RPI = {"id": "p-rpi", "hostname": "raspberrypi"}
XU4 = {"id": "p-xu4", "hostname": "raspberrypi"}


def _hello(reg, ident, platform, now, instance):
    if reg.claim("rpi", ident, platform["id"], platform, instance, now) is not None:
        return False  # another board holds the id
    reg.hello("rpi", ident, platform["id"], platform, [], now, instance=instance)
    return True


def test_a_restart_takes_the_id_and_an_old_process_that_speaks_on_is_a_clash():
    reg = Registry(timeout_s=10.0)
    assert _hello(reg, b"rpi/a", RPI, 100.0, "a")
    # the agent restarted (a new process, the same board): it takes the id, no clash
    assert _hello(reg, b"rpi/b", RPI, 101.0, "b")
    assert reg.get("rpi").identity == b"rpi/b" and reg.clash("rpi", 101.0) is None
    # ... but the first process speaks on: two agents of one board kind share the id; it is
    # heard (its results are taken) and does not take the id back
    assert reg.seen("rpi", b"rpi/a", 102.0) is reg.get("rpi")
    assert reg.get("rpi").identity == b"rpi/b"
    held, other = reg.clash("rpi", 102.0)
    assert (held.instance, other.instance) == ("b", "a")
    # the first one stops: the clash ends once it has been silent for the timeout
    reg.seen("rpi", b"rpi/b", 111.0)
    assert reg.clash("rpi", 112.5) is None


def test_another_board_does_not_take_a_live_id_and_takes_it_once_the_holder_is_gone():
    reg = Registry(timeout_s=10.0)
    assert _hello(reg, b"rpi/a", RPI, 100.0, "a")
    assert not _hello(reg, b"rpi/x", XU4, 101.0, "x")  # another platform: a clash at once
    info = reg.get("rpi")
    assert (info.identity, info.platform_id) == (b"rpi/a", "p-rpi")
    held, other = reg.clash("rpi", 101.0)
    assert (held.platform_id, other.platform_id) == ("p-rpi", "p-xu4")
    assert reg.seen("rpi", b"rpi/x", 102.0) is info and info.identity == b"rpi/a"
    # the holder falls silent: the other board must say hello again (its hello was not
    # taken), then it holds the id with its own platform
    assert reg.seen("rpi", b"rpi/x", 111.0) is None
    assert _hello(reg, b"rpi/x", XU4, 111.5, "x")
    assert (info.identity, info.platform_id) == (b"rpi/x", "p-xu4")
    assert reg.clash("rpi", 111.5) is None
