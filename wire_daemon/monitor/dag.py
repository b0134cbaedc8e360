"""Read a DAGMan input file (``.dag``) as Pegasus and other tools write it.

What is read (keywords are case-insensitive, as in DAGMan):

* node definitions: ``JOB name submit [DIR d] [NOOP] [DONE]`` (also an inline
  ``JOB name {`` ... ``}`` submit description), ``DATA`` (old alias of JOB),
  ``FINAL``, ``SERVICE``, ``PROVISIONER``, ``SUBDAG EXTERNAL name dagfile [DIR d]
  [NOOP] [DONE]``, ``SPLICE name dagfile [DIR d]``;
* ``PARENT p1 p2 ... CHILD c1 c2 ...``;
* per node: ``RETRY name n [UNLESS-EXIT v]``, ``PRIORITY name p``, ``CATEGORY name c``,
  ``VARS name [PREPEND|APPEND] k="v" ...``, ``SCRIPT [DEFER s t] [DEBUG f t] PRE|POST|HOLD
  name exe args``, ``PRE_SKIP name code``, ``DONE name`` (rescue DAGs); ``ALL_NODES``
  in place of a node name applies to every node that has no value of its own;
* whole-DAG settings: ``MAXJOBS cat n``, ``CONFIG``, ``DOT``, ``NODE_STATUS_FILE``,
  ``JOBSTATE_LOG``, ``SAVE_POINT_FILE``; recognised and kept as raw lines:
  ``ABORT-DAG-ON``, ``SET_JOB_ATTR``, ``ENV``, ``REJECT``, ``CONNECT``, ``PIN_IN``,
  ``PIN_OUT``, ``INCLUDE``, ``SUBMIT-DESCRIPTION``;
* ``#`` comments, blank lines, and lines continued with a trailing backslash
  (a comment line never continues), as DAGMan's own reader does;
* like DAGMan, two passes: PARENT may name nodes defined further down.

Bad input. An unknown keyword or a malformed line that does not change the
graph (``RETRY x abc``) gives one warning naming file:line and is skipped. What
would make the graph wrong raises ``InputError`` naming the file and line:
an edge to an unknown node, a cycle (the PARENT line of one edge on it and the
cycle's nodes), a node defined twice, a reserved node name (PARENT, CHILD,
ALL_NODES), a PARENT line without CHILD, a node line without its file, an
unterminated inline submit description, an unreadable file, a splice that
includes itself. A *partial rescue DAG* (``# Rescue DAG version: ... (partial)``)
names nodes of its parent DAG, so there unknown nodes are accepted.

Splices are expanded (``expand_splices=True``, the default): the splice's nodes
become ``splice+node``; an edge to the splice goes to its nodes without parents
inside it, an edge from it leaves from its nodes without children inside it.
"""

from __future__ import annotations

import gc
import os
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from wire_daemon.core.errors import InputError
from wire_daemon.monitor.problems import Limited, Problems
from wire_daemon.monitor.safe_open import DAG_LIMIT, read_regular

ALL_NODES = "ALL_NODES"
CYCLE_NODES_SHOWN = 8  # a cycle's warning names this many of its nodes, then its length
_NODE_KEYWORDS = {
    "JOB": "job",
    "DATA": "job",
    "FINAL": "final",
    "SERVICE": "service",
    "PROVISIONER": "provisioner",
    "SUBDAG": "subdag",
    "SPLICE": "splice",
}
_SETTINGS = {
    "CONFIG": "config",
    "DOT": "dot",
    "NODE_STATUS_FILE": "node_status_file",
    "JOBSTATE_LOG": "jobstate_log",
    "SAVE_POINT_FILE": "save_point_file",
}
_KEPT_RAW = frozenset(
    {"ABORT-DAG-ON", "SET_JOB_ATTR", "ENV", "REJECT", "CONNECT", "PIN_IN", "PIN_OUT", "INCLUDE", "SUBMIT-DESCRIPTION"}
)
_RESERVED = frozenset({"PARENT", "CHILD", ALL_NODES})
_PARTIAL_RESCUE = re.compile(r"#\s*Rescue DAG version:.*\(partial\)", re.IGNORECASE)
_SCRIPT = re.compile(
    r"SCRIPT(?P<opts>(?:\s+(?:DEFER\s+\S+\s+\S+|DEBUG\s+\S+\s+\S+))*)\s+(?P<kind>PRE|POST|HOLD)\s+"
    r"(?P<node>\S+)\s+(?P<exe>\S+)(?:\s+(?P<args>.*))?$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Script:
    kind: str  # PRE | POST | HOLD
    executable: str
    arguments: str = ""
    line: int = 0


@dataclass(slots=True)
class DagNode:
    name: str
    kind: str  # job | final | service | provisioner | subdag | splice
    file: str | None  # submit file (JOB...), DAG file (SUBDAG, SPLICE); None for an inline description
    line: int
    directory: str | None = None
    noop: bool = False
    done: bool = False
    retry: int | None = None
    retry_unless_exit: int | None = None
    priority: int | None = None
    category: str | None = None
    vars: tuple[tuple[str, str], ...] = ()
    scripts: tuple[Script, ...] = ()
    pre_skip: int | None = None
    inline_submit: str | None = None

    @property
    def submit_path(self) -> str | None:
        """The file relative to the DAG's directory (DIR applied)."""
        if self.file is None:
            return None
        return os.path.join(self.directory, self.file) if self.directory else self.file


@dataclass
class DagFile:
    """A parsed ``.dag``: nodes in file order and edges as index arrays."""

    path: str
    names: list[str] = field(default_factory=list)
    nodes: list[DagNode] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    edge_parent: array = field(default_factory=lambda: array("i"))
    edge_child: array = field(default_factory=lambda: array("i"))
    edge_line: array = field(default_factory=lambda: array("i"))
    maxjobs: dict[str, int] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # config, dot, node_status_file, ...
    raw_commands: list[tuple[int, str]] = field(default_factory=list)  # kept as written
    done: set[str] = field(default_factory=set)  # DONE marks (JOB ... DONE and DONE lines)
    retry_marks: dict[str, int] = field(default_factory=dict)  # RETRY lines of partial rescue DAGs
    partial: bool = False

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_edges(self) -> int:
        return len(self.edge_parent)

    def node(self, name: str) -> DagNode:
        return self.nodes[self.index[name]]

    def edges(self) -> Iterator[tuple[str, str]]:
        for p, c in zip(self.edge_parent, self.edge_child):
            yield self.names[p], self.names[c]

    def parents_of(self) -> list[list[str]]:
        """For every node (file order), its parents' names."""
        out: list[list[str]] = [[] for _ in self.nodes]
        for p, c in zip(self.edge_parent, self.edge_child):
            out[c].append(self.names[p])
        return out


def parse_dag(path: str | os.PathLike[str], problems: Problems | None = None, expand_splices: bool = True) -> DagFile:
    """Parse one DAG file; see the module docstring for what raises and what warns."""
    with Limited(problems or Problems()) as limited:  # a file of a million bad lines: 100 warnings and a count
        return _Parser(os.fspath(path), limited, expand_splices, ()).parse()


def rescue_dags(dag_path: str | os.PathLike[str]) -> list[Path]:
    """The rescue DAGs written next to ``dag_path`` (``<dag>.rescueNNN``), oldest first."""
    dag = Path(dag_path)
    found = [p for p in dag.parent.glob(dag.name + ".rescue*") if p.name[len(dag.name) + 7 :].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(dag.name) + 7 :]))


def apply_rescue(dag: DagFile, rescue: DagFile, problems: Problems | None = None) -> None:
    """Mark the nodes a rescue DAG lists as DONE (DAGMan skips them when it runs the DAG again)."""
    problems = problems or Problems()
    for name in sorted(rescue.done):
        if name in dag.index:
            dag.nodes[dag.index[name]].done = True
            dag.done.add(name)
        else:
            problems.warn(rescue.path, f"DONE names node {name!r}, unknown in {dag.path}")


# -- the parser -----------------------------------------------------------------


class _Line(NamedTuple):  # a tuple: a million of them must be cheap to make
    number: int
    text: str
    keyword: str
    inline: str | None = None  # the inline submit description that follows a JOB line


class _Parser:
    def __init__(self, path: str, problems: Problems, expand: bool, stack: tuple[str, ...]) -> None:
        self.path = path
        self.problems = problems
        self.expand = expand
        self.stack = stack + (os.path.realpath(path),)
        self.dag = DagFile(path)
        self.defaults: dict[str, object] = {}
        self.splices: dict[str, DagFile] = {}
        self._seen_edges: set[int] = set()

    def parse(self) -> DagFile:
        # The cyclic GC would rescan the millions of (acyclic) objects a large DAG makes,
        # again and again: it took ~45% of the time at 300k nodes (benchmarks/monitor_ingest.py).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._parse()
        finally:
            if enabled:
                gc.enable()

    def _parse(self) -> DagFile:
        # Two passes over the text rather than a list of every line: a list of a
        # 1M-node DAG's 6M lines doubled the peak memory of the parse.
        text = _read_text(self.path, self.problems)
        for line in _logical_lines(self.path, text, self.problems):
            if line.keyword in _NODE_KEYWORDS:
                self._define(line)
            elif line.keyword == "#" and _PARTIAL_RESCUE.match(line.text):
                self.dag.partial = True  # only pass 2 needs it
        for line in _logical_lines(self.path, text, self.problems):
            if line.keyword != "#" and line.keyword not in _NODE_KEYWORDS:
                self._command(line)
        self._apply_defaults()
        _check_acyclic(self.dag)
        return self.dag

    # -- pass 1: nodes ----------------------------------------------------------

    def _define(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        kind = _NODE_KEYWORDS[line.keyword]
        if kind == "subdag":
            if len(tokens) < 2 or tokens[1].upper() != "EXTERNAL":
                raise self._error(line, "SUBDAG must be followed by EXTERNAL")
            tokens = tokens[1:]
        if len(tokens) < 2 or (len(tokens) < 3 and line.inline is None):
            raise self._error(line, f"{line.keyword} needs a node name and a file")
        name = tokens[1]
        self._check_name(line, name)
        file = None if line.inline is not None else _unquote(tokens[2])
        node = DagNode(name, kind, file, line.number, inline_submit=line.inline)
        self._node_options(line, node, tokens[3:] if line.inline is None else tokens[2:])
        if kind == "splice" and self.expand:
            self._splice(line, node)
            return
        self._add_node(line, node)

    def _node_options(self, line: _Line, node: DagNode, rest: list[str]) -> None:
        i = 0
        while i < len(rest):
            word = rest[i].upper()
            if word == "DIR" and i + 1 < len(rest):
                node.directory = _unquote(rest[i + 1])
                i += 2
                continue
            if word == "NOOP":
                node.noop = True
            elif word == "DONE":
                node.done = True
                self.dag.done.add(node.name)
            elif word != "{":
                self.problems.warn(self.path, f"unknown option {rest[i]!r} on {line.keyword} line ignored", line.number)
            i += 1

    def _check_name(self, line: _Line, name: str) -> None:
        if name.upper() in _RESERVED:
            raise self._error(line, f"node name {name!r} is a reserved word")
        if name in self.dag.index or name in self.splices:
            raise self._error(line, f"node {name!r} is defined twice")

    def _add_node(self, line: _Line, node: DagNode) -> None:
        if node.name in self.dag.index:
            raise self._error(line, f"node {node.name!r} is defined twice")
        self.dag.index[node.name] = len(self.dag.nodes)
        self.dag.names.append(node.name)
        self.dag.nodes.append(node)

    def _splice(self, line: _Line, node: DagNode) -> None:
        base = os.path.dirname(self.path)
        target = os.path.join(base, node.directory or "", node.file or "")
        if os.path.realpath(target) in self.stack:
            raise self._error(line, f"splice {node.name!r} includes itself ({node.file})")
        inner = _Parser(target, self.problems, True, self.stack).parse()
        self.splices[node.name] = inner
        offset = len(self.dag.nodes)
        for sub in inner.nodes:
            sub.name = f"{node.name}+{sub.name}"
            if node.directory:
                sub.directory = os.path.join(node.directory, sub.directory) if sub.directory else node.directory
            self._add_node(line, sub)
        for p, c in zip(inner.edge_parent, inner.edge_child):
            self._add_edge(p + offset, c + offset, line.number)

    # -- pass 2: everything else ---------------------------------------------------

    def _command(self, line: _Line) -> None:
        handler = _HANDLERS.get(line.keyword)
        if handler is not None:
            handler(self, line)
        elif line.keyword in _SETTINGS:
            self._setting(line)
        elif line.keyword in _KEPT_RAW:
            self.dag.raw_commands.append((line.number, line.text))
        else:
            self.problems.warn(self.path, f"unknown keyword {line.text.split()[0]!r}; line skipped", line.number)

    def _parent(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        upper = [t.upper() for t in tokens]
        if "CHILD" not in upper:
            raise self._error(line, "PARENT line without CHILD")
        split = upper.index("CHILD")
        parents = tokens[1:split]
        children = [t for t, u in zip(tokens[split + 1 :], upper[split + 1 :]) if u != "CHILD"]
        if not parents or not children:
            raise self._error(line, "PARENT line needs at least one parent and one child")
        for p in self._endpoints(line, parents, as_parent=True):
            for c in self._endpoints(line, children, as_parent=False):
                if p == c:
                    raise self._error(line, f"cycle: node {self.dag.names[p]!r} is its own parent")
                self._add_edge(p, c, line.number)

    def _endpoints(self, line: _Line, names: list[str], as_parent: bool) -> list[int]:
        out: list[int] = []
        for name in names:
            if name in self.splices:
                out.extend(self._splice_ends(name, as_parent))
            elif name in self.dag.index:
                out.append(self.dag.index[name])
            elif not self.dag.partial:
                raise self._error(line, f"PARENT/CHILD names unknown node {name!r}")
        return out

    def _splice_ends(self, splice: str, as_parent: bool) -> list[int]:
        inner = self.splices[splice]
        # as a child: its nodes with no parent inside it; as a parent: those with no child inside it
        inside = set(inner.edge_parent if as_parent else inner.edge_child)
        members = [i for i in range(inner.n_nodes) if i not in inside]
        return [self.dag.index[inner.nodes[i].name] for i in members]  # names carry the splice prefix

    def _add_edge(self, parent: int, child: int, number: int) -> None:
        key = (parent << 32) | child
        if key in self._seen_edges:
            return
        self._seen_edges.add(key)
        self.dag.edge_parent.append(parent)
        self.dag.edge_child.append(child)
        self.dag.edge_line.append(number)

    def _retry(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        count = _int_at(tokens, 2)
        if count is None or count < 0:
            return self._bad(line, "RETRY needs a node and a non-negative count")
        unless = None
        if len(tokens) >= 5 and tokens[3].upper() == "UNLESS-EXIT":
            unless = _int_at(tokens, 4)
        for node in self._targets(line, tokens, "retry"):
            node.retry, node.retry_unless_exit = count, unless
        if self.dag.partial and tokens[1] not in self.dag.index and tokens[1].upper() != ALL_NODES:
            self.dag.retry_marks[tokens[1]] = count
        if tokens[1].upper() == ALL_NODES:
            self.defaults["retry"] = (count, unless)

    def _priority(self, line: _Line) -> None:
        self._int_setting(line, "priority", signed=True)

    def _pre_skip(self, line: _Line) -> None:
        self._int_setting(line, "pre_skip", signed=False)

    def _int_setting(self, line: _Line, attr: str, signed: bool) -> None:
        tokens = _tokens(line, self)
        value = _int_at(tokens, 2)
        if value is None or (not signed and value < 0):
            return self._bad(line, f"{line.keyword} needs a node and an integer")
        for node in self._targets(line, tokens, attr):
            setattr(node, attr, value)
        if tokens[1].upper() == ALL_NODES:
            self.defaults[attr] = value

    def _category(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        if len(tokens) < 3:
            return self._bad(line, "CATEGORY needs a node and a category")
        for node in self._targets(line, tokens, "category"):
            node.category = tokens[2]
        if tokens[1].upper() == ALL_NODES:
            self.defaults["category"] = tokens[2]

    def _vars(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        if len(tokens) < 3:
            return self._bad(line, 'VARS needs a node and name="value" pairs')
        pairs = []
        for token in tokens[2:]:
            if token.upper() in ("PREPEND", "APPEND"):
                continue
            name, eq, value = token.partition("=")
            if not eq or not name:
                self.problems.warn(self.path, f'VARS item {token!r} is not name="value"; skipped', line.number)
                continue
            pairs.append((name, value))
        for node in self._targets(line, tokens, None):
            node.vars = node.vars + tuple(pairs)
        if tokens[1].upper() == ALL_NODES:
            self.defaults["vars"] = tuple(self.defaults.get("vars", ())) + tuple(pairs)  # type: ignore[arg-type]

    def _script(self, line: _Line) -> None:
        match = _SCRIPT.match(line.text)
        if not match:
            return self._bad(line, "SCRIPT needs PRE|POST|HOLD, a node and an executable")
        script = Script(match["kind"].upper(), match["exe"], (match["args"] or "").strip(), line.number)
        tokens = ["SCRIPT", match["node"]]
        for node in self._targets(line, tokens, None):
            node.scripts = tuple(s for s in node.scripts if s.kind != script.kind) + (script,)
        if match["node"].upper() == ALL_NODES:
            self.defaults.setdefault("scripts", {})[script.kind] = script  # type: ignore[index]

    def _done(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        if len(tokens) < 2:
            return self._bad(line, "DONE needs a node name")
        self.dag.done.add(tokens[1])
        for node in self._targets(line, tokens, None):
            node.done = True

    def _maxjobs(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        value = _int_at(tokens, 2)
        if value is None:
            return self._bad(line, "MAXJOBS needs a category and an integer")
        self.dag.maxjobs[tokens[1]] = value

    def _setting(self, line: _Line) -> None:
        tokens = _tokens(line, self)
        if len(tokens) < 2:
            return self._bad(line, f"{line.keyword} needs a value")
        self.dag.settings[_SETTINGS[line.keyword]] = _unquote(tokens[1])

    def _targets(self, line: _Line, tokens: list[str], attr: str | None) -> list[DagNode]:
        """The node a per-node command names (none for ALL_NODES: applied at the end)."""
        if len(tokens) < 2 or tokens[1].upper() == ALL_NODES:
            return []
        name = tokens[1]
        if name in self.dag.index:
            return [self.dag.nodes[self.dag.index[name]]]
        if name in self.splices:
            return []
        if not self.dag.partial:
            self.problems.warn(self.path, f"{line.keyword} names unknown node {name!r}; line skipped", line.number)
        return []

    def _apply_defaults(self) -> None:
        if not self.defaults:
            return
        for node in self.dag.nodes:
            if "retry" in self.defaults and node.retry is None:
                node.retry, node.retry_unless_exit = self.defaults["retry"]  # type: ignore[misc]
            for attr in ("priority", "category", "pre_skip"):
                if attr in self.defaults and getattr(node, attr) is None:
                    setattr(node, attr, self.defaults[attr])
            if "vars" in self.defaults:
                node.vars = tuple(self.defaults["vars"]) + node.vars  # type: ignore[arg-type]
            for kind, script in dict(self.defaults.get("scripts", {})).items():  # type: ignore[call-overload]
                if all(s.kind != kind for s in node.scripts):
                    node.scripts = node.scripts + (script,)

    def _bad(self, line: _Line, message: str) -> None:
        self.problems.warn(self.path, f"{message}; line skipped", line.number)

    def _error(self, line: _Line, message: str) -> InputError:
        return InputError(self.path, message, str(line.number))


_HANDLERS = {
    "PARENT": _Parser._parent,
    "RETRY": _Parser._retry,
    "PRIORITY": _Parser._priority,
    "PRE_SKIP": _Parser._pre_skip,
    "CATEGORY": _Parser._category,
    "VARS": _Parser._vars,
    "SCRIPT": _Parser._script,
    "DONE": _Parser._done,
    "MAXJOBS": _Parser._maxjobs,
}


# -- reading lines ----------------------------------------------------------------


def _read_text(path: str, problems: Problems) -> str:
    try:
        data = read_regular(path, DAG_LIMIT)
    except OSError as exc:
        raise InputError(path, f"cannot read the DAG file ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        problems.warn(path, "bytes that are not UTF-8 replaced", line)
        return data.decode("utf-8", errors="replace")


def _logical_lines(path: str, text: str, problems: Problems) -> Iterator[_Line]:
    """Join continued lines, drop blanks, collect inline submit descriptions.

    Comments are kept (keyword ``#``) only when they may mark a partial rescue DAG.
    """
    physical = enumerate(_physical_lines(text), 1)
    for number, raw in physical:
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            if "Rescue" in line:
                yield _Line(number, line, "#")
            continue
        while line[-1] == "\\":
            following = next(physical, None)
            if following is None:
                break
            line = (line[:-1] + " " + following[1].strip()).strip()
            if not line:
                break
        if not line:
            continue
        keyword = line.split(None, 1)[0].upper()
        if line[-1] == "{" and keyword in ("JOB", "FINAL", "SUBMIT-DESCRIPTION"):
            yield _Line(number, line, keyword, _inline_block(path, physical, number))
            continue
        yield _Line(number, line, keyword)


_CHUNK = 1 << 20


def _physical_lines(text: str) -> Iterator[str]:
    """``text.splitlines()``, a megabyte at a time: the same lines without a list of all of them.

    Chunks end just after a ``\\n``, so a ``\\r\\n`` pair is never cut.
    """
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start + _CHUNK)
        end = size if end < 0 else end + 1
        yield from text[start:end].splitlines()
        start = end


def _inline_block(path: str, physical: Iterator[tuple[int, str]], start: int) -> str:
    body: list[str] = []
    for _, raw in physical:
        text = raw.strip()
        if text.startswith("}"):
            return "\n".join(body)
        body.append(text)
    raise InputError(path, "inline submit description has no closing '}'", str(start))


_TOKEN = re.compile(r'(?:[^\s"]|"(?:[^"\\]|\\.)*")+')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _tokens(line: _Line, parser: _Parser) -> list[str]:
    """Blank-separated words; double-quoted parts may hold blanks and lose their quotes."""
    text = line.text
    if '"' not in text:
        return text.split()
    if (text.count('"') - text.count('\\"')) % 2:
        parser.problems.warn(parser.path, "unbalanced double quote", line.number)
    return [_QUOTED.sub(_unescape, token) for token in _TOKEN.findall(text)]


def _unescape(match: re.Match[str]) -> str:
    return match.group(1).replace('\\"', '"')


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def _int_at(tokens: list[str], i: int) -> int | None:
    """An integer DAGMan can hold (32 bits); None for anything else, an over-long one included."""
    try:
        value = int(tokens[i])
    except (IndexError, ValueError):
        return None
    return value if -(2**31) <= value < 2**31 else None


# -- cycles -----------------------------------------------------------------------


def _check_acyclic(dag: DagFile) -> None:
    n = dag.n_nodes
    waiting = [0] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for p, c in zip(dag.edge_parent, dag.edge_child):
        children[p].append(c)
        waiting[c] += 1
    ready = [i for i in range(n) if waiting[i] == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if seen < n:
        _raise_cycle(dag, waiting)


def _raise_cycle(dag: DagFile, waiting: list[int]) -> None:
    stuck = {i for i, w in enumerate(waiting) if w > 0}
    parents: dict[int, list[tuple[int, int]]] = {}
    for p, c, line in zip(dag.edge_parent, dag.edge_child, dag.edge_line):
        if p in stuck and c in stuck:
            parents.setdefault(c, []).append((p, line))
    node = min(stuck)
    path: list[int] = []
    lines: list[int] = []
    position: dict[int, int] = {}
    while node not in position:  # walk up through stuck parents until a node repeats
        position[node] = len(path)
        path.append(node)
        node, line = parents[node][0]
        lines.append(line)
    cycle = path[position[node] :][::-1]
    raise InputError(dag.path, f"the DAG has a cycle: {_cycle_words(dag, cycle)}", str(lines[position[node]]))


def _cycle_words(dag: DagFile, cycle: list[int]) -> str:
    """``a -> b -> c -> a``; a long cycle as its first nodes and its length (one line, not megabytes)."""
    if len(cycle) <= CYCLE_NODES_SHOWN:
        return " -> ".join(dag.names[i] for i in cycle + [cycle[0]])
    head = " -> ".join(dag.names[i] for i in cycle[:CYCLE_NODES_SHOWN])
    return f"{head} -> ... ({len(cycle):,} nodes)"
