"""``spark-mq users add|remove|list`` against the session's embedded broker (``--path``): the
credentials land in its log directory, salted, and the password nowhere. The same commands
against a broker's SASL listener, with the users then logging in, are in
tests/broker/test_sasl.py (module broker) and the cluster test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def test_add_list_remove(cli: Any, mq_path: str, tmp_path: Path) -> None:
    password = "cli-Password-91c"
    added = cli("users", "add", "frank", "--path", mq_path, stdin=f"{password}\n".encode())
    assert added.code == 0, added.err
    secret_file = tmp_path / "secret"
    secret_file.write_text(password + "\n")
    one = cli(
        "users", "add", "grace", "--path", mq_path, "--password-file", str(secret_file),
        "--mechanism", "SCRAM-SHA-256", "--iterations", "8192",
    )  # fmt: skip
    assert one.code == 0, one.err

    listed = json.loads(cli("users", "list", "--path", mq_path, "--json").out)["users"]
    assert listed["frank"] == [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
    ]
    assert listed["grace"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    table = cli("users", "list", "--path", mq_path).out
    assert "frank" in table and "SCRAM-SHA-512 (4096)" in table

    stored = (Path(mq_path) / "scram-credentials.json").read_bytes()
    assert b"frank" in stored and b"stored_key=" in stored
    assert password.encode() not in stored

    removed = cli("users", "remove", "frank", "--path", mq_path)
    assert removed.code == 0, removed.err
    assert "frank" not in json.loads(cli("users", "list", "--path", mq_path, "--json").out)["users"]
    missing = cli("users", "remove", "frank", "--path", mq_path)
    assert missing.code != 0 and "frank" in missing.err and "no SCRAM credential" in missing.err


def test_bad_input_is_refused_with_nothing_changed(cli: Any, mq_path: str) -> None:
    empty = cli("users", "add", "henry", "--path", mq_path, stdin=b"\n")
    assert empty.code != 0 and "password is empty" in empty.err
    few = cli(
        "users", "add", "henry", "--path", mq_path, "--password", "x", "--iterations", "100"
    )  # fmt: skip
    assert few.code != 0 and "--iterations" in few.err
    assert "henry" not in json.loads(cli("users", "list", "--path", mq_path, "--json").out)["users"]
