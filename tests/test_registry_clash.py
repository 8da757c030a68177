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


def _hello_of(reg, ident, now, machine, boot, platform=RPI):
    """A hello of agent "rpi" on ``platform`` from the board of ``machine`` and ``boot``
    (hashed ids as the agent sends them; None: not said)."""
    if reg.claim("rpi", ident, platform["id"], platform, ident.decode(), now,
                 machine=machine, boot=boot) is not None:
        return False
    reg.hello("rpi", ident, platform["id"], platform, [], now, instance=ident.decode(),
              machine=machine, boot=boot)
    return True


def test_a_board_of_the_same_platform_and_another_machine_or_boot_does_not_take_the_id():
    for machine2, boot2 in (("m2", "b2"), ("m1", "b2")):  # another board; a cloned image
        reg = Registry(timeout_s=10.0)
        assert _hello_of(reg, b"a", 100.0, "m1", "b1")
        assert not _hello_of(reg, b"x", 101.0, machine2, boot2)
        info = reg.get("rpi")
        assert (info.identity, info.machine, info.boot) == (b"a", "m1", "b1")
        held, other = reg.clash("rpi", 101.0)
        assert (held.machine, held.boot, other.machine, other.boot) == ("m1", "b1", machine2,
                                                                         boot2)
        # its heartbeats do not take the id over while the holder is alive ...
        assert reg.seen("rpi", b"x", 105.0) is info and info.identity == b"a"
        reg.seen("rpi", b"a", 106.0)
        assert reg.seen("rpi", b"x", 112.0) is info and info.identity == b"a"
        # ... nor once it is gone: the other board says hello again, then holds the id
        assert reg.seen("rpi", b"x", 117.0) is None and info.identity == b"a"
        assert _hello_of(reg, b"x", 117.5, machine2, boot2)
        assert (info.identity, info.machine, info.boot) == (b"x", machine2, boot2)
        assert reg.clash("rpi", 117.5) is None


def test_the_same_machine_and_boot_or_a_side_that_says_none_is_a_restart():
    for first, second in ((("m1", "b1"), ("m1", "b1")),  # the agent restarted
                          ((None, None), ("m1", "b1")),  # ... upgraded: now it says them
                          (("m1", "b1"), (None, None)),  # ... an older agent
                          (("m1", None), ("m1", "b2"))):  # a board without a boot id
        reg = Registry(timeout_s=10.0)
        assert _hello_of(reg, b"a", 100.0, *first)
        assert _hello_of(reg, b"b", 101.0, *second), (first, second)
        assert reg.get("rpi").identity == b"b" and reg.clash("rpi", 101.0) is None
