"""FedProx, the method added by the walk-through of docs/adding-a-method.md: its table entry, its
client's proximal term, μ = 0 equal to FedAvg bit for bit, and a run through a real SuperLink."""

import numpy as np
import pytest
import torch

from corolla import methods
from corolla.config import ConfigError, resolve
from launcher.inproc import InProcessTransport, partitions
from server_app.app import run_federation

SMALL = ("num-rounds=2 split=loo partition=blocks num-clients=8 protocol=loo dim=8 loss=bpr "
         "train-samples=per-positive batch-size=1024 lr=0.05 compat-fedcia-metrics=false "
         "select-metric=ndcg@10 patience=0")


def run(tmp_path, name, data_dir, extra):
    t = InProcessTransport(partitions(2, {"data-dir": data_dir}))
    return run_federation(t, {"preset": "fedprox-mf-ml100k", "set": f"{SMALL} {extra}",
                              "out-dir": str(tmp_path / name), "data-dir": data_dir})


def test_fedprox_is_one_table_entry():
    m = methods.find("fedprox", "silo", "mf")
    assert m.client == "client_app.fedprox:FedProxClient" and m.strategy == "strategies.fedavg:FedAvg"
    assert "fedprox-mu" in m.keys
    with pytest.raises(ConfigError, match="fedprox-mu"):
        resolve("fedprox-mf-ml100k", {"fedprox-mu": -1.0})
    with pytest.raises(ConfigError, match="harness"):
        resolve("fedprox-mf-ml100k", {"harness": "one-user"})


def test_proximal_term_by_hand():
    """(μ/2)·Σ‖w − w⁰‖² and its gradient μ(w − w⁰), against hand computation."""
    from client_app.fedprox import FedProxClient

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.item = torch.nn.Embedding(2, 2)
            with torch.no_grad():
                self.item.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))

    from corolla import methods
    from corolla.config import resolve

    c = FedProxClient.__new__(FedProxClient)
    cfg = resolve("fedprox-mf-ml100k", {"fedprox-mu": 0.5})
    c.cfg, c.p, c.device = cfg, methods.run_params(cfg), torch.device("cpu")
    model = Tiny()
    term = c.penalty(model, {"item.weight": np.array([[0.0, 2.0], [3.0, 2.0]], np.float32)})()
    assert float(term) == pytest.approx(0.5 / 2 * (1.0 + 4.0))
    term.backward()
    assert np.allclose(model.item.weight.grad.numpy(), 0.5 * np.array([[1.0, 0.0], [0.0, 2.0]]))
    assert c.penalty(model, {}) is None


def test_mu_zero_equals_fedavg_exactly_and_mu_changes_the_run(tmp_path, data_dir):
    prox0 = run(tmp_path, "prox0", data_dir, "fedprox-mu=0")
    avg = run(tmp_path, "avg", data_dir, "method=fedavg")
    assert prox0["metrics"] == avg["metrics"] and prox0["valid_metrics"] == avg["valid_metrics"]
    assert (prox0["bytes_up"], prox0["bytes_down"]) == (avg["bytes_up"], avg["bytes_down"])
    prox = run(tmp_path, "prox", data_dir, "fedprox-mu=1.0")
    assert prox["metrics"] != avg["metrics"], "a proximal term of μ = 1 did not change the run"
    assert prox["bytes_up"] == avg["bytes_up"]
