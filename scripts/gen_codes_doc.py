"""Generate docs/codes.md: every fixed code of ``efold.errors.Code``, what it means, and
the sets and exit statuses the source defines for them.

    python scripts/gen_codes_doc.py            rewrite docs/codes.md
    python scripts/gen_codes_doc.py --check    exit 1 if docs/codes.md is stale

Sections and their order come from the section comments of ``errors.py``
(``# -- Title ---``); the enum has no per-member descriptions, so the one-line meanings
live in ``MEANINGS`` below. Every enum member must have a line and every line must name
a member (``problems``); ``tests/test_docs.py`` fails otherwise.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "codes.md"
ERRORS_SOURCE = ROOT / "errors.py"

_NOT_RAISED = ("Not raised by this build (no code path produces it); the source states "
               "no meaning beyond its name.")

# One line per code: what it means to the person who sees it. Written from the code that
# raises it (grep for ``Code.<NAME>``) and the comments beside the members.
MEANINGS: dict[str, str] = {
    # -- Refusals that may continue
    "not_admitted_input_envelope": "A request's accounted input U_k exceeds the input "
        "envelope I (272,000, or the model's catalog `context_window` when smaller); "
        "refused before any hold.",
    "lookup_request_limit": "The probe run already made its allowed number of requests "
        "(`budgets.max_requests`, at most 10); refused before any hold.",
    "not_admitted_cap": "Admitting one more maximum reservation Rmax would exceed the cap "
        "C; scheduling ends and later slots are visited as `unadmitted`.",
    "lookup_stopped": "Admission is closed because the run has a sticky stop; refused "
        "before any hold, and given to every later slot.",
    "lookup_slot_terminal": "This probe run already lost or aborted a request; no further "
        "request of the slot is admitted.",
    # -- Policy and integrity
    "lookup_body_mismatch": "The body about to be sent differs from the one admitted; "
        "sticky stop, hold retained.",
    "lookup_invalid_usage": "Reported usage is malformed, conflicting or a count outside "
        "[0, 2^53), or a settlement claims no usage; sticky stop, hold retained.",
    "lookup_unknown_tier": "The response names a service tier other than default, flex "
        "or priority; sticky stop, hold retained.",
    "lookup_method_forbidden": _NOT_RAISED + " It is on the probe child's allowlist.",
    "lookup_external_fetch_forbidden": "A caller option tried to supply its own fetch, "
        "transport, client, URL or proxy; refused before any hold, sticky stop.",
    "lookup_prompt_cache_key_forbidden": "The payload's prompt cache key is missing or "
        "differs from the slot's assigned key, or is set when none was assigned; sticky "
        "stop.",
    "lookup_cache_assignment_invalid": "The probe child could not read back from the "
        "journal exactly its own cache key and snapshot, or another slot has the same key.",
    "lookup_auxiliary_callers_forbidden": "The payload asks for a structured output "
        "schema (an auxiliary caller); refused before any hold, sticky stop.",
    "lookup_model_switch_forbidden": "The payload or the response names a model other "
        "than the contracted one and its catalog-listed dated snapshots, or the response "
        "names two models; sticky stop, hold retained.",
    "lookup_preparation_forbidden": "A prep child that was given no summariser route (no "
        "`[summariser]` model, or a role whose fold does not summarise) asked for a hold "
        "(`Admit`): answered with `Stop`, its checkpoint is not prepared, sticky stop.",
    "lookup_route_mismatch": "The route differs from the registered contract: its limits, "
        "streaming, model, reasoning effort, output limit or transport, or a reservation "
        "that is not Rmax; sticky stop.",
    "lookup_retry_profile_forbidden": "A caller option tried to configure retries or "
        "backoff; refused before any hold, sticky stop.",
    "lookup_tools_forbidden": "The payload offers or calls a tool other than the history "
        "lookup tools, or a malformed tool; or the reader called a tool the checkpoint "
        "does not offer.",
    "lookup_native_identity_forbidden": _NOT_RAISED + " It is on the probe child's "
        "allowlist.",
    "lookup_unguarded_dispatch": "A request went out without a guard ticket or without "
        "`consume`, or an answer arrived with no admitted request; sticky stop.",
    "lookup_arrival_persist_failed": _NOT_RAISED,
    "lookup_arrival_receipt_invalid": _NOT_RAISED,
    "ipc_out_of_order": "A message kind the lockstep state does not allow next (sent by "
        "the peer, or attempted by this side); the channel is poisoned, sticky stop.",
    "ipc_frame_too_large": "A frame's declared length exceeds the maximum frame size "
        "(1 MiB by default); refused before the body is read, sticky stop.",
    "ipc_bad_mac": "A frame's HMAC-SHA256 tag does not verify; sticky stop.",
    "ipc_binding_mismatch": "A message's epoch, slot or worker identity differs from the "
        "channel's; sticky stop.",
    "lookup_worker_lost": "The child ended without a terminal message, or left a process "
        "behind (which stops the run); holds it still had open are retained as lost.",
    "lookup_repeated_loss": "Stop policy: two consecutive admitted slots lost a request "
        "on the provider side.",
    "lookup_invalid_rate": "A catalog rate or money amount is not a finite, non-negative "
        "decimal, or the reader's or summariser's model has no price in its profile's "
        "catalog (the bundled one, or the profile's `catalog`).",
    "lookup_preparation_invalid": "The slot's checkpoint could not be prepared (its prep "
        "child failed, or its snapshot does not verify); the slot is `unadmitted`.",
    "judge_reply_invalid": "The judge's reply (a `[judge]` profile) was not the strict "
        "score JSON: one integer 0-5 per rubric dimension, nothing else. The slot keeps "
        "its deterministic score; the judge scored nothing for it (counted, never guessed).",
    "inventory_infeasible": "The checkpoint's first request does not fit the input "
        "envelope, or the arm does not apply to the suite; the slot is `skipped`, never "
        "launched.",
    "inventory_opaque_reader": "The checkpoint holds provider items (a provider "
        "compaction) that only another provider or wire API can read; the plan marks the "
        "slot inventory-infeasible for this reason and it is `skipped`, never sent.",
    "lookup_pilot_real_route_unavailable": "The real route is refused, for the reason the "
        "detail states, before anything is written and without consuming the "
        "authorization: `pilot --real` without a passing `smoke` record of the same "
        "registration and routes beside its run directory; a missing grant part "
        "(`--authorization`, `--trust`, `EFOLD_ACCOUNT_ID`, a credential variable a "
        "profile names, or for `pilot --real` `--registration` or `--run-dir`); `CI` set "
        "and a route that is not a loopback server without a credential; or a faux reader "
        "on the real route (`pilot --real`, `smoke`). `pilot --faux` refuses an endpoint "
        "reader or a summariser model with it too.",
    "unreconciled_containment": "A launch's processes could not be re-proven or killed; "
        "an absorbing stop that outranks every other.",
    "interrupted": "The operator interrupted the run (SIGINT or SIGTERM); admission "
        "closed and later slots are visited without a launch.",
    "smoke_failed": "A local run's inline smoke (the schedule's first slot of every role, "
        "run first) did not pass: a slot of it did not complete, or a stop ended it; "
        "nothing after it was admitted (exit 3).",
    # -- registry/
    "publish_target_exists": "A file efold publishes exclusively already exists; "
        "published files are never overwritten.",
    "private_read_refused": "A private file is a symlink, not a single-link regular file, "
        "not owned by this user, readable or writable by others, or changed while read.",
    "fsync_failed": "An fsync failed; fatal, never retried.",
    "lease_held": "Another live process holds the run lease (for example `reap` while a "
        "controller runs).",
    "lease_not_held": "This process no longer holds the run lease (released, or the lease "
        "file or its descriptor was removed or replaced).",
    "journal_invalid": "The journal is missing, not a private single-link regular file, "
        "replaced while opening, has stray side files (a `journal.sqlite.creating` among them:"
        " a creation cut short there), or does not read as a journal.",
    "journal_read_only": _NOT_RAISED,
    "journal_write_failed": "A journal write failed; nothing more may be recorded and the "
        "run stops.",
    "authorization_invalid": "The authorization is malformed, too large, of an unknown "
        "version, outside the validity-window policy, or its signature does not verify.",
    "authorization_untrusted": "The authorization is signed by a key that is not in the "
        "operator's trusted list.",
    "authorization_domain_mismatch": "A faux authorization was given where a real one is "
        "needed, or the reverse.",
    "authorization_binding_mismatch": "A value the authorization binds (registration, "
        "cap, schedule, deadlines, output root, account...) differs from this run; the "
        "detail names the field, never its value.",
    "authorization_expired": "The authorization's validity window has ended.",
    "authorization_not_yet_valid": "The authorization is issued in the future.",
    "authorization_consumed": "The authorization id is already burned; an authorization "
        "is single-use.",
    "authorization_claim_invalid": "The consumption marker or claim of a burned "
        "authorization is malformed or of the wrong kind.",
    "lease_file_invalid": "The lease file is not a private single-link regular file of "
        "this user, or cannot be created or written.",
    "path_refused": "A path component is a link, an ancestor belongs to or is writable by "
        "another user, the burn registry overlaps the run root, or a parent is missing.",
    "path_not_writable": "A directory efold must create something in (the runs root, "
        "`aggregate --output`'s parent, `corpus generate --out`) is not writable by this "
        "user; the detail names it with its mode and owner.",
    "publish_failed": "Creating, writing, linking or removing the temporary file of a "
        "publish failed.",
    "private_dir_refused": "A private directory is not a directory, not owned by this "
        "user, writable by others, already exists when it must be new, or cannot be made.",
    "private_file_missing": "A private file that must exist does not.",
    "run_root_in_use": "The run root holds more than its lease and journal when an "
        "authorization is consumed; a run root must be fresh.",
    "approver_key_invalid": "An approver key file is not a PEM Ed25519 key.",
    # -- input files
    "input_file_not_regular": "An input file an operator named (a campaign, catalog, "
        "registration, suite trace or probe file, transcript to import, boundary case "
        "sidecar, session or `boundary.lock`, a real run's `--authorization`) is a device, "
        "FIFO, socket or directory: "
        "refused without reading it (docs/reliability.md, register and import).",
    "input_file_too_large": "An input file is larger than its kind's bound (1 MiB for a "
        "campaign, catalog, sidecar or `boundary.lock`, 16 MiB for a registration, 64 MiB "
        "for a trace, a transcript to import or a case's session, 8 MiB for a probe file); "
        "refused before reading past the bound.",
    "input_file_unreadable": "An input file is missing or cannot be opened or read; the "
        "detail gives the system's reason.",
    # -- ipc/
    "ipc_truncated_frame": "The stream ended inside a frame.",
    "ipc_eof": "The peer closed or died (end of stream at a frame boundary).",
    "ipc_bad_message": "A frame body is not one of the messages of its direction (strict "
        "decode); sticky stop.",
    "ipc_seq_mismatch": "A replayed or skipped sequence number; sticky stop.",
    "ipc_poisoned": "A call on a channel that already failed; the first failure is the "
        "cause.",
    "ipc_cancelled": "This side abandoned an exchange half-way (cancellation); the channel "
        "is never trusted again.",
    "ipc_timeout": "No complete frame arrived within the exchange deadline.",
    # -- guard/
    "lookup_stop_failed": "Telling the permit source to stop the run failed.",
    "lookup_empty_final_output": "The reader's final reply holds no answer text; the slot "
        "is `invalid`.",
    "lookup_option_forbidden": "An unknown or non-empty caller option, or a payload key "
        "or option outside the wire format's allowlist; refused before any hold, sticky "
        "stop.",
    "lookup_payload_forbidden": "The payload's shape is not allowed (wrong types, "
        "`store` not false, disallowed items or values); refused before any hold, sticky "
        "stop.",
    "lookup_send_reentered": "A second send under one permit, or a request while another "
        "is in flight; sticky stop.",
    "lookup_redirect_forbidden": "The provider answered with a redirect (3xx); sticky "
        "stop, hold retained.",
    "lookup_http_status": "The provider answered with a non-2xx status: 401, 403 and 429 "
        "stop the run; any other loses the request (hold retained, slot terminal).",
    "lookup_stream_lost": "The response broke off or could not be read before its "
        "terminal event; lost, hold retained, slot terminal.",
    "lookup_missing_usage": "A completed response reported no usable usage; lost, the "
        "whole hold retained, slot terminal.",
    "lookup_response_failed": "The provider reported a failed response or an error "
        "event; lost, hold retained, slot terminal.",
    "lookup_cost_exceeds_hold": "The catalog cost of the reported usage exceeds the hold; "
        "sticky stop, hold retained.",
    "lookup_test_only_source": "The in-memory, test-only permit source was given where a "
        "real permit source is required.",
    "lookup_cost_mismatch": "The cost a settlement claims differs from the ledger's own "
        "pricing of the same usage; sticky stop.",
    "catalog_invalid": "The price catalog is unreadable, not valid TOML of the known "
        "version, has no or duplicate models, an unknown key, a rate that is not a "
        "decimal, or a `context_window` that is not a positive integer.",
    "lookup_usage_input_above_admitted": "Reported input exceeds the admitted input "
        "budget U_k (or the envelope I); sticky stop, hold retained.",
    "lookup_usage_output_above_max": "Reported output exceeds the maximum output O "
        "(128,000); sticky stop, hold retained.",
    "lookup_usage_reasoning_above_output": "Reported reasoning tokens exceed reported "
        "output; sticky stop, hold retained.",
    "lookup_usage_cache_above_input": "Reported cache-read plus cache-write tokens exceed "
        "reported input; sticky stop, hold retained.",
    "lookup_usage_input_below_payload": "Reported input tokens are implausibly few for "
        "the request sent: input tokens x 64 is below the admitted payload's UTF-8 bytes "
        "(no tokenizer packs 64 bytes into one token); sticky stop, hold retained.",
    "lookup_response_duplicate_key": "An object of a provider's reply (a body or one "
        "event, at any depth, keys compared after unescaping) repeats a key: two readings "
        "of one field, nothing of the reply is read; sticky stop, hold retained.",
    "lookup_model_unreported": "A completed or incomplete reply names no model where its "
        "wire format always does (Chat Completions, Responses, Messages); sticky stop, "
        "hold retained.",
    "lookup_request_deadline": "The guard aborted a sent request at its deadline (own "
        "abort): hold retained, slot terminal.",
    "lookup_response_too_large": "The guard aborted a response above its size limit (own "
        "abort): hold retained, slot terminal.",
    "lookup_send_failed": "The request did not (completely) leave: connection refused or "
        "write failed; lost, hold retained, slot terminal.",
    "lookup_settle_failed": "The permit source refused or failed to settle a permit; the "
        "run stops.",
    "lookup_permit_invalid": "An unknown, reused or twice-settled permit, or a source "
        "that answered neither permit nor refusal; sticky stop.",
    "lookup_hold_mismatch": "The granted hold differs from the guard's own Rmax; sticky "
        "stop before anything is sent.",
    "lookup_hold_unverified": "The probe child could not read its hold back from the "
        "journal as granted (slot, epoch, amount, body digest, still active).",
    "lookup_settlement_fault": "Closing a permit raised; the permit closes as an "
        "integrity stop with the whole hold retained.",
    "catalog_tiers_invalid": "A model's input-size price tiers are empty or do not "
        "strictly increase.",
    # -- corpus/
    "trace_schema_invalid": "A trace file does not decode (bad line, missing or second "
        "header, no final newline) or a corpus holds one trace id twice.",
    "trace_not_fictional": "A trace is not marked fictional.",
    "trace_shape_invalid": "A trace's family, seed, sessions, owner turns, steers or "
        "tool-record count are outside its suite's shape.",
    "trace_missing_steer": "A trace has no mid-turn steer.",
    "trace_missing_category": "A trace's probes do not cover every required category.",
    "trace_identifier_outside_tool": "An identifier appears outside tool output.",
    "trace_secret_outside_tool": "A secret or credential appears outside tool output.",
    "trace_seed_out_of_range": "A hard-suite seed outside 101-124, a repeated seed, or "
        "seeds given for the original suite.",
    "probe_invalid": "A probe file does not decode, is bound to another trace, repeats a "
        "probe id, or holds a probe that cannot be scored.",
    "trace_size_invalid": "A tool record outside its size bounds, the wrong number of "
        "results over 16 KiB, or a size estimate outside the suite's range.",
    "trace_placement_invalid": "A hard trace's key facts (owner rules, corrections, "
        "identifiers, the temporary password) are not where the suite requires.",
    "suite_unknown": "No suite of this name.",
    "corpus_import_invalid": "`corpus import` met a transcript it cannot turn into a "
        "trace (malformed JSON, an unknown message shape, a tool result without its call); "
        "the detail names the file and line.",
    "probe_boundary_invalid": "A probe's boundary names no event of its trace.",
    "suite_dir_invalid": "A directory suite cannot be loaded: no traces, a trace without "
        "its probe file, a repeated trace id, or a file that is not a trace.",
    "corpus_import_integer_too_long": "`corpus import`: the transcript holds an integer "
        "literal of more than 1,000 digits; the detail names the file and line.",
    "corpus_import_number_not_finite": "`corpus import`: the transcript holds `NaN`, "
        "`Infinity` or a number no double can hold (such as `1e400`), which JSON does not "
        "allow; the detail names the file and line.",
    # -- boundary/
    "boundary_case_invalid": "A boundary case is not in the format of docs/boundary.md: "
        "its `ef-boundary.yml` does not decode against the closed schema (an unknown "
        "field, a wrong type, an unknown oracle, family or capability) or breaks a rule "
        "(id, tier, ranges, paths, test commands), or its session, boundary, workspace or "
        "expected files are missing or unreadable, or its directory holds something other "
        "than regular files and directories; the detail names the file and the field path.",
    "boundary_case_changed": "A case's directory digest differs from its `boundary.lock` "
        "entry at the same version: a changed case needs a new version (then `boundary "
        "lock`) or a new id; `boundary lock` never re-locks it at its old version.",
    "boundary_lock_stale": "`boundary.lock` and the cases disagree: a case's version is "
        "below the locked one, a locked case is gone, or a case or version is not locked "
        "yet (run `efold-controller boundary lock`); or the lock file is unreadable.",
    "boundary_action_invalid": "A tool call after the boundary, or a path an oracle "
        "names, cannot be normalized: a path that is absolute, escapes the workspace (`..`, "
        "a symlink), holds a NUL or a backslash; an argument of the wrong type or missing; "
        "arguments that are not JSON. The detail names the field.",
    "boundary_work_invalid": "A boundary slot's work record (the child's `work.json`: its "
        "actions, recall outputs and how its loop ended) is missing, larger than its bound, "
        "differs from the digest the child's terminal named, or does not decode. The slot "
        "is judged on nothing the child claimed: its receipt carries this code and no "
        "verdict.",
    "boundary_restart_failed": "`boundary run` or `boundary validate` on a case that restarts "
        "(`fold.restart: true`): the new agent process that resumes from the written "
        "snapshot exited with a refusal (the detail gives its last line: a snapshot that is "
        "not the one written is `checkpoint_digest_mismatch`), printed no work record, or ran "
        "past its bound. Nothing is judged.",
    "boundary_runner_unavailable": "A command a boundary case's checks run (its test tool, "
        "its `tests-pass` oracle) cannot run here: `python -m MODULE` on an interpreter "
        "without the module (e.g. pytest), or a program not on the contained PATH. "
        "`boundary validate` marks the case not valid, `boundary run` and a campaign's "
        "registration refuse before anything is run or judged: a check that cannot run "
        "never scores a fold.",
    # -- folds/
    "arm_not_available_at_revision": "`register`: a role names an arm the continuity "
    "benchmark declares but efold does not run at this revision (`pack-per-turn`, "
    "`pack-stubs`); the detail starts with the arm's id and says what it waits for. An "
    "arm nobody declares is `campaign_invalid` (unknown arm).",
    "design_direction_invalid": "`register`: a declared comparison (`[[design]]`) does "
    "not differ exactly where it says: two builds that are identical, differ in a file "
    "its `paths` does not name, differ outside their build trees, or whose `witness` is "
    "in the base (the pair declared the wrong way round) or in none of the treatment's "
    "changed files; two guidance files that are identical, or two roles that are not the "
    "same fold. The detail names the pair and what differs. Nothing is registered.",
    "guidance_digest_mismatch": "A role's guidance file does not have the sha256 its "
    "`guidance_sha256` says: the frozen prompt moved. The detail names the file and both "
    "digests. Nothing is registered.",
    "build_digest_mismatch": "`register`: a role's build tree does not have the digest "
    "its `build_sha256` says. The detail names the role, the tree and both digests.",
    "build_contains_output": "`register --output`, `pilot` or `smoke` would write a "
    "registration or a run inside a role's build tree, whose files are pinned: every "
    "later command would refuse the registration. Nothing is written; put the output "
    "outside the tree (run from another directory, or pass `--output`, `--runs` or "
    "`--run-dir` elsewhere).",
    "arm_not_in_probe_mode": "`register`: the campaign's `probe_mode` does not admit a "
    "role's arm. `recall-only` (the default) refuses `native-lookup`, `store` and "
    "`store-compaction`, which differ from another arm only by the lookup offer; "
    "`lookup-allowed-v1` admits only the built-in arms that keep a retained store "
    "(`native-lookup`, `pack`, `store`, `store-compaction`). The detail starts with the "
    "arm's id. Nothing is registered.",
    "fold_unknown": "No fold arm of this name.",
    "fold_plugin_invalid": "A plugin does not load, is not a fold, claims a built-in or "
        "another name, is registered twice or cannot be pinned; or an external command's "
        "output is malformed.",
    "fold_plugin_timeout": "An external-command fold did not finish within its timeout.",
    "fold_plugin_output_too_large": "An external-command fold wrote more output than "
        "allowed (32 MiB by default).",
    "fold_plugin_failed": "A plugin fold raised, or an external command could not start "
        "or exited non-zero.",
    "fold_proxy_not_ready": "A proxy fold did not accept connections on its port within "
        "its timeout, or exited before it did.",
    "fold_proxy_unsupported_call": "A proxy fold called an upstream endpoint efold does "
        "not serve; the call got an error and the checkpoint's slots are excluded, never "
        "scored.",
    "meter_calls_exhausted": "The probe's history lookup call budget is spent; no further "
        "lookups.",
    "meter_bytes_exhausted": "The probe's history lookup byte budget is spent; the "
        "response was withheld whole.",
    "history_record_unknown": "No retained record has this id.",
    "history_cursor_invalid": "A pagination cursor that is malformed, altered, bound to "
        "another request or past the last page.",
    "history_query_invalid": "The search query has no searchable term.",
    "history_tool_unknown": "A lookup tool other than `history_search` and "
        "`history_get`.",
    "history_arguments_invalid": "Lookup arguments do not match the tool's schema or are "
        "out of range.",
    "history_store_invalid": "The retained history store is unreadable, of an unknown "
        "schema, or failed a query.",
    "fold_input_invalid": "The trace prefix given to a fold is empty or repeats an event "
        "id, or a context overhead is negative.",
    "checkpoint_snapshot_invalid": "A checkpoint snapshot cannot be written, or is not a "
        "well-formed snapshot in a new, private, plain directory when read.",
    "checkpoint_digest_mismatch": "A snapshot's files or content differ from its digest, "
        "manifest or receipt.",
    "fold_opaque_digest_mismatch": "A checkpoint's opaque provider items no longer hash "
        "to the digest bound with them; they are never sent.",
    "fold_provider_compaction_invalid": "A provider compaction settled but its reply "
        "holds no usable compaction item (none, several, or an item of a kind not "
        "allowed); the checkpoint is not built.",
    # -- worker/
    "worker_key_invalid": "The child's key pipe is unreadable, too short or too long, or "
        "its assignment does not decode or does not fit its kind.",
    "worker_parent_unverified": "The child's parent is not the controller its assignment "
        "names (pid or start identity).",
    "worker_lease_not_live": "The run lease is not held live by the controller and epoch "
        "the child's assignment names.",
    "worker_digest_mismatch": "A registration, plan, build, trace, fold or route catalog "
        "digest the child recomputed differs from its assignment; sticky stop.",
    "worker_snapshot_invalid": "The assigned snapshot is missing, not a single-link "
        "regular file, too large, or its digest or restored copy differs.",
    "worker_usage": "The child was started with wrong arguments, descriptors, body or "
        "task.",
    "worker_stopped": "The controller sent `Stop`; the child stopped at once.",
    "worker_body_failed": "The child's work failed in another way; also the exit status "
        "of any code without its own.",
    "fold_isolation_unavailable": "The campaign requires isolation (`isolation = "
        "\"required\"`) and the prep child cannot have both a loopback-only network and "
        "Landlock writes (or it sends to a summariser route); the detail names what is "
        "missing and why. That slot fails; no fold code ran.",
    # -- controller/
    "campaign_invalid": "The campaign file (or a combination of command options) is not "
        "valid; the detail names the field.",
    "campaign_not_found": "`register` (or `fold check --campaign`) was given a campaign "
        "that is neither a readable file nor a bundled campaign's name; the detail lists "
        "the bundled ones.",
    "subset_unknown": "`register`/`pilot` `--roles`, `--traces` or `--probes` named an "
        "id the campaign (or the registration being narrowed) does not have; the detail "
        "names them and lists the ones it has.",
    "subset_empty": "The subset flags keep no slot to run.",
    "output_exists": "`aggregate --output DIR`: DIR already exists; reports go into a new "
        "directory, never over another one.",
    "run_log_failed": "`pilot` / `smoke`: the run's `controller.log` could not be created "
        "or written; a warning on stderr, never a stop: the run goes on, its journal and "
        "receipts are its record.",
    "registration_invalid": "`registration.json` is unreadable, does not decode, or its "
        "campaign no longer validates.",
    "registration_digest_mismatch": "The registration's sha256, or a digest it freezes "
        "(corpus, build, catalog, policy, reader, selection, folds), no longer matches.",
    "run_root_exists": "The run directory already exists; run directories are never "
        "reused.",
    "run_root_in_source": "The run root lies inside a folder the build digest hashes.",
    "local_server_unreachable": "`pilot` on a local route: nothing answers at a local "
        "model's base URL (`GET /models`); start the server first. Nothing was claimed.",
    "local_model_not_served": "`pilot` on a local route: the server lists its models and "
        "none has the campaign's (or `--model`'s) name; the detail says what it serves "
        "and how that kind of server names a model. Nothing was claimed.",
    "smoke_record_invalid": "`pilot --real`: a smoke record of this registration beside "
        "the run directory is not a private file of this user (a link, shared, "
        "another owner), does not decode, is of another version, or its MAC under "
        "the per-user smoke key does not verify (hand-written or edited); the detail "
        "names it. Remove it and run `smoke` again.",
    "receipt_duplicate": "Two receipts claim one slot.",
    "receipt_changed": "A receipt no longer hashes to its journaled digest, does not "
        "decode, or sits under another planned slot's file name.",
    "receipt_unplanned": "A receipt for a slot the plan does not hold, or one that "
        "disagrees with its planned slot.",
    "receipt_unreadable": "A receipt file cannot be read (its permissions deny this user, "
        "or an I/O error): `aggregate` refuses; `show`, `runs` and `aggregate "
        "--allow-damaged` name it as a damaged file.",
    "receipt_unvisited": "A receipt the journal never recorded (its slot was not "
        "visited).",
    "preflight_tree_invalid": "A prep child's directory breaks the tree limits (regular "
        "files, one link, owner-only write, 64 MiB per file, 512 MiB in all).",
    "run_records_invalid": "A run's `plan.json` or `registration.json` is unreadable, or "
        "the plan does not match the run.",
    "launch_failed": "A child could not be started or identified (spawn error, gone "
        "before its identity was recorded, not leading its own group, no subreaper).",
    "worker_timeout": "A child outlived its deadline plus the watchdog margin (5 s "
        "offline; 120 s for a probe child of an endpoint reader and a prep child of a "
        "campaign with a summariser model) and was contained.",
    "invalid_slot_rate": "Stop policy: more than 10% of admitted slots ended invalid.",
    "child_code_forbidden": "A child reported a code outside its allowlist, a continuable "
        "code as an integrity stop, or an integrity stop without a code; sticky stop.",
    "run_deadline": "`deadlines.run_seconds` has elapsed; later slots are visited as "
        "`unadmitted` and the run stops (not sticky).",
    "cap_below_rmax": "`cap_usd` is below one maximum reservation Rmax; the detail gives "
        "the least cap.",
    "cap_not_whole_cents": "`cap_usd` is not a whole number of cents.",
    "credential_env_inherited": "A profile's `credential_env` names a variable every child "
        "inherits (the child environment's allowlist: `PATH`, `LANG`, `LC_ALL`, `LC_CTYPE`, "
        "`TZ`, `TMPDIR`, `CI`), so the credential would reach every child, fold code "
        "included; refused at `register`.",
    "debug_environment": "A paid run (`pilot --real`, `smoke`, `cluster pilot --real`) "
    "refuses while a variable that makes the controller show what it handles or weakens "
    "a check is set, even empty: `EFOLD_ISOLATION_SIMULATE`, `PYTHONINSPECT`, "
    "`PYTHONDEBUG`, `PYTHONVERBOSE`, `PYTHONDEVMODE`; the detail "
    "names each one set.",
    "fold_source_unclean": "`pilot --require-clean-source`: a command, proxy or plugin "
    "fold's files are in a git checkout with changes not committed (modified, staged, "
    "deleted or untracked files, submodules included) or with index entries marked "
    "assume-unchanged or skip-worktree, or git cannot read the checkout; the detail names "
    "each checkout and why. Nothing was run.",
    "run_already_continued": "`pilot --continue RUN` (and `plan`/`authorize --continue`): "
    "RUN already has a continuation, named in the detail; a chain has no branches, so "
    "continue its last link.",
    "nothing_to_continue": "`--continue RUN`: every slot of the plan (or of the chosen "
    "part) already has a terminal receipt in RUN's chain: there is nothing to run.",
    "chain_invalid": "A chain of runs disagrees with itself: a link and the run it "
    "continues do not name each other, hold another registration or count links wrongly; "
    "or the run to continue changed since its continuation was planned (plan it, and a "
    "real route's authorization, again).",
    "run_unreconciled": "Processes of the run may be alive: `aggregate` exits 4 with it, "
        "and `reap` uses it as the cause of its containment episodes.",
    "reap_incomplete": "`reap` could not prove every process of the run dead (exit 1).",
    "runs_root_invalid": "`runs ROOT` or `--latest --root ROOT`: ROOT is missing, not a "
        "directory, or cannot be listed.",
    "run_not_found": "`--latest`: the runs root holds no run directory (one holding "
        "`journal.sqlite`).",
    # -- report/
    "report_input_invalid": "The plan, receipts, run facts or `results.json` given to the "
        "report are inconsistent or not content-free; the whole report refuses.",
    "compare_no_common_slots": "`compare`: the two runs' plans share no slot id (same "
        "repeat, role, trace and probe), so there is no pair to compare.",
    "comparison_invalid": "`analyze`: the comparison set breaks its format "
        "(`efold-comparison-v1`): an unknown key (a prompt, an output, a credential, prose), "
        "a wrong type, a string that is no bounded identifier, a negative count, a cost that "
        "is no plain decimal, arms that are not two, a task and repeat without exactly one "
        "run of each arm, a `minimum_tasks` below 20, or a research-protocol field out of "
        "its bounds or in a v1 set (`efold-comparison-v2`). The detail names the run. With "
        "`--run`, the run's paired slots could not make a set (an arm that is no role).",
    "comparison_too_large": "`analyze`: the comparison set is larger than 8 MiB or holds "
        "more than 10,000 runs; nothing is aggregated.",
    "certify_session_invalid": "`certify`: a session or cycle file the contained child "
        "wrote does not read back whole: a torn last line, a line that is no entry of its "
        "format, an entry not linked to the one before it, source events that differ from "
        "the fixture, or a missing file. Nothing is certified.",
    "certify_child_failed": "`certify`: the contained child that runs the fold did not "
        "finish: it timed out (it and everything it started are killed), exited non-zero, "
        "or wrote no `fold.json`. Its output tail is shown.",
    "certify_not_applicable": "`certify`: the fold keeps its summary as opaque provider "
        "items (`openai-compact`, `anthropic-compact`): the checks read what a reader is "
        "shown, and such a fold shows none of its summary.",
    "prune_unreconciled": "`prune`: the run is not reconciled (its status is "
        "`unreconciled`, or `recover` would not call it reconciled): it is kept, untouched; "
        "run `recover RUN` then `reap RUN`.",
    "prune_run_live": "`prune`: a controller (or `reap`) holds the run's lease: the run is "
        "kept, untouched.",
    "prune_not_confirmed": "`prune`: removal needs `--yes` when stdin is not a terminal, "
        "or the operator declined at the prompt; nothing was removed.",
    "prune_chain_partial": "`prune`: a link of a chain (`pilot --continue`) whose other "
    "links are not all removed with it is kept: a chain goes only whole.",
    "prune_incomplete": "`prune`: some entries of a run could not be removed (counted, "
        "never followed through a link); the run's records are kept so that it stays a "
        "run directory.",
    "cluster_unavailable": "`cluster`: Ray is not installed (`pip install 'efold[ray]'`), "
        "or no Ray cluster answers at `--ray ADDRESS`.",
    "cluster_shards_invalid": "`cluster pilot`: fewer than 1 or more than 64 shards, more "
        "shards than the plan has checkpoints (a shard is whole checkpoints), or no alive "
        "node has a shard's resources.",
    "cluster_cap_too_small": "`cluster pilot`: the cap cannot give every shard one maximum "
        "reservation Rmax (C < shards x Rmax): use fewer shards.",
    "cluster_shard_misplaced": "A shard's Ray actor runs on a node its ticket is not bound "
        "to: refused before its controller starts (Ray never moves a shard).",
    "cluster_records_invalid": "A cluster run's records disagree: `cluster.json` is not "
        "the shards its plan derives, a shard's copy holds another registration or plan, "
        "or a shard's ticket is unreadable or for another registration.",
    # controller/processes/cgroups.py, controller/processes/cgroup_mount.py (the membership layer; launches
    # do not use it yet)
    "cgroup_argument_invalid": "A run or launch id that is not an opaque id (so cannot "
        "name a cgroup), or a `pids.max` below 1.",
    "cgroup_path_refused": "A cgroup path with a symlink, `.` or `..`, or one that is not "
        "a run cgroup directly below the controller's own cgroup.",
    "cgroup_not_found": "The cgroup (or a file of it) does not exist: a run cgroup "
        "already removed, or a kernel without that file.",
    "cgroup_exists": "The run's or launch's cgroup already exists; nothing is reused.",
    "cgroup_not_permitted": "This user may not create, write or remove that cgroup "
        "(EACCES, EPERM or EROFS).",
    "cgroup_not_empty": "`remove`: the cgroup still holds a live process (or a child "
        "cgroup that does); nothing more is removed.",
    "cgroup_place_unverified": "After writing a pid to `cgroup.procs`, /proc/PID/cgroup "
        "does not name the cgroup, or the process is gone.",
    "cgroup_controller_unavailable": "`pids.max` asked for a cgroup the pids controller "
        "is not enabled for (on a hybrid host it may be bound to a v1 hierarchy).",
    "cgroup_failed": "Any other failure of a cgroup operation; the detail names the "
        "operation and its errno.",
    "cluster_unschedulable": "`cluster pilot`: a shard was not placed on its node (its "
        "actor not scheduled, or its controller not started) within `--place-seconds`, "
        "or an interruption came first; it ends refused with this code, its actor killed, "
        "and the driver's line names the resources it asked and the node's free ones.",
    "cluster_node_unfit": "`cluster pilot`: a shard's node cannot run efold (its actor "
        "or its keeper fails to import it there: efold missing or broken on that node); "
        "the shard ends refused with this code and the error it met, and no controller "
        "ever started there.",
    "cluster_shard_unreachable": "`cluster pilot`: a shard's Ray actor has not answered "
        "for 30 s (its node or the Ray head is gone); the shard is recorded lost with "
        "this code. Its keeper interrupts its controller when the actor dies; "
        "`cluster collect RUN` reads its run later, where this machine reaches it.",
    "containment_unavailable": "The run requires cgroup containment (the campaign's "
        "`containment = \"cgroup\"`, or any `--real` run without "
        "`--process-group-containment`) and no writable cgroup2 hierarchy is here; the "
        "detail says why. Nothing was launched.",
}

# An optional sentence under a section heading, keyed by the heading.
SECTION_NOTES: dict[str, str] = {
    "Refusals that may continue": "Refused before any hold exists; the probe run, or "
        "the campaign, may go on (`CONTINUABLE_CODES`).",
    "Policy and integrity": "Violations of the request contract, the money rules or the "
        "process rules. Most are sticky stops: admission closes for the rest of the run.",
    "registry/": "Durable files, the run lease, the journal, authorizations and the burn "
        "registry.",
    "ipc/": "The lockstep channel between the controller and a child. After any of these "
        "the channel is poisoned.",
    "guard/": "The one guarded path to a model: options, payloads, sending, settlement "
        "and the price catalog.",
    "corpus/": "Trace and probe validation.",
    "boundary/": "Boundary cases: the sidecar schema, case directories and their lock.",
    "folds/": "Fold arms, plugins, external commands, the history store and its meter.",
    "worker/": "A child's own checks before it speaks, and its failures.",
    "controller/": "Campaigns, registration, runs, receipts, launches and stop policies.",
    "report/": "Building the reports.",
}

_SECTION = re.compile(r"^\s*#\s*--\s*(?P<title>.*?)\s*-*\s*$")
_TRAILING_REF = re.compile(r"\s*\([^)]*§[^)]*\)\s*$")


def sections(source: str | None = None) -> list[tuple[str, list[str]]]:
    """(section title, member names in order) as ``errors.py`` groups them."""
    text = ERRORS_SOURCE.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Code")
    lines = text.splitlines()
    members = {
        node.lineno: target.id
        for node in cls.body if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)
    }
    out: list[tuple[str, list[str]]] = []
    title = "Other"
    for number in range(cls.lineno, (cls.end_lineno or len(lines)) + 1):
        match = _SECTION.match(lines[number - 1])
        if match:
            title = _TRAILING_REF.sub("", match.group("title"))
            out.append((title, []))
        elif number in members:
            if not out:
                out.append((title, []))
            out[-1][1].append(members[number])
    return [(t, names) for t, names in out if names]


def problems(codes: Iterable[str], meanings: Mapping[str, str]) -> list[str]:
    """Why the meanings table does not describe exactly ``codes``: empty if it does."""
    codes = list(codes)
    found = [f"no meaning for code {c!r}" for c in codes if c not in meanings]
    found += [f"meaning for {c!r}, which is not a code" for c in meanings if c not in codes]
    found += [f"empty meaning for {c!r}" for c, text in meanings.items() if not text.strip()]
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    from efold.errors import Code
    from efold.guard.permits import CHILD_REPORTABLE_CODES, CONTINUABLE_CODES
    from efold.protocol.exit_codes import EXIT_OK, EXIT_STATUS

    found = problems((c.value for c in Code), MEANINGS)
    if found:
        raise SystemExit("gen_codes_doc: " + "; ".join(found))
    grouped = sections()
    listed = [name for _, names in grouped for name in names]
    if sorted(listed) != sorted(c.name for c in Code):
        raise SystemExit("gen_codes_doc: errors.py sections do not list every Code member")
    continuable = {c.value for c in CONTINUABLE_CODES}
    reportable = {c.value for c in CHILD_REPORTABLE_CODES}
    exit_of = {c.value: status for c, status in EXIT_STATUS.items()}

    def flags(value: str) -> str:
        parts = []
        if value in continuable:
            parts.append("continuable")
        if value in reportable:
            parts.append("child may report")
        if value in exit_of:
            parts.append(f"child exit {exit_of[value]}")
        return ", ".join(parts)

    out = [
        "# Fixed codes",
        "",
        "<!-- Generated by scripts/gen_codes_doc.py from efold.errors.Code; do not edit by "
        "hand. Run `python scripts/gen_codes_doc.py` to regenerate. -->",
        "",
        "Every refusal, stop and failure efold reports carries one fixed code from a "
        "closed set (`efold.errors.Code`). Commands print `refused: CODE` on stderr; "
        "receipts, reports and the journal hold codes, never free-form error text. The "
        "detail a command prints after the code is for the terminal only and never "
        "enters a report.",
        "",
        f"There are {len(listed)} codes, grouped as in the source. The last column says "
        "whether a code is *continuable* (see [below](#continuable-refusals-and-stops)), "
        "whether a probe child *may report* it, and the *exit status* a child uses for it "
        "(see [Child exit statuses](#child-exit-statuses)). Terms (hold, Rmax, U_k, "
        "sticky stop, containment) are defined in [architecture.md](architecture.md).",
        "",
    ]
    for title, names in grouped:
        heading = f"`{title}`" if title.endswith("/") else title
        out += [f"## {heading}", ""]
        note = SECTION_NOTES.get(title)
        if note:
            out += [note, ""]
        out += ["| code | meaning | also |", "| --- | --- | --- |"]
        for name in names:
            value = Code[name].value
            out.append(f"| `{value}` | {_cell(MEANINGS[value])} | {flags(value)} |")
        out.append("")

    def code_list(values: Iterable[str]) -> str:
        return ", ".join(f"`{v}`" for v in sorted(values))

    out += [
        "## Continuable refusals and stops",
        "",
        "A *continuable* refusal happens before any hold exists; after it the probe run "
        "may go on, and the campaign goes on (`CONTINUABLE_CODES` in "
        "`guard/permits.py`):",
        "",
        code_list(continuable) + ".",
        "",
        "Everything else that ends a request is one of:",
        "",
        "- a **loss**: the request may have cost money; its hold is retained (or the known "
        "partial cost, if larger) and the probe run is terminal (later requests refuse "
        "`lookup_slot_terminal`), but the run goes on. Two consecutive admitted slots "
        "that end in a provider-side loss stop the run (`lookup_repeated_loss`); the guard's "
        "own aborts do not count;",
        "- a **sticky stop**: admission closes for the rest of the run. The first stop "
        "code stays, except that `unreconciled_containment` outranks every other. The "
        "stop's code is on the slot that hit it and in the report's status; later slots "
        "are still visited, without a launch, and get `unadmitted` receipts with "
        "`lookup_stopped` (`interrupted` after an interruption, `not_admitted_cap` once "
        "the cap refused), so a stopped run's counts are complete.",
        "",
        "A probe child may report only the codes of an explicit allowlist "
        "(`CHILD_REPORTABLE_CODES` in `guard/permits.py`); anything else, a continuable "
        "code claimed as an integrity stop, or an integrity stop without a code is "
        "recorded as `child_code_forbidden`. The allowlist is the continuable codes plus:",
        "",
        code_list(reportable - continuable) + ".",
        "",
        "## Child exit statuses",
        "",
        "A child's stdio is `/dev/null`, so when it fails before or outside the lockstep "
        "channel its exit status is all the controller learns. The table is closed "
        "(`EXIT_STATUS` in `protocol/exit_codes.py`): a code not listed exits as "
        "`worker_body_failed`. A status outside the table (a signal death, the "
        "interpreter's own 1) stands for no code.",
        "",
        "| exit status | code |",
        "| ---: | --- |",
        f"| {EXIT_OK} | none: success |",
    ]
    out += [f"| {status} | `{code.value}` |"
            for code, status in sorted(EXIT_STATUS.items(), key=lambda item: item[1])]
    out += [
        "",
        "## Command exit statuses",
        "",
        "`efold-controller` commands exit 2 on a refusal (`refused: CODE` on stderr). "
        "Beyond that:",
        "",
        "| command | statuses |",
        "| --- | --- |",
        "| `pilot` | 0 finished, 2 refused, 3 a stop policy ended it (reports still "
        "written), 130 / 143 interrupted by SIGINT / SIGTERM |",
        "| `smoke` | 0 passed (its record is kept), 2 refused, 3 ran but did not pass (why "
        "is printed) |",
        "| `plan` | 0, 2 refused, 130 / 143 interrupted |",
        "| `preflight` | 0 every checkpoint passed, 1 any failure, 2 refused, 130 / 143 "
        "interrupted |",
        "| `aggregate` | 0 reports printed, 2 refused, 4 `run_unreconciled` (reports "
        "printed, processes of the run may be alive); see "
        "[results-schema.md](results-schema.md#exit-statuses-of-aggregate) |",
        "| `recover` | 0 reconciled, 1 not reconciled, 2 unreadable journal |",
        "| `reap` | 0 reconciled now, 1 `reap_incomplete`, 2 refused |",
        "| `corpus validate` | 0 valid, 2 any rejection |",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/codes.md differs from what would be generated")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run python scripts/gen_codes_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
