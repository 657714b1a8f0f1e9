"""Before a local route's run claims its directory: does each local server answer, and
does it serve the model by the name the campaign gives?

One ``GET {base_url}/models`` per server (loopback, no credential, no model request:
nothing is admitted or billed). A server that does not answer refuses
(``local_server_unreachable``, naming the URL); one that lists its models, none by the
profile's name, refuses (``local_model_not_served``) saying what it serves and how its
kind of server is told the name (``profiles.SERVER_PRESETS``): a response naming another
model would otherwise stop the run mid-way as a model switch
(``lookup_model_switch_forbidden``). A server without a model list (404, or a body of
another shape) is not judged here: the inline smoke's first request is.
"""

from __future__ import annotations

import json
from typing import Final

from efold.controller.campaigns.campaign import Campaign
from efold.controller.campaigns.profiles import SERVER_PRESETS, Profile
from efold.controller.errors import ControllerError
from efold.errors import Code

TIMEOUT_S: Final = 10.0
_LIMIT: Final = 1 << 20  # a model list is small


def served_models(base_url: str) -> list[str] | None:
    """The model ids the server at ``base_url`` lists (None: it has no such list).
    Raises ``local_server_unreachable`` when nothing answers there, or when the list is
    one ``/v1`` further (a base URL given without the API root: every request would be
    a 404)."""
    listed = _model_list(base_url)
    if listed is None and not base_url.endswith("/v1") \
            and _model_list(f"{base_url}/v1") is not None:
        raise ControllerError(Code.LOCAL_SERVER_UNREACHABLE,
                              f"the server at {base_url} answers its API at {base_url}/v1: "
                              "give the base URL up to /v1")
    return listed


def _model_list(base_url: str) -> list[str] | None:
    # Imported here: only a local route's run asks, and every pilot would pay its
    # import (http.client, email, ssl) at its start.
    import urllib.error
    import urllib.request

    url = f"{base_url}/models"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    try:
        with direct.open(url, timeout=TIMEOUT_S) as reply:
            body = reply.read(_LIMIT)
    except urllib.error.HTTPError:
        return None  # it answers, without a model list there
    except (OSError, ValueError) as exc:
        raise ControllerError(Code.LOCAL_SERVER_UNREACHABLE,
                              f"no server answers at {base_url} ({exc}): start it first") from exc
    try:
        data = json.loads(body)["data"]
        return [str(m["id"]) for m in data]
    except (ValueError, KeyError, TypeError):
        return None


def check_local_servers(campaign: Campaign) -> None:
    """Each local profile's server answers and serves its model (the module docstring)."""
    for what, p in (("reader", campaign.reader), ("summariser", campaign.summariser),
                    ("judge", campaign.judge)):
        if p is not None and p.is_local:
            _check(what, p)


def _check(what: str, p: Profile) -> None:
    served = served_models(p.base_url)
    if served is None or p.model in served:
        return
    preset = SERVER_PRESETS.get(p.server or "")
    how = f"; or name it with {preset.alias}" if preset is not None else ""
    names = ", ".join(served) or "none"
    flag = "--model" if what == "reader" else f"--{what}-model"
    raise ControllerError(
        Code.LOCAL_MODEL_NOT_SERVED,
        f"{what} model {p.model!r}: the server at {p.base_url} serves {names}; give that "
        f"name ({flag} on the command line, or {what}.model in the campaign){how}")
