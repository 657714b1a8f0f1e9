"""Processes: how a run's children start, are proven and are contained.

Launching one child and seeing it to its reaped end (``launcher``), the fork-server
template (``template``), adopting what the template forks (``adopted``), re-proving a
recorded process before touching it (``proof``), the ties that make a process a launch's
(``membership``, ``marker``, ``proctable``, ``tree``), cgroup v2 membership (``cgroups``,
``cgroup_mount``, ``run_cgroups``), the subreaper, the child's environment
(``childenv``) and containment itself (``containment``).

May import: ``controller.errors`` and the packages below ``controller``; no other room
of ``controller`` (it is the lowest).
"""
