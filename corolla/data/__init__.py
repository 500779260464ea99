"""Datasets, filters, splits and partitions (see :mod:`corolla.data.federation`)."""

from corolla.data.federation import Federation, build_federation, data_key, edge_federation
from corolla.data.sources import DatasetFileError, locate

__all__ = ["Federation", "build_federation", "data_key", "edge_federation", "DatasetFileError", "locate"]
