"""The console's read-only pages: the cluster, topics, one topic, the topic browser,
consumer groups, one group (with its lag chart) and transactions.

Every page reads the cluster when it is asked for (through the shared Admin); only the lag
chart and the throughput figures come from the sampler's history.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, render_template, request

from spark_mq.client.records import EARLIEST, LATEST, TopicPartition
from spark_mq.console.charts import lag_chart, plotly_js
from spark_mq.console.context import context
from spark_mq.console.log_sizes import format_bytes, leader_sizes
from spark_mq.console.record_view import FORMATS, format_time_ms, parse_time_ms, read_page
from spark_mq.errors import GroupIdNotFoundError, UnknownTopicOrPartitionError, UsageError

pages = Blueprint("pages", __name__)

#: Transaction states in which a transaction is open (what an operator may have to abort).
OPEN_TXN_STATES = frozenset({"Ongoing", "Prepared", "PrepareCommit", "PrepareAbort"})
#: The states an abort applies to (``Admin.abort_transaction``).
ABORTABLE_TXN_STATES = frozenset({"Ongoing", "Prepared"})


@pages.route("/static/plotly.min.js")
def plotly_script() -> Response:
    response = Response(plotly_js(), mimetype="text/javascript")
    response.cache_control.max_age = 86400
    response.cache_control.public = True
    return response


@pages.route("/")
def cluster() -> str:
    ctx = context()
    with ctx.admin_client() as admin:
        description = admin.describe_cluster()
    return render_template(
        "cluster.html", cluster=description, status=ctx.sampler.status(), active="cluster"
    )


@pages.route("/topics")
def topics() -> str:
    ctx = context()
    rows: list[dict[str, Any]] = []
    with ctx.admin_client() as admin:
        for name in admin.list_topics():
            try:
                description = admin.describe_topic(name)
            except UnknownTopicOrPartitionError:
                continue  # deleted since it was listed
            tps = [TopicPartition(name, p.partition) for p in description.partitions]
            ends = admin.list_offsets(dict.fromkeys(tps, LATEST)) if tps else {}
            rates = [ctx.sampler.throughput(tp) for tp in tps]
            known = [r for r in rates if r is not None]
            rows.append(
                {
                    "name": name,
                    "partitions": description.partition_count,
                    "replication_factor": description.replication_factor,
                    "under_replicated": sum(p.under_replicated for p in description.partitions),
                    "records": sum(max(e.offset, 0) for e in ends.values()),
                    "throughput": sum(known) if known else None,
                }
            )
    return render_template("topics.html", topics=rows, active="topics")


@pages.route("/topics/<name>")
def topic(name: str) -> str:
    ctx = context()
    with ctx.admin_client() as admin:
        description = admin.describe_topic(name)
        tps = [TopicPartition(name, p.partition) for p in description.partitions]
        starts = admin.list_offsets(dict.fromkeys(tps, EARLIEST)) if tps else {}
        ends = admin.list_offsets(dict.fromkeys(tps, LATEST)) if tps else {}
        sizes = leader_sizes(
            admin, {tp: p.leader for p, tp in zip(description.partitions, tps, strict=True)}
        )
    partitions = [
        {
            "partition": p.partition,
            "leader": p.leader,
            "replicas": p.replicas,
            "isr": p.isr,
            "offline": p.offline_replicas,
            "log_start": starts[tp].offset,
            "log_end": ends[tp].offset,
            "throughput": ctx.sampler.throughput(tp),
            "size": format_bytes(sizes.get(tp)),
        }
        for p, tp in zip(description.partitions, tps, strict=True)
    ]
    return render_template("topic.html", topic=description, partitions=partitions, active="topics")


def _int_arg(name: str, default: int | None, *, minimum: int = 0) -> int | None:
    text = request.args.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise UsageError(f"{name} must be {minimum} or more, got {value}")
    return value


@pages.route("/topics/<name>/browse")
def browse(name: str) -> str:
    ctx = context()
    with ctx.admin_client() as admin:
        count = admin.describe_topic(name).partition_count
    partition = _int_arg("partition", 0)
    assert partition is not None
    if partition >= count:
        raise UnknownTopicOrPartitionError(
            f"topic {name!r} has no partition {partition} (it has {count})", topic=name
        )
    fmt = request.args.get("format", "text")
    if fmt not in FORMATS:
        raise UsageError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    limit = _int_arg("limit", ctx.config.page_records, minimum=1)
    assert limit is not None
    limit = min(limit, ctx.config.max_page_records)
    time_text = request.args.get("time", "").strip()
    page = read_page(
        ctx.open_consumer,
        TopicPartition(name, partition),
        offset=_int_arg("offset", None),
        timestamp_ms=parse_time_ms(time_text) if time_text else None,
        limit=limit,
        fmt=fmt,
    )
    return render_template(
        "browse.html",
        topic=name,
        partition_count=count,
        page=page,
        fmt=fmt,
        formats=FORMATS,
        time_text=time_text,
        active="topics",
    )


@pages.route("/groups")
def groups() -> str:
    ctx = context()
    rows = []
    with ctx.admin_client() as admin:
        for listing in admin.list_groups():
            lag = admin.group_lag(listing.group_id)
            rows.append(
                {
                    "group": listing.group_id,
                    "state": listing.state,
                    "protocol_type": listing.protocol_type,
                    "partitions": len(lag),
                    "total_lag": sum(p.lag or 0 for p in lag.values()),
                }
            )
    return render_template("groups.html", groups=rows, active="groups")


@pages.route("/group")
def group() -> str:
    ctx = context()
    group_id = request.args.get("id", "")
    if not group_id:
        raise UsageError("say which group: /group?id=GROUP")
    with ctx.admin_client() as admin:
        description = admin.describe_group(group_id)
        lag = admin.group_lag(group_id)
    if description.state == "Dead" and not lag:
        raise GroupIdNotFoundError(
            f"group {group_id!r} does not exist (no members, no committed offsets)"
        )
    history = ctx.sampler.lag_history(group_id)
    return render_template(
        "group.html",
        group=description,
        partitions=sorted(lag.items()),
        total_lag=sum(p.lag or 0 for p in lag.values()),
        chart=lag_chart(history) if history else None,
        history=history,
        status=ctx.sampler.status(),
        active="groups",
    )


@pages.route("/transactions")
def transactions() -> str:
    ctx = context()
    with ctx.admin_client() as admin:
        listings = admin.list_transactions()
        open_ids = [t.transactional_id for t in listings if t.state in OPEN_TXN_STATES]
        described = admin.describe_transactions(open_ids) if open_ids else []
    return render_template(
        "transactions.html",
        open_transactions=described,
        others=[t for t in listings if t.state not in OPEN_TXN_STATES],
        abortable=ABORTABLE_TXN_STATES,
        format_time_ms=format_time_ms,
        active="transactions",
    )
