"""The closed set of fixed codes and the root of efold's error tree.

Every refusal efold makes carries one `Code`. Reports and logs print codes, never
free-form error text (which could carry paths or content).

Error tree (each package adds its own subclasses in its own ``errors.py``)::

    EfoldError                      every efold failure; ``.code`` is a Code
    ├── input_files.InputFileError      an input file that is no regular file, too large, unreadable
    ├── registry.errors.RegistryError   durable files, lease, journal, authorization, burn
    ├── ipc.errors.IpcError             framing and lockstep channel violations
    ├── guard.errors.GuardError         refusals and stops on the one path to a model
    ├── corpus.errors.CorpusError       invalid traces and probes
    ├── boundary.errors.BoundaryError   invalid boundary cases, their lock
    ├── folds.errors.FoldError          fold arms, plugins, history store, meter
    ├── worker.errors.WorkerError       child self-verification failures
    └── controller.errors.ControllerError  registration, plan, pilot, containment
"""

from __future__ import annotations

import enum


class Code(enum.StrEnum):
    """Fixed codes: a closed set. Add members here (in the section of the package that
    raises them); never print an ad-hoc string where a code belongs."""

    # -- Refusals that may continue (docs/architecture.md §11) ----------------------------------
    NOT_ADMITTED_INPUT_ENVELOPE = "not_admitted_input_envelope"
    LOOKUP_REQUEST_LIMIT = "lookup_request_limit"
    NOT_ADMITTED_CAP = "not_admitted_cap"
    LOOKUP_STOPPED = "lookup_stopped"
    LOOKUP_SLOT_TERMINAL = "lookup_slot_terminal"

    # -- Policy and integrity (docs/architecture.md §11) ----------------------------------------
    LOOKUP_BODY_MISMATCH = "lookup_body_mismatch"
    LOOKUP_INVALID_USAGE = "lookup_invalid_usage"
    LOOKUP_UNKNOWN_TIER = "lookup_unknown_tier"
    LOOKUP_METHOD_FORBIDDEN = "lookup_method_forbidden"
    LOOKUP_EXTERNAL_FETCH_FORBIDDEN = "lookup_external_fetch_forbidden"
    LOOKUP_PROMPT_CACHE_KEY_FORBIDDEN = "lookup_prompt_cache_key_forbidden"
    LOOKUP_CACHE_ASSIGNMENT_INVALID = "lookup_cache_assignment_invalid"
    LOOKUP_AUXILIARY_CALLERS_FORBIDDEN = "lookup_auxiliary_callers_forbidden"
    LOOKUP_MODEL_SWITCH_FORBIDDEN = "lookup_model_switch_forbidden"
    LOOKUP_PREPARATION_FORBIDDEN = "lookup_preparation_forbidden"
    LOOKUP_ROUTE_MISMATCH = "lookup_route_mismatch"
    LOOKUP_RETRY_PROFILE_FORBIDDEN = "lookup_retry_profile_forbidden"
    LOOKUP_TOOLS_FORBIDDEN = "lookup_tools_forbidden"
    LOOKUP_NATIVE_IDENTITY_FORBIDDEN = "lookup_native_identity_forbidden"
    LOOKUP_UNGUARDED_DISPATCH = "lookup_unguarded_dispatch"
    LOOKUP_ARRIVAL_PERSIST_FAILED = "lookup_arrival_persist_failed"
    LOOKUP_ARRIVAL_RECEIPT_INVALID = "lookup_arrival_receipt_invalid"
    IPC_OUT_OF_ORDER = "ipc_out_of_order"
    IPC_FRAME_TOO_LARGE = "ipc_frame_too_large"
    IPC_BAD_MAC = "ipc_bad_mac"
    IPC_BINDING_MISMATCH = "ipc_binding_mismatch"
    LOOKUP_WORKER_LOST = "lookup_worker_lost"
    LOOKUP_REPEATED_LOSS = "lookup_repeated_loss"
    LOOKUP_INVALID_RATE = "lookup_invalid_rate"
    LOOKUP_PREPARATION_INVALID = "lookup_preparation_invalid"
    JUDGE_REPLY_INVALID = "judge_reply_invalid"  # a judge reply that is not the strict score JSON
    INVENTORY_INFEASIBLE = "inventory_infeasible"
    INVENTORY_OPAQUE_READER = "inventory_opaque_reader"  # the reader cannot consume the checkpoint's provider items
    LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE = "lookup_pilot_real_route_unavailable"
    UNRECONCILED_CONTAINMENT = "unreconciled_containment"
    INTERRUPTED = "interrupted"  # the operator interrupted the run (SIGINT/SIGTERM)
    SMOKE_FAILED = "smoke_failed"  # a local run's inline smoke (one slot per role) did not pass: nothing after it was admitted

    # -- registry/ -----------------------------------------------------------------
    PUBLISH_TARGET_EXISTS = "publish_target_exists"
    PRIVATE_READ_REFUSED = "private_read_refused"
    FSYNC_FAILED = "fsync_failed"
    LEASE_HELD = "lease_held"
    LEASE_NOT_HELD = "lease_not_held"
    JOURNAL_INVALID = "journal_invalid"
    JOURNAL_READ_ONLY = "journal_read_only"
    JOURNAL_WRITE_FAILED = "journal_write_failed"
    AUTHORIZATION_INVALID = "authorization_invalid"
    AUTHORIZATION_UNTRUSTED = "authorization_untrusted"
    AUTHORIZATION_DOMAIN_MISMATCH = "authorization_domain_mismatch"
    AUTHORIZATION_BINDING_MISMATCH = "authorization_binding_mismatch"
    AUTHORIZATION_EXPIRED = "authorization_expired"
    AUTHORIZATION_NOT_YET_VALID = "authorization_not_yet_valid"
    AUTHORIZATION_CONSUMED = "authorization_consumed"
    AUTHORIZATION_CLAIM_INVALID = "authorization_claim_invalid"
    LEASE_FILE_INVALID = "lease_file_invalid"
    PATH_REFUSED = "path_refused"
    PATH_NOT_WRITABLE = "path_not_writable"  # a directory efold must create in is not writable by this user
    PUBLISH_FAILED = "publish_failed"
    PRIVATE_DIR_REFUSED = "private_dir_refused"
    PRIVATE_FILE_MISSING = "private_file_missing"
    RUN_ROOT_IN_USE = "run_root_in_use"
    APPROVER_KEY_INVALID = "approver_key_invalid"

    # -- input files (input_files.py) -------------------------------------------------
    INPUT_FILE_NOT_REGULAR = "input_file_not_regular"  # a device, FIFO, socket or directory where a file belongs
    INPUT_FILE_TOO_LARGE = "input_file_too_large"  # larger than its kind's bound; refused before reading past it
    INPUT_FILE_UNREADABLE = "input_file_unreadable"  # missing, or cannot be opened or read

    # -- ipc/ ----------------------------------------------------------------------
    IPC_TRUNCATED_FRAME = "ipc_truncated_frame"
    IPC_EOF = "ipc_eof"
    IPC_BAD_MESSAGE = "ipc_bad_message"
    IPC_SEQ_MISMATCH = "ipc_seq_mismatch"
    IPC_POISONED = "ipc_poisoned"
    IPC_CANCELLED = "ipc_cancelled"
    IPC_TIMEOUT = "ipc_timeout"

    # -- guard/ --------------------------------------------------------------------
    LOOKUP_STOP_FAILED = "lookup_stop_failed"
    LOOKUP_EMPTY_FINAL_OUTPUT = "lookup_empty_final_output"
    LOOKUP_OPTION_FORBIDDEN = "lookup_option_forbidden"
    LOOKUP_PAYLOAD_FORBIDDEN = "lookup_payload_forbidden"
    LOOKUP_SEND_REENTERED = "lookup_send_reentered"
    LOOKUP_REDIRECT_FORBIDDEN = "lookup_redirect_forbidden"
    LOOKUP_HTTP_STATUS = "lookup_http_status"
    LOOKUP_STREAM_LOST = "lookup_stream_lost"
    LOOKUP_MISSING_USAGE = "lookup_missing_usage"
    LOOKUP_RESPONSE_FAILED = "lookup_response_failed"
    LOOKUP_COST_EXCEEDS_HOLD = "lookup_cost_exceeds_hold"
    LOOKUP_TEST_ONLY_SOURCE = "lookup_test_only_source"
    LOOKUP_COST_MISMATCH = "lookup_cost_mismatch"
    CATALOG_INVALID = "catalog_invalid"
    LOOKUP_USAGE_INPUT_ABOVE_ADMITTED = "lookup_usage_input_above_admitted"
    LOOKUP_USAGE_OUTPUT_ABOVE_MAX = "lookup_usage_output_above_max"
    LOOKUP_USAGE_REASONING_ABOVE_OUTPUT = "lookup_usage_reasoning_above_output"
    LOOKUP_USAGE_CACHE_ABOVE_INPUT = "lookup_usage_cache_above_input"
    LOOKUP_USAGE_INPUT_BELOW_PAYLOAD = "lookup_usage_input_below_payload"  # fewer input tokens than the sent bytes allow
    LOOKUP_RESPONSE_DUPLICATE_KEY = "lookup_response_duplicate_key"  # a reply's object repeats a key
    LOOKUP_MODEL_UNREPORTED = "lookup_model_unreported"  # a completed reply names no model where its format always does
    LOOKUP_REQUEST_DEADLINE = "lookup_request_deadline"
    LOOKUP_RESPONSE_TOO_LARGE = "lookup_response_too_large"
    LOOKUP_SEND_FAILED = "lookup_send_failed"
    LOOKUP_SETTLE_FAILED = "lookup_settle_failed"
    LOOKUP_PERMIT_INVALID = "lookup_permit_invalid"
    LOOKUP_HOLD_MISMATCH = "lookup_hold_mismatch"  # granted hold differs from own Rmax
    LOOKUP_HOLD_UNVERIFIED = "lookup_hold_unverified"  # journaled hold not read back
    LOOKUP_SETTLEMENT_FAULT = "lookup_settlement_fault"  # closing a permit raised
    CATALOG_TIERS_INVALID = "catalog_tiers_invalid"

    # -- corpus/ -------------------------------------------------------------------
    TRACE_SCHEMA_INVALID = "trace_schema_invalid"
    TRACE_NOT_FICTIONAL = "trace_not_fictional"
    TRACE_SHAPE_INVALID = "trace_shape_invalid"
    TRACE_MISSING_STEER = "trace_missing_steer"
    TRACE_MISSING_CATEGORY = "trace_missing_category"
    TRACE_IDENTIFIER_OUTSIDE_TOOL = "trace_identifier_outside_tool"
    TRACE_SECRET_OUTSIDE_TOOL = "trace_secret_outside_tool"
    TRACE_SEED_OUT_OF_RANGE = "trace_seed_out_of_range"
    PROBE_INVALID = "probe_invalid"
    TRACE_SIZE_INVALID = "trace_size_invalid"
    TRACE_PLACEMENT_INVALID = "trace_placement_invalid"
    SUITE_UNKNOWN = "suite_unknown"
    CORPUS_IMPORT_INVALID = "corpus_import_invalid"  # a transcript that cannot be imported
    PROBE_BOUNDARY_INVALID = "probe_boundary_invalid"  # a probe boundary outside its trace
    SUITE_DIR_INVALID = "suite_dir_invalid"  # a directory suite that cannot be loaded
    CORPUS_IMPORT_INTEGER_TOO_LONG = "corpus_import_integer_too_long"  # a transcript's integer literal of over 1,000 digits
    CORPUS_IMPORT_NUMBER_NOT_FINITE = "corpus_import_number_not_finite"  # NaN, Infinity, or a number past a double's range

    # -- boundary/ -----------------------------------------------------------------
    BOUNDARY_CASE_INVALID = "boundary_case_invalid"  # a case directory or its sidecar breaks the format
    BOUNDARY_CASE_CHANGED = "boundary_case_changed"  # a case's bytes differ from its lock at the same version
    BOUNDARY_LOCK_STALE = "boundary_lock_stale"  # boundary.lock and the cases disagree (version, missing, unlocked)
    BOUNDARY_ACTION_INVALID = "boundary_action_invalid"  # a tool call's arguments or an oracle path cannot be normalized
    BOUNDARY_WORK_INVALID = "boundary_work_invalid"  # a boundary child's work record is missing, too large, altered or malformed
    BOUNDARY_RUNNER_UNAVAILABLE = "boundary_runner_unavailable"  # a command a case's checks run cannot run here (its program or module is missing)
    BOUNDARY_RESTART_FAILED = "boundary_restart_failed"  # a restarting case's new agent process failed, timed out or could not restore the snapshot

    # -- folds/ --------------------------------------------------------------------
    FOLD_UNKNOWN = "fold_unknown"
    FOLD_PLUGIN_INVALID = "fold_plugin_invalid"
    FOLD_PLUGIN_TIMEOUT = "fold_plugin_timeout"
    FOLD_PLUGIN_OUTPUT_TOO_LARGE = "fold_plugin_output_too_large"
    FOLD_PLUGIN_FAILED = "fold_plugin_failed"
    FOLD_PROXY_NOT_READY = "fold_proxy_not_ready"  # the proxy never listened on its port
    FOLD_PROXY_UNSUPPORTED_CALL = "fold_proxy_unsupported_call"  # called what efold does not serve
    METER_CALLS_EXHAUSTED = "meter_calls_exhausted"
    METER_BYTES_EXHAUSTED = "meter_bytes_exhausted"
    HISTORY_RECORD_UNKNOWN = "history_record_unknown"
    HISTORY_CURSOR_INVALID = "history_cursor_invalid"
    HISTORY_QUERY_INVALID = "history_query_invalid"
    HISTORY_TOOL_UNKNOWN = "history_tool_unknown"
    HISTORY_ARGUMENTS_INVALID = "history_arguments_invalid"
    HISTORY_STORE_INVALID = "history_store_invalid"
    FOLD_INPUT_INVALID = "fold_input_invalid"
    CHECKPOINT_SNAPSHOT_INVALID = "checkpoint_snapshot_invalid"
    CHECKPOINT_DIGEST_MISMATCH = "checkpoint_digest_mismatch"
    FOLD_OPAQUE_DIGEST_MISMATCH = "fold_opaque_digest_mismatch"  # provider items differ from their digest
    FOLD_PROVIDER_COMPACTION_INVALID = "fold_provider_compaction_invalid"  # a settled compaction reply holds no usable items

    # -- worker/ -------------------------------------------------------------------
    WORKER_KEY_INVALID = "worker_key_invalid"
    WORKER_PARENT_UNVERIFIED = "worker_parent_unverified"
    WORKER_LEASE_NOT_LIVE = "worker_lease_not_live"
    WORKER_DIGEST_MISMATCH = "worker_digest_mismatch"
    WORKER_SNAPSHOT_INVALID = "worker_snapshot_invalid"
    WORKER_USAGE = "worker_usage"
    WORKER_STOPPED = "worker_stopped"
    WORKER_BODY_FAILED = "worker_body_failed"
    FOLD_ISOLATION_UNAVAILABLE = "fold_isolation_unavailable"  # the campaign requires isolation (no network, writes only its roots) and the prep child cannot have it

    # -- controller/ ---------------------------------------------------------------
    CAMPAIGN_INVALID = "campaign_invalid"
    ARM_NOT_AVAILABLE_AT_REVISION = "arm_not_available_at_revision"  # a declared arm, not runnable yet
    ARM_NOT_IN_PROBE_MODE = "arm_not_in_probe_mode"  # the campaign's probe mode does not admit the arm
    DESIGN_DIRECTION_INVALID = "design_direction_invalid"  # a declared comparison differs elsewhere
    GUIDANCE_DIGEST_MISMATCH = "guidance_digest_mismatch"  # a guidance file's bytes moved
    BUILD_DIGEST_MISMATCH = "build_digest_mismatch"  # a build tree is not the one declared
    BUILD_CONTAINS_OUTPUT = "build_contains_output"  # a registration or run would land in a build
    CAMPAIGN_NOT_FOUND = "campaign_not_found"  # no such file, and no bundled campaign
    SUBSET_UNKNOWN = "subset_unknown"  # --roles/--traces/--probes name an id not there
    SUBSET_EMPTY = "subset_empty"  # the subset flags keep no slot
    OUTPUT_EXISTS = "output_exists"  # a command's new output directory already exists
    REGISTRATION_INVALID = "registration_invalid"
    REGISTRATION_DIGEST_MISMATCH = "registration_digest_mismatch"
    RUN_ROOT_EXISTS = "run_root_exists"
    RUN_ROOT_IN_SOURCE = "run_root_in_source"  # inside a folder build_digest hashes
    LOCAL_SERVER_UNREACHABLE = "local_server_unreachable"  # a local route's server does not answer its /models
    LOCAL_MODEL_NOT_SERVED = "local_model_not_served"  # the local server serves models, none by the profile's name
    SMOKE_RECORD_INVALID = "smoke_record_invalid"  # a smoke record that is not private or not efold's (its MAC)
    RECEIPT_DUPLICATE = "receipt_duplicate"
    RECEIPT_CHANGED = "receipt_changed"
    RECEIPT_UNPLANNED = "receipt_unplanned"
    RECEIPT_UNVISITED = "receipt_unvisited"
    RECEIPT_UNREADABLE = "receipt_unreadable"  # a receipt file this user cannot read
    PREFLIGHT_TREE_INVALID = "preflight_tree_invalid"
    RUN_RECORDS_INVALID = "run_records_invalid"
    LAUNCH_FAILED = "launch_failed"
    WORKER_TIMEOUT = "worker_timeout"
    INVALID_SLOT_RATE = "invalid_slot_rate"
    CHILD_CODE_FORBIDDEN = "child_code_forbidden"
    RUN_DEADLINE = "run_deadline"
    CAP_BELOW_RMAX = "cap_below_rmax"
    CAP_NOT_WHOLE_CENTS = "cap_not_whole_cents"
    CREDENTIAL_ENV_INHERITED = "credential_env_inherited"  # credential_env names a variable every child inherits
    RUN_UNRECONCILED = "run_unreconciled"  # processes of the run may be alive
    DEBUG_ENVIRONMENT = "debug_environment"  # a paid run with a debug variable set
    FOLD_SOURCE_UNCLEAN = "fold_source_unclean"  # --require-clean-source: a fold's checkout has changes
    RUN_ALREADY_CONTINUED = "run_already_continued"  # `--continue`: a run has one continuation
    NOTHING_TO_CONTINUE = "nothing_to_continue"  # `--continue`: every slot has a terminal receipt
    CHAIN_INVALID = "chain_invalid"  # a chain's links do not name each other, or changed
    REAP_INCOMPLETE = "reap_incomplete"  # reap could not prove every process dead
    RUNS_ROOT_INVALID = "runs_root_invalid"  # `runs` / `--latest`: ROOT is no directory
    RUN_NOT_FOUND = "run_not_found"  # `--latest`: no run directory under ROOT
    RUN_LOG_FAILED = "run_log_failed"  # the run's controller.log: not created / written
    PRUNE_UNRECONCILED = "prune_unreconciled"  # `prune`: a run that is not reconciled
    PRUNE_RUN_LIVE = "prune_run_live"  # `prune`: a controller (or reap) holds the run lease
    PRUNE_NOT_CONFIRMED = "prune_not_confirmed"  # `prune`: no --yes, no terminal, or declined
    PRUNE_CHAIN_PARTIAL = "prune_chain_partial"  # `prune`: a chain's link without every other link
    PRUNE_INCOMPLETE = "prune_incomplete"  # `prune`: entries of a run could not be removed
    CLUSTER_UNAVAILABLE = "cluster_unavailable"  # `cluster`: no Ray, or no cluster there
    CLUSTER_SHARDS_INVALID = "cluster_shards_invalid"  # more shards than checkpoints, no node
    CLUSTER_CAP_TOO_SMALL = "cluster_cap_too_small"  # the cap holds no Rmax per shard
    CLUSTER_SHARD_MISPLACED = "cluster_shard_misplaced"  # a shard on a node it is not bound to
    CLUSTER_RECORDS_INVALID = "cluster_records_invalid"  # a shard's records disagree with the run
    CLUSTER_UNSCHEDULABLE = "cluster_unschedulable"  # a shard not placed on its node in time
    CLUSTER_NODE_UNFIT = "cluster_node_unfit"  # a node cannot run efold (its import fails there)
    CLUSTER_SHARD_UNREACHABLE = "cluster_shard_unreachable"  # a shard run not readable from here
    CGROUP_ARGUMENT_INVALID = "cgroup_argument_invalid"  # a run/launch id that is no opaque id, a pids.max below 1
    CGROUP_PATH_REFUSED = "cgroup_path_refused"  # a symlink, `..` or a path that is no run cgroup below ours
    CGROUP_NOT_FOUND = "cgroup_not_found"  # the cgroup (or a file of it) does not exist
    CGROUP_EXISTS = "cgroup_exists"  # the run's or launch's cgroup already exists
    CGROUP_NOT_PERMITTED = "cgroup_not_permitted"  # this user may not change that cgroup (EACCES, EPERM, EROFS)
    CGROUP_NOT_EMPTY = "cgroup_not_empty"  # remove: the cgroup still holds a process or a child cgroup
    CGROUP_PLACE_UNVERIFIED = "cgroup_place_unverified"  # after placing, /proc/PID/cgroup does not name the cgroup
    CGROUP_CONTROLLER_UNAVAILABLE = "cgroup_controller_unavailable"  # pids.max asked where no pids controller is enabled
    CGROUP_FAILED = "cgroup_failed"  # any other failure of a cgroup operation (its errno in the detail)
    CONTAINMENT_UNAVAILABLE = "containment_unavailable"  # cgroup containment required (campaign, or a real run without --process-group-containment) but no writable cgroup2 here

    # -- report/ -------------------------------------------------------------------
    REPORT_INPUT_INVALID = "report_input_invalid"
    COMPARE_NO_COMMON_SLOTS = "compare_no_common_slots"  # `compare`: plans share no slot
    COMPARISON_INVALID = "comparison_invalid"  # `analyze`: a comparison set breaks its format
    COMPARISON_TOO_LARGE = "comparison_too_large"  # `analyze`: over 8 MiB or 10,000 runs
    CERTIFY_SESSION_INVALID = "certify_session_invalid"  # `certify`: a torn or unlinked line
    CERTIFY_CHILD_FAILED = "certify_child_failed"  # `certify`: the contained child did not finish
    CERTIFY_NOT_APPLICABLE = "certify_not_applicable"  # `certify`: an opaque provider arm


class EfoldError(Exception):
    """Root of every efold failure. ``code`` is the fixed code a report may print;
    ``detail`` is for a human at the terminal and never enters a report."""

    code: Code

    def __init__(self, code: Code, detail: str = "") -> None:
        super().__init__(f"{code.value}: {detail}" if detail else code.value)
        self.code = code
        self.detail = detail

    def __reduce__(self) -> tuple[type[EfoldError], tuple[Code, str]]:
        # Pickled as its own arguments, so that it crosses a process boundary (a Ray
        # task's error) as itself.
        return type(self), (self.code, self.detail)


def interrupted_by(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, or an error a Ctrl-C caused: one that lands while a
    module is imported can come out wrapped (a class's ``__set_name__`` raising it
    becomes a ``RuntimeError`` whose cause it is)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
