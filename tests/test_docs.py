"""The README and docs/ say what the code does, and hold together; so do the Dockerfile and
the compose file.

The README is a front page: the two commands a newcomer needs, then links into ``docs/``.
Facts are looked for where they now live: in the README or any page under ``docs/``.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from bot import __version__
from bot.cli import build_parser, main
from bot.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"
PAGES = [README_PATH, *sorted(DOCS.rglob("*.md"))]
"""The README and every documentation page."""
DOCUMENTATION = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
README_MAX_LINES = 150


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (a repeated one gets ``-1``, ``-2``, …)."""
    found: set[str] = set()
    text = _without_fences(page.read_text(encoding="utf-8"))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, count = slug, 0
        while candidate in found:
            count += 1
            candidate = f"{slug}-{count}"
        found.add(candidate)
    return found

def _relative_links(page: Path) -> list[str]:
    """Every link target in a page (Markdown links, ``src`` and ``href``) that is not a
    web address."""
    prose = _prose(page.read_text(encoding="utf-8"))
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    targets += re.findall(r'(?:src|href)="([^"]+)"', prose)
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def _resolve(page: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return (page if not path else (page.parent / path).resolve()), anchor


def _documented_commands() -> list[list[str]]:
    """Every ``skald-telegram …`` invocation in the README and docs/, in code blocks or
    inline."""
    found: list[str] = []
    for block in _shell_blocks(DOCUMENTATION):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                if part.strip().startswith("skald-telegram"):
                    found.append(part.strip())
    for line in DOCUMENTATION.splitlines():
        if not line.startswith("|"):  # table rows are synopses, not commands
            found += re.findall(r"`(skald-telegram [^`]*)`", line)
    return [shlex.split(command.replace("…", "x"))[1:] for command in found]


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one() -> None:
    blocks = [b.strip() for b in _shell_blocks(README)]
    assert "pip install . && skald-telegram demo" in blocks
    assert "pip install -e '.[test]' && python -m pytest" in blocks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npip install -e '.[test]' && python -m pytest\n" in ci


def test_readme_is_a_front_page_with_the_two_commands_at_the_top() -> None:
    assert len(README.splitlines()) < README_MAX_LINES
    top = README.split("\n## ")[0]
    assert "pip install . && skald-telegram demo" in top
    assert "pip install -e '.[test]' && python -m pytest" in top


def test_every_docs_page_is_linked_from_the_readme_or_another_page() -> None:
    linked = {_resolve(page, target)[0] for page in PAGES for target in _relative_links(page)
              if _resolve(page, target)[0] != page}
    unlinked = [str(page.relative_to(ROOT)) for page in PAGES[1:] if page not in linked]
    assert unlinked == []


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in _relative_links(page):
            path, anchor = _resolve(page, target)
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and (path.suffix != ".md" or anchor not in _anchors(path)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


@pytest.mark.parametrize("argv", _documented_commands(), ids=" ".join)
def test_every_documented_command_parses(argv: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    assert args.command is not None


def test_every_subcommand_is_documented() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name in subparsers.choices:  # type: ignore[union-attr]
        assert f"skald-telegram {name}" in DOCUMENTATION, name


def test_the_command_line_reference_has_a_row_for_every_subcommand() -> None:
    reference = (DOCS / "commands.md").read_text(encoding="utf-8")
    rows = [line for line in reference.splitlines() if line.startswith("| `skald-telegram ")]
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    for name in subparsers.choices:  # type: ignore[union-attr]
        assert any(row.startswith(f"| `skald-telegram {name}") for row in rows), name


@pytest.mark.parametrize(("table", "documented_as"), [
    ("[telegram]\n", "telegram."), ("[state]\n", "state."), ("[templates]\n", "templates."),
    ("[device]\n", "device."), ("[http]\n", "http."), ("[[chats]]\nid = 1\n", "chats[]."),
    ("[webapp]\n", "webapp."), ("[storage]\n", "storage."),
])
def test_the_configuration_page_documents_every_setting(tmp_path: Path, table: str,
                                                       documented_as: str) -> None:
    """The page ``doctor`` points to names every key the configuration accepts, as the
    configuration's own "unknown setting" error lists them."""
    config = tmp_path / "skald-telegram.toml"
    config.write_text(f"{table}zz_unknown = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(str(config), environ={}, require_token=False)
    known = re.search(r"\(known: (.*)\)", str(error.value))
    assert known, error.value
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    missing = [key for key in known.group(1).split(", ")
               if f"| `{documented_as}{key}` |" not in page]
    assert missing == []


def test_version_and_identity_and_render(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert __version__ in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKALD_TELEGRAM_CONFIG", raising=False)
    monkeypatch.delenv("SKALD_TELEGRAM_STATE_DIR", raising=False)
    assert main(["identity"]) == 0
    card = capsys.readouterr().out
    assert '"id"' in card and '"kx_pub"' in card and "seed" not in card
    assert (tmp_path / "state" / "identity.json").stat().st_mode & 0o777 == 0o600
    example = ROOT / "tests" / "data" / "render-example.json"
    assert main(["render", str(example), "--chat-type", "group"]) == 0
    assert "sk-live-51H8xQ2eZvKYlo2C" not in capsys.readouterr().out


def test_health_reports_a_missing_or_stale_status(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKALD_TELEGRAM_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["health"]) == 1
    assert "is the bot running" in capsys.readouterr().out
    from bot.health import write_status

    write_status(tmp_path / "status.json",
                 {"pid": os.getpid(), "relays": [{"url": "ws://r", "connected": True}]})
    assert main(["health"]) == 0


def test_dockerfile_runs_as_non_root_from_a_pinned_base_with_a_real_entry_point() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert len(bases) >= 2, "multi-stage build"
    for base in bases:
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^VOLUME\s+\[\"/state\"\]", dockerfile, flags=re.MULTILINE)
    parser = build_parser()
    for instruction in ("CMD", "HEALTHCHECK"):
        match = re.search(rf"^{instruction}\b.*?(\[.*?\])\s*$", dockerfile,
                          flags=re.MULTILINE | re.DOTALL)
        assert match, instruction
        argv = [part.strip().strip('"') for part in match.group(1).strip("[]").split(",")]
        assert argv[0] == "skald-telegram"
        assert parser.parse_args(argv[1:]).command in ("run", "health")
    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    assert "skald-telegram" in compose and "relay" in compose
    for command in re.findall(r'command: \[(.*?)\]', compose):
        argv = [part.strip().strip('"') for part in command.split(",")]
        assert parser.parse_args(argv[1:]).command == "relay"
