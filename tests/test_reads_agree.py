"""Two rules are written twice, once over the ORM (apps.mail.selectors, for the changes that organize mail and the
plugin bridge) and once in SQL (apps.mail.reads.listing_of, for the hot listings): which folder a name names (the
standard folder of that kind, else the folder of that name), and whether a reach is restricted (some of the
tenant's accounts lie outside its workspaces). Each pair must give the same answer, for every case below."""

from __future__ import annotations

import pytest

from apps.core.errors import OakenError
from apps.mail.importing import ensure_local_account
from apps.mail.models import Folder, FolderKind, MailAccount
from apps.mail.reads import listing_of
from apps.mail.selectors import Reach, access_folder_by_name
from apps.workspaces.models import Workspace
from tests.conftest import Person

NAMES = ["inbox", "Inbox", "archive", "Archive", "custom", "Projects", "Sent", "trash", "missing", "", "INBOX"]


def _by_orm(name: str, account: MailAccount) -> object:
    try:
        return access_folder_by_name(name, account=account).pk
    except OakenError as error:
        return error.code


def _by_sql(name: str, reach: Reach, account: MailAccount) -> object:
    try:
        return listing_of(reach, account_id=str(account.pk), label_id=None, folder=name).folder
    except OakenError as error:
        return error.code


def test_a_folder_name_names_the_same_folder_both_ways(alice: Person, mallory: Person) -> None:
    account = ensure_local_account(tenant=alice.tenant, workspace=alice.workspace, name="Mail")
    # custom folders whose names are a kind's, a standard folder's name, or a plain name
    for name in ("archive", "Projects", "trash"):
        Folder.objects.create(tenant=alice.tenant, account=account, kind=FolderKind.CUSTOM, name=name.upper())
    Folder.objects.create(tenant=alice.tenant, account=account, kind=FolderKind.CUSTOM, name="Projects")
    Folder.objects.create(tenant=alice.tenant, account=account, kind=FolderKind.CUSTOM, name="custom")
    theirs = ensure_local_account(tenant=mallory.tenant, workspace=mallory.workspace, name="Mail")
    Folder.objects.create(tenant=mallory.tenant, account=theirs, kind=FolderKind.CUSTOM, name="missing")
    reach = Reach(alice.tenant, None)
    for name in NAMES:
        assert _by_orm(name, account) == _by_sql(name, reach, account), name
    assert _by_sql("missing", reach, account) == "NOT_FOUND"  # the other tenant's folder of that name is not seen
    inbox = Folder.objects.for_tenant(alice.tenant).get(account=account, kind=FolderKind.INBOX)
    assert _by_sql("inbox", reach, account) == inbox.pk == _by_sql("Inbox", reach, account)


@pytest.mark.parametrize("elsewhere", [False, True])
def test_a_reach_is_restricted_the_same_both_ways(elsewhere: bool, alice: Person, mallory: Person) -> None:
    ensure_local_account(tenant=alice.tenant, workspace=alice.workspace, name="Mail")
    # another tenant's accounts in workspaces of any name never restrict alice's reach
    other = Workspace.objects.create(tenant=mallory.tenant, name="elsewhere")
    ensure_local_account(tenant=mallory.tenant, workspace=other, name="Theirs")
    if elsewhere:
        far = Workspace.objects.create(tenant=alice.tenant, name="elsewhere")
        ensure_local_account(tenant=alice.tenant, workspace=far, name="Far")
    for workspaces in (None, (alice.workspace.name,), (alice.workspace.name, "elsewhere"), ("nowhere",)):
        reach = Reach(alice.tenant, workspaces)
        try:
            listing_of(reach, account_id=None, label_id=None, folder=None)
            refused = ""
        except OakenError as error:
            refused = error.code
        assert refused == ("OUT_OF_SCOPE" if reach.restricted else ""), workspaces
    assert Reach(alice.tenant, (alice.workspace.name,)).restricted is elsewhere
