"""Models shared by every method (one implementation each).

Interface (RecBole-like): ``loss(batch)``, ``score(users, items)``, ``full_sort_scores(users)``;
parameters named ``user.*`` are private to the logical client, all others are *shared* (the
item table and, for NCF, the MLP tower) and are what parameter-averaging methods exchange.
"""

from corolla.models.mf import MF
from corolla.models.ncf import NCF
from corolla.models.base import RecModel, build_model, shared_init

__all__ = ["MF", "NCF", "RecModel", "build_model", "shared_init"]
