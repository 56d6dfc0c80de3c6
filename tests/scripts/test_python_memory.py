"""scripts/python_memory.py: its model.py in both forms, and the memory of a process tree."""

import os

from scripts import python_memory


def test_both_model_py_forms_compile() -> None:
    for expression in python_memory.WEIGHTS.values():
        compile(python_memory.model_py(10, expression), "model.py", "exec")


def test_a_trees_memory_counts_its_own_pages() -> None:
    pss, rss = python_memory.tree_memory(os.getpid())
    assert 0 < pss <= rss
