"""The mailbox page: time to the first rendered message list of a 10,000-message folder, against the REST call alone.

One run on the bench's own embedded servers (var/bench), one gunicorn as `oaken serve` runs it:
  * REST alone : POST /api/v1/ops/list_messages (the inbox's first page) signed in over HTTP, the call the page
                 waits for before it shows anything;
  * the page   : headless Chromium loads /mail with the same session, from the navigation's start until the
                 first page of rows is in the document (the mark `oaken:first-list` the page sets, on the
                 browser's clock): the shell, which brings the first screen (list_accounts, list_labels and
                 list_messages, read through the gate by the server: apps.console.views.first_screen), and its
                 script modules, which render it (the folders' counts are asked after); each load a fresh one.
For scale, the browser's own floor: a console page that shows no mail (/policies) to its DOMContentLoaded.
Interleaved rounds, so machine noise spreads over all three. A second tenant holds mail of its own, which must never
show. Prints the medians and p95s and their ratio. Target (issue 17): the page adds at most 1.5x to the call.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit_append import setup  # noqa: E402
from bench.mcp_latency import _pct, _signed_in, _start  # noqa: E402
from tests.loopback import free_port, stop  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def _make_data(workdir: Path, messages: int) -> tuple[str, str, str, str]:
    """A person whose one account holds `messages` messages in its inbox, and another tenant's mailbox.
    Returns (email, password, account id, the other tenant's account id)."""
    from django.utils import timezone

    from apps.mail.importing import import_mail
    from apps.workspaces.services import create_person
    from bench.import_mail import write_mbox

    stamp = time.time_ns()
    password = f"bench-{stamp}-password"
    accounts = []
    email = ""
    for who, count in (("alice", messages), ("mallory", 200)):
        person = create_person(email=f"console-{who}-{stamp}@example.test", password=password)
        person.user.email_verified_at = timezone.now()
        person.user.save(update_fields=["email_verified_at"])
        mbox = workdir / f"{who}.mbox"
        write_mbox(mbox, count)
        counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=mbox)
        assert counts.imported == count, counts
        accounts.append(str(counts.account_id))
        email = email or person.user.email
    return email, password, accounts[0], accounts[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="messages in the folder")
    parser.add_argument("--loads", type=int, default=40, help="timed page loads (and as many REST calls)")
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: install Debian's chromium (bin/system-packages does, as root)")
    setup()
    logging.getLogger("httpx2").setLevel(logging.WARNING)

    import httpx2
    from playwright.sync_api import Request, sync_playwright

    from apps.server.management.commands.serve import web_command
    from tests.browser import ARGS

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        email, password, account, foreign = _make_data(Path(tmp), args.messages)
    print(f"imported {args.messages} messages in {time.perf_counter() - began:.1f} s")

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    port = free_port()
    server = _start("gunicorn", web_command(f"127.0.0.1:{port}", 2, quiet=True), port, env)
    base = f"http://127.0.0.1:{port}"
    rest = httpx2.Client(timeout=30)
    try:
        csrf = _signed_in(rest, base, email, password)
        rest.headers.update({"X-CSRFToken": csrf, "Accept": "application/json"})
        body = {"account_id": account, "folder": "inbox"}
        first = rest.post(base + "/api/v1/ops/list_messages", json=body)
        assert first.status_code == 200, first.text[:300]
        rows = len(first.json()["messages"])
        assert rows > 0 and first.json()["next_cursor"], "the folder holds more than a page"
        theirs = rest.post(base + "/api/v1/ops/list_messages", json={"account_id": foreign, "folder": "inbox"})
        assert theirs.status_code == 404, "another tenant's account is not found"

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 900})
            context.add_cookies(
                [{"name": name, "value": str(value), "url": base} for name, value in rest.cookies.items()]
            )
            page = context.new_page()
            # the list of messages (what REST list_messages answers), not the conversations the page shows by default
            page.goto("/mail")
            tenant = page.locator("main").get_attribute("data-tenant")
            context.add_cookies([{"name": f"oaken_mail_view_{tenant}", "value": "messages", "url": base + "/mail"}])

            def load_page() -> float:
                """From the navigation's start to the mark the page sets once its first list is rendered (the
                browser's own clock: no polling from here in the figure)."""
                page.goto("/mail", wait_until="commit")
                page.locator("#message-list li.message").nth(rows - 1).wait_for(state="attached")
                mark = page.evaluate("performance.getEntriesByName('oaken:first-list')[0].startTime")
                return float(mark) / 1000

            def load_floor() -> float:
                """The browser's own floor, for scale: a console page that shows no mail (/policies), from the
                navigation's start to its DOMContentLoaded (its shell parsed and its script modules run)."""
                page.goto("/policies", wait_until="domcontentloaded")
                entry = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventStart")
                return float(entry) / 1000

            def call_rest() -> float:
                start = time.perf_counter()
                answer = rest.post(base + "/api/v1/ops/list_messages", json=body)
                took = time.perf_counter() - start
                assert answer.status_code == 200
                return took

            for _ in range(args.warmup):
                load_page()
                call_rest()
                load_floor()
            page.goto("/mail")
            page.locator("#message-list li.message").nth(rows - 1).wait_for(state="attached")
            shown = page.content()
            assert "console-mallory" not in shown and foreign not in shown, "the other tenant's mail showed"
            runs = {"REST list_messages": call_rest, "/mail first list": load_page, "floor: /policies DCL": load_floor}
            samples: dict[str, list[float]] = {name: [] for name in runs}
            for i in range(args.loads):
                turn = i % len(runs)
                for name in [*runs][turn:] + [*runs][:turn]:
                    samples[name].append(runs[name]())
            # where one load's time goes: each request the page made, from the navigation on
            finished: list[tuple[str, float, float]] = []

            def done(request: Request) -> None:
                timing = request.timing
                finished.append((request.url.removeprefix(base), timing["startTime"], timing["responseEnd"]))

            page.on("requestfinished", done)
            took = load_page()
            page.wait_for_timeout(500)  # the folders' counts may still be arriving
            browser.close()
    finally:
        rest.close()
        stop(server)

    print(f"folder: {args.messages} messages, first page {rows} rows; {args.loads} interleaved runs each")
    medians: dict[str, float] = {}
    for name, times in samples.items():
        medians[name] = statistics.median(times) * 1000
        print(f"{name:20}: median {medians[name]:7.1f} ms   p95 {_pct(times, 0.95):7.1f} ms")
    ratio = medians["/mail first list"] / medians["REST list_messages"]
    print(f"ratio page / REST    : {ratio:.2f}   target <= 1.5")
    beyond = medians["/mail first list"] - medians["floor: /policies DCL"]
    print(f"the page beyond the browser's floor: {beyond:.1f} ms, {beyond / medians['REST list_messages']:.2f}x REST")
    print(f"one more load ({took * 1000:.0f} ms), request by request (ms from the first request: start, end):")
    zero = min((start for _, start, _ in finished), default=0.0)
    for url, start, end in sorted(finished, key=lambda f: f[1]):
        print(f"  {start - zero:7.1f} {start - zero + end:7.1f}  {url[:70]}")


if __name__ == "__main__":
    main()
