"""The embedded (offline) model: a LangChain chat model that needs no key and no network, its handbook and the keyword
rules that read customers' messages.

Only the model factory (``nodes.models``) imports this package (``tests/test_architecture.py`` checks it): the
runtime gets the chat model (:class:`nodes.embedded.offline_model.OfflineChatModel`) and the message reader
(:class:`nodes.embedded.reader.EmbeddedReader`, the ``graph.contracts.reading.MessageReader`` plug-in) from the factory.

Modules: ``offline_model`` (the chat model's decisions), ``playbook`` (each agent's plans and answers),
``desk_knowledge`` (the handbook data of ``nodes/data/desk_knowledge.json``), ``desk_render`` (tool results in the
customer's words), ``replies`` (reply kinds and follow-ups), ``cancellation`` (cancel wishes, confirmations, status
questions), ``compound`` (compound-request detection), ``reader`` (the one reading of a message per turn).
"""
