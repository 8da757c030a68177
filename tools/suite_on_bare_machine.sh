#!/bin/bash
# Characterise the bench_suite on a bare x86-64 Linux machine that has Python 3 with numpy,
# scipy, psutil and msgpack but no network (the 16-core machine the `device` tool lends):
# installs the wheels carried in WHL (pyzmq, pyperf for that Python; setuptools and wheel under
# WHL/build), builds opptune from this checkout, prints `opptune doctor`, then runs
# benchmarks/bench_suite_data.py under a time limit and copies the store to OUT, so an
# interrupted run is exported here with `python benchmarks/bench_suite_data.py --from-db
# OUT/store.db` (and a second call on the same machine resumes it: characterize skips what
# is measured). data/bench_suite_xeon16/SOURCE.md was made this way.
#
#   bash tools/suite_on_bare_machine.sh [SIZE [REPS [SECONDS [AGENT_ID]]]]
#   (defaults: default 3 420 dev16; WHL=.whl, OUT=/tmp/out; PROBE="fib_tasks wavefront" first
#   runs tools/cpu_probe.py on each of those kernels, cpu by cpu, into OUT/probe.log)
#
# Wheels, prepared where pip has the network (here: .whl is ignored by git):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl pyzmq pyperf
#   pip download --no-deps --only-binary=:all: -d .whl/build setuptools wheel
WHL=${WHL:-.whl}
SIZE=${1:-default}; REPS=${2:-3}; SECS=${3:-420}; AGENT=${4:-dev16}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/device.log") 2>&1
t0=$(date +%s)
echo "== $(date -u) host $(hostname) nproc $(nproc) $(python3 --version 2>&1)"
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "$@"; }
pipi --target /tmp/bsite "$WHL"/build/*.whl || exit 3
pipi --target /tmp/site "$WHL"/*.whl || exit 3
# the C kernels are built for this machine's Python (the extensions are not portable)
PYTHONPATH=/tmp/bsite pipi --no-build-isolation --target /tmp/site . || { echo "build failed"; exit 4; }
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
(cd /tmp && python3 -c "import opptune.bench_suite._kernels, zmq, pyperf, numpy, scipy, psutil, msgpack") || exit 5
echo "== installed in $(( $(date +%s) - t0 )) s"
lscpu 2>/dev/null | head -25
timeout 60 opptune doctor 2>&1 | head -40
for k in ${PROBE:-}; do
    timeout 300 python3 tools/cpu_probe.py "$k" --size "$SIZE" --reps 1 | tee -a "$OUT/probe.log"
done
W=/tmp/suite
timeout --kill-after=10 "$SECS" python3 benchmarks/bench_suite_data.py --out "$OUT" \
    --local-size "$SIZE" --reps "$REPS" --local-id "$AGENT" --run-timeout 60 --workdir "$W"
echo "== suite exit $? after $(( $(date +%s) - t0 )) s"
python3 - "$W/opptune.db" "$OUT/store.db" <<'P'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.close()
print("store copied to", sys.argv[2])
P
tail -30 "$W/daemon.log" > "$OUT/daemon_tail.log" 2>/dev/null
tail -60 "$W/local.log" > "$OUT/agent_tail.log" 2>/dev/null
