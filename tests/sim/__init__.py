"""Deterministic simulation of the runner core: ``python -m tests.sim --seeds N``."""
