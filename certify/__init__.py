"""Fold certification (``efold-controller certify FOLD``): deterministic, offline, no
model and no money. The fold runs only in a contained child (``certify.child``); the
checks run in the controller over what that child persisted (``certify.checks``).

Modules: ``fixture`` (the generated sessions and their markers), ``session`` (the
persisted parent-linked session), ``endurance`` (the cycle driver, child side),
``checks`` (the thresholds, controller side), ``report`` (the JSON report and its
human summary).
"""
