"""The adapter between Corolla's Flower-free message schema (``corolla.messages``) and Flower's
records: the only code besides the two apps' entry points that touches Flower's message types."""
