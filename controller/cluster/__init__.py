"""The cluster: one campaign over a Ray cluster (``efold-controller cluster``).

The Ray dispatch (``dispatch``: the only module that imports Ray), what runs on a
shard's node (``shard_host``: the shard's host and the task that brings its records
back, wrapped by ``dispatch``) and the keeper that starts each shard's controller
outside Ray's process tree (``shard_keeper``). How a plan
is sharded is ``campaigns.shards``; how a cluster run is read back is
``rundirs.cluster_run`` and ``rundirs.cluster_collect``.

May import: ``controller.pilot``, ``controller.rundirs``, ``controller.campaigns``,
``controller.processes``, ``controller.errors`` and the packages below ``controller``.
"""
