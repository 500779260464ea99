"""The process launcher behind the ``corolla`` command: starts SuperLinks, SuperNodes and
simulation runs, or wires the ServerApp loop to ClientApp handlers in one process
(``--mode inproc``). It sits above ``server_app`` and ``client_app`` and is the only package
that imports both."""
