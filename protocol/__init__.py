"""protocol: what the controller, its children and the reports agree on.

The controller writes these records and the children and ``report/`` read them, so they
live below all three (docs/architecture.md §2): the ``Assignment`` a child is given
through its key pipe and the ``Task`` inside it (``assignment``, ``tasks``), the fixed
exit status of each child failure (``exit_codes``), and the content-free plan and
receipts a run produces (``records``). The lockstep messages themselves are ``efold.ipc``.
"""
