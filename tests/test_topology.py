"""Topology discovery on fake trees of each board, and on this machine."""

import json
import os

import msgpack
import pytest

from opptune.agent.sysfs import KnobUnavailable, SysFS
from opptune.agent.topology import cluster_sweep_order, read_topology, sweep_order_from
from opptune.agent.virtual_board import make_tree
from opptune.shared.cpus import format_cpu_list, parse_cpu_list, policies_text

from fake_trees import fake_tree, interleaved_smt_spec


def test_cpu_list_parsing_round_trip():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("0-7:2") == [0, 2, 4, 6]
    assert parse_cpu_list("") == []
    assert parse_cpu_list("4 5 6 7\n") == [4, 5, 6, 7]
    assert format_cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([12, *range(8)]) == "0-7,12" and format_cpu_list([]) == ""


def test_policies_sharing_a_value_are_named_once():
    """A board with a policy per cpu (intel_pstate) listed 'policy0 3200 MHz, policy1 3200
    MHz, ...' in recommend's table and a target's measured clocks."""
    mhz = lambda f: f"{f:g} MHz"  # noqa: E731
    per_cpu = {f"policy{c}": 3200 for c in [*range(8), *range(16, 24)]}
    assert policies_text(per_cpu, mhz) == "policy0-7,16-23 3200 MHz"
    # numbered in order (policy10 after policy4), a value per group; other names whole
    xu4 = {"policy4": 2000, "policy10": 2000, "policy0": 1400, "boost": 1400}
    assert policies_text(xu4, mhz) == "policy0 1400 MHz, boost 1400 MHz, policy4,10 2000 MHz"
    assert policies_text({"policy0": None}, lambda f: "governor's choice") == \
        "policy0 governor's choice"
    assert policies_text({}, mhz) == ""


def test_sysfs_errors_name_the_path(tmp_path):
    fs = SysFS(str(tmp_path))
    with pytest.raises(KnobUnavailable) as exc:
        fs.read_text("/sys/devices/system/cpu/cpufreq/policy0/scaling_governor")
    assert "policy0/scaling_governor" in str(exc.value)
    # A write never creates a missing knob.
    with pytest.raises(KnobUnavailable):
        fs.write("/sys/nothing", 1)
    assert not (tmp_path / "sys" / "nothing").exists()


def test_big_little_clusters(tmp_path):
    t = read_topology(fake_tree(tmp_path, "odroid-xu4"))
    assert t["cpus_online"] == list(range(8))
    assert t["clusters"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t["heterogeneous"] is True
    assert t["capacity"] == [377] * 4 + [1024] * 4
    assert [p["related_cpus"] for p in t["policies"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert t["n_nu"] is None and t["n_ht"] is None
    assert t["sweep_order"] == list(range(8))
    assert cluster_sweep_order(t, 1) == [4, 5, 6, 7]
    assert cluster_sweep_order(t, [5]) == [4, 5, 6, 7]
    with pytest.raises(IndexError):
        cluster_sweep_order(t, 2)
    assert t["model_name"].startswith("ODROID-XU4")
    # L2 is shared per cluster: one entry per cluster, not per cpu.
    l2 = [c for c in t["caches"] if c["level"] == 2]
    assert [c["shared_cpus"] for c in l2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert l2[1]["size_kb"] == 2048


def test_two_numa_smt_server(tmp_path):
    t = read_topology(fake_tree(tmp_path, "x86-2numa"))
    assert len(t["cpus_online"]) == 32
    # Physical cores of node 0, then of node 1, then the hyperthreads.
    assert t["sweep_order"][:8] == list(range(8))
    assert t["sweep_order"][8:16] == list(range(8, 16))
    assert sorted(t["sweep_order"][16:]) == list(range(16, 32))
    assert (t["n_nu"], t["n_ht"]) == (8, 16)
    assert t["smt_siblings"][0] == [0, 16]
    assert t["clusters"] == [list(range(32))]  # 32 per-cpu policies stay one cluster
    assert len(t["policies"]) == 32 and t["policies"][0]["driver"] == "intel_pstate"
    assert t["capacity"] is None
    assert [p["id"] for p in t["packages"]] == [0, 1]
    l3 = [c for c in t["caches"] if c["level"] == 3]
    assert len(l3) == 2 and l3[0]["size_kb"] == 20480


def test_interleaved_smt_numbering(tmp_path):
    t = read_topology(make_tree(interleaved_smt_spec(), str(tmp_path / "t")))
    assert t["sweep_order"] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert (t["n_nu"], t["n_ht"]) == (None, 4)


def test_rpi4_single_domain(tmp_path):
    t = read_topology(fake_tree(tmp_path, "rpi4"))
    assert t["clusters"] == [[0, 1, 2, 3]] and not t["heterogeneous"]
    assert t["policies"][0]["cpuinfo_max_khz"] == 1500000
    assert t["sweep_order"] == [0, 1, 2, 3]


def test_offline_cpu_is_left_out(tmp_path):
    root = fake_tree(tmp_path, "x86-2numa")
    with open(os.path.join(root, "sys/devices/system/cpu/online"), "w") as fh:
        fh.write("0-15,17-31\n")
    t = read_topology(root)
    assert 16 not in t["sweep_order"] and len(t["sweep_order"]) == 31
    assert [0] in t["smt_siblings"]


def test_sweep_order_three_nodes():
    cpus = list(range(6))
    order, n_nu, n_ht = sweep_order_from(cpus, [[c] for c in cpus], [[0, 1], [2, 3], [4, 5]])
    assert order == cpus and n_nu == 2 and n_ht is None


@pytest.mark.parametrize("board", ["odroid-xu4", "x86-2numa", "rpi4"])
def test_result_is_wire_ready(tmp_path, board):
    t = read_topology(fake_tree(tmp_path, board))
    assert json.loads(json.dumps(t)) == t
    assert msgpack.unpackb(msgpack.packb(t), strict_map_key=False) == t


def test_this_machine():
    t = read_topology("/")
    assert t["cpus_online"] and set(t["sweep_order"]) == set(t["cpus_online"])
    assert len(t["clusters"]) >= 1
    assert sorted(c for cl in t["clusters"] for c in cl) == t["cpus_online"]
    if not os.path.isdir("/sys/devices/system/cpu/cpufreq/policy0"):
        assert t["policies"] == [] and len(t["clusters"]) == 1


def _cpumap_only(root: str, width_words: int = 2) -> None:
    """Replace every node*/cpulist by the hex cpumap mask a kernel or tool may write instead."""
    node_dir = os.path.join(root, "sys/devices/system/node")
    for name in os.listdir(node_dir):
        lst = os.path.join(node_dir, name, "cpulist")
        if not os.path.exists(lst):
            continue
        with open(lst) as fh:
            text = fh.read().strip()
        cpus = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        mask = sum(1 << c for c in cpus)
        words = [f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(width_words))]
        os.remove(lst)
        with open(os.path.join(node_dir, name, "cpumap"), "w") as fh:
            fh.write(",".join(words) + "\n")


def test_numa_nodes_from_cpumap_only(tmp_path):
    root = fake_tree(tmp_path, "x86-2numa")
    _cpumap_only(root)
    t = read_topology(root)
    assert len(t["numa_nodes"]) == 2
    assert t["numa_nodes"][1] == list(range(8, 16)) + list(range(24, 32))
    assert (t["n_nu"], t["n_ht"]) == (8, 16)


def test_cpumap_parsing_of_words():
    from opptune.agent.topology import cpumap_cpus
    assert cpumap_cpus("00000000,0000ff00\n") == list(range(8, 16))
    assert cpumap_cpus("00000001,00000001") == [0, 32]
    assert cpumap_cpus("f") == [0, 1, 2, 3]
    assert cpumap_cpus("") == [] and cpumap_cpus("zz") == []
