"""The layers of spark_mq import downward only.

From the bottom: errors, config and the other leaf modules; storage and protocol; broker and
client; datasource and sink; the command line and the root package on top. A module may
import from its own layer or the ones below, never from above, and nothing below the top
imports the root package ``spark_mq`` (whose ``__init__`` loads the clients, storage and
everything they need). Every import counts, including the ones inside functions: a lazy
import still ties the layers together. The imports are read with :mod:`ast`, so the check
sees the source as written, whatever happens to be imported already.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import spark_mq

PACKAGE_DIR = Path(spark_mq.__file__).resolve().parent

#: The layer of each first-level module or package under spark_mq (0 is the bottom).
LAYERS: dict[str, int] = {
    "errors": 0,
    "config": 0,
    "principal": 0,
    # TLS contexts from PEM files (Python's ssl), for listeners and clients alike.
    "tls": 0,
    "scram": 0,
    "version": 0,
    "rate_limited_log": 0,
    "crash_points": 0,
    # Freezing long-lived objects for the garbage collector (broker, Spark workers).
    "gc_freeze": 0,
    "storage": 1,
    "protocol": 1,
    "broker": 2,
    "client": 2,
    "datasource": 3,
    "sink": 3,
    # Local-cluster tooling: runs a ZooKeeper server and broker processes for trying and
    # testing a cluster on one machine (over broker/ and client/; the cli drives it).
    "cluster": 3,
    # Monitoring from outside (the lag exporter): clients of the brokers.
    "monitoring": 3,
    # The web console: pages over the clients and the monitoring samplers.
    "console": 3,
}
#: The top: the command line (``cli`` and ``cli_*``) and the root package itself.
TOP = 4


def layer_of(module: str) -> int:
    """The layer of a dotted module name under spark_mq."""
    parts = module.split(".")
    assert parts[0] == "spark_mq", module
    if len(parts) == 1:
        return TOP
    first = parts[1]
    if first == "cli" or first.startswith("cli_"):
        return TOP
    assert first in LAYERS, (
        f"spark_mq.{first} has no layer: add it to LAYERS in tests/test_import_layers.py"
    )
    return LAYERS[first]


def module_name(path: Path, root: Path = PACKAGE_DIR.parent) -> str:
    """The dotted name of the module at ``path`` under the directory ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    relative = Path(*dotted.split(".")[1:])
    base = PACKAGE_DIR / relative
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(path: Path, root: Path = PACKAGE_DIR.parent) -> Iterator[tuple[str, int]]:
    """Every spark_mq module ``path`` imports, with the line; ``from spark_mq import x``
    counts as an import of ``spark_mq.x`` when x is a module, else of the root."""
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "spark_mq":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            if base.split(".")[0] != "spark_mq":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield (candidate if _is_module(candidate) else base), node.lineno


SOURCES = sorted(PACKAGE_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_imports_go_downward_only(path: Path) -> None:
    this = module_name(path)
    own = layer_of(this)
    upward = [
        f"line {line}: {target} (layer {layer_of(target)})"
        for target, line in imported_modules(path)
        if layer_of(target) > own
    ]
    assert not upward, f"{this} (layer {own}) imports from above: " + "; ".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser resolves the forms an upward import can take (absolute, from the root,
    relative, inside a function)."""
    source = tmp_path / "spark_mq" / "storage" / "example.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import spark_mq.broker.core\n"
        "from spark_mq import client\n"
        "from spark_mq import __version__\n"
        "def f():\n"
        "    from ..sink import task\n"
    )
    found = {target for target, _ in imported_modules(source, tmp_path)}
    assert found == {"spark_mq.broker.core", "spark_mq.client", "spark_mq", "spark_mq.sink.task"}
    assert all(layer_of(target) > LAYERS["storage"] for target in found)
