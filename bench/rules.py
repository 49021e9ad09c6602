"""Rules on new mail: importing N messages into a mailbox with 50 enabled rules against the same import without rules,
in one run, and a rule's evaluation per message.

Both arms import the same mbox (bench/import_mail.py's mail, with mailing lists and shops among the senders) into a
fresh mailbox of their own tenant on the bench's embedded servers. The rules arm then runs the engine
(apps.worker.rules) until nothing waits: its figure is the import plus the engine, every action a gate call. The
search enricher embeds the rules arm's mail before the engine runs, untimed: it embeds every message with or without
rules, and the "about" conditions only read what it made. The arms alternate (without, with, without, with) and the
medians stand for each. Also printed: the decision alone (apps.rules.engine.decisions) per message for the 50 rules,
and per rule and message, in µs.
Target (issue 39): with rules within 1.3x of without.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.import_mail import make_message, migrated_fresh_database  # noqa: E402

LISTS = ["news.shop.example", "dev.lists.example", "weekly.club.example", "alerts.bank.example"]
SHOPS = ["shop.example", "store.example", "market.example", "tickets.example", "bank.example"]
ABOUT = [
    "invoices and payment reminders",
    "travel plans and flight bookings",
    "job applications and interviews",
    "newsletters with discounts",
    "security alerts about a login",
    "meeting notes and agendas",
    "shipping and delivery updates",
    "birthday party invitations",
    "contract review and signatures",
    "customer complaints",
]


def message(i: int, rng: random.Random) -> bytes:
    raw = make_message(i, rng)
    head, _, rest = raw.partition(b"\n")
    extra = []
    if i % 4 == 0:
        extra.append(f"List-Id: List <{LISTS[i % len(LISTS)]}>".encode())
    if i % 6 == 0:
        head = f"From: Orders <orders@{SHOPS[i % len(SHOPS)]}>".encode()
    return b"\n".join([head, *extra, rest])


def write(path: Path, count: int) -> None:
    import mailbox

    rng = random.Random(20261207)
    box = mailbox.mbox(str(path), create=True)
    box.lock()
    for i in range(count):
        box.add(message(i, rng))
    box.flush()
    box.unlock()
    box.close()


def fifty_rules() -> list[dict[str, Any]]:
    """15 address, 15 subject, 10 List-Id and 10 "about" rules, each labelling (some also archive or mark read)."""
    rules: list[dict[str, Any]] = []
    words = "meeting budget quarterly report draft review schedule project invoice travel lunch team update".split()
    for i in range(15):
        value = SHOPS[i % len(SHOPS)] if i < 5 else f"person{i * 7}@example.test"
        cond = {"field": "from", "op": "domain" if i < 5 else "is", "value": value}
        rules.append({"conditions": [cond], "actions": [{"action": "add_label", "label": f"From {i}"}]})
    for i in range(15):
        cond = {"field": "subject", "value": f"{words[i % len(words)]} {i * 31}"}
        rules.append({"conditions": [cond], "actions": [{"action": "add_label", "label": f"Subject {i}"}]})
    for i in range(10):
        cond = {"field": "list_id", "value": LISTS[i % len(LISTS)] if i < 4 else f"nothing{i}.example"}
        actions = [{"action": "add_label", "label": f"List {i}"}] + ([{"action": "mark_read"}] if i == 0 else [])
        rules.append({"conditions": [cond], "actions": actions})
    for i, text in enumerate(ABOUT):
        about: dict[str, Any] = {"field": "about", "text": text, "threshold": 0.6}
        rules.append({"conditions": [about], "actions": [{"action": "add_label", "label": f"About {i}"}]})
    return [r | {"name": f"Rule {n}"} for n, r in enumerate(rules)]


def setup() -> None:
    migrated_fresh_database()


def arm(path: Path, *, with_rules: bool) -> tuple[float, float, dict[str, int]]:
    """(import seconds, engine seconds, counts) for one fresh tenant."""
    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mail.importing import ensure_local_account, import_mail
    from apps.mail.models import MessageLabel
    from apps.rules.models import RuleApplication
    from apps.search.indexing import enrich_pending
    from apps.search.models import EmbeddingState
    from apps.worker import rules as engine
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person

    person = create_person(email=f"bench-{time.time_ns()}@example.test", password=None)
    account = ensure_local_account(tenant=person.tenant, workspace=person.workspace, name="bench")
    if with_rules:
        me = Caller.person(Membership.objects.get(tenant=person.tenant, user=person.user))
        for rule in fifty_rules():
            dispatch(me, Door.CLI, "create_rule", rule | {"account_id": str(account.pk)}, confirm=True)
    start = time.perf_counter()
    counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=path)
    imported = time.perf_counter() - start
    if not with_rules:
        # its mail is not embedded for nothing by the rules arm's enricher (embedding is the same work in both arms)
        EmbeddingState.objects.for_tenant(person.tenant).delete()
        return imported, 0.0, {"imported": counts.imported}
    enrich_pending()
    start = time.perf_counter()
    engine.run(seconds=3600)
    ran = time.perf_counter() - start
    acted = RuleApplication.objects.for_tenant(person.tenant).count()
    labelled = MessageLabel.objects.for_tenant(person.tenant).count()
    return imported, ran, {"imported": counts.imported, "acted": acted, "labels_put_on": labelled}


def decision_cost(path: Path) -> tuple[float, int]:
    """µs per message for the 50 rules' decisions over the imported mail, in-process (facts already loaded)."""
    from django.utils import timezone

    from apps.mail.models import Message
    from apps.rules.engine import decisions, load
    from apps.rules.models import Rule
    from apps.rules.selectors import facts_of

    rule = Rule.objects.unscoped().order_by("-created_at").first()
    assert rule is not None
    rules = load(Rule.objects.for_tenant(rule.tenant).filter(enabled=True).order_by("position"))
    facts = facts_of(rule.tenant, Message.objects.for_tenant(rule.tenant), [r.body for r in rules])
    now = timezone.now()
    start = time.perf_counter()
    decisions(rules, facts, now)
    return (time.perf_counter() - start) / len(facts) * 1e6, len(rules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    setup()
    without: list[float] = []
    with_: list[tuple[float, float]] = []
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.mbox"
        write(path, args.messages)
        for _ in range(args.rounds):
            without.append(arm(path, with_rules=False)[0])
            imported, ran, counts = arm(path, with_rules=True)
            with_.append((imported, ran))
        per_message, rules = decision_cost(path)
    base = statistics.median(without)
    imp = statistics.median(i for i, _ in with_)
    ran = statistics.median(r for _, r in with_)
    n = args.messages
    print(f"messages: {n}, rules: {rules} enabled, rounds: {args.rounds}; {counts}")
    print(f"import without rules          : {n / base:7.0f} messages/s  ({base:.2f} s)")
    print(f"import with rules             : {n / imp:7.0f} messages/s  ({imp:.2f} s; the queue filled by the trigger)")
    print(f"the engine after it           : {n / ran:7.0f} messages/s  ({ran:.2f} s; every action a gate call)")
    print(f"ratio (with / without)        : {(imp + ran) / base:.2f}x   target <= 1.3x")
    print(
        f"decision per message          : {per_message:7.1f} µs for {rules} rules ({per_message / rules:.2f} µs a rule)"
    )


if __name__ == "__main__":
    main()
