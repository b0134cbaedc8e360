"""What a Pegasus job's name says about it: the planner's auxiliary job kinds, and which run on the
submit host. The trace reader and the submit-dir reader both classify jobs by this one rule."""

from __future__ import annotations

AUX_KINDS = (  # Pegasus job-name prefixes, longest first where one is a prefix of another
    "create_dir",
    "stage_worker",
    "stage_inter",
    "stage_in",
    "stage_out",
    "register",
    "clean_up",
    "cleanup",
    "chmod",
)
LOCAL_KINDS = frozenset({"create_dir", "stage_worker", "register", "cleanup"})  # run on the submit host


def aux_kind(name: str, kinds: tuple[str, ...] = AUX_KINDS) -> str | None:
    """The auxiliary kind ``name`` starts with (``clean_up`` spelled ``cleanup``), or None for a compute job."""
    for kind in kinds:
        if name == kind or name.startswith(kind + "_"):
            return "cleanup" if kind == "clean_up" else kind
    return None
