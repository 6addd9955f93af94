"""The SQLite store's endpoint directory (issue 16 #1): one id per (account, endpoint name), reserved until stored."""

from __future__ import annotations

from collections.abc import Callable

from devicehub.store.sqlite.endpoint_directory import EndpointDirectory

A, B = "account-a", "account-b"


def minting(device_id: str) -> Callable[[], str]:
    return lambda: device_id


def refusing() -> str:
    raise AssertionError("an id was made for a name that has one")


def test_a_new_name_reserves_its_candidate_and_every_later_claim_gets_that_id() -> None:
    directory = EndpointDirectory()
    assert directory.reserve(A, "ep", minting("id-1")) == "id-1"
    assert directory.reserve(A, "ep", refusing) == "id-1"  # issue 16: a known name makes no id
    assert directory.reserve(B, "ep", minting("id-3")) == "id-3"  # the name is per account
    assert directory.is_reserved("id-1") and directory.is_reserved("id-3")


def test_a_stored_claim_is_no_longer_reserved_and_keeps_its_id() -> None:
    directory = EndpointDirectory()
    directory.reserve(A, "ep", minting("id-1"))
    directory.stored(A, "ep", "id-1")
    assert not directory.is_reserved("id-1")
    assert directory.reserve(A, "ep", minting("id-2")) == "id-1"
    assert directory.known(A, "ep") == "id-1"


def test_loaded_rows_are_known_and_an_enrolment_names_the_account() -> None:
    directory = EndpointDirectory()
    directory.load([("enrolled", B)], [(A, "ep", "id-1"), (A, "ep", "id-old")])  # the last row of a name wins
    assert directory.known(A, "ep") == "id-old"
    assert directory.enrolled("enrolled") == B and directory.enrolled("ep") is None
    directory.enrolled_committed("ep", A)
    assert directory.enrolled("ep") == A


def test_a_deleted_device_frees_its_name_for_a_new_id() -> None:
    directory = EndpointDirectory()
    directory.load([], [(A, "ep", "id-1")])
    directory.reserve(A, "other", minting("id-2"))
    directory.deleted("id-1", [(A, "ep")])
    directory.deleted("id-2", [])  # reserved only: no row named it
    assert directory.reserve(A, "ep", minting("id-3")) == "id-3"
    assert directory.reserve(A, "other", minting("id-4")) == "id-4"
    assert not directory.is_reserved("id-2")
    assert len(directory) == 2


def test_a_deletion_leaves_a_name_that_another_device_holds() -> None:
    directory = EndpointDirectory()
    directory.load([], [(A, "ep", "id-new")])
    directory.deleted("id-old", [(A, "ep")])  # the old device's row named it; the name moved on meanwhile
    assert directory.known(A, "ep") == "id-new"
