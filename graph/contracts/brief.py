"""The typed input of one model call: which agent speaks, the handoff packet it received, the facts it may rely on
and what the thread holds.

Two ways to hand it to a model, both from the same :class:`ModelBrief`:

* a model that reads briefs (:class:`BriefReader`, the embedded model) gets it as the keyword argument ``brief`` of
  its call (``model.bind(brief=…)``; it reaches the model's ``_generate``) and decides from it, never from the prompt's
  text;
* any other model (an OpenAI model, a scripted test model) never gets the keyword (a client such as ``ChatOpenAI``
  would send it to the server) and reads the same information as text: the agent's system prompt
  (``nodes.prompts.system_prompt``) and the packet rendered by ``graph.contracts.packet.render_packet``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from graph.contracts.packet import Fact, HandoffPacket

__all__ = ["ModelBrief", "BriefReader", "brief_packet"]


class ModelBrief(BaseModel):
    """What one model call is about (the agent node, an expert or the supervisor builds it).

    Attributes:
        agent: the agent that speaks (``triage``, a specialist, ``clarify``, ``supervisor``; an expert's specialist).
        packet: the handoff packet addressed to this agent this turn (None when none: a fresh triage, an expert).
        facts: the facts the agent may rely on, with their source (the packet's known facts; an expert's task facts).
        open_questions: the questions the agent left open (the packet's; the entry node puts the last answer's first).
        pending_approval: the refund id the thread waits on for an approval, None when it waits for none.
        listed_items: the record ids (or card endings) the desk's previous answer listed.
    """

    model_config = ConfigDict(frozen=True)
    agent: str
    packet: HandoffPacket | None = None
    facts: tuple[Fact, ...] = ()
    open_questions: tuple[str, ...] = ()
    pending_approval: str | None = None
    listed_items: tuple[str, ...] = ()

    @classmethod
    def of(cls, agent: str, packet: HandoffPacket | Mapping[str, Any] | None = None, *, facts: tuple[Fact, ...] | None = None,
           pending_approval: str | None = None, listed_items: tuple[str, ...] = ()) -> ModelBrief:
        """The brief of ``agent`` with the state's ``packet`` (the model, or its JSON; its facts and open questions),
        or ``facts`` given without a packet (an expert's task)."""
        typed = brief_packet(packet)
        return cls(agent=agent, packet=typed, facts=facts if facts is not None else (typed.known_facts if typed else ()),
                   open_questions=typed.open_questions if typed else (), pending_approval=pending_approval,
                   listed_items=listed_items)


def brief_packet(packet: HandoffPacket | Mapping[str, Any] | None) -> HandoffPacket | None:
    """The state's packet (a ``HandoffPacket``, or one as JSON as earlier versions stored it) as the model, None for
    none or one that does not validate."""
    if isinstance(packet, HandoffPacket):
        return packet
    if not packet:
        return None
    try:
        return HandoffPacket.model_validate(packet)
    except ValueError:
        return None


@runtime_checkable
class BriefReader(Protocol):
    """A chat model that decides from a :class:`ModelBrief` passed as the keyword argument ``brief`` of its call."""

    def reads_brief(self) -> bool:
        """True when the model wants the ``brief`` keyword on every call."""
        ...
