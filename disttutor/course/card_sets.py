"""What worked problems and puzzles share: a registry filled by per-chapter modules, loaded on first use.

Kernel side; imports no torch.
"""
from __future__ import annotations

import importlib
import pkgutil


def register_into(registry: dict, what: str, items) -> None:
    """Add ``items`` (each with an ``id``) to ``registry``; the same id twice is an error."""
    for p in items:
        if p.id in registry and registry[p.id] is not p:
            raise ValueError(f"{what} {p.id} defined twice")
        registry[p.id] = p


def load_sets(package, registry: dict) -> dict:
    """Import every module of ``package`` (each registers its chapter's cards) and return ``registry``."""
    for m in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{m.name}")
    return registry
