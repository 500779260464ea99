"""Method name -> client class (client side of each strategy)."""

from __future__ import annotations


def client_class(method: str, model: str = "mf"):
    if model == "gfcf":
        from client_app.fedcia import GFCFClient, LocalGFCFClient

        return LocalGFCFClient if method == "local" else GFCFClient
    if method == "fedcia":
        from client_app.fedcia import FedCIAParamClient

        return FedCIAParamClient
    if method in ("fedavg", "fcf"):
        from client_app.mf import FedAvgClient

        return FedAvgClient
    if method == "local":
        from client_app.mf import LocalClient

        return LocalClient
    raise ValueError(f"unknown method '{method}'")
