"""The Spark source and sink reading and writing with SCRAM over TLS, under ACLs (issue 33).

One broker process serves the module: a ``SASL_SSL`` listener (SCRAM-SHA-512, a certificate
from a CA made here), an authorizer, and the Unix socket whose peer (the OS user) is the
super user that creates topics, users and ACLs. The SCRAM user ``spark`` gets exactly the
ACLs docs/security.md ("ACLs for a Spark job") lists for a streaming query reading ``in``
with ``group.id`` and writing ``out`` with the exactly-once sink; the query passes its
settings as Spark's Kafka connector users write them (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` in the Java form, ``kafka.ssl.ca.location``).

With those ACLs the output equals the input and the group holds the query's offsets; with
one of the topic or transactional id ACLs removed the query fails with the authorization
error naming its resource, and without the group's the query runs but the group stays
empty (as the doc says): the doc's list is exact. A wrong password fails the query naming
the mechanism and the user, never the password. Each query has its own group, sink id and
checkpoint (a sink id belongs to one query) and its own ACLs, removed after it.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from secured_broker import SecuredBroker
from sink_helpers import create_topic, produce, read_topic
from tls_certs import TestCa

from spark_mq.client.acl_admin import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

pytestmark = pytest.mark.slow

MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "spark", "spark-Secret-9f3b"
MISSING = ["Read topic in", "Read group", "Write topic out", "Write transactional id prefix"]
VALUES = [f"v{i}".encode() for i in range(40)]
TWO_BATCHES = {"maxOffsetsPerTrigger": str(len(VALUES) // 2)}
_runs = itertools.count()


def _allow(rtype: ResourceType, name: str, op: AclOperation, pattern: PatternType) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern),
        AccessControlEntry(f"User:{USER}", "*", op, AclPermissionType.ALLOW),
    )


def doc_acls(group: str, sink_id: str) -> dict[str, tuple[AclBinding, str]]:
    """docs/security.md's "ACLs for a Spark job" for a query with this group and sink id,
    each with the words of the ``spark-mq acls add`` command the authorization error gives
    when it is missing."""
    return {
        "Read topic in": (
            _allow(ResourceType.TOPIC, "in", AclOperation.READ, PatternType.LITERAL),
            "--topic in",
        ),
        "Read group": (
            _allow(ResourceType.GROUP, group, AclOperation.READ, PatternType.LITERAL),
            f"--group {group}",
        ),
        "Write topic out": (
            _allow(ResourceType.TOPIC, "out", AclOperation.WRITE, PatternType.LITERAL),
            "--topic out",
        ),
        "Write transactional id prefix": (
            _allow(
                ResourceType.TRANSACTIONAL_ID, sink_id, AclOperation.WRITE, PatternType.PREFIXED
            ),
            f"--transactional-id {sink_id}",
        ),
    }


def exactly(acl: AclBinding) -> AclBindingFilter:
    p, e = acl.pattern, acl.entry
    return AclBindingFilter(
        p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission_type
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecuredBroker, Path]]:
    """The broker and its CA certificate (the clients' ``ssl.ca.location``)."""
    root = tmp_path_factory.mktemp("spark-secured")
    ca = TestCa.create(root / "ca")
    cert = ca.issue(root, "broker", hosts=("127.0.0.1",))
    served = SecuredBroker.start(
        root,
        "SASL_SSL",
        {
            "sasl.enabled.mechanisms": MECHANISM,
            "ssl.certificate.location": str(cert.cert),
            "ssl.key.location": str(cert.key),
        },
    )
    try:
        served.add_user(USER, PASSWORD, MECHANISM)
        create_topic(served.root, "in", 2)
        create_topic(served.root, "out", 2)
        produce(served.root, "in", VALUES)
        yield served, ca.cert
    finally:
        served.stop()


def security_options(broker: SecuredBroker, ca: Path, password: str) -> dict[str, str]:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{password}";'
    )
    return {
        "kafka.bootstrap.servers": broker.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": MECHANISM,
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.ca.location": str(ca),
    }


def run_query(
    spark: Any,
    broker: SecuredBroker,
    ca: Path,
    tmp_path: Path,
    *,
    password: str = PASSWORD,
    missing: str | None = None,
    source: dict[str, str] | None = None,
) -> tuple[BaseException | None, dict[str, tuple[AclBinding, str]]]:
    """Copies ``in`` to ``out`` with AvailableNow, as a query of its own (its own group,
    sink id and checkpoint: a sink id belongs to one query), with the documented ACLs but
    ``missing``; returns the query's failure, if any, and the ACLs of the run. The ACLs
    are removed afterwards."""
    run = next(_runs)
    group, sink_id = f"spark-etl-{run}", f"spark-out-{run}"
    acls = doc_acls(group, sink_id)
    granted = [acl for name, (acl, _) in acls.items() if name != missing]
    options = security_options(broker, ca, password)
    with broker.admin() as admin:
        admin.create_acls(granted)
    try:
        query = (
            spark.readStream.format("spark_mq")
            .options(**options)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("group.id", group)
            .options(**(source or {}))
            .load()
            .selectExpr("key", "value")
            .writeStream.format("spark_mq")
            .options(**options)
            .option("topic", "out")
            .option("sink.id", sink_id)
            .option("checkpointLocation", str(tmp_path / f"ckpt{run}"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as failure:  # the StreamingQueryException, as a user sees it
            return failure, acls
        finally:
            query.stop()
        return query.exception(), acls
    finally:
        with broker.admin() as admin:
            admin.delete_acls([exactly(acl) for acl in granted])


def test_query_copies_with_exactly_the_documented_acls(
    spark: Any, broker: tuple[SecuredBroker, Path], tmp_path: Path
) -> None:
    """The copy equals the input, and the group holds the query's offsets. Spark commits a
    batch's end to its source when it plans the next batch, so the query reads in two
    batches for one commit to be made."""
    served, ca = broker
    failure, acls = run_query(spark, served, ca, tmp_path, source=TWO_BATCHES)
    assert failure is None
    copied = read_topic(served.root, "out").column("value").to_pylist()
    assert Counter(copied) == Counter(VALUES)
    with served.admin() as admin:
        committed = admin.list_group_offsets(acls["Read group"][0].pattern.name)
    assert sum(o.offset for o in committed.values()) >= len(VALUES) // 2


def test_wrong_password_names_mechanism_and_user_not_the_password(
    spark: Any,
    broker: tuple[SecuredBroker, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    served, ca = broker
    wrong = "Wrong-Password-41c7"
    # The driver's log: this project's loggers at every level here, and the output of the
    # JVM and its Python workers, which write to the stderr the session started with
    # (pytest's global capture, not this test's capfd).
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with caplog.at_level(logging.DEBUG, logger="spark_mq"):
        failure, _ = run_query(spark, served, ca, tmp_path, password=wrong)
    assert failure is not None
    text = str(failure)
    assert "AuthenticationError" in text and MECHANISM in text and f"user '{USER}'" in text, text
    logs = [text, caplog.text, served.log()]
    if capman is not None and capman.is_globally_capturing():
        out, err = capman.read_global_capture()
        sys.stdout.write(out)  # given back, as pytest shows them for a failed test
        sys.stderr.write(err)
        assert "SCRAM-SHA-512 authentication of user 'spark'" in err  # it is the driver log
        logs += [out, err]
    for where in logs:
        assert wrong not in where


@pytest.mark.parametrize("missing", [m for m in MISSING if m != "Read group"])
def test_each_documented_acl_is_needed(
    spark: Any, broker: tuple[SecuredBroker, Path], tmp_path: Path, missing: str
) -> None:
    served, ca = broker
    failure, acls = run_query(spark, served, ca, tmp_path, missing=missing)
    assert failure is not None, f"the query ran without the ACL {missing!r}"
    named = acls[missing][1]
    text = str(failure)
    assert "AuthorizationError" in text and f"User:{USER}" in text, text
    # The command to add names the resource; for a topic the first refusal is of the
    # Describe that Read or Write implies (Metadata), so the operation is not checked there.
    # The first refusal is of the Describe that Read or Write implies (Metadata of a topic,
    # FindCoordinator of a transactional id): the command names the resource (a
    # transactional id of the prefix) and the message says what implies Describe.
    assert named in text, text
    assert "(a consumer needs Read, a producer Write)" in text, text


def test_without_the_group_acl_the_query_runs_but_commits_no_group_offsets(
    spark: Any, broker: tuple[SecuredBroker, Path], tmp_path: Path
) -> None:
    """The group only shows the query's lag (its progress is in the checkpoint): as the doc
    says, without Read on it the query runs and the group stays empty (with it, the first
    test sees the group's offsets)."""
    served, ca = broker
    failure, acls = run_query(spark, served, ca, tmp_path, missing="Read group", source=TWO_BATCHES)
    assert failure is None
    with served.admin() as admin:
        assert admin.list_group_offsets(acls["Read group"][0].pattern.name) == {}
