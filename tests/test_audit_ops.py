"""The audit log as persons read it: filtered, in words, names resolved but never mail; verified with its head
hash or its first broken event; exported as JSON lines that a standalone script verifies offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from apps.agents.keys import caller_for_key, issue_key
from apps.audit import chainfile
from apps.audit.models import AuditEvent
from tests.callers import as_person, call, joined, membership, refusal
from tests.commands import run_json
from tests.conftest import Person
from tests.mailbox import build_mailbox
from tests.test_audit import _triggers_off


def _key(p: Person, name: str) -> Any:
    row, secret = issue_key(
        membership=membership(p), scopes=["read", "write"], workspaces=["default"], allow_list=None,
        expires_at=None, name=name,
    )  # fmt: skip
    agent = caller_for_key(secret)
    assert agent is not None
    return row, agent


def _export(p: Person, limit: int | None = None) -> list[str]:
    lines: list[str] = []
    cursor = None
    while True:
        body: dict[str, Any] = {"cursor": cursor} if cursor else {}
        if limit:
            body["limit"] = limit
        out = call(as_person(p), "export_audit_chain", body)
        lines += out["lines"]
        cursor = out["next_cursor"]
        if cursor is None:
            return lines


def test_events_read_in_words_with_names_and_never_mail(alice: Person, mallory: Person, tmp_path: Path) -> None:
    box = build_mailbox(alice, tmp_path / "a", prefix="alice", with_work=False)
    theirs = build_mailbox(mallory, tmp_path / "m", prefix="mallory", with_work=False)
    key, agent = _key(alice, "laptop script")
    call(agent, "get_message", {"message_id": box.messages["zeppelin"]})
    call(agent, "mark_read", {"message_ids": box.ids("trip-0", "trip-1")})
    assert refusal(agent, "list_audit_events").code == "NOT_AVAILABLE"  # never an agent's
    call(as_person(mallory), "mark_read", {"message_ids": theirs.ids("trip-0")})

    out = call(as_person(alice), "list_audit_events", {"credential_id": str(key.pk), "credential_kind": "apikey"})
    rows = out["events"]
    assert [r["operation"] for r in rows] == ["list_audit_events", "mark_read", "get_message"]
    marked = rows[1]
    assert marked["credential"] == f"laptop script ({key.prefix}_…)" and marked["person"] == "alice@example.test"
    assert marked["description"] == (
        f"API key laptop script ({key.prefix}_…) for alice@example.test mark read on 2 messages over MCP"
    )
    assert [t["kind"] for t in marked["targets"]] == ["message", "message"]
    assert rows[0]["description"].endswith("was refused list audit events over MCP: NOT_AVAILABLE")
    text = json.dumps(call(as_person(alice), "list_audit_events", {"limit": 200}))
    for mail in box.mail_strings() + theirs.mail_strings():
        assert mail not in text
    assert "mallory" not in text and str(mallory.tenant.pk) not in text

    # filters: outcome, principal, operation, time, and a cursor that pages newest first
    refused = call(as_person(alice), "list_audit_events", {"outcome": "refused"})["events"]
    assert {r["outcome"] for r in refused} == {"NOT_AVAILABLE"}
    people = call(as_person(alice), "list_audit_events", {"principal": "person", "operation": "mark_read"})
    assert [r["person"] for r in people["events"]] == ["alice@example.test"]  # the mailbox's own marking
    later = call(as_person(alice), "list_audit_events", {"since": (timezone.now() + timedelta(hours=1)).isoformat()})
    assert later["events"] == []
    first = call(as_person(alice), "list_audit_events", {"limit": 2})
    second = call(as_person(alice), "list_audit_events", {"limit": 2, "cursor": first["next_cursor"]})
    assert first["events"][-1]["seq"] - 1 == second["events"][0]["seq"]
    assert refusal(as_person(alice), "list_audit_events", {"since": "2026-01-01T00:00:00"}).field == "since"


def test_a_member_reads_only_their_own_and_their_agents_events(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    _, bobs_agent = _key(bob, "bob's bot")
    call(bobs_agent, "list_accounts")
    call(as_person(alice), "list_accounts")
    rows = call(as_person(bob), "list_audit_events")["events"]
    assert {r["person"] for r in rows} == {"bob@example.test"}
    assert "list_accounts" in {r["operation"] for r in rows}
    everyone = {r["person"] for r in call(as_person(alice), "list_audit_events")["events"]}
    assert {"alice@example.test", "bob@example.test"} <= everyone
    # naming another person's id shows nothing more
    alices = call(as_person(bob), "list_audit_events", {"person_id": str(alice.user.pk)})["events"]
    assert alices == []
    assert refusal(as_person(bob), "verify_audit").code == "FORBIDDEN"
    assert refusal(as_person(bob), "export_audit_chain").code == "FORBIDDEN"


def test_verify_says_intact_with_its_head_or_names_the_first_broken_event(alice: Person, mallory: Person) -> None:
    for _ in range(3):
        call(as_person(alice), "list_accounts")
    call(as_person(mallory), "list_accounts")
    out = call(as_person(alice), "verify_audit")
    assert out["ok"] is True and out["events_checked"] == 3
    assert out["head_hash"] == AuditEvent.objects.for_tenant(alice.tenant).get(seq=3).hash
    with _triggers_off() as cursor:
        cursor.execute(
            "UPDATE audit_auditevent SET outcome = 'FORBIDDEN' WHERE tenant_id = %s AND seq = 2", [alice.tenant.pk]
        )
    out = call(as_person(alice), "verify_audit")
    assert (out["ok"], out["first_broken_seq"], out["reason"]) == (False, 2, "hash mismatch")
    assert out["broken_operation"] == "list_accounts" and out["broken_at"] is not None
    assert call(as_person(mallory), "verify_audit")["ok"] is True


def test_an_export_verifies_offline_and_one_edited_byte_is_found_at_its_row(
    alice: Person, mallory: Person, tmp_path: Path, settings: Any
) -> None:
    for _ in range(5):
        call(as_person(alice), "list_accounts")
    call(as_person(mallory), "list_accounts")
    lines = _export(alice, limit=2)  # three pages, of the chain as it was at the first
    assert len(lines) == 5 and [json.loads(line)["seq"] for line in lines] == [1, 2, 3, 4, 5]
    assert all(json.loads(line)["tenant_id"] == str(alice.tenant.pk) for line in lines)
    report = chainfile.verify_lines(lines)
    assert report.ok and report.events == 5 and report.head_hash == json.loads(lines[-1])["hash"]

    path = tmp_path / "chain.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, data = run_json("audit", "verify", "--file", str(path))
    assert code == 0 and data["ok"] is True and data["summary"].startswith("intact, 5 events, head hash ")

    # the standalone script, copied alone to another folder, run without Oaken on the path
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    shutil.copy(chainfile.__file__, alone / "verify_chain.py")
    ran = subprocess.run(
        [sys.executable, "-I", str(alone / "verify_chain.py"), str(path)], capture_output=True, text=True, cwd=alone
    )
    assert ran.returncode == 0 and ran.stdout.startswith("intact, 5 events")

    edited = bytearray(path.read_bytes())
    row3 = sum(len(line) + 1 for line in lines[:2])
    at = edited.index(b'"outcome":"ok"', row3) + len('"outcome":"')
    edited[at] = ord("O")  # one byte of row 3
    path.write_bytes(bytes(edited))
    code, data = run_json("audit", "verify", "--file", str(path))
    assert code == 1 and (data["row"], data["seq"], data["reason"]) == (3, 3, "hash mismatch")
    ran = subprocess.run(
        [sys.executable, "-I", str(alone / "verify_chain.py"), str(path)], capture_output=True, text=True
    )
    assert ran.returncode == 1 and ran.stdout.strip() == "broken at row 3 (event #3): hash mismatch"

    # a row taken out, and a row that no longer parses, are named too
    assert chainfile.verify_lines(lines[:1] + lines[2:]).as_dict()["row"] == 2
    assert chainfile.verify_lines([*lines[:3], lines[3][:-2], lines[4]]).as_dict() == {
        "ok": False, "events": 3, "row": 4, "seq": None, "reason": "not a JSON object",
    }  # fmt: skip
    settings.OPERATIONS = {**settings.OPERATIONS, "AUDIT_EXPORT_PAGE_MAX": 3}
    assert refusal(as_person(alice), "export_audit_chain", {"limit": 4}).code == "LIMIT_EXCEEDED"


def test_the_consoles_own_reads_fold_into_one_line_per_person_and_day(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    _, agent = _key(alice, "laptop script")
    call(as_person(alice), "create_workspace", {"name": "ops"}, confirm=True)
    for _ in range(4):
        call(as_person(alice), "list_accounts")  # what an idle page refreshes
    call(as_person(alice), "list_api_keys")
    call(agent, "list_accounts")  # what an assistant read: always shown
    refusal(as_person(bob), "verify_audit")  # a refusal: always shown
    call(as_person(bob), "list_accounts")
    for _ in range(3):
        call(as_person(mallory), "list_accounts")

    everything = call(as_person(alice), "list_audit_events", {"limit": 100})
    assert everything["folded_reads"] == [] and len(everything["events"]) == 9  # nothing folded unless asked
    out = call(as_person(alice), "list_audit_events", {"console_reads": "fold", "limit": 100})
    shown = [(r["operation"], r["principal"], r["outcome"]) for r in out["events"]]
    assert shown == [
        ("verify_audit", "person", "FORBIDDEN"),
        ("list_accounts", "agent", "ok"),
        ("create_workspace", "person", "ok"),
    ]
    folds = {f["person"]: f for f in out["folded_reads"]}
    assert set(folds) == {"alice@example.test", "bob@example.test"}  # the listing's own read is folded too
    mine = folds["alice@example.test"]
    assert mine["count"] == 6 and mine["areas"] == ["mail", "assistants", "the audit log"]
    assert mine["description"] == "You looked at mail, assistants and the audit log in the console 6 times"
    assert folds["bob@example.test"]["description"].startswith("bob@example.test looked at mail in")
    assert mine["first_seq"] < mine["last_seq"] and mine["first_at"] <= mine["last_at"]
    # the reads are still in the chain, and verified with it
    assert len(call(as_person(alice), "list_audit_events", {"limit": 100})["events"]) == 11
    assert call(as_person(alice), "verify_audit")["ok"] is True

    # paged: each page folds the reads between its events, and no read is counted twice
    reads = AuditEvent.objects.for_tenant(alice.tenant).filter(principal="person", door="ui", outcome="ok")
    folded = reads.exclude(operation="create_workspace").count()
    first = call(as_person(alice), "list_audit_events", {"console_reads": "fold", "limit": 2})
    second = call(
        as_person(alice), "list_audit_events", {"console_reads": "fold", "limit": 2, "cursor": first["next_cursor"]}
    )
    assert second["next_cursor"] is None
    assert sum(f["count"] for f in first["folded_reads"] + second["folded_reads"]) == folded

    # a MEMBER folds only their own, and another tenant's reads never count
    bobs = call(as_person(bob), "list_audit_events", {"console_reads": "fold"})
    assert {f["person"] for f in bobs["folded_reads"]} == {"bob@example.test"}
    assert {r["person"] for r in bobs["events"]} == {"bob@example.test"}
    theirs = call(as_person(mallory), "list_audit_events", {"console_reads": "fold"})
    assert theirs["events"] == [] and [f["count"] for f in theirs["folded_reads"]] == [3]


def test_the_fold_counts_a_bounded_stretch_and_says_when_it_stopped(
    alice: Person, mallory: Person, settings: Any
) -> None:
    """However many reads lie between two changes, a page counts at most AUDIT_FOLD_SCAN_MAX of the newest events,
    and says so: older reads are then neither listed nor counted, and the answer does not pretend otherwise."""
    for _ in range(6):
        call(as_person(alice), "list_accounts")
    call(as_person(mallory), "list_accounts")
    whole = call(as_person(alice), "list_audit_events", {"console_reads": "fold"})
    assert whole["folded_reads_complete"] is True and [f["count"] for f in whole["folded_reads"]] == [6]
    settings.OPERATIONS = {**settings.OPERATIONS, "AUDIT_FOLD_SCAN_MAX": 4}
    cut = call(as_person(alice), "list_audit_events", {"console_reads": "fold"})
    # the newest 4 events: the 7th listing read (whole's) is among them, and the first read of the 6 is not
    assert cut["folded_reads_complete"] is False and [f["count"] for f in cut["folded_reads"]] == [4]
    assert cut["events"] == []


def test_one_event_in_full_with_its_neighbours(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    key, agent = _key(alice, "laptop script")
    call(as_person(alice), "list_accounts")  # 1
    call(agent, "list_accounts")  # 2
    call(as_person(bob), "list_accounts")  # 3
    call(as_person(mallory), "list_accounts")
    out = call(as_person(alice), "get_audit_event", {"seq": 2})
    event = out["event"]
    assert (event["seq"], event["operation"], event["door"]) == (2, "list_accounts", "mcp")
    assert out["who"] == f"API key laptop script ({key.prefix}_…) for alice@example.test"
    assert out["on_behalf_of"] == "alice@example.test" and out["door_words"].startswith("MCP")
    stored = AuditEvent.objects.for_tenant(alice.tenant).get(seq=2)
    assert (out["prev_hash"], event["hash"], event["input_digest"]) == (
        stored.prev_hash, stored.hash, stored.input_digest,
    )  # fmt: skip
    assert out["prev_hash"] == AuditEvent.objects.for_tenant(alice.tenant).get(seq=1).hash
    assert (out["previous_seq"], out["next_seq"]) == (1, 3)
    # a MEMBER: their own events only, and only the neighbours they may see
    assert refusal(as_person(bob), "get_audit_event", {"seq": 2}).code == "NOT_FOUND"
    bobs = call(as_person(bob), "get_audit_event", {"seq": 3})
    assert bobs["who"] == "bob@example.test" and (bobs["previous_seq"], bobs["next_seq"]) == (None, None)
    # another tenant's chain is not reached by its sequence numbers
    assert call(as_person(mallory), "get_audit_event", {"seq": 1})["event"]["person"] == "mallory@example.test"
    assert refusal(as_person(mallory), "get_audit_event", {"seq": 3}).code == "NOT_FOUND"
    assert refusal(agent, "get_audit_event", {"seq": 1}).code == "NOT_AVAILABLE"


def test_verify_and_export_agree_on_the_head(alice: Person, mallory: Person, tmp_path: Path) -> None:
    for _ in range(3):
        call(as_person(alice), "list_accounts")
    call(as_person(mallory), "list_accounts")
    verified = call(as_person(alice), "verify_audit")
    assert verified["ok"] is True and verified["head_seq"] == 3 == verified["events_checked"]
    call(as_person(alice), "list_accounts")  # the log moves on meanwhile
    for up_to in (verified["head_seq"], verified["head_hash"]):
        lines: list[str] = []
        page = call(as_person(alice), "export_audit_chain", {"up_to": up_to, "limit": 2})
        lines += page["lines"]
        while page["next_cursor"]:
            page = call(as_person(alice), "export_audit_chain", {"cursor": page["next_cursor"], "limit": 2})
            lines += page["lines"]
        assert page["head_seq"] == 3 and len(lines) == 3
        assert json.loads(lines[-1])["hash"] == verified["head_hash"]
        report = chainfile.verify_lines(lines)
        assert report.ok and report.head_hash == verified["head_hash"]
    path = tmp_path / "chain.jsonl"
    path.write_text("\n".join(lines) + "\n")
    ran = subprocess.run([sys.executable, "-I", chainfile.__file__, str(path)], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == f"intact, 3 events, head hash {verified['head_hash']}"
    # without up_to: the newest event when asked, as before
    assert call(as_person(alice), "export_audit_chain")["head_seq"] > 3
    # a head that is not this tenant's, or not yet written, is no end
    theirs = AuditEvent.objects.for_tenant(mallory.tenant).get(seq=1).hash
    assert refusal(as_person(alice), "export_audit_chain", {"up_to": theirs}).code == "NOT_FOUND"
    assert refusal(as_person(alice), "export_audit_chain", {"up_to": 10_000}).code == "NOT_FOUND"


def test_the_offline_verifier_downloads_and_verifies_an_export(
    client: Any, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    for _ in range(3):
        call(as_person(alice), "list_accounts")
    call(as_person(mallory), "list_accounts")
    answer = client.get("/audit/verifier.py")  # signed in or not: it holds no secret
    assert answer.status_code == 200
    assert answer["Content-Disposition"] == 'attachment; filename="verifier.py"'
    assert answer.content == Path(chainfile.__file__).read_bytes()
    assert client.post("/audit/verifier.py").status_code == 405
    verifier = tmp_path / "verifier.py"
    verifier.write_bytes(answer.content)
    verified = call(as_person(alice), "verify_audit")
    lines = call(as_person(alice), "export_audit_chain", {"up_to": verified["head_hash"]})["lines"]
    chain = tmp_path / "chain.jsonl"
    chain.write_text("\n".join(lines) + "\n")
    ran = subprocess.run(
        [sys.executable, "-I", "verifier.py", "chain.jsonl"], capture_output=True, text=True, cwd=tmp_path
    )
    assert ran.returncode == 0 and ran.stdout.strip() == f"intact, 3 events, head hash {verified['head_hash']}"
    assert str(mallory.tenant.pk) not in chain.read_text()
