"""What a caller may send: message text and thread ids. Contract module: imports only
``graph.contracts.errors``.

* A message is refused (:class:`~graph.contracts.errors.InputError`, one line, nothing stored) when it holds a C0 control
  character other than newline and tab (U+0000–U+001F, so also carriage return and ESC), DEL (U+007F), a C1 control
  character (U+0080–U+009F), or a lone surrogate — which is how Python carries bytes that were not valid UTF-8 (the
  ``surrogateescape`` of ``sys.argv`` and of a ``errors="surrogateescape"`` stream).
* A thread id is 1–128 characters of ``A-Z a-z 0-9 . _ : -``, starting with a letter or digit
  (:data:`THREAD_ID_PATTERN`); LangGraph's UUID thread ids fit.
* A customer's message is text (a ``str``: bytes or any other type are refused as such, :func:`not_text`), at most
  :data:`MAX_MESSAGE_CHARS` characters and not empty (:func:`check_text`).
* :func:`check_turn_input` applies all of it to a run of the graph (its input messages and the thread id of its
  config); the compiled graph runs it before anything is read or stored (``nodes.input_guard``), and the HTTP entry
  points answer 422 with the same line (``graph/service/auth.py``, ``graph/service/aegra_app.py``), so every way in shares one
  check.
* :func:`printable` renders stored text for a terminal: every control character and lone surrogate becomes a visible
  escape (``\\x1b``, ``\\udcff``), so a stored message can never drive an operator's terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graph.contracts.errors import InputError

__all__ = ["THREAD_ID_PATTERN", "MAX_THREAD_ID", "MAX_MESSAGE_CHARS", "not_text", "check_message", "check_text",
           "check_thread_id", "check_turn_input", "printable"]

#: Longest customer message accepted (characters): a support message, not a document (README "Bad input").
MAX_MESSAGE_CHARS = 4000

#: Longest thread id accepted (characters).
MAX_THREAD_ID = 128
#: The documented thread id alphabet (README "Identity and authorization").
THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def not_text(value: object, what: str = "the message") -> str:
    """The one-line reason ``value`` (anything but a ``str``) is refused as ``what``: ``the message must be text, not
    int``; bytes say whether they are UTF-8 (``the message must be text, not bytes, and these bytes are not valid
    UTF-8 (byte 0xFF at position 0)``, or ``... not bytes (decode them as UTF-8 first)``). The desk never decodes a
    caller's bytes itself: which encoding they are in is the caller's knowledge."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return (f"{what} must be text, not bytes, and these bytes are not valid UTF-8 "
                    f"(byte 0x{raw[exc.start]:02X} at position {exc.start})")
        return f"{what} must be text, not bytes (decode them as UTF-8 first)"
    return f"{what} must be text, not {'None' if value is None else type(value).__name__}"


def check_message(text: object, what: str = "the message") -> str:
    """``text`` unchanged when it is a message the desk accepts; else InputError with a one-line reason naming the
    first offending character (position and code point), e.g. ``the message contains control character U+001B at
    position 5``. ``what`` names the text in the reason (``"the note"`` for an approver's note). Emptiness and length
    are checked by the caller (``Conversation.send``, ``graph.contracts.approval.parse_decision``)."""
    if not isinstance(text, str):
        raise InputError(not_text(text, what))
    if m := _SURROGATE.search(text):
        raise InputError(f"{what} is not valid UTF-8 (undecodable byte at position {m.start()})")
    if m := _CONTROL.search(text):
        raise InputError(f"{what} contains control character U+{ord(m.group()):04X} at position {m.start()}; "
                         "only newline and tab are allowed")
    return text


def check_text(text: object) -> str:
    """``text`` unchanged when it is a message the desk answers: not empty (or only blanks), at most
    :data:`MAX_MESSAGE_CHARS` characters, and :func:`check_message`; else InputError with a one-line reason (for
    anything but a ``str``, :func:`not_text`: bytes are not taken for an empty message)."""
    if not isinstance(text, str):
        raise InputError(not_text(text, "the message"))
    if not text.strip():
        raise InputError("the message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        raise InputError(f"the message is {len(text)} characters; the limit is {MAX_MESSAGE_CHARS}")
    return check_message(text)


def _message_text(message: Any) -> object:
    """The text of one input message as LangGraph accepts it: a string, a ``(role, text)`` pair, a dict with
    ``content``, or a message object; list content (content blocks) is joined from its text parts."""
    if isinstance(message, str):
        return message
    if isinstance(message, (tuple, list)) and len(message) == 2:
        content = message[1]
    elif isinstance(message, Mapping):
        content = message.get("content", "")  # a message without content is empty
    elif hasattr(message, "content"):
        content = message.content
    else:  # bytes, a number, ...: check_text names what it is
        return message
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text") if isinstance(p, Mapping) else None for p in content]
        if any(not isinstance(p, str) for p in parts):
            raise InputError("the message must be text")
        return "".join(parts)  # type: ignore[arg-type]
    return content


def check_turn_input(run_input: Any, thread_id: object = None) -> None:
    """Refuse (InputError, one line) a run whose thread id (when given) fails :func:`check_thread_id` or whose input
    carries a message that fails :func:`check_text` (``thread_id``: any object, checked as its ``str``, e.g. a
    ``uuid.UUID``). A run without input (``None``: ``recover`` continuing a
    thread) or with a ``Command`` (a resume) carries no message and passes; an input mapping without a message
    (``{}``, ``{"messages": []}``) is refused; ``run_input``: the run's input as the graph receives it."""
    if thread_id is not None:
        check_thread_id(str(thread_id))  # the LangGraph API carries thread ids as uuid.UUID
    if not isinstance(run_input, Mapping):
        return
    messages = run_input.get("messages")
    if messages is None or (isinstance(messages, (list, tuple)) and not messages):
        # an input without a message ({} or {"messages": []}) would run a whole turn on the previous message
        raise InputError("the run carries no message: send one user message, or resume with a command")
    for message in messages if isinstance(messages, (list, tuple)) else [messages]:
        check_text(_message_text(message))


def check_thread_id(thread_id: object) -> str:
    """``thread_id`` unchanged when valid (see the module doc); else InputError: empty, too long, or a character
    outside ``A-Z a-z 0-9 . _ : -``."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InputError("the thread id is empty; omit --thread for a new thread")
    if len(thread_id) > MAX_THREAD_ID:
        raise InputError(f"the thread id is {len(thread_id)} characters; the limit is {MAX_THREAD_ID}")
    if not THREAD_ID_PATTERN.fullmatch(thread_id):
        raise InputError(f"thread id {printable(thread_id)!r} has a character outside A-Z a-z 0-9 . _ : - "
                         "(or does not start with a letter or digit)")
    return thread_id


def printable(text: str) -> str:
    """``text`` with every control character (except newline and tab) and lone surrogate replaced by a visible
    escape: ``"a\\x1b[31mb"`` -> ``"a\\\\x1b[31mb"``; ``"\\udcff"`` -> ``"\\\\udcff"``."""
    def esc(m: re.Match[str]) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _UNPRINTABLE.sub(esc, text)
