"""numeq._core keeps the memory numeq frees for its next call (bindings/src/heap.cpp): a repeated
call touches no fresh pages. The oracle is the kernel's count of minor page faults
(getrusage), in a child process per setting so that the allocator starts fresh; nothing here
times anything."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import numeq


CHILD = """
import resource, numpy as np, numeq
rng = np.random.default_rng(0)
a = rng.standard_normal((512, 512)).astype(np.float32)
b = rng.standard_normal((512, 512)).astype(np.float32)
for _ in range(3):
    numeq.matmul(a, b, platform="cuda_core.fp32")
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    numeq.matmul(a, b, platform="cuda_core.fp32")
matmul = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10
big = rng.standard_normal(5 << 20)  # 40 MiB results: above any mmap threshold glibc allows
for _ in range(2):
    numeq.round(big, "bf16")
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    numeq.round(big, "bf16")
print(matmul, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 5)
"""


def faults_per_call(**env: str) -> tuple[float, float]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("NUMEQ_SYSTEM_MALLOC", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")}
    environment.update(env)
    # The child imports the numeq this process imported (the installed package in CI, the
    # source tree's bindings/ in a developer build), never a tree without a built _core.
    environment["PYTHONPATH"] = str(Path(numeq.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", CHILD], env=environment, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"child failed ({out.returncode}):\n{out.stderr[-4000:]}"
    matmul, cast = out.stdout.strip().splitlines()[-1].split()
    return float(matmul), float(cast)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's malloc's (mallopt)")
def test_repeated_calls_reuse_freed_memory() -> None:
    # A matmul call allocates about 8 MiB (inputs widened to float64, packed panels, the result),
    # the cast 40 MiB: as fresh pages, some 2,000 and 10,000 faults a call.
    kept = faults_per_call()
    system = faults_per_call(NUMEQ_SYSTEM_MALLOC="1")
    for what, k in zip(("512^3 matmul", "cast of 5M values"), kept):
        assert k < 50, f"{what}: {k} minor page faults per call with numeq's setting (expected almost none)"
    # The opt-out restores glibc's default, which returns memory above its mmap threshold (the
    # cast's 40 MiB result) and faults it in again. The matmul shows no difference since the fp32
    # chain kernels keep their scratch per thread: measured 0 faults a call under both settings.
    assert system[1] > kept[1], f"cast: NUMEQ_SYSTEM_MALLOC=1 changed nothing ({system[1]} vs {kept[1]} faults per call)"
