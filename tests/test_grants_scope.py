"""What a coding agent's call may be granted (pure): narrow scopes; for a shell command,
only what the command table lists, read the way the shell reads it, for the program found
where it was found; nothing that runs, writes, reaches out or holds a credential."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bot.integrations.describe import ToolCall
from bot.integrations.grants import Programs, command_scope, gateway_scope, hook_scope
from bot.integrations.hook import command_table

CWD = "/work/project"
BIN = {"git": "/usr/bin/git", "ls": "/usr/bin/ls", "cat": "/usr/bin/cat",
       "head": "/usr/bin/head", "tail": "/usr/bin/tail", "wc": "/usr/bin/wc",
       "du": "/usr/bin/du", "grep": "/usr/bin/grep", "rg": "/usr/bin/rg",
       "find": "/usr/bin/find", "sed": "/usr/bin/sed", "tar": "/usr/bin/tar",
       "pytest": "/work/project/.venv/bin/pytest", "make": "/usr/bin/make",
       "npm": "/usr/bin/npm", "cargo": "/home/ada/.cargo/bin/cargo", "go": "/usr/bin/go",
       "python": "/usr/bin/python", "python3": "/usr/bin/python3", "node": "/usr/bin/node",
       "npx": "/usr/bin/npx", "uv": "/usr/bin/uv", "curl": "/usr/bin/curl",
       "sudo": "/usr/bin/sudo", "rm": "/usr/bin/rm", "env": "/usr/bin/env"}
PROGRAMS = Programs(command_table(), BIN.get)


def scope_of(command: str, programs: Programs = PROGRAMS, cwd: str = CWD) -> str | None:
    """The operation a command is granted as (``git status``), ``exact`` for an exact
    command, or None."""
    scope = command_scope(command, cwd, programs)
    if scope is None:
        return None
    kind, _where, _path, what = json.loads(scope.key.removeprefix("shell|"))
    return "exact" if kind == "exact" else str(what)


COVERED = [
    # git, read-only forms: each covered by a grant for the operation.
    ("git status", "git status"), ("git status -s", "git status"),
    ("git status --porcelain", "git status"), ("git status --porcelain=v2", "git status"),
    ("git status -sb", "git status"), ("git status -uno", "git status"),
    ("git status --short --branch src", "git status"), ("git status -- src/app.py", "git status"),
    ("git log --oneline", "git log"), ("git log -n 5", "git log"), ("git log -n5", "git log"),
    ("git log -5", "git log"), ("git log --max-count=3 --stat", "git log"),
    ("git log --format=%h%x09%s", "git log"), ("git log 'HEAD~3..HEAD' -- src", "git log"),
    ("git log HEAD~3", "git log"), ("git log --author=ada --since='2 weeks ago'", "git log"),
    ("git log -p -U3 main", "git log"), ("git show HEAD --stat", "git show"),
    ("git show HEAD:README.md", "git show"), ("git diff", "git diff"),
    ("git diff --cached --stat", "git diff"), ("git diff main..feature -- src", "git diff"),
    ("git diff --no-ext-diff --no-textconv", "git diff"), ("git branch", "git branch"),
    ("git branch -vv", "git branch"), ("git branch --show-current", "git branch"),
    ("git rev-parse --show-toplevel", "git rev-parse"),
    ("git rev-parse --abbrev-ref HEAD", "git rev-parse"), ("git remote -v", "git remote"),
    ("git grep -n TODO", "git grep"), ("git grep -e foo -- src", "git grep"),
    ("git ls-files -z", "git ls-files"),
    # Reading files and folders in the command's directory.
    ("ls", "ls"), ("ls -la", "ls"), ("ls -la src", "ls"), ("ls --color=never -1", "ls"),
    ("cat README.md", "cat"), ("cat -n src/app.py", "cat"), ("head -n 20 a.txt", "head"),
    ("head -20 a.txt", "head"), ("tail -n +5 a.txt", "tail"), ("wc -l src/app.py", "wc"),
    ("du -sh .", "du"), ("grep -rn TODO src", "grep"), ("grep -e -v file.txt", None),
    ("grep -e-v file.txt", "grep"), ("grep -- -v file.txt", "grep"),
    ("grep -rn --include='*.py' import .", "grep"), ("grep -C3 foo a.txt", "grep"),
    ("rg -n TODO", "rg"), ("rg foo -g '*.py' src", "rg"), ("rg --files", "rg"),
    ("find . -name '*.py'", "find"), ("find src -type f -mtime -7 -print", "find"),
    ("find . '(' -name a -o -name b ')' -maxdepth 2", "find"),
    ("sed -n 1,20p a.txt", "sed"), ("sed -n '/start/,/end/p' a.txt", "sed"),
    ("sed -n '$p' a.txt", "sed"), ("sed 's/a/b/g' a.txt", "sed"),
    ("sed -n -e '5p;10p' a.txt", "sed"), ("sed -E 's/[0-9]+/N/g' a.txt", "sed"),
    ("tar -tf a.tar", "tar"), ("tar -tzvf a.tgz", "tar"), ("tar --list --file=a.tar", "tar"),
]

NOT_COVERED = {
    "runs a program": [
        "git fetch --upload-pack='touch /tmp/p' .", "git fetch", "git -c core.pager=less log",
        "git -ccore.pager=less log", "git --exec-path=/tmp log", "git --upload-p=x fetch",
        "git -C other status", "git --git-dir=/tmp/g status", "git --no-pager log",
        "git log --ext-diff", "git diff --ext-diff", "git diff --textconv",
        "git log --show-signature", "git log --format=%G?", "git log --pretty=format:%GS",
        "git grep -O less foo", "git grep --open-files-in-pager=less foo",
        "git difftool", "git submodule foreach ls", "git st", "git bisect run make",
        "sed e", "sed 'e ls'", "sed -n 's/x/ls/e' a.txt", "sed -n '1!e' a.txt",
        "sed -f script.sed a.txt", "find . -exec rm {} +", "find . -execdir ls ';'",
        "find . -ok ls ';'", "find . -okdir ls ';'", "find -L . -name x",
        "tar --to-command=sh -tf a.tar", "tar -tf a.tar --to-command=sh",
        "tar --checkpoint-action=exec=sh -tf a.tar", "tar -I sh -tf a.tar",
        "tar --use-compress-program=sh -tf a.tar", "tar -tf a.tar -F sh",
        "tar --rsh-command=sh -tf h:a.tar", "tar -tf host:a.tar", "rg --pre sh foo",
        "rg --pre=sh foo", "rg -z foo", "rg --hostname-bin=sh foo", "grep --exclude-fro=x a",
        "uv run pytest", "uv run x", "npx x", "npx cowsay hi", "npm exec x", "go run .",
        "python -c 'print(1)'", "python script.py", "python3 -m pytest", "node -e 1",
        "node build.js", "sudo ls", "env A=1 ls", "bash -lc 'git status'", "xargs ls",
    ],
    "writes or changes": [
        "git push origin main", "git commit -m x", "git checkout main", "git branch new",
        "git branch -D main", "git branch -m a b", "git status --output=x", "git log -o x",
        "git log --output=/etc/x", "git show --output=x", "git diff --output=x",
        "git remote add x y", "git remote -v show origin", "git config user.name x",
        "sed -i s/a/b/ a.txt", "sed --in-place s/a/b/ a.txt", "sed -n '1w /tmp/x' a.txt",
        "sed -n 's/a/b/w /tmp/x' a.txt", "sed 'W /tmp/x' a.txt", "sed '1r /etc/passwd' a",
        "sed 'a text' a.txt", "sed '1{p}' a.txt", "sed 's|a|b|' a.txt",
        "find . -delete", "find . -fprint /tmp/x", "find . -fprint0 x", "find . -fls x",
        "find . -fprintf x %p", "tar -xf a.tar", "tar -cf a.tar .", "tar xf a.tar",
        "tar tf a.tar", "tar -tf a.tar -C /", "tail -f log.txt", "rm -rf build",
        "kill 1234", "ls > out.txt", "cat a >> b", "du --files0-from=x",
    ],
    "abbreviated or glued options": [
        "git log --outp=x", "git log --out=x", "git status --porc", "git log --one",
        "ls --al", "grep --inc='*.py' x .", "tar --to-c=sh -tf a.tar", "tar --lis -f a",
        "git log --format", "git status -sz5", "git log -n", "head -n", "git log -nfive",
        "sed -ni s/a/b/ a.txt", "ls -laI", "git status -s=x", "git status --short=x",
    ],
    "shell syntax": [
        "git status && git push", "git status; rm -rf ~", "git status | sh", "git status &",
        "git status -- $(rm -rf ~)", "git status -- `id`", "git status -- \"$(id)\"",
        "git log --format=\"$HOME\"", "cat ~/.ssh/id_rsa", "cat *", "ls src/*.py",
        "ls {a,b}", "ls [ab]", "ls a?", "git status #x", "git status\nrm -rf ~",
        "git status\trm", "echo hi > /etc/x", "cat < /etc/passwd", "(git status)",
        "git status -- \\$x", "ls 'unclosed", "ls \"unclosed", "ls =ls", "ls a=~/x",
        "ls !x", "cat 'a\\'", "cat 'a\\\\b'", "", "   ",
    ],
    "environment and program path": [
        "FOO=1 git status", "GIT_DIR=/tmp git status", "PATH=/tmp git status",
        "/tmp/evil/git status", "./git status", "../bin/git status", "/usr/bin/git status",
        "bin/git status", "~/git status", "'./git' status",
    ],
    "outside the command's directory": [
        "cat /etc/passwd", "cat ../secret", "cat src/../../secret", "ls /", "ls ..",
        "head -n 5 /etc/shadow", "grep -r foo /home", "grep -f /etc/passwd x",
        "find / -name x", "find . -newer /etc/x", "tar -tf /tmp/a.tar", "git log -- ../x",
        "git status -- /etc", "cat -- -n", "sed -n p /etc/passwd", "ls -- -la",
        "git diff a/../../etc/passwd b", "git log src/../..", "git show x/../../y",
    ],
    "lookalikes and invisible characters": [
        "gіt status", "git stаtus", "ｇｉｔ status", "git status –porcelain",
        "git status —short", "git\u200b status", "git status\u2067 #\u2069", "git\u00a0status",
        "ls\u202e", "cat ﬁle", "git status -\u0455",
    ],
    "credentials": [
        "curl -u ada:hunter2 https://example.com", "git log --author=x https://a:b@h",
        "grep -r 'Authorization: Bearer abcdef' .", "grep ghp_abcdefghijklmnopqrstuvwxyz .",
        "cat --password=x a", "GITHUB_TOKEN=x git status",
    ],
}


@pytest.mark.parametrize(("command", "operation"), COVERED)
def test_read_only_forms_are_covered(command: str, operation: str | None) -> None:
    assert scope_of(command) == operation


@pytest.mark.parametrize("command", [c for cases in NOT_COVERED.values() for c in cases])
def test_nothing_that_could_do_more_is_covered(command: str) -> None:
    assert scope_of(command) is None


def test_every_form_of_an_operation_falls_under_one_key_and_label() -> None:
    first = command_scope("git status -s", CWD, PROGRAMS)
    assert first is not None and first.label == "`git status` in this session"
    for other in ("git status --porcelain", "git status", "git status -sb -- src"):
        assert command_scope(other, CWD, PROGRAMS) == first
    assert command_scope("git log", CWD, PROGRAMS) != first


def test_the_key_holds_the_directory_and_where_the_program_was_found() -> None:
    here = command_scope("git status", CWD, PROGRAMS)
    elsewhere = command_scope("git status", "/work/other", PROGRAMS)
    moved = command_scope("git status", CWD,
                          Programs(PROGRAMS.table, {"git": "/tmp/evil/git"}.get))
    assert here is not None and elsewhere is not None and moved is not None
    assert len({here.key, elsewhere.key, moved.key}) == 3
    assert "/usr/bin/git" in here.key and "/tmp/evil/git" in moved.key
    assert command_scope("git status", CWD, Programs(PROGRAMS.table, {}.get)) is None
    assert command_scope("git status", CWD, Programs(PROGRAMS.table, {"git": "git"}.get)) \
        is None
    assert command_scope("git status", None, PROGRAMS) is None
    assert command_scope("git status", "work/project", PROGRAMS) is None


@pytest.mark.parametrize("command", [
    "pytest", "pytest -q", "pytest tests/test_x.py -q", "make", "make test",
    "npm test", "npm run build", "cargo test", "cargo build --release", "go test ./...",
])
def test_programs_that_run_code_get_the_exact_command_only(command: str) -> None:
    scope = command_scope(command, CWD, PROGRAMS)
    assert scope is not None
    assert scope.label == f"this exact command in this session: `{command}`"
    assert json.loads(scope.key.removeprefix("shell|"))[0] == "exact"
    for other in (command + " -x", command + "  ", f"{command} --co"):
        assert command_scope(other, CWD, PROGRAMS) != scope
    assert command_scope(command, "/work/other", PROGRAMS) != scope


@pytest.mark.parametrize("command", [
    "npm install", "npm ci", "npm publish", "cargo install x", "go get x", "go generate",
    "make -f /tmp/Makefile | sh", "pytest $(x)", "FOO=1 pytest", "./node_modules/.bin/jest",
    "/usr/bin/make", "make; rm -rf ~",
])
def test_exact_commands_keep_every_other_rule(command: str) -> None:
    assert command_scope(command, CWD, PROGRAMS) is None


def test_the_table_never_lists_what_it_says_no_grant_covers() -> None:
    table = command_table()
    assert {"npx", "uv run", "python", "node", "bash", "sudo", "rm", "env"} <= set(table.never)
    for command in table.never:
        assert scope_of(command) is None
        assert scope_of(command + " x") is None


def test_an_abbreviation_of_any_allowed_long_option_is_refused() -> None:
    for operation in command_table().reads.values():
        longs = [name for name in operation.options if name.startswith("--")]
        for name in longs:
            for cut in range(3, len(name)):
                prefix = name[:cut]
                if prefix in operation.options:
                    continue
                words = [operation.program, *filter(None, [operation.subcommand]), prefix]
                assert command_table().judge(words) is None, (words, name)


def _call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall("Claude Code", tool, arguments, cwd="/work/project")


def test_hook_scopes_are_per_session_and_narrow() -> None:
    status = hook_scope(_call("Bash", command="git status -s"), "s1", PROGRAMS)
    assert status is not None and status.label == "`git status` in this session"
    assert hook_scope(_call("Bash", command="git status --porcelain"), "s1", PROGRAMS) == status
    assert hook_scope(_call("Bash", command="git status"), "s2", PROGRAMS) != status
    assert hook_scope(_call("Bash", command="git log"), "s1", PROGRAMS) != status
    assert hook_scope(_call("Bash", command="git status"), None, PROGRAMS) is None
    assert hook_scope(_call("Bash", command="git status"), "s1") is None

    edit = hook_scope(replace(_call("Edit", file_path="src/app.py", old_string="a",
                                    new_string="b"), real_path="/work/project/src/app.py"),
                      "s1")
    assert edit is not None and edit.label == "edits in /work/project/src in this session"
    assert hook_scope(replace(_call("Write", file_path="/work/project/src/new.py", content=""),
                              real_path="/work/project/src/new.py"), "s1") == edit
    assert hook_scope(replace(_call("Write", file_path="/work/project/other.py", content=""),
                              real_path="/work/project/other.py"), "s1") != edit
    assert hook_scope(_call("WebFetch", url="https://example.com"), "s1") is None

    mcp = hook_scope(ToolCall("Claude Code", "mcp__github__create_issue", {},
                              mcp_server="github", mcp_tool="create_issue"), "s1")
    assert mcp is not None and mcp.label == "`create_issue` of github in this session"
    assert gateway_scope(["npx", "github-mcp"], "create_issue").label == (
        "`create_issue` of npx github-mcp")


def test_a_command_runs_where_its_arguments_say() -> None:
    home = hook_scope(_call("run_shell_command", command="ls", dir_path="src"), "s1", PROGRAMS)
    root = hook_scope(_call("run_shell_command", command="ls"), "s1", PROGRAMS)
    assert home is not None and root is not None and home != root
    assert '"/work/project/src"' in home.key


def test_a_command_given_as_words_is_judged_as_those_words() -> None:
    assert hook_scope(_call("exec_command", command=["git", "status", "-s"]), "s1",
                      PROGRAMS) == hook_scope(_call("Bash", command="git status -s"), "s1",
                                              PROGRAMS)
    for words in (["cat", "'a", "-n", "b'"], ["git", "status --output=x"],
                  ["ls", "a b"], ["bash", "-lc", "ls"]):
        assert hook_scope(_call("exec_command", command=words), "s1", PROGRAMS) is None


def test_a_long_scope_keeps_the_key_within_the_protocol_limit() -> None:
    path = "/" + "d/" * 200 + "f.py"
    scope = hook_scope(replace(_call("Write", file_path=path, content=""), real_path=path),
                       "s1")
    assert scope is not None and len(scope.key) <= 200 and len(scope.label) <= 200
    long = hook_scope(_call("Bash", command="pytest " + "-q " * 150), "s1", PROGRAMS)
    assert long is not None and len(long.key) <= 200 and len(long.label) <= 200
