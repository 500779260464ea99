"""Loaded at the start of every Python process whose PYTHONPATH holds this folder (the SuperNodes
of ``tests/test_e2e.py``'s fault test and the ClientApps they start): installs ``tests/faults.py``
when ``client_app.host`` is imported. Test-only; never on a deployment's path."""
import importlib.abc
import importlib.util
import os
import sys


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "client_app.host":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            try:
                import faults   # tests/faults.py
            finally:
                sys.path.pop(0)
            faults.install(module)
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hook())
