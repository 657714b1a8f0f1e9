"""The pilot: one registered campaign, end to end, under one writer.

The pilot (``pilot``) and what the operator sees (``pilot_view``), one slot end to end
(``slots``), preparation and prep launches (``preparation``, ``prep_launch``), the probe
server, judging, receipts, boundary slots, evidence, preflight, smoke and fold check.

May import: ``controller.rundirs``, ``controller.campaigns``, ``controller.processes``,
``controller.errors`` and the packages below ``controller``.
"""
