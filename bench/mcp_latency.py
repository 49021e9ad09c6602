"""MCP latency: `tools/call get_message` through Oaken's /mcp, against the SDK's own server and the REST door.

One run, three servers on loopback, the bench's own embedded servers (var/bench):
  * Oaken MCP  : gunicorn as `oaken serve` runs it, POST /mcp with a read-only API key (the gate: key lookup,
                 rate counter, exposure, scope, data scope, one audit event per call, fenced output);
  * Oaken REST : the same gunicorn, POST /api/v1/ops/get_message signed in over HTTP (session + CSRF);
  * SDK server : a minimal MCPServer ("FastMCP") of the official SDK, stateless with JSON answers, on uvicorn,
                 whose one tool reads the same rows with psycopg (message + folder, labels, attachments) and
                 returns the same fields, with no authentication, no gate and no audit.
All three are driven by the same raw JSON-RPC / JSON POSTs over one persistent HTTP client each, in
interleaved rounds (the order turns every round) so machine noise spreads over all of them.
Prints median and p95 per door, the ratios Oaken MCP / SDK server and Oaken MCP / REST, and how much the
per-round ratio moved (the machine's noise). `--profile N` also profiles N in-process MCP requests.
Target (issue: MCP door): Oaken MCP median within 1.2x of the SDK server, gate and audit included.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import itertools
import json
import logging
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit_append import setup  # noqa: E402
from tests.loopback import free_port, stop, wait_for_port  # noqa: E402

PROTOCOL_VERSION = "2025-11-25"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION}
TEXT_MAX_CHARS = 20_000  # the default text bound get_message cuts at

# What get_message reads, as plain SQL for the SDK server (the tables are checked against the models).
MESSAGE_SQL = """
SELECT m.id, m.account_id, m.thread_id, f.kind, f.name, m.subject, m.sender_name, m.sender_address, m.date,
       m.snippet, m.read, m.pinned, m.has_attachments, m.to_addresses, m.cc_addresses, m.message_id, m.text_body
  FROM mail_message m JOIN mail_folder f ON f.id = m.folder_id WHERE m.id = %s
"""
LABELS_SQL = """
SELECT ml.label_id FROM mail_messagelabel ml JOIN mail_label l ON l.id = ml.label_id
 WHERE ml.message_id = %s ORDER BY l.name
"""
ATTACHMENTS_SQL = """
SELECT id, filename, content_type, size, inline FROM mail_attachment WHERE message_id = %s ORDER BY filename
"""
# what list_messages(account_id, limit) reads, as plain SQL: one page newest first, each message's label ids and the
# summary the cache holds done for it (no summarizer identity: the bench's cache is empty or of one summarizer)
LIST_SQL = """
SELECT m.id, m.account_id, m.thread_id, f.kind, f.name, m.subject, m.sender_name, m.sender_address, m.date,
       m.snippet, m.read, m.pinned, m.has_attachments,
       ARRAY(SELECT ml.label_id FROM mail_messagelabel ml JOIN mail_label l ON l.id = ml.label_id
              WHERE ml.message_id = m.id ORDER BY l.name),
       (SELECT s.text FROM summaries_summary s WHERE s.tenant_id = m.tenant_id AND s.content_hash = m.content_hash
           AND s.scope = 'message' AND s.state = 'done' LIMIT 1)
  FROM mail_message m JOIN mail_folder f ON f.id = m.folder_id
 WHERE m.account_id = %s ORDER BY m.date DESC NULLS LAST, m.id DESC LIMIT %s
"""
LIST_LIMIT = 50
TABLES = {"Message": "mail_message", "Folder": "mail_folder", "MessageLabel": "mail_messagelabel",
          "Label": "mail_label", "Attachment": "mail_attachment"}  # fmt: skip


# ---------------------------------------------------------------- the SDK server (runs in its own process)


def serve_sdk(port: int) -> None:
    """The reference: a minimal MCPServer with one tool doing get_message's reads, on uvicorn."""
    import psycopg
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    local = threading.local()  # sync tools run in worker threads: a persistent connection per thread

    def cursor() -> psycopg.Cursor[Any]:
        if getattr(local, "conn", None) is None:
            local.conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
        conn: psycopg.Connection[Any] = local.conn
        return conn.cursor()

    server = MCPServer("baseline")

    @server.tool()
    def get_message(message_id: str) -> dict[str, Any]:
        """Get one message: headers, text and attachment list."""
        with cursor() as cur:
            row = cur.execute(MESSAGE_SQL, (message_id,)).fetchone()
            if row is None:
                raise ValueError("message not found")
            labels = [str(r[0]) for r in cur.execute(LABELS_SQL, (message_id,))]
            attachments = [
                {"id": str(i), "filename": f, "content_type": t, "size": s, "inline": n}
                for i, f, t, s, n in cur.execute(ATTACHMENTS_SQL, (message_id,))
            ]
        (
            pk,
            account,
            thread,
            kind,
            folder,
            subject,
            sender_name,
            sender_address,
            date,
            snippet,
            read,
            pinned,
            has_attachments,
            to,
            cc,
            header_id,
            text,
        ) = row
        return {
            "message": {
                "id": str(pk),
                "account_id": str(account),
                "thread_id": str(thread),
                "folder": kind if kind != "custom" else folder,
                "subject": subject,
                "sender": {"name": sender_name, "address": sender_address} if sender_address else None,
                "date": date.isoformat() if date else None,
                "snippet": snippet,
                "read": read,
                "pinned": pinned,
                "has_attachments": has_attachments,
                "label_ids": labels,
                "to": [{"name": a.get("name", ""), "address": a.get("address", "")} for a in to],
                "cc": [{"name": a.get("name", ""), "address": a.get("address", "")} for a in cc],
                "message_id_header": header_id,
                "text": text[:TEXT_MAX_CHARS],
                "truncated": len(text) > TEXT_MAX_CHARS,
                "text_length": len(text),
                "attachments": attachments,
            }
        }

    @server.tool()
    def list_messages(account_id: str, limit: int = 50) -> dict[str, Any]:
        """List messages newest first."""
        with cursor() as cur:
            rows = cur.execute(LIST_SQL, (account_id, limit)).fetchall()
        return {
            "messages": [
                {
                    "id": str(pk),
                    "account_id": str(account),
                    "thread_id": str(thread),
                    "folder": kind if kind != "custom" else folder,
                    "subject": subject,
                    "sender": {"name": sender_name, "address": sender_address} if sender_address else None,
                    "date": date.isoformat() if date else None,
                    "snippet": snippet,
                    "read": read,
                    "pinned": pinned,
                    "has_attachments": has_attachments,
                    "label_ids": [str(x) for x in labels],
                    "summary": summary,
                }
                for (
                    pk,
                    account,
                    thread,
                    kind,
                    folder,
                    subject,
                    sender_name,
                    sender_address,
                    date,
                    snippet,
                    read,
                    pinned,
                    has_attachments,
                    labels,
                    summary,
                ) in rows
            ],
            "next_cursor": None,
        }

    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------- servers and clients


def _start(name: str, args: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A server in a child process, once its port accepts connections (its output goes to a file, never a pipe
    that could fill up and stall it)."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            wait_for_port(port, proc, name, output, timeout=60)
        except RuntimeError:
            stop(proc)
            raise
        return proc


def _signed_in(http: Any, base: str, email: str, password: str) -> str:
    """Sign in through the form, as a browser does; returns the CSRF token for API calls."""
    page = http.get(base + "/accounts/sign-in")
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert page.status_code == 200 and match, "no sign-in form"
    answer = http.post(
        base + "/accounts/sign-in",
        data={"username": email, "password": password, "csrfmiddlewaretoken": match.group(1), "next": "/"},
    )
    assert answer.status_code == 302 and "sessionid" in http.cookies, f"sign-in failed ({answer.status_code})"
    return str(http.cookies["csrftoken"])


def _rpc(n: int, message_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "get_message", "arguments": {"message_id": message_id}},
    }


def _list_rpc(n: int, account_id: str) -> dict[str, Any]:
    arguments = {"account_id": account_id, "limit": LIST_LIMIT}
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "list_messages", "arguments": arguments},
    }


def _message_of(answer: Any, door: str) -> dict[str, Any]:
    """The message in an answer, after checking it is a success."""
    assert answer.status_code == 200, f"{door}: HTTP {answer.status_code} {answer.text[:300]}"
    body = answer.json()
    if door == "rest":
        return dict(body["message"])
    assert "result" in body and not body["result"].get("isError"), f"{door}: {answer.text[:300]}"
    return dict(body["result"]["structuredContent"]["message"])


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


# ---------------------------------------------------------------- data


def _make_data(workdir: Path) -> tuple[str, str, str, str, str]:
    """A person (verified, with a password) whose mailbox holds realistic mail, a read-only key, and a second
    tenant's message. Returns (email, password, key, message id, the other tenant's message id)."""
    from django.utils import timezone

    from apps.agents.keys import issue_key
    from apps.mail.importing import import_mail
    from apps.mail.models import Attachment, Message
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from bench.import_mail import write_mbox

    stamp = time.time_ns()
    password = f"bench-{stamp}-password"
    ids: list[str] = []
    people = []
    for who in ("alice", "mallory"):
        person = create_person(email=f"mcp-{who}-{stamp}@example.test", password=password)
        person.user.email_verified_at = timezone.now()
        person.user.save(update_fields=["email_verified_at"])
        mbox = workdir / f"{who}.mbox"
        write_mbox(mbox, LIST_LIMIT + 10)
        import_mail(tenant=person.tenant, workspace=person.workspace, account_name="bench", path=mbox)
        # a multipart message with attachments, so every read get_message makes returns rows
        with_files = Attachment.objects.for_tenant(person.tenant).values_list("message_id", flat=True).first()
        assert with_files is not None
        ids.append(str(with_files))
        people.append(person)
    alice = people[0]
    membership = Membership.objects.for_user(alice.user).get(tenant=alice.tenant)
    _, key = issue_key(
        membership=membership,
        scopes=["read"],
        workspaces=["default"],
        allow_list=None,
        expires_at=None,
        name="bench",
        created_via="cli",
    )
    assert Message.objects.for_tenant(alice.tenant).filter(pk=ids[0]).exists()
    return alice.user.email, password, key, ids[0], ids[1]


def _analyze() -> None:
    """Fresh statistics for the bench database, which every run adds to: both servers then plan from what the
    tables hold, as a running database's would. Left to autovacuum, whether it has looked since the last runs'
    rows decides the plans, and it may look in the middle of a run: the SDK server's listing statement measured
    0.97 ms in one plan and 0.35 ms in the other (2026-12-05), which swung the listing ratio between runs."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


# ---------------------------------------------------------------- profile


def profile(key: str, message_id: str, account_id: str, calls: int) -> None:
    """Where an MCP call's time goes, in this process (the WSGI application gunicorn serves, no HTTP server), for
    get_message and for list_messages(50): medians of the request, of its parts called alone, the SQL statements it
    makes, and a cProfile of `calls` requests."""
    from apps.agents.keys import caller_for_key
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mcp import tools
    from apps.operations.registry import registry
    from config.wsgi import application
    from tests.wsgicall import serve

    headers = {
        "authorization": f"Bearer {key}",
        "accept": MCP_HEADERS["Accept"],
        "mcp_protocol_version": PROTOCOL_VERSION,
    }
    caller = caller_for_key(key)
    assert caller is not None
    cases = {
        "get_message": (_rpc(1, message_id), {"message_id": message_id}),
        f"list_messages({LIST_LIMIT})": (_list_rpc(1, account_id), {"account_id": account_id, "limit": LIST_LIMIT}),
    }
    for label, (rpc, arguments) in cases.items():
        name = label.split("(")[0]

        def request(body: bytes = json.dumps(rpc).encode()) -> None:
            status, _, answer = serve(application, "POST", "/mcp", body, **headers)
            assert status.startswith("200") and json.loads(answer)["result"]["isError"] is False, answer[:300]

        op = registry.get(name)
        assert op is not None
        output = dispatch(caller, Door.MCP, name, arguments).output
        parts: dict[str, Callable[[], object]] = {
            "whole MCP request": request,
            "caller_for_key": lambda: caller_for_key(key),
            "dispatch (gate+audit)": functools.partial(dispatch, caller, Door.MCP, name, arguments),
            "tools.success (fence)": functools.partial(tools.success, op, output),
        }
        times: dict[str, list[float]] = {part: [] for part in parts}
        for _ in range(max(calls, 50)):
            for part, call in parts.items():
                began = time.perf_counter()
                call()
                times[part].append(time.perf_counter() - began)
        print(f"\n{label} in-process, no HTTP server (medians):")
        for part, samples in times.items():
            print(f"  {part:<24} {statistics.median(samples) * 1000:8.3f} ms")
        sent = _round_trips(request)
        print(f"  round trips to PostgreSQL per MCP request: {len(sent)} (what libpq sent)")
        for statement in sent:
            print(f"    {statement[:110]}")

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            request()
        profiler.disable()
        for order in ("cumulative", "tottime"):
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(25)
            top = out.getvalue().split("\n\n", 2)[-1].rstrip()
            print(f"--- cProfile of {calls} {label} MCP requests, top by {order}\n" + top)


def _round_trips(request: Callable[[], None]) -> list[str]:
    """The statements one request sends to PostgreSQL, one per round trip (each ends with a Sync), as libpq traces
    them (tests.wire)."""
    from django.db import connection

    from tests import wire

    with tempfile.TemporaryDirectory() as tmp:
        with wire.traced(Path(tmp) / "trace") as trace:
            request()
        lines = wire.sent(trace)
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        prepared = {name: " ".join(sql.split()) for name, sql in cursor.fetchall()}
    sent, statement = [], ""
    for fields in lines:
        kind, rest = fields[2], " ".join(fields[3:])
        quoted = re.findall(r'"((?:[^"]|"")*)"', rest)
        if kind == "Parse" and len(quoted) > 1:
            statement = " ".join(quoted[1].split())
        elif kind == "Bind" and len(quoted) > 1 and quoted[1]:
            statement = prepared.get(quoted[1], quoted[1])
        elif kind == "Query" and quoted:
            sent.append(" ".join(quoted[0].split()))
        elif kind == "Sync":
            sent.append(statement)
    return sent


# ---------------------------------------------------------------- load


def load_test(name: str, url: str, headers: dict[str, str], message_id: str, clients: int, seconds: float) -> None:
    """`clients` threads, each with its own persistent HTTP client, calling get_message for `seconds`: requests/s,
    median and p95 (the clients share this one interpreter: the same for both servers)."""
    import httpx2

    start = threading.Barrier(clients + 1)
    times: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    until = 0.0

    def client(n: int) -> None:
        with httpx2.Client(headers=headers, timeout=30) as http:
            start.wait()
            while time.perf_counter() < until:
                began = time.perf_counter()
                answer = http.post(url + "/mcp", json=_rpc(n, message_id))
                times[n].append(time.perf_counter() - began)
                if answer.status_code != 200 or answer.json()["result"].get("isError"):
                    errors.append(f"HTTP {answer.status_code} {answer.text[:200]}")
                    return

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    until = time.perf_counter() + seconds
    start.wait()
    for t in threads:
        t.join()
    assert not errors, f"{name}: {errors[0]}"
    every = [x for per in times for x in per]
    print(
        f"load {name:<10}: {clients} clients x {seconds:.0f} s: {len(every) / seconds:7.1f} requests/s, "
        f"median {statistics.median(every) * 1000:.3f} ms, p95 {_pct(every, 0.95):.3f} ms, "
        f"load {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per door")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per door first")
    parser.add_argument("--round", type=int, default=10, help="calls per door per round")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="also profile N in-process calls")
    parser.add_argument("--load", type=float, default=0, metavar="SECONDS", help="load test per server")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients in the load test")
    parser.add_argument("--serve-sdk", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sdk:
        serve_sdk(args.serve_sdk)
        return
    # the per-key request limit is lifted so that many calls can be made in a minute (each call is still
    # counted, in Redis); set before Django starts, so it holds here (--profile) and in the servers started
    os.environ["OAKEN_MCP_REQUESTS_PER_MINUTE"] = "1000000000"
    setup()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # no line per request

    import httpx2
    from django.apps import apps as django_apps

    from apps.server.management.commands.serve import web_command

    for model, table in TABLES.items():
        actual = django_apps.get_model("mail", model)._meta.db_table
        assert actual == table, f"the SDK server's SQL names {table}, the model uses {actual}"
    with tempfile.TemporaryDirectory() as tmp:
        email, password, key, message_id, foreign_id = _make_data(Path(tmp))
    _analyze()

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # with the embedded servers' URLs
    oaken_port, sdk_port = free_port(), free_port()
    # gunicorn as `oaken serve` runs it (two gthread workers, four threads each), without the access log
    oaken = _start("gunicorn", web_command(f"127.0.0.1:{oaken_port}", 2, quiet=True), oaken_port, env)
    sdk: subprocess.Popen[bytes] | None = None
    clients: list[Any] = []
    try:
        here = str(Path(__file__).resolve())
        sdk = _start("the SDK server", [sys.executable, here, "--serve-sdk", str(sdk_port)], sdk_port, env)
        oaken_url, sdk_url = f"http://127.0.0.1:{oaken_port}", f"http://127.0.0.1:{sdk_port}"
        mcp = httpx2.Client(headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"}, timeout=30)
        ref = httpx2.Client(headers=MCP_HEADERS, timeout=30)
        rest = httpx2.Client(timeout=30)
        clients += [mcp, ref, rest]
        csrf = _signed_in(rest, oaken_url, email, password)
        rest.headers.update({"X-CSRFToken": csrf, "Accept": "application/json"})
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        }
        for client, url in ((mcp, oaken_url), (ref, sdk_url)):
            assert client.post(url + "/mcp", json=init).status_code == 200

        counter = itertools.count(1)
        doors: dict[str, Callable[[], Any]] = {
            "Oaken MCP": lambda: mcp.post(oaken_url + "/mcp", json=_rpc(next(counter), message_id)),
            "SDK server": lambda: ref.post(sdk_url + "/mcp", json=_rpc(next(counter), message_id)),
            "Oaken REST": lambda: rest.post(oaken_url + "/api/v1/ops/get_message", json={"message_id": message_id}),
        }
        # the same message through all three, and the other tenant's message refused by Oaken's doors
        seen = {name: _message_of(call(), "rest" if name == "Oaken REST" else name) for name, call in doors.items()}
        fields = ("id", "account_id", "thread_id", "folder", "label_ids", "text_length", "truncated", "read")
        for name, message in seen.items():
            assert {f: message[f] for f in fields} == {f: seen["SDK server"][f] for f in fields}, name
            assert len(message["attachments"]) == len(seen["SDK server"]["attachments"]) > 0, name
        refused = mcp.post(oaken_url + "/mcp", json=_rpc(0, foreign_id)).json()["result"]
        assert refused["isError"] and "NOT_FOUND" in refused["content"][0]["text"], refused
        assert rest.post(oaken_url + "/api/v1/ops/get_message", json={"message_id": foreign_id}).status_code == 404

        for call in doors.values():
            for _ in range(args.warmup):
                assert call().status_code == 200
        samples: dict[str, list[float]] = {name: [] for name in doors}
        rounds: list[dict[str, float]] = []
        names = list(doors)
        for r in range(max(1, args.calls // args.round)):
            order = names[r % len(names) :] + names[: r % len(names)]
            this_round: dict[str, list[float]] = {}
            for name in order:
                call, times = doors[name], this_round.setdefault(name, [])
                for _ in range(args.round):
                    began = time.perf_counter()
                    answer = call()
                    times.append(time.perf_counter() - began)
                    if answer.status_code != 200:
                        raise RuntimeError(f"{name}: HTTP {answer.status_code} {answer.text[:300]}")
                samples[name] += times
            rounds.append({name: statistics.median(times) for name, times in this_round.items()})
        # list_messages(50): the same page of summaries from both MCP servers, in interleaved rounds
        account_id = seen["SDK server"]["account_id"]
        lists: dict[str, Callable[[], Any]] = {
            "Oaken MCP list50": lambda: mcp.post(oaken_url + "/mcp", json=_list_rpc(next(counter), account_id)),
            "SDK list50": lambda: ref.post(sdk_url + "/mcp", json=_list_rpc(next(counter), account_id)),
        }
        pages = {n: call().json()["result"]["structuredContent"]["messages"] for n, call in lists.items()}
        assert [m["id"] for m in pages["Oaken MCP list50"]] == [m["id"] for m in pages["SDK list50"]], "pages differ"
        assert len(pages["SDK list50"]) == LIST_LIMIT
        for call in lists.values():
            for _ in range(args.warmup):
                assert call().status_code == 200
        list_samples: dict[str, list[float]] = {name: [] for name in lists}
        list_names = list(lists)
        for r in range(max(1, args.calls // args.round)):
            for name in list_names[r % 2 :] + list_names[: r % 2]:
                for _ in range(args.round):
                    began = time.perf_counter()
                    answer = lists[name]()
                    list_samples[name].append(time.perf_counter() - began)
                    assert answer.status_code == 200 and not answer.json()["result"]["isError"], name
        if args.load:
            load_test("Oaken MCP", oaken_url, dict(mcp.headers), message_id, args.clients, args.load)
            load_test("SDK server", sdk_url, dict(ref.headers), message_id, args.clients, args.load)
            from apps.agents.keys import caller_for_key
            from apps.audit.log import verify_chain

            caller = caller_for_key(key)
            assert caller is not None
            checked, broken = verify_chain(caller.tenant.pk)
            print(f"audit chain after the load: {checked} events, {'intact' if broken is None else broken.reason}")
            assert broken is None
    finally:
        for client in clients:
            client.close()
        for proc in (sdk, oaken):
            if proc is not None:
                stop(proc)

    med = {name: statistics.median(s) * 1000 for name, s in samples.items()}
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"get_message over HTTP on loopback: {len(samples['Oaken MCP'])} timed calls per door "
        f"({args.warmup} warm-up), rounds of {args.round}; {os.cpu_count()} CPUs, load {load}"
    )
    print(f"{'door':<12} {'median ms':>10} {'p95 ms':>10} {'min ms':>10}")
    for name, s in samples.items():
        print(f"{name:<12} {med[name]:>10.3f} {_pct(s, 0.95):>10.3f} {min(s) * 1000:>10.3f}")
    for other in ("SDK server", "Oaken REST"):
        per_round = sorted(r["Oaken MCP"] / r[other] for r in rounds)
        q = statistics.quantiles(per_round, n=10) if len(per_round) >= 2 else per_round * 9
        target = "   target <= 1.2" if other == "SDK server" else ""
        print(
            f"Oaken MCP / {other:<10}: median {med['Oaken MCP'] / med[other]:.2f}, "
            f"p95 {_pct(samples['Oaken MCP'], 0.95) / _pct(samples[other], 0.95):.2f}  "
            f"(per-round ratio p10-p90 {q[0]:.2f}-{q[-1]:.2f}){target}"
        )
    for name, s in list_samples.items():
        print(f"{name:<16} {statistics.median(s) * 1000:>6.3f} {_pct(s, 0.95):>10.3f} {min(s) * 1000:>10.3f}")
    o, k = list_samples["Oaken MCP list50"], list_samples["SDK list50"]
    print(
        f"list_messages({LIST_LIMIT}) Oaken MCP / SDK server: "
        f"median {statistics.median(o) / statistics.median(k):.2f}, "
        f"p95 {_pct(o, 0.95) / _pct(k, 0.95):.2f}   target <= 1.2"
    )
    base = [r["SDK server"] * 1000 for r in rounds]
    print(
        f"noise: SDK server per-round median ranged {min(base):.3f}-{max(base):.3f} ms "
        f"(stdev {statistics.pstdev(base):.3f} ms over {len(rounds)} rounds)"
    )
    if args.profile:
        profile(key, message_id, account_id, args.profile)


if __name__ == "__main__":
    main()
