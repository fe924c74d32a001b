"""What a grant can never be stretched to cover, tried as an attacker would: edits through
symlinks and ``..`` (real files on disk, resolved as the hook resolves them), keys a script
names against the keys of hooks and the gateway, and tool names spelled to slip past the
gateway's policy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bot.agenthost import grants as gr
from bot.agenthost.api import _grant_offer
from bot.agenthost.service import Refusal
from bot.integrations.describe import ToolCall, describe
from bot.integrations.grants import Scope, gateway_scope, hook_scope
from bot.integrations.hook import real_path, with_real_path
from bot.integrations.policy import canonical_name, parse_policy

SESSION = "s1"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder, a folder outside it, and a file in each."""
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / "src" / "app.py").write_text("print('app')\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("keep out\n")
    return (tmp_path / "project").resolve()


def edit(path: str, cwd: str | None = None, tool: str = "Edit") -> ToolCall:
    """An agent's edit (or write) of ``path``, resolved as the hook resolves it."""
    arguments: dict[str, Any] = {"file_path": path, "old_string": "app", "new_string": "x"}
    if tool == "Write":
        arguments = {"file_path": path, "content": "x\n"}
    return with_real_path(ToolCall("Claude Code", tool, arguments, cwd=cwd), real_path)


def scope_of(call: ToolCall) -> Scope | None:
    return hook_scope(call, SESSION)


def granted(project: Path) -> Scope:
    """The grant a person gave for an edit of ``src/app.py``."""
    scope = scope_of(edit(str(project / "src" / "app.py")))
    assert scope is not None
    assert scope.label == f"edits in {project / 'src'} in this session"
    return scope


# -- edits: a path is covered only where it really leads -------------------------------


def test_a_file_symlinked_out_of_the_folder_is_not_covered(project: Path) -> None:
    grant = granted(project)
    outside = project.parent / "outside" / "secret.txt"
    (project / "src" / "notes.txt").symlink_to(outside)
    call = edit(str(project / "src" / "notes.txt"))
    assert scope_of(call) != grant
    scope = scope_of(call)
    assert scope is not None and scope.label == f"edits in {outside.parent} in this session"


def test_a_symlinked_folder_on_the_way_is_not_covered(project: Path) -> None:
    grant = granted(project)
    (project / "src" / "lib").symlink_to(project.parent / "outside")
    assert scope_of(edit(str(project / "src" / "lib" / "secret.txt"))) != grant
    # …and the folder the link stands in is not the granted one either.
    (project / "src" / "up").symlink_to(project.parent / "outside", target_is_directory=True)
    for path in ("up/secret.txt", "up/../src/app.py", "up/./new.py"):
        assert scope_of(edit(str(project / "src" / path))) != grant, path


def test_a_symlink_swapped_in_after_the_grant_is_not_covered(project: Path) -> None:
    grant = granted(project)
    target = project / "src" / "app.py"
    assert scope_of(edit(str(target))) == grant
    target.unlink()
    target.symlink_to(project.parent / "outside" / "secret.txt")
    assert scope_of(edit(str(target))) != grant
    assert scope_of(edit(str(target), tool="Write")) != grant


def test_a_granted_folder_reached_through_a_link_is_the_folder_it_leads_to(
        project: Path) -> None:
    first, second = project.parent / "first", project.parent / "second"
    first.mkdir(), second.mkdir()
    link = project / "current"
    link.symlink_to(first)
    grant = scope_of(edit(str(link / "a.py")))
    assert grant is not None and grant.label == f"edits in {first} in this session"
    link.unlink()
    link.symlink_to(second)  # the link now leads elsewhere: so does the key
    assert scope_of(edit(str(link / "a.py"))) not in (None, grant)


@pytest.mark.parametrize(("path", "covered"), [
    ("src/new.py", True),
    ("./src/app.py", True),
    ("src/../src/app.py", True),
    ("src//app.py", True),
    ("src/nothing/../app.py", True),
    ("app.py", False),
    ("../outside/secret.txt", False),
    ("src/../../outside/secret.txt", False),
    ("src/../../project/../outside/x", False),
    ("src/sub/app.py", False),  # a folder below is another folder
])
def test_dot_dot_and_relative_paths_with_the_agents_directory(
        project: Path, path: str, covered: bool) -> None:
    grant = granted(project)
    assert (scope_of(edit(path, cwd=str(project))) == grant) is covered
    assert (scope_of(edit(str(project / path))) == grant) is covered


def test_dot_dot_after_a_symlink_goes_where_the_kernel_goes(project: Path) -> None:
    grant = granted(project)
    deep = project.parent / "outside" / "a" / "b"
    deep.mkdir(parents=True)
    (project / "src" / "jump").symlink_to(deep)
    # As text, src/jump/../app.py is src/app.py; the kernel goes to outside/a/app.py.
    call = edit(str(project / "src" / "jump" / ".." / "app.py"))
    assert call.real_path == str(project.parent / "outside" / "a" / "app.py")
    assert scope_of(call) != grant


def test_paths_that_cannot_be_resolved_offer_nothing(project: Path) -> None:
    (project / "src" / "loop1").symlink_to(project / "src" / "loop2")
    (project / "src" / "loop2").symlink_to(project / "src" / "loop1")
    assert scope_of(edit(str(project / "src" / "loop1" / "x.py"))) is None
    assert scope_of(edit("src/app.py")) is None  # relative, and no directory known
    assert scope_of(edit("src/app.py", cwd="project")) is None  # a relative directory
    assert scope_of(edit(str(project / "src" / "a\0b.py"))) is None
    os.link(project.parent / "outside" / "secret.txt", project / "src" / "hard.txt")
    assert scope_of(edit(str(project / "src" / "hard.txt"))) is None  # its other name is out
    unresolved = ToolCall("Claude Code", "Edit", {"file_path": str(project / "src" / "app.py")})
    assert scope_of(unresolved) is None  # nothing resolved it: no grant


def test_a_link_inside_the_folder_is_covered_and_shown(project: Path) -> None:
    grant = granted(project)
    (project / "src" / "alias.py").symlink_to(project / "src" / "app.py")
    call = edit(str(project / "src" / "alias.py"))
    assert scope_of(call) == grant
    shown = describe(call, lambda _: "print('app')\n")
    assert _row(shown.blocks, "Symlink") == (
        f"{project / 'src' / 'alias.py'} → {project / 'src' / 'app.py'}")


@pytest.mark.parametrize("tool", ["Edit", "Write"])
def test_the_card_shows_where_a_symlink_points(project: Path, tool: str) -> None:
    link = project / "src" / "notes.txt"
    outside = project.parent / "outside" / "secret.txt"
    link.symlink_to(outside)
    shown = describe(edit(str(link), tool=tool), lambda _: "keep out\n")
    assert _row(shown.blocks, "Symlink") == f"{link} → {outside}"
    assert f"{link} → {outside}" in shown.summary
    plain = describe(edit(str(project / "src" / "app.py"), tool=tool), lambda _: "app\n")
    assert _row(plain.blocks, "Symlink") is None and "→" not in plain.summary


def test_a_folder_link_on_the_way_is_shown_too(project: Path) -> None:
    (project / "src" / "lib").symlink_to(project.parent / "outside")
    path = project / "src" / "lib" / "secret.txt"
    shown = describe(edit(str(path)), lambda _: "keep out\n")
    assert _row(shown.blocks, "Symlink") == (
        f"{path} → {project.parent / 'outside' / 'secret.txt'}")


def _row(blocks: list[dict[str, Any]], key: str) -> Any:
    return next((b["value"] for b in blocks if b.get("key") == key), None)


# -- namespaces: a script's key never covers a hook's or the gateway's calls -----------


HOOK_KEY = "Claude Code|s1|shell|git status"
HOOK_LABEL = "`git status` in this session"


def test_a_script_key_equal_to_a_hook_key_is_another_key() -> None:
    hook = gr.scope_offer("hook", HOOK_KEY, HOOK_LABEL)
    for key in (HOOK_KEY, hook.key, f"hook:{HOOK_KEY}", "hook", HOOK_KEY + " "):
        script = gr.script_offer(key, HOOK_LABEL)
        assert script.key != hook.key
        assert script.key.startswith("script:")
        assert script.label.startswith(f"offered by a script: key `{key}`")
    gateway = gr.scope_offer("gateway", HOOK_KEY, HOOK_LABEL)
    assert len({hook.key, gateway.key}) == 2


def test_the_words_a_person_approves_are_part_of_a_hook_key() -> None:
    true = gr.scope_offer("hook", "Claude Code|s1|edit|/home/ada", "edits in /home/ada in "
                                                                  "this session")
    dressed = gr.scope_offer("hook", "Claude Code|s1|edit|/home/ada", HOOK_LABEL)
    assert dressed.key != true.key
    assert dressed.label == HOOK_LABEL  # whatever it shows, it covers only calls that say so


def test_a_script_label_always_says_it_is_a_script() -> None:
    assert gr.script_offer("deploy-staging", None).label == (
        "offered by a script: key `deploy-staging`")
    assert gr.script_offer("deploy-staging", "deploys to staging").label == (
        "offered by a script: key `deploy-staging` — deploys to staging")
    long = gr.script_offer("k" * 200, "x" * 200)
    assert len(long.key) <= gr.MAX_KEY_CHARS and long.key.startswith("script:")
    assert long.label.startswith("offered by a script: key `kkk")


@pytest.mark.parametrize(("body", "key", "label"), [
    ({"grant_key": HOOK_KEY, "grant_label": HOOK_LABEL}, f"script:{HOOK_KEY}",
     f"offered by a script: key `{HOOK_KEY}` — {HOOK_LABEL}"),
    ({"grant_scope": {"kind": "hook", "key": HOOK_KEY, "label": HOOK_LABEL}},
     gr.scope_offer("hook", HOOK_KEY, HOOK_LABEL).key, HOOK_LABEL),
    ({"grant_scope": {"kind": "gateway", "key": "k", "label": "l"}},
     gr.scope_offer("gateway", "k", "l").key, "l"),
])
def test_the_api_puts_each_key_in_the_namespace_of_its_field(
        body: dict[str, Any], key: str, label: str) -> None:
    offer = _grant_offer(body)
    assert offer is not None and (offer.key, offer.label) == (key, label)


@pytest.mark.parametrize("body", [
    {"grant_scope": {"kind": "script", "key": "k", "label": "l"}},
    {"grant_scope": {"kind": "hook", "key": "k"}},
    {"grant_scope": {"kind": "hook", "key": "", "label": "l"}},
    {"grant_scope": "hook"},
    {"grant_scope": {"kind": "hook", "key": "k", "label": "l"}, "grant_key": "k"},
    {"grant_scope": {"kind": "hook", "key": "k", "label": "l"}, "grant_label": "l"},
])
def test_a_scope_the_api_cannot_place_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(Refusal):
        _grant_offer(body)


# -- the gateway: keyed on the command line, policy names in one form ------------------


def test_gateway_grants_are_keyed_on_the_command_line_not_the_reported_name() -> None:
    notes = gateway_scope(["python3", "notes_server.py"], "delete_note")
    other = gateway_scope(["python3", "evil_server.py"], "delete_note")
    assert notes.key != other.key
    assert notes.label == "`delete_note` of python3 notes_server.py"
    # Quoting cannot make two command lines one.
    assert gateway_scope(["a b", "c"], "t").key != gateway_scope(["a", "b c"], "t").key


DENY_WRITES = '[tools]\n"*" = "allow"\n"write_*" = "deny"\n'


@pytest.mark.parametrize("tool", [
    "write_file", "WRITE_FILE", "Write_File", "ｗｒｉｔｅ_file", "ＷＲＩＴＥ＿ＦＩＬＥ",
    "wri\u200bte_file", "write_\u00adfile", "\u2067write_file", "write_ﬀ", "ＷＲＩＴＥ_\u2060x",
])
def test_a_deny_catches_every_spelling_of_a_name(tool: str) -> None:
    assert parse_policy(DENY_WRITES).rule_for(tool) == "deny"
    assert parse_policy(DENY_WRITES).source_for(tool) == '"write_*"'


@pytest.mark.parametrize("text", [
    '[tools]\n"read_*" = "allow"\n"READ_SECRET*" = "deny"\n',
    '[tools]\n"*" = "allow"\n"read_secret" = "deny"\n',
    '[tools]\n"read_secret" = "ask"\n"*_secret" = "deny"\n',
    '[tools]\n"ｒｅａｄ_*" = "allow"\n"read_s*" = "deny"\n"*" = "ask"\n',
])
def test_a_deny_wins_wherever_it_stands_in_the_file(text: str) -> None:
    assert parse_policy(text).rule_for("read_secret") == "deny"
    assert parse_policy(text).rule_for("Read_Secret") == "deny"


def test_without_a_deny_the_first_match_decides_and_hidden_characters_ask() -> None:
    policy = parse_policy('[tools]\n"read_*" = "allow"\n"*" = "ask"\n')
    assert policy.rule_for("READ_NOTE") == "allow"
    assert policy.rule_for("ｒｅａｄ_note") == "allow"
    assert policy.rule_for("read_\u200bnote") == "ask"
    assert policy.rule_for("read_\u202enote") == "ask"
    assert policy.rule_for("delete") == "ask"
    assert canonical_name("ＲＥＡＤ\u200b_Note") == "read_note"


def test_real_path_follows_links_like_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    base = os.path.realpath(tmp_path)
    assert real_path(str(tmp_path / "link" / "f")) == f"{base}/real/f"
    assert real_path(str(tmp_path / "link" / ".." / "f")) == f"{base}/f"
