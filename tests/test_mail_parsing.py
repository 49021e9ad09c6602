"""Behaviour of apps.mail.parsing on real-world (often broken) mail."""

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest

from apps.mail.parsing.headers import Address, normalize_subject
from apps.mail.parsing.html_text import html_to_text
from apps.mail.parsing.message import MessageParseError, ParsedMessage, content_hash, parse_message

FIXTURES = Path(__file__).parent / "fixtures" / "mail"


def parse_fixture(name: str) -> ParsedMessage:
    return parse_message((FIXTURES / name).read_bytes())


def simple_message(headers: str = "", body: str = "Hello.\n") -> bytes:
    return ("From: Alice <alice@example.com>\nTo: bob@example.com\nSubject: Hi\n" + headers + "\n" + body).encode()


# -- headers ---------------------------------------------------------------------------------------------


def test_it_decodes_encoded_word_subjects_mixing_charsets_and_encodings() -> None:
    message = parse_fixture("encoded_words.eml")

    # UTF-8 B and Q words (whitespace between them dropped), ISO-8859-1 Q and Shift_JIS B.
    assert message.subject == "Übergröße und Grüße aus München / 日本語"


def test_it_decodes_encoded_word_display_names() -> None:
    message = parse_fixture("encoded_words.eml")

    assert message.sender == Address(name="山田 太郎", address="taro.yamada@example.jp")  # ISO-2022-JP
    assert message.to == [
        Address(name="Jörg Müller", address="joerg@example.de"),
        Address(name="Élodie", address="elodie@example.fr"),  # encoded word inside a quoted string
    ]
    assert message.cc == [
        Address(name="François", address="francois@example.fr"),
        # A UTF-8 character split across two adjacent encoded words.
        Address(name="€uro Team", address="euro@example.eu"),
    ]


def test_it_keeps_a_small_decoded_subset_of_other_headers() -> None:
    assert parse_fixture("encoded_words.eml").headers == {"x-mailer": "Großmail 2.0"}
    assert parse_fixture("html_only.eml").headers == {
        "list-id": "Shop News <news.shop.example>",
        "list-unsubscribe": "<https://shop.example/unsub?u=1>, <mailto:unsub@shop.example>",
        "precedence": "bulk",
    }


def test_it_reads_raw_8bit_utf8_and_latin1_headers() -> None:
    message = parse_fixture("eightbit_headers.eml")

    assert message.subject == "Grüße aus Köln ☕"
    assert message.sender == Address(name="Zoë Ångström", address="zoe@example.se")
    assert message.to == [Address(name="François Dupont", address="francois@example.fr")]
    assert message.text_body == "Schöne Grüße!"


def test_it_keeps_defective_encoded_words_instead_of_failing() -> None:
    raw = simple_message().replace(b"Subject: Hi", b"Subject: =?utf-8?Q?unterminated and =?no-such-cs?Q?caf=E9?=")

    assert parse_message(raw).subject == "=?utf-8?Q?unterminated and café"


def test_it_parses_dates_into_aware_utc_datetimes() -> None:
    def date_of(value: str) -> datetime | None:
        return parse_message(simple_message(f"Date: {value}\n")).date

    assert date_of("Tue, 04 Feb 2025 09:30:00 +0900") == datetime(2025, 2, 4, 0, 30, tzinfo=UTC)
    assert date_of("4 Feb 2025 09:30 -0530 (EST)") == datetime(2025, 2, 4, 15, 0, tzinfo=UTC)
    assert date_of("Tue, 4 Feb 25 09:30:00 GMT") == datetime(2025, 2, 4, 9, 30, tzinfo=UTC)
    assert date_of("Tue, 04 Feb 2025 09:30:00 -0000") == datetime(2025, 2, 4, 9, 30, tzinfo=UTC)
    assert date_of("2025-02-04T09:30:00+01:00") == datetime(2025, 2, 4, 8, 30, tzinfo=UTC)
    assert date_of("Sat, 29 Feb 2025 10:00:00 +0000") is None
    assert date_of("sometime last week") is None
    assert parse_message(simple_message()).date is None


def test_it_drops_unparseable_addresses_and_lowercases_the_rest() -> None:
    raw = simple_message(
        'Cc: undisclosed-recipients:;\nBcc: Team: "Doe, Jane" <Jane.Doe@Example.COM>, nobody;, <>, x\n'
        "Reply-To: help@example.com (Help Desk)\n"
    )

    message = parse_message(raw)

    assert message.cc == []
    assert message.bcc == [Address(name="Doe, Jane", address="jane.doe@example.com")]
    assert message.reply_to == [Address(name="Help Desk", address="help@example.com")]


def test_missing_or_empty_message_id_is_an_empty_string() -> None:
    assert parse_message(simple_message()).message_id == ""
    assert parse_message(simple_message("Message-ID: <>\n")).message_id == ""
    assert parse_message(simple_message("Message-ID:   \n")).message_id == ""
    assert parse_message(simple_message("Message-ID:  <abc@example.com> \n")).message_id == "abc@example.com"
    assert parse_message(simple_message("Message-ID: no-brackets@example.com\n")).message_id == (
        "no-brackets@example.com"
    )


def test_it_parses_in_reply_to_and_references() -> None:
    raw = simple_message(
        'In-Reply-To: <b@example.com> (Bob\'s message of "Mon, 3 Feb 2025")\n'
        "References: <a@example.com>\n <b@example.com>\t<a@example.com>\n  <c@ex\n ample.com>\n"
    )

    message = parse_message(raw)

    assert message.in_reply_to == "b@example.com"
    assert message.references == ["a@example.com", "b@example.com", "c@example.com"]


def test_it_accepts_references_without_angle_brackets() -> None:
    message = parse_message(simple_message("In-Reply-To: a@example.com\nReferences: a@example.com b@x.org\n"))

    assert message.in_reply_to == "a@example.com"
    assert message.references == ["a@example.com", "b@x.org"]


# -- bodies ----------------------------------------------------------------------------------------------


def test_it_decodes_bodies_whose_declared_charset_is_wrong_and_joins_inline_text_parts() -> None:
    message = parse_fixture("wrong_charsets.eml")

    # Part 1 says utf-8 but is cp1252; part 2 says iso-8859-1 but is UTF-8.
    assert message.text_body == "Café crème \u2013 déjà vu\n\nnaïve résumé"


def test_it_falls_back_to_utf8_for_an_unknown_charset() -> None:
    message = parse_fixture("unknown_charset.eml")

    assert message.subject == "Prüfung bestanden"
    assert message.text_body == "Prüfung bestanden ✓"


def test_it_falls_back_to_cp1252_for_an_unknown_charset_that_is_not_utf8() -> None:
    raw = b'Subject: x\nContent-Type: text/plain; charset="unknown-8bit"\n\nStra\xdfe \x80 5\n'

    assert parse_message(raw).text_body == "Straße € 5"


def test_it_decodes_7bit_stateful_charsets() -> None:
    body = "こんにちは".encode("iso-2022-jp")
    raw = b"Subject: x\nContent-Type: text/plain; charset=ISO-2022-JP\n\n" + body

    assert parse_message(raw).text_body == "こんにちは"


def test_it_prefers_the_plain_text_alternative_and_keeps_the_html() -> None:
    message = parse_fixture("alternative.eml")  # CRLF line endings, quoted-printable

    assert message.sender == Address(name="Support, Oaken", address="support@oaken.example")
    assert message.text_body == "Hi there,\n\nYou have 3 new messages — see https://oaken.example/inbox for details."
    assert message.html_body == (
        '<html><body><p>Hi there,</p><p>You have <b>3</b> new messages — <a href="https://oaken.example/inbox">'
        "see them</a>.</p></body></html>"
    )
    assert message.snippet == "Hi there, You have 3 new messages — see https://oaken.example/inbox for details."
    assert message.attachments == []


def test_it_renders_html_only_mail_as_readable_text() -> None:
    message = parse_fixture("html_only.eml")

    assert message.subject == "Spring sale \u2013 30% off"
    assert message.text_body == (
        "Spring sale\n"
        "\n"
        "Save 30% on everything & more — until Friday.\n"
        "Terms apply.\n"
        "\n"
        "Visit our shop (https://shop.example/sale?ref=mail&x=1) or https://shop.example. "
        "Write to help@shop.example.\n"
        "\n"
        "Shop logo\n"
        "- Tulips\n"
        "- Roses\n"
        "  - Red\n"
        "  - White\n"
        "Item | Price\n"
        "Tulips | €5\n"
        "\n"
        "  code   block\n"
        "    indented\n"
        "\n"
        "It\u2019s <great> \u2013 café"
    )
    assert message.html_body.startswith("<!DOCTYPE html>\n<html>\n<head>\n<title>Spring sale</title>")
    assert "tracking" not in message.text_body


def test_it_uses_the_html_when_the_plain_alternative_is_empty() -> None:
    raw = (
        b'Subject: x\nContent-Type: multipart/alternative; boundary="b"\n\n'
        b"--b\nContent-Type: text/plain\n\n \n"
        b"--b\nContent-Type: text/html\n\n<p>Only <i>here</i></p>\n"
        b"--b--\n"
    )

    message = parse_message(raw)

    assert message.text_body == "Only here"
    assert message.html_body == "<p>Only <i>here</i></p>"


def test_it_walks_mixed_alternative_related_with_an_inline_image() -> None:
    message = parse_fixture("nested_related.eml")

    assert message.text_body == "Here are the mockups.\n[logo]"
    assert message.html_body == '<p>Here are the mockups.</p><img src="cid:logo@studio" alt="logo">'
    assert [(a.filename, a.content_type, a.content, a.size, a.inline) for a in message.attachments] == [
        ("logo.png", "image/png", b"\x89PNG\r\n\x1a\n", 8, True),
        ("mockups.pdf", "application/pdf", b"%PDF-1.4\n", 9, False),
    ]


def test_it_turns_a_forwarded_message_into_an_eml_attachment_with_a_summary() -> None:
    raw = (FIXTURES / "forwarded.eml").read_bytes()

    message = parse_message(raw)

    assert message.text_body == "See the message below."
    [forwarded] = message.attachments
    assert forwarded.filename == "Quarterly numbers.eml"
    assert forwarded.content_type == "message/rfc822"
    assert forwarded.inline is False
    assert forwarded.extracted_text == (
        "From: Carla Gómez <carla@example.org>\n"
        "Date: Mon, 10 Feb 2025 17:45:00 +0100\n"
        "Subject: Quarterly numbers\n"
        "\n"
        "Revenue is up 12%."
    )
    inner_start = raw.index(b"From: =?utf-8?Q?Carla")
    assert forwarded.content == raw[inner_start : raw.index(b"\n--outer--")]
    assert forwarded.size == len(forwarded.content)
    assert parse_message(forwarded.content).message_id == "inner@example.org"


def test_it_reads_a_forwarded_message_that_was_wrongly_base64_encoded() -> None:
    inner = b"From: c@example.org\nSubject: Inner\n\nInner body.\n"
    raw = (
        b'Subject: outer\nContent-Type: multipart/mixed; boundary="b"\n\n'
        b"--b\nContent-Type: text/plain\n\nOuter body.\n"
        b"--b\nContent-Type: message/rfc822\nContent-Transfer-Encoding: base64\n\n"
        + base64.encodebytes(inner)
        + b"--b--\n"
    )

    [forwarded] = parse_message(raw).attachments

    assert forwarded.content == inner
    assert forwarded.extracted_text == "From: c@example.org\nSubject: Inner\n\nInner body."


def test_it_extracts_attachments_with_text_for_text_like_types() -> None:
    message = parse_fixture("attachments.eml")

    assert message.text_body == "Report attached."
    assert [(a.filename, a.content_type, a.content, a.size, a.extracted_text) for a in message.attachments] == [
        ("data.bin", "application/octet-stream", bytes(range(16)) + b"\x00\xff", 18, ""),
        ("prices.csv", "text/csv", b"item;price\nK\xe4se;4,50\n", 21, "item;price\nKäse;4,50\n"),
        ("meta.json", "application/json", b'{"ok": true}', 12, '{"ok": true}'),
        ("report.pdf", "application/pdf", b"%PDF-1.4\n", 9, ""),
        ("attachment-5.png", "image/png", b"\x89PNG\r\n\x1a\n", 8, ""),
        ("passwd", "text/plain", b"root:x:0:0", 10, "root:x:0:0"),
    ]
    assert not any(a.inline for a in message.attachments)


def test_it_decodes_rfc2231_and_encoded_word_filenames() -> None:
    message = parse_fixture("rfc2231.eml")

    assert [a.filename for a in message.attachments] == [
        "€ Rechnung über März.pdf",  # RFC 2231 continuations, preferred over Content-Type name
        "Grüße.txt",  # RFC 2231 with a language
        "請求書.png",  # an encoded word inside a quoted name
        "日本.txt",
    ]
    assert message.attachments[1].extracted_text == "Hallo"


def test_it_never_produces_unsafe_attachment_filenames() -> None:
    raw = (
        b'Subject: x\nContent-Type: multipart/mixed; boundary="b"\n\n'
        b"--b\nContent-Type: text/plain\n\nbody\n"
        b"--b\nContent-Type: application/pdf\n"
        b'Content-Disposition: attachment; filename="a/b\\\\..\\\\c.pdf"\n\nx\n'
        b"--b\nContent-Type: application/pdf\n"
        b"Content-Disposition: attachment; filename*=utf-8''%00evil%0A.pdf\n\nx\n"
        b"--b\nContent-Type: application/zip\n"
        b'Content-Disposition: attachment; filename=".."\n\nx\n'
        b"--b--\n"
    )

    filenames = [a.filename for a in parse_message(raw).attachments]

    assert filenames == ["c.pdf", "evil.pdf", "attachment-3.zip"]


def test_a_root_part_that_is_not_text_is_an_attachment() -> None:
    raw = b"Subject: scan\nContent-Type: application/pdf\nContent-Transfer-Encoding: base64\n\nJVBERi0xLjQK\n"

    message = parse_message(raw)

    assert message.text_body == ""
    assert [(a.filename, a.content) for a in message.attachments] == [("attachment-1.pdf", b"%PDF-1.4\n")]


def test_a_named_root_text_part_is_still_the_body() -> None:
    raw = b'Subject: x\nContent-Type: text/plain; name="message.txt"\n\nThe body.\n'

    message = parse_message(raw)

    assert message.text_body == "The body."
    assert message.attachments == []


def test_it_strips_nul_characters_that_databases_reject() -> None:
    raw = b"Subject: a\x00b\nContent-Type: text/plain; charset=utf-8\n\nnul\x00here\n"

    message = parse_message(raw)

    assert (message.subject, message.text_body) == ("ab", "nulhere")


def test_the_snippet_is_the_first_200_collapsed_characters() -> None:
    body = "  Intro\n\n\n" + "word " * 30 + "\n\t" + "tail " * 30
    message = parse_message(simple_message(body=body))

    expected = " ".join(body.split())[:200]
    assert message.snippet == expected
    assert len(message.snippet) == 200
    assert message.size == len(simple_message(body=body))


# -- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty input"),
        (b" \r\n\t\n", "empty input"),
        (b"\x89PNG\r\n\x1a\nsecret-binary-content", "no header block"),
        (b"just some text: with a colon later\n\nbody", "no header block"),
        (b"\nSubject: starts with a blank line\n", "no header block"),
        (b"From sender Mon Feb  3 10:00:00 2025\n", "no header block"),
    ],
)
def test_it_rejects_input_that_is_not_a_message(raw: bytes, reason: str) -> None:
    with pytest.raises(MessageParseError) as caught:
        parse_message(raw)

    assert caught.value.reason == reason
    assert str(caught.value) == reason


def test_an_envelope_line_before_the_headers_is_accepted() -> None:
    message = parse_message(b"From sender Mon Feb  3 10:00:00 2025\nSubject: ok\n\nbody\n")

    assert (message.subject, message.text_body) == ("ok", "body")


def test_a_parser_failure_names_only_the_exception_type(monkeypatch: pytest.MonkeyPatch) -> None:
    class FailingParser:
        def parsebytes(self, raw: bytes) -> None:
            raise UnicodeDecodeError("utf-8", raw, 0, 1, "secret mail content")

    monkeypatch.setattr("apps.mail.parsing.message._PARSER", FailingParser())

    with pytest.raises(MessageParseError) as caught:
        parse_message(b"Subject: secret mail content\n\nsecret\n")

    assert caught.value.reason == "parser error: UnicodeDecodeError"
    assert "secret" not in str(caught.value)


# -- content hash ----------------------------------------------------------------------------------------

HASH_BASE = b"From: a@example.com\nSubject: Same\nMessage-ID: <same@example.com>\n\nBody line\nStatus: in body\n"


def test_the_content_hash_ignores_status_headers_line_endings_and_trailing_whitespace() -> None:
    variants = [
        HASH_BASE.replace(b"\n", b"\r\n"),
        HASH_BASE + b"\n\n  \n",
        HASH_BASE.replace(
            b"Subject: Same\n",
            b"Status: RO\nSubject: Same\nX-Status: A\nX-Mozilla-Status: 0001\nX-Mozilla-Status2: 00000000\n"
            b"X-UID: 42\nX-Keywords: $Label1\n  junk\nContent-Length: 1234\n",
        ),
        b"From MAILER-DAEMON Mon Feb  3 10:00:00 2025\n" + HASH_BASE,
    ]

    assert {content_hash(variant) for variant in variants} == {content_hash(HASH_BASE)}


def test_the_content_hash_changes_with_content() -> None:
    assert content_hash(HASH_BASE) != content_hash(HASH_BASE.replace(b"Body line", b"Body line!"))
    # Status lines are only ignored in the header block.
    assert content_hash(HASH_BASE) != content_hash(HASH_BASE.replace(b"Status: in body\n", b""))
    assert content_hash(HASH_BASE) != content_hash(HASH_BASE.replace(b"Subject: Same", b"Subject: Other"))


def test_parse_message_reports_the_content_hash() -> None:
    raw = HASH_BASE.replace(b"\n", b"\r\n")

    message = parse_message(raw)

    assert message.content_hash == content_hash(HASH_BASE)
    assert len(message.content_hash) == 64


# -- subjects --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "normalized"),
    [
        ("Hello world", "hello world"),
        ("Re: Hello world", "hello world"),
        ("RE: re: Fwd: FW: Hello   world", "hello world"),
        ("AW: WG: SV: VS: Antw: Ref: Hello", "hello"),
        ("Re[2]: Re (3): Re^4: Hello", "hello"),
        ("[oaken-dev] Re: [oaken-dev] Hello", "hello"),
        ("  Re :  Straße  ", "strasse"),
        ("回复\uff1a会议", "会议"),
        ("Return of the Jedi", "return of the jedi"),
        ("Re: [draft] plan", "plan"),
        ("", ""),
    ],
)
def test_normalize_subject_strips_reply_and_forward_prefixes(subject: str, normalized: str) -> None:
    assert normalize_subject(subject) == normalized


# -- html_to_text ----------------------------------------------------------------------------------------


def test_html_to_text_keeps_link_targets_unless_they_repeat_the_label() -> None:
    html = (
        '<a href="https://a.example/x">Read more</a> | <a href="https://b.example/">b.example</a> | '
        '<a href="mailto:me@example.com">me@example.com</a> | '
        '<a href="https://c.example/img"><img alt="Logo"></a> | '
        '<a href="https://d.example/empty"></a> | <a href="#top">Top</a>'
    )

    assert html_to_text(html) == (
        "Read more (https://a.example/x) | b.example | me@example.com | Logo (https://c.example/img) | "
        "https://d.example/empty | Top"
    )


def test_html_to_text_drops_scripts_styles_and_the_head() -> None:
    html = (
        "<html><head><title>Title</title><style>.x{}</style></head>"
        "<body><style>.y{}</style><p>Shown</p><script>hidden()</script><template>t</template></body></html>"
    )

    assert html_to_text(html) == "Shown"


def test_html_to_text_keeps_body_content_when_the_head_is_never_closed() -> None:
    assert html_to_text("<head><title>T</title><meta charset=utf-8><p>Body") == "Body"


def test_html_to_text_unescapes_entities_and_collapses_blank_lines() -> None:
    html = "<p>&lt;a&gt; &amp; &quot;b&quot; &#169; &#x1F600; &unknown;</p><br><br><br><br><p></p><p>end</p>"

    assert html_to_text(html) == '<a> & "b" © 😀 &unknown;\n\nend'


def test_html_to_text_separates_table_cells_and_rows() -> None:
    html = "<table><tr><th>A</th><th>B</th><th></th></tr><tr><td>1</td><td> 2 </td><td>3</td></tr></table>"

    assert html_to_text(html) == "A | B\n1 | 2 | 3"


def test_html_to_text_preserves_pre_blocks() -> None:
    assert html_to_text("<p>x</p><pre>\n a  b\n\tc</pre>y") == "x\n\n a  b\n\tc\n\ny"


def test_html_to_text_survives_malformed_markup() -> None:
    html = "<p>a<![bogus[ z ]]>b</p><!--[if mso]>hidden<![endif]--><a href='u'>open link<p>c</p"

    # The unclosed link runs to the end, as in a browser.
    assert html_to_text(html) == "ab\n\nopen link\n\nc</p (u)"
