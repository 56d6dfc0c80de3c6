"""scripts/hotpath_stages.py: samples are put in the stage of their innermost named frame, the
framework's when no Convoy frame is below the entry point."""

from scripts import hotpath_stages

# The core's frames below its event loop, as `python -m server serve` runs it.
ENTRY = [
    "<module> (server/__main__.py:43)",
    "_command (server/__main__.py:39)",
    "convoy (server/__main__.py:21)",
    "main (server/cli.py:64)",
    "_run (server/cli.py:89)",
]
LOOP = "Runner.run (asyncio/runners.py:118)"


def test_the_innermost_named_frame_decides() -> None:
    stack = [
        *ENTRY,
        LOOP,
        "Batcher._execute (batching/batcher.py:260)",
        "OrtInstance._run_plain (backends/onnxruntime/_instance.py:160)",
        "Session.run (onnxruntime/capi/onnxruntime_inference_collection.py:383)",
    ]
    assert hotpath_stages.classify(stack) == "compute"
    assert hotpath_stages.classify(stack[:-2]) == "queue, batch and hand-off"


def test_convoy_frames_without_a_stage_are_the_rest_of_the_path() -> None:
    stack = [*ENTRY, LOOP, "Engine._infer (server/core/engine.py:84)", "isEnabledFor (logging)"]
    assert hotpath_stages.classify(stack) == "engine and submit"
    stack = [*ENTRY, LOOP, "LogSettings.apply (server/contract/logs.py:10)"]
    assert hotpath_stages.classify(stack) == hotpath_stages.REST


def test_the_http_front_ends_reads_and_writes_are_its_receive_and_answer() -> None:
    connection = "Connection.answer (server/frontend/http/connection.py:226)"
    write = "Connection._write (server/frontend/http/connection.py:257)"
    assert hotpath_stages.classify([*ENTRY, LOOP, connection, write]) == "encode and answer"
    read = "Connection.on_body (server/frontend/http/connection.py:175)"
    assert hotpath_stages.classify([*ENTRY, LOOP, read]) == "receive and decode"


def test_a_streams_reads_are_its_receive() -> None:
    reader = (
        "InferenceServicer.ModelStreamInfer.<locals>.read (server/frontend/grpc/servicer.py:221)"
    )
    assert hotpath_stages.classify([*ENTRY, LOOP, reader]) == "receive and decode"


def test_the_idle_poll_between_requests_is_a_stage_of_its_own() -> None:
    stack = [*ENTRY, LOOP, "IdlePoll._poll (server/contract/idle_poll.py:60)"]
    assert hotpath_stages.classify(stack) == "idle poll"


def test_the_entry_point_and_the_event_loop_are_the_framework() -> None:
    assert hotpath_stages.classify([*ENTRY, LOOP]) == hotpath_stages.FRAMEWORK
    assert hotpath_stages.classify([*ENTRY, LOOP, "_wait (asyncio/tasks.py:1)"]) == (
        hotpath_stages.FRAMEWORK
    )


def test_a_workers_event_loop_is_the_framework_too() -> None:
    worker = ["_run_module_as_main (<frozen runpy>:198)", "main (server/workers/process.py:47)"]
    assert hotpath_stages.classify([*worker, LOOP]) == hotpath_stages.FRAMEWORK
    codec = "encode_response (server/frontend/grpc/encode.py:20)"
    assert hotpath_stages.classify([*worker, LOOP, codec]) == "encode and answer"
