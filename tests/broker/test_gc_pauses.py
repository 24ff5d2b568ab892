"""The broker freezes its long-lived objects, so a full collection skips them."""

from __future__ import annotations

import gc

from spark_mq.broker import gc_pauses


def test_a_freeze_leaves_the_oldest_generation_empty_and_collections_short() -> None:
    held = [[i] for i in range(20_000)]  # long-lived objects of this process
    try:
        frozen = gc_pauses.freeze_long_lived()
        assert frozen >= len(held)
        assert len(gc.get_objects(generation=2)) < 1_000
        # Nothing new reached the oldest generation: the periodic check does nothing.
        assert gc_pauses.refreeze_if_grown() == 0
        more = [[i] for i in range(gc_pauses.REFREEZE_MIN_OBJECTS + 100)]
        gc.collect()
        assert gc_pauses.refreeze_if_grown() >= len(more)
    finally:
        gc.unfreeze()
