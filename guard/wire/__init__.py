"""guard/wire: one adapter per API wire format (payload allowlist, incremental response
parser), the faux transport and the real HTTP transport.

Importing this package never imports httpx: ``HttpTransport`` imports it on first use.
"""

from efold.guard.wire.chat_stream import ChatBodyParser as ChatBodyParser
from efold.guard.wire.chat_stream import ChatStreamParser as ChatStreamParser
from efold.guard.wire.faux import FauxReply as FauxReply
from efold.guard.wire.faux import FauxTransport as FauxTransport
from efold.guard.wire.faux import Responder as Responder
from efold.guard.wire.faux import faux_usage as faux_usage
from efold.guard.wire.faux import render_responses_sse as render_responses_sse
from efold.guard.wire.formats import CHAT as CHAT
from efold.guard.wire.formats import MESSAGES as MESSAGES
from efold.guard.wire.formats import RESPONSES as RESPONSES
from efold.guard.wire.formats import WireFormat as WireFormat
from efold.guard.wire.formats import wire_format as wire_format
from efold.guard.wire.http import HttpTransport as HttpTransport
from efold.guard.wire.outcome import StreamEnd as StreamEnd
from efold.guard.wire.outcome import WireOutcome as WireOutcome
from efold.guard.wire.responses_stream import ResponsesStreamParser as ResponsesStreamParser
from efold.guard.wire.sse import SseDecoder as SseDecoder
from efold.guard.wire.sse import SseEvent as SseEvent
