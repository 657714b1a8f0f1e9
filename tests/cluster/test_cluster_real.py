"""A real-route campaign on a local two-node Ray cluster, against a scripted loopback
provider (``tests/kit/loopback_chat.py``: the real HTTP seam, offline).

The operator registers, smokes (on one machine, with the credential) and authorizes the
cluster run's directory; ``cluster pilot --real`` consumes that authorization once, and
each shard consumes its own on its node, reading the credential from *its node's*
environment: the raylets are started with a canary credential, the cluster controller
is not (nor is the process that runs the tests). The canary must reach the provider on
every request and appear nowhere in Ray's session directory (logs, spilled objects) nor
in any run directory. Shards land on different nodes with different ``--node-runs``
directories; a node without the credential refuses its shard, naming the variable.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray.cluster_utils
from efold_cluster_kit import manifest, shard_money
from loopback_chat import CATALOG, Server, serve_chat
from ordinary_user import REAL_RUN_FLAGS

CANARY_ENV = "EFOLD_TEST_CLUSTER_KEY"
CANARY = "sk-canary-" + secrets.token_hex(16)
EFOLD = str(Path(sys.executable).with_name("efold-controller"))
PROFILE = """provider = "local"
model = "tiny"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
"""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with serve_chat() as state:
        state.required_key = CANARY
        yield state


@pytest.fixture(scope="module")
def keyed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A head and one worker node whose raylets hold the credential, and a node
    (resource ``keyless``) whose raylet does not. Started without ``CI`` in their
    environment (where CI is set a real route takes no credential at all)."""
    saved = os.environ.pop("CI", None)
    keyed = {CANARY_ENV: CANARY}
    try:
        cluster = ray.cluster_utils.Cluster(
            initialize_head=True, connect=False,
            head_node_args={"num_cpus": 1, "env_vars": keyed, "resources": {"keyed": 1}})
        cluster.add_node(num_cpus=1, env_vars=keyed, resources={"keyed": 1})
        # The node that offers ``keyless`` (its id kept for the placement check).
        cluster.keyless_id = cluster.add_node(num_cpus=1, resources={"keyless": 1}).node_id
        cluster.wait_for_nodes()
    finally:
        if saved is not None:
            os.environ["CI"] = saved
    try:
        yield cluster
    finally:
        cluster.shutdown()


class Operator:
    """One operator's directory: a key pair, a registered two-checkpoint campaign, a
    passing smoke, and the commands (the cluster controller's environment never holds
    the credential)."""

    def __init__(self, tmp: Path, server: Server, *, credential: bool = True) -> None:
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if k not in ("CI", CANARY_ENV)}
        self.env["EFOLD_ACCOUNT_ID"] = "acct-fictional"
        (tmp / "catalog.toml").write_bytes(CATALOG)
        profile = PROFILE.format(url=server.base_url)
        if credential:
            profile += f'credential_env = "{CANARY_ENV}"\n'
        (tmp / "campaign.toml").write_text(
            'name = "loopback-cluster"\nsuite = "original"\ntraces = ["orig-archive-scan"]\n'
            'probe_limit = 2\nroles = ["native", "compaction"]\ncap_usd = "10.00"\n'
            f"[reader]\n{profile}[summariser]\n{profile}")
        assert self.run("keygen", "--out", "approver").returncode == 0
        done = self.run("register", "campaign.toml", "--output", "reg")
        assert done.returncode == 0, done.stderr
        self.sha = done.stdout.split("sha256: ")[1].strip()
        self.runs = tmp / "runs"
        self.runs.mkdir(mode=0o700)
        smoke = self.run("smoke", *self._registration(), "--run-dir", str(self.runs / "smoke"),
                         "--authorization", self.authorize("smoke", "--smoke"), "--trust",
                         "approver.pub", "--no-progress", *REAL_RUN_FLAGS,
                         credential=credential)
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr

    def _registration(self) -> list[str]:
        return ["--registration", "reg/registration.json", "--sha256", self.sha]

    def run(self, *args: str, credential: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**self.env, CANARY_ENV: CANARY} if credential else self.env
        return subprocess.run([EFOLD, *args], cwd=self.tmp, env=env, capture_output=True,
                              text=True, timeout=600)

    def authorize(self, run: str, *extra: str) -> str:
        out = f"{run}-auth.json"
        done = self.run("authorize", *self._registration(), *extra, "--key", "approver.key",
                        "--out", out, "--output-root", str(self.runs / run), "--approver",
                        "ops", "--approval-reference", "appr-1")
        assert done.returncode == 0, done.stderr
        return out

    def cluster(self, cluster: Any, run: str, *extra: str
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        done = self.run("cluster", "pilot", "--real", "--ray", cluster.address,
                        *self._registration(), "--run-dir", str(self.runs / run),
                        "--authorization", self.authorize(run), "--trust", "approver.pub",
                        "--json", *REAL_RUN_FLAGS, *extra)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        return done, json.loads(done.stdout.strip().splitlines()[-1])


def _holding(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes hold ``needle``."""
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
            except OSError:
                continue  # a socket, or gone
    return found


def test_a_real_campaign_runs_on_two_nodes_with_the_credential_read_on_each(
        keyed_cluster: Any, server: Server, tmp_path: Path) -> None:
    op = Operator(tmp_path, server)
    sent = len(server.requests)
    node_runs = tmp_path / "node-runs"
    node_runs.mkdir(mode=0o700)
    done, line = op.cluster(keyed_cluster, "clu", "--shards", "2", "--resource", "keyed",
                            "--node-runs", str(node_runs))
    assert done.returncode == 0, done.stdout + done.stderr
    assert line["status"] == "complete" and line["shards"] == {"1": "complete",
                                                                "2": "complete"}
    run = Path(line["run"])
    placed = manifest(run)
    assert len({p.node for p in placed.shards}) == 2  # one shard per node
    assert all(Path(p.run_dir).parent == node_runs for p in placed.shards)
    # Every request carried the node's credential (the server answers 401 otherwise).
    assert len(server.requests) > sent
    assert all(r["authorization"] == f"Bearer {CANARY}" for r in server.requests[sent:])
    # The cap split and the money exact: the shard journals' settled units are the run's.
    results = json.loads((run / "results.json").read_bytes())
    assert sum(p.spec.cap_units for p in placed.shards) == results["cap"]["units"]
    spent = sum(shard_money(p.run_dir) for p in placed.shards)
    assert results["money"]["settled"]["units"] == spent > 0
    assert results["money"]["retained"]["units"] == 0
    # The credential travelled nowhere: not through Ray, not into any record.
    session = Path(keyed_cluster.head_node.get_session_dir_path())
    assert _holding(session, CANARY.encode()) == []
    assert _holding(op.runs, CANARY.encode()) == []
    assert _holding(node_runs, CANARY.encode()) == []


def test_a_node_without_the_credential_refuses_its_shard(keyed_cluster: Any,
                                                         server: Server,
                                                         tmp_path: Path) -> None:
    op = Operator(tmp_path, server)
    sent = len(server.requests)
    done, line = op.cluster(keyed_cluster, "keyless", "--shards", "1", "--resource", "keyless")
    assert done.returncode == 3, done.stdout + done.stderr
    assert line["shards"] == {"1": "refused"}
    assert len(server.requests) == sent  # nothing sent
    summary = (Path(line["run"]) / "summary.md").read_text()
    assert "Shard 1: refused (`lookup_pilot_real_route_unavailable`)" in summary
    status = json.loads((Path(line["run"]) / "results.json").read_bytes())
    assert status["money"]["settled"]["units"] == 0


def test_a_shard_placed_by_resource_next_to_its_local_model_server(keyed_cluster: Any,
                                                                  tmp_path: Path) -> None:
    """A route without a credential (a local model server on a node, as llama.cpp's):
    ``--resource keyless`` places the shard on the node that offers it, and it runs
    there, its requests carrying no credential."""
    with serve_chat() as local:
        op = Operator(tmp_path, local, credential=False)
        sent = len(local.requests)
        done, line = op.cluster(keyed_cluster, "local", "--shards", "1",
                                "--resource", "keyless")
    assert done.returncode == 0, done.stdout + done.stderr
    assert line["shards"] == {"1": "complete"}
    placed = manifest(Path(line["run"])).shards[0]
    assert placed.node == keyed_cluster.keyless_id
    assert len(local.requests) > sent
    assert all(r["authorization"] is None for r in local.requests[sent:])
    assert json.loads((Path(line["run"]) / "results.json").read_bytes())["money"][
        "settled"]["units"] == shard_money(placed.run_dir) > 0


def test_a_local_campaign_runs_on_two_nodes_in_one_command(keyed_cluster: Any,
                                                           tmp_path: Path) -> None:
    """The local route on a cluster: a campaign whose models are on loopback without a
    credential runs with ``cluster pilot`` alone (no keygen, no signed authorization:
    the cluster run mints and burns a local one), each shard asking its node's server
    for its model list first. At the operator catalog's made-up rates the cap splits
    and the settled money is the shard journals', exactly."""
    with serve_chat() as local:
        (tmp_path / "catalog.toml").write_bytes(CATALOG)
        (tmp_path / "campaign.toml").write_text(
            'name = "local-cluster"\nsuite = "original"\ntraces = ["orig-archive-scan"]\n'
            'probe_limit = 2\nroles = ["native", "compaction"]\ncap_usd = "10.00"\n'
            f"[reader]\n{PROFILE.format(url=local.base_url)}"
            f"[summariser]\n{PROFILE.format(url=local.base_url)}")
        node_runs = tmp_path / "node-runs"
        node_runs.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if k != CANARY_ENV}
        done = subprocess.run(
            [EFOLD, "cluster", "pilot", "--ray", keyed_cluster.address, "--campaign",
             "campaign.toml", "--runs", str(tmp_path / "runs"), "--shards", "2",
             "--resource", "keyed", "--node-runs", str(node_runs), "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        requests = list(local.requests)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["shards"] == {"1": "complete", "2": "complete"}
    run = Path(line["run"])
    placed = manifest(run)
    assert len({p.node for p in placed.shards}) == 2
    assert requests and all(r["authorization"] is None for r in requests)
    results = json.loads((run / "results.json").read_bytes())
    assert sum(p.spec.cap_units for p in placed.shards) == results["cap"]["units"]
    spent = sum(shard_money(p.run_dir) for p in placed.shards)
    assert results["money"]["settled"]["units"] == spent > 0
    claims = list((tmp_path / "runs" / ".efold-faux-consumed-v1").glob("*/claim.json"))
    assert [json.loads(c.read_bytes())["domain"] for c in claims] == [
        "efold-local-authorization-v1"]
