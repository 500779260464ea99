"""Corolla's ServerApp: run config -> strategy -> phases -> results and checkpoints."""
