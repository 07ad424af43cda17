"""The makespan of a job graph on N GPU nodes: list scheduling in critical-path order with backfill.

The compute plan (``compute_plan``) hands over its priced jobs; this module knows nothing of
rules. Assumptions, printed with every plan: the N nodes are the project's alone and every job
starts the moment its inputs exist and GPUs are free (no queue wait, no failures, no requeue);
jobs without GPUs run on a CPU partition that never makes them wait. Ready jobs are taken
longest path to the end first (the HLFET order: a training, whose export, generation and
scoring follow it, before a lone generation). A job that does not fit holds a reservation at
the earliest time it would, and jobs behind it start only if they end by then: SLURM's EASY
backfill for the first waiting job, which keeps 16-node trainings from being starved by
1-node generations.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One job: its wall seconds, its GPUs, and the tasks it waits for.

    ``nodes`` > 0: that many whole nodes, exclusively (a multi-node training); else ``gpus`` GPUs
    on one node (0: a CPU job, off the GPU nodes).
    """

    id: Hashable
    seconds: float
    gpus: int
    nodes: int
    after: tuple[Hashable, ...] = ()


def _critical_paths(tasks: Sequence[Task]) -> dict[Hashable, float]:
    """Seconds from each task's start to the end of the longest chain behind it (its own included)."""
    by_id = {task.id: task for task in tasks}
    missing = sorted({str(dep) for task in tasks for dep in task.after if dep not in by_id})
    if missing:
        raise ValueError(f"tasks wait for unknown tasks: {', '.join(missing[:3])}")
    successors: dict[Hashable, list[Hashable]] = {task.id: [] for task in tasks}
    for task in tasks:
        for dep in task.after:
            successors[dep].append(task.id)
    rank: dict[Hashable, float] = {}
    # Depth-first post-order without recursion (graphs of thousands of jobs).
    for root in by_id:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in rank:
                continue
            if expanded:
                rank[node] = by_id[node].seconds + max((rank[s] for s in successors[node]), default=0.0)
                continue
            stack.append((node, True))
            stack.extend((s, False) for s in successors[node] if s not in rank)
    return rank


class _Nodes:
    """Free GPUs per node; whole-node jobs take nodes with every GPU free."""

    def __init__(self, count: int, gpus_per_node: int) -> None:
        self.free = [gpus_per_node] * count
        self.gpus_per_node = gpus_per_node

    def place(self, task: Task) -> list[tuple[int, int]] | None:
        """Where ``task`` fits now, as (node, GPUs) pairs, or None."""
        if task.nodes:
            empty = [n for n, free in enumerate(self.free) if free == self.gpus_per_node]
            return (
                [(n, self.gpus_per_node) for n in empty[: task.nodes]] if len(empty) >= task.nodes else None
            )
        fitting = [(free, n) for n, free in enumerate(self.free) if free >= task.gpus]
        return [(min(fitting)[1], task.gpus)] if fitting else None  # best fit: the fullest node it fits

    def take(self, where: list[tuple[int, int]]) -> None:
        for node, gpus in where:
            self.free[node] -= gpus

    def give(self, where: list[tuple[int, int]]) -> None:
        for node, gpus in where:
            self.free[node] += gpus


def makespan(tasks: Sequence[Task], nodes: int, gpus_per_node: int) -> float:
    """Seconds from the first job's start to the last job's end (module docstring: the assumptions)."""
    for task in tasks:
        if task.nodes > nodes or task.gpus > gpus_per_node:
            raise ValueError(
                f"{task.id} needs {task.nodes or 1} node(s) of {task.gpus} GPUs; "
                f"the schedule has {nodes} of {gpus_per_node}"
            )
    rank = _critical_paths(tasks)
    waiting = {task.id: len(set(task.after)) for task in tasks}
    successors: dict[Hashable, list[Task]] = {task.id: [] for task in tasks}
    for task in tasks:
        for dep in set(task.after):
            successors[dep].append(task)
    ready = [task for task in tasks if not waiting[task.id]]
    cluster = _Nodes(nodes, gpus_per_node)
    running: list[tuple[float, int, Task, list[tuple[int, int]]]] = []  # (end, order, task, where)
    now, started, end = 0.0, 0, 0.0
    while ready or running:
        ready.sort(key=lambda task: (-rank[task.id], str(task.id)))
        shadow = None  # the reservation of the first job that does not fit
        for task in list(ready):
            on_gpus = bool(task.gpus or task.nodes)
            where = cluster.place(task) if on_gpus else []
            if where is None:
                if shadow is None:
                    shadow = _earliest_start(task, cluster, running)
                continue
            if on_gpus and shadow is not None and now + task.seconds > shadow:
                continue
            cluster.take(where)
            heapq.heappush(running, (now + task.seconds, started, task, where))
            started += 1
            ready.remove(task)
        if not running:
            raise ValueError("no waiting job can start: the task graph has a cycle")
        now, _, task, where = heapq.heappop(running)
        cluster.give(where)
        end = max(end, now)
        for successor in successors[task.id]:
            waiting[successor.id] -= 1
            if not waiting[successor.id]:
                ready.append(successor)
    return end


def _earliest_start(task: Task, cluster: _Nodes, running: list) -> float:
    """When ``task`` would fit if the running jobs ended as planned and nothing else started.

    It fits once every running job has ended (``makespan`` checked its size), so some end does.
    """
    trial = _Nodes(len(cluster.free), cluster.gpus_per_node)
    trial.free = list(cluster.free)
    for end, _, _, where in sorted(running, key=lambda item: item[:2]):
        trial.give(where)
        if trial.place(task) is not None:
            return end
    raise AssertionError(f"{task.id} fits no node even when every job has ended")
