"""``open_run``: the one setup ``pilot`` and ``preflight`` share (``controller.rundirs.run_setup``).
What it writes, in which order, what it refuses, and what it leaves on the way out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from efold_pilot_kit import small_registration

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.errors import ControllerError
from efold.controller.rundirs import authorize_run, run_setup
from efold.controller.rundirs.run_setup import OpenRun, open_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.registry.lease import LeaseState, probe_lease


def _open(run: Path, *, admitting: bool, inside: object = None) -> OpenRun:
    reg, raw = small_registration()

    async def body() -> OpenRun:
        async with open_run(reg, raw, run, admitting=admitting) as opened:
            assert probe_lease(run).state is LeaseState.LIVE
            if isinstance(inside, BaseException):
                raise inside
            return opened

    return anyio.run(body, backend="trio")


def _record_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The steps of ``open_run`` that write or read the run, in the order they happen."""
    steps: list[str] = []
    publish, consume, load = (run_setup.publish_exclusive, authorize_run.consume_faux,
                              run_setup.campaign_items)

    def published(run: Path, name: str, data: bytes) -> None:
        assert probe_lease(run).state is LeaseState.LIVE and (run / "journal.sqlite").exists()
        steps.append(name)
        publish(run, name, data)

    def consumed(*args: Any, **kwargs: Any) -> str:
        steps.append("authorization")
        return consume(*args, **kwargs)

    def loaded(*args: Any) -> Any:
        steps.append("suite")
        return load(*args)

    monkeypatch.setattr(run_setup, "publish_exclusive", published)
    monkeypatch.setattr(authorize_run, "consume_faux", consumed)
    monkeypatch.setattr(run_setup, "campaign_items", loaded)
    return steps


def test_a_preflight_run_takes_the_lease_then_writes_its_records_without_authorization(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _record_steps(monkeypatch)
    run = claim_run_dir(tmp_path / "run")
    opened = _open(run, admitting=False)
    assert steps == ["registration.json", "plan.json", "suite"]
    assert opened.ctx.source.cap_units == 0 and opened.ctx.budgets.max_requests == 0
    assert set(opened.items) >= {s.trace_id for s in opened.plan.slots}
    assert sorted(os.listdir(run)) == [".efold-lease", "journal.sqlite", "plan.json",
                                       "registration.json"]
    assert probe_lease(run).state is LeaseState.RELEASED


def test_an_admitting_run_consumes_its_authorization_before_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _record_steps(monkeypatch)
    run = claim_run_dir(tmp_path / "run")
    opened = _open(run, admitting=True)
    assert steps == ["authorization", "registration.json", "plan.json", "suite"]
    assert opened.ctx.source.cap_units > 0 and opened.ctx.budgets.max_requests > 0
    assert (run / "authorization-consumed.json").exists()


def test_an_admitting_run_refuses_a_real_reader_before_writing_anything(
        tmp_path: Path) -> None:
    text = ('name = "real"\nsuite = "original"\nroles = ["native"]\nprobe_limit = 1\n'
            'cap_usd = "60"\n[reader]\nprovider = "openai"\nmodel = "gpt-5-mini"\n'
            'base_url = "https://api.openai.com/v1"\ncredential_env = "OPENAI_API_KEY"\n')
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path / "run")

    async def body() -> None:
        async with open_run(reg, encode_registration(reg), run, admitting=True):
            pytest.fail("opened a run for a real reader")

    with pytest.raises(ControllerError) as err:
        anyio.run(body, backend="trio")
    assert err.value.code is Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE
    assert os.listdir(run) == []


def test_an_error_inside_releases_the_lease(tmp_path: Path) -> None:
    run = claim_run_dir(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        _open(run, admitting=False, inside=KeyboardInterrupt())
    assert probe_lease(run).state is LeaseState.RELEASED
