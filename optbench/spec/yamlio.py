"""The strict YAML reader of every YAML optbench reads from a user: study files, cluster
profiles and the values of `--set KEY=VALUE` (a study's overrides and `optbench train`'s recipe keys).

Strict: a key given twice is an error (YAML's usual rule is that the last one wins), and a
document whose aliases (*name) expand it beyond MAX_YAML_NODES entries, or nested deeper than
MAX_YAML_DEPTH, is refused before it is built. A study file is at most MAX_STUDY_BYTES of UTF-8. Every problem is one SpecError naming
the source and, where YAML knows it, the line. The loader is a SafeLoader: it builds plain data
only, never an object.

Numbers as people write them: a plain scalar is a float where YAML 1.2's core schema reads one
(`1e-5`, `1E-5`, `3e+2`, `.5`, `5.`, `-.5`, `-1.5e-3`, `.inf`, `-.inf`, `.nan`), which YAML 1.1,
PyYAML's rule, reads as text when it has no dot or an unsigned exponent; and wherever YAML 1.1
reads one (`1_000.5`: `_` separates digits, as in YAML 1.1's integers `1_000` and in Python), so
no study changes meaning. `StrictDumper` writes a text that would read as such a number quoted,
so a spec written back (spec.yaml) reads as it was.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from optbench.errors import SpecError
from optbench.spec.caps import MAX_STUDY_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.2's core-schema float with a dot or an exponent (a plain integer stays YAML's int), its
# digit runs taking YAML 1.1's `_` separators; tried before YAML 1.1's own float rule
CORE_FLOAT = re.compile(
    r"^[-+]?(?=[0-9_]*[.eE])(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?$"
)


def _with_core_floats(cls):
    """`cls` (a loader or dumper) resolving plain scalars by CORE_FLOAT before its own rules."""
    resolvers = {ch: list(rules) for ch, rules in cls.yaml_implicit_resolvers.items()}
    for first in "-+0123456789.":
        resolvers[first] = [(FLOAT_TAG, CORE_FLOAT), *resolvers.get(first, [])]
    cls.yaml_implicit_resolvers = resolvers
    return cls


@_with_core_floats
class StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter: a key given twice is an error (not "the last one wins"),
    and a document whose aliases (*name) expand it beyond MAX_YAML_NODES is refused before it
    is built (a few lines of nested aliases expand to billions of entries), and so is one nested
    deeper than MAX_YAML_DEPTH (composing it would exhaust Python's stack: a RecursionError)."""

    _depth = 0

    def compose_node(self, parent, index):
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.MarkedYAMLError(
                problem=f"nested deeper than {MAX_YAML_DEPTH} levels",
                problem_mark=self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node):
        sizes: dict[int, int] = {}

        def expanded(n) -> int:  # memoized on the node: linear in the lines, not the expansion
            if id(n) not in sizes:
                sizes[id(n)] = 1  # a cycle counts once
                if isinstance(n, yaml.MappingNode):
                    children = [c for pair in n.value for c in pair]
                else:
                    children = n.value if isinstance(n, yaml.SequenceNode) else []
                sizes[id(n)] = 1 + sum(expanded(c) for c in children)
            return sizes[id(n)]

        if expanded(node) > MAX_YAML_NODES:
            raise yaml.MarkedYAMLError(
                problem=f"its aliases expand it beyond {MAX_YAML_NODES} entries",
                problem_mark=node.start_mark,
            )
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                continue  # unhashable: the schema reports it
            if key in seen:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


@_with_core_floats
class StrictDumper(yaml.SafeDumper):
    """YAML's safe dumper, quoting a text that StrictLoader would read as a number ("1e5")."""


def dump_yaml(data, **options) -> str:
    """`data` as YAML that StrictLoader reads back as it is (yaml.safe_dump's `options`)."""
    return yaml.dump(data, Dumper=StrictDumper, **options)


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line: what is wrong and where ("line 3, column 5")."""
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem}{where}"


def read_yaml(text: str, source: Path | str):
    """Parse YAML with StrictLoader; SpecError naming `source`, the problem and its line."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: builds plain data only
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: not valid YAML: {yaml_problem(err)}") from None


def read_study_yaml(path: Path | str, kind: str = "study"):
    """The content of a study YAML file (at most MAX_STUDY_BYTES of UTF-8), not validated yet;
    `kind` names what the file is in errors ("profile": a cluster profile, profiles.py)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such {kind} file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STUDY_BYTES + 1)
    except OSError as err:
        raise SpecError(f"{path}: cannot read the {kind} file ({err.strerror})") from None
    if len(raw) > MAX_STUDY_BYTES:
        raise SpecError(f"{path}: larger than {MAX_STUDY_BYTES} bytes, not a {kind} file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (a {kind} file is UTF-8 YAML)") from None
    return read_yaml(text, path)
