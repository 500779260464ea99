"""Corolla's ClientApp: hosts logical clients on a node and routes messages to their method."""
