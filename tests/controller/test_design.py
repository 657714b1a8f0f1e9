"""Two builds and two guidance files as one registered design, through the commands: a
declared comparison registers only when its two roles differ exactly where it says (the
direction check), its digests are in the registration, its roles run interleaved in one
schedule under one cap, and the report reads each pair as its paired contrast. A build
tree is pinned file by file: a module the command imports, changed after registering,
is refused like the program itself."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
FOLD = """import json, sys
from keep import KEEP
request = json.load(sys.stdin)
kept = [e for e in request["events"] if e["role"] in ("user", "assistant")][-KEEP:]
json.dump({"protocol": "efold-fold-v1", "boundary_crossed": True, "tools": [],
           "messages": [{"role": e["role"], "content": e["content"]} for e in kept]},
          sys.stdout)
"""
GUIDANCE_V1 = "You answer from the conversation so far. Reply with the value only.\n"
GUIDANCE_V2 = ("You answer from the conversation so far. Reply with the value only. "
               "Prefer the latest correction.\n")


def efold(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def checkout(root: Path, keep: int, extra: str = "") -> Path:
    root.mkdir()
    (root / "fold.py").write_text(FOLD)
    (root / "keep.py").write_text(f"{extra}KEEP = {keep}\n")
    (root / "README").write_text("a fold\n")
    return root


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build_campaign(tmp_path: Path, *, design: str, base_keep: int = 8,
                   treatment_keep: int = 40, witness_in: str = "treatment") -> str:
    base = checkout(tmp_path / "before", base_keep,
                    "# RETRIEVAL_HINT\n" if witness_in == "base" else "")
    after = checkout(tmp_path / "after", treatment_keep,
                     "# RETRIEVAL_HINT\n" if witness_in == "treatment" else "")
    python = json.dumps(sys.executable)
    return f"""name = "two-builds"
suite = "original"
roles = ["r0", "rpack"]
probe_limit = 2
cap_usd = "20.00"

[role.r0]
command = [{python}, "{base}/fold.py"]
build = "before"

[role.rpack]
command = [{python}, "{after}/fold.py"]
build = "after"

{design}"""


BUILD_PAIR = """[[design]]
roles = ["r0", "rpack"]
differs = "build"
paths = ["keep.py"]
witness = "RETRIEVAL_HINT"
"""


def register(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.toml").write_text(text)
    return efold(tmp_path, "register", "c.toml", "--output", "reg")


def test_two_builds_register_run_interleaved_and_read_as_a_pair(tmp_path: Path) -> None:
    done = register(tmp_path, build_campaign(tmp_path, design=BUILD_PAIR))
    assert done.returncode == 0, done.stderr
    digest = done.stdout.split("sha256: ")[1].strip()
    registration = json.loads((tmp_path / "reg" / "registration.json").read_bytes())
    (record,) = registration["design"]
    assert (record["base"], record["treatment"], record["differs"]) == ("r0", "rpack",
                                                                          "build")
    assert record["changed"] == ["keep.py"]
    assert record["base_sha256"] != record["treatment_sha256"]
    given = ("--registration", "reg/registration.json", "--sha256", digest)
    ran = efold(tmp_path, "pilot", "--faux", *given, "--run-dir", "run", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = tmp_path / "run"
    plan = json.loads((run / "plan.json").read_bytes())
    # One schedule: inside every (trace, probe) block, both roles, one after the other.
    slots = plan["slots"]
    blocks = [slots[i:i + 2] for i in range(0, len(slots), 2)]
    assert all({s["role"] for s in b} == {"r0", "rpack"}
               and len({(s["trace_id"], s["probe_id"]) for s in b}) == 1 for b in blocks)
    results = json.loads((run / "results.json").read_bytes())
    (pair,) = results["design"]
    assert (pair["base"], pair["treatment"], pair["differs"]) == ("r0", "rpack", "build")
    assert pair["changed"] == ["keep.py"]
    assert pair["contrast"]["pairs"] == 8
    # The treatment keeps five times the tail: it answers at least as often.
    assert pair["contrast"]["delta_pp"] >= 0
    summary = (run / "summary.md").read_text()
    assert "## Declared comparisons" in summary
    assert "| r0 → rpack | build | keep.py | 8 |" in summary


@pytest.mark.parametrize(("design", "witness_in", "said"), [
    (BUILD_PAIR.replace('["keep.py"]', '["fold.py"]'), "treatment",
     "undeclared file(s): keep.py"),
    (BUILD_PAIR, "base", "the wrong way round"),
    (BUILD_PAIR, "nowhere", "in none of the treatment's changed files"),
])
def test_the_direction_check_refuses(tmp_path: Path, design: str, witness_in: str,
                                     said: str) -> None:
    done = register(tmp_path, build_campaign(tmp_path, design=design, witness_in=witness_in))
    assert done.returncode == 2
    assert done.stderr.startswith("refused: design_direction_invalid (r0 -> rpack (build): "), \
        done.stderr
    assert said in done.stderr
    assert not (tmp_path / "reg").exists()


def test_identical_builds_are_no_comparison(tmp_path: Path) -> None:
    done = register(tmp_path, build_campaign(tmp_path, design=BUILD_PAIR.replace(
        'witness = "RETRIEVAL_HINT"\n', ""), treatment_keep=8, witness_in="nowhere"))
    assert done.returncode == 2 and "the two builds are identical" in done.stderr, \
        done.stderr


def test_roles_that_differ_outside_their_builds_refuse(tmp_path: Path) -> None:
    text = build_campaign(tmp_path, design=BUILD_PAIR).replace(
        'build = "after"\n', 'build = "after"\ntimeout_seconds = 7\n')
    done = register(tmp_path, text)
    assert done.returncode == 2
    assert "the roles differ outside their builds: timeout_seconds" in done.stderr


def test_a_build_changed_after_registering_is_refused(tmp_path: Path) -> None:
    done = register(tmp_path, build_campaign(tmp_path, design=BUILD_PAIR))
    assert done.returncode == 0, done.stderr
    digest = done.stdout.split("sha256: ")[1].strip()
    # Not the program, not an argument: a module the program imports.
    (tmp_path / "after" / "keep.py").write_text("# RETRIEVAL_HINT\nKEEP = 2\n")
    ran = efold(tmp_path, "pilot", "--faux", "--registration", "reg/registration.json",
                "--sha256", digest, "--run-dir", "run", "--quiet")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ran.stderr.startswith("refused: registration_digest_mismatch"), ran.stderr


def test_a_declared_build_digest_is_checked(tmp_path: Path) -> None:
    text = build_campaign(tmp_path, design="").replace(
        'build = "before"\n', f'build = "before"\nbuild_sha256 = "{"0" * 64}"\n')
    done = register(tmp_path, text)
    assert done.returncode == 2
    assert done.stderr.startswith("refused: build_digest_mismatch (role 'r0': "), done.stderr


def guidance_campaign(tmp_path: Path, *, second_arm: str = "pack",
                      second_sha: str | None = None) -> str:
    (tmp_path / "soul-v1.md").write_text(GUIDANCE_V1)
    (tmp_path / "soul-v2.md").write_text(GUIDANCE_V2)
    return f"""name = "two-prompts"
suite = "original"
roles = ["s0", "s1"]
probe_limit = 2
cap_usd = "20.00"

[role.s0]
arm = "pack"
guidance = "soul-v1.md"
guidance_sha256 = "{sha(GUIDANCE_V1)}"

[role.s1]
arm = "{second_arm}"
guidance = "soul-v2.md"
guidance_sha256 = "{second_sha or sha(GUIDANCE_V2)}"

[[design]]
roles = ["s0", "s1"]
differs = "guidance"
"""


def test_two_guidance_files_register_and_run(tmp_path: Path) -> None:
    done = register(tmp_path, guidance_campaign(tmp_path))
    assert done.returncode == 0, done.stderr
    registration = json.loads((tmp_path / "reg" / "registration.json").read_bytes())
    roles = {r["name"]: r for r in registration["campaign"]["roles"]}
    # The frozen prompt's text is the role's instructions, bound into the registration.
    assert roles["s0"]["instructions"] == GUIDANCE_V1
    assert roles["s1"]["guidance"] == {"path": "soul-v2.md", "sha256": sha(GUIDANCE_V2)}
    (record,) = registration["design"]
    assert (record["base_sha256"], record["treatment_sha256"]) == (sha(GUIDANCE_V1),
                                                                   sha(GUIDANCE_V2))
    digest = done.stdout.split("sha256: ")[1].strip()
    ran = efold(tmp_path, "pilot", "--faux", "--registration", "reg/registration.json",
                "--sha256", digest, "--run-dir", "run", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_bytes())
    (pair,) = results["design"]
    assert pair["differs"] == "guidance" and pair["contrast"]["pairs"] == 8


def test_a_moved_guidance_file_refuses(tmp_path: Path) -> None:
    done = register(tmp_path, guidance_campaign(tmp_path, second_sha=sha(GUIDANCE_V1)))
    assert done.returncode == 2
    assert done.stderr.startswith("refused: guidance_digest_mismatch (guidance "
                                  "'soul-v2.md'"), done.stderr


def test_a_guidance_pair_of_two_folds_refuses(tmp_path: Path) -> None:
    done = register(tmp_path, guidance_campaign(tmp_path, second_arm="cold-rebuild"))
    assert done.returncode == 2
    assert "the roles differ outside their guidance: arm" in done.stderr, done.stderr


def test_a_registration_or_run_inside_a_build_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    text = build_campaign(tmp_path, design=BUILD_PAIR)
    (tmp_path / "c.toml").write_text(text)
    inside = efold(tmp_path, "register", "c.toml", "--output", "after/reg")
    assert inside.returncode == 2
    assert inside.stderr.startswith("refused: build_contains_output (--output after/reg is "
                                    "inside role 'rpack'"), inside.stderr
    assert not (tmp_path / "after" / "reg").exists()
    # The runs root by default is ./efold-runs: run from inside a build, refused too.
    ran = efold(tmp_path / "before", "pilot", "--faux", "--campaign", str(tmp_path / "c.toml"))
    assert ran.returncode == 2
    assert ran.stderr.startswith("refused: build_contains_output (the runs root "), ran.stderr
    assert not (tmp_path / "before" / "efold-runs").exists()


def test_a_path_outside_the_build_is_not_read_as_the_build(tmp_path: Path) -> None:
    # "/x/before-data" merely starts like "/x/before": it is another directory.
    text = build_campaign(tmp_path, design=BUILD_PAIR)
    text = text.replace('build = "before"\n',
                        f'build = "before"\nsettings = {{ data = "{tmp_path}/before-data" }}\n')
    text = text.replace('build = "after"\n',
                        f'build = "after"\nsettings = {{ data = "{tmp_path}/after-data" }}\n')
    done = register(tmp_path, text)
    assert done.returncode == 2
    assert "the roles differ outside their builds: settings" in done.stderr, done.stderr


def test_a_pair_whose_roles_run_nothing_of_their_builds_refuses(tmp_path: Path) -> None:
    text = build_campaign(tmp_path, design=BUILD_PAIR)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "fold.py").write_text(FOLD)
    (shared / "keep.py").write_text("KEEP = 8\n")
    text = text.replace(f'"{tmp_path / "before"}/fold.py"', f'"{shared}/fold.py"')
    text = text.replace(f'"{tmp_path / "after"}/fold.py"', f'"{shared}/fold.py"')
    done = register(tmp_path, text)
    assert done.returncode == 2
    assert "role 'r0' runs nothing from its build" in done.stderr, done.stderr


def test_any_file_of_a_build_changed_after_registering_is_a_stale_registration(
        tmp_path: Path) -> None:
    done = register(tmp_path, build_campaign(tmp_path, design=BUILD_PAIR))
    assert done.returncode == 0, done.stderr
    digest = done.stdout.split("sha256: ")[1].strip()
    (tmp_path / "before" / "README").write_text("a fold, edited\n")  # not a declared path
    planned = efold(tmp_path, "plan", "--registration", "reg/registration.json",
                    "--sha256", digest)
    assert planned.returncode == 2
    assert planned.stderr.startswith("refused: registration_digest_mismatch (folds digest "
                                     "changed since registration: "), planned.stderr


@pytest.mark.parametrize(("paths", "code", "said"), [
    ('["../etc/passwd"]', "campaign_invalid", "never leaving it"),
    ('["./keep.py"]', "campaign_invalid", "never leaving it"),
    ('["keep.py", "nothere.py"]', "design_direction_invalid",
     "paths names no file of either build: nothere.py"),
])
def test_paths_name_files_inside_the_trees(tmp_path: Path, paths: str, code: str,
                                           said: str) -> None:
    done = register(tmp_path, build_campaign(
        tmp_path, design=BUILD_PAIR.replace('["keep.py"]', paths)))
    assert done.returncode == 2
    assert done.stderr.startswith(f"refused: {code}"), done.stderr
    assert said in done.stderr


def test_a_relative_build_with_dots_is_the_same_tree(tmp_path: Path) -> None:
    text = build_campaign(tmp_path, design=BUILD_PAIR)
    camp = tmp_path / "camp"
    camp.mkdir()
    text = text.replace('build = "before"', 'build = "../before"').replace(
        'build = "after"', 'build = "../after"')
    (camp / "c.toml").write_text(text)
    done = efold(camp, "register", "c.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
