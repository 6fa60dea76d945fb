"""decide: typed questions about text or JSON answered with probabilities from one forward pass
of a GGUF model.

The base install is ``decide.core`` (pure), ``decide.client`` (the HTTP client) and
``decide.cli`` (the ``decide`` command); the service's layers come with ``decide[server]``.
"""
