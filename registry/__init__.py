"""registry/: durable state. Durable and private files, the run lease, the journal,
signed authorizations and the burn registry. It never talks to a model.

Import the public names from here (``from efold.registry import acquire_lease``).
Names load lazily: a child process that only needs ``probe_lease`` imports the lease
module (msgspec) and not the authorization code (cryptography), which would cost tens
of milliseconds per child start (docs/architecture.md §8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from efold.lazy import lazy_exports

if TYPE_CHECKING:
    from efold.registry.approver_keys import load_private_key as load_private_key
    from efold.registry.approver_keys import load_public_key as load_public_key
    from efold.registry.approver_keys import write_key_pair as write_key_pair
    from efold.registry.authorization import FAUX_ACCOUNT_ID as FAUX_ACCOUNT_ID
    from efold.registry.authorization import MAX_CLOCK_SKEW_S as MAX_CLOCK_SKEW_S
    from efold.registry.authorization import MAX_VALIDITY_S as MAX_VALIDITY_S
    from efold.registry.authorization import AccountCommitment as AccountCommitment
    from efold.registry.authorization import Attestation as Attestation
    from efold.registry.authorization import AuthorizationBindings as AuthorizationBindings
    from efold.registry.authorization import AuthorizationDomain as AuthorizationDomain
    from efold.registry.authorization import FauxMint as FauxMint
    from efold.registry.authorization import SignedAuthorization as SignedAuthorization
    from efold.registry.authorization import VerifiedAuthorization as VerifiedAuthorization
    from efold.registry.authorization import canonical_output_root as canonical_output_root
    from efold.registry.authorization import check_signature as check_signature
    from efold.registry.authorization import commit_account as commit_account
    from efold.registry.authorization import mint_faux_authorization as mint_faux_authorization
    from efold.registry.authorization import new_authorization_id as new_authorization_id
    from efold.registry.authorization import public_key_id as public_key_id
    from efold.registry.authorization import sign_attestation as sign_attestation
    from efold.registry.authorization import verify_authorization as verify_authorization
    from efold.registry.authorization import verify_faux_authorization as verify_faux_authorization
    from efold.registry.authorization import verify_real_authorization as verify_real_authorization
    from efold.registry.burn import CLAIM_NAME as CLAIM_NAME
    from efold.registry.burn import CONSUMED_MARKER as CONSUMED_MARKER
    from efold.registry.burn import ConsumptionRecord as ConsumptionRecord
    from efold.registry.burn import consume_authorization as consume_authorization
    from efold.registry.burn import faux_registry_root as faux_registry_root
    from efold.registry.burn import real_registry_root as real_registry_root
    from efold.registry.burn import registry_key as registry_key
    from efold.registry.burn import verify_consumption as verify_consumption
    from efold.registry.errors import RegistryError as RegistryError
    from efold.registry.files import check_owner_safe as check_owner_safe
    from efold.registry.files import fsync_dir as fsync_dir
    from efold.registry.files import fsync_fd as fsync_fd
    from efold.registry.files import make_private_dir as make_private_dir
    from efold.registry.files import open_dir_nofollow as open_dir_nofollow
    from efold.registry.files import publish_exclusive as publish_exclusive
    from efold.registry.files import read_private as read_private
    from efold.registry.journal import JOURNAL_NAME as JOURNAL_NAME
    from efold.registry.journal import JournalReader as JournalReader
    from efold.registry.journal import JournalWriter as JournalWriter
    from efold.registry.journal import journal_path as journal_path
    from efold.registry.lease import LEASE_NAME as LEASE_NAME
    from efold.registry.lease import Lease as Lease
    from efold.registry.lease import LeaseHolder as LeaseHolder
    from efold.registry.lease import LeaseState as LeaseState
    from efold.registry.lease import LeaseStatus as LeaseStatus
    from efold.registry.lease import acquire_lease as acquire_lease
    from efold.registry.lease import probe_lease as probe_lease

__getattr__, __dir__ = lazy_exports(__name__, __file__)
