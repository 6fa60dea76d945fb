"""Composition roots: build the service's parts from settings and start them (``decide serve``).

The only place that knows both the API and the worker; they never import each other.
"""
