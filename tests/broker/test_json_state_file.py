"""The versioned JSON files a broker keeps in its log directory (broker/json_state_file.py):
written whole, owner-only even over a leftover temporary file, read back as written; a file
that is not the document (not JSON, another version, a section that is not an object, a
value the owner refuses, too large) is refused with the owner's message and left as it is;
and the bytes of the three files that use it (credentials, client quotas, the embedded
token) are the ones written before they shared it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.embedded_token import TOKEN_FILE, EmbeddedToken
from spark_mq.broker.json_state_file import JsonStateFile, with_entry
from spark_mq.broker.quotas.entity import QuotaEntity
from spark_mq.broker.quotas.store import QUOTAS_FILE, FileQuotaBackend
from spark_mq.broker.sasl.credential_store import CREDENTIALS_FILE, FileCredentialBackend
from spark_mq.errors import CorruptCheckpointError
from spark_mq.scram import ScramCredential

MESSAGE = "{path}: not a test file ({reason}); remove it"


def _numbers(section: dict[str, Any]) -> dict[str, int]:
    return {name: int(value) for name, value in section.items()}


def test_a_written_file_reads_back_owner_only(tmp_path: Path) -> None:
    state = JsonStateFile(tmp_path / "state.json", MESSAGE)
    assert state.read(dict) is None  # nothing stored yet
    leftover = tmp_path / "state.json.tmp"
    leftover.write_text("torn")
    leftover.chmod(0o644)
    state.write({"counts": {"b": "2", "a": "1"}})
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "state.json").read_bytes() == (
        b'{"counts": {"a": "1", "b": "2"}, "version": 1}'
    )
    assert state.read_section("counts", _numbers) == {"a": 1, "b": 2}


def test_unsorted_keys_keep_the_order_given(tmp_path: Path) -> None:
    state = JsonStateFile(tmp_path / "s.json", MESSAGE, version=3, sort_keys=False, mode=None)
    state.write({"z": 1, "a": 2})
    assert (tmp_path / "s.json").read_bytes() == b'{"version": 3, "z": 1, "a": 2}'


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not json", "Expecting value"),
        (b"[1]", "version must be 1"),
        (b'{"version": 2, "counts": {}}', "version must be 1"),
        (b'{"version": 1}', "'counts'"),
        (b'{"version": 1, "counts": []}', "counts must be an object"),
        (b'{"version": 1, "counts": {"a": "one"}}', "invalid literal"),
        (b'{"version": 1, "counts": {"a": "1"}, "pad": "' + b"x" * 200 + b'"}', "larger than"),
        (b'{"version": 1, "\x80": 1}', "codec can't decode"),
    ],
)
def test_a_file_that_is_not_the_document_is_refused_and_kept(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    state = JsonStateFile(path, MESSAGE, max_bytes=100)
    with pytest.raises(CorruptCheckpointError, match=reason) as caught:
        state.read_section("counts", _numbers)
    assert str(caught.value).startswith(f"{path}: not a test file (")
    assert str(caught.value).endswith("); remove it")
    assert caught.value.path == str(path)
    assert path.read_bytes() == content


def test_with_entry_sets_or_removes_one_name_on_a_copy() -> None:
    entries = {"a": {"k": "1"}}
    assert with_entry(entries, "b", {"k": "2"}) == {"a": {"k": "1"}, "b": {"k": "2"}}
    assert with_entry(entries, "a", {}) == {}
    assert with_entry(entries, "missing", {}) == entries
    assert entries == {"a": {"k": "1"}}


def test_the_files_that_share_it_keep_their_bytes(tmp_path: Path) -> None:
    quotas = FileQuotaBackend(tmp_path)
    quotas.load()
    quotas.alter_entity(QuotaEntity("alice", None), lambda _now: {"producer_byte_rate": 1024.0})
    assert (tmp_path / QUOTAS_FILE).read_bytes() == (
        b'{"entities": {"users/alice": {"producer_byte_rate": "1024"}}, "version": 1}'
    )
    credentials = FileCredentialBackend(tmp_path)
    credentials.load()
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    credentials.write_user("bob", {"SCRAM-SHA-256": cred})
    assert (tmp_path / CREDENTIALS_FILE).read_bytes() == json.dumps(
        {"users": {"bob": {"SCRAM-SHA-256": cred.to_kafka_string()}}, "version": 1}
    ).encode()
    credentials.write_user("bob", {})
    assert (tmp_path / CREDENTIALS_FILE).read_bytes() == b'{"users": {}, "version": 1}'
    token = EmbeddedToken.issue_or_renew(tmp_path, lifetime_ms=60_000, now_ms=1_000)
    assert (tmp_path / TOKEN_FILE).read_bytes() == json.dumps(
        {
            "version": 1,
            "token_id": token.token_id,
            "hmac": token.hmac,
            "owner": token.owner,
            "expiry_ms": 61_000,
        }
    ).encode()
    assert EmbeddedToken.read(tmp_path) == token
    (tmp_path / TOKEN_FILE).write_text('{"version": 1, "token_id": "", "hmac": "h", "owner": "o"}')
    with pytest.raises(CorruptCheckpointError, match="is not an embedded broker token"):
        EmbeddedToken.read(tmp_path)
