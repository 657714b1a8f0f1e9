"""Benchmark: the registry's durable and guarded operations against the plain operation
each one wraps, measured in the same run on the same filesystem.

    .venv/bin/python benchmarks/registry_ops.py [--runs 5] [--dir /tmp]
    .venv/bin/python benchmarks/registry_ops.py --quick    # one run (CI)

| operation                  | baseline                                                |
| -------------------------- | ------------------------------------------------------- |
| publish_exclusive (1 KiB)  | the usual atomic write: temp, fsync, rename, fsync dir |
| read_private (1 KiB)       | open + read                                             |
| acquire_lease + release    | bare flock(LOCK_EX) + unlock on an open file            |
| probe_lease                | os.stat of the lease file                               |
| Lease.assert_held          | os.fstat                                                |
| JournalWriter.record_hold  | raw sqlite INSERT, autocommit, WAL + synchronous=FULL  |
| sign + verify authorization| raw Ed25519 sign + verify of the same bytes             |

Each figure is the median over ``--runs`` runs of the mean time per operation.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable

from bench_kit import parse_runs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from efold.identity import current_identity
from efold.registry.authorization import (
    AUTHORIZATION_VERSION,
    Attestation,
    AuthorizationBindings,
    AuthorizationDomain,
    check_signature,
    commit_account,
    sign_attestation,
)
from efold.registry.files import publish_exclusive, read_private
from efold.registry.journal import JournalWriter
from efold.registry.lease import LEASE_NAME, acquire_lease, probe_lease

PAYLOAD = os.urandom(1024)


def _median_per_op(run: Callable[[int], None], n: int, runs: int) -> float:
    samples = []
    for r in range(runs):
        start = time.perf_counter()
        run(r)
        samples.append((time.perf_counter() - start) / n)
    return statistics.median(samples)


def _row(name: str, ours: float, base: float) -> None:
    print(f"{name:<28} {ours * 1e6:>11.1f} µs {base * 1e6:>11.1f} µs {ours / base:>7.2f}x")


def bench_publish(root: str, n: int, runs: int) -> None:
    def ours(r: int) -> None:
        d = os.path.join(root, f"pub-{r}")
        os.mkdir(d, 0o700)
        for i in range(n):
            publish_exclusive(d, f"f{i}", PAYLOAD)

    def base(r: int) -> None:
        d = os.path.join(root, f"base-{r}")
        os.mkdir(d, 0o700)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        for i in range(n):
            tmp = os.path.join(d, f".f{i}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, PAYLOAD)
            os.fsync(fd)
            os.close(fd)
            os.rename(tmp, os.path.join(d, f"f{i}"))
            os.fsync(dfd)
        os.close(dfd)

    _row("publish_exclusive (1 KiB)", _median_per_op(ours, n, runs),
         _median_per_op(base, n, runs))


def bench_read(root: str, n: int, runs: int) -> None:
    d = os.path.join(root, "read")
    os.mkdir(d, 0o700)
    publish_exclusive(d, "f", PAYLOAD)
    path = os.path.join(d, "f")

    def ours(_: int) -> None:
        for _ in range(n):
            read_private(d, "f", max_bytes=4096)

    def base(_: int) -> None:
        for _ in range(n):
            with open(path, "rb") as f:
                f.read()

    _row("read_private (1 KiB)", _median_per_op(ours, n, runs), _median_per_op(base, n, runs))


def bench_lease(root: str, n: int, runs: int) -> None:
    run_dir = os.path.join(root, "lease")
    os.mkdir(run_dir, 0o700)

    def acquire(_: int) -> None:
        for _ in range(n):
            acquire_lease(run_dir).release()

    flock_path = os.path.join(root, "flock")
    fd = os.open(flock_path, os.O_RDWR | os.O_CREAT, 0o600)

    def bare(_: int) -> None:
        for _ in range(n):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)

    _row("acquire_lease + release", _median_per_op(acquire, n, runs),
         _median_per_op(bare, n, runs))

    lease = acquire_lease(run_dir)
    lease_path = os.path.join(run_dir, LEASE_NAME)

    def probe(_: int) -> None:
        for _ in range(n):
            probe_lease(run_dir)

    def stat(_: int) -> None:
        for _ in range(n):
            os.stat(lease_path)

    _row("probe_lease (live)", _median_per_op(probe, n, runs), _median_per_op(stat, n, runs))

    def held(_: int) -> None:
        for _ in range(n):
            lease.assert_held()

    def fstat(_: int) -> None:
        for _ in range(n):
            os.fstat(fd)

    _row("Lease.assert_held", _median_per_op(held, n, runs), _median_per_op(fstat, n, runs))
    lease.release()
    os.close(fd)


def bench_journal(root: str, n: int, runs: int) -> None:
    def ours(r: int) -> None:
        run_dir = os.path.join(root, f"journal-{r}")
        os.mkdir(run_dir, 0o700)
        with acquire_lease(run_dir) as lease:
            writer = JournalWriter(run_dir, lease)
            for i in range(n):
                writer.record_hold(permit_id=f"p{i}", epoch=1, slot="s1", request_id="r",
                                   round=1, payload_digest="d" * 64, hold_units=100)
            writer.close()

    def base(r: int) -> None:
        conn = sqlite3.connect(os.path.join(root, f"raw-{r}.sqlite"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE holds (permit_id TEXT PRIMARY KEY, slot TEXT, units INT)")
        for i in range(n):
            conn.execute("INSERT INTO holds VALUES (?, ?, ?)", (f"p{i}", "s1", 100))
        conn.close()

    _row("JournalWriter.record_hold", _median_per_op(ours, n, runs),
         _median_per_op(base, n, runs))


def bench_authorization(n: int, runs: int) -> None:
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    digest = hashlib.sha256(b"x").hexdigest()
    now = int(time.time())
    attestation = Attestation(
        version=AUTHORIZATION_VERSION, domain=AuthorizationDomain.REAL,
        authorization_id="auth-bench-000001",
        bindings=AuthorizationBindings(
            registration_raw_sha256=digest, registration_canonical_sha256=digest,
            code_digest=digest, build_digest=digest, reader="r", effort="low",
            catalog_digest=digest, policy_digest=digest, cap_units=1, schedule_digest=digest,
            deadlines={"probe_s": 1}, output_root="/x", credential_env_var="K"),
        account=commit_account("acct", domain=AuthorizationDomain.REAL),
        approver="a", approval_reference="b", issued_at=now, expires_at=now + 60)

    def ours(_: int) -> None:
        for _ in range(n):
            artifact = sign_attestation(attestation, key)
            check_signature(artifact, domain=AuthorizationDomain.REAL, trusted_keys=[public])

    message = sign_attestation(attestation, key)

    def base(_: int) -> None:
        for _ in range(n):
            public.verify(key.sign(message), message)

    _row("sign + verify authorization", _median_per_op(ours, n, runs),
         _median_per_op(base, n, runs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default=None, help="Filesystem to measure (default: $TMPDIR)")
    args = parse_runs(parser, runs=5, quick_runs=1, quick_help="one run (CI); overrides --runs")
    root = tempfile.mkdtemp(prefix="efold-bench-", dir=args.dir)
    try:
        current_identity()  # warm /proc reads
        print(f"{'operation':<28} {'efold':>14} {'baseline':>14} {'ratio':>8}")
        bench_publish(root, 50, args.runs)
        bench_read(root, 2000, args.runs)
        bench_lease(root, 200, args.runs)
        bench_journal(root, 100, args.runs)
        bench_authorization(200, args.runs)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
