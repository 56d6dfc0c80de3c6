"""`PythonSettings`: where a python model runs and how long its worker may take, from the model's
parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from backends.config import bool_parameter
from backends.errors import ModelLoadError
from backends.python._environment import ExecutionEnvironment, execution_environment
from proto import model_config_pb2

EXECUTE_TIMEOUT_PARAMETER = "convoy_execute_timeout_s"
INITIALIZE_TIMEOUT_PARAMETER = "convoy_initialize_timeout_s"
IN_PROCESS_PARAMETER = "convoy_in_process"
INLINE_EXECUTE_PARAMETER = "convoy_inline_execute"
EXECUTION_ENV_PARAMETER = "EXECUTION_ENV_PATH"  # Triton's: the model's own Python environment


@dataclass(frozen=True, slots=True)
class PythonSettings:
    """Deadlines past which the worker process is killed (both > 0 and finite), and whether the
    model runs in the server's own process instead of one of its own."""

    # One execute (a decoupled one until every request's final flag); finalize() has it too.
    # Past it the worker is killed and started again.
    execute_timeout_s: float = 60.0
    # Starting the worker process, importing model.py and initialize(); loading weights is slow.
    initialize_timeout_s: float = 300.0
    # model.py in the server's process, on the instance's thread: no IPC, and no isolation.
    in_process: bool = False
    # In process: a batch whose execute measured fast runs on the event loop instead of the
    # instance's thread (backends.inline's rule); execute must not call the server then.
    inline_execute: bool = False
    # EXECUTION_ENV_PATH as written ($$TRITON_MODEL_DIRECTORY unresolved); "": the server's.
    execution_env: str = ""
    # Its environment, found, unpacked and checked (`resolved`); None: not yet, or none named.
    environment: ExecutionEnvironment | None = None
    # A Python-based backend's model.py, which runs the model in place of the version's own
    # (Triton's `<backend-directory>/<backend>/model.py`); "": the version's own file.
    backend_file: str = ""

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> PythonSettings:
        params = {key: value.string_value for key, value in config.parameters.items()}
        defaults = cls()
        in_process = bool_parameter(config.name, params, IN_PROCESS_PARAMETER)
        if params.get(EXECUTION_ENV_PARAMETER, "").strip() and in_process:
            raise ModelLoadError(
                f"model '{config.name}': {EXECUTION_ENV_PARAMETER} names an interpreter of its "
                f"own, which a model in the server's process ({IN_PROCESS_PARAMETER}) cannot use"
            )
        inline_execute = bool_parameter(config.name, params, INLINE_EXECUTE_PARAMETER)
        if inline_execute and not in_process:
            raise ModelLoadError(
                f"model '{config.name}': {INLINE_EXECUTE_PARAMETER} runs execute on the "
                f"server's event loop, which only a model in the server's process can do (set "
                f"{IN_PROCESS_PARAMETER} too)"
            )
        if inline_execute and config.model_transaction_policy.decoupled:
            raise ModelLoadError(
                f"model '{config.name}': {INLINE_EXECUTE_PARAMETER} is for models that answer "
                "each request once; a decoupled model's execute runs on a thread of its own"
            )
        return cls(
            execute_timeout_s=_seconds(
                config.name, params, EXECUTE_TIMEOUT_PARAMETER, defaults.execute_timeout_s
            ),
            initialize_timeout_s=_seconds(
                config.name, params, INITIALIZE_TIMEOUT_PARAMETER, defaults.initialize_timeout_s
            ),
            in_process=in_process,
            inline_execute=inline_execute,
            execution_env=params.get(EXECUTION_ENV_PARAMETER, "").strip(),
        )

    def resolved(self, model: str, model_dir: Path) -> PythonSettings:
        """These settings with EXECUTION_ENV_PATH's environment found, unpacked and checked
        (ModelLoadError when it cannot serve); blocking. Once per version: its instances and
        its auto-complete share it."""
        if not self.execution_env or self.environment is not None:
            return self
        environment = execution_environment(model, model_dir, self.execution_env)
        return replace(self, environment=environment)


def _seconds(model: str, params: dict[str, str], key: str, default: float) -> float:
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ModelLoadError(
            f"model '{model}': parameter '{key}' must be a number of seconds, got '{raw}'"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise ModelLoadError(
            f"model '{model}': parameter '{key}' must be a finite number of seconds > 0, "
            f"got '{raw}'"
        )
    return value
