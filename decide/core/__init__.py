"""The decision core: wire types, validation, prompt rows, readout and the engine.

Nothing here does I/O or imports a framework, a database, a queue or llama.cpp; the API, the
worker, the client and the command line all share it. Checked by import-linter: the core
imports only the standard library and itself.
"""
