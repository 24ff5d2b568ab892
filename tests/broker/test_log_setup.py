"""JSON log lines."""

from __future__ import annotations

import json
import logging

from spark_mq.broker.log_setup import LOG_FILE, JsonFormatter, setup_logging


def test_json_lines_carry_extras_and_tracebacks():
    record = logging.LogRecord("spark_mq.x", logging.ERROR, __file__, 1, "hello %s", ("you",), None)
    record.topic = "t"
    record.obj = object()
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "hello you" and line["level"] == "ERROR" and line["topic"] == "t"
    assert line["ts"].endswith("Z") and "obj" in line
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exc"]


def test_local_broker_logs_to_a_rotated_file(tmp_path):
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        setup_logging(log_dir=tmp_path)
        logging.getLogger("spark_mq.test").info("to the file")
        for handler in root.handlers:
            handler.flush()
        lines = (tmp_path / LOG_FILE).read_text().splitlines()
        assert json.loads(lines[-1])["msg"] == "to the file"
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
