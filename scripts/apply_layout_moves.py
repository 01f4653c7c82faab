"""Rewrite references to moved modules by the table of ``scripts/layout_moves.txt``.

    python scripts/apply_layout_moves.py FILE [FILE ...]          # rewrite in place
    python scripts/apply_layout_moves.py --check FILE [FILE ...]  # list what would change, exit 1 if any

The package layout of issue 23 (item 5) moved modules whole (``git mv``); a branch written before
the move still names the old modules. This script brings such files up to date, so it is run on
the files a branch adds or edits when it is merged after the move. What it rewrites, in any text
file (Python, TOML, shell, Markdown):

- dotted names: ``from pbkv_server.sim.profiles import X``, ``import pbkv_server.bench_cli``,
  ``"pbkv_server.cli:app"``, ``python -m pbkv_server.backends.sglang.tiny_model``, mock targets
  such as ``"predictor.train.fit"`` (a name that already is a new one is left alone, so running
  the script twice changes nothing);
- ``from PARENT import NAME`` where ``PARENT.NAME`` moved (``from pbkv_server import cli`` becomes
  ``from pbkv_server.cli import server as cli``; the local name is kept);
- relative imports in Python files that resolve to a moved module (``from .profiles import X`` in
  ``pbkv_server/sim/``) become absolute imports of the new module; a moved file's own relative
  imports are resolved from its old place (``--moved-from OLD_PATH`` when one file is given);
- file paths: ``pbkv_server/sim/profiles.py`` and ``predictor/`` (a moved package) in text.

A one-word old name (the package ``predictor``) is rewritten only in import statements, in dotted
names of its listed submodules and as the path ``predictor/``: the bare word is also ordinary
English and the name of a CLI option and an install extra.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "scripts" / "layout_moves.txt"


def load_table(path: Path = TABLE) -> dict[str, str]:
    """``old dotted module -> new dotted module`` from the table file (``#`` starts a comment)."""
    table: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected 'old.module new.module', got {line!r}")
        table[parts[0]] = parts[1]
    return table


def _module_of(path: Path, root: Path) -> str | None:
    """Dotted module name of ``path`` under ``root`` (``None`` outside it)."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts else None


def _is_package_file(path: Path) -> bool:
    return path.name == "__init__.py"


class Rewriter:
    """Rewrites text by one move table (see the module docstring for what it touches)."""

    def __init__(self, table: dict[str, str]):
        self.table = dict(table)
        self.new_names = sorted(set(table.values()), key=len, reverse=True)
        dotted = sorted((old for old in table if "." in old), key=len, reverse=True)
        # Longest first so that a.b.c wins over a.b; not preceded by a word character or a dot
        # (``self.predictor.train`` is an attribute, not a module), not followed by one.
        self._dotted = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, dotted)) + r")(?!\w)") if dotted else None
        self._single = [old for old in table if "." not in old]

    # -- pieces -----------------------------------------------------------------------------
    def _already_new(self, text: str, start: int) -> bool:
        for new in self.new_names:
            if text.startswith(new, start):
                end = start + len(new)
                if end == len(text) or not (text[end].isalnum() or text[end] == "_"):
                    return True
        return False

    def _sub_dotted(self, text: str) -> str:
        if self._dotted is None:
            return text

        new_set = set(self.new_names)

        def repl(match: re.Match) -> str:
            if self._already_new(text, match.start()):
                return match.group(0)
            old = match.group(1)
            # `from pbkv_server.cli import server`: the old module is now a package and the
            # statement already imports its new submodules.
            after = re.match(r"[ \t]+import[ \t]+\(?([\w \t,]+)", text[match.end():])
            if after:
                names = [n.split()[0] for n in after.group(1).split(",") if n.split()]
                if names and all(f"{old}.{n}" in new_set for n in names):
                    return old
            return self.table[old]

        return self._dotted.sub(repl, text)

    def _sub_single(self, text: str) -> str:
        for old in self._single:
            new = self.table[old]
            # import statements: `import old`, `import old.x`, `from old import`, `from old.x import`
            text = re.sub(rf"(?m)^(\s*import\s+){re.escape(old)}(?=[\s.,]|$)", rf"\g<1>{new}", text)
            text = re.sub(rf"(?m)^(\s*from\s+){re.escape(old)}(?=[\s.])", rf"\g<1>{new}", text)
            # the package's folder as a path
            text = re.sub(rf"(?<![\w/.\-]){re.escape(old)}/", f"{new}/", text)
        return text

    def _sub_paths(self, text: str) -> str:
        for old, new in sorted(self.table.items(), key=lambda kv: len(kv[0]), reverse=True):
            if "." not in old:
                continue  # packages: handled as folders by _sub_single
            old_path, new_path = old.replace(".", "/") + ".py", new.replace(".", "/") + ".py"
            text = re.sub(rf"(?<![\w/.\-]){re.escape(old_path)}", new_path, text)
        return text

    def _sub_from_parent(self, text: str) -> str:
        """``from PARENT import NAME[ as A], ...`` where ``PARENT.NAME`` moved: one import per name."""
        pattern = re.compile(r"(?m)^(?P<indent>[ \t]*)from[ \t]+(?P<parent>[\w.]+)[ \t]+import[ \t]+"
                             r"(?P<names>\([^)]*\)|[^\n#]+?)[ \t]*(?P<comment>#[^\n]*)?$")

        def repl(match: re.Match) -> str:
            parent, indent = match.group("parent"), match.group("indent")
            raw = match.group("names").strip().strip("()")
            names = [n.strip() for n in raw.replace("\n", " ").split(",") if n.strip()]
            if not any(f"{parent}.{n.split()[0]}" in self.table for n in names):
                return match.group(0)
            kept, lines = [], []
            for item in names:
                name, _, alias = item.partition(" as ")
                name, alias = name.strip(), alias.strip() or name.strip()
                new = self.table.get(f"{parent}.{name}")
                if new is None:
                    kept.append(item)
                    continue
                new_parent, _, new_name = new.rpartition(".")
                if new_parent:
                    tail = f" as {alias}" if alias != new_name else ""
                    lines.append(f"{indent}from {new_parent} import {new_name}{tail}")
                else:
                    lines.append(f"{indent}import {new_name} as {alias}")
            if kept:
                lines.insert(0, f"{indent}from {parent} import {', '.join(kept)}")
            if match.group("comment"):
                lines[0] += "  " + match.group("comment")
            return "\n".join(lines)

        return pattern.sub(repl, text)

    def _sub_relative(self, text: str, module: str | None, is_package: bool) -> str:
        """Relative imports that reach a moved module, as absolute imports of the new one."""
        if module is None:
            return text
        package = module.split(".") if is_package else module.split(".")[:-1]
        pattern = re.compile(r"(?m)^(?P<indent>[ \t]*)from[ \t]+(?P<dots>\.+)(?P<mod>[\w.]*)[ \t]+import[ \t]+"
                             r"(?P<rest>\([^)]*\)|[^\n]+)$")

        def repl(match: re.Match) -> str:
            level = len(match.group("dots"))
            base = package[: len(package) - (level - 1)] if level - 1 <= len(package) else None
            if base is None:
                return match.group(0)
            target = ".".join(base + ([match.group("mod")] if match.group("mod") else []))
            rest = match.group("rest")
            if target in self.table or any(
                    f"{target}.{n.strip().split()[0]}" in self.table
                    for n in rest.strip().strip("()").split(",") if n.strip() and not n.strip().startswith("#")):
                return f"{match.group('indent')}from {target} import {rest}"
            if module in self._moved_from_here:
                # the file itself moved: its relative imports name its old neighbours
                return f"{match.group('indent')}from {target} import {rest}"
            return match.group(0)

        return pattern.sub(repl, text)

    # -- the whole file -----------------------------------------------------------------------
    _moved_from_here: set[str] = set()

    def rewrite(self, text: str, module: str | None = None, is_package: bool = False,
                old_module: str | None = None) -> str:
        """``text`` with every reference to an old module replaced by the new one.

        Args:
            text: the file's content.
            module: the file's dotted module name (Python files; resolves relative imports).
            is_package: the file is a package's ``__init__.py``.
            old_module: the file's module name before it moved (its relative imports resolve
                from there and become absolute).
        """
        self._moved_from_here = {old_module} if old_module else set()
        if old_module:
            text = self._sub_relative(text, old_module, is_package)
        elif module is not None:
            text = self._sub_relative(text, module, is_package)
        text = self._sub_from_parent(text)
        text = self._sub_dotted(text)
        text = self._sub_single(text)
        return self._sub_paths(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="list the files that would change; change nothing")
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (module names of .py files)")
    parser.add_argument("--moved-from", help="the one FILE's path before it moved (resolves its relative imports)")
    args = parser.parse_args(argv)
    if args.moved_from and len(args.files) != 1:
        parser.error("--moved-from takes exactly one FILE")
    try:
        rewriter = Rewriter(load_table(args.table))
    except (OSError, ValueError) as exc:
        print(f"apply_layout_moves: {exc}", file=sys.stderr)
        return 2
    changed = []
    for path in args.files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"apply_layout_moves: skipped {path}: {exc}", file=sys.stderr)
            continue
        module = _module_of(path, args.root) if path.suffix == ".py" else None
        old_module = None
        if args.moved_from:
            old_module = _module_of(args.root / args.moved_from, args.root)
        new = rewriter.rewrite(text, module, _is_package_file(path), old_module)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(("would change " if args.check else "rewrote ") + str(path))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
