#!/usr/bin/env python3
"""`make check-arm`: the agent on emulated Debian 12 armhf and arm64, installed as the README says.

Per architecture: a Debian 12 userland built with mmdebstrap (cached outside the clone, keyed by
its package list), run under qemu-user-static through chroot; there the README's "On a board"
lines install the project, the suite's kernels run, the agent sweeps one kernel for a daemon on
this machine (loopback tcp) that fits, recommends, pushes and verifies, and the agent's platform
facts say whether it knows the perf_event_open syscall of the architecture. A table per
architecture ends the run; exit 0 only when every step of every architecture passed.

Needs root (chroot, mounts, binfmt_misc), mmdebstrap and qemu-user-static; without them it says
what to install and exits 2. Run it with the project's .venv python (the daemon runs from it);
--userland-only (only the cached userland, built where missing) needs only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
# Only the main archive: a security mirror caught mid-sync fails mmdebstrap's apt-get update,
# and what the check needs (Python, the three modules, gcc) is the same in the point release
MIRROR = "http://deb.debian.org/debian"
# Debian architecture -> (qemu's binfmt name, what uname -m says inside)
ARCHES = {"armhf": ("arm", "armv7l"), "arm64": ("aarch64", "aarch64")}
BOARD_SECTION = "## On a board"
CHROOT_SRC = "/root/opptune"     # the copied project tree; the README's lines run here
CHECK_DIR = "/root/check"        # the agent's configuration and state
KERNEL = "pi_integrate"          # the kernel of the loop (compute-bound: a clear speedup)
# Python modules the board must take from Debian, never from PyPI nor built
DEBIAN_MODULES = {"pyzmq": "zmq", "msgpack": "msgpack", "psutil": "psutil"}
# pip settings of this machine that the board's pip needs too (a proxy, a CA bundle); index
# and find-links settings stay here: they name this machine's paths
PASS_ENV = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "PIP_DISABLE_PIP_VERSION_CHECK",
            "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


class CheckFailed(Exception):
    """A step failed; the message is one line for the table and the summary."""


# -- pure parts (unit-tested) ----------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="check_arm.py", description="Install and run the agent on emulated Debian 12 ARM "
        "userlands exactly as the README's \"On a board\" section says (run as root).")
    ap.add_argument("--arch", default="all",
                    help="armhf, arm64 or all (default all)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="where the userlands are kept (default "
                         "${XDG_CACHE_HOME:-~/.cache}/opptune/check-arm)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions per point of the sweep")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds each step may take (default 900)")
    ap.add_argument("--preflight", action="store_true",
                    help="only say whether this machine can run the check (exit 0 or 2)")
    ap.add_argument("--userland-only", action="store_true",
                    help="only build the userland of each architecture where the cache has "
                         "none (exit 0 once each is there); .ci/run builds it so while the "
                         "tests run")
    args = ap.parse_args(argv)
    if args.preflight and args.userland_only:
        ap.error("--preflight and --userland-only: choose one")
    if args.arch not in (*ARCHES, "all"):
        ap.error(f"--arch {args.arch!r}: choose armhf, arm64 or all (ARCH=... for make)")
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.timeout <= 0:
        ap.error("--timeout must be positive")
    args.arches = list(ARCHES) if args.arch == "all" else [args.arch]
    return args


def default_cache_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opptune" / "check-arm"


def board_commands(readme: str) -> list[str]:
    """The shell lines of the README's "On a board" code block, in order."""
    start = readme.find("\n" + BOARD_SECTION + "\n")
    if start < 0:
        raise ValueError(f"README has no {BOARD_SECTION!r} section")
    body = readme[start + len(BOARD_SECTION) + 2:]
    body = body[:body.find("\n## ")] if "\n## " in body else body
    m = re.search(r"^```[^\n]*\n(.*?)^```", body, re.S | re.M)
    if not m:
        raise ValueError(f"README's {BOARD_SECTION!r} section has no code block")
    lines = [ln.strip() for ln in m.group(1).splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def apt_packages(commands: list[str]) -> list[str]:
    """The packages of the apt-get install line (what the cached userland is built with)."""
    for cmd in commands:
        words = shlex.split(cmd)
        if words[:1] == ["sudo"]:
            words = words[1:]
        if words[:2] == ["apt-get", "install"]:
            pkgs = [w for w in words[2:] if not w.startswith("-")]
            if pkgs:
                return pkgs
    raise ValueError("the board commands have no `apt-get install PACKAGES` line")


def as_root(cmd: str) -> str:
    """A README line as root runs it inside the userland (no sudo there)."""
    return cmd[len("sudo "):] if cmd.startswith("sudo ") else cmd


def missing_requirements(arches: list[str], euid: int, which=shutil.which) -> list[str]:
    """What keeps the check from running here, one line each; empty when it can run."""
    problems = []
    if euid != 0:
        problems.append("run as root (chroot, mounts and binfmt_misc need it): "
                        "sudo make check-arm")
    pkgs = []
    if which("mmdebstrap") is None:
        pkgs.append("mmdebstrap")
    if any(which(f"qemu-{ARCHES[a][0]}-static") is None for a in arches):
        pkgs.append("qemu-user-static")
    if which("chroot") is None:
        pkgs.append("coreutils")
    if pkgs:
        problems.append("missing " + ", ".join(pkgs) + ": apt-get install " + " ".join(pkgs))
    return problems


def cache_key(arch: str, packages: list[str]) -> str:
    """Changes whenever what the userland is built from changes (then it is rebuilt)."""
    spec = json.dumps({"arch": arch, "suite": SUITE, "mirror": MIRROR, "variant": "apt",
                       "packages": sorted(packages)}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def counters_rows(facts: dict) -> tuple[bool, str, str]:
    """(known, counters row, perf row) from the agent's platform probe inside the userland.

    Known means the agent has the architecture's perf_event_open number: without it no board of
    that architecture ever counts. Real PMU reads need real hardware (qemu-user has none), so
    the perf row informs and never fails the check.
    """
    machine, nr, perf = facts.get("machine"), facts.get("syscall_nr"), facts.get("perf") or {}
    if nr is None:
        counters = f"FAIL: the agent knows no perf_event_open syscall number for {machine}"
    else:
        counters = f"known: perf_event_open is syscall {nr} on {machine}"
    state = "available" if perf.get("available") else f"unavailable here: {perf.get('reason')}"
    return nr is not None, counters, state


def prune_logs(logs: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` run folders (named by their start time)."""
    for old in sorted(logs.glob("[0-9]*-[0-9]*"))[:-keep or None]:
        shutil.rmtree(old, ignore_errors=True)


LOG_TAIL = 40  # lines of a failed build's log that --userland-only prints

STEPS = ("userland", "install", "kernels", "loop", "recommendation", "counters", "perf")


def table(arch: str, result: dict) -> str:
    """One architecture's result, a row per step; a step that never ran says so."""
    width = max(map(len, STEPS))
    head = f"{arch}: {'PASSED' if result.get('ok') else 'FAILED'}"
    return "\n".join([head, *(f"  {step:<{width}}  {result.get(step, 'not run')}"
                              for step in STEPS)])


# -- processes, mounts, userlands -------------------------------------------------------------

class Procs:
    """Every process the check starts, each in its own session: stopped as a group at the end."""

    def __init__(self) -> None:
        self.live: list[subprocess.Popen] = []

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
        self.live.append(p)
        return p

    def run(self, argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
        p = self.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(p)
            raise CheckFailed(f"timed out after {timeout:.0f} s: {shlex.join(argv)[:120]}")
        except BaseException:
            self.stop(p)  # interrupted: stopped before the caller cleans up after it
            raise
        finally:
            if p.poll() is not None and p in self.live:
                self.live.remove(p)
        return subprocess.CompletedProcess(argv, p.returncode, out, None)

    def stop(self, p: subprocess.Popen, grace: float = 10.0) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if p.poll() is not None:
                break
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        if p in self.live:
            self.live.remove(p)

    def stop_all(self) -> None:
        for p in reversed(list(self.live)):
            self.stop(p)


def ensure_binfmt(arch: str) -> None:
    """Register qemu's binfmt_misc entry for ``arch`` (Debian's line, with F: works in chroots)."""
    base = Path("/proc/sys/fs/binfmt_misc")
    if not (base / "register").exists():
        r = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(base)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CheckFailed(f"cannot mount binfmt_misc: {r.stderr.strip()}")
    name = f"qemu-{ARCHES[arch][0]}"
    entry = base / name
    if not entry.exists():
        conf = Path("/usr/lib/binfmt.d") / f"{name}.conf"
        if not conf.exists():
            raise CheckFailed(f"{conf} missing: apt-get install qemu-user-static")
        (base / "register").write_text(conf.read_text().strip() + "\n")
    if not entry.read_text().startswith("enabled"):
        raise CheckFailed(f"binfmt_misc entry {entry} is disabled: echo 1 > {entry}")


@contextlib.contextmanager
def cache_lock(cache_dir: Path, say=lambda text: print(text, file=sys.stderr, flush=True)):
    """Hold ``cache_dir`` for this run alone: two checks on one cache (two clones' CI, a build
    beside a check) each removed the other's half-built userland (``*.tar.part``) and
    unpacked root. A second run says whom it waits for and waits (Ctrl-C or SIGTERM stop
    it)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / "lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            say(f"check-arm: {cache_dir} is in use by another check-arm ({holder}); waiting "
                "for it to end")
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}\n")
        fh.flush()
        yield


def userland(arch: str, packages: list[str], cache_dir: Path, procs: Procs,
             timeout: float, log: Path) -> tuple[Path, bool]:
    """The cached tarball of ``arch``'s userland, built when missing; (path, built now)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    tar = cache_dir / f"{SUITE}-{arch}-{cache_key(arch, packages)}.tar"
    if tar.exists():
        return tar, False
    for old in cache_dir.glob(f"{SUITE}-{arch}-*.tar*"):
        old.unlink()  # built from another package list
    partial = tar.with_suffix(".tar.part")
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        r = procs.run(["mmdebstrap", f"--arch={arch}", "--variant=apt", "--format=tar",
                       "--include=" + ",".join(packages), SUITE, str(partial),
                       f"deb {MIRROR} {SUITE} main"], timeout)
        log.write_text(r.stdout)
        if r.returncode != 0:
            raise CheckFailed(f"mmdebstrap failed ({r.returncode}); log: {log}")
        partial.rename(tar)
    finally:
        partial.unlink(missing_ok=True)  # a failed or interrupted build: no half a userland
    return tar, True


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if (point + "/").startswith(prefix):
                found.append(point)
    return found


class Chroot:
    """The userland unpacked in a scratch directory with /proc, /sys and /dev mounted.

    Leaving unmounts them (lazily if busy) and deletes the scratch copy only when nothing is
    mounted under it any more: a removal through a bind mount would delete the host's /dev.
    """

    def __init__(self, tar: Path, work_parent: Path, procs: Procs):
        self.tar, self.work_parent, self.procs = tar, work_parent, procs
        self.dir: Path | None = None
        self.mounted: list[Path] = []

    def __enter__(self) -> "Chroot":
        for stale in self.work_parent.glob("root-*"):  # left by a run that was SIGKILLed
            if not mounts_under(stale):
                shutil.rmtree(stale, ignore_errors=True)
        self.dir = Path(tempfile.mkdtemp(prefix="root-", dir=self.work_parent))
        r = self.procs.run(["tar", "-xf", str(self.tar), "-C", str(self.dir),
                            "--numeric-owner"], 600)
        if r.returncode != 0:
            raise CheckFailed(f"unpacking {self.tar} failed: {r.stdout.strip()[-200:]}")
        for spec in (["-t", "proc", "proc"], ["--bind", "/sys"], ["--bind", "/dev"]):
            target = self.dir / spec[-1].strip("/")
            target.mkdir(exist_ok=True)
            r = subprocess.run(["mount", *spec, str(target)], capture_output=True, text=True)
            if r.returncode != 0:
                raise CheckFailed(f"mount {' '.join(spec)} in the userland failed: "
                                  f"{r.stderr.strip()}")
            self.mounted.append(target)
        # the board's network: this machine's resolver and CA bundle (pip's PyPI over TLS)
        etc = self.dir / "etc"
        (etc / "resolv.conf").unlink(missing_ok=True)
        shutil.copy("/etc/resolv.conf", etc / "resolv.conf")
        cert = os.environ.get("PIP_CERT")
        if cert and Path(cert).is_file():
            dest = self.dir / cert.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(cert, dest)
        return self

    def path(self, inside: str) -> Path:
        assert self.dir is not None
        return self.dir / inside.lstrip("/")

    def argv(self, command: str, cwd: str = "/") -> list[str]:
        env = {"HOME": "/root", "LANG": "C.UTF-8",
               "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "DEBIAN_FRONTEND": "noninteractive"}
        env.update({k: os.environ[k] for k in PASS_ENV if k in os.environ})
        return ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "chroot", str(self.dir),
                "/bin/sh", "-c", f"cd {shlex.quote(cwd)} && {command}"]

    def __exit__(self, *exc) -> None:
        self.procs.stop_all()  # nothing may keep a mount busy
        for target in reversed(self.mounted):
            if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)
        self.mounted.clear()
        if self.dir is not None:
            left = mounts_under(self.dir)
            if left:
                print(f"check-arm: still mounted, {self.dir} kept: {', '.join(left)}",
                      file=sys.stderr)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)


def copy_tree(dest: Path) -> None:
    """The project's files (tracked and untracked-but-not-ignored), as a clone would have them."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                        "--exclude-standard"], capture_output=True, check=True)
    for rel in filter(None, r.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


# -- the steps of one architecture ------------------------------------------------------------

def step_install(ch: Chroot, commands: list[str], procs: Procs, timeout: float,
                 logdir: Path) -> str:
    copy_tree(ch.path(CHROOT_SRC))
    out = []
    for cmd in commands:
        r = procs.run(ch.argv(as_root(cmd), cwd=CHROOT_SRC), timeout)
        out.append(f"$ {cmd}\n{r.stdout}")
        (logdir / "install.log").write_text("\n".join(out))
        if r.returncode != 0:
            raise CheckFailed(f"`{cmd}` exited {r.returncode}; log: {logdir / 'install.log'}")
    pip_out = out[-1]
    for dist, module in DEBIAN_MODULES.items():
        if not re.search(rf"Requirement already satisfied: {dist}\S* in /usr/lib/python3/"
                         rf"dist-packages", pip_out, re.I):
            raise CheckFailed(f"pip did not take {dist} from Debian's package; "
                              f"log: {logdir / 'install.log'}")
        if re.search(rf"(Building wheel for|Downloading|Collecting) {dist}\b", pip_out, re.I):
            raise CheckFailed(f"pip fetched or built {dist}; log: {logdir / 'install.log'}")
    probe = ("import json, zmq, msgpack, psutil; print(json.dumps({m.__name__: m.__file__ "
             "for m in (zmq, msgpack, psutil)}))")
    r = procs.run(ch.argv(f"~/opptune-venv/bin/python -c {shlex.quote(probe)}"), timeout)
    files = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    wrong = [m for m, f in files.items() if not f.startswith("/usr/lib/python3/dist-packages/")]
    if r.returncode != 0 or wrong:
        raise CheckFailed(f"modules not from Debian's packages: {wrong or r.stdout[-200:]}")
    return "pyzmq, msgpack, psutil from Debian's packages"


def step_facts(ch: Chroot, procs: Procs, timeout: float) -> dict:
    probe = ("import json, os, platform; from opptune.agent.meters.perf import syscall_number; "
             "from opptune.agent.platform import perf_availability; print(json.dumps("
             "{'machine': platform.machine(), 'cpus': len(os.sched_getaffinity(0)), "
             "'syscall_nr': syscall_number(), 'perf': perf_availability('/')}))")
    r = procs.run(ch.argv(f"~/opptune-venv/bin/python -c {shlex.quote(probe)}"), timeout)
    if r.returncode != 0:
        raise CheckFailed(f"platform probe failed: {r.stdout.strip()[-200:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def step_kernels(ch: Chroot, procs: Procs, cpus: int, timeout: float, logdir: Path) -> str:
    py = "~/opptune-venv/bin/python -m opptune.bench_suite"
    r = procs.run(ch.argv(f"{py} list --json"), timeout)
    if r.returncode != 0:
        raise CheckFailed(f"bench_suite list failed: {r.stdout.strip()[-200:]}")
    listed = json.loads(r.stdout)
    names = [k["name"] if isinstance(k, dict) else k for k in
             (listed.get("kernels", listed) if isinstance(listed, dict) else listed)]
    log = []
    for name in names:
        r = procs.run(ch.argv(f"{py} run {shlex.quote(name)} --threads {cpus} "
                              f"--cpus 0-{cpus - 1} --size small"), timeout)
        log.append(f"$ run {name}\n{r.stdout}")
        (logdir / "kernels.log").write_text("\n".join(log))
        if r.returncode != 0:
            raise CheckFailed(f"kernel {name} exited {r.returncode}; log: {logdir / 'kernels.log'}")
        json.loads(r.stdout.strip().splitlines()[-1])  # its result line
    return f"{len(names)} ok"


def step_loop(ch: Chroot, arch: str, procs: Procs, cpus: int, reps: int, timeout: float,
              logdir: Path) -> str:
    """sweep -> fit -> recommend -> apply -> verify of KERNEL, agent here, daemon on the host."""
    bin_dir = Path(sys.executable).parent
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    daemon_toml = logdir / "daemon.toml"
    daemon_toml.write_text(
        f'bind = "{endpoint}"\ndatabase = "{logdir / "opptune.db"}"\nauto_sweep = false\n'
        f'auto_recommend = true\nverify_reps = {reps}\nheartbeat_s = 1.0\n'
        # the emulated board shares this machine with qemu and the daemon, which the agent
        # rightly sees as neighbours on its cpus: the check fits and verifies under that load
        'accept_load = true\n')
    agent_id = f"check-{arch}"
    agent_toml = ch.path(CHECK_DIR) / "agent.toml"
    agent_toml.parent.mkdir(parents=True, exist_ok=True)
    # run_as = "root": the agent runs as the userland's root from ~/opptune-venv (/root), which
    # the unprivileged default user could not read, and the userland has no such user anyway
    agent_toml.write_text(f'agent_id = "{agent_id}"\ndaemon = "{endpoint}"\n'
                          f'state_dir = "{CHECK_DIR}/state"\nheartbeat_s = 1.0\n'
                          f'bench_kernels = ["{KERNEL}"]\nrun_as = "root"\n')
    with open(logdir / "daemon.log", "wb") as dlog, open(logdir / "agent.log", "wb") as alog:
        procs.start([str(bin_dir / "opptune-daemon"), "--config", str(daemon_toml)],
                    stdout=dlog, stderr=subprocess.STDOUT)
        procs.start(ch.argv(f"~/opptune-venv/bin/opptune-agent --config {CHECK_DIR}/agent.toml"),
                    stdout=alog, stderr=subprocess.STDOUT)
    cli = [str(bin_dir / "opptune")]
    deadline = time.monotonic() + timeout

    def status() -> dict:
        r = procs.run([*cli, "status", "--daemon", endpoint, "--json"], 60)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    # polling the daemon: the agent's hello (emulated Python starts slowly) has no other signal
    while not any(a.get("id") == agent_id and a.get("alive")
                  for a in status().get("agents") or []):
        if time.monotonic() > deadline:
            raise CheckFailed(f"the agent never connected within {timeout:.0f} s; "
                              f"log: {logdir / 'agent.log'}")
        time.sleep(1.0)
    r = procs.run([*cli, "sweep", "--daemon", endpoint, "--agent", agent_id, "--workload",
                   KERNEL, "--size", "small", "--reps", str(reps), "--warmup", "0",
                   "--max-cores", str(cpus), "--wait"], timeout)
    (logdir / "sweep.log").write_text(r.stdout)
    if r.returncode != 0:
        raise CheckFailed(f"sweep failed ({r.returncode}): {r.stdout.strip()[-160:]}")
    while True:
        st = status()
        recs = [x for x in st.get("recommendations") or [] if x.get("agent") == agent_id]
        done = [x for x in recs if x.get("state") in ("verified", "off", "marked")]
        if done:
            rec = done[-1]
            return (f"{rec['cores']} cores, {rec['state']} "
                    f"({rec['verified_time_s']:.3f} s vs {rec['predicted_time_s']:.3f} s)")
        errs = [e for e in st.get("fit_errors") or [] if e.get("agent") == agent_id]
        if errs:
            raise CheckFailed(f"fit failed: {errs[-1].get('error')}")
        if time.monotonic() > deadline:
            raise CheckFailed(f"no verified recommendation within {timeout:.0f} s; logs: {logdir}")
        time.sleep(1.0)


def check_arch(arch: str, commands: list[str], args, procs: Procs, logdir: Path) -> dict:
    res: dict[str, str] = {}
    ok = True

    def step(col: str, fn):
        nonlocal ok
        t0 = time.monotonic()
        try:
            val = fn()
        except CheckFailed as exc:
            ok = False
            res[col] = f"FAIL {time.monotonic() - t0:.0f} s: {exc}"
            return None
        return val, time.monotonic() - t0

    ensure_binfmt(arch)
    got = step("userland", lambda: userland(arch, apt_packages(commands), args.cache_dir, procs,
                                            args.timeout, logdir / "mmdebstrap.log"))
    if not got:
        return {**res, "ok": False}
    (tar, built), dt = got
    res["userland"] = f"{'built' if built else 'cached'} {dt:.0f} s"
    with Chroot(tar, args.cache_dir, procs) as ch:
        got = step("install", lambda: step_install(ch, commands, procs, args.timeout, logdir))
        if not got:
            return {**res, "ok": False}
        res["install"] = f"ok {got[1]:.0f} s ({got[0]})"
        got = step("counters", lambda: step_facts(ch, procs, args.timeout))
        if not got:
            return {**res, "ok": False}
        facts = got[0]
        known, res["counters"], res["perf"] = counters_rows(facts)
        ok = ok and known
        cpus = int(facts["cpus"])
        got = step("kernels", lambda: step_kernels(ch, procs, cpus, args.timeout, logdir))
        if got:
            res["kernels"] = f"{got[0]} {got[1]:.0f} s"
        got = step("loop", lambda: step_loop(ch, arch, procs, cpus, args.reps, args.timeout,
                                             logdir))
        if got:
            res["loop"] = f"ok {got[1]:.0f} s"
            res["recommendation"] = got[0]
    return {**res, "ok": ok}


def build_userlands(args, commands: list[str], procs: Procs, run_dir: Path) -> int:
    """--userland-only: each architecture's userland, built where the cache has none; a line
    each, and on a failure the end of mmdebstrap's log on stderr (a CI log shows it; the
    cache it is kept in may be out of reach)."""
    for arch in args.arches:
        log = run_dir / arch / "mmdebstrap.log"
        t0 = time.monotonic()
        try:
            ensure_binfmt(arch)
            tar, built = userland(arch, apt_packages(commands), args.cache_dir, procs,
                                  args.timeout, log)
        except CheckFailed as exc:
            print(f"check-arm: {arch} userland FAILED: {exc}", file=sys.stderr)
            if log.exists():
                tail = log.read_text().splitlines()[-LOG_TAIL:]
                print("\n".join(f"  {ln}" for ln in tail), file=sys.stderr)
            return 1
        print(f"check-arm: {arch} userland {'built' if built else 'cached'} in "
              f"{time.monotonic() - t0:.0f} s: {tar}", flush=True)
    return 0


class Interrupted(Exception):
    pass


def _on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problems = missing_requirements(args.arches, os.geteuid())
    if problems:
        for p in problems:
            print(f"check-arm: {p}", file=sys.stderr)
        print("check-arm: nothing was checked", file=sys.stderr)
        return 2
    if args.preflight:
        return 0
    try:
        commands = board_commands((ROOT / "README.md").read_text())
        apt_packages(commands)
    except ValueError as exc:
        print(f"check-arm: {exc}", file=sys.stderr)
        return 2
    args.cache_dir = (args.cache_dir or default_cache_dir()).resolve()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        with cache_lock(args.cache_dir):
            return _run(args, commands)
    except (KeyboardInterrupt, Interrupted) as exc:  # while waiting for the cache
        print(f"check-arm: interrupted ({str(exc) or 'SIGINT'}) while waiting for the cache; "
              "nothing was checked", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, commands: list[str]) -> int:
    """The checks (or the userland builds), the cache held."""
    run_dir = args.cache_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
    prune_logs(args.cache_dir / "logs", keep=9)  # with this run's, the last ten
    procs = Procs()
    results: dict[str, dict] = {}
    code = 0
    try:
        if args.userland_only:
            code = build_userlands(args, commands, procs, run_dir)
        for arch in [] if args.userland_only else args.arches:
            logdir = run_dir / arch
            logdir.mkdir(parents=True, exist_ok=True)
            print(f"check-arm: {arch} (logs in {logdir})", flush=True)
            t0 = time.monotonic()
            results[arch] = check_arch(arch, commands, args, procs, logdir)
            print(f"check-arm: {arch} {'passed' if results[arch]['ok'] else 'FAILED'} in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"check-arm: interrupted ({str(exc) or 'SIGINT'}); stopped what it started",
              file=sys.stderr)
        code = 130
    except CheckFailed as exc:
        print(f"check-arm: {exc}", file=sys.stderr)
        code = 1
    finally:
        procs.stop_all()
    if args.userland_only:
        return code
    for arch in args.arches:
        print(table(arch, results.get(arch, {"ok": False})))
    if code == 0 and not all(r["ok"] for r in results.values()):
        code = 1
    print("check-arm: " + ("PASSED" if code == 0 else "FAILED"))
    return code


if __name__ == "__main__":
    sys.exit(main())
