"""Method name -> strategy class."""

from __future__ import annotations


def strategy_class(method: str):
    from strategies.fedavg import FCF, FedAvg, Local
    from strategies.fedcia import FedCIAGFCF

    table = {"fedavg": FedAvg, "fcf": FCF, "local": Local, "fedcia": FedCIAGFCF}
    if method not in table:
        raise ValueError(f"unknown method '{method}'; known: {sorted(table)}")
    return table[method]
