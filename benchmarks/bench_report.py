"""What every benchmark in this folder shares: its command line, the facts of the machine and
of the run, and its section of docs/benchmarks.md.

Not a benchmark itself. Each ``bench_*.py`` builds its parser on :func:`base_parser`
(``--quick``, ``--out``, ``--dir``), opens a :class:`Run` when it starts (the command, the
time, the load average, the machine facts, printed at once), closes it when it is done, and
renders its results through its :class:`Section`: the same heading, command, date, machine and
load lines in every section, then the benchmark's own method and tables. The section is
written between its own markers, so each benchmark rewrites only its part of the file.

Importing this module also makes ``spark_mq`` importable from the repository the script is
in when it is not installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.metadata
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_MIB = 1024 * 1024
try:  # an installed (or PYTHONPATH) spark_mq wins; else the repository this script is in
    import spark_mq  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))


# ---------------------------------------------------------------------------------------------
# The command line


def base_parser(
    doc: str | None, *, quick_help: str | None, dir_help: str = "bench"
) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--out`` and ``--dir``, and ``--quick`` (a smoke
    run) where it has ``quick_help``; the description is the first paragraph of the script's
    docstring ``doc``."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    if quick_help is not None:
        p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--out", type=Path, help="write the results section into this Markdown file")
    p.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help=f"parent of the temporary {dir_help} directory (default: %(default)s)",
    )
    return p


def command_line() -> str:
    """The command that runs this benchmark again, from the current directory."""
    exe = Path(sys.executable)
    try:
        exe_s = str(exe.relative_to(Path.cwd()))
    except ValueError:
        exe_s = str(exe)
    script = Path(sys.argv[0])
    try:
        script_s = str(script.resolve().relative_to(Path.cwd()))
    except ValueError:
        script_s = str(script)
    return shlex.join([exe_s, script_s, *sys.argv[1:]])


# ---------------------------------------------------------------------------------------------
# Machine facts


def filesystem_of(path: Path) -> str:
    """``ext4 (/dev/vda mounted on /)`` for the mount holding ``path``."""
    real = os.path.realpath(path)
    best = ("?", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[1]):
                    best = (dev, mnt, fstype)
    except OSError:
        pass
    return f"{best[2]} ({best[0]} mounted on {best[1]})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def common_facts(packages: tuple[str, ...]) -> list[tuple[str, str]]:
    """The machine facts every benchmark reports: CPUs, memory, kernel, Python, packages."""
    return [
        ("nproc", str(len(os.sched_getaffinity(0)))),
        ("CPU", cpu_model()),
        ("RAM", mem_total()),
        ("kernel", platform.release()),
        ("Python", platform.python_version()),
        ("packages", ", ".join(f"{d} {version(d)}" for d in packages)),
    ]


def bench_directory_fact(work: Path) -> tuple[str, str]:
    """Where the benchmark's files were, and whether that is the repository's file system."""
    same_fs = os.stat(work).st_dev == os.stat(REPO).st_dev
    return (
        "bench directory",
        f"{work} (deleted at the end) on {filesystem_of(work)}; "
        f"{'same' if same_fs else 'NOT the same'} file system as the repository",
    )


def sources_digest() -> str:
    """Digest of the storage engine's sources, to tie the figures to the code they measured."""
    import spark_mq.storage

    storage_dir = Path(spark_mq.storage.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(storage_dir.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    where = "" if storage_dir == REPO / "spark_mq" / "storage" else f" (of {storage_dir})"
    return h.hexdigest()[:12] + where


def busy_cpu_seconds() -> float:
    """CPU seconds every process of the machine has used so far (all cores, idle and I/O
    wait excluded), from /proc/stat; the difference over a run is what the run kept busy."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def new_page_cache_write(
    directory: Path, total_bytes: int = 400 * _MIB
) -> tuple[float, float, float]:
    """Write ``total_bytes`` to a new file in ``directory`` in 1 MiB writes (no fsync), write
    the same range of it again, and delete it; returns (MB/s of new pages, CPU seconds of this
    process per GB of new pages, MB/s rewriting pages already cached).

    Appending new data to a log makes the kernel find a new page-cache page for every 4 KiB.
    On a virtual machine whose free memory goes back to the host (virtio-balloon free page
    reporting), that costs far more than the copy itself, and every log writer pays it: it
    bounds any produce figure measured here. The benchmarks report it next to their goals.
    """
    block = os.urandom(_MIB)
    path = directory / f"page-cache-probe-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, block)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        t1 = time.perf_counter()
        for position in range(0, written, _MIB):
            os.pwrite(fd, block, position)
        rewrite = time.perf_counter() - t1
    finally:
        os.close(fd)
        path.unlink()
    return written / elapsed / 1e6, cpu / (written / 1e9), written / rewrite / 1e6


# ---------------------------------------------------------------------------------------------
# Tables


class TimedRow:
    """What a result row derives from ``samples``, the seconds of each timed run of it: the
    median (``seconds``) and how noisy the runs were (``spread``). The row, a dataclass,
    declares ``samples`` itself and inherits these two."""

    samples: list[float]

    @property
    def seconds(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median of the runs: how noisy the row is."""
        return (max(self.samples) - min(self.samples)) / self.seconds


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def text_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], numeric_from: int) -> str:
    """A plain-text table for the console: columns from ``numeric_from`` on are numbers,
    aligned right."""
    cells = [headers, *rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    out = []
    for n, c in enumerate(cells):
        parts = [
            c[i].rjust(widths[i]) if i >= numeric_from else c[i].ljust(widths[i])
            for i in range(len(c))
        ]
        out.append("  ".join(parts))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def markdown_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], numeric_from: int) -> str:
    """The same table in Markdown, number columns aligned right."""
    out = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if i >= numeric_from else "---" for i in range(len(headers))) + "|",
    ]
    out.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(out)


def goals_block(goals: list[str], heading: str = "Goals") -> list[str]:
    """The PASS/MISS lines of a run under their heading, as printed."""
    return [f"### {heading}", "", "```", *goals, "```"]


# ---------------------------------------------------------------------------------------------
# One run and its section of docs/benchmarks.md


@dataclasses.dataclass
class Run:
    """The facts of one run of a benchmark, from :meth:`start` to :meth:`finish`."""

    command: str
    started: datetime.datetime
    t_start: float
    load_start: str
    facts: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    elapsed: float = 0.0
    load_end: str = ""

    @classmethod
    def start(cls, facts: list[tuple[str, str]] | None = None, *, show: bool = True) -> Run:
        """Note the command, the time and the load now; print them and ``facts`` unless
        ``show`` is False (a benchmark that prints its facts at the end)."""
        run = cls(
            command=command_line(),
            started=datetime.datetime.now(datetime.UTC).astimezone(),
            t_start=time.perf_counter(),
            load_start=loadavg(),
            facts=list(facts or []),
        )
        if show:
            print(f"command: {run.command}")
            for k, v in run.facts:
                print(f"{k}: {v}")
            print(f"load average at start: {run.load_start}", flush=True)
        return run

    def finish(self) -> None:
        """Note how long the run took and the load at its end."""
        self.elapsed = time.perf_counter() - self.t_start
        self.load_end = loadavg()

    def end_line(self) -> str:
        return f"\nload average at end: {self.load_end}; total {self.elapsed:.0f} s"

    def loaded_note(self) -> list[str]:
        """A warning line when the 1-minute load average at the start or end of the run was
        above the core count (other work shared the machine: absolute rates then say little,
        ratios between cases run in turn in the same run still do); none otherwise."""
        cores = os.cpu_count() or 1
        loads = [
            float(load.split()[0])
            for load in (self.load_start, self.load_end)
            if load and load[0].isdigit()
        ]
        if not any(load > cores for load in loads):
            return []
        return [
            f"**Figures from a loaded machine**: the load average was {max(loads):.1f} on "
            f"{cores} cores during this run (other work shared the machine), so the rates "
            "are low and noisy; the ratios between cases, run in turn in the same run, are "
            "the figures to read, and even they favour a case that runs more processes (a "
            "cluster's three brokers), which get a larger share of a contended CPU.",
            "",
        ]


def section_header(
    title: str,
    *,
    command: str,
    started: datetime.datetime,
    elapsed: float,
    facts: list[tuple[str, str]],
    load: tuple[str, str] | None = None,
    note: str = "",
) -> list[str]:
    """The opening lines every benchmark's section of docs/benchmarks.md shares: title,
    command, date, machine facts, load; they end where the section's method list begins."""
    lines = [
        f"## {title}",
        "",
        f"Command (from the repository root): `{command}`{note}",
        "",
        f"Date: {started.strftime('%Y-%m-%d %H:%M %Z')}; the run took {elapsed:.0f} s.",
        "",
        "Machine:",
        "",
        *(f"- {k}: {v}" for k, v in facts),
    ]
    if load is not None:
        lines.append(f"- load average (1/5/15 min) at start: {load[0]}; at end: {load[1]}")
    return [*lines, "", "Method:", ""]


def write_section(path: Path, section: str, *, begin_marker: str, end_marker: str) -> None:
    """Replace one benchmark's section of ``path`` (between its markers), keeping the rest."""
    text = path.read_text() if path.exists() else ""
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin >= 0 and end > begin:
        after = text[end + len(end_marker) :]
        text = text[:begin] + section.rstrip("\n") + after
    elif text:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        text = (
            "# Benchmarks\n\n"
            "Each component's benchmark writes its own section between its own markers; the "
            "rest of this file is kept as is.\n\n" + section
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@dataclasses.dataclass(frozen=True)
class Section:
    """One benchmark's section of docs/benchmarks.md: its markers, heading and name."""

    name: str
    title: str
    begin: str
    end: str

    def render(
        self, run: Run, *, method: list[str], body: list[str], note: str = "", load: bool = True
    ) -> str:
        """The section: the shared header (``note`` after the command, e.g. that it was a
        quick run), the ``method`` lines, then ``body``."""
        out = [
            self.begin,
            *section_header(
                self.title,
                command=run.command,
                started=run.started,
                elapsed=run.elapsed,
                facts=run.facts,
                load=(run.load_start, run.load_end) if load else None,
                note=note,
            ),
            *method,
            "",
            *body,
            "",
            self.end,
        ]
        return "\n".join(out) + "\n"

    def write(self, path: Path, section: str) -> None:
        """Write ``section`` between this section's markers in ``path`` and say so."""
        write_section(path, section, begin_marker=self.begin, end_marker=self.end)
        print(f"wrote the {self.name} section of {path}")
