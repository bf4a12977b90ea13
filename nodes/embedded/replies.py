"""What kind of reply a customer message is, read against the desk's previous answer (input of next-turn entry).

Pure functions over text, no I/O. The patterns are this module's own; they cover the short replies people give to a
support agent's question: an identifier it asked for, yes/no, a choice among the items it listed, cancel/stop, or a
short fragment that only makes sense in the conversation ("and the other one?").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graph.contracts.reading import ReplyKind
from nodes.embedded.cancellation import wants_to_cancel as is_cancellation
from nodes.transcript import open_question_of

__all__ = ["ReplyKind", "Reply", "classify_reply", "open_question_of", "listed_items_of", "listed_cards_of", "refers_back",
           "asks_same_for", "asks_for_news", "opens_follow_up", "asks_card_action", "opener_subject",
           "lists_records_of", "reports_it_failed", "takes_up_last_answer", "is_bare_follow_up",
           "record_owners", "gives_address", "RECORD_OWNERS", "FRAGMENT_MAX_WORDS", "OPENER_MAX_WORDS"]

#: A message of at most this many words without a topic of its own counts as a fragment (a follow-up).
FRAGMENT_MAX_WORDS = 7

_ID_RE = re.compile(r"\b(?:tx|rf|tr|card|c)_[A-Za-z0-9]+\b|\b\d{4}\b")
_YES_NO_RE = re.compile(
    r"^\s*(?:yes|yeah|yep|yup|sure|ok(?:ay)?|please(?: do)?|go ahead|go for it|do it|absolutely|of course|correct|right|"
    r"that'?s (?:right|it|correct)|"
    r"exactly|confirm(?:ed)?|no|nope|nah|not really|no thanks?|i do|i don'?t|it is|it isn'?t|that one)\b", re.I)
_ORDINAL_RE = re.compile(r"\b(?:first|second|third|fourth|fifth|last|latest|earlier|later|other|1st|2nd|3rd|"
                         r"top(?![- ]?ups?\b)|bottom|former|latter)\b(?:\s+one)?", re.I)  # "top", not "top-up"
#: "ok and for ATM withdrawals?": an acknowledgement that opens a new question is not a yes/no answer.
_ACK_THEN_QUESTION_RE = re.compile(r"^\s*(?:ok(?:ay)?|alright|right|sure|fine|cool)\b[,.!]?\s+(?:and|but|so|also|"
                                   r"what|how|why|when|where|which|who|can|could|is|are|do(?!\s+(?:it|that|so)\b)|does)\b",
                                   re.I)
#: "the Uber one", "that one from Tesco": picks among listed items by a detail of one of them.
_THE_ONE_RE = re.compile(r"^\s*(?:the|that)\b.{0,40}\bone\b", re.I)
_FOLLOW_UP_RE = re.compile(r"^\s*(?:and|also|what about|how about|which|why|when|so|but|then|ok(?:ay)? (?:and|so)|"
                           r"what (?:was|is|were|did)|is it|was it|did it)\b", re.I)
_ITEM_RE = re.compile(r"\b(?:tx|rf|tr|card)_[A-Za-z0-9]+\b")
#: A pronoun that points back at something already said ("when will *it* arrive?", "is *that* done?").
_BACK_REF_RE = re.compile(r"\b(?:it|its|it's|that|this|them|they|those)\b", re.I)
_WORD_RE = re.compile(r"[A-Za-z0-9_£€$.']+")
#: A nudge for news about what was just answered: "any news?", "any update?", "anything new?", "still nothing?".
_NUDGE_RE = re.compile(r"^\s*(?:so\s+|and\s+)?(?:any(?:thing)? (?:news|update|updates|progress|new)|still nothing|"
                       r"(?:what'?s|what is) the (?:news|latest|status))\b|^\s*(?:news|update|updates)\W*$", re.I)


#: Which specialists own a record by its id prefix (README "a named record goes to its owner"): a refund is refunds', a
#: transfer transfers'; a transaction is billing's to explain and refunds' to pay back.
RECORD_OWNERS: dict[str, frozenset[str]] = {
    "rf": frozenset({"refunds"}), "tr": frozenset({"transfers"}), "tx": frozenset({"billing", "refunds"})}
_RECORD_RE = re.compile(r"\b(tx|rf|tr)_[A-Za-z0-9]+\b", re.I)


def record_owners(text: str) -> frozenset[str]:
    """The specialists that own the records (``tx_…``, ``rf_…``, ``tr_…``) named in ``text`` (:data:`RECORD_OWNERS`),
    empty when it names none: "I'd like to cancel tr_3002" -> ``{"transfers"}``."""
    owners: set[str] = set()
    for prefix in _RECORD_RE.findall(text or ""):
        owners |= RECORD_OWNERS[prefix.lower()]
    return frozenset(owners)


@dataclass(frozen=True)
class Reply:
    """The classification of one customer message: ``kind`` and the ``item`` it picked or named (an id), if any."""

    kind: ReplyKind
    item: str | None = None


def listed_items_of(answer: str, prefixes: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The record ids (``tx_…``, ``rf_…``, ``tr_…``, ``card_…``) an answer listed, first-seen order; with ``prefixes``
    (e.g. ``("tx_",)``) only the ids starting with one of them."""
    items = tuple(dict.fromkeys(_ITEM_RE.findall(answer or "")))
    return items if prefixes is None else tuple(i for i in items if i.startswith(prefixes))


#: A card an answer names by its last four digits ("physical card ending 4242").
_CARD_ENDING_RE = re.compile(r"\bcard ending (\d{4})\b")


def listed_cards_of(answer: str) -> tuple[str, ...]:
    """The last four digits of the cards an answer named ("Your cards: physical card ending 1881 is blocked; …" ->
    ``("1881", "4242", "8899")``), first-seen order: the items a reply such as "the third one" or "8899" picks among
    after a card answer."""
    return tuple(dict.fromkeys(_CARD_ENDING_RE.findall(answer or "")))


#: "and for ATM withdrawals?", "what about with a credit card?", "ok and on weekdays?": the previous question asked again
#: about another thing (an "and for X?" fragment: a connective, then a preposition, then the new object).
_SAME_FOR_RE = re.compile(r"^\s*(?:ok(?:ay)?,?\s+|so\s+)?(?:and|also|what about|how about)\s+(?:for|with|on|in|at|by|"
                          r"from|to|during|over|under|via|abroad|outside|inside)\b", re.I)
#: At most this many words in an "and for X?" fragment (longer messages say what they ask themselves).
SAME_FOR_MAX_WORDS = 8


def asks_same_for(text: str) -> bool:
    """Does ``text`` ask the previous question again about another thing ("and for ATM withdrawals?" after a fee
    question, "what about on weekdays?" after an exchange-rate question)? A connective ("and", "what about", "how
    about", "also", optionally after "ok") followed by a preposition, in at most :data:`SAME_FOR_MAX_WORDS` words and
    naming no record id. Such a fragment belongs to the question domain of the agent that answered it ("and for
    ATM withdrawals?" after a policy fee answer stays with policy)."""
    return (bool(_SAME_FOR_RE.search(text or "")) and len(_words(text or "")) <= SAME_FOR_MAX_WORDS
            and not _RECORD_RE.search(text or ""))


#: A follow-up with no content of its own: "why?", "why not?", "how come?", "what do you mean?", "really?"; or a request
#: to explain the previous answer: "what does that mean?", "I don't understand", "can you explain that?" (the lead's
#: probe of main: "what does that mean?" after policy's answer got the out-of-scope answer, "I don't understand" after
#: account's the profile summary).
_BARE_FOLLOW_UP_RE = re.compile(
    r"^\s*(?:but\s+|and\s+|so\s+|sorry,?\s+|hmm,?\s+)?(?:why(?: not| is that| so)?|how(?: come| so| do i do (?:that|it))?|"
    r"what do you mean(?: by that)?|meaning|really|seriously|what now|now what|what next|and then|"
    r"what does (?:that|this|it) mean|i (?:do not|don'?t|dont) (?:understand(?: (?:that|this|it))?|get (?:it|that|this))|"
    r"i'?m (?:confused|lost)|(?:can|could) you (?:explain|clarify)(?: (?:that|this|it))?(?: again| more| please)?|"
    r"explain(?: (?:that|this|it))?(?: please)?|come again|say that again)\s*[?!.]*\s*$", re.I)


#: "and how long does it take?", "so when will that happen?": a connective, then a question about "it"/"that".
_AND_IT_RE = re.compile(r"^\s*(?:and|so|but|ok(?:ay)? and)\b.*\b(?:it|that|this)\b", re.I)
#: "how much does it cost?", "is it free?", "when will it arrive?": a short question whose only subject is "it"/"that".
_IT_QUESTION_RE = re.compile(r"^\s*(?:how (?:much|long|many|often)|when|where|is|does|do|can|will|would|could)\b"
                             r".*\b(?:it|that|this)\b", re.I)
#: Most words of such a question (longer ones usually name their own subject).
IT_QUESTION_MAX_WORDS = 6
#: Words that give a message a subject of its own (a product or record of the desk).
_DOMAIN_NOUN_RE = re.compile(r"\b(?:cards?|refunds?|transfers?|payments?|charges?|account|balance|fees?|pin|atms?|"
                             r"money|transactions?|top[- ]?ups?|limits?|phone|address|email|identity|currenc\w*)\b", re.I)


#: "it failed", "it keeps failing", "that didn't work": a report that what was just discussed failed.
_IT_FAILED_RE = re.compile(r"^\W*(?:(?:but|and|so|ok(?:ay)?|well)[,\s]+)?(?:it|that|this)(?:'s| is| has)?\s+(?:still\s+)?"
                           r"(?:failed|fails|failing|keeps? failing|didn'?t work|doesn'?t work|won'?t work|did not work|"
                           r"was declined|got declined|not working)\b\W*$", re.I)


#: A street address or a UK postcode in a message ("12 Baker Street", "221b Baker St", "NW1 6XE").
_ADDRESS_RE = re.compile(r"\b\d+[a-z]?,?\s+(?:[A-Za-z'-]+\s+){1,3}(?:street|st|road|rd|avenue|ave|lane|ln|drive|dr|way|"
                         r"close|place|square|court|gardens|terrace|crescent|row|hill|park)\b|"
                         r"\b[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2}\b", re.I)


def gives_address(text: str) -> bool:
    """Does ``text`` give a postal address (a house number and street, or a UK postcode: "it's 12 Baker Street,
    London") in at most 15 words? After an answer about the address it is the customer's new address, never out
    of scope."""
    return len(_words(text or "")) <= 15 and bool(_ADDRESS_RE.search(text or ""))


def reports_it_failed(text: str) -> bool:
    """Does ``text`` only report that "it" failed ("it keeps failing", "that didn't work")? It is about what the
    previous answer discussed, so it stays with the agent that gave it ("it keeps failing" after
    the identity check's how-to stays with account)."""
    return bool(_IT_FAILED_RE.match(text or ""))


def is_bare_follow_up(text: str, strict: bool = False) -> bool:
    """Is ``text`` a follow-up with no content of its own ("why not?", "how come?", "what do you mean?", or "and how
    long does it take?": a connective and "it"/"that" in at most 8 words naming no product or record of the desk)? It
    can only be about the previous answer, so it stays with the agent that gave it ("why not?" after a refused
    refund stays with refunds, "and how long does it take?" after a transfer answer with transfers). ``strict``: only
    the first kind (no words of its own at all). Not strict, a short question about "it" alone ("how much does it
    cost?" after "how do I send money abroad?", at most :data:`IT_QUESTION_MAX_WORDS` words, no product or record
    named) counts too, whatever topic the router reads into it (billing's, for that one)."""
    t = text or ""
    if _BARE_FOLLOW_UP_RE.match(t):
        return True
    if strict or _DOMAIN_NOUN_RE.search(t) or _ID_RE.search(t):
        return False
    n = len(_words(t))
    return (bool(_AND_IT_RE.search(t)) and n <= 8) or (bool(_IT_QUESTION_RE.search(t)) and n <= IT_QUESTION_MAX_WORDS)


#: A follow-up opener: "what about Switzerland?", "how about weekends?", "and the Amazon one?", "and for top-ups?",
#: "also the other one?" (optionally after "ok" or "so").
_OPENER_RE = re.compile(r"^\s*(?:ok(?:ay)?,?\s+|so\s+)?(?:and|also|what about|how about)\b", re.I)
#: At most this many words in a follow-up opener (longer messages say what they ask themselves).
OPENER_MAX_WORDS = 8


def opens_follow_up(text: str) -> bool:
    """Does ``text`` open as a follow-up to the previous answer ("what about X?", "how about X?", "and X?", "and for
    X?", "also X?"), in at most :data:`OPENER_MAX_WORDS` words? Such a message leans on the conversation whatever the
    router reads into its last words: "what about Switzerland?" after the supported-countries answer is read as off
    topic (0.93) by the shipped router, yet it asks policy's question again."""
    return bool(_OPENER_RE.search(text or "")) and len(_words(text or "")) <= OPENER_MAX_WORDS


#: The subject of a follow-up opener: what follows "what about"/"and"/"and in"/… up to the end ("what about a personal
#: loan?" -> "a personal loan", "and in the UK?" -> "the UK").
_OPENER_SUBJECT_RE = re.compile(r"^\s*(?:ok(?:ay)?,?\s+|so\s+)?(?:and|also|what about|how about)\s+(?:(?:in|for|to|with|"
                                r"on|at|from|by|via)\s+)?(?P<subject>.*?)[\s?!.]*$", re.I | re.S)


def opener_subject(text: str) -> str | None:
    """The subject a follow-up opener (:func:`opens_follow_up`) asks about, as the customer wrote it ("what about
    Switzerland?" -> "Switzerland", "and in the UK?" -> "the UK", "what about a mortgage?" -> "a mortgage"), or None when
    ``text`` is no opener or names nothing after the connective."""
    if not opens_follow_up(text):
        return None
    m = _OPENER_SUBJECT_RE.match(text or "")
    subject = m.group("subject").strip() if m else ""
    return subject or None


#: "what transfers have I made?", "which cards do I have?", "show me all my refunds", "what are my transactions?": the
#: customer asks for the list of their own records of one kind (group ``kind``).
_OWN_LIST_RE = re.compile(
    r"^\W*(?:(?:and|so|ok(?:ay)?|also|then),?\s+)?(?:please\s+)?(?:"
    r"(?:what|which)\s+(?P<a>cards?|transfers?|refunds?|transactions?|payments?)\s+(?:have|do|did|am)\s+i\b"
    r"(?!\s+(?:have|need|got)\s+to\b)"
    r"|(?:show|list|give|tell|send)\s+(?:me\s+)?(?:all\s+|a list of\s+)?(?:of\s+)?my\s+(?P<b>cards|transfers|refunds|"
    r"transactions|payments)\b"
    r"|(?:what|which)\s+(?:are\s+)?(?:all\s+)?my\s+(?P<c>cards|transfers|refunds|transactions)\b)", re.I)
#: The specialist that lists each kind of record (README "a named record goes to its owner"; payments and
#: transactions are billing's).
_LIST_OWNERS = {"card": "cards", "transfer": "transfers", "refund": "refunds", "transaction": "billing",
                "payment": "billing"}
#: At most this many words in such a request (longer ones ask more than the list).
OWN_LIST_MAX_WORDS = 10


def lists_records_of(text: str) -> str | None:
    """The specialist whose records ``text`` asks to list ("what transfers have I made?" -> ``"transfers"``, "which
    cards do I have?" -> ``"cards"``, "show me my refunds" -> ``"refunds"``, "what payments have I made?" ->
    ``"billing"``), in at most :data:`OWN_LIST_MAX_WORDS` words; None otherwise. The rule comes first because the shipped
    router reads "what transfers have I made?" as a transfer fee (billing at 0.66) and "which cards do I have?" as the
    cards one can top up with (policy at 0.70)."""
    m = _OWN_LIST_RE.search(text or "")
    if m is None or len(_words(text or "")) > OWN_LIST_MAX_WORDS:
        return None
    kind = (m.group("a") or m.group("b") or m.group("c")).lower().rstrip("s")
    return _LIST_OWNERS[kind]


#: "freeze it", "please unfreeze it", "can you block that?", "unfreeze it now": a card action on "it" and nothing else.
_CARD_ACTION_RE = re.compile(r"^\s*(?:(?:please|pls|ok(?:ay)?|now|can you|could you|would you|will you|can u)[,\s]+)*"
                             r"(?:(?:un)?freeze|block)\s+(?:it|that|this|them)\b(?:[,\s]+(?:please|now|again|too|"
                             r"as well|right away|for me))*\s*[.!?]*\s*$", re.I)


#: "freeze 8899", "please unfreeze card 4242", "block my virtual card ending 8899": a card action naming the card by its
#: last four digits (a card's last four digits name a card, never an account).
_NAMED_CARD_ACTION_RE = re.compile(
    r"^\s*(?:(?:please|pls|ok(?:ay)?|now|can you|could you|would you|will you|can u)[,\s]+)*"
    r"(?:(?:un)?freeze|block)\s+(?:(?:my|the)\s+)?(?:(?:physical|virtual)\s+)?(?:card\s*)?"
    r"(?:(?:ending|ends)(?:\s+(?:in|with))?\s+|number\s+|no\.?\s*)?\d{4}\b"
    r"(?:[,\s]+(?:please|now|again|too|as well|right away|for me))*\s*[.!?]*\s*$", re.I)


def asks_card_action(text: str) -> bool:
    """Is ``text`` a bare request to freeze, unfreeze or block "it" ("freeze it", "can you unfreeze it?"), or a card
    named by its last four digits ("freeze 8899", "unfreeze card 4242"), naming no account ("unblock it" is not: a
    card is blocked by wrong PIN entries, which the customer undoes in the app)? At this desk only a card is frozen or
    unfrozen by a word (an account freeze is asked for by name, "freeze my account", and goes to the team), so such a
    message is the cards agent's: after card talk "it" is the card just discussed, on a new thread cards asks "a card
    or your whole account?"; none of them files an account freeze or is out of scope."""
    return bool(_CARD_ACTION_RE.match(text or "") or _NAMED_CARD_ACTION_RE.match(text or ""))


#: "order one please", "get me one": taking up an offer to order something the last answer made.
_ORDER_ONE_RE = re.compile(r"\b(?:order|get|send)(?: me)? (?:one|it|that|a new one)\b", re.I)
#: A long word a short message shares with the last answer ("replacement"): it takes up what that answer said.
_LONG_WORD_RE = re.compile(r"[a-z]{7,}")
#: Long words too common in the desk's answers to tie a message to one of them.
_COMMON_LONG = frozenset({"account", "payment", "payments", "transfer", "transfers", "please", "something",
                          "anything", "question", "another", "through", "without", "business", "because"})


def takes_up_last_answer(text: str, previous: str | None) -> bool:
    """Does the short ``text`` (at most 8 words) take up a thing the desk's ``previous`` answer named: a long word of
    that answer ("how much is a replacement?" after "order a replacement in the app … it costs £5") or an order
    ("order one please" after an answer that names an order, a replacement or a new card)? Such a message leans on
    the conversation and is never out of scope."""
    if not previous or len(_words(text or "")) > 8:
        return False
    if _ORDER_ONE_RE.search(text) and re.search(r"\b(?:order|replacement|new card)\b", previous, re.I):
        return True
    said = set(_LONG_WORD_RE.findall(previous.lower())) - _COMMON_LONG
    return bool(set(_LONG_WORD_RE.findall(text.lower())) & said)


def asks_for_news(text: str) -> bool:
    """Is ``text`` a nudge for news about what was just answered ("any news?", "any update?", "still nothing?"), in at
    most 6 words?"""
    return bool(_NUDGE_RE.search(text or "")) and len(_words(text or "")) <= 6


def refers_back(text: str, listed: tuple[str, ...]) -> bool:
    """Does ``text`` point back at a record the previous answer named? True when that answer listed records
    (``listed``, :func:`listed_items_of`) and ``text`` is short (at most 12 words) with a pronoun such as "it", "that",
    "them": "when will it arrive?" after "refund rf_… has been paid" asks about that refund, whatever the router
    thinks of "arrive"; a nudge such as "any news?" or "any update?" points back too."""
    return bool(listed) and len(_words(text)) <= 12 and (bool(_BACK_REF_RE.search(text)) or asks_for_news(text))


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text)


def classify_reply(text: str, listed: tuple[str, ...] = (), has_topic: bool = False) -> Reply:
    """Classify ``text`` as a reply to the previous answer.

    Args:
        text: the customer's new message.
        listed: the items the previous answer listed (:func:`listed_items_of`).
        has_topic: the router found a specialist topic in ``text`` with confidence (a short message with its own topic,
            such as "my card was stolen", is a request, not a fragment).

    Returns:
        The first matching kind, in this order: ``cancel`` (a cancellation rule of ``policies.approval`` in a message
        of at most 8 words), ``choice`` (names one of ``listed``, or an ordinal or "the … one" when something was listed),
        ``identifier`` (an id or 4 digits in a message of at most 8 words), ``yes_no`` (starts with yes/no/ok/… in at
        most 8 words, and at most 3 when ``has_topic``, but not "ok and …", an acknowledgement opening a new
        question), ``fragment`` (a follow-up opener such as "and …"/"which …" in at most 12 words, or at most
        :data:`FRAGMENT_MAX_WORDS` words without a topic of its own), else ``request``.
    """
    words = _words(text)
    n = len(words)
    if n == 0:
        return Reply("fragment")
    if n <= 8 and is_cancellation(text):
        return Reply("cancel")
    picked = next((i for i in listed if re.search(rf"\b{re.escape(i)}\b", text, re.I)), None)
    if picked is not None:
        return Reply("choice", picked)
    if listed and n <= 8 and (_ORDINAL_RE.search(text) or _THE_ONE_RE.search(text)):
        return Reply("choice")
    ident = _ID_RE.search(text)
    if ident and n <= 8:
        return Reply("identifier", ident.group(0))
    if n <= 8 and _YES_NO_RE.search(text) and not _ACK_THEN_QUESTION_RE.search(text) and not (has_topic and n > 3):
        return Reply("yes_no")  # "yes, my card was stolen" has a topic of its own: a request
    if (n <= 12 and _FOLLOW_UP_RE.search(text)) or (n <= FRAGMENT_MAX_WORDS and not has_topic):
        return Reply("fragment")
    return Reply("request")
