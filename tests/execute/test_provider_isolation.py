"""A cloud is one module: outside ``execute/providers/`` no code of the daemon names a provider.

Adding a cloud is then a module in ``execute/providers/`` and its registry
line; nothing else changes. Docstrings and comments may mention clouds, and
``monitor/hosts.py`` keeps its rule for a cloud's host names.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from wire_daemon.execute.providers import PROVIDERS, quieted_loggers

PACKAGE = Path(__file__).resolve().parents[2] / "wire_daemon"
PROVIDERS_DIR = PACKAGE / "execute" / "providers"
NAMED = re.compile(r"ec2|openstack", re.IGNORECASE)
# Where a name is allowed outside the providers: the host-name rule (ip-10-0-0-1 is an address).
ALLOWED = {("monitor/hosts.py", "_EC2_NAME")}


def _docstring(tokens: list[tokenize.TokenInfo], i: int) -> bool:
    """A string that is a statement of its own: a module's, class's or function's docstring."""
    before = next((t for t in reversed(tokens[:i]) if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    starts = before is None or before.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    return starts and after is not None and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER)


def named_providers(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line: token`` for every identifier or string literal of ``path`` that names a provider."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline))
    where = path.relative_to(root).as_posix()
    return [
        f"{where}:{t.start[0]}: {t.string[:60]}"
        for i, t in enumerate(tokens)
        if t.type in (tokenize.NAME, tokenize.STRING)
        and NAMED.search(t.string)
        and (where, t.string) not in ALLOWED
        and not (t.type == tokenize.STRING and _docstring(tokens, i))
    ]


def test_no_module_outside_the_providers_names_one():
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if PROVIDERS_DIR not in p.parents]
    assert len(outside) > 50  # the walk sees the package
    found = [line for path in outside for line in named_providers(path)]
    assert not found, "a provider named outside execute/providers/:\n" + "\n".join(found)


def test_the_check_sees_a_name_in_code_but_not_in_a_docstring_or_comment(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        '"""A module about EC2."""\n\n# and OpenStack\n\n'
        'def f():\n    """Docs: ec2."""\n    return {"ec2": 1}\n\nKIND = "openstack"\nuse_ec2 = 1\n'
    )
    found = named_providers(source, tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == ['"ec2"', '"openstack"', "use_ec2"]


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_each_provider_declares_itself_in_its_module(name):
    spec = PROVIDERS[name]
    assert spec.config.__module__ == spec.driver.__module__ == spec.probe.__module__
    assert spec.config.__module__ == f"wire_daemon.execute.providers.{name}"
    assert spec.deliveries and spec.extra and spec.sdk and set(spec.loggers) <= set(quieted_loggers())
    fields = set(spec.config.__dataclass_fields__)
    assert not fields & {"slots", "slots_per_instance"}, "the slot count has one place: steering.slots_per_instance"
