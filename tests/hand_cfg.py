"""The one-user harness's keys at their defaults, for tests that build a strategy's config by hand
(FedFast, PerFedRec, pFedGraph): a key added to the harness reaches them without editing each test."""

from corolla.methods.harness import ONE_USER_KEYS

ONE_USER_DEFAULTS = {name: key.default for name, key in ONE_USER_KEYS.items()}
