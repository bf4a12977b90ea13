"""Serving the compiled graph on LangGraph-API engines: the `langgraph dev` entry, bearer-token authentication,
the customer view guard, the service launcher and Aegra's run guard."""
