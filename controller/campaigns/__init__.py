"""Campaigns: what an operator asks efold to measure, frozen before anything runs.

Campaign files (``campaign``; the bundled ones are this package's ``*.toml``), provider
and judge profiles (``profiles``, ``judge_profile``), subsets (``subset``), stop policies
(``stops``), the registration that freezes them (``registration``), the plan and its
cost (``plan``), how a plan is sharded over a cluster and its cap partitioned
(``shards``), inventory feasibility (``feasibility``) and what reaches a report
(``reportable``).

May import: ``controller.processes``, ``controller.errors`` and the packages below
``controller``.
"""
