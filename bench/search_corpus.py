"""A labelled mail set for measuring search quality: several hundred realistic messages and three query sets.

One person's mailbox (Claire Martin, a product analyst at Northwind Analytics in Lyon) with work, family,
suppliers and neighbours, in English with some French, German and Spanish. Built from a seed, so every run
and every reader (bench/search_quality.py, bench/embedding_models.py, tests) sees the same mail.

Query sets, each query labelled with the message(s) that answer it:
- paraphrased: what a person would type when they remember the meaning, not the words. The target shares no
  word with the query (lower-cased, accents folded, stop words ignored, and no shared word stem either, so
  "bill"/"billing" count as the same word); checked when the set is built.
- identifier: exact codes (invoice and order numbers, tracking codes, tickets, commits); each occurs in exactly
  one message, a few only inside an attached text file, and near misses (INV-20392 for INV-20391) sit in look-
  alike messages from the same sender, so meaning alone cannot tell them apart.
- distractor: everyday two-word queries whose words also occur, in another sense, in other messages (a river
  bank, a football transfer), usually more prominently than in the message meant; keyword alone ranks those
  high.
Some messages are long (the sentence that matters sits in the middle), some end with a signature and a legal
footer, some quote an earlier message. A short reply that only quotes a target ("Thanks, noted.") is neither
right nor wrong for that target's query (`Query.neutral`, left out before scoring): with its quote stripped,
only its "Re:" subject still speaks for it, and without stripping it would read exactly like the target.

Pure Python with no Django import, so a bench and a test can both use it; `write_mbox` writes the set for
apps.mail.importing.import_mail and `Mail.message_id` maps a label to the stored `Message.message_id`.
"""

# ruff: noqa: RUF001 (mail is written with en dashes and multiplication signs, as people and shops write it)

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from functools import cache
from pathlib import Path

SEED = 15
TARGET_SIZE = 600
OWNER = ("Claire Martin", "claire.martin@northwind.test")
_BASE_DATE = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
DOMAIN = "corpus.oaken.test"


@dataclass(frozen=True)
class Attachment:
    filename: str
    text: str


@dataclass(frozen=True)
class Mail:
    key: str
    subject: str
    sender_name: str
    sender_address: str
    date: datetime
    body: str
    lang: str = "en"
    attachment: Attachment | None = None
    in_reply_to: str | None = None  # key of the message quoted

    @property
    def message_id(self) -> str:
        """The Message-ID without angle brackets, as Message.message_id stores it."""
        return f"{self.key}@{DOMAIN}"

    def full_text(self) -> str:
        """Every word a keyword index could see: headers people search by, body, attachment."""
        parts = [self.subject, self.sender_name, self.sender_address, self.body]
        if self.attachment is not None:
            parts += [self.attachment.filename, self.attachment.text]
        return "\n".join(parts)


@dataclass(frozen=True)
class Query:
    text: str
    relevant: frozenset[str]  # keys of the messages that answer it
    kind: str
    # replies that only quote a target ("Thanks, noted."): ranking one of them neither counts nor costs
    neutral: frozenset[str] = frozenset()

    def judged(self, ranked: Sequence[str]) -> list[str]:
        """The ranking with the neutral messages left out, as the metrics see it."""
        return [key for key in ranked if key not in self.neutral]


@dataclass(frozen=True)
class Corpus:
    mails: tuple[Mail, ...]
    queries: dict[str, tuple[Query, ...]]
    by_key: dict[str, Mail] = field(repr=False)


# ---------------------------------------------------------------------------------------------------------
# Words: the check behind "shares no word", and the quote and signature stripping used by the embedding bench

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers him his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours out over own same she should so some such than that the their them
    then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself get got s t""".split()
)


def fold(text: str) -> str:
    """Lower case with accents removed (what `unaccent` and `lower` do to a word)."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).replace("ß", "ss")


def words(text: str) -> set[str]:
    """The folded alphanumeric words of a text."""
    return set(re.findall(r"[a-z0-9]+", fold(text)))


def content_words(text: str) -> set[str]:
    """Words less stop words."""
    return words(text) - STOP_WORDS


def _same_word(a: str, b: str) -> bool:
    """Equal, a plural, or the same stem by a shared prefix of five letters (four for a four-letter word)."""
    if a == b or a + "s" == b or b + "s" == a or a + "es" == b or b + "es" == a:
        return True
    shortest = min(len(a), len(b))
    if shortest < 4:
        return False
    need = min(5, shortest)
    return a[:need] == b[:need]


def shared_words(query: str, text: str) -> set[str]:
    """The query's content words that the text also has (by `_same_word`)."""
    have = words(text)
    return {q for q in content_words(query) if any(_same_word(q, w) for w in have)}


_QUOTE_HEADER = re.compile(
    r"^(On .+ wrote:|Le .+ a écrit :|Am .+ schrieb .+:|El .+ escribió:|-----Original Message-----)\s*$"
)


def strip_quotes_and_signature(body: str) -> str:
    """The message's own text: quoted replies (and their attribution line) and the signature cut away."""
    kept: list[str] = []
    for line in body.split("\n"):
        if line == "-- ":
            break  # the signature delimiter; everything after it (title, footer) is the signature
        if line.startswith(">") or _QUOTE_HEADER.match(line):
            continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def searchable_text(mail: Mail) -> str:
    """Subject, own body text and any attached text: what an embedding of the message is made from."""
    parts = [mail.subject, strip_quotes_and_signature(mail.body)]
    if mail.attachment is not None:
        parts.append(mail.attachment.text)
    return "\n\n".join(p for p in parts if p)


def chunks(text: str, max_words: int = 120) -> list[str]:
    """Paragraph-aligned pieces of at most about `max_words` words (a long paragraph is cut by words)."""
    pieces: list[str] = []
    current: list[str] = []
    for paragraph in (p.strip() for p in text.split("\n\n")):
        if not paragraph:
            continue
        tokens = paragraph.split()
        while len(tokens) > max_words:
            if current:
                pieces.append(" ".join(current))
                current = []
            pieces.append(" ".join(tokens[:max_words]))
            tokens = tokens[max_words:]
        if len(current) + len(tokens) > max_words and current:
            pieces.append(" ".join(current))
            current = []
        current += tokens
    if current:
        pieces.append(" ".join(current))
    return pieces or [text]


# ---------------------------------------------------------------------------------------------------------
# Metrics shared by the benches


def recall_at(ranked: Sequence[str], relevant: Iterable[str], k: int = 5) -> float:
    """Share of the relevant messages found in the first k."""
    wanted = set(relevant)
    return len(wanted & set(ranked[:k])) / len(wanted)


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    """1/rank of the first relevant message, 0 when none is ranked."""
    wanted = set(relevant)
    for rank, key in enumerate(ranked, start=1):
        if key in wanted:
            return 1.0 / rank
    return 0.0


# ---------------------------------------------------------------------------------------------------------
# People, wrappers, padding


_COLLEAGUES = [
    ("Marc Lefèvre", "marc.lefevre@northwind.test", "Engineering Manager"),
    ("Jonas Becker", "jonas.becker@northwind.test", "Frontend Engineer"),
    ("Priyanka Rao", "priyanka.rao@northwind.test", "Data Engineer"),
    ("Sofia Navarro", "sofia.navarro@northwind.test", "Head of Finance"),
    ("Tom Whitaker", "tom.whitaker@northwind.test", "Account Executive"),
    ("Elena Rossi", "elena.rossi@northwind.test", "Designer"),
    ("Yusuf Demir", "yusuf.demir@northwind.test", "Site Reliability Engineer"),
    ("Hannah Kim", "hannah.kim@northwind.test", "People Partner"),
    ("Louis Garnier", "louis.garnier@northwind.test", "Product Lead"),
    ("Aoife Byrne", "aoife.byrne@northwind.test", "Customer Success"),
]
_FRIENDS = [
    ("Julie Martin", "julie.martin@mailbox.test", "fr"),
    ("Camille Roux", "camille.roux@mailbox.test", "fr"),
    ("Lucía Fernández", "lucia.fernandez@correo.test", "es"),
    ("Javier Ortega", "javier.ortega@correo.test", "es"),
    ("Stefan Müller", "stefan.mueller@post.test", "de"),
    ("Katrin Vogel", "katrin.vogel@post.test", "de"),
    ("Ben Carter", "ben.carter@inbox.test", "en"),
    ("Nora Ahmed", "nora.ahmed@inbox.test", "en"),
]
_FOOTER = (
    "This e-mail and any attachments are confidential and intended solely for the addressee. If you have "
    "received it by mistake, please tell the sender and delete it. Northwind Analytics SAS, 12 quai Perrache, "
    "69002 Lyon."
)
_SIGN_OFFS = {
    "en": ["Best,", "Thanks,", "Cheers,", "Kind regards,"],
    "fr": ["Bises,", "Bonne journée,", "À+"],
    "de": ["Viele Grüße,", "LG,"],
    "es": ["Un abrazo,", "Besos,", "Saludos,"],
}
_GREETINGS = {
    "en": ["Hi Claire,", "Hello Claire,", "Claire,", "Hey Claire,"],
    "fr": ["Salut Claire,", "Coucou,"],
    "de": ["Hallo Claire,", "Liebe Claire,"],
    "es": ["Hola Claire:", "¡Hola Claire!"],
}

# Neutral paragraphs that make a message long without being about anything a query asks for.
_PADDING = [
    "Quick update from my side: the design system migration is mostly done. We moved the last form "
    "components over on Tuesday and the storybook builds are green again, thanks to Jonas staying late.",
    "The kitchen on the third floor finally has the espresso machine everyone voted for. It takes a minute to "
    "warm up, so be patient with it first thing.",
    "I finished the novel you lent me over the weekend; the ending surprised me. I'll bring it back soon, "
    "along with the jar of apricot jam my mother insists you try.",
    "If the weather holds we might do the walk up the Mont Pilat ridge again in October. The trail was lovely "
    "last time and the café at the top has reopened.",
    "On the analytics side, dashboard load times fell from around four seconds to under one since we added "
    "the materialised views. Two customers mentioned it unprompted.",
    "Nothing urgent otherwise. The all-hands slides are in the shared drive if you could not make it, and the "
    "recording should follow once Louis has trimmed the first ten minutes.",
    "Marco says hello, by the way. He is back from his sabbatical, has grown a beard and talks about sourdough "
    "with the zeal of the newly converted.",
    "The plants in the corner by the windows look much better since someone started watering them. Mystery "
    "gardener, thank you.",
    "I have also been reading about column stores for the reporting backend; there is a good long write-up "
    "comparing them that I will forward when I find the link again.",
    "My sister's choir has a concert at the Saint-Bruno church in a few weeks, should you fancy an evening of "
    "Fauré. Tickets are cheap and the acoustics are wonderful.",
]
_QUOTED_NEUTRAL = [
    "Hi, any news on the points we discussed the other day? No rush, just checking before I lose track.\nClaire",
    "Hello! Did you manage to look at my note from last time? Let me know if anything is unclear.\nClaire",
    "Coucou, tu as pu regarder ce dont on a parlé ? Pas d'urgence.\nClaire",
]


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.split("\n"))


def _attribution(lang: str, when: datetime, who: str) -> str:
    day = when.strftime("%d/%m/%Y")
    return {
        "fr": f"Le {day} à {when:%H:%M}, {who} a écrit :",
        "de": f"Am {day} um {when:%H:%M} schrieb {who}:",
        "es": f"El {day} a las {when:%H:%M}, {who} escribió:",
    }.get(lang, f"On {when:%a, %d %b %Y} at {when:%H:%M}, {who} wrote:")


class _Builder:
    """Collects messages with fresh keys and dates spread over the first half of 2026."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.mails: list[Mail] = []
        self.count = 0

    def date(self) -> datetime:
        """A day in the first half of the year, in waking hours (UTC, Lyon is an hour or two ahead)."""
        day = self.rng.randrange(0, 170)
        return _BASE_DATE + timedelta(days=day, minutes=self.rng.randrange(0, 13 * 60))

    def wrap(
        self,
        core: str,
        *,
        lang: str,
        name: str,
        greet: bool = True,
        long: bool = False,
        title: str | None = None,
        footer: bool = False,
        quoted: str | None = None,
        quoted_from: str = "Claire Martin",
        when: datetime | None = None,
        padding: Sequence[str] = (),
    ) -> str:
        """A body around `core`: greeting, padding on both sides when long, sign-off, signature, quote."""
        rng = self.rng
        paragraphs: list[str] = []
        if greet:
            paragraphs.append(rng.choice(_GREETINGS.get(lang, _GREETINGS["en"])))
        if long:
            pool = list(padding or _PADDING)
            rng.shuffle(pool)
            before, after = rng.randint(1, 2), rng.randint(1, 2)
            paragraphs += [*pool[:before], core, *pool[before : before + after]]
        else:
            paragraphs.append(core)
        if greet:
            first = name.split()[0]
            paragraphs.append(rng.choice(_SIGN_OFFS.get(lang, _SIGN_OFFS["en"])) + "\n" + first)
        else:
            paragraphs.append(name)  # a company or a system signs with its name
        body = "\n\n".join(paragraphs) + "\n"
        if title is not None:
            body += f"\n-- \n{name}\n{title}\nNorthwind Analytics\n"
            if footer:
                body += "\n" + _FOOTER + "\n"
        if quoted is not None:
            earlier = (when or _BASE_DATE) - timedelta(hours=rng.randint(2, 60))
            body += "\n" + _attribution(lang, earlier, quoted_from) + "\n" + _quote(quoted) + "\n"
        return body

    def add(self, prefix: str, **fields: object) -> Mail:
        self.count += 1
        key = f"{prefix}-{self.count:04d}"
        fields.setdefault("date", self.date())
        mail = Mail(key=key, **fields)  # type: ignore[arg-type]
        self.mails.append(mail)
        return mail


# ---------------------------------------------------------------------------------------------------------
# Paraphrased queries: (query, subject, sender name, sender address, language, core text, options)
# options: long (padding around the core), sig (a title for a signature block), footer, reply (quotes an
# earlier neutral note), ack (the owner answers with a one-line reply quoting it: a look-alike, not relevant)

_PARAPHRASED: list[tuple[str, str, str, str, str, str, dict[str, object]]] = [
    (
        "power bill",
        "Your electricity statement for February",
        "EDF Énergie",
        "facturation@edf-energie.test",
        "en",
        "Your statement for the period 1–28 February is ready. Amount due: €84.20, which will be debited from "
        "your account on 12 March. Consumption this period: 312 kWh, 6% lower than the same period last year.",
        {"greet": False, "ack": True},
    ),
    (
        "salary raise",
        "Compensation review outcome",
        "Hannah Kim",
        "hannah.kim@northwind.test",
        "en",
        "Following this year's review cycle I am happy to confirm that your pay goes up by 4.5% from 1 April. "
        "The new gross amount will show on your April payslip; the letter with the details is in your HR portal.",
        {"sig": "People Partner", "footer": True},
    ),
    (
        "laptop broken",
        "My notebook died",
        "Jonas Becker",
        "jonas.becker@northwind.test",
        "en",
        "My work computer fell off the desk this morning: the screen is cracked across the middle and it will not "
        "boot past the logo. Could IT lend me a spare machine until it is fixed? I have the demo on Thursday.",
        {"long": True},
    ),
    (
        "dentist appointment",
        "Reminder: check-up on Tuesday 3 March, 15:30",
        "Cabinet Dr Moreau",
        "rdv@cabinet-moreau.test",
        "en",
        "This is a reminder of your teeth cleaning and annual check-up with Dr Moreau on Tuesday 3 March at "
        "15:30. Please arrive ten minutes early and bring your carte Vitale. To move the slot, call 04 78 00 11 22.",
        {"greet": False},
    ),
    (
        "car repair quote",
        "Estimate for your Clio",
        "Garage Lumière",
        "atelier@garage-lumiere.test",
        "en",
        "Following the inspection, fixing the vehicle needs new front brake pads and discs, plus a wiper blade. "
        "Parts and labour come to €420 including VAT; we can do the work on Friday if you confirm by Wednesday.",
        {"greet": True},
    ),
    (
        "moving house",
        "We're relocating!",
        "Ben Carter",
        "ben.carter@inbox.test",
        "en",
        "Big news: at the end of June we are leaving Croix-Rousse for a bigger flat in Villeurbanne, near the "
        "Gratte-Ciel metro. From 1 July the postal details are 8 rue Anatole France, 69100 Villeurbanne. Come and "
        "help us carry boxes and I will feed you pizza.",
        {"long": True},
    ),
    (
        "job offer",
        "Senior Data Engineer position — next steps",
        "Greta Lindqvist",
        "talent@fjordbyte.test",
        "en",
        "Thank you for the interviews last week. We would love you to join FjordByte as Senior Data Engineer, "
        "starting in May, on a permanent contract with a gross annual package of €78,000 plus equity. The signed "
        "paperwork is attached for your review; please let us know by Friday 20 March.",
        {"sig": "Talent Partner"},
    ),
    (
        "lost my passport",
        "Help — travel document missing",
        "Nora Ahmed",
        "nora.ahmed@inbox.test",
        "en",
        "I cannot find my travel ID anywhere since we checked out of the hotel in Porto. I have called the front "
        "desk twice. The consulate says they can issue an emergency replacement if I bring photos and a police "
        "report, so I am going tomorrow morning. Do you still have the copy I scanned last spring?",
        {},
    ),
    (
        "wedding invitation",
        "Anna & Tom are getting married!",
        "Anna Kowalski",
        "anna.kowalski@inbox.test",
        "en",
        "We are tying the knot! Please join us for the ceremony on Saturday 5 September at 15:00 at the Château "
        "de Montmelas, followed by dinner and dancing. RSVP by 15 June, and tell us about any dietary needs.",
        {"greet": False},
    ),
    (
        "password reset",
        "Request to change your sign-in credentials",
        "Northwind Accounts",
        "no-reply@accounts.northwind.test",
        "en",
        "Someone asked to change the secret you use to log in to your Northwind account. If it was you, follow "
        "this link within 30 minutes to choose a fresh one. If it was not you, ignore this message; nothing changes.",
        {"greet": False},
    ),
    (
        "sick leave",
        "Out with the flu",
        "Priyanka Rao",
        "priyanka.rao@northwind.test",
        "en",
        "I woke up with a fever of 39 and the doctor says it is the flu, so I will stay home until Thursday at the "
        "earliest. I will send the medical certificate to HR. Yusuf can cover the pipeline alerts meanwhile.",
        {"sig": "Data Engineer"},
    ),
    (
        "refund for broken headphones",
        "We're sorry your earbuds arrived damaged",
        "SoundHaus Support",
        "support@soundhaus.test",
        "en",
        "Thanks for the photos of the cracked charging case. We have credited €59.99 back to the card you paid "
        "with; it can take 3–5 working days to appear. There is no need to send the earbuds back.",
        {"greet": True},
    ),
    (
        "team dinner friday",
        "Thai place after work on the 13th?",
        "Elena Rossi",
        "elena.rossi@northwind.test",
        "en",
        "Shall we all go out to eat at Little Bangkok once the sprint demo is done on the 13th? I can book a long "
        "table for 8 at 19:30. Reply with any allergies and whether you are in.",
        {},
    ),
    (
        "rent increase",
        "Letter from the landlord about the apartment",
        "Régie Bellecour",
        "gestion@regie-bellecour.test",
        "en",
        "In line with the reference index published by INSEE, the monthly amount payable for the apartment at "
        "14 rue Sala goes up by €45 from 1 July. Service charges are unchanged. The revised schedule is attached.",
        {
            "greet": False,
            "attachment": Attachment(
                "schedule-2026.txt", "Monthly amount from 1 July 2026: €1,185 (was €1,140). Charges: €95 (unchanged)."
            ),
        },
    ),
    (
        "server down",
        "Incident report: production outage this morning",
        "Yusuf Demir",
        "yusuf.demir@northwind.test",
        "en",
        "At 03:12 the main production machine stopped responding and the web app returned 502 errors for 41 "
        "minutes. The cause was a full disk on the database host; we have added an alert at 80% usage and will "
        "write up the timeline in the post-mortem on Monday.",
        {"sig": "Site Reliability Engineer", "long": True},
    ),
    (
        "vacation photos",
        "Pictures from Crete",
        "Julie Martin",
        "julie.martin@mailbox.test",
        "en",
        "Here is the album from our holiday in Crete: the beach at Elafonisi, the gorge hike and the little taverna "
        "where Léo ate three portions of loukoumades. Link is valid for 30 days.",
        {},
    ),
    (
        "tax return deadline",
        "Reminder: Self Assessment due 31 January",
        "HMRC Notifications",
        "notifications@hmrc-online.test",
        "en",
        "Your Self Assessment for the year to 5 April 2025 must be filed online by 31 January 2026, and any amount "
        "owed paid by the same date, to avoid a £100 penalty. Sign in to your online account to start.",
        {"greet": False},
    ),
    (
        "baby born",
        "She's here!",
        "Camille Roux",
        "camille.roux@mailbox.test",
        "en",
        "Our daughter Léa arrived on Sunday morning at 6:40, 3.2 kg of pure noise. Mother and child are doing "
        "well and we are all very tired and very happy. Visits from next week, once we have slept a little.",
        {},
    ),
    (
        "internet not working",
        "Broadband keeps dropping",
        "Stefan Müller",
        "stefan.mueller@post.test",
        "en",
        "Since the storm on Tuesday our fibre connection cuts out every hour or so and the box shows a red light. "
        "The operator says a technician can come on the 24th. Until then I am on my phone's hotspot, so calls may "
        "be choppy.",
        {"long": True},
    ),
    (
        "meeting moved to next week",
        "Can we push our sync?",
        "Louis Garnier",
        "louis.garnier@northwind.test",
        "en",
        "Something came up with a customer on Thursday, so could we shift our one-to-one to Tuesday the 18th, same "
        "time? Sorry for the short notice.",
        {"reply": True},
    ),
    (
        "contract renewal",
        "Your agreement expires on 30 April",
        "CloudCore Sales",
        "accounts@cloudcore.test",
        "en",
        "Your current agreement for the CloudCore data platform ends on 30 April. To continue without interruption, "
        "sign the attached extension for a further 12 months at the same per-seat price.",
        {"sig": "Account Manager", "footer": False},
    ),
    (
        "conference talk accepted",
        "PyCon Italia: your proposal was selected",
        "PyCon Italia Programme Committee",
        "cfp@pycon-italia.test",
        "en",
        "Congratulations! The programme committee selected your proposal 'Counting things correctly at scale' "
        "for a 30-minute slot in Florence. Please confirm your attendance and book travel by 1 April.",
        {"greet": False},
    ),
    (
        "package delivered to wrong address",
        "Parcel left at my neighbour's",
        "Claire's upstairs neighbour",
        "paul.dumas@mailbox.test",
        "en",
        "The courier left a parcel with your name on it at our door, number 14 instead of 12. It looks like the "
        "shoes you ordered. I am home after six if you want to pick it up.",
        {},
    ),
    (
        "car insurance",
        "Your motor policy is due",
        "Assurances Rhône",
        "contrats@assurances-rhone.test",
        "en",
        "The annual premium for your motor policy on the vehicle registered AB-123-CD is €612 from 1 May. Your "
        "no-claims bonus of 50% is kept. Nothing to do if you wish to continue; the direct debit stays in place.",
        {"greet": False},
    ),
    (
        "doctor lab results",
        "Your blood work",
        "Dr Sabine Arnaud",
        "secretariat@medecins-lyon.test",
        "en",
        "Your blood panel came back normal apart from a slightly high cholesterol (LDL 1.7 g/L). Nothing alarming; "
        "let us talk about diet at your next visit in June.",
        {},
    ),
    (
        "gym membership cancel",
        "End my FitZone subscription",
        "Claire Martin",
        "claire.martin@northwind.test",
        "en",
        "I would like to stop my FitZone subscription as of the end of this month; I am relocating my workouts to "
        "the climbing hall. Please confirm the final direct debit date.",
        {"greet": False},
    ),
    (
        "printer out of toner",
        "Copier on the 2nd floor",
        "Aoife Byrne",
        "aoife.byrne@northwind.test",
        "en",
        "The copier next to the stairs is giving faded pages with grey stripes. I think it needs a fresh cartridge; "
        "is there a spare in the supply cupboard, or should I order one?",
        {},
    ),
    (
        "kid's school trip",
        "Year 4 excursion to the science museum",
        "Mrs Thompson",
        "office@stjames-primary.test",
        "en",
        "Year 4 will visit the science museum on Friday 8 May. The coach leaves at 8:45 and returns by 15:30. "
        "Please return the signed permission slip and €12 by 30 April. Children need a packed lunch.",
        {"greet": False},
    ),
    (
        "new hire onboarding",
        "Please welcome Priya to design",
        "Hannah Kim",
        "hannah.kim@northwind.test",
        "en",
        "Priya Shah joins the design group on Monday. Her first-day schedule: laptop pickup with IT at 9:00, HR "
        "paperwork at 10:00, lunch with the squad. Elena will be her buddy for the first month.",
        {"sig": "People Partner"},
    ),
    (
        "water leak in the bathroom",
        "Puddle under the sink",
        "Katrin Vogel",
        "katrin.vogel@post.test",
        "en",
        "Bad news from the flat: there is a puddle under the washbasin and the ceiling of the flat below is "
        "dripping. A plumber is coming tomorrow at eight; could you ask the syndic whether their cover pays?",
        {},
    ),
    (
        "budget approved",
        "Finance signed off on the Q3 spend",
        "Sofia Navarro",
        "sofia.navarro@northwind.test",
        "en",
        "Good news: the committee agreed the €120k for the data platform work in Q3, including the two contractor "
        "months. Please keep the purchase orders under the agreed cap.",
        {"sig": "Head of Finance", "footer": True, "long": True},
    ),
    (
        "birthday party",
        "Sam turns 40!",
        "Nora Ahmed",
        "nora.ahmed@inbox.test",
        "en",
        "We are celebrating Sam turning 40 on Saturday — drinks and cake at ours from 7pm. Keep it a surprise, he "
        "thinks we are going to the cinema.",
        {},
    ),
    (
        "bike stolen",
        "Someone took my bicycle",
        "Ben Carter",
        "ben.carter@inbox.test",
        "en",
        "My bicycle disappeared from the rack outside Part-Dieu station last night, lock cut clean. I filed a "
        "police report this morning. If you see a green Peugeot with a wicker basket on Leboncoin, tell me!",
        {},
    ),
    (
        "visa application",
        "Entry permit request received",
        "Embassy of Japan — Consular Section",
        "consular@embjapan-fr.test",
        "en",
        "We have received your request for a short-term entry permit for Japan, reference pending. Processing "
        "takes about five working days. Your passport-sized photo was accepted.",
        {"greet": False},
    ),
    (
        "quarterly sales figures",
        "Q2 revenue summary",
        "Tom Whitaker",
        "tom.whitaker@northwind.test",
        "en",
        "Q2 revenue came in at €4.1M, 12% above plan, with EMEA strongest and the Nordics behind. New logos: 14. "
        "Churn held at 1.8%. The full deck is on the drive.",
        {"sig": "Account Executive", "long": True},
    ),
    (
        "flight delay compensation",
        "Your EU261 claim",
        "AirClaim Help",
        "help@airclaim.test",
        "en",
        "Good news: under EU Regulation 261 you are entitled to €400 because your plane from Lisbon landed 4 hours "
        "and 20 minutes late. The airline has agreed to pay within 14 days.",
        {"greet": False},
    ),
    (
        "annual performance review",
        "Your yearly appraisal",
        "Marc Lefèvre",
        "marc.lefevre@northwind.test",
        "en",
        "Let us sit down for your yearly appraisal on the 27th. Please fill in the self-assessment form beforehand "
        "— what went well, what you would like to grow into, and the goals for next year.",
        {"sig": "Engineering Manager"},
    ),
    (
        "wifi password for the office",
        "Guest wireless at HQ",
        "IT Helpdesk",
        "helpdesk@northwind.test",
        "en",
        "The wireless network for visitors at headquarters is 'Northwind-Guest' and the key is "
        "tulip-harbour-42. It changes on the first of every month.",
        {"greet": False},
    ),
    (
        "noisy neighbours complaint",
        "People upstairs at 2am",
        "Julie Martin",
        "julie.martin@mailbox.test",
        "en",
        "The people upstairs play loud music until 2am every night this week and do not answer the door. Is it "
        "the building manager I should write to, or the police?",
        {},
    ),
    (
        "resignation letter",
        "Stepping down",
        "Louis Garnier",
        "louis.garnier@northwind.test",
        "en",
        "After six years I have decided to step down from my role; my final day will be 30 June. I will make sure "
        "the handover is complete. It has been a privilege to build this with you all.",
        {"sig": "Product Lead", "long": True},
    ),
    # The same meaning in another language than the query: a person types English for French, German or
    # Spanish mail they half remember.
    (
        "heating broken",
        "Panne du chauffage collectif",
        "Syndic Les Tilleuls",
        "syndic@lestilleuls.test",
        "fr",
        "Madame, Monsieur, la chaudière de la résidence est en panne depuis ce matin. Un technicien interviendra "
        "demain entre 8h et 12h. Nous vous prions de nous excuser pour la gêne occasionnée.",
        {"greet": False},
    ),
    (
        "standing desk shipped",
        "Ihr höhenverstellbarer Schreibtisch ist unterwegs",
        "Büromöbel Schneider",
        "versand@bueromoebel-schneider.test",
        "de",
        "Guten Tag Frau Martin, Ihr höhenverstellbarer Schreibtisch (Eiche, 160 x 80 cm) wurde heute an die "
        "Spedition übergeben und wird voraussichtlich am Donnerstag zugestellt.",
        {"greet": False},
    ),
    (
        "apartment viewing",
        "¿Visitamos el piso el jueves?",
        "Lucía Fernández",
        "lucia.fernandez@correo.test",
        "es",
        "El agente me dice que podemos ver el piso de la calle Alcalá el jueves a las 18h. Tiene dos habitaciones, "
        "balcón y mucha luz. ¿Te viene bien o lo cambio?",
        {},
    ),
    (
        "grandma in hospital",
        "Mamie est à l'hôpital",
        "Julie Martin",
        "julie.martin@mailbox.test",
        "fr",
        "Mamie a fait une chute hier soir, elle est aux urgences de l'Hôtel-Dieu avec une fracture du poignet. "
        "Elle va bien et râle déjà contre la nourriture. Tu peux passer la voir samedi ?",
        {},
    ),
]

_ACKS = {
    "en": ["Thanks, noted.", "Got it, thank you!", "Thanks!"],
    "fr": ["Merci, bien reçu."],
    "de": ["Danke!"],
    "es": ["¡Gracias!"],
}


def _paraphrased(b: _Builder) -> list[Query]:
    targets: list[tuple[str, Mail]] = []
    for query, subject, sender, address, lang, core, opts in _PARAPHRASED:
        when = b.date()
        title = opts.get("sig")
        attachment = opts.get("attachment")
        assert attachment is None or isinstance(attachment, Attachment)
        quoted = b.rng.choice(_QUOTED_NEUTRAL) if opts.get("reply") else None
        body = b.wrap(
            core,
            lang=lang,
            name=sender,
            greet=bool(opts.get("greet", True)),
            long=bool(opts.get("long", False)),
            title=title if isinstance(title, str) else None,
            footer=bool(opts.get("footer", False)),
            quoted=quoted,
            when=when,
        )
        mail = b.add(
            "para",
            subject=("Re: " + subject) if quoted else subject,
            sender_name=sender,
            sender_address=address,
            date=when,
            body=body,
            lang=lang,
            attachment=attachment,
        )
        common = shared_words(query, mail.full_text())
        assert not common, f"paraphrased query {query!r} shares {sorted(common)} with its target"
        targets.append((query, mail))
        if opts.get("ack"):
            # the owner's one-line answer quoting the whole target: without quote stripping it looks the same
            b.add(
                "ack",
                subject="Re: " + subject,
                sender_name=OWNER[0],
                sender_address=OWNER[1],
                date=when + timedelta(hours=3),
                body=b.rng.choice(_ACKS[lang]) + "\n\n" + _attribution(lang, when, sender) + "\n" + _quote(body),
                lang=lang,
                in_reply_to=mail.key,
            )
    # a few more acknowledgements, so stripping shows on more than one query
    for mail in [m for m in b.mails if m.key.startswith("para-")][3::6]:
        b.add(
            "ack",
            subject="Re: " + mail.subject.removeprefix("Re: "),
            sender_name=OWNER[0],
            sender_address=OWNER[1],
            date=mail.date + timedelta(hours=5),
            body=b.rng.choice(_ACKS[mail.lang])
            + "\n\n"
            + _attribution(mail.lang, mail.date, mail.sender_name)
            + "\n"
            + _quote(mail.body),
            lang=mail.lang,
            in_reply_to=mail.key,
        )
    replies: dict[str, set[str]] = {}
    for m in b.mails:
        if m.in_reply_to is not None:
            replies.setdefault(m.in_reply_to, set()).add(m.key)
    return [
        Query(query, frozenset({mail.key}), "paraphrased", frozenset(replies.get(mail.key, ())))
        for query, mail in targets
    ]


# ---------------------------------------------------------------------------------------------------------
# Identifier queries: the code, the message holding it, and look-alikes from the same sender with near misses.
# Each entry: code, near-miss codes, sender, address, subject template, body template ({code} placed),
# where ("body" or "attachment": then the body only says a file is attached)

_IDENTIFIERS: list[tuple[str, list[str], str, str, str, str, str]] = [
    (
        "INV-20391",
        ["INV-20392", "INV-2039"],
        "Hostwise Billing",
        "invoices@hostwise.test",
        "Invoice {code} — managed hosting",
        "Invoice {code} for managed hosting (3 × VM-4, backups) is now "
        "available. Total €1,284.00, due within 30 days by card or SEPA.",
        "body",
    ),
    (
        "INV-20417",
        ["INV-20471"],
        "Hostwise Billing",
        "invoices@hostwise.test",
        "Your March invoice",
        "Please find your March invoice attached. Total €1,302.50, due within 30 days.\n\nThank you for your business.",
        "attachment",
    ),
    (
        "PR-88120",
        ["PR-8812", "PR-88121"],
        "Procurement Bot",
        "procurement@northwind.test",
        "Purchase requisition {code} approved",
        'Purchase requisition {code} (2 × monitor 27", 1 × dock) was '
        "approved by Sofia Navarro and sent to the supplier.",
        "body",
    ),
    (
        "PR-90015",
        ["PR-90051"],
        "Procurement Bot",
        "procurement@northwind.test",
        "Purchase requisition {code} needs your approval",
        "Purchase requisition {code} (annual licence, "
        "design tools, €2,400) is waiting for your approval as cost-centre owner.",
        "body",
    ),
    (
        "1Z999AA10123456784",
        ["1Z999AA10123456785"],
        "UPS My Choice",
        "mcinfo@ups-notify.test",
        "UPS Update: Package Scheduled for Delivery Tomorrow",
        "Your package is scheduled for delivery tomorrow "
        "between 9:00 and 13:00. Tracking number: {code}. Shipper: Lenstore.",
        "body",
    ),
    (
        "1Z4F82W90398765432",
        ["1Z4F82W90398765423"],
        "UPS My Choice",
        "mcinfo@ups-notify.test",
        "UPS Update: Package Delivered",
        "Your package was delivered at the front door at 11:42. Tracking number: {code}. Shipper: Decathlon.",
        "body",
    ),
    (
        "112-4839201-5563019",
        ["112-4839201-5563091"],
        "Amazon.fr",
        "commande@amazon-fr.test",
        "Your order {code} has shipped",
        "Your order {code} (USB-C cable, 2 m; kettle descaler) has shipped and will arrive on Thursday.",
        "body",
    ),
    (
        "ORD-558213",
        ["ORD-558231"],
        "Maison du Café",
        "boutique@maisonducafe.test",
        "Order confirmation {code}",
        "Thank you for your order {code}: 2 × 1 kg Ethiopia Sidamo, whole beans. Delivery in 2–3 working days.",
        "body",
    ),
    (
        "OAK-1423",
        ["OAK-142", "OAK-1432"],
        "Jira",
        "jira@northwind.atlassian.test",
        "[JIRA] ({code}) Export to CSV drops rows with commas",
        "Aoife Byrne created {code}: Export to CSV drops "
        "rows whose description contains a comma. Priority: High. Reporter: Aoife Byrne.",
        "body",
    ),
    (
        "00481273",
        ["00481237"],
        "Datadog Support",
        "support@datadog-help.test",
        "Case {code}: missing metrics after agent upgrade",
        "Thank you for contacting support. Your case {code} "
        "has been assigned to an engineer, who will reply within one business day.",
        "body",
    ),
    (
        "K7XQ2M",
        ["K7XQ2N"],
        "SNCF Connect",
        "confirmation@sncf-connect.test",
        "Votre réservation {code} — Lyon Part-Dieu → Paris Gare de Lyon",
        "Bonjour, votre voyage est confirmé. "
        "Référence de dossier : {code}. Départ le 12 mars à 7h04, voiture 14, place 63.",
        "body",
    ),
    (
        "LH1172",
        ["LH1127"],
        "Lufthansa",
        "online@lufthansa-mail.test",
        "Check-in is open for {code} to Frankfurt",
        "Online check-in is now open for flight {code}, Lyon → "
        "Frankfurt, departing 14:35. Boarding passes can be saved to your phone.",
        "body",
    ),
    (
        "C02XK1ZJJG5H",
        ["C02XK1ZJJG5K"],
        "IT Helpdesk",
        "helpdesk@northwind.test",
        "Asset assigned to you: MacBook Pro, serial {code}",
        "The following asset is now registered to you: "
        'MacBook Pro 14", serial number {code}, tag NW-0332. Please keep it safe.',
        "body",
    ),
    (
        "POL-7734-221",
        ["POL-7734-212"],
        "Assurances Rhône",
        "contrats@assurances-rhone.test",
        "Home insurance certificate",
        "Please find attached the certificate for your home policy.",
        "attachment",
    ),
    (
        "FAC-2026-0412",
        ["FAC-2026-0421"],
        "Atelier Graphique Dupont",
        "compta@atelier-dupont.test",
        "Facture {code}",
        "Bonjour Claire, ci-joint la facture {code} pour la refonte du logo et la charte "
        "graphique. Montant : 1 850,00 € TTC, payable à 30 jours.",
        "body",
    ),
    (
        "RE-2026-3318",
        ["RE-2026-3381"],
        "Büromöbel Schneider",
        "buchhaltung@bueromoebel-schneider.test",
        "Ihre Rechnung",
        "Sehr geehrte Frau Martin, anbei erhalten Sie Ihre Rechnung als Textdatei. Zahlbar "
        "innerhalb von 14 Tagen ohne Abzug.",
        "attachment",
    ),
    (
        "PED-44710",
        ["PED-44701"],
        "Librería Alcalá",
        "pedidos@libreria-alcala.test",
        "Confirmación del pedido {code}",
        "Hola Claire: hemos recibido tu pedido {code} (3 libros). Lo enviaremos en 48 horas a tu dirección de Lyon.",
        "body",
    ),
    (
        "CVE-2026-21934",
        ["CVE-2026-21943"],
        "Security Advisories",
        "security@pgsql-announce.test",
        "Security advisory {code}",
        "A flaw in the replication protocol ({code}) allows a crafted message to crash "
        "a standby. Update to the latest minor release. Severity: medium.",
        "body",
    ),
    (
        "9f3c2ab",
        ["9f3c2ba"],
        "Deploy Bot",
        "deploys@northwind.test",
        "Deployed api {code} to production",
        "api @ {code} was deployed to production by yusuf.demir. 42 files "
        "changed. Rollback: `deploy api --rev previous`.",
        "body",
    ),
    (
        "ERR_CONN_5107",
        ["ERR_CONN_5170"],
        "Aoife Byrne",
        "aoife.byrne@northwind.test",
        "Customer seeing {code} on login",
        "Hi Claire, Brightline says their users get {code} when they sign in "
        "through SSO since this morning. Could you check the logs on your side?",
        "body",
    ),
    (
        "PO-661204",
        ["PO-661240"],
        "Sofia Navarro",
        "sofia.navarro@northwind.test",
        "Purchase order for the contractor",
        "Hi Claire, the purchase order is attached, please forward it to the contractor.",
        "attachment",
    ),
    (
        "JJD000390007234567",
        ["JJD000390007234576"],
        "DHL Paket",
        "noreply@dhl-paket.test",
        "Ihre DHL Sendung kommt heute",
        "Ihre Sendung {code} wird heute zwischen 10:00 und 12:00 zugestellt.",
        "body",
    ),
    (
        "EXP-2026-0917",
        ["EXP-2026-0971"],
        "Expensify",
        "notifications@expensify-mail.test",
        "Report {code} reimbursed",
        "Your expense report {code} (Florence trip, €612.40) was reimbursed to your bank account.",
        "body",
    ),
    (
        "FR40303265045",
        ["FR40303265054"],
        "Sofia Navarro",
        "sofia.navarro@northwind.test",
        "Supplier VAT number",
        "Hi Claire, for the new supplier form: their intra-EU VAT number is {code}.",
        "body",
    ),
    (
        "NWA-7H2K-99QX",
        ["NWA-7H2K-99XQ"],
        "Tableau Licensing",
        "licensing@tableau-mail.test",
        "Your licence key",
        "Your licence key is {code}. It activates Creator for one seat until 31 December.",
        "body",
    ),
    (
        "RMA-30558",
        ["RMA-30585"],
        "Decathlon Service",
        "sav@decathlon-service.test",
        "Return authorisation {code}",
        "Your return authorisation for the two-person tent is {code}. Print the "
        "label and drop the parcel at any post office within 14 days.",
        "body",
    ),
    (
        "SR-0042197",
        ["SR-0042179"],
        "Grand Lyon Services",
        "services@grandlyon.test",
        "Service request {code} received",
        "Your service request {code} about a broken street light on rue Sala "
        "was received and passed to the lighting team.",
        "body",
    ),
    (
        "OAK-1519",
        ["OAK-1591"],
        "Jira",
        "jira@northwind.atlassian.test",
        "[JIRA] ({code}) Dashboard timezone wrong for Sydney users",
        "Marc Lefèvre created {code}: dashboards show UTC times to users in Sydney. Priority: Medium.",
        "body",
    ),
]

_ATTACHMENT_TEXT = {
    "INV-20417": (
        "invoice-march.txt",
        "HOSTWISE SAS\nInvoice number: {code}\nDate: 2026-03-31\nManaged hosting, March 2026: €1,302.50\nDue: 30 days",
    ),
    "POL-7734-221": (
        "certificate.txt",
        "ASSURANCES RHÔNE\nHome insurance certificate\nPolicy number: {code}\n"
        "Insured: Claire Martin, 14 rue Sala, 69002 Lyon\nValid: 2026-01-01 to 2026-12-31",
    ),
    "RE-2026-3318": (
        "rechnung.txt",
        "Büromöbel Schneider GmbH\nRechnungsnummer: {code}\nSchreibtisch Eiche, "
        "höhenverstellbar: 849,00 €\nVersand: 49,00 €",
    ),
    "PO-661204": (
        "purchase-order.txt",
        "NORTHWIND ANALYTICS\nPurchase order: {code}\nSupplier: Datakraft OÜ\n"
        "Two contractor months, data platform work: €24,000",
    ),
}


def _identifiers(b: _Builder) -> list[Query]:
    queries: list[Query] = []
    for code, near, sender, address, subject, text, where in _IDENTIFIERS:
        for number, value in enumerate([code, *near]):
            attachment = None
            if where == "attachment":
                name, template = _ATTACHMENT_TEXT[code]
                attachment = Attachment(
                    name if number == 0 else name.replace(".txt", f"-{number}.txt"), template.format(code=value)
                )
            person = next((c[0] for c in _COLLEAGUES if c[1] == address), None)
            body = text.format(code=value) + "\n\n" + (person.split()[0] if person else sender) + "\n"
            mail = b.add(
                "code" if number == 0 else "near",
                subject=subject.format(code=value),
                sender_name=sender,
                sender_address=address,
                body=body,
                lang="fr" if "Bonjour" in text else "de" if "Sehr" in text or "Ihre" in text else "en",
                attachment=attachment,
            )
            if number == 0:
                queries.append(Query(code, frozenset({mail.key}), "identifier"))
    return queries


# ---------------------------------------------------------------------------------------------------------
# Distractor queries: the message meant uses the words once, in the sense meant; look-alikes use them in
# another sense, often in the subject.

_DISTRACTORS: list[tuple[str, tuple[str, str, str, str], list[tuple[str, str, str, str]]]] = [
    (
        "bank transfer",
        (
            "Deposit for the flat",
            "Javier Ortega",
            "javier.ortega@correo.test",
            "I made the bank transfer for the deposit this morning: €1,200 to the account ending 4471. It should "
            "reach you by Tuesday; tell me when it lands so I can get the keys.",
        ),
        [
            (
                "Picnic by the river bank on Sunday",
                "Ben Carter",
                "ben.carter@inbox.test",
                "We are thinking of a picnic on the river bank near the Île Barbe on Sunday, bring a blanket. I will "
                "transfer the photos from last time to the shared album beforehand.",
            ),
            (
                "Transfer news: striker leaves for Bank Park",
                "Olympique Supporters",
                "news@ol-supporters.test",
                "Transfer deadline day: our striker completes his transfer to the club that plays at Bank Park, for a "
                "reported fee of €18M. The bank of fans behind the goal will miss him.",
            ),
        ],
    ),
    (
        "wireless mouse",
        (
            "Peripheral request",
            "Jonas Becker",
            "jonas.becker@northwind.test",
            "Could IT order me a wireless mouse? The cable on mine is fraying and the click is failing. Logitech or "
            "similar is fine, nothing fancy.",
        ),
        [
            (
                "A mouse in the garage chewed the wireless doorbell",
                "Stefan Müller",
                "stefan.mueller@post.test",
                "A mouse got into the garage and chewed through the cable of the wireless doorbell, so nobody "
                "hears the postman any more. The mouse trap is set; the wireless chime needs replacing.",
            ),
            (
                "Mouse sighting in the kitchen",
                "Facilities",
                "facilities@northwind.test",
                "A mouse was seen in the third-floor kitchen. Please do not leave food out. The pest company will also "
                "check the wireless sensors they installed last year.",
            ),
        ],
    ),
    (
        "fire drill",
        (
            "Evacuation exercise on Thursday",
            "Facilities",
            "facilities@northwind.test",
            "There will be a fire drill on Thursday at 10:00. When the alarm sounds, leave by the nearest stairs and "
            "gather at the assembly point on the quai. It should take about 15 minutes.",
        ),
        [
            (
                "Drill bits and the contractor we had to fire",
                "Stefan Müller",
                "stefan.mueller@post.test",
                "We had to fire the contractor who was doing the kitchen; he left his drill and a box of drill bits. "
                "Do you know anyone who could finish the fire-proof panels?",
            ),
            (
                "Fire pit and drill for the garden",
                "Ben Carter",
                "ben.carter@inbox.test",
                "Can I borrow your drill on Saturday? I am building a little fire pit in the garden and need to "
                "fix the stones to a frame. Drill bits too if you have masonry ones.",
            ),
        ],
    ),
    (
        "cold call script",
        (
            "Outbound calling script for Q3",
            "Tom Whitaker",
            "tom.whitaker@northwind.test",
            "Here is the cold call script we will test with the Nordics list: a 20-second opener, two discovery "
            "questions, and the ask for a demo. Feedback welcome before Monday.",
        ),
        [
            (
                "Caught a cold — call tomorrow?",
                "Elena Rossi",
                "elena.rossi@northwind.test",
                "I caught a cold and have no voice, so can we call tomorrow instead? I'll finish the script for the "
                "onboarding animation in the meantime.",
            ),
            (
                "Theatre group: cold reading of the new script",
                "Camille Roux",
                "camille.roux@mailbox.test",
                "We are doing a cold reading of the new script on Wednesday; call me if you want a small part. "
                "The hall is cold, bring a jumper.",
            ),
        ],
    ),
    (
        "interest rate",
        (
            "Your mortgage rate from 1 May",
            "Banque Rhône-Alpes",
            "credit@banque-rhonealpes.test",
            "As your home loan is on a variable rate, the interest rate applied from 1 May will be 3.15% instead of "
            "3.40%. Your monthly repayment falls to €1,092.",
        ),
        [
            (
                "Thank you for your interest — our rate card",
                "Studio Kraft",
                "hello@studiokraft.test",
                "Thank you for your interest in working with Studio Kraft. Our day rate for illustration is €650; the "
                "full rate card is below. We would be glad to hear about the project.",
            ),
            (
                "Interest check: climbing trip, heart rate watches",
                "Nora Ahmed",
                "nora.ahmed@inbox.test",
                "Interest check for the climbing trip in May! Also, does anyone have a heart rate watch to lend? Mine "
                "died. Rate the crags you want on the list.",
            ),
        ],
    ),
    (
        "press release",
        (
            "Draft announcement for the Series B",
            "Louis Garnier",
            "louis.garnier@northwind.test",
            "Attached is the draft press release for the Series B announcement, embargoed until Tuesday 9:00 CET. "
            "Please check the customer quotes and the figures.",
        ),
        [
            (
                "French press and the release valve",
                "Katrin Vogel",
                "katrin.vogel@post.test",
                "The French press you gave me is wonderful. The stovetop one hisses though; I think the release valve "
                "is stuck. Press the little button and it sprays everywhere.",
            ),
            (
                "Bench press PB and early release from work",
                "Ben Carter",
                "ben.carter@inbox.test",
                "New bench press record today: 90 kg! I got an early release from work, so gym at 17:00 and "
                "then beers? Release the kraken.",
            ),
        ],
    ),
    (
        "current account",
        (
            "Statement for your current account",
            "Banque Rhône-Alpes",
            "releves@banque-rhonealpes.test",
            "Your monthly statement for current account no. ****4471 is available in online banking. Closing "
            "balance: €3,418.22.",
        ),
        [
            (
                "Current status of the Salesforce account migration",
                "Tom Whitaker",
                "tom.whitaker@northwind.test",
                "Current status: 80% of account records are migrated to the new Salesforce instance. The account "
                "owners list is current as of today; duplicates next week.",
            ),
            (
                "River current and the kayak club account",
                "Javier Ortega",
                "javier.ortega@correo.test",
                "The current on the Rhône was too strong for the beginners on Saturday. Also, the kayak club account "
                "on the booking site is mine, ask me for the login.",
            ),
        ],
    ),
    (
        "java update",
        (
            "Runtime upgrade required on build agents",
            "Yusuf Demir",
            "yusuf.demir@northwind.test",
            "The build agents need a Java update to 21 before the Gradle upgrade lands. I will roll it out tonight; "
            "pipelines may be slow for an hour.",
        ),
        [
            (
                "Trip update: Java and Bali itinerary",
                "Lucía Fernández",
                "lucia.fernandez@correo.test",
                "Trip update! We land in Java on the 3rd, climb Bromo at dawn and take the ferry to Bali on the 7th. "
                "Another update once the hostel confirms.",
            ),
            (
                "Coffee update: our Java blend is back",
                "Maison du Café",
                "boutique@maisonducafe.test",
                "Coffee update: our Java Preanger blend is back in stock, smooth and spicy. Update your subscription "
                "to get it in the next box.",
            ),
        ],
    ),
    (
        "board meeting",
        (
            "Agenda for the board on the 24th",
            "Sofia Navarro",
            "sofia.navarro@northwind.test",
            "The agenda for the board meeting on the 24th: Q2 financials, the Series B term sheet and the hiring "
            "plan. Slides due to me by Friday.",
        ),
        [
            (
                "Board game night — meeting point",
                "Nora Ahmed",
                "nora.ahmed@inbox.test",
                "Board game night on Thursday! Meeting point is the bar downstairs at 19:30; bring your "
                "favourite board game. Last time's meeting of Catan minds went on until 1am.",
            ),
            (
                "Surf trip: board rental and meeting point",
                "Javier Ortega",
                "javier.ortega@correo.test",
                "For the Hossegor trip: board rental is €25 a day at the shop by the beach. Meeting at the car park at "
                "7:00, the board bags go on the roof.",
            ),
        ],
    ),
    (
        "pitch deck",
        (
            "Investor slides v3",
            "Louis Garnier",
            "louis.garnier@northwind.test",
            "Here is v3 of the pitch deck for the investor meetings next week: I moved the market slide up and cut "
            "the team page to one slide. Comments by Wednesday please.",
        ),
        [
            (
                "Deck staining and the pitch of the roof",
                "Katrin Vogel",
                "katrin.vogel@post.test",
                "The carpenter says the deck needs re-staining before summer and the pitch of the shed roof is too "
                "shallow, which is why the deck boards rot. Quote to follow.",
            ),
            (
                "Football pitch booked, deck chairs for the spectators",
                "Ben Carter",
                "ben.carter@inbox.test",
                "I booked the five-a-side pitch for Sunday 10:00. Bring deck chairs for the spectators; the pitch has "
                "no seating.",
            ),
        ],
    ),
    (
        "table reservation",
        (
            "Booking confirmed at Le Bouchon des Filles",
            "TheFork",
            "no-reply@thefork-mail.test",
            "Your table reservation at Le Bouchon des Filles is confirmed for Saturday at 20:00, 4 people. Please "
            "let the restaurant know if you will be late.",
        ),
        [
            (
                "Reservation table locked in Postgres",
                "Priyanka Rao",
                "priyanka.rao@northwind.test",
                "The reservation table in the bookings database was locked for 12 minutes by a long migration. I added "
                "a lock timeout; the reservation service retries now.",
            ),
            (
                "Table for the reservation desk at the fair",
                "Tom Whitaker",
                "tom.whitaker@northwind.test",
                "For the trade fair we need a table at the stand for the demo reservation desk. The reservation list "
                "is in the shared sheet.",
            ),
        ],
    ),
    (
        "python course",
        (
            "Intro to Python for analysts — enrolment",
            "Learning & Development",
            "learning@northwind.test",
            "The six-week Python course for analysts starts on 2 March: pandas, notebooks and tidy data, Tuesdays "
            "12:30–14:00. Enrol by Friday; places are limited to 15.",
        ),
        [
            (
                "Zoo visit: the python house and the course of the day",
                "Camille Roux",
                "camille.roux@mailbox.test",
                "Léo loved the python at the Tête d'Or zoo! The keeper explained the course of the day for the "
                "reptiles. Next time the golf course next door.",
            ),
            (
                "Monty Python night, main course by Ben",
                "Nora Ahmed",
                "nora.ahmed@inbox.test",
                "Monty Python marathon at ours on Friday: Holy Grail then Life of Brian. Ben is cooking the "
                "main course, I do dessert.",
            ),
        ],
    ),
    (
        "bug report",
        (
            "Crash when exporting dashboards",
            "Aoife Byrne",
            "aoife.byrne@northwind.test",
            "Brightline filed a bug report: exporting a dashboard with more than 50 widgets crashes the tab in Safari. "
            "Steps to reproduce and the console log are in the ticket.",
        ),
        [
            (
                "Bed bug inspection report",
                "Régie Bellecour",
                "gestion@regie-bellecour.test",
                "Following complaints in the building, the pest control company carried out a bed bug inspection. "
                "Their report: no bug found in the common areas; two flats treated.",
            ),
            (
                "Garden report: the bug hotel is full",
                "Katrin Vogel",
                "katrin.vogel@post.test",
                "Garden report: the bug hotel is full of solitary bees, and the kids want to report every bug "
                "they find to the nature club.",
            ),
        ],
    ),
    (
        "virus scan",
        (
            "Malware found on a shared drive",
            "IT Security",
            "security@northwind.test",
            "The weekly virus scan flagged a macro file on the Marketing shared drive and quarantined it. No other "
            "machine was affected. Please do not open .xlsm files from unknown senders.",
        ),
        [
            (
                "Your scan and the virus test results",
                "Dr Sabine Arnaud",
                "secretariat@medecins-lyon.test",
                "Your ultrasound scan is booked for the 19th. The virus test from last week was negative. Bring the "
                "previous scan on a USB stick if you have it.",
            ),
            (
                "Scan of the school form — the virus going round",
                "Mrs Thompson",
                "office@stjames-primary.test",
                "Please scan and return the health form. A stomach virus is going round Year 4; keep children at home "
                "for 48 hours after symptoms.",
            ),
        ],
    ),
    (
        "match tickets",
        (
            "Tickets for OL – PSG",
            "Ben Carter",
            "ben.carter@inbox.test",
            "I got us two match tickets for OL – PSG on the 14th, Virage Nord, €45 each. Kick-off at 21:00; I can "
            "drive.",
        ),
        [
            (
                "Matches, candles and raffle tickets",
                "Camille Roux",
                "camille.roux@mailbox.test",
                "For the fête we still need a box of matches for the candles and someone to sell raffle tickets. The "
                "tickets are printed; do you have matches at home?",
            ),
            (
                "Colour match and event tickets for the brand refresh",
                "Elena Rossi",
                "elena.rossi@northwind.test",
                "The printer could not match the new orange on the event tickets; the match is close on coated paper "
                "only. Tickets reprint on Monday.",
            ),
        ],
    ),
]


def _distractors(b: _Builder) -> list[Query]:
    queries: list[Query] = []
    for query, target, lookalikes in _DISTRACTORS:
        subject, sender, address, core = target
        mail = b.add(
            "meant",
            subject=subject,
            sender_name=sender,
            sender_address=address,
            body=b.wrap(core, lang="en", name=sender),
        )
        assert shared_words(query, mail.full_text()), f"{query!r}: the message meant should use its words"
        for subject, sender, address, core in lookalikes:
            other = b.add(
                "other",
                subject=subject,
                sender_name=sender,
                sender_address=address,
                body=b.wrap(core, lang="en", name=sender),
            )
            assert shared_words(query, other.full_text()) == content_words(query), (query, subject)
        queries.append(Query(query, frozenset({mail.key}), "distractor"))
    return queries


# ---------------------------------------------------------------------------------------------------------
# Everyday mail around them: newsletters, notifications, project chatter, family, in four languages. Each
# template fills its slots from the seeded generator; none is about what a paraphrased query asks for.


def _code(rng: random.Random, prefix: str, digits: int) -> str:
    return prefix + "".join(rng.choice("0123456789") for _ in range(digits))


def _filler_makers() -> list[tuple[int, object]]:
    projects = [
        "billing export",
        "search revamp",
        "churn model",
        "SSO rollout",
        "mobile dashboards",
        "data retention policy",
        "warehouse migration",
        "alerting cleanup",
        "customer health score",
        "API rate limits",
    ]
    weekdays = ["Monday", "Tuesday", "Wednesday", "Thursday"]

    def status(rng: random.Random) -> dict[str, object]:
        name, address, title = rng.choice(_COLLEAGUES)
        project = rng.choice(projects)
        done = rng.choice(
            [
                "merged the schema changes",
                "finished the load tests",
                "closed the last review comments",
                "shipped the feature flag to 10% of tenants",
                "wrote the migration runbook",
            ]
        )
        block = rng.choice(
            [
                "waiting on legal for the wording",
                "one flaky integration test",
                "the staging database is short on disk",
                "no blockers",
                "need a decision on naming",
            ]
        )
        core = (
            f"Weekly update on the {project}: this week we {done}. Progress is about "
            f"{rng.randint(30, 95)}% of the plan. Blockers: {block}. Next: {rng.choice(weekdays)} review."
        )
        return {
            "subject": f"[{project}] weekly update",
            "sender": (name, address),
            "core": core,
            "title": title,
            "long": rng.random() < 0.3,
        }

    def agenda(rng: random.Random) -> dict[str, object]:
        name, address, title = rng.choice(_COLLEAGUES)
        topic = rng.choice(["design review", "retro", "roadmap sync", "architecture forum", "analytics guild"])
        items = rng.sample(
            [
                "open questions on the data model",
                "demo of the new filters",
                "metrics for adoption",
                "who owns the on-call rota",
                "feedback from the customer panel",
                "tech debt we keep postponing",
                "naming of the pricing tiers",
            ],
            3,
        )
        core = f"Agenda for the {topic} on {rng.choice(weekdays)}:\n" + "\n".join(f"- {i}" for i in items)
        return {"subject": f"Agenda: {topic}", "sender": (name, address), "core": core, "title": title}

    def newsletter(rng: random.Random) -> dict[str, object]:
        source, address = rng.choice(
            [
                ("Data Elixir", "news@dataelixir.test"),
                ("Postgres Weekly", "pgweekly@cooperpress.test"),
                ("The Pragmatic Engineer", "newsletter@pragmatic.test"),
                ("Python Weekly", "news@pythonweekly.test"),
            ]
        )
        articles = rng.sample(
            [
                "Why your p95 lies to you",
                "A gentle introduction to vector indexes",
                "Ten years of running Postgres at scale",
                "Type hints in large codebases",
                "The case for boring technology",
                "Notebooks in production, carefully",
                "How we cut our cloud costs by a third",
                "Testing data pipelines with property-based tests",
                "What is new in the latest release",
            ],
            4,
        )
        core = f"This week in {source}:\n\n" + "\n".join(f"* {a}" for a in articles) + "\n\nUnsubscribe here."
        return {
            "subject": f"{source} — issue #{rng.randint(100, 600)}",
            "sender": (source, address),
            "core": core,
            "greet": False,
        }

    def shipping(rng: random.Random) -> dict[str, object]:
        shop = rng.choice(["Decathlon", "Fnac", "Zalando", "Lenstore", "IKEA", "Cultura"])
        item = rng.choice(
            [
                "running socks",
                "a board game",
                "a wool jumper",
                "contact lenses",
                "a bookshelf",
                "watercolour paints",
                "a phone case",
                "hiking boots",
            ]
        )
        tracking = _code(rng, "6A", 11)
        core = (
            f"Good news — your {shop} parcel with {item} is on its way. Tracking: {tracking}. Estimated "
            f"arrival: {rng.choice(weekdays)}."
        )
        return {
            "subject": f"Your {shop} parcel is on its way",
            "sender": (shop, f"orders@{shop.lower()}.test"),
            "core": core,
            "greet": False,
        }

    def versand(rng: random.Random) -> dict[str, object]:
        shop = rng.choice(["Otto", "Thalia", "Tchibo"])
        item = rng.choice(["ein Buch", "eine Kaffeemühle", "zwei Handtücher", "eine Lampe"])
        core = (
            f"Guten Tag, Ihre Bestellung bei {shop} ({item}) wurde verpackt und an den Zusteller "
            f"übergeben. Sendungsnummer: {_code(rng, '00340', 13)}. Voraussichtliche Zustellung: Freitag."
        )
        return {
            "subject": f"Ihre {shop} Bestellung wurde verschickt",
            "sender": (shop, f"service@{shop.lower()}.test"),
            "core": core,
            "greet": False,
            "lang": "de",
        }

    def receipt(rng: random.Random) -> dict[str, object]:
        vendor, what = rng.choice(
            [
                ("Spotify", "Premium Family"),
                ("Apple", "iCloud+ 200 GB"),
                ("Notion", "Plus plan"),
                ("1Password", "Families"),
                ("Strava", "Subscription"),
            ]
        )
        amount = f"€{rng.randint(2, 18)}.{rng.randint(0, 99):02d}"
        core = (
            f"Receipt for {what}: {amount}, charged to Visa ending {rng.randint(1000, 9999)}. Order ID "
            f"{_code(rng, 'M', 9)}."
        )
        return {
            "subject": f"Your receipt from {vendor}",
            "sender": (vendor, f"receipts@{vendor.lower()}.test"),
            "core": core,
            "greet": False,
        }

    def invoice(rng: random.Random) -> dict[str, object]:
        vendor, address, service = rng.choice(
            [
                ("Figma", "billing@figma-mail.test", "Professional, 6 editors"),
                ("Atlassian", "billing@atlassian-mail.test", "Jira Standard"),
                ("Scaleway", "billing@scaleway-mail.test", "object storage"),
                ("Datakraft OÜ", "arved@datakraft.test", "contractor days"),
            ]
        )
        number = _code(rng, "INV-" + rng.choice("345678"), 4)
        core = (
            f"Invoice {number} for {service} is available in your dashboard. Total: €{rng.randint(90, 4000)}"
            f".00. Payment by card on file."
        )
        return {"subject": f"{vendor} invoice {number}", "sender": (vendor, address), "core": core, "greet": False}

    def calendar(rng: random.Random) -> dict[str, object]:
        name, address, _ = rng.choice(_COLLEAGUES)
        what = rng.choice(["1:1", "pairing session", "coffee chat", "customer call prep", "interview debrief"])
        day = rng.choice(weekdays)
        core = (
            f"{name} has invited you to '{what}' on {day} at {rng.randint(9, 16)}:00 (30 min), room "
            f"{rng.choice(['Rhône', 'Saône', 'Fourvière', 'Confluence'])}. Accept · Maybe · Decline"
        )
        return {"subject": f"Invitation: {what} — {day}", "sender": (name, address), "core": core, "greet": False}

    def review(rng: random.Random) -> dict[str, object]:
        name = rng.choice(_COLLEAGUES[:4])[0]
        change = rng.choice(
            [
                "Fix pagination on the accounts endpoint",
                "Add retention job metrics",
                "Bump pandas and fix deprecations",
                "Cache tenant settings per request",
                "Remove the old export worker",
                "Validate date ranges in reports",
            ]
        )
        number = rng.randint(2000, 4999)
        core = (
            f"{name.split()[0].lower()} requested your review on #{number}: {change}.\n\n{rng.randint(2, 30)} "
            f"files changed. View it on the forge."
        )
        return {
            "subject": f"[northwind/api] {change} (#{number})",
            "sender": ("Forge", "notifications@forge.test"),
            "core": core,
            "greet": False,
        }

    def family_fr(rng: random.Random) -> dict[str, object]:
        name, address, _ = rng.choice([f for f in _FRIENDS if f[2] == "fr"])
        core = rng.choice(
            [
                "On fait un repas chez les parents dimanche midi, tu viens ? Maman prépare son gratin dauphinois et "
                "papa a promis de ne pas parler de politique.",
                "Tu te souviens du nom du petit restaurant à Annecy, au bord du lac ? Je voudrais y emmener Léo "
                "pour son anniversaire de mariage.",
                "J'ai trouvé une recette de tarte aux pralines qui a l'air géniale, je te l'envoie. Il faut des "
                "pralines roses de chez Sève.",
                "Le vide-grenier du quartier est le 12 avril, on tient un stand ensemble ? Il me reste plein de "
                "livres d'enfants et de vaisselle.",
                "Est-ce que tu peux me prêter ta valise cabine pour le week-end à Marseille ? Je te la rends lundi.",
            ]
        )
        return {
            "subject": rng.choice(["Dimanche", "Question", "Coucou", "Petite demande"]),
            "sender": (name, address),
            "core": core,
            "lang": "fr",
        }

    def friends_es(rng: random.Random) -> dict[str, object]:
        name, address, _ = rng.choice([f for f in _FRIENDS if f[2] == "es"])
        core = rng.choice(
            [
                "¿Te acuerdas de la paella que hicimos en Valencia? Por fin encontré la receta de la abuela de "
                "Javier, te la mando. El secreto es el socarrat.",
                "Este sábado hay mercadillo en El Rastro, ¿te animas a venir por videollamada a ver las "
                "antigüedades? Jaja, es broma, ¡te echo de menos!",
                "Estoy aprendiendo a tocar la guitarra flamenca, mi profesor dice que tengo ritmo pero poca "
                "paciencia. ¿Qué tal tu francés?",
                "Mi hermano se casa... no, es broma, ¡se compra un perro! Un galgo rescatado que se llama Tomate.",
            ]
        )
        return {
            "subject": rng.choice(["¡Hola!", "Noticias", "Una cosa", "¿Qué tal?"]),
            "sender": (name, address),
            "core": core,
            "lang": "es",
        }

    def friends_de(rng: random.Random) -> dict[str, object]:
        name, address, _ = rng.choice([f for f in _FRIENDS if f[2] == "de"])
        core = rng.choice(
            [
                "Wir waren am Wochenende im Schwarzwald wandern, das Wetter war herrlich und die Kirschtorte noch "
                "besser. Kommst du im Sommer mit?",
                "Hast du Lust, im Herbst zum Oktoberfest zu kommen? Wir haben ein Gästezimmer und Katrin näht "
                "schon an einem Dirndl für dich.",
                "Ich habe endlich mein Fahrrad-Ladegerät für den Kinderanhänger gefunden — es war im Keller, "
                "natürlich.",
                "Unser Chor singt Weihnachten in der Frauenkirche. Ich schicke dir den Link zum Livestream.",
            ]
        )
        return {
            "subject": rng.choice(["Hallo aus München", "Kurze Frage", "Neuigkeiten", "Grüße"]),
            "sender": (name, address),
            "core": core,
            "lang": "de",
        }

    def friends_en(rng: random.Random) -> dict[str, object]:
        name, address, _ = rng.choice([f for f in _FRIENDS if f[2] == "en"])
        core = rng.choice(
            [
                "Are you around for a climb at the bouldering gym on Wednesday evening? I want to try the new black "
                "circuit.",
                "Watched that documentary about octopuses you recommended — I cried twice. Send more.",
                "Do you still have the sourdough starter? Mine died while we were away and I am in mourning.",
                "Quiz night at the Irish pub next Thursday, we need a sixth for the team. You are our geography hope.",
                "Found your scarf in the car. Blue with little foxes? I will bring it next time.",
            ]
        )
        return {
            "subject": rng.choice(["Wednesday?", "Hey", "Random thing", "Quick one"]),
            "sender": (name, address),
            "core": core,
            "long": rng.random() < 0.2,
        }

    def hr(rng: random.Random) -> dict[str, object]:
        core = rng.choice(
            [
                "Reminder: open enrolment for the health plan closes on the 28th. If you change nothing, your current "
                "cover continues.",
                "The office will be closed on 1 and 8 May (public holidays). Please plan releases accordingly.",
                "We are running the engagement survey this month. It is anonymous and takes ten minutes; results "
                "will be shared at the all-hands.",
                "Lunch & learn on Thursday: Aoife presents what customers actually do in the first week. Pizza "
                "provided.",
                "Please update your emergency contact details in the HR portal by the end of the month.",
            ]
        )
        return {
            "subject": rng.choice(["People update", "From the People team", "Reminder", "FYI"]),
            "sender": ("Hannah Kim", "hannah.kim@northwind.test"),
            "core": core,
            "title": "People Partner",
        }

    def it_notice(rng: random.Random) -> dict[str, object]:
        core = rng.choice(
            [
                "We are enabling hardware security keys for all staff. Collect yours from the helpdesk and enrol it "
                "before the 30th.",
                "The VPN client will update itself on Thursday evening. You may be asked to sign in again.",
                "Reminder: do not install browser extensions that ask to read all sites. We have seen phishing via "
                "fake PDF tools.",
                "The expense tool moves to the new single sign-on on Monday; your existing reports stay where they "
                "are.",
            ]
        )
        return {
            "subject": rng.choice(["IT notice", "Security reminder", "Heads-up from IT"]),
            "sender": ("IT Helpdesk", "helpdesk@northwind.test"),
            "core": core,
            "greet": False,
        }

    def sign_in(rng: random.Random) -> dict[str, object]:
        service = rng.choice(["Google", "Microsoft", "GitHub", "Slack"])
        where = rng.choice(["Chrome on Windows, Lyon", "Safari on iPhone, Paris", "Firefox on Linux, Lyon"])
        core = (
            f"We noticed a new sign-in to your {service} account from {where}. If this was you, you can "
            "ignore this message. If not, review your security settings."
        )
        return {
            "subject": f"New sign-in to your {service} account",
            "sender": (service, f"security@{service.lower()}-mail.test"),
            "core": core,
            "greet": False,
        }

    def support(rng: random.Random) -> dict[str, object]:
        customer = rng.choice(["Brightline", "Kestrel Foods", "Maple Logistics", "Ondine Bank", "Voltaire Retail"])
        issue = rng.choice(
            [
                "the CSV import rejects files with a BOM",
                "scheduled reports arrive twice",
                "they would like SAML group mapping",
                "the usage chart is empty for February",
                "a user cannot see shared dashboards",
                "they ask for an audit log export",
            ]
        )
        core = (
            f"{customer} wrote in: {issue}. I told them we would look into it this week. Can someone from "
            "product weigh in?"
        )
        return {
            "subject": f"{customer}: {issue[:40]}",
            "sender": ("Aoife Byrne", "aoife.byrne@northwind.test"),
            "core": core,
            "title": "Customer Success",
            "quoted": rng.random() < 0.4,
        }

    def mailing_list(rng: random.Random) -> dict[str, object]:
        topic = rng.choice(
            [
                "Planner picks a seq scan on a partitioned table",
                "Logical replication slot lag",
                "Proposal: faster COPY for wide tables",
                "pg_dump and large objects",
                "Autovacuum tuning for append-only tables",
            ]
        )
        author = rng.choice(["Andres K.", "Tomas V.", "Melanie P.", "Peter E.", "Heikki L."])
        core = (
            f"{topic}: I see the same on 17.2. Setting work_mem higher did not change the plan; the row "
            f"estimate is off by {rng.randint(10, 900)}x. Could the statistics target be too low here?"
        )
        return {
            "subject": f"Re: {topic}",
            "sender": (author, "pgsql-general@lists.pg.test"),
            "core": core,
            "greet": False,
            "quoted": True,
        }

    def marketing(rng: random.Random) -> dict[str, object]:
        shop, lang, core = rng.choice(
            [
                ("Decathlon", "en", "Spring into action: up to 40% off trail running shoes this weekend only."),
                (
                    "Fnac",
                    "fr",
                    "Les soldes de printemps sont là : jusqu'à -50 % sur une sélection de livres et de casques audio.",
                ),
                ("Zalando", "de", "Frühlingsangebote: bis zu 30 % auf Jacken und Sneaker. Nur bis Sonntag."),
                (
                    "El Corte Inglés",
                    "es",
                    "Rebajas de primavera: hasta un 40 % en moda y hogar. ¡Sólo este fin de semana!",
                ),
                ("Datadog", "en", "Webinar: observability for data pipelines, live on Thursday. Save your seat."),
            ]
        )
        return {
            "subject": core.split(":")[0].strip(),
            "sender": (shop, f"news@{fold(shop).replace(' ', '')}.test"),
            "core": core,
            "greet": False,
            "lang": lang,
        }

    def copro(rng: random.Random) -> dict[str, object]:
        core = rng.choice(
            [
                "L'assemblée générale des copropriétaires aura lieu le 15 avril à 18h30 dans la salle commune. "
                "L'ordre du jour est joint.",
                "Le nettoyage des parties communes est déplacé au mercredi à partir du mois prochain.",
                "Les travaux de ravalement de façade commenceront en juin ; des échafaudages seront installés côté "
                "cour.",
            ]
        )
        return {
            "subject": rng.choice(["Résidence Les Tilleuls — information", "Copropriété : à noter"]),
            "sender": ("Syndic Les Tilleuls", "syndic@lestilleuls.test"),
            "core": core,
            "greet": False,
            "lang": "fr",
        }

    def running(rng: random.Random) -> dict[str, object]:
        core = rng.choice(
            [
                f"Sunday long run: {rng.randint(14, 24)} km along the Saône, meet at 8:30 at the Quai Saint-Vincent. "
                "Easy pace, coffee after.",
                "Results from the Lyon Urban Trail are up: well done everyone, especially the three of you who did "
                "the 32 km in the rain.",
                "Track session on Tuesday: 6 × 800 m with 2 min recovery. Bring a head torch, the stadium lights are "
                "broken again.",
            ]
        )
        return {
            "subject": rng.choice(["Club run", "Running club", "This week at the club"]),
            "sender": ("Lyon Runners", "club@lyonrunners.test"),
            "core": core,
            "greet": False,
        }

    def train(rng: random.Random) -> dict[str, object]:
        ref = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        city = rng.choice(["Marseille Saint-Charles", "Grenoble", "Genève", "Dijon Ville", "Montpellier"])
        core = (
            f"Bonjour, votre voyage Lyon Part-Dieu → {city} est confirmé. Référence : {ref}. "
            f"Présentez votre e-billet à bord."
        )
        return {
            "subject": f"Votre voyage vers {city}",
            "sender": ("SNCF Connect", "confirmation@sncf-connect.test"),
            "core": core,
            "greet": False,
            "lang": "fr",
        }

    def expense(rng: random.Random) -> dict[str, object]:
        ref = _code(rng, "ER-", 5)
        core = (
            f"Expense report {ref} ({rng.choice(['taxi', 'team lunch', 'train to Paris', 'books'])}, "
            f"€{rng.randint(12, 240)}) was submitted and is waiting for review."
        )
        return {
            "subject": f"Expense report {ref} submitted",
            "sender": ("Expensify", "notifications@expensify-mail.test"),
            "core": core,
            "greet": False,
        }

    return [
        (40, status),
        (25, agenda),
        (30, newsletter),
        (25, shipping),
        (10, versand),
        (20, receipt),
        (25, invoice),
        (30, calendar),
        (30, review),
        (18, family_fr),
        (14, friends_es),
        (12, friends_de),
        (20, friends_en),
        (12, hr),
        (10, it_notice),
        (10, sign_in),
        (22, support),
        (15, mailing_list),
        (12, marketing),
        (8, copro),
        (10, running),
        (10, train),
        (12, expense),
    ]


def _fillers(b: _Builder, count: int) -> None:
    makers = _filler_makers()
    weights = [w for w, _ in makers]
    for _ in range(count):
        make = b.rng.choices([m for _, m in makers], weights)[0]
        spec = make(b.rng)  # type: ignore[operator]
        name, address = spec["sender"]
        lang = str(spec.get("lang", "en"))
        when = b.date()
        quoted = b.rng.choice(_QUOTED_NEUTRAL) if spec.get("quoted") else None
        body = b.wrap(
            str(spec["core"]),
            lang=lang,
            name=name,
            greet=bool(spec.get("greet", True)),
            long=bool(spec.get("long", False)),
            title=spec.get("title"),
            quoted=quoted,
            when=when,
        )
        b.add(
            "fill",
            subject=("Re: " if quoted and not str(spec["subject"]).startswith("Re:") else "") + str(spec["subject"]),
            sender_name=name,
            sender_address=address,
            date=when,
            body=body,
            lang=lang,
        )


def _check_identifiers(mails: Sequence[Mail], queries: Sequence[Query]) -> None:
    """Each code occurs in exactly one message, the one labelled; no other code contains it."""
    texts = [(m.key, m.full_text()) for m in mails]
    for q in queries:
        pattern = re.compile(r"(?<![\w-])" + re.escape(q.text) + r"(?![\w-])", re.IGNORECASE)
        holders = {key for key, text in texts if pattern.search(text)}
        assert holders == set(q.relevant), f"{q.text} occurs in {sorted(holders)}"


@cache
def build(seed: int = SEED, size: int = TARGET_SIZE) -> Corpus:
    """The mail set and its labelled queries, the same for the same seed."""
    b = _Builder(random.Random(seed))
    queries = {
        "paraphrased": tuple(_paraphrased(b)),
        "identifier": tuple(_identifiers(b)),
        "distractor": tuple(_distractors(b)),
    }
    _fillers(b, max(0, size - len(b.mails)))
    _check_identifiers(b.mails, queries["identifier"])
    # the filler must not break the paraphrase property either
    by_key = {m.key: m for m in b.mails}
    for q in queries["paraphrased"]:
        for key in q.relevant:
            assert not shared_words(q.text, by_key[key].full_text())
    order = random.Random(seed + 1)
    mails = list(b.mails)
    order.shuffle(mails)  # arrival order independent of the kind of message
    return Corpus(mails=tuple(mails), queries=queries, by_key=by_key)


# ---------------------------------------------------------------------------------------------------------
# As mail


def raw_message(mail: Mail) -> bytes:
    """The message as RFC 5322 bytes (UTF-8 text, an attached .txt file when it has one)."""
    msg = EmailMessage()
    msg["From"] = formataddr((mail.sender_name, mail.sender_address))
    msg["To"] = formataddr(OWNER) if mail.sender_address != OWNER[1] else "FitZone <contact@fitzone.test>"
    msg["Subject"] = mail.subject
    msg["Date"] = format_datetime(mail.date)
    msg["Message-ID"] = f"<{mail.message_id}>"
    if mail.in_reply_to is not None:
        msg["In-Reply-To"] = f"<{mail.in_reply_to}@{DOMAIN}>"
        msg["References"] = f"<{mail.in_reply_to}@{DOMAIN}>"
    msg.set_content(mail.body, charset="utf-8", cte="8bit")
    if mail.attachment is not None:
        msg.add_attachment(
            mail.attachment.text.encode(), maintype="text", subtype="plain", filename=mail.attachment.filename
        )
        msg.set_boundary(f"=_{mail.key}_=")  # not the library's random one: the same seed, the same bytes
    return msg.as_bytes()


def write_mbox(path: Path, corpus: Corpus | None = None) -> Path:
    """The corpus as an mbox file, ready for apps.mail.importing.import_mail."""
    from tests.mailfactory import write_mbox as write

    return write(path, (raw_message(m) for m in (corpus or build()).mails))


def main() -> None:
    """Print a summary of the set (a quick look, not a measurement)."""
    corpus = build()
    kinds: dict[str, int] = {}
    for m in corpus.mails:
        kinds[m.key.split("-")[0]] = kinds.get(m.key.split("-")[0], 0) + 1
    langs: dict[str, int] = {}
    for m in corpus.mails:
        langs[m.lang] = langs.get(m.lang, 0) + 1
    print(f"{len(corpus.mails)} messages: {kinds}; languages {langs}")
    for name, qs in corpus.queries.items():
        print(f"{name}: {len(qs)} queries, e.g. {[q.text for q in qs[:4]]}")


if __name__ == "__main__":
    main()
