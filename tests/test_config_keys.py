"""Every config key is read somewhere: a key nothing reads is a setting that silently does
nothing (``asl.seed_questions`` was one). The check is grep-like, over the package's syntax
trees: a field of a settings dataclass counts as read when its name is accessed as an
attribute (``cfg.asl.attempts``) or through ``getattr``/``hasattr`` with a literal name,
anywhere in the package outside the dataclass's own body (its defaults, help texts and
methods do not count). Range rules (``"asl.attempts": at_least(2)``) are strings, so they
do not count either.

One allow-list, derived rather than typed: the built-in method sections of
:class:`TrainConfig` (``wia``, ``aiw``, ``seal``, ``agent_r``, ``asl``) are read by
``roleagent.trainer.methods`` as ``getattr(cfg, section)`` for each key of its ``METHODS``
registry, which a literal-name search cannot see; the test checks that this read exists.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import typing
from pathlib import Path

import roleagent
from roleagent.config import TrainConfig
from roleagent.trainer.methods import METHODS

PKG = Path(roleagent.__file__).resolve().parent


def settings_classes(root: type = TrainConfig) -> list[type]:
    """The dataclasses reachable from ``root`` through its fields, ``root`` first."""
    found: list[type] = []

    def visit(cls: type) -> None:
        if cls in found:
            return
        found.append(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                visit(hints[f.name])

    visit(root)
    return found


def reads() -> dict[str, list[tuple[Path, int]]]:
    """Attribute names read in the package, with where: ``x.name`` (loaded, not assigned)
    and ``getattr(x, "name")`` / ``hasattr(x, "name")``."""
    out: dict[str, list[tuple[Path, int]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            if name is not None:
                out.setdefault(name, []).append((path.resolve(), node.lineno))
    return out


def unread_keys() -> list[str]:
    read = reads()
    unread = []
    for cls in settings_classes():
        lines, start = inspect.getsourcelines(cls)
        where = Path(inspect.getsourcefile(cls)).resolve()
        inside = range(start, start + len(lines))
        for f in dataclasses.fields(cls):
            if cls is TrainConfig and f.name in METHODS:
                continue  # read by roleagent.trainer.methods as getattr(cfg, section) (checked below)
            if not [(p, n) for p, n in read.get(f.name, []) if not (p == where and n in inside)]:
                unread.append(f"{cls.__name__}.{f.name}")
    return unread


def test_every_config_key_is_read_somewhere():
    assert len(settings_classes()) >= 10  # the walk reaches the sections, not just the root
    assert unread_keys() == []


def test_method_sections_are_read_through_the_registry():
    source = (PKG / "trainer" / "methods.py").read_text()
    assert "getattr(cfg, section)" in source and "METHODS.items()" in source
    assert set(METHODS) <= {f.name for f in dataclasses.fields(TrainConfig)}


def test_the_check_finds_an_unread_key(monkeypatch):
    """The check itself: a field nothing in the package reads is reported."""

    @dataclasses.dataclass
    class Probe:
        never_read_anywhere_xyz: int = 0

    real = settings_classes
    monkeypatch.setattr(sys.modules[__name__], "settings_classes", lambda root=TrainConfig: [*real(root), Probe])
    assert unread_keys() == ["Probe.never_read_anywhere_xyz"]
