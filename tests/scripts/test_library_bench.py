"""scripts/library_bench.py's reading of perf's report: each library's samples in its row, and
the table of Convoy's and the bare server's CPU per request by library."""

from scripts.library_bench import OTHER, ROWS, samples_by_library, table

REPORT = """\
          6539  [kernel.kallsyms]
            80  [vdso]
           261  _message.abi3.so
          5000  libpython3.11.so.1.0
          2100  cygrpc.cpython-311-x86_64-linux-gnu.so
           600  onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so
            85  _multiarray_umath.cpython-311-x86_64-linux-gnu.so
           300  loop.cpython-311-x86_64-linux-gnu.so
           900  libc.so.6

"""


def test_each_library_counts_in_its_row_and_the_unnamed_in_the_rest() -> None:
    counts = samples_by_library(REPORT.splitlines())
    assert counts["the kernel"] == 6539
    assert counts["the interpreter (libpython)"] == 5000
    assert counts["gRPC's core (cygrpc)"] == 2100
    assert counts["ONNX Runtime"] == 600
    assert counts["protobuf (upb)"] == 261
    assert counts["NumPy"] == 85
    assert counts["uvloop"] == 300
    assert counts["libc"] == 900
    assert counts[OTHER] == 80  # [vdso]
    assert sum(counts.values()) == 15865


def test_the_table_sets_both_sides_beside_each_other_with_the_difference() -> None:
    ours = dict.fromkeys(ROWS, 1.0) | {"the interpreter (libpython)": 30.0}
    bare = dict.fromkeys(ROWS, 1.0) | {"the interpreter (libpython)": 10.0}
    lines = table(("Convoy", "bare"), {1: (None, bare), 32: (ours, bare)})
    assert lines[0] == (
        "| library | Convoy, c = 1 | bare, c = 1 | difference | Convoy, c = 32 | bare, c = 32 "
        "| difference |"
    )
    interpreter = next(line for line in lines if line.startswith("| the interpreter"))
    assert interpreter == "| the interpreter (libpython) | - | - | - | 30.0 | 10.0 | +20.0 |"
    total = lines[-1]
    assert total.startswith("| total | - | - | - |")
    assert total.endswith(f"| {29 + len(ROWS):.1f} | {9 + len(ROWS):.1f} | +20.0 |")
