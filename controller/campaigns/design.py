"""A registered design: comparisons a campaign declares between two of its roles, each
checked at ``register`` to differ exactly where it says, and recorded with its digests
in the registration.

Two kinds, the reference benchmark's R0/Rpack and S0/S1::

    [role.r0]                      # the fold as it is
    command = ["/usr/bin/python3", "/src/before/fold.py"]
    build = "/src/before"          # the fold's source tree, pinned file by file

    [role.rpack]                   # the same fold, one change made
    command = ["/usr/bin/python3", "/src/after/fold.py"]
    build = "/src/after"

    [role.s0]                      # one fold, two frozen system prompts
    arm = "pack"
    guidance = "soul-v1.md"        # the reader's instructions, from this file
    guidance_sha256 = "<sha256 of its bytes>"

    [[design]]
    roles = ["r0", "rpack"]        # first the base, then the treatment
    differs = "build"
    paths = ["fold.py"]            # the only files the treatment's build may change
    witness = "RETRIEVAL_HINT"     # optional: in the treatment's changed files only

    [[design]]
    roles = ["s0", "s1"]
    differs = "guidance"

The direction check (``design_direction_invalid``, before anything is registered):

* ``build``: both roles have a build tree; the trees differ in at least one file, and
  only in ``paths``; the roles are otherwise the same fold (their commands, working
  directories, settings, environment, proxy, timeout and instructions equal once each
  build's root is read as "the build"); with a ``witness``, it is in the treatment's
  changed files and in none of the base's (a pair declared the wrong way round
  refuses).
* ``guidance``: both roles read their instructions from a guidance file; the two files
  differ; the roles are the same fold (equal pins, settings, environment, proxy and
  timeout).

Every role keeps its own slots, checkpoints and receipts: a design changes what is
checked and reported, never what is shared. The roles of every comparison run in one
schedule, interleaved inside every (trace, probe) block, under one cap, and each pair is
read as the paired contrast of its two roles (``report``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import msgspec

from efold.controller.campaigns.campaign import Role
from efold.controller.campaigns.design_spec import DesignSpec
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.folds.build_tree import build_manifest, changed_paths, manifest_sha256
from efold.folds.pinning import fold_sha256
from efold.protocol.records import DesignRecord

_BUILD = "\0build\0"  # what a build's root reads as, when two roles are compared


def _invalid(spec: DesignSpec, why: str) -> CampaignError:
    return CampaignError(Code.DESIGN_DIRECTION_INVALID,
                         f"{spec.roles[0]} -> {spec.roles[1]} ({spec.differs}): {why}")


def _as_build(value: object, root: str) -> object:
    """``value`` with every occurrence of the build root ``root`` read as "the build"."""
    if isinstance(value, str):
        return value.replace(root, _BUILD)
    if isinstance(value, list):
        return [_as_build(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _as_build(v, root) for k, v in value.items()}
    return value


def _fold_fields(role: Role, root: str | None = None) -> dict[str, object]:
    """What makes ``role`` the fold it is, besides its build and its guidance."""
    fields = {"arm": role.arm if role.command is None else None, "command": role.command,
              "cwd": role.cwd, "settings": role.settings, "env": role.env,
              "proxy": None if role.proxy is None else msgspec.to_builtins(role.proxy),
              "timeout_seconds": role.timeout_seconds}
    return fields if root is None else {k: _as_build(v, root) for k, v in fields.items()}


def _differing(a: dict[str, object], b: dict[str, object]) -> list[str]:
    return [key for key in a if a[key] != b[key]]


def _check_build(spec: DesignSpec, base: Role, treatment: Role) -> DesignRecord:
    if base.build is None or treatment.build is None:
        raise _invalid(spec, "both roles need a build tree (build = DIR on a command or "
                             "proxy role)")
    before, after = build_manifest(base.build), build_manifest(treatment.build)
    changed = changed_paths(before, after)
    if not changed:
        raise _invalid(spec, "the two builds are identical, file for file")
    undeclared = [p for p in changed if p not in spec.paths]
    if undeclared:
        raise _invalid(spec, f"the builds also differ in {len(undeclared)} undeclared "
                             f"file(s): {', '.join(undeclared[:5])}")
    outside = _differing(_fold_fields(base, base.build),
                         _fold_fields(treatment, treatment.build))
    if base.instructions != treatment.instructions:
        outside.append("instructions")
    if outside:
        raise _invalid(spec, f"the roles differ outside their builds: {', '.join(outside)}")
    if spec.witness is not None:
        needle = spec.witness.encode("utf-8")

        def holds(root: str, manifest: dict[str, str]) -> bool:
            return any(p in manifest and needle in _read(os.path.join(root, p))
                       for p in changed)

        if holds(base.build, before):
            raise _invalid(spec, "the witness is in the base's build: the pair is declared "
                                 "the wrong way round, or the change is not the treatment")
        if not holds(treatment.build, after):
            raise _invalid(spec, "the witness is in none of the treatment's changed files")
    return DesignRecord(base=base.name, treatment=treatment.name, differs="build",
                        base_sha256=manifest_sha256(before),
                        treatment_sha256=manifest_sha256(after), changed=changed)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _check_guidance(spec: DesignSpec, base: Role, treatment: Role) -> DesignRecord:
    if base.guidance is None or treatment.guidance is None:
        raise _invalid(spec, "both roles need a guidance file (guidance and "
                             "guidance_sha256)")
    if base.guidance.sha256 == treatment.guidance.sha256:
        raise _invalid(spec, "the two guidance files are identical")
    outside = _differing(_fold_fields(base), _fold_fields(treatment))
    if base.build != treatment.build:
        outside.append("build")
    if not outside and fold_sha256(base) != fold_sha256(treatment):
        outside.append("fold")
    if outside:
        raise _invalid(spec, f"the roles differ outside their guidance: {', '.join(outside)}")
    return DesignRecord(base=base.name, treatment=treatment.name, differs="guidance",
                        base_sha256=base.guidance.sha256,
                        treatment_sha256=treatment.guidance.sha256, changed=[])


def check_build_digests(roles: Sequence[Role]) -> None:
    """Each role that declares its build's digest has that build (else
    ``build_digest_mismatch``, naming both digests)."""
    for role in roles:
        if role.build is not None and role.build_sha256 is not None:
            actual = manifest_sha256(build_manifest(role.build))
            if actual != role.build_sha256:
                raise CampaignError(Code.BUILD_DIGEST_MISMATCH,
                                    f"role {role.name!r}: build {role.build} has digest "
                                    f"{actual}, the campaign says {role.build_sha256}")


def check_design(roles: Sequence[Role], design: Sequence[DesignSpec]) -> list[DesignRecord]:
    """Each declared comparison, checked (module docstring) and recorded."""
    by_name = {r.name: r for r in roles}
    records = []
    for spec in design:
        base, treatment = by_name[spec.roles[0]], by_name[spec.roles[1]]
        check = _check_build if spec.differs == "build" else _check_guidance
        records.append(check(spec, base, treatment))
    return records
