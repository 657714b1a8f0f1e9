"""The layout of one hard trace: sessions, owner turns, tool records and where each
fact sits (docs/architecture.md §6, "Hard suite").

A layout is the *plan*: every message's text is decided here, every tool record gets
its header, its fact lines and its placement; only the records' filler (and so their
sizes) is left to ``hard_render``. Special records are placed by fraction of the record
sequence so that, whatever the seed's counts, the early account reference stays early,
the booking pack stays among the newest records, and so on; ``validate`` checks it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from efold.corpus import forms
from efold.corpus.errors import CorpusError
from efold.corpus.hard_field import FIELD_TURNS
from efold.corpus.hard_values import HANDOVER_LABEL, SURVEY_LABEL, TraceValues
from efold.corpus.prng import SeededRandom
from efold.errors import Code

Placement = Literal["head", "mid", "after"]


@dataclass
class RecordPlan:
    tool: str
    arguments: dict[str, str]
    header: str
    role: str = "filler"  # which fact it carries (probes cite it as their source)
    facts: list[str] = field(default_factory=list)
    placement: Placement = "after"
    oversized: bool = False
    steer: str | None = None
    request: str = ""  # what the owner asks for
    summary: str = ""  # what the assistant reports
    size: int = 0  # target bytes, decided by hard_render.assign_sizes

    @property
    def call_chars(self) -> int:
        return len(self.tool) + len(json.dumps(self.arguments, sort_keys=True))


@dataclass
class TurnPlan:
    session: int
    day: int
    owner: str = ""
    reply: str = ""
    role: str | None = None
    records: list[RecordPlan] = field(default_factory=list)


# Special records and the fraction of the record sequence where each sits.
_SPECIAL_AT: Final = (
    ("amount0", 0.15), ("artifact_draft", 0.2), ("password", 0.25), ("sent", 0.3),
    ("steer1", 0.33), ("decoy", 0.38), ("date1", 0.45), ("mid", 0.5), ("drafted", 0.56),
    ("amount1", 0.62), ("dependency", 0.66), ("big3", 0.7), ("loud", 0.75), ("shared", 0.8),
    ("steer3", 0.86),
)
_GENERIC_TOOLS: Final = (
    ("email_read", 30), ("document_read", 20), ("web_fetch", 15), ("chat_read", 15),
    ("web_search", 8), ("calendar_read", 6), ("parcel_track", 6),
)
_PLAIN_TURNS: Final = (
    ("Any risks I should know about?", "Nothing new; the open items are the ones we noted."),
    ("Pause there for a moment.", "Paused. I'll carry on when you're ready."),
    ("Remind me where we are.", "We're on track; the open items have not changed."),
    ("Good, carry on.", "Will do."),
    ("Let's keep going.", "Carrying on with the next item."),
    ("Anything waiting on me?", "Only the items we already noted."),
    ("Thanks, that helps.", "Glad to help."),
)


def record_layout(tool: str) -> str:
    """How a tool's record is laid out (its header here, its filler blocks in
    ``hard_render``): by the tool's source, except that a web search lists results."""
    return "search" if tool == "web_search" else forms.TOOL_SOURCES[tool].value


def _sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:]


def _weighted_tool(rng: SeededRandom) -> str:
    roll = rng.below(sum(w for _, w in _GENERIC_TOOLS))
    for tool, weight in _GENERIC_TOOLS:
        if roll < weight:
            return tool
        roll -= weight
    raise AssertionError("weights exhausted")  # pragma: no cover


class _Writer:
    """Text for records and turns, drawn from one PRNG stream."""

    def __init__(self, rng: SeededRandom, values: TraceValues) -> None:
        self.rng = rng
        self.values = values
        self.family = values.family

    def _item(self) -> str:
        return self.rng.choice(self.family.items)

    def header(self, tool: str, day: str, vendor: str, subject: str) -> str:
        layout = record_layout(tool)
        if layout == "email":  # read: the vendor wrote to the owner; draft/send: the reverse
            owner = self.family.owner
            sender, recipient = (vendor, owner) if tool == "email_read" else (owner, vendor)
            return f"Message from {sender} to {recipient}, {day}\nRe {subject}\n\n"
        site = vendor.lower().replace(" ", "")
        return {
            "search": f"Search results for {subject}",
            "web": f"Web page | {site}.example | {subject}",
            "chat": f"Chat log | #{self.family.channel}",
            "calendar": f"Calendar | from {day}",
            "parcel": f"Parcel tracking | {vendor}",
            "document": f"Document | {subject}",
        }[layout] + "\n\n"

    def generic(self, tool: str, day: str) -> RecordPlan:
        vendor, item = self.rng.choice(self.values.vendors), self._item()
        noun = self.rng.choice(("delivery", "handling", "storage", "scheduling"))
        args: dict[str, str]
        if tool == "email_read":
            args = {"query": f"{vendor} {item}"}
            request = f"Read the latest email from {vendor} about the {item}."
            summary = f"{vendor} wrote about the {item}; routine {noun} points, nothing to decide."
        elif tool == "document_read":
            args = {"title": f"{noun} notes for the {item}"}
            request = f"Open the {noun} notes for the {item}."
            summary = f"The {noun} notes for the {item} are routine; nothing has changed."
        elif tool == "web_fetch":
            args = {"url": f"https://{vendor.lower().replace(' ', '')}.example/{noun}"}
            request = f"Open {vendor}'s page about {noun}."
            summary = f"{vendor}'s {noun} page is general; nothing new for us."
        elif tool == "chat_read":
            args = {"channel": self.family.channel}
            request = f"What's new in the {self.family.channel} chat?"
            summary = f"The chat is mostly about the {item} and {noun}; nothing needs you."
        elif tool == "web_search":
            args = {"query": f"{item} {noun}"}
            request = f"Search for {item} {noun} options."
            summary = f"The search shows the usual suppliers for the {item}; none beats ours."
        elif tool == "calendar_read":
            args = {"range": "coming days"}
            request = "Show my calendar for the coming days."
            summary = "Your calendar has the usual slots; no clashes."
        else:
            args = {"carrier": self.values.vendors[2]}
            request = f"Where is the {item} parcel?"
            summary = f"The {item} parcel is moving through the depot scans as expected."
        subject = args.get("title") or args.get("query") or f"{noun} for the {item}"
        return RecordPlan(tool=tool, arguments=args, header=self.header(tool, day, vendor, subject),
                          request=request, summary=summary)

    def special(self, role: str, day: str) -> RecordPlan:
        """The record that carries ``role``'s fact (see ``_SPECIAL_BUILDERS``)."""
        record = _SPECIAL_BUILDERS[role](self, day)
        record.role = role
        return record

    # The three kinds of special record; the builders below fill in their text.

    def email(self, vendor: str, day: str, subject: str, facts: list[str], request: str,
              summary: str) -> RecordPlan:
        """An email from ``vendor``, read by the assistant; its facts at the head or after."""
        return RecordPlan(tool="email_read", arguments={"query": f"{vendor} {subject.lower()}"},
                          header=self.header("email_read", day, vendor, subject), facts=facts,
                          placement=self.rng.choice(("head", "after")), request=request,
                          summary=summary)

    def outgoing(self, tool: str, to: str, day: str, subject: str, facts: list[str],
                 request: str, summary: str) -> RecordPlan:
        """An email the assistant sends or drafts (``tool``) to ``to``."""
        return RecordPlan(tool=tool, arguments={"to": to, "subject": subject},
                          header=self.header(tool, day, to, subject), facts=facts,
                          placement="after", request=request, summary=summary)

    def document(self, title: str, day: str, facts: list[str], request: str, summary: str, *,
                 placement: Placement = "head", oversized: bool = False) -> RecordPlan:
        """A document the assistant reads; its facts at the head unless ``placement``."""
        return RecordPlan(tool="document_read", arguments={"title": title},
                          header=self.header("document_read", day, "", title), facts=facts,
                          placement=placement, oversized=oversized, request=request,
                          summary=summary)


# -- Special records: one builder a role ----------------------------------------------
# Each builder writes the record that carries one fact; ``_Writer.special`` stamps the
# role on it. Vendors by index: 0 quotes and schedules, 1 runs the supplier portal,
# 2 books the delivery, 3 sends the long mid document and gets the drafted commitment.

SpecialBuilder = Callable[[_Writer, str], RecordPlan]


def _account_reference(writer: _Writer, day: str) -> RecordPlan:
    values = writer.values
    vendor = values.vendors[0]
    return writer.email(vendor, day, "Customer account",
                        [forms.fact_line("Account reference", values.account_ref)],
                        f"Check the inbox for anything from {vendor}.",
                        f"{vendor} have opened a customer account for {values.org}; the "
                        "reference is in their email with their standard terms.")


def _first_quote(writer: _Writer, day: str) -> RecordPlan:
    values, label = writer.values, writer.family.amount_label
    vendor, quote = values.vendors[0], values.amount_text(values.amounts[0])
    return writer.email(vendor, day, "Quote", [forms.fact_line(label, quote)],
                        f"Did {vendor} send their quote?",
                        f"Yes, {vendor} quote {quote} for the {label}.")


def _portal_password(writer: _Writer, day: str) -> RecordPlan:
    values = writer.values
    vendor = values.vendors[1]
    return writer.email(vendor, day, "Supplier portal access",
                        [f"Portal user name: orders at {values.org.lower()}",
                         forms.credential_line(values.secret)],
                        f"{vendor} sent portal access details; can you check them?",
                        f"They sent the sign-in details for the {values.portal}. Under your rule "
                        "I will not paste the password back into this chat.")


def _provisional_booking(writer: _Writer, day: str) -> RecordPlan:
    """The decoy: a booking reference that the booking pack later replaces."""
    values = writer.values
    vendor = values.vendors[2]
    return writer.email(vendor, day, "Provisional booking",
                        [forms.fact_line("Booking ref", values.booking_decoy)],
                        f"Has {vendor} booked the delivery slot?",
                        f"{vendor} made a provisional booking and will send a full "
                        f"{writer.family.booking_pack} nearer the time.")


def _date_change(writer: _Writer, day: str) -> RecordPlan:
    values, label = writer.values, writer.family.date_label
    vendor = values.vendors[0]
    old_date, new_date = values.date_text(values.dates[0]), values.date_text(values.dates[1])
    return writer.email(vendor, day, "Change of date",
                        [forms.correction_line(label, old_date, new_date)],
                        f"{vendor} emailed about the schedule; what changed?",
                        f"{vendor} need to move the {label} from {old_date} to {new_date}.")


def _revised_quote(writer: _Writer, day: str) -> RecordPlan:
    values, label = writer.values, writer.family.amount_label
    vendor = values.vendors[0]
    old_quote = values.amount_text(values.amounts[0])
    new_quote = values.amount_text(values.amounts[1])
    return writer.email(vendor, day, "Revised quote",
                        [forms.correction_line(label, old_quote, new_quote)],
                        f"Did {vendor} revise the quote?",
                        f"Yes, the {label} changes from {old_quote} to {new_quote}.")


def _sent_commitment(writer: _Writer, day: str) -> RecordPlan:
    vendor = writer.values.vendors[0]
    commitment = writer.family.commitment_sent.format(vendor=vendor)
    what = commitment.split(" to ")[0]
    return writer.outgoing("email_send", vendor, day, _sentence_case(commitment),
                           [forms.status_line(commitment, "SENT")],
                           f"Send {vendor} the {what}.", f"Sent. {vendor} have the {what}.")


def _drafted_commitment(writer: _Writer, day: str) -> RecordPlan:
    vendor = writer.values.vendors[3]
    commitment = writer.family.commitment_drafted.format(vendor=vendor)
    record = writer.outgoing("email_draft", vendor, day, _sentence_case(commitment),
                             [forms.status_line(commitment, "DRAFTED")],
                             f"Write the {commitment}.",
                             "I wrote it and, as you asked while I was writing, saved it as "
                             "a draft. It has not been sent.")
    record.steer = f"Keep the {commitment} as a draft; do not send it yet."
    return record


def _artifact_drafted(writer: _Writer, day: str) -> RecordPlan:
    artifact = writer.family.artifact
    return writer.document(artifact, day, [forms.status_line(artifact, "DRAFT")],
                           f"Start the {artifact}.",
                           f"I started the {artifact}; it is saved as a draft.")


def _artifact_shared(writer: _Writer, day: str) -> RecordPlan:
    artifact, team = writer.family.artifact, f"the {writer.family.channel} group"
    return writer.outgoing("email_send", team, day, _sentence_case(artifact),
                           [forms.status_line(artifact, "SHARED")],
                           f"Share the {artifact} with the team.",
                           f"I shared the {artifact} with the team.")


def _mid_document(writer: _Writer, day: str) -> RecordPlan:
    """An oversized document with its reference in the middle."""
    values, family = writer.values, writer.family
    title = family.mid_document
    return writer.document(title, day, [forms.fact_line(family.mid_label, values.mid_ref)],
                           f"Read the {title} from {values.vendors[3]}.",
                           f"The {title} is long, mostly standard conditions and site "
                           "notes, with the reference we need in the middle.",
                           placement="mid", oversized=True)


def _booking_pack(writer: _Writer, day: str) -> RecordPlan:
    """An oversized document with the final booking reference at the head."""
    values, pack = writer.values, writer.family.booking_pack
    vendor = values.vendors[2]
    return writer.document(f"{vendor} {pack}", day,
                           [forms.fact_line("Booking ref", values.booking_ref)],
                           f"{vendor} sent the {pack}. Open it.",
                           f"The {pack} confirms the final booking at the top and "
                           "replaces the provisional one; the rest is loading instructions.",
                           placement="head", oversized=True)


def _dependency(writer: _Writer, day: str) -> RecordPlan:
    """The second fact of the cross-reference: the handover now follows the survey."""
    values, field = writer.values, writer.values.field
    vendor = values.vendors[3]
    return writer.email(vendor, day, "Handover dependency",
                        [forms.dependency_line(HANDOVER_LABEL, field.lag, SURVEY_LABEL)],
                        f"Did {vendor} say anything about the handover?",
                        f"{vendor} say the handover now depends on the access survey.")


def _louder_request(writer: _Writer, day: str) -> RecordPlan:
    """A later, louder request for another task order (not the owner's ranking)."""
    values, field = writer.values, writer.values.field
    vendor = values.vendors[2]
    first, *others = (field.task_keys[i] for i in field.loud_order)
    return writer.email(vendor, day, "Urgent request",
                        [forms.loud_request_line(first, others)],
                        f"Anything urgent from {vendor}?",
                        f"{vendor} are pressing hard for the {first} to go first.")


def _oversized_page(writer: _Writer, day: str) -> RecordPlan:
    """An ordinary web page, but oversized (the optional third big record)."""
    record = writer.generic("web_fetch", day)
    record.oversized = True
    return record


def _steered(steer: str) -> SpecialBuilder:
    """A builder of an ordinary record with a neutral mid-turn ``steer``."""

    def build(writer: _Writer, day: str) -> RecordPlan:
        record = writer.generic(_weighted_tool(writer.rng), day)
        record.steer = steer
        return record

    return build


# Role -> builder, in the order the roles sit in the record sequence (``_special_indices``).
_SPECIAL_BUILDERS: Final[dict[str, SpecialBuilder]] = {
    "account": _account_reference,
    "amount0": _first_quote,
    "artifact_draft": _artifact_drafted,
    "password": _portal_password,
    "sent": _sent_commitment,
    "steer1": _steered("Also check whether the loading bay is free that morning."),
    "decoy": _provisional_booking,
    "date1": _date_change,
    "mid": _mid_document,
    "drafted": _drafted_commitment,
    "amount1": _revised_quote,
    "dependency": _dependency,
    "big3": _oversized_page,
    "loud": _louder_request,
    "shared": _artifact_shared,
    "steer3": _steered("Use the side gate for any delivery this week."),
    "booking": _booking_pack,
}


def _session_sizes(rng: SeededRandom, turns: int, sessions: int) -> list[int]:
    sizes = [turns // sessions] * sessions
    for index in rng.sample(range(sessions), turns % sessions):
        sizes[index] += 1
    return sizes


def _special_indices(records: int, big3: bool) -> dict[int, str]:
    """Record index -> special role; a collision moves to the next free index."""
    # The booking pack is the second-newest record, so that it is among the newest
    # projected ones; the last record stays ordinary (and small).
    taken = {1: "account", records - 2: "booking"}
    for role, fraction in _SPECIAL_AT:
        if role == "big3" and not big3:
            continue
        index = int(records * fraction)
        while index in taken:
            index += 1
        taken[index] = role
    return taken


def plan_layout(rng: SeededRandom, values: TraceValues) -> list[TurnPlan]:
    """Sessions, owner turns and records with all their text (sizes still unset)."""
    n_sessions, n_owner = rng.between(7, 10), rng.between(84, 116)
    n_records, big3 = rng.between(64, 96), rng.percent(50)
    turns: list[TurnPlan] = []
    day = 1
    for session, size in enumerate(_session_sizes(rng, n_owner, n_sessions), start=1):
        if session > 1:
            day += rng.between(1, 2)
        turns.extend(TurnPlan(session=session, day=day) for _ in range(size))
    first_of = {t.session: i for i, t in reversed(list(enumerate(turns)))}
    plain_roles = {
        0: "rules", 2: "date0", first_of[2] + 1: "decision", first_of[2] + 3: "handover",
        first_of[3] + 1: "next_old", first_of[3] + 3: "survey", first_of[4] + 1: "priority",
        first_of[n_sessions - 1] + 2: "date2", n_owner - 2: "next_new", n_owner - 1: "close",
    }
    for index, role in plain_roles.items():
        turns[index].role = role
    open_turns = [i for i in range(4, n_owner - 2) if i not in plain_roles]
    # Carrier turns c must hold every record with at most two each: c <= n <= 2c.
    tool_turns = n_owner - len(plain_roles)
    fewest_plain = max(0, tool_turns - n_records)
    most_plain = tool_turns - (n_records + 1) // 2
    extra_plain = min(max(rng.between(6, 12), fewest_plain), most_plain)
    for index in rng.sample(open_turns, extra_plain):
        turns[index].role = "plain"
    carriers = [i for i, t in enumerate(turns) if t.role is None]
    doubles = set(rng.sample(carriers, n_records - len(carriers)))
    special = _special_indices(n_records, big3)
    writer = _Writer(rng, values)
    record_index = 0
    for index in carriers:
        turn = turns[index]
        date = values.date_text(values.start + dt.timedelta(days=turn.day - 1))
        for _ in range(2 if index in doubles else 1):
            special_role = special.get(record_index)
            record = (writer.special(special_role, date) if special_role
                      else writer.generic(_weighted_tool(rng), date))
            turn.records.append(record)
            record_index += 1
        turn.owner = " ".join(r.request for r in turn.records)
        turn.reply = " ".join(r.summary for r in turn.records)
    _write_plain_turns(rng, turns, values)
    # Invariant: every planned record sits in exactly one carrier turn (the bounds on
    # extra_plain above guarantee len(carriers) <= n_records <= 2 * len(carriers)).
    if record_index != n_records:
        raise CorpusError(Code.TRACE_SHAPE_INVALID,
                          f"placed {record_index} of {n_records} planned tool records")
    return turns


def _write_plain_turns(rng: SeededRandom, turns: list[TurnPlan], v: TraceValues) -> None:
    f = v.family
    title = f.title.format(org=v.org)
    for turn in turns:
        if turn.role == "rules":
            turn.owner = (
                f"I'm coordinating the {title[:1].lower()}{title[1:]} and will need your help "
                "with vendors, deliveries and paperwork over the next weeks. Three rules, "
                "starting now.\n"
                + forms.topic_rule_line(v.topic) + "\n"
                + forms.phone_rule_line(v.phone, v.postcode) + "\n"
                + forms.PASSWORD_RULE_LINE
            )
            turn.reply = (
                f"Understood. I will never mention {v.topic} to anyone we deal with, never "
                "send your phone number or postcode, and never paste passwords back into this "
                "chat."
            )
        elif turn.role == "date0":
            turn.owner = ("Let's fix the schedule.\n"
                          + forms.fact_line(f.date_label, v.date_text(v.dates[0])))
            turn.reply = f"Noted, the {f.date_label} is {v.date_text(v.dates[0])}."
        elif turn.role == "date2":
            turn.owner = ("I've just agreed a change.\n" + forms.correction_line(
                f.date_label, v.date_text(v.dates[1]), v.date_text(v.dates[2])))
            turn.reply = f"Noted, the {f.date_label} is now {v.date_text(v.dates[2])}."
        elif turn.role in ("next_old", "next_new"):
            task = f.next_old[0] if turn.role == "next_old" else f.next_new[0]
            deadline = v.next_old_deadline if turn.role == "next_old" else v.next_new_deadline
            turn.owner = forms.next_line(task, v.date_text(deadline))
            turn.reply = "Noted as your next action."
        elif turn.role in FIELD_TURNS:
            turn.owner, turn.reply = FIELD_TURNS[turn.role](v)
        elif turn.role == "close":
            turn.owner, turn.reply = "That's all for now, thanks.", "You're welcome; all noted."
        elif turn.role == "plain":
            turn.owner, turn.reply = rng.choice(_PLAIN_TURNS)

