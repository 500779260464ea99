"""Method name -> strategy class."""

from __future__ import annotations


def strategy_class(method: str, model: str = "mf", harness: str = "silo"):
    from strategies import fedca
    from strategies.fedavg import FCF, FedAvg, Local
    from strategies.fedcia import FedCIAGFCF, FedCIAParam

    if method == "fedcia":
        return FedCIAGFCF if model == "gfcf" else FedCIAParam
    if harness == "expanded":
        from strategies.distfedavg import RowAggregation

        return RowAggregation
    if method == "lpsfed" or model == "lgcn":
        from strategies.lpsfed import LPSFed

        return LPSFed
    if harness == "one-user":
        from strategies.ufgraphfr import GraphAggregation

        table = {"fedca": fedca.FedCA, "fedavg": fedca.OneUserFedAvg, "fcf": fedca.OneUserFCF,
                 "fedatt": fedca.OneUserFedAtt, "local": fedca.OneUserLocal, "pfedrec": fedca.PFedRec,
                 "ufgraphfr": GraphAggregation, "gpfedrec": GraphAggregation}
    else:
        table = {"fedavg": FedAvg, "fcf": FCF, "local": Local, "fedatt": fedca.FedAtt}
    if method not in table:
        raise ValueError(f"unknown method '{method}' for harness '{harness}'; known: {sorted(table)}")
    return table[method]
