"""Corolla: federated recommendation on Flower.

The ``corolla`` package is the library shared by the ServerApp and the ClientApp: data,
splits and partitions, models, metrics, run configuration and the command line. It never
imports Flower, so everything in it can be tested without a SuperLink.
"""

__version__ = "0.1.0"
