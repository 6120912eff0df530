"""What machine a benchmark ran on, printed with every result."""

from __future__ import annotations

import os
import platform
import subprocess


def describe() -> str:
    cpu = platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as info:
            kib = int(next(line.split()[1] for line in info if line.startswith("MemTotal")))
            memory = f", {kib / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration):
        pass
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    redis_version = next((part.split("=")[1] for part in redis if part.startswith("v=")), "?")
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; Redis {redis_version}"
    )


def cpu_ticks() -> tuple[int, int]:
    """(all CPU time, time stolen by the hypervisor) so far, in ticks (/proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy so far (every core; idle, iowait and stolen
    time left out), from /proc/stat; 0 where there is none."""
    try:
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in stat.readline().split()[1:8])
    except (OSError, ValueError):
        return 0.0
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def steal_since(before: tuple[int, int]) -> str:
    """The share of the machine's CPU time the hypervisor took since `before` (cpu_ticks()): on a
    virtual machine it is time no process here ran, and it spreads latency and throughput."""
    total, stolen = (now - then for now, then in zip(cpu_ticks(), before, strict=True))
    return f"CPU time stolen by the hypervisor during the run: {stolen / total:.1%}" if total else ""


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
