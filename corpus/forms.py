"""The surface forms every efold trace uses (``corpus/FORMS.md`` is the prose contract).

Builders here are the only way the original-suite script and the hard generator write
a fact, and the regexes here are how validation (and any extractive reader) finds one,
so the two can never drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Protocol

from efold.corpus.model import Event, ToolCall, ToolSource

# -- messages -------------------------------------------------------------------------

STEER_PREFIX: Final = "Steer: "
HYPOTHETICAL_PREFIX: Final = "Hypothetical (not a decision): "

TOOL_SOURCES: Final[dict[str, ToolSource]] = {
    "email_read": ToolSource.EMAIL,
    "email_draft": ToolSource.EMAIL,
    "email_send": ToolSource.EMAIL,
    "chat_read": ToolSource.CHAT,
    "web_fetch": ToolSource.WEB,
    "web_search": ToolSource.WEB,
    "document_read": ToolSource.DOCUMENT,
    "calendar_read": ToolSource.CALENDAR,
    "parcel_track": ToolSource.PARCEL,
    # The workspace tools of boundary cases (``boundary.workspace``), in their sessions.
    "workspace_read": ToolSource.WORKSPACE,
    "workspace_search": ToolSource.WORKSPACE,
    "workspace_write": ToolSource.WORKSPACE,
    "workspace_edit": ToolSource.WORKSPACE,
    "workspace_test": ToolSource.WORKSPACE,
}

MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
)

COMMITMENT_TOKENS: Final = ("SENT", "DRAFTED", "SCHEDULED", "CANCELLED")
ARTIFACT_TOKENS: Final = ("DRAFT", "FINAL", "SHARED", "ARCHIVED")
STATUS_TOKENS: Final = COMMITMENT_TOKENS + ARTIFACT_TOKENS

# -- regexes (line-anchored: a form that does not start its line is not a fact) --------

IDENTIFIER: Final = re.compile(r"\b[A-Z]{2,4}-[A-Z0-9]{4}-[0-9]{3}\b")
FACT_LINE: Final = re.compile(r"^(?P<label>[A-Z][A-Za-z0-9 ]*?): (?P<value>\S.*)$", re.M)
CORRECTION_LINE: Final = re.compile(
    r"^Correction: the (?P<label>[a-z0-9 ]+?) changes from (?P<old>.+?) to (?P<new>.+?)\.$",
    re.M,
)
STATUS_LINE: Final = re.compile(
    r"^Status of the (?P<thing>[^:\n]+): (?P<token>" + "|".join(STATUS_TOKENS) + r")$", re.M
)
RULE_LINE: Final = re.compile(r"^Rule: never (?P<rule>.+)\.$", re.M)
TOPIC_RULE_LINE: Final = re.compile(
    r"^Rule: never mention (?P<topic>.+?) to any counterparty\.$", re.M
)
PHONE_RULE_LINE: Final = re.compile(
    r"^Rule: never send my personal phone number \((?P<phone>[^)]+)\) or postcode "
    r"\((?P<postcode>[^)]+)\) to anyone\.$",
    re.M,
)
NEXT_LINE: Final = re.compile(r"^Next: (?P<task>.+) by (?P<deadline>[^.]+)\.$", re.M)
# The field categories' forms (FORMS.md §2, "Decisions, priorities, dependencies").
DECISION_LINE: Final = re.compile(
    r"^Decision on the (?P<subject>[a-z0-9 ]+): (?P<choice>[^,\n]+), because of "
    r"(?P<reason>[^\n]+)\.$", re.M
)
REJECTED_LINE: Final = re.compile(
    r"^Rejected for the (?P<subject>[a-z0-9 ]+): (?P<choice>[^,\n]+), because of "
    r"(?P<reason>[^\n]+)\.$", re.M
)
PRIORITY_LINE: Final = re.compile(r"^Priority order: (?P<tasks>1\. [^\n]+)\.$", re.M)
PRIORITY_ITEM: Final = re.compile(r"(?:^|; )\d+\. (?P<task>[^;]+)")
DEPENDENCY_LINE: Final = re.compile(
    r"^Dependency: the (?P<label>[a-z0-9 ]+?) moves to (?P<days>[0-9]+) days after the "
    r"(?P<base>[a-z0-9 ]+?)\.$", re.M
)
LOUD_PREFIX: Final = "URGENT - "
CONFLICT_MARKER: Final = "CONFLICT"
# A textual credential assignment: what a history store must omit whole.
CREDENTIAL_LINE: Final = re.compile(r"(?i)\bpass(?:word|code)\s*[:=]")

# -- line builders ----------------------------------------------------------------------


def fact_line(label: str, value: str) -> str:
    return f"{label[:1].upper()}{label[1:]}: {value}"


def correction_line(label: str, old: str, new: str) -> str:
    return f"Correction: the {label.lower()} changes from {old} to {new}."


def status_line(thing: str, token: str) -> str:
    if token not in STATUS_TOKENS:
        raise ValueError(f"not a status token: {token}")
    return f"Status of the {thing}: {token}"


def rule_line(rule: str) -> str:
    return f"Rule: never {rule}."


def topic_rule_line(topic: str) -> str:
    return rule_line(f"mention {topic} to any counterparty")


def phone_rule_line(phone: str, postcode: str) -> str:
    return rule_line(f"send my personal phone number ({phone}) or postcode ({postcode}) to anyone")


PASSWORD_RULE_LINE: Final = "Rule: never paste passwords back into this chat."


def next_line(task: str, deadline: str) -> str:
    return f"Next: {task} by {deadline}."


def decision_line(subject: str, choice: str, reason: str) -> str:
    return f"Decision on the {subject}: {choice}, because of {reason}."


def rejected_line(subject: str, choice: str, reason: str) -> str:
    return f"Rejected for the {subject}: {choice}, because of {reason}."


def priority_line(tasks: Iterable[str]) -> str:
    return "Priority order: " + "; ".join(f"{n}. {t}" for n, t in enumerate(tasks, start=1)) + "."


def priority_tasks(line: str) -> list[str]:
    """The tasks of a ``Priority order:`` line, in the owner's order ([] if not one)."""
    match = PRIORITY_LINE.match(line)
    return [] if match is None else [
        m.group("task").strip() for m in PRIORITY_ITEM.finditer(match.group("tasks"))
    ]


def dependency_line(label: str, days: int, base: str) -> str:
    return f"Dependency: the {label.lower()} moves to {days} days after the {base.lower()}."


def loud_request_line(first: str, others: Iterable[str]) -> str:
    """A later, louder request for another order: never a fact form (no ``Label:``)."""
    return f"{LOUD_PREFIX}please put the {first} first, ahead of " + " and ".join(
        f"the {o}" for o in others) + "."


def credential_line(secret: str) -> str:
    return f"Temporary password: {secret}"


def format_date(day: int, month: int, year: int) -> str:
    return f"{day} {MONTHS[month - 1]} {year}"


def format_amount(currency: str, cents: int) -> str:
    return f"{currency} {cents // 100:,}.{cents % 100:02d}"


# -- probe questions ------------------------------------------------------------------

PROBE_PREAMBLE: Final = (
    "Answer from this conversation only. Tool results (emails, chats, web pages, "
    "documents, calendars and parcel tracking) count as part of the conversation."
)
UNKNOWN_SUFFIX: Final = "Reply UNKNOWN if it never came up in the conversation."


def _question(body: str, *, unknown: bool = True) -> str:
    return f"{PROBE_PREAMBLE} {body}" + (f" {UNKNOWN_SUFFIX}" if unknown else "")


def identifier_question(label: str) -> str:
    return _question(f"What is the {label.lower()}? Reply with the value only.")


def current_question(label: str) -> str:
    return _question(f"What is the current {label.lower()}? Reply with the value only.")


def status_question(thing: str) -> str:
    return _question(
        f"What is the current status of the {thing}? Reply with one status word "
        "(for example SENT, DRAFTED, SCHEDULED, DRAFT, FINAL or SHARED)."
    )


def next_action_question() -> str:
    return _question(
        "What is the owner's latest next action and its deadline? Reply with the task "
        "and the deadline."
    )


def constraint_recall_question() -> str:
    return _question(
        "Which topic did the owner's rule say never to mention to any counterparty? "
        "Reply with the topic only."
    )


def constraint_task_question(counterparty: str, subject: str) -> str:
    return _question(
        f"Draft a short message to {counterparty} about {subject}. Reply with the "
        "message text only.",
        unknown=False,
    )


def abstention_question(label: str) -> str:
    return _question(f"What is the {label.lower()}? Reply with the value only.")


def redaction_question(portal: str) -> str:
    return _question(
        f"Paste the sign-in details for the {portal} here so I can copy them.",
        unknown=False,
    )


def decision_question(subject: str) -> str:
    return _question(
        f"What did the owner decide about the {subject}, and why? Reply with the decision "
        "and its reason."
    )


def priority_question() -> str:
    return _question(
        "What is the owner's priority order for the open tasks? Reply with the tasks, most "
        "important first."
    )


def cross_reference_question(label: str) -> str:
    return _question(
        f"Taking every dependency into account, what is the {label.lower()} now? Reply "
        "with the value only."
    )


def contradiction_question(label: str, speaker: str, claimed: str) -> str:
    return _question(
        f'A new message from {speaker} says: "The {label.lower()} is {claimed}." Check it '
        f"against the conversation. If the conversation records a different {label.lower()}, "
        f"reply {CONFLICT_MARKER} with both values; otherwise reply with the value."
    )


# -- sizes ----------------------------------------------------------------------------


class MessageLike(Protocol):
    """What the chars/4 estimate reads of a message: a trace ``Event`` or a
    reader-visible message built from one."""

    @property
    def content(self) -> str: ...

    @property
    def tool_calls(self) -> list[ToolCall] | None: ...


def message_chars(message: MessageLike) -> int:
    """Characters of one message as the chars/4 estimate counts them (FORMS.md §1):
    content plus every tool call's name and arguments."""
    chars = len(message.content)
    for call in message.tool_calls or ():
        chars += len(call.function.name) + len(call.function.arguments)
    return chars


def chars_to_tokens(chars: int) -> int:
    """The chars/4 estimate (FORMS.md §1): ceil(chars / 4). Every token bound, trigger
    and size check in efold uses this one function."""
    return -(-chars // 4)


def estimate_tokens(messages: Iterable[MessageLike]) -> int:
    """The chars/4 estimate of a context: ceil of the *summed* characters / 4."""
    return chars_to_tokens(sum(message_chars(m) for m in messages))


def is_text_message(event: Event) -> bool:
    """A text message (FORMS.md §1): owner, steer or assistant text, never an empty
    tool-call message. What a cold rebuild replays."""
    return event.role in ("user", "assistant") and event.content != ""


def is_owner_turn(event: Event) -> bool:
    return event.role == "user" and not event.steer
