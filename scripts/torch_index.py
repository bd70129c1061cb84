"""Print the pip arguments that install this machine's PyTorch build (the Makefile's `make demo` and
`make test` call it before `pip install -e ".[dev]"`, so pip never picks a build the machine cannot use).

- An NVIDIA driver answers (`nvidia-smi` exits 0): the CUDA build, PyPI's own Linux wheel of TORCH.
- None does: the CPU build, from PyTorch's CPU index when that resolves (PyPI's Linux wheel would pull
  multi-GB CUDA libraries a CPU box never uses); where it does not resolve, pip's configured index
  and find-links decide (a mirror or wheel folder holding the `+cpu` build).

`python scripts/torch_index.py --explain` says which and why on stderr. Standard library only: it runs
before the virtual environment has anything in it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

TORCH = "torch==2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_HOST = "download.pytorch.org"


def driver_answers() -> bool:
    """True when `nvidia-smi` runs and exits 0 within 20 s (a driver is loaded and sees a GPU)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolves(host: str) -> bool:
    try:
        socket.setdefaulttimeout(5)
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def choice(gpu: bool, cpu_index_resolves: bool) -> tuple[list[str], str]:
    """The pip arguments and the reason, for a machine with or without a GPU driver."""
    if gpu:
        return [TORCH], "nvidia-smi answers: the CUDA build"
    if cpu_index_resolves:
        return [TORCH, "--extra-index-url", CPU_INDEX], f"no NVIDIA driver answers: the CPU build from {CPU_INDEX}"
    return [TORCH], (f"no NVIDIA driver answers and {CPU_HOST} does not resolve: the build pip's configured "
                     "index offers (a +cpu wheel there wins)")


def main(argv: list[str]) -> int:
    gpu = driver_answers()
    args, why = choice(gpu, False if gpu else resolves(CPU_HOST))
    if "--explain" in argv:
        print(f"torch: {why}", file=sys.stderr)
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
