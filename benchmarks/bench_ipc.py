"""Lockstep round trip next to a raw socketpair msgpack round trip, in the same run.

    python benchmarks/bench_ipc.py [--exchanges 3000] [--runs 3]
    python benchmarks/bench_ipc.py --quick      # 200 exchanges, one run (CI)

Both measure the same shape between two real processes over a socketpair: the child
(blocking sockets, like every efold child) sends one request and waits for the reply;
the controller (anyio on trio, like the efold controller) answers. Latency is taken on
the child side per exchange; the median over all exchanges of a run is kept, and the
median over runs printed.

* lockstep: a real launch (key pipe, pidfd, journal), then ``Admit`` ; ``Refused``
  exchanges through ``ChildChannel`` / ``ControllerChannel`` (envelope, binding and seq
  checks, HMAC, the state machine, strict decoding);
* raw (anyio): 4-byte length + ``msgpack`` of an equivalent dict, no MAC, no checks,
  the controller on the same anyio/trio stream API;
* raw (blocking): the same raw protocol with a blocking controller thread: the floor.

Target: lockstep <= 3x raw.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import msgspec

CHILD_FLAG = "--child"
DIGEST = "d" * 64


# -- child side (runs in the spawned process) -----------------------------------------


def _child_lockstep(argv: list[str], exchanges: int) -> None:
    from efold.identity import current_identity
    from efold.ipc.child_channel import ChildChannel
    from efold.ipc.messages import (
        Admit,
        Binding,
        Hello,
        MeterReading,
        Ready,
        Terminal,
        TerminalStatus,
    )
    from efold.worker.key_pipe import read_key_pipe

    ipc_fd, key_fd = int(argv[argv.index("--ipc-fd") + 1]), int(argv[argv.index("--key-fd") + 1])
    key, a = read_key_pipe(key_fd)
    binding = Binding(epoch=a.epoch, slot=a.slot, worker=current_identity())
    channel = ChildChannel(socket.socket(fileno=ipc_fd), protocol=a.protocol, binding=binding,
                           key=key)
    channel.request(Hello(protocol=a.protocol, registration_digest=DIGEST, plan_digest=DIGEST,
                          build_digest=DIGEST, cache_key=a.cache_key))
    channel.send(Ready(arrival_digest=DIGEST))
    admit = Admit(request_id="r-000001", round=3, payload_digest=DIGEST, rmax=78_400_000)
    samples = []
    for _ in range(exchanges):
        t0 = time.perf_counter_ns()
        channel.request(admit)
        samples.append(time.perf_counter_ns() - t0)
    answer = json.dumps({"median_ns": statistics.median(samples[exchanges // 10 :])})
    channel.request(Terminal(status=TerminalStatus.ANSWERED, code=None, answer=answer,
                             meter=MeterReading(calls=0, bytes=0), witness=DIGEST))


def _raw_request() -> dict[str, object]:
    me = {"pid": os.getpid(), "start_time": 123456, "boot_id": "8f1a75a6-6377-4007-a681-d0abbdfaedcf"}
    return {"epoch": 1, "slot": "s00001", "worker": me, "seq": 7, "msg": {
        "kind": "admit", "request_id": "r-000001", "round": 3, "payload_digest": DIGEST,
        "rmax": 78_400_000}}


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _child_raw(fd: int, exchanges: int) -> None:
    sock = socket.socket(fileno=fd)
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    request = _raw_request()
    samples = []
    for _ in range(exchanges):
        t0 = time.perf_counter_ns()
        body = encoder.encode(request)
        sock.sendall(len(body).to_bytes(4, "big") + body)
        n = int.from_bytes(_recv_exact(sock, 4), "big")
        decoder.decode(_recv_exact(sock, n))
        samples.append(time.perf_counter_ns() - t0)
    sock.sendall((0).to_bytes(4, "big"))
    print(json.dumps({"median_ns": statistics.median(samples[exchanges // 10 :])}))


# -- controller side --------------------------------------------------------------------


def _raw_reply(request: object) -> bytes:
    return msgspec.msgpack.encode({"epoch": 1, "slot": "s00001", "seq": 8,
                                   "msg": {"kind": "refused", "code": "not_admitted_cap"}})


async def _lockstep_run(exchanges: int) -> float:
    import anyio  # noqa: F401  (the controller side)

    from efold.controller.processes.launcher import supervise
    from efold.errors import Code
    from efold.identity import current_identity
    from efold.ipc.messages import Admit, BudgetGrant, DeadlineGrant, Refused, Terminal, Welcome
    from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef
    from efold.registry.journal import JournalWriter
    from efold.registry.lease import acquire_lease

    with tempfile.TemporaryDirectory() as root:
        lease = acquire_lease(root)
        journal = JournalWriter(root, lease)
        epoch = journal.record_epoch(current_identity())
        lease.set_epoch(epoch)
        assignment = Assignment(
            version=ASSIGNMENT_VERSION, kind="probe", body="builtin", run_dir=root,
            slot_dir=root, epoch=epoch, slot="s00001", controller=current_identity(),
            registration_digest=DIGEST, plan_digest=DIGEST, build_digest=DIGEST,
            cache_key="ck-1", snapshot=SnapshotRef(path=os.devnull, digest=DIGEST),
            hello_timeout_ms=10_000,
        )
        welcome = Welcome(deadlines=DeadlineGrant(run_ms=600_000, exchange_ms=600_000),
                          budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=126_976))
        program = [sys.executable, os.path.abspath(__file__), CHILD_FLAG, "lockstep",
                   str(exchanges)]
        async with supervise(journal, assignment, program=program) as handle:
            ch = handle.channel
            await handle.accept_hello(welcome, timeout=30)
            await ch.receive(timeout=30)  # Ready
            refused = Refused(code=Code.NOT_ADMITTED_CAP)
            while True:
                msg = await ch.receive(timeout=30)
                if isinstance(msg, Admit):
                    await ch.reply(refused)
                    continue
                assert isinstance(msg, Terminal)
                await handle.acknowledge_done()
                break
        journal.close()
        lease.release()
    return float(json.loads(msg.answer)["median_ns"])


async def _raw_anyio_run(exchanges: int) -> float:
    import anyio
    import anyio.abc

    ours, theirs = socket.socketpair()
    proc = await anyio.open_process(
        [sys.executable, os.path.abspath(__file__), CHILD_FLAG, "raw", str(exchanges),
         str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    theirs.close()
    stream = await anyio.abc.SocketStream.from_socket(ours)
    decoder = msgspec.msgpack.Decoder()

    async def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            buf += await stream.receive(n - len(buf))
        return bytes(buf)

    while True:
        n = int.from_bytes(await exact(4), "big")
        if n == 0:
            break
        reply = _raw_reply(decoder.decode(await exact(n)))
        await stream.send(len(reply).to_bytes(4, "big") + reply)
    assert proc.stdout is not None
    out = b""
    async for chunk in proc.stdout:
        out += chunk
    await proc.wait()
    await stream.aclose()
    return float(json.loads(out)["median_ns"])


def _raw_blocking_run(exchanges: int) -> float:
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), CHILD_FLAG, "raw", str(exchanges),
         str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdout=subprocess.PIPE)
    theirs.close()
    decoder = msgspec.msgpack.Decoder()
    while True:
        n = int.from_bytes(_recv_exact(ours, 4), "big")
        if n == 0:
            break
        reply = _raw_reply(decoder.decode(_recv_exact(ours, n)))
        ours.sendall(len(reply).to_bytes(4, "big") + reply)
    out, _ = proc.communicate()
    ours.close()
    return float(json.loads(out)["median_ns"])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == CHILD_FLAG:
        mode, exchanges = sys.argv[2], int(sys.argv[3])
        if mode == "lockstep":
            _child_lockstep(sys.argv[4:], exchanges)
        else:
            _child_raw(int(sys.argv[4]), exchanges)
        return
    from bench_kit import parse_runs  # not in the child modes above: they import nothing extra

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=3000)
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="200 exchanges, one run (CI); overrides --exchanges and --runs")
    if args.quick:
        args.exchanges = 200

    import anyio

    lockstep: list[float] = []
    raw_anyio: list[float] = []
    raw_blocking: list[float] = []
    for _ in range(args.runs):  # interleaved, so machine load hits all three alike
        lockstep.append(anyio.run(_lockstep_run, args.exchanges, backend="trio"))
        raw_anyio.append(anyio.run(_raw_anyio_run, args.exchanges, backend="trio"))
        raw_blocking.append(_raw_blocking_run(args.exchanges))
    ls, ra, rb = (statistics.median(x) / 1000 for x in (lockstep, raw_anyio, raw_blocking))
    print(f"exchanges per run: {args.exchanges}, runs: {args.runs} (median of run medians)")
    print(f"raw msgpack, blocking controller : {rb:8.1f} us per round trip")
    print(f"raw msgpack, anyio/trio controller: {ra:8.1f} us per round trip")
    print(f"lockstep (MAC, envelope, states) : {ls:8.1f} us per round trip")
    print(f"ratio lockstep / raw (anyio)      : {ls / ra:5.2f}x (target <= 3x)")
    print(f"ratio lockstep / raw (blocking)   : {ls / rb:5.2f}x")


if __name__ == "__main__":
    main()
