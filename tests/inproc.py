"""The in-process transport of the tests (kept in ``strategies.inproc``, which the CLI's
``--mode inproc`` uses too)."""

from strategies.inproc import InProcessTransport, partitions

__all__ = ["InProcessTransport", "partitions"]
