"""Tell systemd what the daemon is doing (``sd_notify``), when it runs as a unit that listens.

systemd passes a datagram socket in ``NOTIFY_SOCKET`` when the unit has
``NotifyAccess=`` set (our unit: ``NotifyAccess=main``). ``STATUS=`` is the
line ``systemctl status`` shows under the unit, so the safe state is visible
there and not only in the journal. Outside systemd the variable is unset and
every call does nothing. A failed send is never the daemon's problem: the
status line is a courtesy, the loop must not depend on it.

The protocol is one datagram of ``KEY=value`` lines; it is small enough that a
dependency (python-systemd, sdnotify) would cost more than it saves.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(**fields: str) -> bool:
    """Send ``KEY=value`` lines, e.g. ``notify(STATUS="watching 2 workflows")``; True when sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not fields:
        return False
    if address.startswith("@"):  # an abstract socket: a leading NUL byte, not a path
        address = "\0" + address[1:]
    message = "\n".join(f"{key}={_one_line(value)}" for key, value in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message, address)
    except OSError as exc:
        log.debug("sd_notify to %s failed: %s", address, exc)
        return False
    return True


def _one_line(value: str) -> str:
    return " ".join(str(value).split())
