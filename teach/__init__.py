"""Taught questions, in one room: a question fitted on labelled examples to answer better than
zero-shot, from its routes to its maths.

Each module stands on one layer of the house (``pyproject.toml``'s contracts say so):

- the front door's: ``routes`` (HTTP), ``doors`` (teach, read, label: the routes' and the MCP
  tools' one door), ``answering`` (which taught question answers a request; checks),
  ``schemas`` (the bodies, for the MCP tools);
- called by the worker, below it: ``fit_jobs`` (a fit job decoded and fitted; the readouts
  a decision names);
- the store's: ``records`` (taught questions, their versions, the answering rule, labels);
- below them, the fitting maths: ``fit``, ``lexical``, ``regression`` (numpy, scipy).

Applying a fitted readout is pure and lives in the core (``decide.core.taught``).
"""
