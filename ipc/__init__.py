"""ipc: the lockstep channel between the controller and one child (docs/architecture.md §3).

Message types (``messages``), framing with a maximum frame size and an HMAC tag
(``framing``), the lockstep state machine shared by both sides (``lockstep``), and two
thin I/O shells: ``ChildChannel`` (blocking sockets, for the child) and
``ControllerChannel`` (anyio, for the controller).

``ControllerChannel`` is loaded lazily on first access so that the child, which imports
this package, never pays for anyio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from efold.ipc.child_channel import ChildChannel as ChildChannel
from efold.ipc.errors import IpcBadMac as IpcBadMac
from efold.ipc.errors import IpcBadMessage as IpcBadMessage
from efold.ipc.errors import IpcBindingMismatch as IpcBindingMismatch
from efold.ipc.errors import IpcCancelled as IpcCancelled
from efold.ipc.errors import IpcEof as IpcEof
from efold.ipc.errors import IpcError as IpcError
from efold.ipc.errors import IpcFrameTooLarge as IpcFrameTooLarge
from efold.ipc.errors import IpcLocalMisuse as IpcLocalMisuse
from efold.ipc.errors import IpcOutOfOrder as IpcOutOfOrder
from efold.ipc.errors import IpcPeerError as IpcPeerError
from efold.ipc.errors import IpcPoisoned as IpcPoisoned
from efold.ipc.errors import IpcSeqMismatch as IpcSeqMismatch
from efold.ipc.errors import IpcTimeout as IpcTimeout
from efold.ipc.errors import IpcTruncatedFrame as IpcTruncatedFrame
from efold.ipc.framing import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from efold.ipc.framing import KEY_SIZE as KEY_SIZE
from efold.ipc.framing import FrameParser as FrameParser
from efold.ipc.framing import seal as seal
from efold.ipc.lockstep import LockstepCore as LockstepCore
from efold.ipc.lockstep import Phase as Phase
from efold.ipc.lockstep import Side as Side
from efold.ipc.lockstep import child_core as child_core
from efold.ipc.lockstep import controller_core as controller_core
from efold.ipc.messages import PREP_PROTOCOL as PREP_PROTOCOL
from efold.ipc.messages import PROBE_PROTOCOL as PROBE_PROTOCOL
from efold.ipc.messages import Admit as Admit
from efold.ipc.messages import Binding as Binding
from efold.ipc.messages import BudgetGrant as BudgetGrant
from efold.ipc.messages import ChildMessage as ChildMessage
from efold.ipc.messages import Consume as Consume
from efold.ipc.messages import Consumed as Consumed
from efold.ipc.messages import ControllerMessage as ControllerMessage
from efold.ipc.messages import DeadlineGrant as DeadlineGrant
from efold.ipc.messages import DoneAck as DoneAck
from efold.ipc.messages import Granted as Granted
from efold.ipc.messages import Halt as Halt
from efold.ipc.messages import Halted as Halted
from efold.ipc.messages import Hello as Hello
from efold.ipc.messages import MeterReading as MeterReading
from efold.ipc.messages import Prepared as Prepared
from efold.ipc.messages import ProtocolName as ProtocolName
from efold.ipc.messages import Ready as Ready
from efold.ipc.messages import Refused as Refused
from efold.ipc.messages import Settle as Settle
from efold.ipc.messages import Settled as Settled
from efold.ipc.messages import SettleOutcome as SettleOutcome
from efold.ipc.messages import Stop as Stop
from efold.ipc.messages import Terminal as Terminal
from efold.ipc.messages import TerminalStatus as TerminalStatus
from efold.ipc.messages import UsageReport as UsageReport
from efold.ipc.messages import Welcome as Welcome

if TYPE_CHECKING:
    from efold.ipc.controller_channel import ControllerChannel as ControllerChannel


def __getattr__(name: str) -> Any:
    # PEP 562: the async shell (and anyio with it) loads only when the controller asks.
    if name == "ControllerChannel":
        from efold.ipc.controller_channel import ControllerChannel

        return ControllerChannel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
