"""A local Ray cluster for the cluster tests: a head and two worker nodes, each its own
raylet with its own worker processes, started on this machine by ``ray.cluster_utils``
(Ray's own multi-node test cluster). The test process never joins it as a driver:
every cluster run is the real ``efold-controller cluster pilot`` in a subprocess."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray.cluster_utils

# The shard kit here, and the pilot tests' kit (journal rows, liveness).
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[object]:
    cluster = ray.cluster_utils.Cluster(initialize_head=True, connect=False,
                                        head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()
