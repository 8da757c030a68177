"""The agent stays light: its process never imports the daemon's numeric stack."""

import subprocess
import sys


def test_agent_modules_import_without_numpy_scipy_sklearn():
    code = ("import sys\n"
            "import opptune.agent.cli, opptune.agent.runner, opptune.agent.link, "
            "opptune.agent.apply, opptune.agent.platform, opptune.agent.workloads, "
            "opptune.agent.outbox, opptune.agent.knobs.cpufreq, opptune.agent.meters.perf, "
            "opptune.agent.meters.energy, opptune.agent.virtual_workload, opptune.bench_suite\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numpy', 'scipy', 'sklearn', 'matplotlib', 'rich'})\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"agent imports {out.stdout.strip()}"
