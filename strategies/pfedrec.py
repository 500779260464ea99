"""PFedRec's server (Zhang et al., IJCAI'23; docs/methods/ufgraphfr.md): the unweighted mean of the uploaded
item tables and score-function biases (PF ``engine.py:66-81``)."""

from __future__ import annotations

from strategies.fedavg import FCF


class PFedRec(FCF):
    """PFedRec server (PF engine.py:66-81): the unweighted mean, key by key, of the uploaded item
    tables and score-function biases; clients load only the item table."""

    def setup(self) -> None:
        from corolla.methods.pfedrec import parse_layers
        from corolla.models.pfedrec import pfedrec_init

        if not self.global_params:
            init = pfedrec_init(self.n_items, self.cfg["dim"], self.cfg["init-std"], self.cfg["seed"],
                                parse_layers(self.p.pfedrec_score_layers))
            self.global_params = {k: init[k] for k in ("item.weight", "affine.bias")}
