"""Method name -> strategy class."""

from __future__ import annotations


def strategy_class(method: str):
    from strategies.fedavg import FCF, FedAvg, Local

    table = {"fedavg": FedAvg, "fcf": FCF, "local": Local}
    if method not in table:
        raise ValueError(f"unknown method '{method}'; known: {sorted(table)}")
    return table[method]
