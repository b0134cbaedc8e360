"""Persistence: the daemon's state file (SQLite) and its lock.

Infrastructure, not vocabulary: it sits beside ``ports``, above ``core``
(whose types it stores), so every layer that keeps state (execute, runtime,
service, cli) can import it and ``core`` stays free of I/O.
"""
