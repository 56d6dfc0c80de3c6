"""`ModelServer`: runs one TritonPythonModel, in a worker process or in the server's own
(`_local.py`): Triton's request objects for each batch, what the model returns and sends checked
and converted, its readiness and finalize. Runs in the worker too, so it imports only its siblings.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ._asker import Asker, Channel
from ._asks import Asks
from ._contract import ContractError, Payload, describe, model_log, response_payload

if TYPE_CHECKING:  # imported when a model needs an event loop: see `_new_event_loop`
    import asyncio


class ModelServer:
    """Runs one TritonPythonModel: builds Triton's request objects, converts its responses.

    `copy_outputs`: answer copies of the model's output arrays (in the server's process, where
    nothing else copies them and the model may reuse its buffers, and where any thread's
    question to the server is answered on the spot); a worker's are copied into shared memory as
    they are sent, and its model asks the server only while execute runs."""

    def __init__(
        self,
        channel: Channel,
        utils: ModuleType,
        model: Any,
        spec: dict[str, Any],
        copy_outputs: bool = False,
        asks: Asks | None = None,
        answer: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
    ) -> None:
        self._channel = channel
        self._copy_outputs = copy_outputs
        self._asker = Asker(channel, utils, answer)
        self._utils = utils
        self._model = model
        self._decoupled: bool = spec["decoupled"]
        self._iterative: bool = spec["iterative"]  # requests may be rescheduled
        self._model_name: str = spec["model_name"]
        self._version: int = spec["version"]
        self._loop: asyncio.AbstractEventLoop | None = None  # for `async def execute` models
        # For `async def is_ready`: its own loop, since it runs beside execute on another thread.
        self._readiness_loop: asyncio.AbstractEventLoop | None = None
        # A worker's is_cancelled() questions' own socket (None in process: they go as calls).
        self._asks = asks
        utils._install_model_caller(self._asker.call_model)

    def serve(self) -> None:
        while True:
            try:
                message = self._channel.receive()
            except EOFError:
                return  # the server went away without unloading: nothing to answer
            if message[0] == "execute":
                self.execute(*message[1:])
            elif message[0] == "finalize":
                self._channel.send(("finalized", self.finalize()))
                return

    def execute(
        self,
        batch: int,
        inputs: list[dict[str, np.ndarray]],
        output_names: list[str],
        parameters: list[dict[str, Any]],  # one per request; [] when no request has any
    ) -> None:
        pb = self._utils
        received = pb.InferenceRequest._received
        tensor = pb.Tensor
        requests = []
        # Per request: its final flag was sent; it was rescheduled and execute returned (its
        # sender is then closed: the next execution's request sends its responses).
        finals, moved_on = [False] * len(inputs), [False] * len(inputs)
        for index, arrays in enumerate(inputs):
            # A sequence batcher passes the correlation id, and the START and END flags where
            # set, under Triton's reserved names.
            own = parameters[index] if parameters else None  # none: no request carries any
            correlation_id, flags = 0, 0
            if own:  # most requests carry none
                own = dict(own)
                correlation_id = own.pop("sequence_id", 0)
                if own.pop("sequence_start", False):
                    flags |= pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
                if own.pop("sequence_end", False):
                    flags |= pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
            requests.append(
                received(
                    [tensor(name, _writable(array)) for name, array in arrays.items()],
                    list(output_names),
                    self._model_name,
                    self._version,
                    correlation_id,
                    flags,
                    json.dumps(own) if own else "{}",
                    functools.partial(self._response_sender, batch, index, finals, moved_on),
                    self._iterative,
                )
            )
        start_ns = time.monotonic_ns()
        self._asker.begin(batch)
        try:
            returned = self._model.execute(requests)
            if inspect.isawaitable(returned):
                returned = self._event_loop().run_until_complete(returned)
        except Exception as exc:
            model_log().error("execute raised\n%s", traceback.format_exc())
            self._channel.send(("failed", batch, f"execute raised {describe(exc)}"))
            return
        finally:
            self._asker.end()
        execute_ns = time.monotonic_ns() - start_ns
        rescheduled = []
        for index, request in enumerate(requests if self._iterative else ()):
            if request.release_flags() & pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                moved_on[index] = True
                if not finals[index]:  # a request that sent its final flag has ended
                    rescheduled.append(index)
        try:
            payloads = self._returned(returned, len(requests), rescheduled)
        except ContractError as exc:
            self._channel.send(("failed", batch, str(exc)))
            return
        self._channel.send(("done", batch, payloads, execute_ns, rescheduled))

    def _returned(self, returned: Any, count: int, rescheduled: list[int]) -> list[Payload] | None:
        if self._decoupled:
            if returned is not None:
                raise ContractError(
                    "the model is decoupled, so execute must return None and send responses "
                    f"with request.get_response_sender(); it returned {type(returned).__name__}"
                )
            return None
        if not isinstance(returned, list | tuple):
            hint = (
                " (a model that sends through request.get_response_sender() must be decoupled: "
                "model_transaction_policy { decoupled: true })"
                if returned is None
                else ""
            )
            raise ContractError(
                "execute must return a list of pb_utils.InferenceResponse, one per request; "
                f"it returned {type(returned).__name__}{hint}"
            )
        if len(returned) != count:
            raise ContractError(
                f"execute must return one InferenceResponse per request: it got {count} "
                f"requests and returned {len(returned)} responses"
            )
        payloads: list[Payload] = []
        moved = set(rescheduled)
        for index, response in enumerate(returned):
            if index not in moved:
                payloads.append(response_payload(self._utils, response, self._copy_outputs))
            elif response is None:
                payloads.append(None)
            else:
                raise ContractError(
                    f"request {index} was rescheduled (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE), "
                    f"so its entry in execute's list must be None, not {type(response).__name__}"
                )
        return payloads

    def _response_sender(
        self, batch: int, index: int, finals: list[bool], moved_on: list[bool]
    ) -> Any:
        """Request `index` of `batch`'s InferenceResponseSender, made when the model asks."""
        return self._utils.InferenceResponseSender(
            self._sender(batch, index, finals, moved_on), self._cancel_check(batch, index)
        )

    def _cancel_check(self, batch: int, index: int) -> Callable[[], bool]:
        """`request.is_cancelled()` of request `index` of `batch`: the server knows."""

        def cancelled() -> bool:
            if not self._decoupled:
                return False  # only a decoupled model's request has a stream its caller can leave
            if self._asks is not None:  # any thread, any time: the question has its own socket
                return self._asks.cancelled(batch, index)
            return bool(self._asker.ask("is_cancelled", batch, None, index)[1][2])

        return cancelled

    def _sender(
        self, batch: int, index: int, finals: list[bool], moved_on: list[bool]
    ) -> Callable[[Any, bool], None]:
        def send(response: Any, final: bool) -> None:
            pb = self._utils
            if not self._decoupled:
                raise pb.TritonModelException(
                    "the response sender is for decoupled models (model_transaction_policy "
                    "{ decoupled: true }); this model must return one InferenceResponse per "
                    "request from execute"
                )
            if moved_on[index]:
                raise pb.TritonModelException(
                    "this request was rescheduled: send its responses through the request that "
                    "a later execute receives for it"
                )
            try:
                payload = (
                    None if response is None else response_payload(pb, response, self._copy_outputs)
                )
            except ContractError as exc:
                raise pb.TritonModelException(str(exc)) from None
            finals[index] |= final
            self._channel.send(("response", batch, index, payload, final))

        return send

    @property
    def checks_readiness(self) -> bool:
        """Whether the model decides its own readiness (defines `is_ready`)."""
        return callable(getattr(self._model, "is_ready", None))

    def ready(self) -> bool:
        """The model's `is_ready()` (sync or async): False when it raises or answers anything
        but a bool, as Triton's python backend takes it. Called by one thread at a time."""
        try:
            answer = self._model.is_ready()
            if inspect.isawaitable(answer):
                if self._readiness_loop is None:
                    self._readiness_loop = _new_event_loop()
                answer = self._readiness_loop.run_until_complete(answer)
        except Exception as exc:
            model_log().error("is_ready raised %s: the model is not ready", describe(exc))
            return False
        if not isinstance(answer, bool):
            model_log().error(
                "is_ready must return a bool, not %s: the model is not ready",
                type(answer).__name__,
            )
            return False
        return answer

    def finalize(self) -> str | None:
        finalize = getattr(self._model, "finalize", None)
        if not callable(finalize):
            return None
        try:
            finalize()
        except Exception as exc:
            model_log().error("finalize raised\n%s", traceback.format_exc())
            return f"finalize raised {describe(exc)}"
        return None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = _new_event_loop()
        return self._loop


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop for an `async def` model method. asyncio is imported here, by the models
    that need it: with the `ssl` module it brings, it would add about 4 MiB to every worker."""
    import asyncio

    return asyncio.new_event_loop()


def _writable(array: np.ndarray) -> np.ndarray:
    """Triton's inputs are the model's to write: a read-only one (a request's bytes, as pickle
    or the server hands them over) becomes a copy."""
    return array if array.flags.writeable else np.array(array)
