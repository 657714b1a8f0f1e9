"""The owner turns that carry the field categories' facts in a hard trace (issue 19):
the decision with its rejected alternative, the planned handover date, the survey date
it comes to depend on, and the owner's ranking of open tasks (``corpus/FORMS.md`` §2).

``hard_layout`` decides *where* each turn sits (by role); this module only writes the
text, in the forms of ``corpus.forms``. Invariant: a reply never starts a line with a
``Label: `` (assistant text is never a fact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from efold.corpus import forms
from efold.corpus.hard_values import HANDOVER_LABEL, SURVEY_LABEL, TraceValues


def _decision_turn(v: TraceValues) -> tuple[str, str]:
    d = v.field
    return ("I've compared the two offers for the " + d.subject + ".\n"
            + forms.rejected_line(d.subject, d.rejected, d.rejected_reason[0]) + "\n"
            + forms.decision_line(d.subject, d.choice, d.reason[0]),
            f"Noted, {d.choice} for the {d.subject}.")


def _handover_turn(v: TraceValues) -> tuple[str, str]:
    planned = v.date_text(v.field.planned)
    return ("One more date for the plan.\n" + forms.fact_line(HANDOVER_LABEL, planned),
            f"Noted, the {HANDOVER_LABEL} is {planned}.")


def _survey_turn(v: TraceValues) -> tuple[str, str]:
    survey = v.date_text(v.field.survey)
    return ("The survey is booked.\n" + forms.fact_line(SURVEY_LABEL, survey),
            f"Noted, the {SURVEY_LABEL} is {survey}.")


def _priority_turn(v: TraceValues) -> tuple[str, str]:
    return ("Here is how I rank the open tasks.\n" + forms.priority_line(v.field.tasks),
            "Noted; I will work through them in that order.")


FIELD_TURNS: Final[dict[str, Callable[[TraceValues], tuple[str, str]]]] = {
    "decision": _decision_turn, "handover": _handover_turn, "survey": _survey_turn,
    "priority": _priority_turn,
}
