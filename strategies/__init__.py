"""Server side of every method: one module per method, Flower Strategies on a shared base."""
