"""Method name -> strategy class."""

from __future__ import annotations


def strategy_class(method: str, model: str = "mf"):
    from strategies.fedavg import FCF, FedAvg, Local
    from strategies.fedcia import FedCIAGFCF, FedCIAParam

    if method == "fedcia":
        return FedCIAGFCF if model == "gfcf" else FedCIAParam
    table = {"fedavg": FedAvg, "fcf": FCF, "local": Local}
    if method not in table:
        raise ValueError(f"unknown method '{method}'; known: {sorted(table)}")
    return table[method]
