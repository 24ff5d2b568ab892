"""Fixtures for every test.

Tests that give a client ``path=tmp_path / ...`` start the local broker of that directory,
which would otherwise linger until its idle timeout (60 s) after the test. After each test
that used ``tmp_path``, every local broker still serving a directory under it is stopped
(SIGTERM, a clean shutdown), so brokers do not pile up over a suite run.

``small_disk`` is a real small file system for full-disk tests: a 48 MB tmpfs mounted under
the test's tmp dir (mounting needs root, which CI has; elsewhere those tests are skipped
and say why), and ``fill_disk`` to leave only so many bytes free on it.

Two pytest-xdist workers run the suite in CI (scripts/test.sh, ``--dist loadfile``): each
test file goes whole to one worker, so a module's cluster or broker is started once; the
Spark tests (``tests/spark``, ``tests/examples``) go together to one worker
(:func:`pytest_xdist_make_scheduler`), so only one worker runs a Spark application at a
time. Two JVMs with their Python workers on two cores made
Spark miss its fixed 10 s wait for a Python worker to connect back.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.dir_files import ENDPOINT_FILE
from spark_mq.broker.local import stop_broker

log = logging.getLogger(__name__)

TESTS = Path(__file__).resolve().parent
#: Test directories whose tests run Spark applications: one xdist group.
SPARK_DIRS = frozenset({"spark", "examples"})


def _work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or ``spark`` for every Spark test."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "spark" if len(parts) > 2 and parts[1] in SPARK_DIRS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the Spark tests as one unit (the module docstring says why).
    pytest-xdist's own ``loadgroup`` would do it with marks, but it does not see marks
    added by a hook under pytest 9 (it renames test ids), so the scheduler splits here."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesWithSparkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return FilesWithSparkTogether(config, log)


@pytest.fixture(autouse=True)
def _stop_local_brokers(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    tmp = getattr(request.node, "funcargs", {}).get("tmp_path")
    if isinstance(tmp, Path) and tmp.exists():
        _stop_brokers_under(tmp)


def _stop_brokers_under(root: Path) -> None:
    """Stop every local broker serving a directory under ``root``."""
    for endpoint in root.glob(f"**/{ENDPOINT_FILE}"):
        try:
            stop_broker(endpoint.parent, timeout_ms=10_000)
        except Exception as exc:  # a test that already killed it, or a slow shutdown
            log.warning("could not stop the broker of %s: %s", endpoint.parent, exc)


SMALL_DISK_BYTES = 48 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MB tmpfs for full-disk tests (see the module docstring); unmounted afterwards,
    once the local brokers of directories on it are stopped."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for a full disk needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        _stop_brokers_under(mount)
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def fill_disk() -> Callable[[Path, int], Path]:
    """``fill_disk(disk, leave)`` writes a filler file that leaves about ``leave`` bytes
    free on ``disk`` and returns it; delete it to make room again."""

    def fill(disk: Path, leave: int) -> Path:
        stat = os.statvfs(disk)
        free = stat.f_bavail * stat.f_frsize
        filler = disk / "filler"
        with open(filler, "wb") as f:
            f.write(b"\0" * max(free - leave, 0))
        return filler

    return fill
