"""A plugin call in its sandbox against the same call in a process with no sandbox, in one run, on the same data:
the calendar plugin's list_invites over N invites.

- whole call: dispatch of calendar.list_invites as a person (the gate, the parts read from the database, the
  hop to the plugin's process and back, the output checked, the audit event);
- hop: the same request through Runtime.ask alone (JSON over a pipe to the plugin's process and back);
- start: a new process of the plugin until it has imported the plugin and said it is ready (the pool keeps
  processes, so a call pays this only when its tenant has none idle);
- idle pool: the memory (RSS, and PSS: shared pages counted once) of the idle processes the calls left.

The baseline is OAKEN_PLUGIN_SANDBOX=none, measured in the same run: the same host, the same pool, no bwrap, no
seccomp, no namespaces (what plugins ran in before the sandbox, less its in-process audit hook). Two people call,
one per mode: a process serves one tenant, and its mode is the one it was started in, so calls alternate between
the two without one mode's processes serving the other's calls.

Target (issue 34): the sandboxed whole call's median within 1.5x of the 30 ms measured before the sandbox.
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
BEFORE_MS = 30.3  # the whole call before the sandbox (docs/plugins.md, 2026-11)


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
    return statistics.median(ordered) * 1000, ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000


def _memory(pid: int) -> tuple[float, float]:
    """RSS and PSS of a process, in MB."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "Rss":
                rss = int(value.split()[0])
            elif name == "Pss":
                pss = int(value.split()[0])
    except OSError:
        pass
    return rss / 1024, pss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--invites", type=int, default=20, help="messages with an invite in the account")
    parser.add_argument("--starts", type=int, default=20, help="process starts timed per mode")
    args = parser.parse_args()
    setup()

    from django.conf import settings
    from django.utils import timezone

    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mail.importing import import_mail
    from apps.mail.models import MailAccount
    from apps.operations.context import Context
    from apps.operations.defs.plugins import _parts
    from apps.operations.plugin_processes import pools
    from apps.operations.plugin_runtime import runtime
    from apps.operations.registry import registry
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from tests.mailfactory import write_mbox

    calendar = runtime("calendar")
    if calendar is None:
        raise SystemExit("the calendar plugin is not loaded (make installs it; see the log for why it was refused)")
    op = registry.get("calendar.list_invites")
    assert op is not None

    people: dict[str, Any] = {}
    for mode in ("bwrap", "none"):
        person = create_person(email=f"plugins-{mode}-{time.time_ns()}@example.test", password=None)
        with tempfile.TemporaryDirectory() as tmp:
            mbox = write_mbox(Path(tmp) / "invites.mbox", [_mail(n) for n in range(args.invites)])
            import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=mbox)
        caller = Caller.person(Membership.objects.for_user(person.user).select_related("tenant", "user").get())
        account = MailAccount.objects.for_tenant(person.tenant).get()
        data = {"account_id": str(account.pk), "limit": 50}
        ctx = Context(caller=caller, door="ui", now=timezone.now())
        parsed = op.input_model.model_validate(data)
        ctx.targets = op.targets(ctx, parsed) if op.targets else None
        request = {
            "kind": "call",
            "operation": "list_invites",
            "input": data,
            "settings": {},
            "now": ctx.now.isoformat(),
            "parts": _parts(ctx, parsed, ("text/calendar", "application/ics")),
        }
        people[mode] = (caller, data, request, str(person.tenant.pk))

    def use(mode: str) -> None:
        settings.PLUGIN_SANDBOX = mode

    for mode, (caller, data, request, tenant) in people.items():
        use(mode)
        assert len(calendar.ask(request, tenant=tenant)["invites"]) == args.invites
        assert len(dispatch(caller, Door.UI, "calendar.list_invites", data).output["invites"]) == args.invites

    whole: dict[str, list[float]] = {"bwrap": [], "none": []}
    hop: dict[str, list[float]] = {"bwrap": [], "none": []}
    for _ in range(args.samples):  # interleaved, so drift hits both alike
        for mode, (caller, data, request, tenant) in people.items():
            use(mode)
            began = time.perf_counter()
            dispatch(caller, Door.UI, "calendar.list_invites", data)
            whole[mode].append(time.perf_counter() - began)
            began = time.perf_counter()
            calendar.ask(request, tenant=tenant)
            hop[mode].append(time.perf_counter() - began)

    idle = {mode: [p for p in pools.idle("calendar") if p.key[1] == people[mode][3]] for mode in people}
    memory = {mode: [_memory(p.pid) for p in idle[mode]] for mode in people}

    starts: dict[str, list[float]] = {"bwrap": [], "none": []}
    for _ in range(args.starts):
        for mode in people:
            use(mode)
            began = time.perf_counter()
            process = calendar._start(("calendar", "bench-start"))
            starts[mode].append(time.perf_counter() - began)
            process.kill()
    use("bwrap")

    print(f"calendar.list_invites, {args.invites} invites, {args.samples} calls per mode, interleaved")
    print(f"{'':<30} {'bwrap p50':>10} {'p95':>8} {'none p50':>10} {'p95':>8} {'ratio':>7}")
    for label, samples in (("whole call (ms)", whole), ("hop (ms)", hop), ("process start (ms)", starts)):
        (b50, b95), (n50, n95) = _ms(samples["bwrap"]), _ms(samples["none"])
        print(f"{label:<30} {b50:>10.2f} {b95:>8.2f} {n50:>10.2f} {n95:>8.2f} {b50 / n50:>7.2f}")
    for mode in people:
        rss = sum(r for r, _ in memory[mode])
        pss = sum(p for _, p in memory[mode])
        print(f"idle pool, {mode}: {len(idle[mode])} process(es), RSS {rss:.1f} MB, PSS {pss:.1f} MB")
    b50 = _ms(whole["bwrap"])[0]
    print(
        f"sandboxed whole call {b50:.2f} ms = {b50 / BEFORE_MS:.2f}x the {BEFORE_MS} ms before the sandbox "
        f"(target 1.5x); {b50 / _ms(whole['none'])[0]:.2f}x the unsandboxed process in this run"
    )


if __name__ == "__main__":
    main()
