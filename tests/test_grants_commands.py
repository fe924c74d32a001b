"""Shell commands read for grants: the words a real shell makes of what the reader accepts,
the command table as shipped and as refused when malformed, and where the hook finds a
program on the agent's PATH."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.integrations.commands import TableError, parse_table, shell_words
from bot.integrations.hook import command_table, locate_program

SHELLS = [shell for shell in ("bash", "dash", "zsh") if shutil.which(shell)]
ALPHABET = "ab-=.:/~^%,+@ '\"$`;|&*?(){}[]#!\\<>\t\n"
"""Letters that name no program, and every character a shell treats specially."""


def words_in_shell(shell: str, command: str, cwd: Path) -> list[str]:
    """The arguments ``shell`` passes for ``command`` (printed by its printf builtin)."""
    script = f"printf '%s\\0' word {command}"
    done = subprocess.run([shutil.which(shell) or shell, "-c", script], cwd=cwd,
                          env={"PATH": "/nonexistent", "HOME": str(cwd)},
                          capture_output=True, timeout=10, check=False)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout.decode().split("\0")[1:-1]


@pytest.mark.parametrize(("command", "words"), [
    ("git status -s", ["git", "status", "-s"]),
    ("git  status   -s ", ["git", "status", "-s"]),
    ("git log --format='%h %s'", ["git", "log", "--format=%h %s"]),
    ("grep \"a b\" 'c d'e", ["grep", "a b", "c de"]),
    ("git log 'HEAD~3'..HEAD", ["git", "log", "HEAD~3..HEAD"]),
    ("git log HEAD~3 HEAD^", ["git", "log", "HEAD~3", "HEAD^"]),
    ("sed -n '/a\\/b/p' f", ["sed", "-n", "/a\\/b/p", "f"]),
    ("cat ''", ["cat", ""]),
])
def test_words_as_the_shell_makes_them(command: str, words: list[str], tmp_path: Path) -> None:
    assert shell_words(command) == words
    for shell in SHELLS:
        assert words_in_shell(shell, command[command.index(" ") + 1:], tmp_path) == words[1:]


@pytest.mark.parametrize("command", [
    "a;b", "a|b", "a&b", "a>b", "a<b", "a$b", "a`b`", "$(a)", "a*", "a?", "[a]", "{a,b}",
    "~", "~/a", "a=~/b", "a:~", "=a", "^a", "#a", "!a", "a\\ b", "\"$a\"", "\"`a`\"",
    "\"a\\b\"", "\"!a\"", "'a", "\"a", "a\nb", "a\tb", "a\rb", "é", "a\u200bb", "'a\\\\'",
    "'a\\'", "a'`'",
])
def test_anything_a_shell_would_expand_or_split_otherwise_is_refused(command: str) -> None:
    assert shell_words(command) is None


PIECES = st.one_of(
    st.text(alphabet="ab-=.:/~^%,+@ ", min_size=1, max_size=4),
    st.text(alphabet=ALPHABET.replace("'", ""), max_size=6).map(lambda t: f"'{t}'"),
    st.text(alphabet=ALPHABET.replace('"', ""), max_size=6).map(lambda t: f'"{t}"'),
)
"""Commands mostly made of what the reader accepts: bare pieces, quoted pieces."""


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet=ALPHABET, max_size=24),
                 st.lists(PIECES, max_size=6).map("".join)))
def test_what_the_reader_accepts_the_shells_split_the_same_way(command: str) -> None:
    words = shell_words(command)
    if words is None:
        return
    with tempfile.TemporaryDirectory() as cwd:
        for shell in SHELLS:
            assert words_in_shell(shell, command, Path(cwd)) == words, (shell, command)


def test_the_shipped_table_loads_and_lists_what_the_readme_names() -> None:
    table = command_table()
    for program, subcommand in [("git", "status"), ("git", "log"), ("git", "diff"),
                                ("git", "show"), ("git", "branch"), ("ls", None),
                                ("cat", None), ("grep", None), ("rg", None), ("find", None),
                                ("sed", None), ("tar", None), ("head", None), ("tail", None)]:
        assert (program, subcommand) in table.reads
    assert table.exact["pytest"] is None and "test" in (table.exact["npm"] or ())
    assert "uv run" in table.never and "npx" in table.never and "python" in table.never


@pytest.mark.parametrize(("text", "error"), [
    ("[[read]\n", "not valid TOML"),
    ('[[read]]\nprogram = "/usr/bin/git"\n', "bare name"),
    ('[[read]]\nprogram = "ls"\n[read.options]\n"--al=x" = "flag"\n', "not an option name"),
    ('[[read]]\nprogram = "ls"\n[read.options]\n"-a" = "anything"\n', "no shape"),
    ('[[read]]\nprogram = "ls"\noperands = "file"\n', "no shape"),
    ('[[read]]\nprogram = "ls"\n[[read]]\nprogram = "ls"\n', "listed twice"),
    ('[[exact]]\nprogram = "python"\n[[never]]\nreason = "x"\ncommands = ["python"]\n',
     "never granted"),
    ('[[exact]]\nprogram = "uv"\n[[never]]\nreason = "x"\ncommands = ["uv run"]\n',
     "never granted"),
    ('[[read]]\nprogram = "git"\nsubcommand = "fetch"\n[[never]]\nreason = "x"\n'
     'commands = ["git fetch"]\n', "never granted"),
])
def test_a_malformed_table_is_refused_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(TableError, match=error):
        parse_table(text)


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_a_program_is_found_as_the_shell_finds_it(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    git = executable(second / "git")
    (first / "git").parent.mkdir(parents=True)
    (first / "git").write_text("not executable")
    assert locate_program(f"{first}:{second}", "git") == str(git)
    link = first / "ls"
    link.symlink_to(executable(tmp_path / "real" / "ls"))
    assert locate_program(f"{first}:{second}", "ls") == str(tmp_path / "real" / "ls")
    assert locate_program(f"{first}:{second}", "missing") is None


@pytest.mark.parametrize("search_path", ["", ".", "bin", "{first}::{second}", "{first}:.:{second}"])
def test_a_relative_path_entry_before_the_program_finds_nothing(
        search_path: str, tmp_path: Path) -> None:
    executable(tmp_path / "second" / "git")
    entries = search_path.format(first=tmp_path / "first", second=tmp_path / "second")
    assert locate_program(entries, "git") is None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(command_table().reads)),
       st.from_regex(r"--?[a-z][a-z0-9-]{0,14}(=[a-z0-9/.]{0,6})?", fullmatch=True))
def test_an_option_outside_an_operations_list_is_never_covered(
        key: tuple[str, str | None], option: str) -> None:
    operation = command_table().reads[key]
    name = option.partition("=")[0]
    words = [operation.program, *filter(None, [operation.subcommand]), option, "--", "a"]
    if operation.find_style:
        words = [operation.program, ".", option]
    if name in operation.options or (name.startswith("-") and not name.startswith("--")
                                     and not operation.find_style):
        return  # an allowed option, or a group of short ones: the tests above cover those
    assert command_table().judge(words) is None, words
