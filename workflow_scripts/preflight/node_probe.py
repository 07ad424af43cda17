"""What a compute node sees, as one JSON line: run under ``srun`` by preflight (standard library only).

    python node_probe.py imports megatron.bridge transformer_engine   # imports, CUDA devices, driver
    python node_probe.py url https://huggingface.co                    # whether the node reaches it

It runs in the environment under test (a stage's interpreter, or the Megatron image), which
need not hold this checkout's packages, so it imports nothing of them.
"""

import importlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request


def _node():
    return {
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "python": sys.executable,
    }


def imports(modules):
    """Each module's version or import error, and the CUDA devices torch sees, with the driver's version."""
    report = _node()
    report["imports"] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as error:  # an import can fail in many ways on a node (missing libcuda: OSError)
            report["imports"][name] = {
                "ok": False,
                "error": f"{type(error).__name__}: {error}".splitlines()[0],
            }
        else:
            report["imports"][name] = {"ok": True, "version": str(getattr(module, "__version__", "?"))}
    report["cuda_devices"], report["cuda_error"], report["device"], report["cuda"] = 0, None, None, None
    try:
        import torch

        report["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        report["cuda"] = torch.version.cuda
        if report["cuda_devices"]:
            report["device"] = torch.cuda.get_device_name(0)
        else:
            report["cuda_error"] = f"torch {torch.__version__} sees no CUDA device"
    except Exception as error:
        report["cuda_error"] = f"torch not importable: {type(error).__name__}: {error}".splitlines()[0]
    try:
        smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        report["driver"] = (
            subprocess.run(smi, capture_output=True, text=True, timeout=60).stdout.split("\n")[0] or None
        )
    except (OSError, subprocess.SubprocessError):
        report["driver"] = None
    return report


def url(address):
    """Whether ``address`` answers from this node: any HTTP status counts, a connection error does not."""
    report = _node()
    report.update(url=address, reached=False, status=None, error=None)
    try:
        with urllib.request.urlopen(address, timeout=20) as response:
            report.update(reached=True, status=response.status)
    except urllib.error.HTTPError as error:
        report.update(reached=True, status=error.code)
    except Exception as error:
        report["error"] = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
    return report


def main(argv):
    command, arguments = argv[0], argv[1:]
    report = imports(arguments) if command == "imports" else url(arguments[0])
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
