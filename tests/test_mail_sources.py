"""Behaviour of apps.mail.sources: finding raw messages in mbox files, Maildirs and .eml folders."""

import mailbox
import tracemalloc
from email.message import EmailMessage
from pathlib import Path

import pytest

from apps.mail.parsing.message import parse_message
from apps.mail.sources import RawItem, SourceError, detect_kind, iter_source

FIXTURES = Path(__file__).parent / "fixtures" / "mail"


def message_bytes(subject: str, body: str = "Body.\n") -> bytes:
    return f"From: a@example.com\nSubject: {subject}\n\n{body}".encode()


def make_maildir(root: Path, files: dict[str, bytes]) -> Path:
    for sub in ("cur", "new", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


# -- detection -------------------------------------------------------------------------------------------


def test_it_detects_each_kind_of_source(tmp_path: Path) -> None:
    maildir = make_maildir(tmp_path / "Maildir", {})
    emls = tmp_path / "emls"
    (emls / "deep").mkdir(parents=True)
    (emls / "deep" / "x.EML").write_bytes(message_bytes("x"))
    single = tmp_path / "one.eml"
    single.write_bytes(message_bytes("one"))

    assert detect_kind(FIXTURES / "sample.mbox") == "mbox"
    assert detect_kind(maildir) == "maildir"
    assert detect_kind(emls) == "eml-folder"
    assert detect_kind(single) == "eml"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "the path does not exist"),
        ("empty-folder", "the folder holds no Maildir and no .eml files"),
        ("folder-without-eml", "the folder holds no Maildir and no .eml files"),
        ("empty-file", "the file is empty"),
        ("text-file", "the file is neither an mbox file nor an .eml file"),
    ],
)
def test_it_rejects_paths_that_are_not_mail_sources(tmp_path: Path, setup: str, message: str) -> None:
    path = tmp_path / "source"
    if setup == "empty-folder":
        path.mkdir()
    elif setup == "folder-without-eml":
        path.mkdir()
        (path / "notes.txt").write_text("secret notes")
    elif setup == "empty-file":
        path.write_bytes(b"")
    elif setup == "text-file":
        path.write_bytes(b"Subject: secret\n\nnot an mbox\n")

    with pytest.raises(SourceError) as caught:
        detect_kind(path)
    with pytest.raises(SourceError):
        iter_source(path)  # raises on the call, before any item is requested

    assert str(caught.value) == message


# -- mbox ------------------------------------------------------------------------------------------------


def test_it_streams_mbox_messages_without_the_envelope_lines() -> None:
    items = list(iter_source(FIXTURES / "sample.mbox"))

    assert items == [
        RawItem(
            "mbox:#1 (byte 0)",
            b"From: Alice <alice@example.com>\nSubject: First\nMessage-ID: <m1@example.com>\n\n"
            b"Hello Bob,\n>From the archives: nothing new.\nFrom here on, everything is fine.\n\nBye\n",
        ),
        RawItem(
            "mbox:#2 (byte 209)",
            b"From: Bob <bob@example.com>\nSubject: Second\nMessage-ID: <m2@example.com>\n\nReply.\n",
        ),
        RawItem(
            "mbox:#3 (byte 336)",
            b"From: Carol <carol@example.com>\nSubject: Third\nMessage-ID: <m3@example.com>\n\nLast message.\n",
        ),
    ]
    data = (FIXTURES / "sample.mbox").read_bytes()
    assert data[209:].startswith(b"From bob@example.com ")
    assert data[336:].startswith(b"From carol@example.com ")


def test_mbox_from_lines_stay_escaped_and_do_not_split_inside_a_paragraph() -> None:
    first = next(iter_source(FIXTURES / "sample.mbox"))

    assert parse_message(first.data).text_body == (
        "Hello Bob,\n>From the archives: nothing new.\nFrom here on, everything is fine.\n\nBye"
    )


def test_it_reads_an_mbox_with_crlf_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "crlf.mbox"
    path.write_bytes(
        b"From a Mon Feb  3 10:00:00 2025\r\nSubject: one\r\n\r\nfirst\r\n\r\n"
        b"From b Mon Feb  3 11:00:00 2025\r\nSubject: two\r\n\r\nsecond\r\n"
    )

    items = list(iter_source(path))

    assert [item.data for item in items] == [
        b"Subject: one\r\n\r\nfirst\r\n",
        b"Subject: two\r\n\r\nsecond\r\n",
    ]


def test_it_matches_python_mailbox_for_an_mbox_written_by_mailbox(tmp_path: Path) -> None:
    path = tmp_path / "written.mbox"
    box = mailbox.mbox(path)
    sources = [
        message_bytes("plain"),
        message_bytes("from line", "Hello\nFrom the start, a From line.\n\nFrom here too.\n"),
        message_bytes("no final newline", "no newline at the end"),
        message_bytes("blank lines", "\n\ntrailing blank lines\n\n\n"),
    ]
    html = EmailMessage()
    html["Subject"] = "Grüße"
    html.set_content("Grüße\nFrom Köln\n")
    html.add_alternative("<p>Grüße</p>", subtype="html")
    for source in sources:
        box.add(source)
    box.add(html)
    box.flush()

    items = list(iter_source(path))

    expected = [box.get_bytes(key) for key in box.iterkeys()]
    assert [item.data for item in items] == expected
    assert [parse_message(item.data).text_body for item in items] == [
        "Body.",
        "Hello\n>From the start, a From line.\n\n>From here too.",
        "no newline at the end",
        "trailing blank lines",
        "Grüße\n>From Köln",
    ]
    box.close()


def test_mbox_reading_keeps_memory_flat(tmp_path: Path) -> None:
    path = tmp_path / "big.mbox"
    body = ("A line of body text that is long enough to add up quickly.\n" * 40).encode()
    with path.open("wb") as file:
        for number in range(2000):
            file.write(b"From x Mon Feb  3 10:00:00 2025\n" + message_bytes(f"m{number}") + body + b"\n")
    assert path.stat().st_size > 4_000_000

    tracemalloc.start()
    count = sum(1 for _ in iter_source(path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert count == 2000
    assert peak < 500_000


# -- Maildir ---------------------------------------------------------------------------------------------


def test_it_reads_maildir_new_then_cur_in_name_order_then_subfolders(tmp_path: Path) -> None:
    root = make_maildir(
        tmp_path / "Maildir",
        {
            "cur/200.host:2,S": message_bytes("cur 200"),
            "cur/100.host:2,RS": message_bytes("cur 100"),
            "new/300.host": message_bytes("new 300"),
            "tmp/400.host": message_bytes("tmp is never read"),
            "cur/.hidden": message_bytes("dot files are not messages"),
        },
    )
    make_maildir(root / ".Work.Projects", {"new/500.host": message_bytes("sub new")})
    make_maildir(root / ".Archive", {"cur/600.host:2,": message_bytes("archive")})
    (root / ".NotAMaildir").mkdir()

    items = list(iter_source(root))

    assert [item.position for item in items] == [
        "maildir:new/300.host",
        "maildir:cur/100.host:2,RS",
        "maildir:cur/200.host:2,S",
        "maildir:.Archive/cur/600.host:2,",
        "maildir:.Work.Projects/new/500.host",
    ]
    assert [parse_message(item.data).subject for item in items] == [
        "new 300",
        "cur 100",
        "cur 200",
        "archive",
        "sub new",
    ]


# -- .eml files ------------------------------------------------------------------------------------------


def test_it_reads_eml_folders_recursively_in_path_order(tmp_path: Path) -> None:
    root = tmp_path / "export"
    for relative in ("b.eml", "a/z.EML", "a/b/c.eml", "A2.Eml", "notes.txt", "a/readme.md"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(message_bytes(relative))

    items = list(iter_source(root))

    assert [item.position for item in items] == ["eml:A2.Eml", "eml:a/b/c.eml", "eml:a/z.EML", "eml:b.eml"]
    assert items[1].data == message_bytes("a/b/c.eml")


def test_it_accepts_a_single_eml_file(tmp_path: Path) -> None:
    path = tmp_path / "Message.EML"
    path.write_bytes(message_bytes("single"))

    assert list(iter_source(path)) == [RawItem("eml:Message.EML", message_bytes("single"))]
