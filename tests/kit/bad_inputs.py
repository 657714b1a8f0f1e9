"""The bad-input tally: inputs an operator gets wrong, each run as a real
``efold-controller`` process, and how the command answered.

Every case must end in one of the two documented forms, never a traceback:

- a **usage error** (exit 2, click's ``Usage: ...`` then ``Error: ...`` on stderr): the
  command line itself is wrong;
- a **refusal** (exit 2, ``refused: CODE (what, where)`` on stderr; under ``--json`` also
  one JSON object on stdout): the command line is fine, its input is not.

The expected code of each refusal is part of the case, so a code that points the wrong
way fails as surely as a traceback. And every case must lose nothing: the workspace (its
files, sizes and modification times, run directories included) is the same after the
command as before it.

Operators are not root: the whole tally runs as this process's user and, when that is
root, again as ``nobody`` with umask 002 (``tests/kit/as_user.py``) on a workspace that
user owns. A few cases (a directory the user may not write) only mean something for an
ordinary user and run only as one.

``tests/controller/test_bad_inputs.py`` asserts all of this; run as a script, the module
prints the tally for any ``efold-controller`` (an older build's, for a before/after)::

    python tests/kit/bad_inputs.py [--exe PATH/TO/efold-controller] [--user nobody]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from as_user import USERS, drop, give, ordinary_python, workspace

SMALL = """
name = "small"
suite = "original"
roles = ["native", "pack"]
probe_limit = 2
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
"""
WRONG_SHA = "0" * 64
# A campaign whose reader is a real provider (at a closed loopback port): the real route's
# refusals need one.
REAL = SMALL.replace('cap_usd = "60.00"', 'cap_usd = "500"') + """
[reader]
provider = "openai"
model = "gpt-5"
base_url = "http://127.0.0.1:9/v1"
"""
# What register must refuse (issue 35): each would have registered and failed later.
REFUSED_AT_REGISTER = {
    "cred.toml": REAL.replace('base_url = "http://127.0.0.1:9/v1"',
                              'base_url = "http://127.0.0.1:9/v1"\ncredential_env = "PATH"'),
    "deadline.toml": SMALL + "[deadlines]\nprobe_seconds = 1e300\n",
    "slash.toml": SMALL.replace('"original"', '"sub/convos"'),
    "negcap.toml": SMALL.replace('"60.00"', '"-5"'),
    "zero.toml": SMALL + '[reader]\nprovider = "faux"\ncatalog = "/dev/zero"\n',
}


def chat(number: str, *, jsonl: bool) -> str:
    """A two-message chat transcript whose user message carries ``number`` as a member."""
    user = '{"role":"user","content":"What is in notes.txt?","n":' + number + "}"
    answer = '{"role":"assistant","content":"Nothing yet."}'
    return f"{user}\n{answer}\n" if jsonl else f'{{"messages": [\n{user},\n{answer}\n]}}\n'
# Every command runs with a provider account id set (``authorize`` needs one before it
# writes), and no credential.
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("EFOLD_")},
       "EFOLD_ACCOUNT_ID": "acct-bad-inputs"}
REFUSED = re.compile(r"^refused: ([a-z0-9_]+)(?: \((.*)\))?$", re.MULTILINE)
REJECTED = re.compile(r"^rejected: ([a-z0-9_]+)  \S", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    """``argv`` holds ``{name}`` placeholders filled from the workspace; ``code`` is the
    expected refusal code, or None for a usage error."""

    name: str
    argv: tuple[str, ...]
    code: str | None
    json: bool = False  # --json: the refusal is also one JSON object on stdout
    # ``rejected``: a validator's report (``rejected: CODE PATH (detail)`` per input on
    # stdout, exit 2) instead of one refusal: ``corpus validate`` lists every problem.
    form: str = "refused"
    # Only an ordinary user's answer means anything (root may write any directory).
    ordinary: bool = False


def case(name: str, argv: str, code: str | None = None, *, json: bool = False,
         form: str = "refused", ordinary: bool = False) -> Case:
    return Case(name, tuple(argv.split()), code, json, form, ordinary)


def ordinary_user(user: str) -> bool:
    """Whether ``user`` (``self`` or ``nobody``) is an ordinary, non-root user."""
    return user == "nobody" or os.geteuid() != 0


CASES: tuple[Case, ...] = (
    # register
    case("register-typo-bundled", "register defualt --output {w}/new", "campaign_not_found"),
    case("register-missing-file", "register {w}/nope.toml --output {w}/new", "campaign_not_found"),
    case("register-no-args", "register", None),
    case("register-no-output", "register {w}/small.toml", None),
    case("register-output-taken", "register {w}/small.toml --output {w}/reg",
         "publish_target_exists"),
    case("register-not-toml", "register {w}/garbage.json --output {w}/new", "campaign_invalid"),
    case("register-invalid-campaign", "register {w}/bad.toml --output {w}/new", "campaign_invalid"),
    case("register-empty-file", "register {w}/empty.json --output {w}/new", "campaign_invalid"),
    case("register-output-is-file", "register {w}/small.toml --output {w}/afile.txt", None),
    case("register-unknown-option", "register {w}/small.toml --output {w}/new --fast", None),
    # plan
    case("plan-no-args", "plan", None),
    case("plan-missing-registration", "plan --registration {w}/nope.json --sha256 {wrong}", None),
    case("plan-sha-not-hex", "plan --registration {reg} --sha256 abc", None),
    case("plan-sha-mismatch", "plan --registration {reg} --sha256 {wrong}",
         "registration_digest_mismatch"),
    case("plan-empty-registration", "plan --registration {w}/empty.json --sha256 {empty_sha}",
         "registration_invalid"),
    case("plan-garbage-registration", "plan --registration {w}/garbage.json --sha256 {garbage_sha}",
         "registration_invalid"),
    case("plan-not-a-registration", "plan --registration {w}/other.json --sha256 {other_sha}",
         "registration_invalid"),
    case("plan-registration-is-dir", "plan --registration {w}/adir --sha256 {wrong}", None),
    case("plan-sha-without-registration", "plan --sha256 {sha}", None),
    # preflight
    case("preflight-no-args", "preflight", None),
    case("preflight-sha-mismatch", "preflight --registration {reg} --sha256 {wrong}",
         "registration_digest_mismatch"),
    case("preflight-empty-registration",
         "preflight --registration {w}/empty.json --sha256 {empty_sha}", "registration_invalid"),
    case("preflight-sha-not-hex", "preflight --registration {reg} --sha256 xyz", None),
    # pilot
    case("pilot-both-routes", "pilot --faux --real", None),
    case("pilot-local-and-faux", "pilot --faux --local", None),
    case("pilot-reader-without-model", "pilot --reader http://127.0.0.1:9/v1", None),
    case("pilot-server-without-model", "pilot --server llama-server", None),
    case("pilot-reader-not-loopback", "pilot --reader http://192.0.2.1/v1 --model m",
         "campaign_invalid"),
    case("pilot-reader-nothing-there", "pilot --reader http://127.0.0.1:9/v1 --model m",
         "local_server_unreachable"),
    case("pilot-runs-and-run-dir", "pilot --faux --runs {w}/r1 --run-dir {w}/r2", None),
    case("pilot-registration-without-sha", "pilot --faux --registration {reg}", None),
    case("pilot-sha-without-registration", "pilot --faux --sha256 {sha}", None),
    case("pilot-keep-answers-faux", "pilot --faux --keep-answers", None),
    case("pilot-run-dir-exists", "pilot --faux --run-dir {w}/adir", "run_root_exists"),
    case("pilot-runs-is-file", "pilot --faux --runs {w}/afile.txt", None),
    case("pilot-sha-mismatch", "pilot --faux --registration {reg} --sha256 {wrong}",
         "registration_digest_mismatch"),
    case("pilot-sha-not-hex", "pilot --faux --registration {reg} --sha256 abc", None),
    case("pilot-empty-registration",
         "pilot --faux --registration {w}/empty.json --sha256 {empty_sha}", "registration_invalid"),
    case("pilot-real-without-registration", "pilot --real",
         "lookup_pilot_real_route_unavailable"),
    case("pilot-real-faux-reader",
         "pilot --real --registration {reg} --sha256 {sha} --run-dir {w}/new",
         "lookup_pilot_real_route_unavailable"),
    case("pilot-unknown-option", "pilot --faux --fast", None),
    # smoke
    case("smoke-no-args", "smoke", None),
    case("smoke-sha-mismatch",
         "smoke --registration {reg} --sha256 {wrong} --run-dir {w}/new",
         "registration_digest_mismatch"),
    case("smoke-faux-reader", "smoke --registration {reg} --sha256 {sha} --run-dir {w}/new",
         "lookup_pilot_real_route_unavailable"),
    # aggregate
    case("aggregate-no-run", "aggregate", None),
    case("aggregate-not-a-run", "aggregate {w}/notrun", "run_not_found"),
    case("aggregate-missing-dir", "aggregate {w}/nope", "run_not_found"),
    case("aggregate-output-exists", "aggregate {run} --output {w}/adir", "output_exists"),
    case("aggregate-latest-empty-root", "aggregate --latest --root {w}/emptyroot", "run_not_found"),
    case("aggregate-latest-root-is-file", "aggregate --latest --root {w}/afile.txt",
         "runs_root_invalid"),
    case("aggregate-run-and-latest", "aggregate {run} --latest", None),
    case("aggregate-json-not-a-run", "aggregate {w}/notrun --json", "run_not_found", json=True),
    # recover and reap
    case("recover-no-run", "recover", None),
    case("recover-not-a-run", "recover {w}/notrun", "run_not_found"),
    case("recover-json-not-a-run", "recover {w}/notrun --json", "run_not_found", json=True),
    case("recover-missing-dir", "recover {w}/nope", "run_not_found"),
    case("recover-latest-empty-root", "recover --latest --root {w}/emptyroot", "run_not_found"),
    case("reap-not-a-run", "reap {w}/notrun", "run_not_found"),
    case("reap-json-not-a-run", "reap {w}/notrun --json", "run_not_found", json=True),
    case("reap-missing-dir", "reap {w}/nope", "run_not_found"),
    # runs and show
    case("runs-missing-root", "runs {w}/nope", "runs_root_invalid"),
    case("runs-root-is-file", "runs {w}/afile.txt", "runs_root_invalid"),
    case("show-not-a-run", "show {w}/notrun", "run_not_found"),
    case("show-json-not-a-run", "show {w}/notrun --json", "run_not_found", json=True),
    case("show-missing-dir", "show {w}/nope", "run_not_found"),
    case("show-latest-empty-root", "show --latest --root {w}/emptyroot", "run_not_found"),
    case("show-no-run", "show", None),
    # authorize, verify-authorization, keygen
    case("authorize-no-args", "authorize", None),
    case("authorize-missing-key",
         "authorize --registration {reg} --sha256 {sha} --key {w}/nope.key --out {w}/auth.json "
         "--output-root {w}/new --approver ops --approval-reference T-1",
         "private_file_missing"),
    case("authorize-public-key-as-private",
         "authorize --registration {reg} --sha256 {sha} --key {w}/k.pub --out {w}/auth.json "
         "--output-root {w}/new --approver ops --approval-reference T-1",
         "private_read_refused"),  # a key readable by others is no private key
    case("authorize-out-exists",
         "authorize --registration {reg} --sha256 {sha} --key {w}/k.key --out {w}/afile.txt "
         "--output-root {w}/new --approver ops --approval-reference T-1",
         "publish_target_exists"),
    case("authorize-sha-mismatch",
         "authorize --registration {reg} --sha256 {wrong} --key {w}/k.key --out {w}/auth.json "
         "--output-root {w}/new --approver ops --approval-reference T-1",
         "registration_digest_mismatch"),
    case("verify-missing-file", "verify-authorization {w}/nope.json --trust {w}/k.pub",
         "private_file_missing"),
    case("verify-garbage", "verify-authorization {w}/garbage.json --trust {w}/k.pub",
         "authorization_invalid"),
    case("verify-empty", "verify-authorization {w}/empty.json --trust {w}/k.pub",
         "authorization_invalid"),
    case("verify-trust-not-a-key", "verify-authorization {w}/garbage.json --trust {w}/afile.txt",
         "approver_key_invalid"),
    case("verify-no-args", "verify-authorization", None),
    case("keygen-exists", "keygen --out {w}/k", "publish_target_exists"),
    case("keygen-no-out", "keygen", None),
    case("keygen-missing-parent", "keygen --out {w}/nope/sub/k", "path_refused"),
    # fold and corpus
    case("fold-check-unknown", "fold check nosuchfold", "fold_unknown"),
    case("fold-check-no-args", "fold check", None),
    case("corpus-validate-missing", "corpus validate {w}/nope.json", None),
    case("corpus-validate-garbage", "corpus validate {w}/garbage.json", "trace_schema_invalid",
         form="rejected"),
    case("corpus-show-missing", "corpus show {w}/nope.json", None),
    case("corpus-import-missing", "corpus import openai-chat {w}/nope.jsonl --out {w}/new",
         None),
    case("corpus-import-garbage", "corpus import openai-chat {w}/garbage.json --out {w}/new",
         "corpus_import_invalid"),
    # subsets and one-step pilot
    case("register-unknown-role", "register {w}/small.toml --output {w}/new --roles nosuch",
         "subset_unknown"),
    case("register-unknown-trace", "register {w}/small.toml --output {w}/new --traces nosuch",
         "subset_unknown"),
    case("register-unknown-probe", "register {w}/small.toml --output {w}/new --probes nosuch",
         "subset_unknown"),
    case("register-limit-zero", "register {w}/small.toml --output {w}/new --limit 0", None),
    case("pilot-campaign-typo", "pilot --faux --campaign defualt --run-dir {w}/new",
         "campaign_not_found"),
    case("pilot-campaign-and-registration",
         "pilot --faux --campaign default --registration {reg} --sha256 {sha}", None),
    case("pilot-real-campaign", "pilot --real --campaign default --run-dir {w}/new",
         "lookup_pilot_real_route_unavailable"),
    case("pilot-unknown-role", "pilot --faux --campaign {w}/small.toml --roles nosuch "
         "--run-dir {w}/new", "subset_unknown"),
    case("pilot-quiet-and-verbose", "pilot --faux --quiet --verbose", None),
    # compare and prune
    case("compare-not-a-run", "compare {w}/notrun {run}", "run_not_found"),
    case("compare-missing", "compare {run} {w}/nope", "run_not_found"),
    case("compare-json-not-a-run", "compare {run} {w}/notrun --json", "run_not_found",
         json=True),
    case("compare-no-b", "compare {run}", None),
    case("prune-missing-root", "prune {w}/nope --yes", "runs_root_invalid"),
    case("prune-not-confirmed", "prune {w}/runs", "prune_not_confirmed"),
    case("prune-not-a-run", "prune {w} --run {w}/notrun --yes", "run_not_found"),
    case("prune-bad-duration", "prune {w}/runs --older-than soon --yes", None),
    case("prune-negative-keep", "prune {w}/runs --keep -1 --yes", None),
    # analyze
    case("analyze-empty-set", "analyze {w}/empty.json", "comparison_invalid"),
    case("analyze-garbage-set", "analyze {w}/garbage.json", "comparison_invalid"),
    case("analyze-not-a-set", "analyze {w}/other.json --json", "comparison_invalid",
         json=True),
    case("analyze-missing-file", "analyze {w}/nope.json", None),
    case("analyze-not-a-run", "analyze --run {w}/notrun --arms native,pack", "run_not_found"),
    case("analyze-unknown-role", "analyze --run {run} --arms native,nosuch",
         "comparison_invalid"),
    case("analyze-one-arm", "analyze --run {run} --arms native", None),
    case("analyze-run-without-arms", "analyze --run {run}", None),
    case("analyze-file-and-run", "analyze {w}/other.json --run {run}", None),
    case("analyze-attest-a-file", "analyze {w}/other.json --attest-representative", None),
    case("analyze-write-exists", "analyze --run {run} --arms native,pack --write "
         "{w}/afile.txt", "publish_target_exists"),
    # issue 35: what register accepted and a later step refused, hung on or crashed on
    case("register-credential-env-inherited", "register {w}/cred.toml --output {w}/new",
         "credential_env_inherited"),
    case("register-probe-seconds-1e300", "register {w}/deadline.toml --output {w}/new",
         "campaign_invalid"),
    case("register-suite-with-slash", "register {w}/slash.toml --output {w}/new",
         "campaign_invalid"),
    case("register-cap-negative", "register {w}/negcap.toml --output {w}/new",
         "campaign_invalid"),
    case("register-catalog-dev-zero", "register {w}/zero.toml --output {w}/new",
         "input_file_not_regular"),
    case("register-dev-zero", "register /dev/zero --output {w}/new", "input_file_not_regular"),
    case("register-fifo", "register {w}/fifo --output {w}/new", "input_file_not_regular"),
    case("plan-registration-fifo", "plan --registration {w}/fifo --sha256 {wrong}",
         "input_file_not_regular"),
    case("corpus-import-fifo", "corpus import openai-chat {w}/fifo --out {w}/new",
         "input_file_not_regular"),
    case("corpus-import-100000-digits", "corpus import openai-chat {w}/digits.jsonl --out "
         "{w}/new", "corpus_import_integer_too_long"),
    case("corpus-import-nan", "corpus import openai-chat {w}/nan.json --out {w}/new",
         "corpus_import_number_not_finite"),
    case("corpus-import-200-mb", "corpus import openai-chat {w}/huge.json --out {w}/new",
         "input_file_too_large"),
    case("corpus-show-fifo", "corpus show {w}/fifo", "input_file_not_regular"),
    case("pilot-faux-trust", "pilot --faux --trust {w}/k.pub", None),
    case("pilot-faux-authorization", "pilot --faux --authorization {w}/afile.txt", None),
    case("analyze-no-args", "analyze", None),
    case("smoke-untrusted-approver",
         "smoke --registration {realreg} --sha256 {realsha} --authorization {w}/auth.json "
         "--trust {w}/k2.pub --run-dir {w}/bound", "authorization_untrusted"),
    case("pilot-real-authorization-fifo",
         "pilot --real --registration {realreg} --sha256 {realsha} --authorization {w}/fifo "
         "--trust {w}/k.pub --run-dir {w}/bound", "input_file_not_regular"),
    case("pilot-runs-unwritable", "pilot --faux --runs {w}/locked/runs", "path_not_writable",
         ordinary=True),
    case("aggregate-output-unwritable", "aggregate {run} --output {w}/locked/out",
         "path_not_writable", ordinary=True),
    case("corpus-generate-unwritable", "corpus generate --suite original --out {w}/locked/gen",
         "path_not_writable", ordinary=True),
    # the group
    case("unknown-command", "frobnicate", None),
)


def make_workspace(root: Path, exe: list[str], user: str = "self") -> dict[str, str]:
    """A directory ``user`` owns holding what the cases name (a registration, a finished
    faux run, approver key pairs, an authorization, empty/garbage/other files, a FIFO,
    campaigns register must refuse, a non-run directory, an empty runs root, a directory
    the user may not write), and the placeholder values."""
    w = root
    values = {"w": str(w), "home": str(w / "home"), "user": user, "wrong": WRONG_SHA}
    (w / "small.toml").write_text(SMALL)
    (w / "bad.toml").write_text('name = "bad"\nsuite = "nowhere"\nroles = ["native"]\n')
    (w / "empty.json").write_bytes(b"")
    (w / "garbage.json").write_bytes(b"{not json")
    (w / "other.json").write_bytes(b'{"a": 1}')
    (w / "afile.txt").write_text("a file\n")
    (w / "adir").mkdir()
    (w / "emptyroot").mkdir()
    (w / "notrun").mkdir()
    (w / "notrun" / "plan.json").write_text("{}")
    (w / "cwd").mkdir()
    (w / "home").mkdir()  # HOME: whatever a command keeps per user is in the snapshot
    (w / "sub" / "convos").mkdir(parents=True)
    (w / "real.toml").write_text(REAL)
    for name, text in REFUSED_AT_REGISTER.items():
        (w / name).write_text(text)
    os.mkfifo(w / "fifo", 0o664)
    (w / "digits.jsonl").write_text(chat("9" * 100_000, jsonl=True))
    (w / "nan.json").write_text(chat("NaN", jsonl=False))
    with (w / "huge.json").open("wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse: 200 MB that take no disk
    for path in (w, *w.rglob("*")):
        give(path, user)
        if path.is_file() and not path.is_fifo():
            # Files the operator wrote that others cannot change, whatever umask this
            # test runs under: a group-writable one is refused before its content is
            # read (``private_read_refused``), which is not the refusal a case names.
            path.chmod(0o644)
    if user == "nobody":  # its group, nogroup, is no private group: a 0775 root is refused
        w.chmod(0o755)
    locked = w / "locked"  # made last: the user may read it, not create in it
    locked.mkdir()
    give(locked, user)
    locked.chmod(0o555)

    def run(*argv: str, ok: tuple[int, ...] = (0,)) -> str:
        done = subprocess.run([*drop(user), *exe, *argv], capture_output=True, text=True,
                              cwd=w / "cwd", timeout=600, check=False, env=env(values),
                              umask=0o002)
        if done.returncode not in ok:
            raise RuntimeError(f"workspace step {argv} failed: {done.stdout}{done.stderr}")
        return done.stdout

    out = run("register", str(w / "small.toml"), "--output", str(w / "reg"))
    sha = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("sha256: "))
    registration = next(line.split(": ", 1)[1] for line in out.splitlines()
                        if line.startswith("registration: "))
    out = run("pilot", "--faux", "--registration", registration, "--sha256", sha,
              "--runs", str(w / "runs"), "--no-progress", ok=(0, 3))  # a stopped run is a run
    run_dir = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("run: "))
    run("keygen", "--out", str(w / "k"))
    run("keygen", "--out", str(w / "k2"))
    out = run("register", str(w / "real.toml"), "--output", str(w / "realreg"))
    realsha = next(line.split(": ", 1)[1] for line in out.splitlines()
                   if line.startswith("sha256: "))
    realreg = next(line.split(": ", 1)[1] for line in out.splitlines()
                   if line.startswith("registration: "))
    run("authorize", "--registration", realreg, "--sha256", realsha, "--key",
        str(w / "k.key"), "--out", str(w / "auth.json"), "--output-root", str(w / "bound"),
        "--approver", "ops", "--approval-reference", "T-1")

    def digest(name: str) -> str:
        return hashlib.sha256((w / name).read_bytes()).hexdigest()

    values.update({"reg": registration, "sha": sha, "run": run_dir,
                   "realreg": realreg, "realsha": realsha,
                   "empty_sha": digest("empty.json"), "garbage_sha": digest("garbage.json"),
                   "other_sha": digest("other.json")})
    return values


def env(values: dict[str, str]) -> dict[str, str]:
    """The commands' environment: ``ENV`` with the workspace's own HOME."""
    return {**ENV, "HOME": values["home"]}


@dataclass(frozen=True)
class Answer:
    case: Case
    exit: int
    form: str  # usage | refused | traceback | unclear
    code: str | None  # the refusal's code
    detail: str  # the refusal's "(what, where)", without the parentheses
    json_ok: bool  # under --json: stdout is one JSON object naming the code
    changed: tuple[str, ...]  # workspace paths created, removed or modified
    stderr: str

    @property
    def verdict(self) -> str:
        """``ok``, or what is wrong: ``traceback``, ``unclear`` (neither form),
        ``wrong-form`` (usage where a refusal was due, or the reverse), ``misleading``
        (another code), ``no-detail`` (a bare code: it says neither what nor where),
        ``exit`` (not 2), ``no-json``, ``changed`` (it lost or made something)."""
        if self.form in ("traceback", "unclear"):
            return self.form
        expected = "usage" if self.case.code is None else self.case.form
        if self.form != expected:
            return "wrong-form"
        if self.case.code is not None and self.code != self.case.code:
            return "misleading"
        if self.form == "refused" and not self.detail:
            return "no-detail"
        if self.exit != 2:
            return "exit"
        if self.case.json and not self.json_ok:
            return "no-json"
        if self.changed:
            return "changed"
        return "ok"


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time; a directory by
    its entries only (a temporary file made and removed changes its mtime, and loses
    nothing)."""
    return {str(p.relative_to(root)): (0, 0) if p.is_dir() and not p.is_symlink()
            else (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def run_case(c: Case, exe: list[str], values: dict[str, str]) -> Answer:
    w = Path(values["w"])
    argv = [part.format(**values) for part in c.argv]
    before = _snapshot(w)
    done = subprocess.run([*drop(values["user"]), *exe, *argv], capture_output=True, text=True,
                          cwd=w / "cwd", timeout=300, check=False, stdin=subprocess.DEVNULL,
                          env=env(values), umask=0o002)
    after = _snapshot(w)
    changed = tuple(sorted(k for k in before.keys() | after.keys()
                           if before.get(k) != after.get(k)))
    err = done.stderr
    match = REFUSED.search(err) or REJECTED.search(err if c.form == "rejected" else "")
    if "Traceback (most recent call last)" in err + done.stdout:
        form = "traceback"
    elif err.startswith("Usage:") and "\nError: " in err:
        form = "usage"
    elif match is not None:
        form = "refused" if match.re is REFUSED else "rejected"
    else:
        form = "unclear"
    json_ok = False
    if c.json:
        try:
            document = json.loads(done.stdout)
        except ValueError:
            document = None
        json_ok = isinstance(document, dict) and match is not None \
            and match.group(1) in json.dumps(document)
    code = match.group(1) if match else None
    detail = (match.group(2) or "") if match and match.re is REFUSED else ""
    return Answer(c, done.returncode, form, code, detail, json_ok, changed, err)


def tally(exe: list[str], user: str = "self") -> list[Answer]:
    with workspace(user) as w:
        values = make_workspace(w, exe, user)
        return [run_case(c, exe, values) for c in CASES
                if ordinary_user(user) or not c.ordinary]


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the bad-input tally.")
    parser.add_argument("--exe", default=shutil.which("efold-controller")
                        or os.path.join(os.path.dirname(sys.executable), "efold-controller"))
    parser.add_argument("--user", choices=USERS, default="self",
                        help="run every case as this user (nobody: needs root)")
    args = parser.parse_args()
    if args.user == "self":
        answers = tally([args.exe])
    else:
        with ordinary_python() as python:  # ours may be under /root, where nobody cannot go
            if python is None:
                parser.error("no Python the ordinary user can run")
            answers = tally([python, "-m", "efold.controller"], args.user)
    for a in answers:
        first = next((line for line in a.stderr.splitlines() if line.strip()), "")
        print(f"{a.verdict:11} {a.case.name:36} exit {a.exit:<3} {a.form:9} "
              f"{a.code or '-':38} {first[:90]}")
    counts: dict[str, int] = {}
    for a in answers:
        counts[a.verdict] = counts.get(a.verdict, 0) + 1
    print(f"{len(answers)} inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if counts.get("ok", 0) == len(answers) else 1


if __name__ == "__main__":
    sys.exit(main())
