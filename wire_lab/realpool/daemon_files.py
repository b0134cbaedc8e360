"""What the harness takes from wire-daemon itself: the worker user-data renderer and the shipped HTCondor configs.

wire_daemon's package layout is being reorganised: this module is the one
place that names it, imported lazily so the harness loads even while it moves.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

USERDATA_MODULE = "wire_daemon.execute.userdata"  # render_user_data, WorkerConfig, default_template_dir, ADMIN_*
SUBMIT_HOST_CONF = "submit-host.conf"  # the operator's schedd / central manager settings


def userdata_module() -> Any:
    return importlib.import_module(USERDATA_MODULE)


def render_user_data(**fields: Any) -> str:
    """The daemon's rendered cloud-init user-data for ``WorkerConfig(**fields)``."""
    module = userdata_module()
    return str(module.render_user_data(module.WorkerConfig(**fields)))


def worker_admin_key_name() -> str:
    """The name of the workers' administration signing key (the key id of the daemon's token for workers)."""
    return str(userdata_module().ADMIN_KEY_NAME)


def worker_admin_identity(trust_domain: str) -> str:
    """The identity the workers let drain them (their ALLOW_ADMINISTRATOR and revocation expression)."""
    return f"{userdata_module().ADMIN_IDENTITY}@{trust_domain}"


def condor_config_file(name: str) -> Path:
    """A file of the project's ``condor_config/`` (source tree or installed share), found as the renderer finds it."""
    return Path(userdata_module().default_template_dir()) / name
