"""The parser's fast paths give exactly what the slow, general paths give.

apps.mail.mimetree builds the email package's Message tree without its feedparser, and html_to_text reads
plain markup without html.parser; both hand everything they are not sure of to the general path. These
tests run both paths over a corpus (the fixtures, the benchmark's message mix, hand-made edge cases) and
over thousands of damaged variants of it, and require identical trees, identical ParsedMessages and
identical text, and that the fast paths really are taken for ordinary mail.
"""

from __future__ import annotations

import base64
import mailbox
import random
from collections.abc import Iterator
from email.message import Message
from email.parser import BytesParser
from pathlib import Path
from unittest import mock

import pytest

from apps.mail.mimetree import build_tree
from apps.mail.parsing import html_text
from apps.mail.parsing import message as message_parsing
from apps.mail.parsing.message import MessageParseError, ParsedMessage
from bench.import_mail import make_message
from tests.mailfactory import conversation, raw_message

FIXTURES = Path(__file__).parent / "fixtures" / "mail"
FEEDPARSER = BytesParser(policy=message_parsing._POLICY)

EDGE_CASES = [
    # header blocks
    b"Subject: no body",
    b"Subject: x\n",
    b"Subject: x\n\n",
    b"Subject: x\nbody without a blank line\n",
    b"Subject: x\n  folded\n\tagain\nTo: a@example.com\n\nbody\n",
    b"Subject: x\n \nTo: a@example.com\n\nwhitespace-only continuation\n",
    b"Subject:\n\nempty value\n",
    b"Subject:no space\n\nbody\n",
    b"Subject: trailing blanks   \t\n\nbody\n",
    b"Subject: x\r\n\r\nCRLF\r\n",
    b"Subject: x\r\n\nmixed line ends\r\n",
    b"Subject: x\rlone CR\r\n\r\nbody\r",
    b"From someone Mon Feb  3 10:00:00 2025\nSubject: envelope\n\nbody\n",
    b"Subject: x\nFrom misplaced envelope\nTo: a@example.com\n\nbody\n",
    b"Subject: x\nFrom last envelope line\n\nbody\n",
    b"Subject: x\n: no name\n\nbody\n",
    b"Subject: x\nBad Header: space in name\n\nbody\n",
    b"Subject: Gr\xc3\xbc\xc3\x9fe\nFrom: Z\xf6e <z@example.com>\n\n8-bit headers\n",
    b"Subject: x\nContent-Type: text/plain; charset=utf-8\nContent-Type: text/html\n\nduplicate types\n",
    b"Subject: x\nContent-Type: bogus\n\ninvalid type\n",
    b"Subject: x\nContent-Type: text/html; charset=iso-8859-1\n\n<p>caf\xe9</p>\n",
    b"Subject: x\nContent-Transfer-Encoding: quoted-printable\n\ncaf=C3=A9 =\nsoft break\n",
    b"Subject: x\nContent-Transfer-Encoding: base64\n\n" + base64.encodebytes("Grüße\n".encode()),
    b"Subject: x\nContent-Transfer-Encoding: base64\n\nnot*base64!\n",
    b"Subject: x\nContent-Transfer-Encoding: x-uuencode\n\nbegin 644 f\n#86)C\n`\nend\n",
    b"Subject: x\nContent-Type: application/pdf\nContent-Transfer-Encoding: base64\n\nJVBERi0xLjQK\n",
    b"Subject: x\nContent-Type: text/plain; name*=utf-8''%C3%A9.txt\n\nrfc 2231\n",
    b"Subject: nul\x00\n\nnul\x00body\n",
    # multiparts
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain\n\none\n--b--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\npreamble\n--b\n\nno headers\n--b\n'
    b"Content-Type: text/html\n\n<b>two</b>\n--b--\nepilogue\n",
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain\n--b--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b  \t\ntext\n--b-- \n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\ntext\n--b--',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\ntext\n--bb\nnot a boundary\n--b--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\ntext\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\nno start boundary\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b--\nclosed first\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\n--b\ndoubled\n--b--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="b"\n\n--b\none\n--b\n--b--\n',
    b"Subject: m\nContent-Type: multipart/mixed\n\n--b\nno boundary parameter\n--b--\n",
    b'Subject: m\nContent-Type: multipart/mixed; boundary=""\n\n--\nempty boundary\n----\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="a.b+c(d)?"\n\n--a.b+c(d)?\nregex chars\n--a.b+c(d)?--\n',
    b"Subject: m\nContent-Type: multipart/mixed; boundary*=utf-8''%C3%A9\n\n--\xc3\xa9\nx\n--\xc3\xa9--\n",
    b"Subject: m\nContent-Type: multipart/mixed; boundary=plain; charset=x\n\n--plain\nx\n--plain--\n",
    b'Subject: m\r\nContent-Type: multipart/alternative; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n'
    b"plain\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>html</p>\r\n--b--\r\n",
    b'Subject: m\nContent-Type: multipart/mixed; boundary="o"\n\n--o\nContent-Type: multipart/alternative; '
    b'boundary="i"\n\n--i\nContent-Type: text/plain\n\ninner\n--i--\nafter inner\n--o\n'
    b'Content-Type: application/octet-stream\nContent-Disposition: attachment; filename="x.bin"\n\n\x00\x01\n--o--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="o"\n\n--o\nContent-Type: multipart/alternative; '
    b'boundary="i"\n\n--i\ninner never closed\n--o--\n',
    b'Subject: m\nContent-Type: multipart/mixed; boundary="o"\n\n--o\nContent-Type: multipart/mixed; '
    b'boundary="o"\n\n--o\nsame boundary inside\n--o--\n--o--\n',
    b'Subject: d\nContent-Type: multipart/digest; boundary="b"\n\n--b\n\nFrom: a@example.com\n\ndigest\n--b--\n',
    b'Subject: f\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: message/rfc822\n\n'
    b"From: inner@example.com\nSubject: inner\n\ninner body\n--b--\n",
    b"Subject: r\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; x\n\nFinal-Recipient: a\n",
]


def _fixture_messages() -> Iterator[bytes]:
    for path in sorted(FIXTURES.glob("*.eml")):
        yield path.read_bytes()
    for message in mailbox.mbox(str(FIXTURES / "sample.mbox")):
        yield message.as_bytes()


def _bench_messages() -> list[bytes]:
    rng = random.Random(7)
    return [make_message(i, rng).replace(b"\n", b"\r\n") for i in range(30)]


def corpus() -> list[bytes]:
    messages = [*_fixture_messages(), *_bench_messages(), *EDGE_CASES, *conversation(3)]
    messages.append(raw_message(subject="Grüße", body="Schöne Grüße\n", extra_headers=[("X-Mailer", "Groß 1.0")]))
    return messages


def _damaged(raw: bytes, rng: random.Random) -> bytes:
    """A variant of raw with the kind of damage real mail and hostile senders bring."""
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randrange(len(data) + 1)
        if choice < 0.3:
            data[at:at] = rng.choice([b"\r", b"\n", b"\r\n", b"\n\n", b" ", b"\t", b":", b"-", b"--", b"\x00", b"\xff"])
        elif choice < 0.5 and data:
            del data[at : at + rng.randint(1, 40)]
        elif choice < 0.65:
            line_start = data.rfind(b"\n", 0, at) + 1
            data[line_start:line_start] = rng.choice([b"From x\n", b" continued\n", b"--b\n", b"--b--\n", b"\n"])
        elif choice < 0.8:
            data = data[:at]
        else:
            data = bytearray(
                bytes(data).replace(b"\r\n", b"\n") if rng.random() < 0.5 else bytes(data).replace(b"\n", b"\r\n")
            )
    return bytes(data)


def variants(count: int) -> Iterator[bytes]:
    rng = random.Random(20261201)
    base = corpus()
    for _ in range(count):
        yield _damaged(rng.choice(base), rng)


def _tree(msg: Message) -> object:
    """What a reader of a Message tree can see: headers, envelope, payloads and parts."""
    payload = msg._payload  # type: ignore[attr-defined]
    parts = [_tree(part) for part in payload] if isinstance(payload, list) else payload
    answers = [msg.get(name) for name, _ in msg._headers]  # type: ignore[attr-defined]
    return (msg._headers, answers, msg._unixfrom, msg.get_content_type(), msg.get_default_type(), parts)  # type: ignore[attr-defined]


def _outcome(parse: object) -> ParsedMessage | str:
    try:
        return parse()  # type: ignore[operator]
    except MessageParseError as exc:
        return exc.reason


def _full_path(raw: bytes) -> ParsedMessage | str:
    """parse_message as it was: the feedparser's tree, and html.parser for HTML."""

    def parse() -> ParsedMessage:
        message_parsing._check_looks_like_message(raw)
        try:
            return message_parsing._build_message(FEEDPARSER.parsebytes(raw), raw)
        except MessageParseError:
            raise
        except Exception as exc:
            raise MessageParseError(f"parser error: {type(exc).__name__}") from exc

    with mock.patch.object(html_text, "_feed_plain_html", return_value=False):  # html.parser for all HTML
        return _outcome(parse)


def test_the_fast_tree_is_the_feedparsers_tree() -> None:
    built = 0
    inputs = [*corpus(), *variants(3000)]
    for raw in inputs:
        tree = build_tree(raw, message_parsing._POLICY)
        if tree is not None:
            built += 1
            assert _tree(tree) == _tree(FEEDPARSER.parsebytes(raw)), raw
    # the fast path is the common path, not a corner case
    assert built > len(inputs) * 0.6


def test_the_fast_tree_is_taken_for_ordinary_mail() -> None:
    ordinary = [*_bench_messages(), *conversation(3), (FIXTURES / "alternative.eml").read_bytes()]
    for raw in ordinary:
        assert build_tree(raw, message_parsing._POLICY) is not None, raw


@pytest.mark.parametrize("source", ["corpus", "variants"])
def test_parse_message_gives_what_the_general_path_gives(source: str) -> None:
    inputs = corpus() if source == "corpus" else list(variants(3000))
    for raw in inputs:
        assert _outcome(lambda raw=raw: message_parsing.parse_message(raw)) == _full_path(raw), raw


# -- HTML ------------------------------------------------------------------------------------------------

HTML_CASES = [
    "<p>Hi &amp; <b>you</b></p><br/><ul><li>a<li>b</ul>",
    '<!DOCTYPE html><html><head><meta charset="utf-8"><title>T &amp; t</title><style>.x{color:red}</style>'
    '</head><body><a href="https://x.example/?a=1&amp;b=2">link</a><img alt=Logo src=x.png></body></html>',
    "<table><tr><th>A<th>B</tr><tr><td>1</td><td> 2 </td></tr></table><hr><pre>\n a  b\n\tc</pre>y",
    '<a href="#top">Top</a> <a href="mailto:x@example.com">x@example.com</a> <a href=\'u\'>open',
    "<p>a<![bogus[ z ]]>b</p><!--[if mso]>hidden<![endif]--><a href='u'>open link<p>c</p",
    "<div>a < b and c > d</div>",
    "<P CLASS=x>upper</P><BR/><Br >",
    "<p title=\"a > b\">quoted gt</p><p title='<i>'>quoted lt</p>",
    "<p>unterminated &amp &#169 &#x1F600; &unknown; &</p>",
    "<script>if (a < b) {}</script><p>after script</p>",
    "<script>x = 1</script><style>p {}</style><noscript>no &amp; js</noscript><p>shown</p>",
    "<title>A <b>bold</b> title</title><p>x</p>",
    "<textarea>raw &amp; text</textarea>",
    "<xmp><b>kept</b></xmp>",
    "<plaintext>all the rest</plaintext><p>more</p>",
    "<!-- a -- b --><p>dashes in a comment</p>",
    "<!--> odd comment --><p>x</p>",
    "<!---> odd comment --><p>x</p>",
    "<!----><p>empty comment</p>",
    "<!-- unclosed comment <p>x</p>",
    "<?xml version='1.0'?><p>pi</p>",
    "<p>line\r\nbreaks\rand\ttabs</p>",
    "<p>non\xa0breaking\u2003spaces</p><p\xa0class=x>odd name</p><img alt=Lo\xa0go src=x.png>",
    '<a href=x/>bare slash</a><a href=x=y>equals</a><a href = "spaced">sp</a>',
    "<input disabled><img alt=''><img alt><a href=''>empty</a>",
    "<ol><li>one<ol><li>nested</ol></ol><dl><dt>t<dd>d</dl>",
    "text only, no markup at all",
    "",
    "<",
    "a <",
    "<p",
    "</",
    "</p foo>",
    "<p/><div/>",
]


def _html_reference(html: str) -> str:
    extractor = html_text._TextExtractor()
    extractor.feed(html)
    extractor.close()
    return extractor.text()


def _html_corpus() -> list[str]:
    documents = list(HTML_CASES)
    for raw in corpus():
        tree = FEEDPARSER.parsebytes(raw)
        for part in tree.walk():
            if part.get_content_type() == "text/html":
                payload = part.get_payload(decode=True)
                if isinstance(payload, bytes):
                    documents.append(payload.decode("utf-8", "replace"))
    return documents


HTML_DAMAGE = ["<", ">", "&", '"', "'", "/", "-", "!", " ", "=", "\n", "<p>", "</a>", "<!--", "-->", "&amp;",
               "<script>", "</script>", "<br/>", "<a href=x>", "\xa0"]  # fmt: skip


def _damaged_html(html: str, rng: random.Random) -> str:
    text = list(html)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(text) + 1)
        if rng.random() < 0.7:
            text[at:at] = rng.choice(HTML_DAMAGE)
        else:
            del text[at : at + rng.randint(1, 20)]
    return "".join(text)


@pytest.mark.parametrize("source", ["corpus", "variants"])
def test_html_to_text_gives_what_html_parser_gives(source: str) -> None:
    documents = _html_corpus()
    if source == "variants":
        rng = random.Random(42)
        documents = [_damaged_html(rng.choice(documents), rng) for _ in range(4000)]
    fast = 0
    for html in documents:
        assert html_text.html_to_text(html) == _html_reference(html), html
        fast += html_text._feed_plain_html(html_text._TextExtractor(), html)
    # the fast reader did read a good share of them (damage often sends HTML to html.parser)
    assert fast > len(documents) * (0.5 if source == "corpus" else 0.2)


def test_html_to_text_reads_ordinary_html_without_html_parser() -> None:
    for html in _html_corpus()[:3]:
        assert html_text._feed_plain_html(html_text._TextExtractor(), html), html
