"""The eight invented scenario families of the hard suite, in neutral vocabulary
(equipment, logistics, vendors).

A family fixes the *kinds* of things a trace talks about (its labels, artifacts,
equipment); the seed picks fresh names and values. Labels use only letters, digits and
spaces so that they fit the fact-line form of FORMS.md, and no word here may collide
with an abstention label, the credential form or the identifier form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Family:
    slug: str
    title: str  # "{org}" is replaced by the owner's organisation
    owner: str  # how vendors address the owner
    orgs: tuple[str, ...]
    vendor_kinds: tuple[str, ...]  # appended to an invented surname: "Ashby Kilns"
    items: tuple[str, ...]  # equipment and supplies
    topics: tuple[str, ...]  # confidential topics (never in filler)
    mid_label: str  # identifier in the middle of the long document
    mid_prefix: str
    mid_document: str
    date_label: str
    amount_label: str
    artifact: str
    commitment_sent: str  # "{vendor}" is replaced
    commitment_drafted: str
    abstention_label: str
    next_old: tuple[str, str]  # (task, keyword)
    next_new: tuple[str, str]
    booking_pack: str
    channel: str


FAMILIES: Final[dict[str, Family]] = {
    f.slug: f
    for f in (
        Family(
            slug="kiln", title="Studio kiln replacement for {org}", owner="the studio manager",
            orgs=("Fernside Pottery", "Claymore Studio", "Brookhollow Ceramics"),
            vendor_kinds=("Kilns", "Ceramic Supply", "Refractories", "Electrical"),
            items=("front-loading kiln", "kiln shelves", "kiln props", "controller cable",
                   "extraction hood", "glaze buckets", "pallet of clay"),
            topics=("the studio relocation", "the partner buyout", "the rent review"),
            mid_label="installation permit number", mid_prefix="PRM",
            mid_document="kiln installation survey",
            date_label="kiln delivery date", amount_label="kiln deposit",
            artifact="firing schedule",
            commitment_sent="delivery confirmation to {vendor}",
            commitment_drafted="escalation email to {vendor}",
            abstention_label="serial number of the kiln controller",
            next_old=("order the spare kiln shelves", "shelves"),
            next_new=("book the electrician for the kiln circuit", "electrician"),
            booking_pack="delivery booking pack", channel="studio-team",
        ),
        Family(
            slug="cider", title="Pressing season equipment for {org}", owner="the co-op secretary",
            orgs=("Orchard Lane Cider Co-op", "Hillbrook Cider Co-op", "Five Acre Cider Co-op"),
            vendor_kinds=("Presses", "Bottling", "Haulage", "Cooperage"),
            items=("rack and cloth press", "fruit mill", "bottle filler", "crate stacks",
                   "stainless tanks", "pallet of bottles", "crown capper"),
            topics=("the merger talks", "the land sale", "the board vote"),
            mid_label="press hire agreement number", mid_prefix="AGR",
            mid_document="press hire agreement",
            date_label="pressing day date", amount_label="press hire fee",
            artifact="pressing rota",
            commitment_sent="crate order to {vendor}",
            commitment_drafted="complaint email to {vendor}",
            abstention_label="serial number of the fruit mill",
            next_old=("wash the spare crates", "crates"),
            next_new=("confirm the bottling slot with the hauliers", "bottling"),
            booking_pack="haulage booking pack", channel="coop-volunteers",
        ),
        Family(
            slug="lighting", title="Lighting rig hire for {org}", owner="the production manager",
            orgs=("Tidewater Playhouse", "Corn Exchange Theatre", "Riverside Arts Hall"),
            vendor_kinds=("Lighting", "Staging", "Transport", "Rigging"),
            items=("moving head fixtures", "truss sections", "dimmer racks", "cable looms",
                   "chain hoists", "lighting desk", "flight cases"),
            topics=("the venue closure", "the sponsor exit", "the funding cut"),
            mid_label="venue work order", mid_prefix="WO",
            mid_document="venue technical specification",
            date_label="rig install date", amount_label="rig hire quote",
            artifact="rigging plot",
            commitment_sent="hire confirmation to {vendor}",
            commitment_drafted="damage claim to {vendor}",
            abstention_label="serial number of the lighting desk",
            next_old=("label the cable looms", "looms"),
            next_new=("book the hoist inspection", "inspection"),
            booking_pack="transport booking pack", channel="crew-chat",
        ),
        Family(
            slug="localisation", title="App localisation vendors for {org}",
            owner="the product lead",
            orgs=("Lumen Maps", "Pinewood Apps", "Harbour Budget"),
            vendor_kinds=("Translations", "Language Services", "Test Lab", "Devices"),
            items=("string files", "test handsets", "glossary sheets", "screenshot sets",
                   "device racks", "review builds", "style guides"),
            topics=("the acquisition offer", "the layoff plan", "the rebrand"),
            mid_label="translation job number", mid_prefix="JOB",
            mid_document="translation statement of work",
            date_label="release date", amount_label="translation quote",
            artifact="glossary",
            commitment_sent="scope confirmation to {vendor}",
            commitment_drafted="quality complaint to {vendor}",
            abstention_label="serial number of the test handset",
            next_old=("freeze the source strings", "strings"),
            next_new=("sign off the German review build", "German"),
            booking_pack="device lab booking pack", channel="l10n-team",
        ),
        Family(
            slug="grant", title="Equipment grant application for {org}",
            owner="the project coordinator",
            orgs=("Millbrook Community Workshop", "Eastfield Repair Cafe", "Kingsmead Tool Library"),
            vendor_kinds=("Foundation", "Trust", "Supplies", "Accountants"),
            items=("lathe", "dust extraction unit", "tool cabinets", "workbenches",
                   "safety screens", "storage racking", "sharpening station"),
            topics=("the trustee resignation", "the building dispute", "the audit finding"),
            mid_label="application number", mid_prefix="APP",
            mid_document="grant application form",
            date_label="panel meeting date", amount_label="requested grant amount",
            artifact="budget table",
            commitment_sent="eligibility confirmation to {vendor}",
            commitment_drafted="appeal letter to {vendor}",
            abstention_label="charity registration number",
            next_old=("collect the supplier quotes", "quotes"),
            next_new=("get the treasurer signature", "treasurer"),
            booking_pack="panel booking pack", channel="workshop-trustees",
        ),
        Family(
            slug="oven", title="Bakery oven repair for {org}", owner="the bakery owner",
            orgs=("Wheatsheaf Bakery", "Crumb and Crust", "Northbank Bakehouse"),
            vendor_kinds=("Oven Services", "Catering Parts", "Electrical", "Logistics"),
            items=("deck oven", "heating elements", "door seals", "proving cabinet",
                   "thermostat", "baking stones", "steam generator"),
            topics=("the second shop", "the lease buyback", "the supplier audit"),
            mid_label="repair work order", mid_prefix="RWO",
            mid_document="oven inspection report",
            date_label="engineer visit date", amount_label="repair quote",
            artifact="maintenance log",
            commitment_sent="parts order to {vendor}",
            commitment_drafted="refund request to {vendor}",
            abstention_label="serial number of the deck oven",
            next_old=("clean the oven chamber", "chamber"),
            next_new=("test the new thermostat", "thermostat"),
            booking_pack="engineer booking pack", channel="bakery-shifts",
        ),
        Family(
            slug="trailer", title="Boat trailer refit for {org}", owner="the club bosun",
            orgs=("Saltmarsh Sailing Club", "Heron Reach Rowing Club", "Greyhaven Yacht Club"),
            vendor_kinds=("Trailers", "Marine Supplies", "Towing", "Galvanising"),
            items=("trailer axle", "wheel bearings", "winch strap", "keel rollers",
                   "lighting board", "spare wheel", "hitch lock"),
            topics=("the clubhouse sale", "the membership dispute", "the mooring review"),
            mid_label="survey certificate number", mid_prefix="SUR",
            mid_document="trailer survey report",
            date_label="trailer collection date", amount_label="trailer refit quote",
            artifact="launch checklist",
            commitment_sent="refit confirmation to {vendor}",
            commitment_drafted="delay complaint to {vendor}",
            abstention_label="chassis plate number",
            next_old=("grease the keel rollers", "rollers"),
            next_new=("check the hitch fitting with the towing firm", "hitch"),
            booking_pack="towing booking pack", channel="club-bosuns",
        ),
        Family(
            slug="print", title="Print run for the {org} catalogue", owner="the editor",
            orgs=("Quillfeather Press", "Ninefold Books", "Slate and Cord Editions"),
            vendor_kinds=("Printers", "Paper Merchants", "Binders", "Freight"),
            items=("paper stock", "proof sheets", "pallet of catalogues", "cover board",
                   "shrink wrap", "binding thread", "ink samples"),
            topics=("the distributor change", "the author contract", "the price rise"),
            mid_label="print job number", mid_prefix="PJ",
            mid_document="printing specification",
            date_label="print delivery date", amount_label="print run quote",
            artifact="proof sheet",
            commitment_sent="paper order to {vendor}",
            commitment_drafted="reprint request to {vendor}",
            abstention_label="ISBN of the catalogue",
            next_old=("approve the cover proof", "cover"),
            next_new=("send the freight details to the warehouse", "freight"),
            booking_pack="freight booking pack", channel="editorial",
        ),
    )
}

SURNAMES: Final = (
    "Northgate", "Ashby", "Brackwell", "Calloway", "Dunmore", "Elsworth", "Fairholm",
    "Glenrock", "Harwood", "Ingleby", "Kestrel", "Larchfield", "Marlowe", "Netherby",
    "Oakhurst", "Pendle", "Quarrington", "Redmire", "Saltash", "Thornbury", "Upton",
    "Varley", "Westcombe", "Yarrow",
)
PEOPLE: Final = (
    "Ada", "Bram", "Cleo", "Dev", "Edda", "Finn", "Gita", "Hal", "Iris", "Jonah", "Kira",
    "Lev", "Mira", "Nico", "Orla", "Pax", "Rhea", "Sami", "Tova", "Uma", "Vik", "Wren",
    "Yuri", "Zara",
)
