"""A plugin call's process hop: the calendar plugin's handler in the plugin's own process against the same
handler called in this process, on the same parts, in one run; and the whole call through the gate.

- in process: oaken_calendar.list_invites(Service(...), ListIn(...)) with the parts built here, its output
  dumped as JSON (what the plugin's process does after it has the request);
- hop: the same request through apps.operations.plugins.Runtime.ask (JSON over a pipe to the plugin's process,
  the input, settings and parts validated there, the handler, the output validated and sent back);
- through the gate: dispatch of calendar.list_invites as a person, the parts read from the database.

Target (issue 18): the hop adds under 5 ms at the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit_append import setup  # noqa: E402

EVENT = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Bench//EN\r
METHOD:REQUEST\r
BEGIN:VEVENT\r
UID:bench-{n}@example.test\r
DTSTART;TZID=Europe/Paris:202612{day:02d}T100000\r
DTEND;TZID=Europe/Paris:202612{day:02d}T110000\r
SUMMARY:Meeting {n}\r
LOCATION:Room {n}\r
ORGANIZER;CN=Organizer:mailto:organizer@example.test\r
ATTENDEE;CN=Ann;PARTSTAT=NEEDS-ACTION:mailto:ann@example.test\r
ATTENDEE;CN=Bo;PARTSTAT=ACCEPTED:mailto:bo@example.test\r
END:VEVENT\r
END:VCALENDAR\r
"""


def _mail(n: int) -> bytes:
    message = EmailMessage()
    message["From"] = "organizer@example.test"
    message["To"] = "ann@example.test"
    message["Subject"] = f"Invitation: meeting {n}"
    message["Message-ID"] = f"<bench-{n}-{time.time_ns()}@example.test>"
    message.set_content("You are invited.")
    message.add_alternative(EVENT.format(n=n, day=1 + n % 28), subtype="calendar")
    return bytes(message)


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--invites", type=int, default=20, help="messages with an invite in the account")
    args = parser.parse_args()
    setup()

    from django.utils import timezone
    from oaken_calendar import ListIn, Settings, list_invites

    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mail.importing import import_mail
    from apps.mail.models import MailAccount
    from apps.operations.context import Context
    from apps.operations.defs.plugins import _parts
    from apps.operations.plugins import runtime
    from apps.operations.registry import registry
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from oaken_plugin import Part, Service
    from tests.mailfactory import write_mbox

    calendar = runtime("calendar")
    if calendar is None:
        raise SystemExit("the calendar plugin is not installed (make installs plugins/oaken-calendar)")
    person = create_person(email=f"plugins-{time.time_ns()}@example.test", password=None)
    with tempfile.TemporaryDirectory() as tmp:
        mbox = write_mbox(Path(tmp) / "invites.mbox", [_mail(n) for n in range(args.invites)])
        import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=mbox)
    caller = Caller.person(Membership.objects.for_user(person.user).select_related("tenant", "user").get())
    account = MailAccount.objects.for_tenant(person.tenant).get()
    data = {"account_id": str(account.pk), "limit": 50}
    op = registry.get("calendar.list_invites")
    assert op is not None
    ctx = Context(caller=caller, door="ui", now=timezone.now())
    parsed = op.input_model.model_validate(data)
    ctx.targets = op.targets(ctx, parsed) if op.targets else None
    parts = _parts(ctx, parsed, ("text/calendar", "application/ics"))
    request: dict[str, Any] = {
        "kind": "call",
        "operation": "list_invites",
        "input": data,
        "settings": {},
        "now": ctx.now.isoformat(),
        "parts": parts,
    }
    assert len(calendar.ask(request)["invites"]) == args.invites

    local, hop, gate = [], [], []
    for _ in range(args.samples):  # interleaved, so drift hits all three alike
        began = time.perf_counter()
        service = Service(settings=Settings(), now=ctx.now, parts=tuple(Part.model_validate(p) for p in parts))
        list_invites(service, ListIn.model_validate(data)).model_dump(mode="json")
        local.append(time.perf_counter() - began)
        began = time.perf_counter()
        calendar.ask(request)
        hop.append(time.perf_counter() - began)
        began = time.perf_counter()
        dispatch(caller, Door.UI, "calendar.list_invites", data)
        gate.append(time.perf_counter() - began)

    (l50, l95), (h50, h95), (g50, g95) = _ms(local), _ms(hop), _ms(gate)
    print(f"calendar.list_invites, {args.invites} invites, {args.samples} calls each")
    print(f"{'':<34} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"{'handler in this process':<34} {l50:>8.2f} {l95:>8.2f}")
    print(f"{'handler in the plugin process':<34} {h50:>8.2f} {h95:>8.2f}")
    print(f"{'through the gate (parts from db)':<34} {g50:>8.2f} {g95:>8.2f}")
    print(f"the process hop adds {h50 - l50:.2f} ms at the median (target < 5 ms); ratio {h50 / l50:.2f}")


if __name__ == "__main__":
    main()
