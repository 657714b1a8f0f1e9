"""Whatever ``register`` accepts runs to a report: the registration's plan, and the
model ids the reports name, pass the report layer's own checks before anything is
written or spent.

The report refuses any id that is not an opaque identifier (``report.join.check_id``:
``protocol.records.OPAQUE_ID``): the campaign's name, its suite, every role and arm,
every trace and probe id, and the slot and checkpoint ids made of them (which a long
trace id can push past the 200 characters an id may have); and any model id that is not
``provider/model`` of such ids (``report.join.check_model``). Checking at ``register``
with those very functions (one implementation of the rule) means a campaign the report
would refuse never reaches a smoke or an authorization.
"""

from __future__ import annotations

from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import Registration
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.report.errors import ReportError
from efold.report.join import check_model, join_receipts


def check_reportable(reg: Registration) -> None:
    """Refuse (``campaign_invalid``, naming what the report would refuse) a registration
    whose plan or model ids the report layer would not accept."""
    c = reg.campaign
    models = [("reader", c.reader), ("summariser", c.summariser), ("judge", c.judge)]
    try:
        for what, profile in models:
            if profile is not None:
                check_model(what, f"{profile.provider}/{profile.model}")
        join_receipts(plan_for(reg), [])  # the plan's check, with no receipt yet
    except ReportError as exc:
        raise CampaignError(
            Code.CAMPAIGN_INVALID,
            f"the reports would refuse this campaign: {exc.detail} (an id in a report is "
            "letters, digits and . _ : # + -, starting with a letter or digit, at most "
            "200 characters; a slot id joins repeat, role, trace and probe ids)") from exc
