"""The worker's long-lived objects are frozen, inside a pyspark worker only: at its first
spark_mq task, and again when many long-lived objects arrived after that.

Each check runs in a fresh interpreter: freezing is per process and cannot be undone for
the objects it moved, so it must not touch the pytest process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_outside_a_task_nothing_is_frozen() -> None:
    _run(
        """
        import gc
        from spark_mq.datasource.worker_gc import freeze_long_lived

        assert freeze_long_lived() is False
        assert gc.get_freeze_count() == 0
        """
    )


def test_in_a_worker_the_first_call_freezes_and_later_garbage_is_still_collected() -> None:
    _run(
        """
        import gc
        import weakref
        import __main__
        import types
        from spark_mq.datasource import worker_gc

        # As in a worker forked by `python -m pyspark.daemon`.
        __main__.__spec__ = types.SimpleNamespace(name="pyspark.daemon")
        assert worker_gc.in_pyspark_worker()

        class Node:
            pass

        # Cyclic garbage made before the freeze is collected by it, not frozen.
        before = Node()
        before.me = before
        gone_before = weakref.ref(before)
        del before

        assert worker_gc.freeze_long_lived() is True
        assert gone_before() is None
        frozen = gc.get_freeze_count()
        assert frozen > 10_000, frozen  # the imported modules' objects
        # A full collection now walks only what came later.
        gc.collect()
        assert len(gc.get_objects(generation=2)) < frozen // 10

        assert worker_gc.freeze_long_lived() is False  # nothing new has come to stay
        assert gc.get_freeze_count() == frozen

        # A task's own cyclic garbage, made after the freeze, is still collected.
        after = Node()
        after.me = after
        gone_after = weakref.ref(after)
        del after
        gc.collect()
        assert gone_after() is None
        """
    )


def test_long_lived_objects_arriving_after_the_freeze_are_frozen_at_the_next_call() -> None:
    _run(
        """
        import gc
        import weakref
        import __main__
        import types
        from spark_mq.datasource import worker_gc

        __main__.__spec__ = types.SimpleNamespace(name="pyspark.daemon")

        class Node:
            pass

        assert worker_gc.freeze_long_lived() is True
        frozen = gc.get_freeze_count()

        # A few objects surviving a task (what pyspark's collection leaves): no new freeze.
        few = [Node() for _ in range(100)]
        gc.collect()
        assert worker_gc.freeze_long_lived() is False
        assert gc.get_freeze_count() == frozen

        # As when the first task imported a large module (pyarrow imports pandas): they
        # survive pyspark's collection after the task, and the next task's call freezes them.
        modules_worth = [Node() for _ in range(worker_gc.REFREEZE_MIN_OBJECTS)]
        garbage = Node()
        garbage.me = garbage
        gone = weakref.ref(garbage)
        del garbage
        gc.collect()
        assert worker_gc.freeze_long_lived() is True
        assert gone() is None  # collected, not frozen
        assert gc.get_freeze_count() >= frozen + len(modules_worth) + len(few)
        gc.collect()
        assert len(gc.get_objects(generation=2)) < 1_000
        assert worker_gc.freeze_long_lived() is False
        """
    )
