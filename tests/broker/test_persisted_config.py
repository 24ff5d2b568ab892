"""``DIR/server.properties``: the broker settings kept in a log directory (round trip through
Java properties escaping, atomic 0600 writes, merges and removals, errors that name the file
and the key) and how a starting broker reads them (``main.load_config``)."""

from __future__ import annotations

import doctest
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.broker import persisted_config
from spark_mq.broker.config import LOCAL_DEFAULTS
from spark_mq.broker.main import load_config, parse_args
from spark_mq.broker.persisted_config import (
    PROPERTIES_FILE,
    format_properties,
    load_persisted,
    read_persisted,
    update_persisted,
    write_persisted,
)
from spark_mq.broker.properties_file import parse_properties
from spark_mq.errors import ConfigError

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(st.dictionaries(_text.filter(lambda k: k.strip() == k and k != ""), _text, max_size=8))
def test_any_settings_read_back_exactly(props: dict[str, str]) -> None:
    # Keys with surrounding blanks are trimmed by every reader, so they never reach the file.
    assert parse_properties(format_properties(props)) == props


def test_written_atomically_owner_only_and_removed_when_empty(tmp_path: Path) -> None:
    write_persisted(tmp_path, {"log.retention.ms": "60000", "num.partitions": "3"})
    path = tmp_path / PROPERTIES_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_persisted(tmp_path) == {"log.retention.ms": "60000", "num.partitions": "3"}
    assert [p.name for p in tmp_path.iterdir()] == [PROPERTIES_FILE]  # no temporary left
    write_persisted(tmp_path, {})
    assert not path.exists()
    assert read_persisted(tmp_path) == {}


def test_update_merges_removes_and_never_keeps_the_directory(tmp_path: Path) -> None:
    assert update_persisted(tmp_path, {"num.partitions": "3", "log.dirs": "/x"}, ()) == {
        "num.partitions": "3"
    }
    kept = update_persisted(tmp_path, {"log.retention.ms": "1000"}, ())
    assert kept == {"num.partitions": "3", "log.retention.ms": "1000"}
    assert update_persisted(tmp_path, {}, ["num.partitions"]) == {"log.retention.ms": "1000"}
    assert read_persisted(tmp_path) == {"log.retention.ms": "1000"}


@pytest.mark.parametrize(
    ("add", "delete", "message"),
    [
        ({"log.retention.ms": "soon"}, (), "log.retention.ms must be an integer"),
        ({"log.retention.msx": "1"}, (), "did you mean 'log.retention.ms'"),
        ({}, ["num.partitions"], "num.partitions is not a kept setting"),
        ({"log.retention.ms": "1"}, ["log.retention.ms"], "both set and removed"),
    ],
)
def test_a_refused_update_writes_nothing(tmp_path: Path, add, delete, message) -> None:
    update_persisted(tmp_path, {"log.retention.ms": "5000"}, ())
    before = (tmp_path / PROPERTIES_FILE).read_bytes()
    with pytest.raises(ConfigError, match=message):
        update_persisted(tmp_path, add, delete)
    assert (tmp_path / PROPERTIES_FILE).read_bytes() == before


def test_a_bad_kept_value_names_the_file_the_key_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / PROPERTIES_FILE).write_text("num.partitions=3\nlog.retention.ms=soon\n")
    with pytest.raises(ConfigError) as caught:
        load_persisted(tmp_path)
    text = str(caught.value)
    assert text.startswith(f"{tmp_path / PROPERTIES_FILE}: log.retention.ms must be an integer")
    assert "--delete-config log.retention.ms" in text
    assert caught.value.key == "log.retention.ms"
    # The bad key can be removed (or replaced) with an update; a good one is refused the
    # same way while the bad one stays.
    with pytest.raises(ConfigError, match=str(tmp_path / PROPERTIES_FILE)):
        update_persisted(tmp_path, {"num.partitions": "4"}, ())
    assert update_persisted(tmp_path, {}, ["log.retention.ms"]) == {"num.partitions": "3"}


def test_a_starting_broker_reads_them_below_its_own_flags(tmp_path: Path) -> None:
    update_persisted(tmp_path, {"num.partitions": "3", "log.retention.ms": "7000"}, ())
    local = load_config(parse_args(["--log-dir", str(tmp_path), "--local"]))
    assert local.broker.num_partitions == 3
    assert local.log_defaults.retention_ms == 7000
    assert local.broker.broker_idle_exit_ms == int(LOCAL_DEFAULTS["broker.idle.exit.ms"])
    flagged = load_config(
        parse_args(["--log-dir", str(tmp_path), "--override", "num.partitions=5"])
    )
    assert flagged.broker.num_partitions == 5
    assert flagged.log_defaults.retention_ms == 7000
    # Through a --config file's log.dirs too.
    conf = tmp_path / "b.properties"
    conf.write_text(f"log.dirs={tmp_path}\n")
    assert load_config(parse_args(["--config", str(conf)])).broker.num_partitions == 3


def test_a_starting_broker_refuses_a_bad_kept_value(tmp_path: Path) -> None:
    (tmp_path / PROPERTIES_FILE).write_text("num.partitions=many\n")
    with pytest.raises(ConfigError, match=f"{tmp_path / PROPERTIES_FILE}: num.partitions"):
        load_config(parse_args(["--log-dir", str(tmp_path), "--local"]))


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    (tmp_path / PROPERTIES_FILE).write_bytes(b"num.partitions=\xff\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        read_persisted(tmp_path)
    if os.geteuid() != 0:  # root reads any file
        (tmp_path / PROPERTIES_FILE).chmod(0)
        with pytest.raises(ConfigError, match="cannot read the broker settings file"):
            read_persisted(tmp_path)


def test_the_module_example_runs() -> None:
    assert doctest.testmod(persisted_config).failed == 0
