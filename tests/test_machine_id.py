"""The machine and boot ids the agent's hello sends (agent/machine_id.py): systemd's
application-specific form of each, read under the agent's sysfs_root, nothing for a part the
board lacks."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from opptune.agent.machine_id import APP_ID, FILES, app_specific, machine_identity
from opptune.shared import protocol as P


def _tree(root: Path, **ids: str) -> str:
    for part, text in ids.items():
        path = root / FILES[part]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


@pytest.mark.parametrize("part", ["machine", "boot"])
def test_each_id_is_the_one_systemd_derives_for_the_application(part):
    """The same derivation as sd_id128_get_{machine,boot}_app_specific: systemd-id128's
    answer for this machine."""
    tool = shutil.which("systemd-id128")
    if tool is None or not Path("/", FILES[part]).is_file():
        pytest.skip(f"needs systemd-id128 and /{FILES[part]}")
    res = subprocess.run([tool, f"{part}-id", f"--app-specific={APP_ID}"],
                         capture_output=True, text=True, timeout=10)
    if res.returncode != 0:
        pytest.skip(f"systemd-id128 {part}-id: {res.stderr.strip()}")
    assert machine_identity("/")[part] == res.stdout.strip()


def test_ids_under_the_root_are_hashed_and_a_missing_or_unset_one_is_left_out(tmp_path):
    machine, boot = uuid.uuid4(), uuid.uuid4()
    # machine-id is 32 hex digits, boot_id a dashed UUID
    got = machine_identity(_tree(tmp_path / "a", machine=machine.hex + "\n",
                                 boot=str(boot) + "\n"))
    assert got == {"machine": app_specific(machine), "boot": app_specific(boot)}
    assert machine.hex not in got.values() and boot.hex not in got.values()
    assert machine_identity(_tree(tmp_path / "b", boot=str(boot))) == {
        "boot": app_specific(boot)}
    # before the first boot completes; emptied for cloning; the null id
    for text in ("uninitialized\n", "", "0" * 32):
        assert machine_identity(_tree(tmp_path / "c", machine=text)) == {}, text
    assert machine_identity(str(tmp_path / "none")) == {}


def test_a_hello_takes_the_ids_and_refuses_them_empty_or_too_long():
    body = {"platform": {}, "workloads": [], "agent_version": "1",
            "machine": app_specific(uuid.uuid4()), "boot": app_specific(uuid.uuid4())}
    msg = P.decode(P.encode(P.make("hello", "vm", body)))
    assert (msg["body"]["machine"], msg["body"]["boot"]) == (body["machine"], body["boot"])
    for bad, code in (("", "bad_value"), ("x" * 65, "bad_value"), (7, "bad_type")):
        with pytest.raises(P.ProtocolError) as exc:
            P.validate(P.make("hello", "vm", {**body, "boot": bad}))
        assert exc.value.code == code and "boot" in str(exc.value)
