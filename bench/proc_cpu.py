"""Where a server's CPU goes, from /proc (Linux): its event-loop thread, its other threads, its child
processes by name (pocketsphinx decoders), and the short-lived children it reaps (espeak-ng), so a
benchmark can say which component a core is spent on without a profiler.

A child that exits during the measurement (a decoder the pool trims) has its whole lifetime's CPU
added to the parent's ``cutime`` at once; :class:`CpuWatch` polls the children twice a second, so
such a child is counted under its own name up to its last sighting, and only what no poll saw
(processes that lived less than a poll, such as espeak-ng) remains as ``reaped children``.
"""

from __future__ import annotations

import os
import threading
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


def _cpu(fields: list[str], children: bool = False) -> float:
    """utime + stime (+ cutime + cstime) in seconds."""
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICK


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (a scan of /proc: not every kernel has ``task/*/children``)."""
    kids: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(entry / "stat")
            if stat is not None and stat[1][1] == str(pid):  # ppid
                kids.append(int(entry.name))
    return kids


def _name(pid: int, comm: str) -> str:
    """``python -c ...`` children are named by what they run (the decoder processes say so)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    if comm.startswith("python") and len(argv) > 2 and argv[1] == b"-c":
        if b"whisper_worker" in argv[2]:
            return "whisper recogniser"
        return "pocketsphinx decoder" if b"offline_stt" in argv[2] else "python -c"
    return comm


def threads(pid: int) -> Counter[str]:
    """CPU seconds so far of ``pid``'s main thread (``event loop``) and other threads (``threads``),
    and of the children it has reaped (``reaped``)."""
    out: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        stat = _stat(task / "stat")
        if stat is not None:
            out["event loop" if task.name == str(pid) else "threads"] += _cpu(stat[1])
    stat = _stat(Path(f"/proc/{pid}/stat"))
    if stat is not None:
        out["reaped"] += (int(stat[1][13]) + int(stat[1][14])) / TICK
    return out


def process_tree(pid: int) -> float:
    """CPU seconds so far of one process with everything under it (threads, children, reaped)."""
    stat = _stat(Path(f"/proc/{pid}/stat"))
    if stat is None:
        return 0.0
    return _cpu(stat[1], children=True) + sum(process_tree(child) for child in _children(pid))


class CpuWatch:
    """Cores used by each component of process ``pid`` between :meth:`start` and :meth:`stop`."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval = pid, interval
        self.seen: dict[int, tuple[str, float, float]] = {}  # child -> (name, cpu at start, cpu last seen)
        self._started = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-watch", daemon=True)

    def _poll(self) -> None:
        for child in _children(self.pid):
            stat = _stat(Path(f"/proc/{child}/stat"))
            if stat is None:
                continue
            cpu = _cpu(stat[1], children=True)
            if child in self.seen:
                name, first, _ = self.seen[child]
                self.seen[child] = (name, first, cpu)
            else:  # alive at the start: count from now; born since: count all of it
                self.seen[child] = (_name(child, stat[0]), cpu if not self._started else 0.0, cpu)

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._poll()

    def start(self) -> None:
        self._poll()  # children alive now: count from their CPU at this moment
        self._started = True
        self.before, self.machine_before = threads(self.pid), machine()
        self._thread.start()

    def stop(self, wall: float) -> tuple[dict[str, float], float]:
        """(cores per component, busy cores of the whole machine) over ``wall`` seconds."""
        self._done.set()
        self._thread.join()
        self._poll()
        after, machine_after = threads(self.pid), machine()
        used: Counter[str] = Counter()
        for key in ("event loop", "threads"):
            used[key] = after[key] - self.before[key]
        live = set(_children(self.pid))
        exited_total = 0.0
        for child, (name, first, last) in self.seen.items():
            used[f"child {name}"] += last - first
            if child not in live:
                exited_total += last  # its whole life is in cutime now
        used["reaped children"] = max(0.0, after["reaped"] - self.before["reaped"] - exited_total)
        cores = {k: round(v / wall, 3) for k, v in sorted(used.items()) if v > 0}
        return cores, round((machine_after[0] - self.machine_before[0]) / wall, 2)


def machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK, sum(fields[:8]) / TICK


def waited(pid: int) -> float:
    """Seconds the threads of ``pid`` and of its live children spent runnable but waiting for a CPU
    (``/proc/<pid>/task/<tid>/schedstat``, second field): the machine's contention as the process
    felt it. A server whose latency grows while this grows is short of cores, not slow code."""
    total = 0
    for proc in (pid, *_children(pid)):
        for task in Path(f"/proc/{proc}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


def python_speed() -> float:
    """Milliseconds this machine takes for a fixed pure-Python loop (best of three), printed beside
    the figures: a run on a slower or busier machine reads higher here, so figures from different
    machines (or the same one on another day) can be told apart from changes in the code."""
    import time

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def cpu_isa() -> str:
    """The widest vector instructions the CPU has (what CTranslate2 picks for Whisper), printed
    beside the figures: an int8 pause decode took ~150 ms with AVX-512 and ~380 ms with AVX2 only
    (2026-11-30 and 2026-12-01 machines), so decode-bound figures differ by machine class."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "older than AVX2"
