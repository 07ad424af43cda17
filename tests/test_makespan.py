"""The list scheduler behind the plan's makespan, against schedules worked out by hand."""

from __future__ import annotations

import pytest

from workflow_scripts.makespan import Task, makespan


def test_a_chain_runs_end_to_end():
    tasks = [Task("a", 10, 1, 0), Task("b", 5, 1, 0, ("a",)), Task("c", 2, 0, 0, ("b",))]
    assert makespan(tasks, nodes=1, gpus_per_node=8) == 17


def test_one_gpu_jobs_pack_onto_a_node_whole_node_jobs_do_not():
    eight = [Task(i, 10, 1, 0) for i in range(8)]
    assert makespan(eight, nodes=1, gpus_per_node=8) == 10  # eight 1-GPU jobs side by side
    nodes = [Task(i, 10, 8, 0) for i in range(2)]
    assert makespan(nodes, nodes=1, gpus_per_node=8) == 20  # two 8-GPU jobs one after the other
    assert makespan(nodes, nodes=2, gpus_per_node=8) == 10


def test_cpu_jobs_never_wait_for_gpus():
    tasks = [Task("gpu", 10, 8, 0), *(Task(i, 7, 0, 0) for i in range(50))]
    assert makespan(tasks, nodes=1, gpus_per_node=8) == 10


def test_the_first_waiting_job_holds_a_reservation():
    """EASY backfill on two nodes, by hand.

    Priorities (longest path to the end): g1 (10 s, then d 60 s) 70, t (5 s on both nodes, then c
    50 s) 55, g3 20, g2 3. At 0 g1 takes node 0; t does not fit and reserves both nodes at 10;
    g2 ends by then and backfills node 1, g3 (20 s) would not and waits. At 10 t starts, at 15 c
    and g3 (to 35); d ends at 70. Without the reservation g3 would take node 1 at 0 and hold t
    back to 20: c would end at 75.
    """
    tasks = [
        Task("g1", 10, 8, 0),
        Task("d", 60, 0, 0, ("g1",)),
        Task("t", 5, 8, 2),
        Task("c", 50, 0, 0, ("t",)),
        Task("g3", 20, 8, 0),
        Task("g2", 3, 8, 0),
    ]
    assert makespan(tasks, nodes=2, gpus_per_node=8) == 70


def test_a_job_larger_than_the_cluster_is_refused():
    with pytest.raises(ValueError, match="needs 16 node"):
        makespan([Task("training", 10, 8, 16)], nodes=8, gpus_per_node=8)
    with pytest.raises(ValueError, match="unknown tasks"):
        makespan([Task("b", 1, 1, 0, ("a",))], nodes=1, gpus_per_node=8)
