"""Option names the spark_mq source or sink does not know: refused when they look like a typo
of one it knows, otherwise ignored with a warning.

Spark matches option names without regard to case and hands them over lower-cased, and its
own Kafka source and sink ignore names they do not know (a query's options often serve
several purposes). Ignoring every unknown name silently hides typos, whose cost is a query
that runs with a default the user meant to change (``startingOffset=earliest`` reading from
latest, ``compresion.type=zstd`` writing uncompressed). So a name this close to a known one
(:data:`MISSPELLING_CUTOFF`, difflib's similarity ratio of the lower-cased names) is taken
for a typo and refused with a :class:`~spark_mq.errors.ConfigError` naming the intended
option; any other unknown name is logged as a warning that lists the accepted names.

>>> known = ("startingOffsets", "subscribe")
>>> closest_name("startingoffset", known)
'startingOffsets'
>>> closest_name("queryName", known) is None
True
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from spark_mq.errors import ConfigError

#: Similarity (difflib ratio, 0-1) at or above which an unknown name is a typo of a known one:
#: one or two characters left out, doubled or swapped in names of ten or more characters
#: (``startingOffset``, ``subscibe``, ``minPartition``), while distinct options that share
#: words (``endingTimestamp`` and ``startingTimestamp``, 0.75) stay apart.
MISSPELLING_CUTOFF: Final = 0.85
#: Similarity at or above which a warning suggests a known name.
SUGGESTION_CUTOFF: Final = 0.6


def closest_name(name: str, known: Sequence[str], cutoff: float = MISSPELLING_CUTOFF) -> str | None:
    """The known name (canonical spelling) most like ``name``, ignoring case, or None."""
    lowered = [k.lower() for k in known]
    close = difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=cutoff)
    return known[lowered.index(close[0])] if close else None


def is_known(name: str, known: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``known`` without regard to case."""
    lowered = name.lower()
    return any(k.lower() == lowered for k in known)


def check_unknown_names(
    options: Mapping[str, str],
    known: Sequence[str],
    *,
    component: str,
    prefix: str,
    elsewhere: Mapping[str, str],
    log: logging.Logger,
) -> list[str]:
    """Check every option name that is not in ``known`` and does not start with ``prefix``
    (``kafka.``, checked by the caller): raise ConfigError for a typo of a known name, log a
    warning for the others and return them. ``elsewhere`` maps lower-cased names that belong
    to the other side (a sink option given to the source) to a note for their warning; they
    are never taken for typos."""
    ignored: list[str] = []
    for name in options:
        lowered = name.lower()
        if is_known(name, known) or lowered.startswith(prefix):
            continue
        note = elsewhere.get(lowered)
        if note is None:
            typo = closest_name(name, known)
            if typo is not None:
                raise ConfigError(
                    f"unknown option {name!r} of the {component}; did you mean {typo!r}? "
                    "(option names are matched without regard to case)",
                    key=name,
                    value=options[name],
                )
            suggestion = closest_name(name, known, SUGGESTION_CUTOFF)
            note = f"did you mean {suggestion!r}? " if suggestion else ""
        log.warning(
            "the %s ignores option %r; %sit accepts %s, and kafka.<setting>",
            component,
            name,
            note,
            ", ".join(known),
        )
        ignored.append(name)
    return ignored
