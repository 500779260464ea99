"""GPFedRec (Zhang et al., KDD'24, arXiv 2305.07866; docs/methods/ufgraphfr.md): UFGraphFR's harness with a free user vector; the
server builds the user graph from the uploaded item tables and sends each user its
graph-aggregated table and the global one. Reads UFGraphFR's graph keys."""

from corolla.methods.declaration import Method
from corolla.methods.ufgraphfr import check

PROTOCOL = "Every round each user trains and uploads its item table (with noise where set); the server builds a user graph from the uploaded tables and sends each user its graph-aggregated table and the global one. The server sees every user's item table."

METHODS = [
    Method("gpfedrec", "one-user", ("gpfedrec",), "strategies.ufgraphfr:GraphAggregation",
           "client_app.ufgraphfr:GraphClient",
           "user graph from the uploaded item tables; personalised and global tables back",
           "UFGraphFR Table 2 GPFedRec row", check=check, key_owners=("ufgraphfr",),
           strategy_options={"global_table_too": True},
           requires={"optimizer": "sgd"}),
]
