"""A real child that breaks the lockstep protocol on purpose.

    python rogue_child.py MODE prep|probe --ipc-fd N --key-fd M

It reads the key pipe like a real worker, then sends what MODE says and waits for the
controller to close the channel (or kill it).
"""

from __future__ import annotations

import socket
import sys

import msgspec

from efold.identity import ProcessIdentity, current_identity
from efold.ipc.child_channel import ChildChannel
from efold.ipc.framing import seal
from efold.ipc.messages import Admit, Binding, ChildEnvelope, Consume, Hello, Ready
from efold.worker.key_pipe import read_key_pipe

D = "d" * 64


def main() -> None:
    mode, kind = sys.argv[1], sys.argv[2]
    ipc_fd, key_fd = int(sys.argv[4]), int(sys.argv[6])
    key, a = read_key_pipe(key_fd)
    assert a.kind == kind
    sock = socket.socket(fileno=ipc_fd)
    me = current_identity()
    binding = Binding(epoch=a.epoch, slot=a.slot, worker=me)
    hello = Hello(protocol=a.protocol, registration_digest=a.registration_digest,
                  plan_digest=a.plan_digest, build_digest=a.build_digest, cache_key=a.cache_key)

    def frame(msg: object, seq: int, b: Binding = binding) -> bytes:
        env = ChildEnvelope(epoch=b.epoch, slot=b.slot, worker=b.worker, seq=seq, msg=msg)  # type: ignore[arg-type]
        return seal(key, msgspec.msgpack.encode(env))

    def legit_until_ready() -> None:
        channel = ChildChannel(sock, protocol=a.protocol, binding=binding, key=key)
        channel.request(hello)
        if mode == "consume_without_permit":
            channel.send(Ready(arrival_digest=D))

    if mode == "eof":
        return
    if mode == "truncated":
        sock.sendall(frame(hello, 0)[:10])
        return
    if mode == "too_large":
        sock.sendall((2**21).to_bytes(4, "big") + b"x" * 100)
    elif mode == "bad_mac":
        f = bytearray(frame(hello, 0))
        f[-1] ^= 1
        sock.sendall(bytes(f))
    elif mode == "bad_message":
        sock.sendall(seal(key, b"\xc1 not msgpack"))
    elif mode == "binding_epoch":
        sock.sendall(frame(hello, 0, Binding(epoch=a.epoch + 1, slot=a.slot, worker=me)))
    elif mode == "binding_slot":
        sock.sendall(frame(hello, 0, Binding(epoch=a.epoch, slot=a.slot + "x", worker=me)))
    elif mode == "binding_worker":
        forged = ProcessIdentity(pid=me.pid + 1, start_time=me.start_time, boot_id=me.boot_id)
        sock.sendall(frame(hello, 0, Binding(epoch=a.epoch, slot=a.slot, worker=forged)))
    elif mode == "out_of_order":
        sock.sendall(frame(Admit(request_id="r", round=0, payload_digest=D, rmax=1), 0))
    elif mode == "seq_skip":
        sock.sendall(frame(hello, 1))
    elif mode == "seq_replay":
        legit_until_ready()
        sock.sendall(frame(Ready(arrival_digest=D), 1))  # seq 1 was the controller's Welcome
    elif mode == "replay_frame":
        first = frame(hello, 0)
        sock.sendall(first)
        _read_one_frame(sock)  # Welcome
        sock.sendall(first)  # the genuine Hello again: a replay
    elif mode == "consume_without_permit":
        legit_until_ready()
        sock.sendall(frame(Consume(permit_id="p", body_digest=D), 3))
    else:
        raise SystemExit(99)
    while sock.recv(4096):  # until the controller closes the channel (or kills us)
        pass


def _read_one_frame(sock: socket.socket) -> None:
    header = sock.recv(4, socket.MSG_WAITALL)
    sock.recv(int.from_bytes(header, "big") + 32, socket.MSG_WAITALL)


if __name__ == "__main__":
    main()
