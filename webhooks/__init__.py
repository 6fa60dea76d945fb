"""Webhooks, in one room: where a key's events go, how they are signed, the outbox that keeps
them, and their delivery.

Each module stands on one layer of the house (``pyproject.toml``'s contracts say so):

- the front door's: ``routes`` (endpoints, delivery logs, the signing secret), ``fields``
  (``x_webhook`` and endpoint URLs checked, the secret shown once);
- the worker's: ``delivery`` (the loop that claims due events, sends and retries them;
  started by ``launch/``);
- called by it, below the worker: ``send`` (one signed try, httpx, the address checked again
  after DNS) and ``payloads`` (what an event says);
- the store's: ``outbox`` (events and tries; migration 0009's trigger writes a finished
  job's), ``endpoints`` (a key's endpoints and signing secret);
- pure: ``urls`` (where a webhook may go).
"""
