"""The board's architecture, kernel release and distribution in its platform facts."""

import os

import pytest

from fake_trees import fake_tree
from opptune.agent.platform import discover, distribution, kernel_facts, parse_os_release
from opptune.shared.config import AgentConfig


def _facts(root: str) -> dict:
    return discover(AgentConfig(agent_id="a1", sysfs_root=root, bench_kernels=[]))


@pytest.mark.parametrize("board,arch,kernel", [
    ("odroid-xu4", "armv7l", "6.1.0-virtual-armmp-lpae"),
    ("rpi4", "aarch64", "6.1.0-virtual-rpi-v8"),
    ("x86-2numa", "x86_64", "6.1.0-virtual-amd64"),
])
def test_a_board_tree_gives_its_arch_kernel_and_distribution(tmp_path, board, arch, kernel):
    facts = _facts(fake_tree(tmp_path, board))
    assert facts["arch"] == arch and facts["kernel"] == kernel
    assert facts["distribution"] == {"pretty_name": "Debian GNU/Linux 12 (bookworm)",
                                     "id": "debian", "version_id": "12"}
    # counters are not simulated, but the agent still says which syscall it would use
    assert facts["perf"]["available"] is False and facts["perf"]["syscall_nr"] is not None


def test_a_tree_without_them_gives_nulls_not_this_machines_values(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4", machine=None, kernel_release=None,
                     os_release=None)
    facts = _facts(root)
    assert facts["arch"] is None and facts["kernel"] is None
    assert facts["distribution"] == {"pretty_name": None, "id": None, "version_id": None}


def test_usr_lib_os_release_is_the_fallback(tmp_path):
    root = fake_tree(tmp_path, "rpi4", os_release=None)
    os.makedirs(os.path.join(root, "usr/lib"))
    with open(os.path.join(root, "usr/lib/os-release"), "w") as fh:
        fh.write('# comment\nPRETTY_NAME="Raspbian GNU/Linux 11 (bullseye)"\nID=raspbian\n')
    assert distribution(root) == {"pretty_name": "Raspbian GNU/Linux 11 (bullseye)",
                                  "id": "raspbian", "version_id": None}


def test_os_release_values_unquote_and_unescape():
    text = 'A="x \\"y\\""\nB=\'z\'\nC=plain\nnot a line\n\nD=""\n'
    assert parse_os_release(text) == {"A": 'x "y"', "B": "z", "C": "plain", "D": ""}


def test_the_real_root_falls_back_to_uname():
    arch, release = kernel_facts("/")
    assert arch == os.uname().machine and release == os.uname().release


@pytest.mark.integration
def test_opptune_status_shows_the_boards_arch_kernel_and_distribution(tmp_path):
    """A real daemon and agent (on the odroid-xu4 tree): status and status --json show them."""
    import json
    import subprocess
    import sys

    from opptune.agent.virtual_board import make_tree
    from procs import Cluster
    root = make_tree("odroid-xu4", str(tmp_path / "board"))
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False,
                extra_agent={"virtual_board": "odroid-xu4", "sysfs_root": root})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda st: st["agents"] and st["platforms"], what="the agent's hello")
        cli = [sys.executable, "-m", "opptune.daemon.cli", "status", "--daemon", c.endpoint]
        out = subprocess.run(cli + ["--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        (facts,) = st["platforms"].values()
        assert facts["arch"] == "armv7l" and facts["kernel"] == "6.1.0-virtual-armmp-lpae"
        assert facts["distribution"]["pretty_name"] == "Debian GNU/Linux 12 (bookworm)"
        assert facts["perf"]["syscall_nr"] is not None
        # piped, as into grep or a log, with no width asked for: no cell folded at 80 columns
        text = subprocess.run(cli, capture_output=True, text=True, timeout=60,
                              env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
        assert text.returncode == 0, text.stderr
        assert any("distribution" in ln and "last seen (s)" in ln
                   for ln in text.stdout.splitlines()), text.stdout
        row = next(ln for ln in text.stdout.splitlines() if "odroid-xu4" in ln)
        assert "armv7l" in row and "6.1.0-virtual-armmp-lpae" in row
        assert "Debian GNU/Linux 12 (bookworm)" in row
    finally:
        c.stop()
