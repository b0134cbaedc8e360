"""The one error the real-pool harness raises: a one-line message saying what failed and where."""

from __future__ import annotations


class RealPoolError(RuntimeError):
    """Setting up or driving the real HTCondor pool failed (chroot, pool, worker or hypervisor)."""
