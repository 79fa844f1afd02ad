"""Where a server's CPU goes, from /proc (Linux): its event-loop thread, its other threads, its live
child processes by name, and the children it has already reaped (short-lived ones such as
espeak-ng), so a benchmark can say which component a core is spent on without a profiler."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: Path) -> tuple[str, list[str]] | None:
    """(comm, fields after comm) of a /proc stat file; None if the task is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    head, _, tail = text.rpartition(")")
    return head.partition("(")[2], tail.split()


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (a scan of /proc: not every kernel has ``task/*/children``)."""
    kids: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(entry / "stat")
            if stat is not None and stat[1][1] == str(pid):  # ppid
                kids.append(int(entry.name))
    return kids


def sample(pid: int) -> Counter[str]:
    """CPU seconds so far of ``pid``'s components: ``event loop`` (the main thread), ``threads``
    (every other thread), ``child <name>`` per live child process (with its own children), and
    ``reaped children``."""
    out: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        stat = _stat(task / "stat")
        if stat is not None:
            seconds = (int(stat[1][11]) + int(stat[1][12])) / TICK  # utime, stime
            out["event loop" if task.name == str(pid) else "threads"] += seconds
    stat = _stat(Path(f"/proc/{pid}/stat"))
    if stat is not None:
        out["reaped children"] += (int(stat[1][13]) + int(stat[1][14])) / TICK  # cutime, cstime
    for child in _children(pid):
        stat = _stat(Path(f"/proc/{child}/stat"))
        if stat is None:
            continue
        name = _name(child, stat[0])
        out[f"child {name}"] += sum(sample_process(child).values())
    return out


def _name(pid: int, comm: str) -> str:
    """``python -c ...`` children are named by what they run (the decoder processes say so)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    if comm.startswith("python") and len(argv) > 2 and argv[1] == b"-c":
        return "pocketsphinx decoder" if b"offline_stt" in argv[2] else "python -c"
    return comm


def sample_process(pid: int) -> Counter[str]:
    """CPU seconds so far of one process with everything under it (threads, children, reaped)."""
    stat = _stat(Path(f"/proc/{pid}/stat"))
    if stat is None:
        return Counter()
    f = stat[1]
    total = Counter({"all": (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK})
    for child in _children(pid):
        total += sample_process(child)
    return total


def machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK, sum(fields[:8]) / TICK


def delta(after: Counter[str], before: Counter[str], wall: float) -> dict[str, float]:
    """Cores used per component between two samples (CPU seconds / wall seconds)."""
    keys = set(after) | set(before)
    return {k: round((after[k] - before[k]) / wall, 3) for k in sorted(keys) if after[k] - before[k] > 0}
