"""Real HTCondor pool tests (wire_lab.realpool)."""
