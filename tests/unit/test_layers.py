"""The package's layers hold: no import cycle, no lower layer importing an upper one, pytest only at the top.

Read from the source with ``ast`` (nothing is imported), counting every import: inside functions and
under ``TYPE_CHECKING`` too, since a lazy import that closes a cycle or reaches up is still a dependency.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

PACKAGE = ROOT / "pytest_gym"

#: Low -> high. A module belongs to the layer of its subpackage; modules directly in the package are "top".
LAYERS = ("core", "judge", "runfolder", "rollout", "process", "standins", "gym", "runner", "exporters", "report", "top")
#: Third-party roots a layer may import only from the given layer up.
RESTRICTED = {"pytest": "report", "_pytest": "report", "xdist": "top"}


@dataclass(frozen=True)
class Import:
    """One import statement of one module, resolved to the package's module it loads."""

    module: str
    path: Path
    line: int
    text: str
    target: str


def module_names(package: Path) -> dict[str, Path]:
    names = {}
    for path in sorted(package.rglob("*.py")):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        names[name.removesuffix(".__init__")] = path
    return names


def layer_of(module: str, package: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return "top"


def imports_of(module: str, path: Path, names: dict[str, Path]) -> tuple[list[Import], list[Import]]:
    """(imports of the package's own modules, imports of restricted third-party roots) in ``module``."""
    source = path.read_text()
    lines = source.splitlines()
    is_package = path.name == "__init__.py"
    internal: list[Import] = []
    external: list[Import] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        text = lines[node.lineno - 1].strip()
        seen: set[str] = set()
        for target in targets:
            root = target.split(".")[0]
            if root in RESTRICTED and root not in seen:
                seen.add(root)
                external.append(Import(module, path, node.lineno, text, root))
            while target and target not in names:
                target = target.rpartition(".")[0]
            # a module's own parent packages are imported before it anyway: not a dependency of its own
            if target and target != module and not module.startswith(target + ".") and target not in seen:
                seen.add(target)
                internal.append(Import(module, path, node.lineno, text, target))
    return internal, external


def where(imp: Import, root: Path) -> str:
    return f"{imp.path.relative_to(root)}:{imp.line}: {imp.text!r}"


def cycles(edges: dict[str, list[Import]]) -> list[list[Import]]:
    """One closed chain of imports per strongly connected group of modules (Tarjan, then a path around it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imp in edges[module]:
            if imp.target not in index:
                visit(imp.target)
                low[module] = min(low[module], low[imp.target])
            elif imp.target in on_stack:
                low[module] = min(low[module], index[imp.target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return [_chain(group, edges) for group in groups]


def _chain(group: set[str], edges: dict[str, list[Import]]) -> list[Import]:
    """The shortest chain of imports from the group's first module back to itself (breadth first)."""
    start = min(group)
    came: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for imp in edges[module]:
                if imp.target not in group:
                    continue
                if imp.target == start:
                    chain = [imp]
                    while chain[0].module != start:
                        chain.insert(0, came[chain[0].module])
                    return chain
                if imp.target not in came:
                    came[imp.target] = imp
                    following.append(imp.target)
        frontier = following
    raise AssertionError(f"no chain around {sorted(group)}")  # pragma: no cover (Tarjan found one)


def layer_violations(package: Path) -> list[str]:
    """Every broken layering rule in ``package``, each naming the module, the line and the import."""
    names = module_names(package)
    root = package.parent
    edges: dict[str, list[Import]] = {}
    problems: list[str] = []
    for module, path in names.items():
        internal, external = imports_of(module, path, names)
        edges[module] = internal
        layer = layer_of(module, package.name)
        rank = LAYERS.index(layer)
        upward: dict[int, Import] = {}  # per statement, the most specific module it reaches up to
        for imp in internal:
            higher = LAYERS.index(layer_of(imp.target, package.name)) > rank
            if higher and (imp.line not in upward or len(imp.target) > len(upward[imp.line].target)):
                upward[imp.line] = imp
        for imp in upward.values():
            upper = layer_of(imp.target, package.name)
            problems.append(
                f"{where(imp, root)}: {module} (layer {layer}) imports {imp.target} from the upper layer {upper}"
            )
        for imp in external:
            lowest = RESTRICTED[imp.target]
            if rank < LAYERS.index(lowest):
                problems.append(
                    f"{where(imp, root)}: {module} (layer {layer}) imports {imp.target}, "
                    f"allowed only from layer {lowest} up"
                )
    for chain in cycles(edges):
        loop = " -> ".join([chain[0].module, *(imp.target for imp in chain)])
        steps = "; ".join(where(imp, root) for imp in chain)
        problems.append(f"import cycle {loop}: {steps}")
    return problems


def test_pytest_gym_keeps_its_layers() -> None:
    problems = layer_violations(PACKAGE)
    assert not problems, "layering broken:\n" + "\n".join(problems)


def test_every_module_is_in_a_known_layer() -> None:
    """A new subpackage must be given its place in LAYERS, not silently counted as top."""
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages <= set(LAYERS), f"subpackages not in LAYERS: {sorted(subpackages - set(LAYERS))}"


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for directory in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    return package


def test_a_clean_planted_package_passes(tmp_path: Path) -> None:
    package = plant(
        tmp_path,
        {
            "core/a.py": "import json\nfrom . import b\n",
            "core/b.py": "from typing import TYPE_CHECKING\n",
            "gym/c.py": "from pkg.core import a\nfrom ..core.b import TYPE_CHECKING\n",
            "report/d.py": "import pytest\nfrom _pytest.nodes import Item\nfrom pkg.gym import c\n",
            "plugin.py": "import xdist\nimport pytest\nfrom pkg import session\nfrom pkg.report import d\n",
            "session.py": "from pkg.core.a import b\n",
        },
    )
    assert layer_violations(package) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"core/a.py": "def f():\n    from pkg.judge import stats\n", "judge/stats.py": ""},
            "core/a.py:2: 'from pkg.judge import stats': pkg.core.a (layer core) imports pkg.judge.stats "
            "from the upper layer judge",
            id="lazy-import-upward",
        ),
        pytest.param(
            {"gym/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..session import S\n",
             "session.py": ""},
            "gym/a.py:3: 'from ..session import S': pkg.gym.a (layer gym) imports pkg.session from the upper layer top",
            id="type-checking-upward-relative",
        ),
        pytest.param(
            {"exporters/a.py": "import os\nimport pytest\n"},
            "exporters/a.py:2: 'import pytest': pkg.exporters.a (layer exporters) imports pytest, "
            "allowed only from layer report up",
            id="pytest-below-report",
        ),
        pytest.param(
            {"rollout/a.py": "def f():\n    from _pytest.config import Config\n"},
            "rollout/a.py:2: 'from _pytest.config import Config': pkg.rollout.a (layer rollout) imports _pytest",
            id="_pytest-in-function",
        ),
        pytest.param(
            {"report/a.py": "import xdist.remote\n"},
            "report/a.py:1: 'import xdist.remote': pkg.report.a (layer report) imports xdist, allowed only from "
            "layer top up",
            id="xdist-below-top",
        ),
        pytest.param(
            {"judge/a.py": "from pkg.judge import b\n", "judge/b.py": "def f():\n    from . import a\n"},
            "import cycle pkg.judge.a -> pkg.judge.b -> pkg.judge.a: pkg/judge/a.py:1: 'from pkg.judge import b'; "
            "pkg/judge/b.py:2: 'from . import a'",
            id="lazy-cycle-within-a-layer",
        ),
        pytest.param(
            {"collect.py": "from pkg import session\n", "session.py": "import pkg.suitefile\n",
             "suitefile.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.collect import X\n"},
            "import cycle pkg.collect -> pkg.session -> pkg.suitefile -> pkg.collect",
            id="three-module-cycle-at-top",
        ),
    ],
)  # fmt: skip
def test_the_checker_catches_a_planted_violation(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    problems = layer_violations(plant(tmp_path, files))
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected if expected.startswith("import cycle") else f"pkg/{expected}"), problems


def test_the_failure_message_lists_every_violation(tmp_path: Path) -> None:
    package = plant(
        tmp_path,
        {"core/a.py": "import pytest\nfrom pkg import plugin\n", "plugin.py": "from pkg.core import a\n"},
    )
    problems = layer_violations(package)
    assert len(problems) == 3, problems
    assert any("imports pkg.plugin from the upper layer top" in p for p in problems)
    assert any("imports pytest, allowed only from layer report up" in p for p in problems)
    assert any(p.startswith("import cycle pkg.core.a -> pkg.plugin -> pkg.core.a") for p in problems)
