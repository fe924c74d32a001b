"""The layers of the tree (docs/architecture.md): which package may import which.

Each rule names a package (or module) and either the only project packages it may import
(``may``) or the ones it must not (``must_not``); a pure package imports no I/O library.
Every import statement counts, at module level or inside a function. A rule for a package
that does not exist yet holds as soon as it does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IO_LIBRARIES = frozenset({"sqlite3", "telegram", "websockets", "httpx", "starlette", "uvicorn",
                          "mcp", "psycopg", "psycopg_pool"})

BASE = frozenset({"bot", "bot.errors", "bot.clock", "bot.backoff", "bot.hidden"})
"""Imported by every layer: the package's version, the one exception root, the clock, the
backoff, and what is hidden in text a person reads."""
BOT_APPLICATION = frozenset({"bot.bridge", "bot.store", "bot.tg", "bot.relay_pool", "bot.app"})
"""The bot's use cases, its store, its Telegram adapter and what wires them together."""
SHELL = frozenset({"bot.cli", "bot.demo", "bot.demo_agent", "bot.playground", "bot.testing"})


@dataclass(frozen=True)
class Rule:
    package: str
    may: frozenset[str] | None = None
    """The only project packages (besides itself and :data:`BASE`) it may import."""
    must_not: frozenset[str] = frozenset()
    pure: bool = False


RULES = (
    # Pure: the protocol core, rendering and the bot's domain core.
    Rule("bot.errors", may=frozenset(), pure=True),
    Rule("bot.clock", may=frozenset(), pure=True),
    Rule("bot.backoff", may=frozenset(), pure=True),
    Rule("bot.hidden", may=frozenset(), pure=True),
    Rule("bot.protocol", may=frozenset(), pure=True),
    Rule("bot.core", may=frozenset({"bot.protocol"}), pure=True),
    Rule("bot.render", may=frozenset({"bot.protocol", "bot.core"}), pure=True),
    Rule("bot.agenthost.describe", may=frozenset({"bot.protocol", "bot.render"}), pure=True),
    Rule("bot.agenthost.edits", may=frozenset({"bot.protocol", "bot.render"}), pure=True),
    # Shared adapters and settings.
    Rule("bot.config", may=frozenset({"bot.core", "bot.render", "bot.dburl"})),
    Rule("bot.keyfile", may=frozenset({"bot.protocol"})),
    Rule("bot.storefaults", may=frozenset()),
    Rule("bot.dburl", may=frozenset(), pure=True),
    Rule("bot.pgerrors", may=frozenset()),
    Rule("bot.durable", may=frozenset({"bot.storefaults"})),
    Rule("bot.relay", may=frozenset({"bot.protocol", "bot.signals", "bot.storefaults",
                                     "bot.durable", "bot.dburl", "bot.pgerrors"})),
    # The bot application, bottom up.
    Rule("bot.store", may=frozenset({"bot.core", "bot.storefaults", "bot.durable",
                                     "bot.dburl", "bot.pgerrors"})),
    Rule("bot.bridge", may=frozenset({"bot.core", "bot.protocol", "bot.store", "bot.config"})),
    # The bridge's shared vocabulary and its batches of envelopes sit below its parts.
    Rule("bot.bridge.base", may=frozenset({"bot.core", "bot.protocol", "bot.store",
                                           "bot.config"})),
    Rule("bot.bridge.batch", may=frozenset({"bot.bridge.base", "bot.protocol"})),
    Rule("bot.tg", may=frozenset({"bot.bridge", "bot.core", "bot.protocol", "bot.render",
                                  "bot.config", "bot.relay"})),
    Rule("bot.relay_pool", may=frozenset({"bot.bridge", "bot.relay"})),
    Rule("bot.app", must_not=SHELL | frozenset({"bot.agenthost", "bot.integrations"})),
    # The agent side: neither application imports the other.
    Rule("bot.agenthost", must_not=BOT_APPLICATION | SHELL | frozenset({"bot.integrations"})),
    Rule("bot.integrations", must_not=BOT_APPLICATION | SHELL | frozenset({"bot.agenthost"})),
    Rule("skald_telegram", may=frozenset(), must_not=frozenset({"bot"})),
)

EXCEPTIONS = {
    # The coding-agent integrations may use the agent host's pure describe helpers.
    ("bot.integrations", "bot.agenthost.describe"),
}

SHELL_IMPORTERS = {
    "bot.cli": {"bot.__main__", "bot.cli"},
    # The bridge writes the store; the process wires it, the command line opens it to read;
    # the replicas renew their leases in it (who leads is no state of the bot's).
    "bot.store": {"bot.store", "bot.bridge", "bot.app", "bot.cli", "bot.doctor",
                  "bot.replicas"},
    "bot.testing": {"bot.testing", "bot.demo", "bot.demo_agent", "bot.playground", "bot.cli"},
    # The test agent checks an edit by the agent host's pure rules (bot.agenthost.edits).
    "bot.agenthost": {"bot.agenthost", "bot.integrations", "bot.cli", "bot.testing.agent"},
}
"""Packages that only the listed ones may import (tests and benchmarks are outside)."""


def modules() -> Iterator[tuple[str, Path]]:
    for top in ("bot", "skald_telegram"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(rule: Rule) -> list[str]:
    found = []
    for module, path in modules():
        if not within(module, rule.package):
            continue
        for imported in sorted(imports(path)):
            top = imported.split(".")[0]
            if rule.pure and top in IO_LIBRARIES:
                found.append(f"{module} (pure) imports {imported}")
            if top not in ("bot", "skald_telegram") or within(imported, rule.package):
                continue
            if any(within(imported, allowed) for pkg, allowed in EXCEPTIONS
                   if within(module, pkg)):
                continue
            banned = any(within(imported, name) for name in rule.must_not)
            if banned or (rule.may is not None and not _allowed(imported, rule.may)):
                found.append(f"{module} imports {imported}")
    return found


def _allowed(imported: str, may: frozenset[str]) -> bool:
    if imported in BASE or any(within(imported, base) for base in BASE - {"bot"}):
        return True
    return any(within(imported, allowed) for allowed in may)


@pytest.mark.parametrize("rule", RULES, ids=[rule.package for rule in RULES])
def test_package_imports_only_what_its_layer_allows(rule: Rule) -> None:
    assert violations(rule) == []


@pytest.mark.parametrize("package", sorted(SHELL_IMPORTERS))
def test_package_is_imported_only_by_its_users(package: str) -> None:
    users = SHELL_IMPORTERS[package]
    found = [
        f"{module} imports {imported}"
        for module, path in modules()
        if not any(within(module, user) for user in users)
        for imported in sorted(imports(path))
        if within(imported, package)
    ]
    assert found == []


def test_the_rules_see_the_tree() -> None:
    """The checks would pass vacuously if they found no modules or imports."""
    found = dict(modules())
    assert {"bot.core.model", "bot.store.db", "bot.bridge", "bot.tg.handlers"} <= set(found)
    assert "bot.core.model" in imports(found["bot.core.status"])
    assert violations(Rule("bot.store", may=frozenset())) != []
    assert violations(Rule("bot.store", pure=True)) != []


def project_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``module`` imports, its own parent packages left out."""
    found = set()
    for name in imports(path):
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module and not within(module, name):
            found.add(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of imports in ``graph``, each as the path that closes it."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            if imported in path:
                found.append([*path[path.index(imported):], imported])
            elif imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    return found


def test_no_module_imports_itself_through_others() -> None:
    found = dict(modules())
    graph = {module: project_imports(module, path, set(found)) for module, path in found.items()}
    assert circles(graph) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
