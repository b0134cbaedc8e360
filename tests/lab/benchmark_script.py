"""Load a benchmark script as a module: the benchmarks are scripts, not package modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(file_name: str, module_name: str) -> ModuleType:
    """``benchmarks/<file_name>`` loaded under ``module_name`` (registered, so its dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
