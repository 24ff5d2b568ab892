"""Hypothesis strategies and checkers shared by the assignor tests.

A drawn :class:`Group` is a cluster (topic -> partition count), the members' subscriptions and,
for the sticky assignors, who owned each partition before the rebalance: a present member, a
member that has left (``gone-*``), or nobody. ``check_*`` functions state the properties every
assignor keeps; they return nothing and fail with a message that names the partition or the
members involved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from spark_mq.client.assignors import Assignment, Subscription
from spark_mq.client.records import TopicPartition

#: Every property test here: deterministic (no example database, a derandomized seed) and
#: small enough that the whole directory runs in a few seconds.
FAST = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: For the input-order tests, whose draws (permutations of everything) are the costly part.
ORDERS = settings(FAST, max_examples=40)

TOPICS = ("a", "b", "c", "d", "e")
#: A topic members may subscribe to that the cluster does not have.
MISSING = "missing"
GONE = ("gone-1", "gone-2")
member_ids = st.text(alphabet="mnopq0123", min_size=1, max_size=4)


@dataclass(frozen=True)
class Group:
    cluster: dict[str, int]
    subscriptions: dict[str, Subscription]
    #: The owner of each partition before this rebalance (present, departed, or absent).
    previous: dict[TopicPartition, str]
    generation: int = 1

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, n in sorted(self.cluster.items()) for p in range(n)]


@st.composite
def groups(
    draw: st.DrawFn,
    *,
    equal: bool = False,
    history: bool = True,
    max_members: int = 7,
    max_partitions: int = 12,
) -> Group:
    """A group; ``equal``: every member subscribes to the same topics. With ``history`` each
    member reports the partitions it owned, all from generation 1, without conflicts."""
    names = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    cluster = {t: draw(st.integers(0, max_partitions)) for t in names}
    ids = draw(st.lists(member_ids, min_size=1, max_size=max_members, unique=True))
    choices = st.sampled_from((*names, MISSING))
    topic_subsets = st.lists(choices, unique=True)
    shared = draw(st.lists(choices, unique=True, min_size=1))
    topics = {m: shared if equal else draw(topic_subsets) for m in ids}
    static = {m: draw(st.none() | st.sampled_from(("s1", "s2", "s3", m))) for m in ids}
    if len({s for s in static.values() if s is not None}) < sum(
        s is not None for s in static.values()
    ):
        static = dict.fromkeys(ids)  # group.instance.id is unique within a group.
    previous: dict[TopicPartition, str] = {}
    if history:
        owners = st.sampled_from((*ids, *GONE, None))
        # Most of the time one member owns three partitions in four, so that the rebalance
        # has to shed some, as after a member joins.
        skewed = draw(st.integers(0, 3)) > 0
        for topic in sorted(cluster):
            for partition in range(cluster[topic]):
                owner = ids[0] if skewed and draw(st.integers(0, 3)) > 0 else draw(owners)
                if owner is not None:
                    previous[TopicPartition(topic, partition)] = owner
    subscriptions = {
        m: Subscription(
            topics[m],
            [tp for tp, owner in sorted(previous.items()) if owner == m],
            1 if history else -1,
            static[m],
        )
        for m in ids
    }
    return Group(cluster, subscriptions, previous)


@st.composite
def conflicting_groups(draw: st.DrawFn) -> Group:
    """Members claim overlapping partitions from various generations, some stale."""
    base = draw(groups(history=False))
    partitions = [*base.all_partitions(), TopicPartition(MISSING, 0), TopicPartition("a", 99)]
    subscriptions = {
        m: Subscription(
            sub.topics,
            draw(st.lists(st.sampled_from(partitions), max_size=8)),
            draw(st.sampled_from((-1, 1, 2, 3))),
            sub.group_instance_id,
        )
        for m, sub in base.subscriptions.items()
    }
    return Group(base.cluster, subscriptions, {})


def subscribed_topics(group: Group, member: str) -> set[str]:
    return set(group.subscriptions[member].topics) & set(group.cluster)


def owners(result: Mapping[str, Assignment]) -> dict[TopicPartition, str]:
    found: dict[TopicPartition, str] = {}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp not in found, f"{tp} assigned to both {found[tp]} and {member}"
            found[tp] = member
    return found


def check_valid(group: Group, result: Mapping[str, Assignment], *, complete: bool = True) -> None:
    """Every member has an entry; every partition goes to at most one subscriber of its topic;
    with ``complete`` every partition of a subscribed topic is assigned."""
    assert set(result) == set(group.subscriptions)
    assigned = owners(result)
    for member, assignment in result.items():
        assert list(assignment.partitions) == sorted(assignment.partitions), member
        for tp in assignment.partitions:
            assert tp.topic in subscribed_topics(group, member), (member, tp)
            assert 0 <= tp.partition < group.cluster[tp.topic], tp
    if complete:
        wanted = {
            tp
            for tp in group.all_partitions()
            if any(tp.topic in subscribed_topics(group, m) for m in group.subscriptions)
        }
        assert set(assigned) == wanted, f"unassigned: {sorted(wanted - set(assigned))}"


def check_balanced(group: Group, result: Mapping[str, Assignment]) -> None:
    """Kafka's definition: no partition could go to a subscriber holding two or more fewer.

    For members with identical subscriptions this means counts within one.
    """
    counts = {m: len(a.partitions) for m, a in result.items()}
    for giver, assignment in result.items():
        for receiver in result:
            if counts[receiver] > counts[giver] - 2:
                continue
            movable = [
                tp for tp in assignment.partitions if tp.topic in subscribed_topics(group, receiver)
            ]
            assert not movable, (
                f"{giver} holds {counts[giver]}, {receiver} {counts[receiver]}, and "
                f"{receiver} could take {movable[0]}"
            )


def valid_previous(group: Group) -> dict[TopicPartition, str]:
    """The previous ownership an assignor may honour: present owner, still subscribed."""
    return {
        tp: m
        for tp, m in group.previous.items()
        if m in group.subscriptions and tp.topic in subscribed_topics(group, m)
    }


def moves(group: Group, result: Mapping[str, Assignment]) -> list[TopicPartition]:
    """Partitions whose honourable previous owner does not keep them."""
    now = owners(result)
    return sorted(tp for tp, m in valid_previous(group).items() if now.get(tp) != m)


def minimal_moves(group: Group) -> int:
    """The fewest moves any balanced assignment needs, when subscriptions are identical.

    With ``n`` partitions and ``c`` members every member ends with ``n // c`` or one more,
    and exactly ``n % c`` members get one more. A member keeps at most its quota of what it
    owns; the larger quotas are worth most to members that own more than ``n // c``.
    """
    members = list(group.subscriptions)
    topics = subscribed_topics(group, members[0])
    total = sum(group.cluster[t] for t in topics)
    floor, extra = divmod(total, len(members))
    owned = {m: 0 for m in members}
    for m in valid_previous(group).values():
        owned[m] += 1
    over = sum(1 for o in owned.values() if o > floor)
    kept = sum(min(o, floor) for o in owned.values()) + min(extra, over)
    return sum(owned.values()) - kept


def rejoin(result: Mapping[str, Assignment], group: Group) -> Group:
    """The next round: every member reports what it now owns, one generation later."""
    generation = group.generation + 1
    subscriptions = {
        m: Subscription(sub.topics, result[m].partitions, generation, sub.group_instance_id)
        for m, sub in group.subscriptions.items()
    }
    previous = {tp: m for m, a in result.items() for tp in a.partitions}
    return Group(group.cluster, subscriptions, previous, generation)


def shuffled(group: Group, rnd: st.DataObject) -> tuple[dict[str, int], dict[str, Subscription]]:
    """The same group with every mapping and list in another order."""
    cluster_keys = rnd.draw(st.permutations(list(group.cluster)))
    member_keys = rnd.draw(st.permutations(list(group.subscriptions)))
    subscriptions = {}
    for m in member_keys:
        sub = group.subscriptions[m]
        subscriptions[m] = Subscription(
            rnd.draw(st.permutations(sub.topics)),
            rnd.draw(st.permutations(sub.owned_partitions)),
            sub.generation,
            sub.group_instance_id,
            sub.user_data,
        )
    return {t: group.cluster[t] for t in cluster_keys}, subscriptions
