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
from efold.folds.errors import FoldError
from efold.folds.pinning import fold_sha256
from efold.protocol.records import DesignRecord

_BUILD = "\0build\0"  # what a build's root reads as, when two roles are compared


def _invalid(spec: DesignSpec, why: str) -> CampaignError:
    return CampaignError(Code.DESIGN_DIRECTION_INVALID,
                         f"{spec.roles[0]} -> {spec.roles[1]} ({spec.differs}): {why}")


def _as_build(value: object, root: str) -> object:
    """``value`` with the build root ``root`` read as "the build" where a string is that
    root or a path inside it (``/src/before-data`` is not inside ``/src/before``)."""
    if isinstance(value, str):
        if value == root or value.startswith(root + os.sep):
            return _BUILD + value[len(root):]
        return value
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


def _uses_build(role: Role, root: str) -> bool:
    """Whether ``role``'s command runs something of its build: its program, an argument
    or its working directory is the tree or inside it."""
    cwd = role.cwd
    paths = [os.path.normpath(os.path.join(cwd, arg) if cwd else arg)
             for arg in role.command or () if cwd or os.path.isabs(arg)]
    if cwd:
        paths.append(os.path.normpath(cwd))
    return any(p == root or p.startswith(root + os.sep) for p in paths)


def _check_build(spec: DesignSpec, base: Role, treatment: Role) -> DesignRecord:
    if base.build is None or treatment.build is None:
        raise _invalid(spec, "both roles need a build tree (build = DIR on a command or "
                             "proxy role)")
    for role, root in ((base, base.build), (treatment, treatment.build)):
        if not _uses_build(role, root):
            raise _invalid(spec, f"role {role.name!r} runs nothing from its build {root}: "
                                 "name its program or script inside the tree (or set cwd "
                                 "there), so the build is what runs")
    before, after = _manifest(base), _manifest(treatment)
    changed = changed_paths(before, after)
    if not changed:
        raise _invalid(spec, "the two builds are identical, file for file")
    unknown = [p for p in spec.paths if p not in before and p not in after]
    if unknown:
        raise _invalid(spec, f"paths names no file of either build: {', '.join(unknown[:5])}")
    undeclared = [p for p in changed if p not in spec.paths]
    if undeclared:
        raise _invalid(spec, f"the builds also differ in {len(undeclared)} undeclared "
                             f"file(s): {', '.join(undeclared[:5])} (declare each in paths, "
                             "or make the trees equal there)")
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
            raise _invalid(spec, "the witness is in none of the treatment's changed files "
                                 "(it must mark the change itself)")
    return DesignRecord(base=base.name, treatment=treatment.name, differs="build",
                        base_sha256=manifest_sha256(before),
                        treatment_sha256=manifest_sha256(after), changed=changed)


def _manifest(role: Role) -> dict[str, str]:
    """``role``'s build manifest; a tree that cannot be pinned is the campaign's
    mistake (``campaign_invalid``, naming the role), as it is in pinning."""
    assert role.build is not None
    try:
        return build_manifest(role.build)
    except FoldError as exc:
        raise CampaignError(Code.CAMPAIGN_INVALID,
                            f"role {role.name!r}: cannot pin its build: {exc.detail}") from exc


def refuse_output_inside_builds(roles: Sequence[Role], path: str | os.PathLike[str],
                                what: str) -> None:
    """Refuse (``build_contains_output``) to write ``what`` at ``path`` when it is one of
    the roles' build trees or inside one: its files would change that build's pin, and
    every later command would refuse the registration."""
    target = os.path.realpath(os.fspath(path))
    for role in roles:
        if role.build is None:
            continue
        root = os.path.realpath(role.build)
        if target == root or target.startswith(root + os.sep):
            raise CampaignError(Code.BUILD_CONTAINS_OUTPUT,
                                f"{what} {os.fspath(path)} is inside role {role.name!r}'s "
                                f"build tree {role.build}: its files would change the "
                                "build's pin; put it outside the tree (run from another "
                                "directory, or pass --output/--runs/--run-dir elsewhere)")


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
            actual = manifest_sha256(_manifest(role))
            if actual != role.build_sha256:
                raise CampaignError(Code.BUILD_DIGEST_MISMATCH,
                                    f"role {role.name!r}: build {role.build} has digest "
                                    f"{actual}, the campaign says {role.build_sha256}: "
                                    "restore the tree, or give the digest it has now")


def check_design(roles: Sequence[Role], design: Sequence[DesignSpec]) -> list[DesignRecord]:
    """Each declared comparison, checked (module docstring) and recorded."""
    by_name = {r.name: r for r in roles}
    records = []
    for spec in design:
        base, treatment = by_name[spec.roles[0]], by_name[spec.roles[1]]
        check = _check_build if spec.differs == "build" else _check_guidance
        records.append(check(spec, base, treatment))
    return records
