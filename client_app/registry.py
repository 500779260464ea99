"""Method name -> client class (client side of each strategy)."""

from __future__ import annotations


def client_class(method: str, model: str = "mf", harness: str = "silo"):
    if model == "gfcf":
        from client_app.gfcf import GFCFClient, LocalGFCFClient

        return LocalGFCFClient if method == "local" else GFCFClient
    if harness == "expanded":
        from client_app.distfedavg import ExpandedClient

        return ExpandedClient
    if model == "lgcn":
        from client_app.lpsfed import LPSFedClient

        return LPSFedClient
    if method == "fedcia":
        from client_app.fedcia import FedCIAParamClient

        return FedCIAParamClient
    if harness == "one-user":
        if method == "pfedrec":
            from client_app.pfedrec import PFedRecClient

            return PFedRecClient
        if method in ("ufgraphfr", "gpfedrec"):
            from client_app.ufgraphfr import GraphClient

            return GraphClient
        if method in ("fedca", "fedavg", "fcf", "fedatt", "local"):
            from client_app.fedca import OneUserClient

            return OneUserClient
        raise ValueError(f"unknown method '{method}' for harness 'one-user'")
    if method in ("fedavg", "fcf", "fedatt"):
        from client_app.mf import FedAvgClient

        return FedAvgClient
    if method == "local":
        from client_app.mf import LocalClient

        return LocalClient
    raise ValueError(f"unknown method '{method}'")
