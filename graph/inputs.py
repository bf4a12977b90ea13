"""What a caller may send: message text and thread ids (issue 11, section 5). Contract module: imports only
``graph.errors``.

* A message is refused (:class:`~graph.errors.InputError`, one line, nothing stored) when it holds a C0 control
  character other than newline and tab (U+0000–U+001F, so also carriage return and ESC), DEL (U+007F), a C1 control
  character (U+0080–U+009F), or a lone surrogate — which is how Python carries bytes that were not valid UTF-8 (the
  ``surrogateescape`` of ``sys.argv`` and of a ``errors="surrogateescape"`` stream).
* A thread id is 1–128 characters of ``A-Z a-z 0-9 . _ : -``, starting with a letter or digit
  (:data:`THREAD_ID_PATTERN`); LangGraph's UUID thread ids fit.
* :func:`printable` renders stored text for a terminal: every control character and lone surrogate becomes a visible
  escape (``\\x1b``, ``\\udcff``), so a stored message can never drive an operator's terminal.
"""

from __future__ import annotations

import re

from graph.errors import InputError

__all__ = ["THREAD_ID_PATTERN", "MAX_THREAD_ID", "check_message", "check_thread_id", "printable"]

#: Longest thread id accepted (characters).
MAX_THREAD_ID = 128
#: The documented thread id alphabet (README "Identity and authorization").
THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def check_message(text: object, what: str = "the message") -> str:
    """``text`` unchanged when it is a message the desk accepts; else InputError with a one-line reason naming the
    first offending character (position and code point), e.g. ``the message contains control character U+001B at
    position 5``. ``what`` names the text in the reason (``"the note"`` for an approver's note). Emptiness and length
    are checked by the caller (``Conversation.send``, ``graph.approval.parse_decision``)."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be text, not {type(text).__name__}")
    if m := _SURROGATE.search(text):
        raise InputError(f"{what} is not valid UTF-8 (undecodable byte at position {m.start()})")
    if m := _CONTROL.search(text):
        raise InputError(f"{what} contains control character U+{ord(m.group()):04X} at position {m.start()}; "
                         "only newline and tab are allowed")
    return text


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
