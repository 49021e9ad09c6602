"""Summaries: the wall time of 20 summaries on a real prefork Celery worker against a model of fixed latency (the
loopback stand-in of tests/chat_server.py), against the ideal latency x 20 / concurrency; and the local
summarizer's messages/s against the bare ranking of the same texts.

The baseline of the second figure is `textrank.rank` alone, given each text's sentences already split, stemmed
and stripped of stop words: what the local summarizer adds on top of it is taking quotes and signatures off,
splitting, telling the language, stemming and choosing the sentences that fit. One run, on the bench's own
embedded servers (var/bench). Target (issue 16): within 1.3x of the ideal.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit_append import setup  # noqa: E402

SENTENCES = [
    "The shipment from the Rotterdam depot is two days late because of the strike at the port.",
    "Please confirm the new delivery date with the customer before Friday.",
    "The invoice for March was paid twice, so finance will refund the second payment.",
    "Our team meets on Tuesday at ten to plan the launch of the spring catalogue.",
    "The contract renewal needs a signature from the legal department.",
    "Parking at the office is closed next week while the car park is repainted.",
    "The new prices apply from the first of the month to every order.",
    "Bring the figures for the quarter, including the costs of the delayed shipment.",
    "The supplier offered a discount of five percent if we order before the end of the month.",
    "Lunch is served in the kitchen after the meeting.",
    "The customer asked whether the catalogue can be sent as a printed copy.",
    "The warehouse counts its stock on Friday, so orders placed after noon ship on Monday.",
    "The launch depends on the catalogue being printed in time.",
    "Legal says the contract can be renewed for two years with the same terms.",
    "The refund will reach the customer's account within five working days.",
]


def _body(rng: random.Random, i: int) -> str:
    picked = [rng.choice(SENTENCES) for _ in range(rng.randint(8, 24))]
    paragraphs = [" ".join(picked[j : j + 4]) for j in range(0, len(picked), 4)]
    quote = f"On Mon, 2 Mar 2026 at 09:00, Bob <bob@example.test> wrote:\n> earlier message {i}\n> more of it\n"
    text = "\n\n".join(paragraphs)
    return f"Hi team,\n\n{text}\n\nThanks,\nAnn\n\n-- \nAnn Smith\nOperations\n\n{quote}"


def _parallel(args: argparse.Namespace) -> None:
    from django.conf import settings

    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.mail.importing import import_mail
    from apps.mail.models import Message
    from apps.workspaces.models import Membership
    from apps.workspaces.services import create_person
    from tests.celeryworker import worker_process
    from tests.chat_server import chat_server
    from tests.mailfactory import raw_message, write_mbox

    person = create_person(email=f"summaries-{time.time_ns()}@example.test", password=None)
    caller = Caller.person(Membership.objects.for_user(person.user).select_related("tenant", "user").get())
    rng = random.Random(16)
    with chat_server(key="bench-key") as chat, tempfile.TemporaryDirectory() as tmp:
        env = {
            "OAKEN_SUMMARIZER": "llm",
            "OAKEN_LLM_BASE_URL": chat.base_url,
            "OAKEN_LLM_API_KEY": "bench-key",
            "OAKEN_LLM_MODEL": "bench-model",
            "OAKEN_LLM_MAX_CONCURRENCY": str(args.concurrency),
        }
        settings.SUMMARIES = {
            **settings.SUMMARIES,
            "SUMMARIZER": "llm",
            "LLM_BASE_URL": chat.base_url,
            "LLM_API_KEY": "bench-key",
            "LLM_MODEL": "bench-model",
            "LLM_MAX_CONCURRENCY": args.concurrency,
        }
        settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARY_WAIT_SECONDS": 120}
        with worker_process("bench-summaries", env=env, pool="prefork", concurrency=args.concurrency):

            def batch(label: str, n: int) -> list[str]:
                raws = [
                    raw_message(subject=f"{label} {i}", body=_body(rng, i), message_id=f"<{label}-{i}@bench.test>")
                    for i in range(n)
                ]
                path = write_mbox(Path(tmp) / f"{label}.mbox", raws)
                counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name=label, path=path)
                ids = Message.objects.for_tenant(person.tenant).filter(account_id=counts.account_id)
                return [str(pk) for pk in ids.values_list("pk", flat=True)]

            def run(ids: list[str]) -> float:
                began = time.perf_counter()
                out = dispatch(caller, Door.CLI, "summarize_messages", {"message_ids": ids}).output
                took = time.perf_counter() - began
                assert all(s["state"] == "done" for s in out["summaries"]), out
                return took

            chat.latency = 0.0
            run(batch(f"warm{time.time_ns()}", args.concurrency * 2))  # the worker's processes connect once
            chat.latency = args.latency
            ideal = args.latency * args.messages / args.concurrency
            times = []
            for r in range(args.runs):
                ids = batch(f"run{r}-{time.time_ns()}", args.messages)
                chat.reset()
                chat.latency = args.latency
                times.append(run(ids))
                assert len(chat.received) == args.messages
                cached = run(ids)
                print(
                    f"run {r + 1}: {args.messages} summaries in {times[-1]:.2f} s (ideal {ideal:.2f} s, "
                    f"{times[-1] / ideal:.2f}x), most in flight {chat.most_in_flight}; again from the cache in "
                    f"{cached * 1000:.0f} ms with {len(chat.received) - args.messages} requests"
                )
    median = statistics.median(times)
    print(
        f"\nparallel: median {median:.2f} s for {args.messages} summaries at {args.latency:.2f} s each with "
        f"concurrency {args.concurrency}; ideal {ideal:.2f} s; ratio {median / ideal:.2f}x (target <= 1.3x)"
    )


def _local(args: argparse.Namespace) -> None:
    from apps.summaries import textrank
    from apps.summaries.summarizers import LocalSummarizer, Mail

    rng = random.Random(61)
    bodies = [_body(rng, i) for i in range(args.texts)]
    mails = [[Mail(subject=f"Note {i}", sender="ann@example.test", date=None, body=b)] for i, b in enumerate(bodies)]
    summarizer = LocalSummarizer()
    prepared = []
    for body in bodies:
        split = textrank.sentences(textrank.own_text(body))
        prepared.append(textrank.terms(split, "english"))
    for _ in range(2):  # warm the caches (stop words, stemmers)
        summarizer.summarize(mails[0], 400)
    full, bare = [], []
    for _ in range(args.rounds):
        began = time.perf_counter()
        for m in mails:
            summarizer.summarize(m, 400)
        full.append(time.perf_counter() - began)
        began = time.perf_counter()
        for t in prepared:
            textrank.rank(t)
        bare.append(time.perf_counter() - began)
    full_rate, bare_rate = args.texts / statistics.median(full), args.texts / statistics.median(bare)
    sentences = statistics.mean(len(t) for t in prepared)
    print(
        f"local: {full_rate:,.0f} messages/s ({sentences:.0f} sentences each on average); the bare ranking of the "
        f"same texts (split and stemmed beforehand): {bare_rate:,.0f} messages/s; ratio {full_rate / bare_rate:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the stand-in takes per answer")
    parser.add_argument("--concurrency", type=int, default=4, help="the worker's processes (OAKEN_WORKER_CONCURRENCY)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--texts", type=int, default=500, help="texts for the local summarizer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--local-only", action="store_true")
    args = parser.parse_args()
    setup()
    if not args.local_only:
        _parallel(args)
    _local(args)


if __name__ == "__main__":
    main()
