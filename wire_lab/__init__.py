"""Research and test tooling around wire-daemon.

Evaluation, the live-writing emulator, the real-pool harness. Not installed with the daemon.
"""
