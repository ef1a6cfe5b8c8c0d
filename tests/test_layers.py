"""The tree's layers hold: no module imports from a layer below its own (docs/design.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import shortterm

ROOT = Path(shortterm.__file__).parent
# model → pure → tiers → facade → surfaces, as the "Where things are" table lists them.
LAYER = {
    "model": 0,
    "prompt": 1,
    "tool": 1,
    "intent": 1,
    "store": 2,
    "cache": 2,
    "memory": 3,
    "cli": 4,
    "sidecar": 4,
    "transfer": 4,
    "integrations": 4,
    "bench": 4,
    "fake_model": 4,  # `shortterm fake-model`: a stand-alone server, a surface like the sidecar
}


def _imported_folders(path: Path) -> set[str]:
    """The top-level folders of shortterm that ``path`` imports from, type-only imports too."""
    package = list(path.relative_to(ROOT).parent.parts)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "shortterm":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [target[0]] if target else [a.name for a in node.names]
            found.update(names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "shortterm" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_every_folder_is_in_a_layer() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYER)


def test_no_module_imports_from_a_lower_layer() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        own = path.relative_to(ROOT).parts[0]
        if own not in LAYER:
            continue  # shortterm/__init__.py: the public names, from every layer
        for folder in _imported_folders(path):
            if folder in LAYER and LAYER[folder] > LAYER[own]:
                upward.append(f"{path.relative_to(ROOT)} imports shortterm.{folder}")
    assert upward == []


# Same-layer folders that must not know each other, and the one way a pair may go:
# (importer, imported) pairs that are forbidden.
FORBIDDEN = {
    ("store", "cache"),
    ("cache", "store"),
    ("tool", "prompt"),  # prompt may use tool (its name, slugs, categories), never back
}


def test_no_forbidden_same_layer_import() -> None:
    crossing = []
    for path in sorted(ROOT.rglob("*.py")):
        own = path.relative_to(ROOT).parts[0]
        for folder in _imported_folders(path):
            if (own, folder) in FORBIDDEN:
                crossing.append(f"{path.relative_to(ROOT)} imports shortterm.{folder}")
    assert crossing == []


SURFACES = {folder for folder, layer in LAYER.items() if layer == LAYER["cli"]}
# What a surface may read of the memory's tiers: their kind (one process's or shared), to choose
# its own machinery (the sidecar's turn registry, the distiller's schedule).
TIER_KIND = {"shared"}


def _tier_uses(source: str, name: str) -> list[str]:
    """``x.store.<name>`` / ``x.cache.<name>`` / ``x.tiers.<name>`` in a module: a reach past
    the facade into the tiers behind it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr in ("store", "cache", "tiers")
            and node.attr not in TIER_KIND
        ):
            found.append(f"{name}:{node.lineno} .{node.value.attr}.{node.attr}")
    return found


def test_surfaces_call_no_tier_method() -> None:
    """Routes, commands and adapters go through the facade (one call each); a tier's methods
    are the engine's to call."""
    reaches = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] in SURFACES:
            reaches.extend(_tier_uses(path.read_text("utf-8"), str(path.relative_to(ROOT))))
    assert reaches == []


def test_the_surface_rule_sees_a_reach() -> None:
    """The rule above would see the reach it forbids (it is not vacuous)."""
    source = "async def f(memory):\n    with memory.cache.operation():\n        pass\n"
    assert _tier_uses(source, "probe.py") == ["probe.py:2 .cache.operation"]
    assert _tier_uses("def f(memory):\n    return memory.cache.shared\n", "probe.py") == []
