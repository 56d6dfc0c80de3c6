#!/usr/bin/env bash
# The GPU check: one prepared script for a machine with an NVIDIA GPU and no network (one H200,
# CUDA 13 driver, Python 3.12 with torch, cupy-cuda13x and the CPU onnxruntime preinstalled).
#
# Before it runs, the wheels that machine lacks must be there (see scripts/gpu_wheels.py: run
# `python scripts/gpu_wheels.py download` where there is network, then carry tools/wheels/run01
# .. runNN one run each, back to back), and, for the benchmark, perf_analyzer's wheel and Debian
# libraries: carry tools/perf_analyzer/wheel and tools/perf_analyzer/debs (13 MiB, made here by
# `scripts/perf_analyzer.sh --prepare-only`) with the run that starts this script.
#
# Steps: reassemble the wheels (sha256-checked); a venv with --system-site-packages (it reuses
# the machine's CuPy and CUDA libraries) that gets onnxruntime-gpu and the rest from the local
# wheels only, while the CPU onnxruntime stays outside it (both own an onnxruntime/ folder: the
# venv's copy shadows the system one); a check that ONNX Runtime really puts a session on CUDA;
# the GPU tests; the example models served with their GPU metrics scraped; and a short benchmark
# of resnet18 on KIND_GPU instances: concurrency 1, 16 and 64, batching off and on, 1 and 2
# instances, infer/s, p99 and the GPU utilization sampled through NVML, as one table. About 4
# minutes. Results and logs go to $OUT (the device runner's folder) or tools/gpu-check.
#
# Usage: bash scripts/gpu_check.sh [--no-bench]     (PYTHON=python3.12 to pick the interpreter)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-python3}"
WHEELS=tools/wheels
VENV=tools/gpu-venv # gitignored: kept between runs while the machine stays warm
RESULTS="${OUT:-tools/gpu-check}"
mkdir -p "${RESULTS}"
BENCH=1
[[ "${1:-}" == "--no-bench" ]] && BENCH=0
step() { echo "==> $* ($((SECONDS)) s)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"${PY}" --version
"${PY}" -m pip list 2>/dev/null |
    grep -i -E '^(torch|cupy|onnxruntime|numpy|nvidia-(cudnn|cublas|cuda-runtime|cufft|curand))' || true

step "wheels"
"${PY}" scripts/gpu_wheels.py reassemble --dir "${WHEELS}"

step "venv (${VENV})"
[[ -x "${VENV}/bin/python" ]] || "${PY}" -m venv --system-site-packages "${VENV}"
VPY="${VENV}/bin/python"
"${PY}" scripts/gpu_wheels.py requirements >"${RESULTS}/requirements.txt"
if ! "${VPY}" -m pip install --quiet --disable-pip-version-check --no-index \
    --find-links "${WHEELS}/dist" -r "${RESULTS}/requirements.txt"; then
    echo "a wheel is missing: if pip names an nvidia-* CUDA or cuDNN wheel, this machine lacks" \
        "it; download again with --have cupy-* numpy torch triton" >&2
    exit 1
fi
# onnxruntime.preload_dlls() looks for the pip CUDA libraries (nvidia/cu13/lib, nvidia/cudnn/lib)
# only beside onnxruntime, in the venv; the machine's are in the system site-packages.
NVIDIA_LIBS="$("${PY}" - <<'EOF'
import glob
import os
import site

roots = [*site.getsitepackages(), site.getusersitepackages()]
print(":".join(d for root in roots for d in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))))
EOF
)"
export LD_LIBRARY_PATH="${NVIDIA_LIBS}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
echo "CUDA libraries from: ${NVIDIA_LIBS:-nowhere in site-packages}"
# Convoy itself runs from this tree (pytest's pythonpath, `python -m server` from the root).
"${VPY}" - <<'EOF'
import importlib.metadata as md
import onnxruntime as ort

print("onnxruntime-gpu", md.version("onnxruntime-gpu"), "imported from", ort.__file__)
assert "/gpu-venv/" in ort.__file__, "the system's CPU onnxruntime shadows onnxruntime-gpu"
assert "CUDAExecutionProvider" in ort.get_available_providers(), ort.get_available_providers()
EOF

step "a CUDA session"
"${VPY}" - <<'EOF'
import sys
import tempfile

import onnx
from backends import cuda_available, cuda_device_count, device_memory
from backends.device import preload_cuda_libraries
from scripts import models

preload_cuda_libraries()
print("cuda devices:", cuda_device_count())
if not cuda_available():
    sys.exit("no usable CUDA device: onnxruntime-gpu, CuPy and the driver must all answer")
print("device 0 memory (free, total):", device_memory(0))
with tempfile.NamedTemporaryFile(suffix=".onnx") as file:
    onnx.save(models.simple(), file.name)
    import onnxruntime as ort

    session = ort.InferenceSession(file.name, providers=["CUDAExecutionProvider"])
    print("session providers:", session.get_providers())
if "CUDAExecutionProvider" not in session.get_providers():
    sys.exit(
        "ONNX Runtime falls back to CPU: the CUDA 13 / cuDNN 9 libraries are not found (the log "
        "above names them); bring nvidia-cudnn-cu13 and friends with "
        "`gpu_wheels.py download --have cupy-* numpy torch triton`"
    )
EOF

step "execution accelerators (TensorRT) and a PyTorch KIND_GPU instance"
# TensorRT needs NVIDIA's TensorRT libraries beside onnxruntime-gpu: without them the load error
# names the package (never a silent fall-back). torch is the machine's own (a CUDA build).
"${VPY}" - <<'EOF' 2>&1 | tee "${RESULTS}/accelerators.log" || true
import asyncio
import tempfile
from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format

from backends import CudaOrtInstance, Device, ModelLoadError, OrtSettings, TorchInstance
from proto import model_config_pb2 as mc
from scripts import framework_models, models

config = text_format.Parse(
    'name: "trt" optimization { execution_accelerators { gpu_execution_accelerator [ '
    '{ name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } '
    'parameters { key: "max_workspace_size_bytes" value: "1073741824" } } ] } }',
    mc.ModelConfig(),
)
a = np.ones((2, 16), np.float32)
pair = {"INPUT0": a, "INPUT1": a}
with tempfile.TemporaryDirectory() as work:
    path = Path(work) / "model.onnx"
    onnx.save(models.simple(), path)
    try:
        instance = CudaOrtInstance.open("trt_1_0", path, OrtSettings.from_config(config), 0)
    except ModelLoadError as exc:
        print("tensorrt accelerator: load error:", exc)
    else:
        assert instance is not None, "no CUDA session"
        print("tensorrt accelerator: session providers", instance.providers)
        result = asyncio.run(instance.execute([pair]))
        print("tensorrt accelerator: OUTPUT0 ok:", np.allclose(result.responses[0]["OUTPUT0"], 2))
        instance.close()
    framework_models.save_simple_torchscript(Path(work) / "model.pt")
    pt = text_format.Parse(
        'name: "pt" max_batch_size: 8 '
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, '
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, '
        '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]',
        mc.ModelConfig(),
    )
    torch_instance = TorchInstance.load("pt_1_0", Path(work) / "model.pt", pt, Device.cuda(0))
    host = asyncio.run(torch_instance.execute([pair, pair]))
    device = asyncio.run(torch_instance.execute([pair], device_outputs=True))
    print(
        "pytorch KIND_GPU: host outputs ok:",
        all(np.allclose(r["OUTPUT0"], 2) for r in host.responses),
        "device output from:",
        type(device.responses[0]["OUTPUT0"]).__module__,
    )
    torch_instance.close()
EOF

step "GPU tests"
# A failure is reported at the end: the benchmark still runs, a device run is precious.
tests_rc=0
"${VPY}" -m pytest -q -rs -p no:cacheprovider \
    tests/backends/test_device.py tests/backends/test_gpu_placement.py \
    tests/backends/test_gpu_instance.py tests/backends/test_ort_instance.py \
    tests/backends/test_ort_accelerators.py tests/backends/test_torch_instance.py \
    tests/server/test_cuda_shm.py tests/e2e/test_e2e_ensemble.py 2>&1 | tee "${RESULTS}/pytest.log" || tests_rc=$?

step "example models served, GPU metrics"
"${VPY}" scripts/gen_models.py tools/gpu-models --skip-existing >/dev/null
"${VPY}" - "${RESULTS}" <<'EOF'
import sys
import urllib.request
from pathlib import Path

from tests.e2e.e2e_support import ConvoyServer

server = ConvoyServer(Path("tools/gpu-models"), Path(sys.argv[1]) / "server.log").start()
try:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    names = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
             "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption")
    for name in names:
        line = next((l for l in page.splitlines() if l.startswith(name + "{")), None)
        print(f"  {name}: {line or 'MISSING'}")
finally:
    assert server.stop() == 0, server.log()
EOF

if ((BENCH == 0)); then
    step "done (no benchmark), tests exit ${tests_rc}"
    exit "${tests_rc}"
fi
step "benchmark: resnet18 on KIND_GPU"
if ! bash scripts/perf_analyzer.sh --prepare-only >"${RESULTS}/perf_analyzer_prepare.log" 2>&1; then
    tail -3 "${RESULTS}/perf_analyzer_prepare.log"
    echo "perf_analyzer is not ready: carry tools/perf_analyzer/wheel and tools/perf_analyzer/debs"
    exit 1
fi
for instances in 1 2; do
    timeout 240 "${VPY}" scripts/bench.py --models resnet18 --gpu --instances "${instances}" \
        --workers 0 --nvml --concurrency 1,16,64 --window-ms 1000 --out "${RESULTS}/bench_x${instances}.json" \
        >"${RESULTS}/bench_x${instances}.log" 2>&1 || tail -5 "${RESULTS}/bench_x${instances}.log"
done
"${VPY}" - "${RESULTS}" <<'EOF'
import json
import sys
from pathlib import Path

print(f"{'instances':>9} {'batching':>8} {'conc':>4} {'infer/s':>9} {'p99 ms':>8} "
      f"{'avg batch':>9} {'gpu util':>8}")
for instances in (1, 2):
    path = Path(sys.argv[1]) / f"bench_x{instances}.json"
    if not path.exists():
        print(f"{instances:>9} (no result: see bench_x{instances}.log)")
        continue
    for row in json.loads(path.read_text())["rows"]:
        m = row["measured"]
        rate, p99 = (f"{m['infer_per_s']:.1f}", f"{m['p99_ms']:.2f}") if m else ("-", "-")
        batch = f"{row['avg_batch']:.2f}" if row["avg_batch"] is not None else "-"
        busy = row.get("gpu_utilization")
        busy_text = f"{busy:.0%}" if busy is not None else "-"
        print(f"{instances:>9} {row['batching']:>8} {row['concurrency']:>4} {rate:>9} {p99:>8} "
              f"{batch:>9} {busy_text:>8}")
EOF
step "done, tests exit ${tests_rc}"
exit "${tests_rc}"
