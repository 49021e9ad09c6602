"""How the sync reads mail: apps.mail.imapfetch (UID FETCH read straight off the connection) and
pipeline.read_ahead (the next batch fetched and parsed in a thread while one is stored).

The reader is checked against imapclient on a real Dovecot, including bodies that look like IMAP syntax
and a second user whose mail must never come back; responses Dovecot never sends (other item orders,
quoted or NIL bodies, connections dropped mid-literal, BYE) come from a scripted server on loopback.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError

from apps.mail.imapfetch import FetchedMessage, fetch_messages, fetch_sizes, uid_set
from apps.mail.pipeline import long_lived_frozen, read_ahead
from tests.loopback import free_port
from tests.mailfactory import raw_message
from tests.mailservers import ImapServer, imap_server  # noqa: F401 (a fixture)

SEEN, FLAGGED = b"\\Seen", b"\\Flagged"

TRICKY = [
    raw_message(message_id="<plain@example.test>"),
    raw_message(
        message_id="<syntax@example.test>", body="a line ending like a literal {12}\r\n)\r\n* 9 FETCH (UID 9)\r\n"
    ),
    raw_message(message_id="<eightbit@example.test>", body="Gr\u00fc\u00dfe\n").replace(b"Gr", b"\xffGr"),
    b"Subject: no final newline\r\n\r\nend",
]


def test_it_fetches_exactly_what_the_server_holds(imap_server: ImapServer) -> None:  # noqa: F811
    alice = imap_server.add_user(f"alice-{time.time_ns()}@example.test")
    mallory = imap_server.add_user(f"mallory-{time.time_ns()}@example.test")
    imap_server.append(mallory, "INBOX", raw_message(message_id="<mallory@example.test>"))
    gone = raw_message(message_id="<gone@example.test>")
    flags = [(SEEN,), (FLAGGED, SEEN), (b"$Label1",), ()]
    for raw, these in zip([TRICKY[0], gone, *TRICKY[1:]], [(), *flags], strict=True):
        imap_server.append(alice, "INBOX", raw, flags=these)
    with imap_server.client(alice) as client:
        client.select_folder("INBOX")
        uids = client.search("ALL")
        client.delete_messages([uids[1]])
        client.expunge()
        kept = [uids[0], *uids[2:]]
        expected = client.fetch(kept, ["BODY.PEEK[]", "FLAGS"])
        fetched = fetch_messages(client, [*uids, 999])  # an expunged UID and one never there are absent
        assert sorted(fetched) == sorted(expected) == kept
        for uid, message in fetched.items():
            want = FetchedMessage(uid=uid, flags=tuple(expected[uid][b"FLAGS"]), data=expected[uid][b"BODY[]"])
            assert message == want
        assert {SEEN, FLAGGED} <= set(fetched[kept[1]].flags)
        assert b"mallory@example.test" not in b"".join(m.data for m in fetched.values())
        # the connection goes on after the reader's own command
        assert client.search("ALL") == kept
        assert fetch_messages(client, []) == {}


def test_a_refused_fetch_raises_and_leaves_the_connection_usable(imap_server: ImapServer) -> None:  # noqa: F811
    user = imap_server.add_user(f"refused-{time.time_ns()}@example.test")
    imap_server.append(user, "INBOX", TRICKY[0])
    with imap_server.client(user) as client:
        with pytest.raises(IMAPClientError):
            fetch_messages(client, [1])  # no folder selected: the server says BAD
        client.select_folder("INBOX", readonly=True)
        assert [m.data for m in fetch_messages(client, [1]).values()] == [TRICKY[0].replace(b"\n", b"\r\n")]


def test_uid_sets_are_written_as_ranges() -> None:
    assert uid_set([5, 1, 2, 3, 8, 10, 11, 3]) == "1:3,5,8,10:11"
    assert uid_set([7]) == "7"


# -- responses Dovecot does not send ---------------------------------------------------------------------


class ScriptedImap:
    """An IMAP server on loopback that logs anyone in, selects any folder, and answers each UID FETCH with the
    next of the given scripts: bytes sent as they are, with {tag} replaced by the command's tag."""

    def __init__(self, scripts: list[bytes]) -> None:
        self.scripts = scripts
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection, connection.makefile("rb") as lines:
            connection.sendall(b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] scripted\r\n")
            for line in lines:
                tag, _, command = line.rstrip(b"\r\n").partition(b" ")
                verb = command.split(b" ", 2)[:2]
                if verb[:1] == [b"SELECT"] or verb[:1] == [b"EXAMINE"]:
                    connection.sendall(b"* 3 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n" + tag + b" OK [READ-ONLY] done\r\n")
                elif verb == [b"UID", b"FETCH"]:
                    connection.sendall(self.scripts.pop(0).replace(b"{tag}", tag))
                    if not self.scripts:
                        return  # the last script ends the connection
                else:
                    connection.sendall(tag + b" OK done\r\n")

    def client(self) -> IMAPClient:
        client = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        client.login("anyone", "secret")
        client.select_folder("INBOX", readonly=True)
        return client

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


@pytest.fixture
def scripted() -> Iterator[Callable[[list[bytes]], ScriptedImap]]:
    servers: list[ScriptedImap] = []

    def start(scripts: list[bytes]) -> ScriptedImap:
        servers.append(ScriptedImap(scripts))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_it_reads_any_order_quoted_and_nil_bodies_and_more_items_after_the_literal(
    scripted: Callable[[list[bytes]], ScriptedImap],
) -> None:
    response = (
        b"* 1 FETCH (BODY[] {5}\r\nhello UID 10 FLAGS (\\Seen))\r\n"  # items after the literal
        b"* 2 FETCH (FLAGS (\\Flagged \\Seen) MODSEQ (12) UID 11 BODY[] {3}\r\nabc)\r\n"
        b'* 3 FETCH (UID 12 FLAGS () BODY[] "quoted \\"body\\"")\r\n'  # a quoted string with escapes
        b"* 4 FETCH (UID 13 FLAGS () BODY[] NIL)\r\n"  # no body: absent
        b"* 5 FETCH (FLAGS (\\Seen))\r\n"  # an unsolicited flag update, no UID
        b"* 6 EXPUNGE\r\n"
        b'* 7 FETCH (UID 14 BODY[] {2}\r\nhi INTERNALDATE "01-Jan-2026 00:00:00 +0000" FLAGS (\\Seen $Junk))\r\n'
        b"{tag} OK fetched\r\n"
    )
    server = scripted([response, b"{tag} OK nothing\r\n"])
    with server.client() as client:
        assert fetch_messages(client, [10, 11, 12, 13, 14]) == {
            10: FetchedMessage(uid=10, flags=(SEEN,), data=b"hello"),
            11: FetchedMessage(uid=11, flags=(FLAGGED, SEEN), data=b"abc"),
            12: FetchedMessage(uid=12, flags=(), data=b'quoted "body"'),
            14: FetchedMessage(uid=14, flags=(SEEN, b"$Junk"), data=b"hi"),
        }
        assert fetch_messages(client, [15]) == {}


@pytest.mark.parametrize(
    "script",
    [
        b"* 1 FETCH (UID 10 FLAGS () BODY[] {50}\r\nonly part of the literal",
        b"* 1 FETCH (UID 10 FLAGS () BODY[] {5}\r\nhello",
        b"* BYE going away\r\n",
        b"* 1 FETCH (UID 10 FLAGS (",
    ],
    ids=["cut-in-a-literal", "cut-after-a-literal", "bye", "cut-in-a-line"],
)
def test_a_connection_ending_in_a_response_aborts(
    scripted: Callable[[list[bytes]], ScriptedImap], script: bytes
) -> None:
    server = scripted([script])
    with server.client() as client, pytest.raises(IMAPClientAbortError):
        fetch_messages(client, [10])


def test_a_response_nothing_can_read_is_an_error(scripted: Callable[[list[bytes]], ScriptedImap]) -> None:
    server = scripted([b"* 1 FETCH (UID 10 BODY[] ((((\r\n{tag} OK fetched\r\n", b"{tag} OK\r\n"])
    with server.client() as client, pytest.raises(IMAPClientError):
        fetch_messages(client, [10])


# -- read_ahead ------------------------------------------------------------------------------------------


def test_read_ahead_gives_every_item_in_order_while_making_the_next() -> None:
    made: list[int] = []

    def produce() -> Iterator[int]:
        for i in range(6):
            made.append(i)
            yield i

    with read_ahead(produce()) as items:
        first = next(items)
        time.sleep(0.2)
        # the thread made the next item (and one more waiting in the queue) while this one was worked on
        assert first == 0 and made[:3] == [0, 1, 2] and len(made) <= 3
        assert [first, *items] == list(range(6))


def test_read_ahead_raises_the_makers_error_in_the_taker() -> None:
    def produce() -> Iterator[int]:
        yield 1
        raise IMAPClientAbortError("the connection ended")

    with read_ahead(produce()) as items:
        assert next(items) == 1
        with pytest.raises(IMAPClientAbortError):
            next(items)


def test_read_ahead_stops_its_thread_when_the_taker_fails() -> None:
    made: list[int] = []

    def produce() -> Iterator[int]:
        for i in range(1000):
            made.append(i)
            yield i

    def take_one_and_fail() -> None:
        with read_ahead(produce()) as items:
            next(items)
            raise RuntimeError("the store failed")

    before = threading.active_count()
    with pytest.raises(RuntimeError):
        take_one_and_fail()
    assert threading.active_count() == before  # the thread was waited for
    assert len(made) <= 3  # and it stopped instead of reading on


# -- long_lived_frozen -----------------------------------------------------------------------------------


def test_long_lived_objects_are_frozen_only_meanwhile_and_an_outer_freeze_is_left_alone() -> None:
    assert gc.get_freeze_count() == 0
    with long_lived_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # Django and the modules, out of every collection
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        # (the count is not compared exactly: another thread may free a frozen object meanwhile)
        with long_lived_frozen():
            assert gc.get_freeze_count() > 1000
        assert gc.get_freeze_count() > 1000  # not unfrozen: not ours
    finally:
        gc.unfreeze()


def test_a_body_over_the_bound_is_dropped_unread_and_the_connection_goes_on(
    scripted: Callable[[list[bytes]], ScriptedImap],
) -> None:
    big = b"z" * 3_000_000  # more than one piece of the discarding read
    response = (
        b"* 1 FETCH (UID 10 FLAGS (\\Seen) BODY[] {%d}\r\n" % len(big) + big + b")\r\n"
        b"* 2 FETCH (UID 11 FLAGS () BODY[] {5}\r\nsmall)\r\n"
        b"{tag} OK fetched\r\n"
    )
    server = scripted([response, b"* 3 FETCH (UID 12 FLAGS () BODY[] {2}\r\nok)\r\n{tag} OK\r\n", b"{tag} OK\r\n"])
    with server.client() as client:
        assert fetch_messages(client, [10, 11], max_bytes=1000) == {
            10: FetchedMessage(uid=10, flags=(SEEN,), data=b"", too_large=True),
            11: FetchedMessage(uid=11, flags=(), data=b"small"),
        }
        assert fetch_messages(client, [12], max_bytes=1000) == {12: FetchedMessage(uid=12, flags=(), data=b"ok")}


def test_sizes_are_those_the_server_gives(imap_server: ImapServer) -> None:  # noqa: F811
    alice = imap_server.add_user(f"alice-{time.time_ns()}@example.test")
    mallory = imap_server.add_user(f"mallory-{time.time_ns()}@example.test")
    imap_server.append(mallory, "INBOX", raw_message(message_id="<mallory@example.test>", body="m" * 9000))
    for raw in TRICKY:
        imap_server.append(alice, "INBOX", raw)
    with imap_server.client(alice) as client:
        client.select_folder("INBOX", readonly=True)
        uids = client.search("ALL")
        expected = {uid: item[b"RFC822.SIZE"] for uid, item in client.fetch(uids, ["RFC822.SIZE"]).items()}
        assert fetch_sizes(client, [*uids, 999]) == expected
        assert len(expected) == len(TRICKY) and all(size < 9000 for size in expected.values())
        assert fetch_sizes(client, []) == {}
