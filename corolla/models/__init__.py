"""Models shared by every method (one implementation each).

Interface (RecBole-like, ``corolla.models.base``): ``loss(batch)``, ``score(users, items)``,
``full_sort_scores(users)``; parameters named ``user.*`` are private to the logical client, all
others are *shared* (the item table and, for NCF, the MLP tower) and are what
parameter-averaging methods exchange. ``corolla.models.factory`` builds and initialises them.

Nothing is imported here, so that ``corolla.models.gfcf`` loads without torch (a GF-CF ClientApp
process never imports it).
"""
