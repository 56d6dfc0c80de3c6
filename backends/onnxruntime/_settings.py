"""Session settings from a model's config, under the parameter names of Triton's ORT backend, and
the share of the machine's cores each instance's session takes when the config names no thread
count."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnxruntime as ort

from backends.config import bool_parameter, instance_count, int_parameter, string_parameters
from backends.device import usable_cores
from backends.errors import ModelLoadError
from backends.onnxruntime._accelerators import Accelerators
from proto import model_config_pb2 as mc

# Instances a CPU (or KIND_AUTO) group runs when it gives no count: two, as Triton's ORT backend.
DEFAULT_CPU_COUNT = 2
# ONNX Runtime's session config keys, used as they are.
_SPINNING = "session.intra_op.allow_spinning"
_SPIN_US = "session.intra_op.spin_duration_us"
# How long an idle intra-op thread spins before it sleeps when the config says nothing of
# spinning: long enough to bridge the gaps between one run's operators, short enough that a
# pool between runs gives its cores back to a busier model (docs: ONNX Runtime threads).
DEFAULT_SPIN_US = 50
# A session whose threads the config does not name, and whose batch of one runs in at most this
# long with its intra-op pool, runs single-threaded instead (`small_work`): work this small gains
# at most half of it from a second thread, and pays more than that in the pool's wake-ups and
# spin. mlp, 2 cores: 52 us and 130 us of CPU per run with the pool, 41 us and 39 us without it
# (batch 16: 241 us against 83 us, both wall and CPU); served at c = 32, 14% more infer/s at 18%
# less CPU per request (docs: ONNX Runtime threads). resnet18 takes 46 ms and keeps its pool.
SMALL_WORK_US = 200


@dataclass(frozen=True, slots=True)
class OrtSettings:
    """How each instance's session is built; `from_config` is where the thread rule lives.

    Without `intra_op_thread_count` / `inter_op_thread_count`, a model's instances share the
    cores: each session takes max(1, cores // instances) threads, so `count: 2` on 2 cores is one
    thread each rather than ONNX Runtime's 2 x 2. One instance free to run on every CPU of the
    machine takes ONNX Runtime's own intra-op count instead (a thread per physical core, each
    pinned to its core, as under Triton), which served faster than the same count unpinned; a
    narrower CPU affinity keeps the explicit count, as ONNX Runtime counts the machine's cores.
    Idle threads spin for `DEFAULT_SPIN_US`, not ONNX Runtime's unbounded count: a pool
    spinning between runs takes the cores from a busier model beside it, and one that never
    spins wakes its threads for every operator. A pool the config did not ask for is measured
    at load, and dropped for a model whose work is smaller than its wake-ups (`small_work`).
    """

    intra_op_threads: int = 1  # threads inside one operator, >= 0; 0 is ONNX Runtime's choice
    inter_op_threads: int = 1  # threads across operators (parallel execution only), >= 0
    parallel_execution: bool = False  # `execution_mode` 1 runs independent nodes in parallel
    optimize_graph: bool = True  # `optimization { graph { level: -1 } }` turns this off
    allow_spinning: bool = True  # idle intra-op threads spin for work before they sleep
    spin_us: int | None = DEFAULT_SPIN_US  # for this long; None is ONNX Runtime's own spin
    # The config names no intra-op thread count and the share gives a pool: a load measures a
    # batch of one and keeps the pool only for work larger than `SMALL_WORK_US`.
    measure_pool: bool = False
    # `optimization { execution_accelerators { ... } }`: TensorRT, CUDA options, OpenVINO.
    accelerators: Accelerators = field(default_factory=Accelerators)
    # `model_operations { op_library_filename }`: custom operator libraries each session
    # registers, found as ONNX Runtime (dlopen) finds them: a path, or a name on the library path.
    op_libraries: tuple[str, ...] = ()

    @classmethod
    def from_config(
        cls, config: mc.ModelConfig, cores: int | None = None, machine_cpus: int | None = None
    ) -> OrtSettings:
        """The settings of `config`'s sessions; `cores` defaults to `usable_cores()`, and
        `machine_cpus` to the machine's CPUs."""
        params = string_parameters(config)
        instances = instance_count(config, DEFAULT_CPU_COUNT)
        usable = usable_cores() if cores is None else cores
        machine = (os.cpu_count() or usable) if machine_cpus is None else machine_cpus
        share = max(1, usable // instances)
        intra = 0 if instances == 1 and usable == machine else share  # 0: ONNX Runtime's own
        return cls(
            intra_op_threads=int_parameter(config.name, params, "intra_op_thread_count", intra),
            inter_op_threads=int_parameter(config.name, params, "inter_op_thread_count", share),
            parallel_execution=int_parameter(config.name, params, "execution_mode", 0) == 1,
            optimize_graph=config.optimization.graph.level != -1,
            allow_spinning=bool_parameter(config.name, params, _SPINNING, default=True),
            spin_us=(
                int_parameter(config.name, params, _SPIN_US, DEFAULT_SPIN_US)
                if _SPIN_US in params or _SPINNING not in params
                else None  # spinning asked for by name alone: ONNX Runtime's own
            ),
            measure_pool=intra != 1 and "intra_op_thread_count" not in params,
            accelerators=Accelerators.from_config(config),
            op_libraries=tuple(config.model_operations.op_library_filename),
        )

    def session_options(self, single_thread: bool = False) -> ort.SessionOptions:
        """ONNX Runtime's options for these settings; `single_thread`: no intra-op pool."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1 if single_thread else self.intra_op_threads
        options.inter_op_num_threads = self.inter_op_threads
        options.add_session_config_entry(_SPINNING, "1" if self.allow_spinning else "0")
        if self.allow_spinning and self.spin_us is not None:
            options.add_session_config_entry(_SPIN_US, str(self.spin_us))
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL
            if self.parallel_execution
            else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.optimize_graph
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        for library in self.op_libraries:
            try:
                options.register_custom_ops_library(library)
            except Exception as exc:  # ONNX Runtime's own exception types
                raise ModelLoadError(
                    f"custom operations library '{library}' (model_operations "
                    f"op_library_filename) could not be loaded: {exc}"
                ) from exc
        return options


def small_work(fastest_run_us: float) -> bool:
    """Whether a session whose fastest batch of one took `fastest_run_us` with its intra-op pool
    should run without one."""
    return fastest_run_us <= SMALL_WORK_US
