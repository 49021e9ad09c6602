"""Hybrid search at 100,000 messages: `search` through dispatch against the bare SQL of its two branches, the
enricher against the bare model, a worker's memory, and the plans, in one run.

Loads N messages (default 100,000; --quick 10,000) into a fresh database on the bench's own embedded servers
(var/bench): a big tenant holding 95% of them in two accounts, a small one holding 5%. The mail is made of
words of a vocabulary of about 3,000 (the local model's whole-word pieces, drawn Zipf-like so some are in
most messages and most are rare), topic sentences (bills, parcels, outages, travel...) that give search a
meaning to find, quoted replies and signatures, and identifiers (INV-, PR-, tracking codes) unique to one
message. Some mail is read, some archived.

Then:
- the enricher (apps.search.indexing.enrich_pending) runs in a child process with the Celery app loaded, as a
  worker would, reporting its messages/s (the HNSW build it ends with timed apart) and its peak RSS; the
  baseline is the bare model (current_embedder().embed) on the same chunks in the same batches.
- per query (single words of mixed frequency, two words, an identifier, a question) and per tenant: p50/p95
  of hybrid `search` through apps.gate.dispatch.dispatch (an agent over MCP, audited), against the SQL of its
  keyword branch and of its vector branch as the search itself issued them (captured from its connection),
  each run alone; the ratio is dispatch / the slower branch.
- EXPLAIN (ANALYZE, BUFFERS) of both branches for one query on the big tenant, and of the vector branch with
  a filter (account + folder + unread), with how full the filtered page is.
Targets (issue 15, 2 cores): hybrid p50 < 50 ms at 100k; dispatch <= 1.5x the slower branch; the enricher
within 1.3x of the bare model; a worker's peak RSS < 500 MB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mailfactory import raw_message, write_mbox  # noqa: E402

BIG_SHARE = 0.95
# the short words every English mail is full of (the `simple` configuration keeps them), then the model's
SHORT_WORDS = (
    "the to and of a in is it you for on we that be this with are have will at can not as your if or so by "
    "all do an me my up our but just from was get what let know out about any there now one has more"
).split()
VOCABULARY_SIZE = 3000

MONTHS = "January February March April May June July August September October November December".split()
CITIES = "Lisbon Zurich Montreal Osaka Nairobi Valparaiso Tallinn Auckland Porto Krakow".split()
FIRST = "Ann Bruno Chloe Dmitri Elena Farid Grace Hugo Ines Jonas Keiko Liam Maya Noor Oskar Priya Rosa Sven".split()
LAST = "Adams Berg Costa Dubois Eriksen Fischer Garcia Haddad Ito Jensen Kowalski Lopez Moreau Novak Okafor".split()

# topic: (subjects, sentences); {id} is an identifier unique to the message
TOPICS: dict[str, tuple[list[str], list[str]]] = {
    "billing": (
        ["Invoice {id}", "Payment reminder {id}", "Your statement for {month}"],
        [
            "Invoice {id} for {month} is attached; payment is due within thirty days.",
            "Please settle the outstanding balance of the account before the end of the month.",
            "We have not yet received the payment for {id}, a late fee may apply.",
            "The amount will be charged to the card on file on the first business day.",
        ],
    ),
    "parcel": (
        ["Your parcel {id} is on its way", "Delivery update for {id}", "Shipment {id} delayed"],
        [
            "Your parcel {id} has been dispatched and should arrive on Thursday.",
            "The courier tried to deliver the package but nobody was home.",
            "You can collect the shipment at the depot with a photo ID.",
            "Tracking shows the box is held at customs in {city}.",
        ],
    ),
    "outage": (
        ["Incident {id}: database down", "Postmortem for {id}", "Degraded service in {city}"],
        [
            "The production database went down at three in the morning and was restored from backup.",
            "Error rates spiked after the deploy, so the release was rolled back.",
            "Incident {id} is resolved; the root cause was a full disk on the primary.",
            "On-call was paged twice overnight for the same alert.",
        ],
    ),
    "review": (
        ["{id} ready for review", "Re: {id} login timeout fix", "Merge request {id}"],
        [
            "{id} fixes the login timeout and adds a regression test.",
            "Could you review the change before the branch is cut on Friday?",
            "The continuous integration run is green except for one flaky test.",
            "I left a few comments about naming and error handling.",
        ],
    ),
    "travel": (
        ["Trip to {city}", "Flight confirmation {id}", "Hotel booking in {city}"],
        [
            "My flight to {city} lands at nine and the hotel is booked for three nights.",
            "Booking reference {id}: one economy seat, window, checked bag included.",
            "The train from the airport to the city centre takes about forty minutes.",
            "Please send me the agenda so I can plan the visit.",
        ],
    ),
    "hiring": (
        ["Interview schedule", "Candidate for the backend role", "Offer letter {id}"],
        [
            "The candidate has five years of experience with distributed systems.",
            "Can you join the technical interview on Tuesday afternoon?",
            "We would like to extend an offer; the start date is in {month}.",
            "References were positive and the background check is complete.",
        ],
    ),
    "lease": (
        ["Lease renewal", "Rent for {month}", "Apartment inspection"],
        [
            "The lease ends in {month} and the landlord proposes a renewal at the same rent.",
            "The plumber will fix the leaking kitchen tap on Monday morning.",
            "The deposit will be returned after the final inspection of the apartment.",
            "Rent is transferred on the first of each month to the usual account.",
        ],
    ),
    "family": (
        ["Dinner on Sunday", "Birthday party", "Photos from the weekend"],
        [
            "Grandma is turning eighty and we are planning a surprise party.",
            "Shall we bring dessert to dinner on Sunday, or wine?",
            "The kids loved the beach, I attached a few photos.",
            "Can you pick up the children from school on Wednesday?",
        ],
    ),
    "contract": (
        ["Contract {id} draft", "Signed agreement", "Terms of the partnership"],
        [
            "Legal reviewed the draft contract {id} and suggested changes to the liability clause.",
            "Both parties signed the agreement, a scanned copy is attached.",
            "The non-disclosure terms last for two years after termination.",
            "Please confirm the payment schedule in section four.",
        ],
    ),
    "newsletter": (
        ["Weekly digest", "New features this month", "Webinar invitation"],
        [
            "This week: product updates, a customer story and upcoming events.",
            "Register now for the webinar on data privacy in {month}.",
            "Unsubscribe at any time from the link at the bottom of this email.",
            "Our spring sale starts Monday with discounts on every plan.",
        ],
    ),
}


@dataclass(frozen=True)
class Query:
    label: str
    big: str
    small: str


def vocabulary() -> list[str]:
    """About VOCABULARY_SIZE words, most common first: short English words, then the local model's whole-word
    pieces in their merge order (a rough frequency order), of several languages as mail is."""
    import wordllama

    config = json.loads(
        (Path(wordllama.__file__).parent / "tokenizers" / "l2_supercat_tokenizer_config.json").read_text()
    )
    pieces = sorted(config["model"]["vocab"].items(), key=lambda item: item[1])
    words = list(SHORT_WORDS)
    seen = set(words)
    for piece, _ in pieces:
        word = piece[1:]
        if piece.startswith("\u2581") and re.fullmatch(r"[a-z]{4,12}", word) and word not in seen:
            words.append(word)
            seen.add(word)
        if len(words) == VOCABULARY_SIZE:
            break
    return words


class MailMaker:
    """Deterministic mail of one tenant: Zipf-distributed filler words, topic sentences, identifiers."""

    def __init__(self, words: list[str], seed: int, domain: str) -> None:
        self.rng = random.Random(seed)
        self.words = words
        weights = [1 / (rank + 2) ** 1.05 for rank in range(len(words))]
        total = sum(weights)
        self.cumulative = list(accumulate(w / total for w in weights))
        self.domain = domain
        self.people = [f"{f} {last}" for f in FIRST for last in LAST]
        self.identifiers: dict[str, list[str]] = {}

    def _filler(self, count: int) -> str:
        picked = self.rng.choices(self.words, cum_weights=self.cumulative, k=count)
        sentences, start = [], 0
        while start < len(picked):
            length = self.rng.randint(6, 16)
            sentence = " ".join(picked[start : start + length])
            sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            start += length
        return " ".join(sentences)

    def _identifier(self, topic: str, n: int) -> str:
        if topic == "billing":
            return f"INV-{20000 + n}"
        if topic == "review":
            return f"PR-{80000 + n}"
        if topic == "parcel":
            return f"1Z{n:08d}X{self.rng.randint(10, 99)}"
        return f"REF-{n}"

    def message(self, n: int, date: datetime) -> bytes:
        rng = self.rng
        topic = rng.choice(list(TOPICS))
        subjects, sentences = TOPICS[topic]
        ident = self._identifier(topic, n)
        fill = {"id": ident, "month": rng.choice(MONTHS), "city": rng.choice(CITIES)}
        subject = rng.choice(subjects).format(**fill)
        if "{id}" in "".join(subjects + sentences):
            self.identifiers.setdefault(topic, []).append(ident)
        paragraphs = []
        for _ in range(rng.randint(1, 4)):
            own = [rng.choice(sentences).format(**fill) for _ in range(rng.randint(1, 2))]
            paragraphs.append(" ".join([*own, self._filler(rng.randint(15, 70))]))
        sender = rng.choice(self.people)
        address = f"{sender.lower().replace(' ', '.')}@{self.domain}"
        body = "Hi,\n\n" + "\n\n".join(paragraphs) + f"\n\nBest,\n{sender.split()[0]}\n"
        if rng.random() < 0.3:  # a signature, and a quoted reply below it
            body += f"-- \n{sender}\n{self.domain} | +1 555 0100\n"
        if rng.random() < 0.4:
            quoted = "\n".join("> " + line for line in self._filler(rng.randint(30, 120)).split(". "))
            body += f"\nOn {date:%a, %d %b %Y} at 10:00, {rng.choice(self.people)} wrote:\n{quoted}\n"
        return raw_message(
            subject=subject,
            body=body,
            sender=f"{sender} <{address}>",
            to=f"me@{self.domain}",
            message_id=f"<m{n}.{self.domain}@bench.test>",
            date=date,
        )


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


# ---------------------------------------------------------------- servers and loading


def setup(database: str | None, keep: bool) -> str:
    """Django on the bench's embedded servers, in a fresh database (or `database`, already loaded)."""
    os.environ.setdefault("OAKEN_DATA_DIR", str(ROOT / "var" / "bench"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    embedded.ensure_environment()
    import atexit
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    url = os.environ["DATABASE_URL"]
    name = database or f"oaken_bench_search_{os.getpid()}_{time.monotonic_ns()}"
    if database is None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if not keep:

            def drop() -> None:
                from django.db import connections

                connections.close_all()
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

            atexit.register(drop)
    os.environ["DATABASE_URL"] = urlunsplit(urlsplit(url)._replace(path="/" + name))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    return name


def load(total: int) -> tuple[dict[str, Any], float]:
    """Two tenants' mail imported; returns what the queries need to know about them, and the seconds."""
    from django.db import connection

    from apps.mail.importing import import_mail
    from apps.workspaces.services import create_person

    words = vocabulary()
    big_count = round(total * BIG_SHARE)
    plan = [("big", "work", 0.6 * big_count), ("big", "home", 0.4 * big_count), ("small", "mail", total - big_count)]
    people = {key: create_person(email=f"{key}-{time.time_ns()}@bench.test", password=None) for key in ("big", "small")}
    makers = {"big": MailMaker(words, 1, "big.test"), "small": MailMaker(words, 2, "small.test")}
    started = time.perf_counter()
    accounts: dict[str, dict[str, str]] = {"big": {}, "small": {}}
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for key, account, count in plan:
            maker, first, count = makers[key], n, round(count)
            path = Path(tmp) / f"{key}-{account}.mbox"
            origin = datetime(2024, 12, 1, tzinfo=UTC)
            step = timedelta(days=730) / count
            write_mbox(path, (maker.message(first + i, origin + step * i) for i in range(count)))
            n += count
            person = people[key]
            counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name=account, path=path)
            assert counts.imported == count, counts
            accounts[key][account] = str(counts.account_id)
    # most mail is read, a third of it archived; recent mail is the unread (hashtext: a fixed spread)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE mail_message SET read = (abs(hashtext(id::text)) % 100) >= 25 OR date < now() - interval '1 year'"
        )
        cursor.execute(
            "UPDATE mail_message m SET folder_id = f.id FROM mail_folder f WHERE f.account_id = m.account_id "
            "AND f.kind = 'archive' AND abs(hashtext(m.id::text)) % 3 = 0"
        )
        cursor.execute("ANALYZE")
    seconds = time.perf_counter() - started
    world = {
        "tenants": {key: str(people[key].tenant.pk) for key in people},
        "accounts": accounts,
        "words": words,
        "identifiers": {key: makers[key].identifiers for key in makers},
        "messages": total,
    }
    return world, seconds


# ---------------------------------------------------------------- the enricher, in a worker-like child process


def worker_main() -> None:
    """The child: a worker's imports (Django, the Celery app and its tasks), then enrich_pending() once;
    prints its figures as JSON."""
    import django

    django.setup()
    from config.celery import app

    app.loader.import_default_modules()
    from apps.search import indexing
    from apps.search.embedders import current_embedder

    current_embedder()  # a worker has its model loaded once; not what is measured
    index_seconds = 0.0
    build = indexing.build_indexes

    def timed_build(model: Any) -> list[str]:
        nonlocal index_seconds
        began = time.perf_counter()
        try:
            return build(model)
        finally:
            index_seconds += time.perf_counter() - began

    indexing.build_indexes = timed_build
    began = time.perf_counter()
    outcome = indexing.enrich_pending()
    seconds = time.perf_counter() - began
    print(
        json.dumps(
            {
                "messages": outcome.messages,
                "seconds": seconds,
                "index_seconds": index_seconds,
                "indexes": outcome.indexes_built,
                "peak_rss_kb": _peak_rss_kb(),
            }
        )
    )


def _peak_rss_kb() -> int:
    """This process's peak RSS since it was exec'd: VmHWM (getrusage's ru_maxrss outlives exec, so a child
    forked from this bench would report the loaded parent's size)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_worker() -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit("the enricher's process failed")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def enricher_batches() -> list[list[str]]:
    """The texts the enricher embeds, in its batches: SEARCH_EMBED_BATCH messages' chunks per call."""
    from django.conf import settings

    from apps.search.indexing import texts_of
    from apps.search.models import SearchDocument

    size = settings.OPERATIONS["SEARCH_EMBED_BATCH"]
    rows = list(SearchDocument.objects.unscoped().values_list("message_id", "message__subject", "message__text_body"))
    batches = []
    for start in range(0, len(rows), size):
        texts = texts_of(rows[start : start + size])
        batches.append([text for pieces in texts.values() for text in pieces])
    return batches


def bare_model(batches: list[list[str]]) -> float:
    from apps.search.embedders import current_embedder

    embedder = current_embedder()
    began = time.perf_counter()
    for texts in batches:
        embedder.embed(texts)
    return time.perf_counter() - began


# ---------------------------------------------------------------- search through the gate, and its branches


@dataclass
class Branches:
    keyword: tuple[str, Any]
    vector: list[tuple[str, Any]]  # the nearest-chunk queries it ran (one, unless the first fell short)

    @property
    def indexed(self) -> bool:
        """Whether the vector branch used the tenant's HNSW index (its queries order by the cast it is built on;
        the scan's settings are the connection's, apps.search.vectors.session_settings, so the bare statements
        run with them too)."""
        return any("::halfvec(" in sql for sql, _ in self.vector)


def captured(run: Callable[[], Any]) -> tuple[Any, Branches]:
    """Run `run` (one dispatch), keeping the SQL of the search's two branches as it issued them."""
    from django.db import connection

    statements: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        result = run()
    keyword = [s for s in statements if "ts_rank_cd" in s[0] and "search_searchdocument" in s[0]]
    vector = [s for s in statements if "<=>" in s[0]]
    assert len(keyword) == 1 and vector, [s[0][:80] for s in statements]
    return result, Branches(keyword[0], vector)


def bare(sql: str, params: Any) -> float:
    """Seconds of one statement run alone on the connection's own psycopg cursor, every row fetched."""
    from django.db import connection

    raw = connection.connection
    began = time.perf_counter()
    with raw.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.fetchall()
    return time.perf_counter() - began


@dataclass
class Timing:
    label: str
    query: str
    matches: int
    hits: int
    dispatch: list[float]
    keyword: list[float]
    vector: list[float]
    vector_path: str


def time_query(caller: Any, tenant_id: str, label: str, text: str, samples: int) -> Timing:

    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch

    data = {"query": text}

    def call() -> Any:
        return dispatch(caller, Door.MCP, "search", data)

    for _ in range(2):  # warm: caches, the plan, the pages
        call()
    result, branches = captured(call)
    timing = Timing(label, text, matches(tenant_id, text), len(result.output["hits"]), [], [], [], "")
    timing.vector_path = "hnsw index" if branches.indexed else "exact"
    if len(branches.vector) > 1:
        timing.vector_path += f", {len(branches.vector)} queries"
    for _ in range(samples):  # interleaved, so drift hits all three alike
        began = time.perf_counter()
        call()
        timing.dispatch.append(time.perf_counter() - began)
        timing.keyword.append(bare(*branches.keyword))
        timing.vector.append(sum(bare(sql, params) for sql, params in branches.vector))
    return timing


def matches(tenant_id: str, text: str) -> int:
    """How many of the tenant's messages the words match (the keyword branch ranks them all)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM search_searchdocument WHERE tenant_id = %s "
            "AND document @@ websearch_to_tsquery('simple', oaken_fold(%s))",
            [tenant_id, text],
        )
        return int(cursor.fetchone()[0])


def explain(sql: str, params: Any) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of one statement, cut to its plan nodes, index conditions and totals."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        lines = [row[0] for row in cursor.fetchall()]
    kept = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if (
            i == 0
            or "->" in line
            or stripped.startswith(("Index Cond", "Order By", "Rows Removed", "Recheck Cond", "Heap Blocks"))
            or stripped.startswith(("Execution Time", "Planning Time"))
            or (stripped.startswith("Buffers") and i < 3)
        ):
            kept.append(line[:160])
    return kept


# ---------------------------------------------------------------- the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 messages, for a try")
    parser.add_argument("--samples", type=int, default=30, help="timed calls per query and tenant")
    parser.add_argument("--keep", action="store_true", help="keep the loaded database (its name is printed)")
    parser.add_argument("--database", help="measure a database a --keep run loaded, skipping load and enricher")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main()
        return
    total = 10_000 if args.quick else args.messages
    name = setup(args.database, args.keep)

    from django.conf import settings
    from django.db import connection

    from apps.core.callers import Caller
    from apps.core.kinds import Door
    from apps.gate.dispatch import dispatch
    from apps.search.embedders import current_embedder
    from apps.search.models import Chunk, EmbeddingModel
    from apps.search.vectors import has_index, index_name
    from apps.workspaces.models import Membership, Tenant

    world_file = ROOT / "var" / "bench" / f"{name}.json"
    bounds = settings.OPERATIONS
    print(f"{os.cpu_count()} CPUs; database {name}; model {current_embedder().key}")
    if args.database:
        world = json.loads(world_file.read_text())
        total = world["messages"]
        print(f"reusing {args.database} ({total} messages): load and enricher skipped")
    else:
        world, load_seconds = load(total)
        if args.keep:
            world_file.write_text(json.dumps(world))
        print(f"load: {total} messages in {load_seconds:.0f} s ({total / load_seconds:.0f} messages/s), two tenants")

        batches = enricher_batches()
        chunk_count = sum(len(b) for b in batches)
        bare_before = bare_model(batches)
        worker = run_worker()
        bare_after = bare_model(batches)
        bare_seconds = statistics.median([bare_before, bare_after])
        enrich_seconds = worker["seconds"] - worker["index_seconds"]
        bare_rate, enrich_rate = total / bare_seconds, worker["messages"] / enrich_seconds
        print(
            f"\nenricher: {worker['messages']} messages, {chunk_count} chunks, "
            f"batches of {bounds['SEARCH_EMBED_BATCH']} messages"
        )
        print(
            f"bare model (embed)      : {bare_rate:9.0f} messages/s  ({bare_seconds:.1f} s, runs {bare_before:.1f}/"
            f"{bare_after:.1f} s)"
        )
        print(
            f"enricher (worker)       : {enrich_rate:9.0f} messages/s  ({enrich_seconds:.1f} s, "
            f"+ {worker['index_seconds']:.1f} s building {len(worker['indexes'])} HNSW index(es))"
        )
        print(f"ratio (bare / enricher) : {bare_rate / enrich_rate:.2f}   target <= 1.3")
        print(f"worker peak RSS (VmHWM) : {worker['peak_rss_kb'] / 1024:.0f} MB   target < 500 MB")

    model = EmbeddingModel.objects.get(key=current_embedder().key)
    callers, tenants = {}, {}
    for key, tenant_id in world["tenants"].items():
        tenant = Tenant.objects.get(pk=tenant_id)
        tenants[key] = tenant
        membership = Membership.objects.filter(tenant=tenant).select_related("user", "tenant").get()
        callers[key] = Caller.agent(membership, scopes={"read"}, credential_id="bench", credential_kind="apikey")
        chunks = Chunk.objects.for_tenant(tenant).filter(model=model).count()
        path = f"HNSW index {index_name(tenant.pk, model)}" if has_index(tenant, model) else "exact scan"
        print(f"tenant {key:<5}: {chunks:7d} chunks (exact up to {bounds['SEARCH_EXACT_MAX_CHUNKS']}): {path}")

    words = world["words"]
    ids = world["identifiers"]
    queries = [
        Query("common word", words[60], words[60]),
        Query("medium word", words[400], words[400]),
        Query("rare word", words[2500], words[2500]),
        Query("two words", f"{words[150]} {words[700]}", f"{words[150]} {words[700]}"),
        Query("topic words", "parcel customs", "parcel customs"),
        Query("identifier", ids["big"]["billing"][len(ids["big"]["billing"]) // 2], ids["small"]["billing"][7]),
        Query("question", "when do I have to pay what I owe?", "when do I have to pay what I owe?"),
    ]
    size = bounds["PAGE_SIZE_DEFAULT"]
    print(
        f"\nhybrid search, page of {size} (the default), {args.samples} calls each, through dispatch as an MCP agent "
        f"(audited);\nbranches: the SQL the search issued, each run alone; ratio = dispatch p50 / slower branch p50 "
        f"(the two branches run one after the other: 'sum' is dispatch p50 / (keyword + vector) p50)"
    )
    header = (
        f"{'tenant':<6} {'query':<12} {'matches':>8} {'hits':>4} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'kw p50':>7} {'vec p50':>7} {'ratio':>6} {'sum':>5}  vector path"
    )
    summary = {}
    for key in ("big", "small"):
        print(header)
        pooled: list[float] = []
        slower: list[float] = []
        both: list[float] = []
        for q in queries:
            text = q.big if key == "big" else q.small
            t = time_query(callers[key], world["tenants"][key], q.label, text, args.samples)
            kw, vec = statistics.median(t.keyword), statistics.median(t.vector)
            p50 = statistics.median(t.dispatch)
            pooled += t.dispatch
            slower += [max(a, b) for a, b in zip(t.keyword, t.vector, strict=True)]
            both += [a + b for a, b in zip(t.keyword, t.vector, strict=True)]
            print(
                f"{key:<6} {t.label:<12} {t.matches:>8} {t.hits:>4} {p50 * 1000:>7.1f} "
                f"{percentile(t.dispatch, 95) * 1000:>7.1f} {kw * 1000:>7.1f} {vec * 1000:>7.1f} "
                f"{p50 / max(kw, vec):>6.2f} {p50 / (kw + vec):>5.2f}  {t.vector_path}"
            )
        p50 = statistics.median(pooled)
        summary[key] = (p50, percentile(pooled, 95), p50 / statistics.median(slower), p50 / statistics.median(both))
    print()
    for key, (p50, p95, ratio, ratio_sum) in summary.items():
        count = total * BIG_SHARE if key == "big" else total * (1 - BIG_SHARE)
        print(
            f"{key} tenant ({count:.0f} messages), all queries: hybrid p50 {p50 * 1000:.1f} ms (target < 50), "
            f"p95 {p95 * 1000:.1f} ms; dispatch / slower branch {ratio:.2f} (target <= 1.5), "
            f"dispatch / both branches {ratio_sum:.2f}"
        )

    # ---- plans
    big = callers["big"]
    q = queries[1]
    _, branches = captured(lambda: dispatch(big, Door.MCP, "search", {"query": q.big}))
    print(f"\nEXPLAIN (ANALYZE, BUFFERS), big tenant, query {q.big!r}: keyword branch")
    print("\n".join(explain(*branches.keyword)))
    print("vector branch")
    for sql, params in branches.vector:
        print("\n".join(explain(sql, params)))

    account = world["accounts"]["big"]["work"]
    q = queries[4]  # words with a meaning, so both sides fill the page
    filtered = {"query": q.big, "account_id": account, "folder": "inbox", "unread": True}
    result, branches = captured(lambda: dispatch(big, Door.MCP, "search", filtered))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE m.account_id = %s AND f.kind = 'inbox' AND NOT m.read) "
            "FROM mail_message m JOIN mail_folder f ON f.id = m.folder_id WHERE m.tenant_id = %s",
            [account, world["tenants"]["big"]],
        )
        all_count, in_filter = cursor.fetchone()
    hits = result.output["hits"]
    semantic = sum(1 for h in hits if "semantic" in h["matched"])
    print(
        f"\nfiltered (account work + folder inbox + unread: {in_filter} of the tenant's {all_count} messages, "
        f"{100 * in_filter / all_count:.1f}%): page {len(hits)} of {size} hits, {semantic} of them by meaning"
    )
    calls = []
    for _ in range(max(5, args.samples // 3)):
        began = time.perf_counter()
        dispatch(big, Door.MCP, "search", filtered)
        calls.append(time.perf_counter() - began)
    print(f"dispatch p50 {statistics.median(calls) * 1000:.1f} ms; vector branch: {len(branches.vector)} queries")
    for sql, params in branches.vector:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        print(f"vector query: {len(rows)} chunks of {len({r[0] for r in rows})} messages")
        print("\n".join(explain(sql, params)))


if __name__ == "__main__":
    main()
