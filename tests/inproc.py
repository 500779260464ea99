"""The in-process transport of the tests (kept in ``launcher.inproc``, which the CLI's
``--mode inproc`` uses too)."""

from launcher.inproc import InProcessTransport, partitions

__all__ = ["InProcessTransport", "partitions"]
