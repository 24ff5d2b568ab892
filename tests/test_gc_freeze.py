"""A process freezes its long-lived objects, so a full collection skips them."""

from __future__ import annotations

import gc

from spark_mq import gc_freeze


def test_a_freeze_leaves_the_oldest_generation_empty_and_collections_short() -> None:
    held = [[i] for i in range(20_000)]  # long-lived objects of this process
    try:
        frozen = gc_freeze.freeze_long_lived()
        assert frozen >= len(held)
        assert len(gc.get_objects(generation=2)) < 1_000
        # Nothing new reached the oldest generation: the periodic check does nothing.
        assert gc_freeze.refreeze_if_grown() is False
        more = [[i] for i in range(gc_freeze.REFREEZE_MIN_OBJECTS + 100)]
        gc.collect()
        assert len(gc.get_objects(generation=2)) >= len(more)
        assert gc_freeze.refreeze_if_grown() is True
        assert len(gc.get_objects(generation=2)) < 1_000
    finally:
        gc.unfreeze()
