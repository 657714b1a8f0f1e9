"""boundary: cases where an agent acts on a workspace after the fold (docs/boundary.md).

A case is a directory (the pre-fold session, a workspace fixture, the ``ef-boundary.yml``
sidecar); its oracles judge the final workspace, the action log and the fold's declared
state, never the agent's prose. Modules: ``sidecar`` (the closed schema), ``case`` (a
case directory and its digest), ``lock`` (revisions), ``identity`` (environment
identity), ``actions`` (action capture and normalization), ``oracles`` (the closed
union of machine oracles), ``workspace`` (the agent's tools over a workspace copy).
"""
