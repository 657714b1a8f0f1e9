"""Run directories: a run directory from its claim to its last record.

Run roots and directories (``runroot``), the run index (``run_index``), the run log,
opening a run (``run_setup``: lease, journal, membership, the authorization it consumes
through ``authorize_run``, its permit source ``permits``), what its launches share
(``run_context``), interruption, recovery, reap, prune, aggregation into reports
(``aggregate``), and a cluster run's directory read back through its shards' own runs
(``cluster_run``, ``cluster_collect``, ``cluster_recovery``: no Ray).

May import: ``controller.campaigns``, ``controller.processes``, ``controller.errors`` and
the packages below ``controller``.
"""
