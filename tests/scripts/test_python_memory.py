"""scripts/python_memory.py: its model.py in both forms, and the memory of a process tree."""

import os

from scripts import python_memory


def test_both_model_py_forms_compile() -> None:
    for expression in python_memory.WEIGHTS.values():
        source = python_memory.MODEL_PY.format(count=10, weights=expression)
        compile(source, "model.py", "exec")


def test_a_trees_memory_counts_its_own_pages() -> None:
    pss, rss = python_memory.tree_memory(os.getpid())
    assert 0 < pss <= rss
