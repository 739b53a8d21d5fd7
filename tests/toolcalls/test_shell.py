"""The shell analyser on command shapes agents really send (most taken from the shared
transcripts): quoted paths, heredocs, pipelines, ``cd dir && ...``, scripts that write files."""

from __future__ import annotations

import pytest

from sidecar.toolcalls.shell import analyse, diff_files, parse, script_writes

HEREDOC_SCRIPT = """cd /testbed && cat > test_issue2.py << 'EOF'
import os
if a > b:
    print("x > y")
EOF
python test_issue2.py"""


@pytest.mark.parametrize(
    ("command", "written"),
    [
        # redirections, quoted and unquoted, with the fd forms that write nothing
        ("echo hi > 'my file.txt'", ["my file.txt"]),
        ('printf "%s" "$X" >> "logs/out put.log" 2>&1', ["logs/out put.log"]),
        ("ls 2>/dev/null; make > build.log 2>&1", ["build.log"]),
        ("npm test -- --watch=false &> test-output.txt", ["test-output.txt"]),
        # pipelines: tee (with -a) and a writer at the end of a pipe
        ("grep -n foo src/a.py | tee -a log.txt >/dev/null 2>&1", ["log.txt"]),
        ("cat a.txt | sort | uniq > sorted.txt", ["sorted.txt"]),
        # cd applies to what follows in the same line
        (
            "cd /testbed && sed -i 's/a > b/a >= b/' django/db/x.py && git diff",
            ["/testbed/django/db/x.py"],
        ),
        ("cd pkg; cd src && touch new.ts", ["pkg/src/new.ts"]),
        ("(cd sub && make) > build.log 2>&1", ["build.log"]),  # the group's cd ends with it
        # macOS sed with an empty backup suffix, and -e scripts
        (
            "cd /repo/src && sed -i '' 's|from \"../config.js\"|from \"./config.js\"|g' core/a.ts",
            ["/repo/src/core/a.ts"],
        ),
        ("sed -i.bak -e 's/x/y/' -e '/^$/d' a.conf b.conf", ["a.conf", "b.conf"]),
        ("perl -pi -e 's/foo/bar/g' lib/x.pm", ["lib/x.pm"]),
        # heredocs: the body is data (its ">" writes nothing); the target is written
        (HEREDOC_SCRIPT, ["/testbed/test_issue2.py"]),
        ("cat <<EOF > config.yaml\nkey: v > w\nEOF", ["config.yaml"]),
        ("cat <<-EOF >> notes.md\n\tline\n\tEOF\necho done", ["notes.md"]),
        # patches with the diff in a heredoc
        (
            "cd /testbed && patch -p1 << 'EOF'\n--- a/django/db/m.py\n+++ b/django/db/m.py\n"
            "@@ -1 +1 @@\n-a\n+b\nEOF",
            ["/testbed/django/db/m.py"],
        ),
        (
            "git apply <<'PATCH'\ndiff --git a/src/x.ts b/src/x.ts\n"
            "--- a/src/x.ts\n+++ b/src/x.ts\n@@ -1 +1 @@\n-a\n+b\nPATCH",
            ["src/x.ts"],
        ),
        # git restores files only with "--" (or restore); a branch switch writes nothing here
        ("git checkout -- src/a.py src/b.py", ["src/a.py", "src/b.py"]),
        ("git checkout main", []),
        ("git restore --staged README.md", ["README.md"]),
        # mv writes both ends, cp the destination, rm its operands; variables and globs are
        # not file names we can know
        ("mv old.py new.py && rm -f build.log", ["old.py", "new.py", "build.log"]),
        (
            "mkdir -p ~/.pi/agent/themes && cp src/theme/dark.json ~/.pi/agent/themes/test.json",
            ["~/.pi/agent/themes/test.json"],
        ),
        ('cd src/tui && for f in *.ts; do mv "$f" ../components/; done', ["src/components/"]),
        ("rm -rf dist/*.js", []),
        # scripts that write files where recognisable
        (
            "python - <<EOF\nfrom pathlib import Path\nPath('conf/s.py').write_text('x')\nEOF",
            ["conf/s.py"],
        ),
        ("python3 -c \"open('out.json', 'w').write('{}')\"", ["out.json"]),
        ("node -e \"require('fs').writeFileSync('dist/v.txt', '1')\"", ["dist/v.txt"]),
        ("dd if=/dev/zero of=disk.img bs=1M count=1", ["disk.img"]),
        # comments, reads and broken input write nothing
        ("# echo x > y\nls -la", []),
        ("sed -n '1,20p' /testbed/django/x.py; cat README.md | head", []),
        ('echo "unterminated > x', []),
        ("", []),
    ],
)
def test_files_written(command: str, written: list[str]) -> None:
    assert analyse(command).written == written


@pytest.mark.parametrize(
    ("command", "read"),
    [
        (
            "sed -n '1,20p' /testbed/django/x.py; cat README.md | head -5",
            [
                "/testbed/django/x.py",
                "README.md",
            ],
        ),
        (
            "cd /testbed && head -n 40 setup.py && tail -f +3 'my log.txt'",
            [
                "/testbed/setup.py",
                "/testbed/my log.txt",
            ],
        ),
        ("grep -rn error src/", []),  # a search is not a read of a file
    ],
)
def test_files_read(command: str, read: list[str]) -> None:
    assert analyse(command).read == read


def test_a_heredoc_body_is_kept_for_the_file_it_creates() -> None:
    fx = analyse(HEREDOC_SCRIPT)
    assert fx.bodies == {"/testbed/test_issue2.py": 'import os\nif a > b:\n    print("x > y")'}
    assert fx.scripts_run == [("/testbed/test_issue2.py", "/testbed")]


def test_applied_patches_and_scripts_carry_their_directory() -> None:
    fx = analyse("cd /testbed && git apply fix.patch && patch -p1 < other.diff")
    assert fx.patches_applied == [
        ("/testbed/fix.patch", "/testbed"),
        ("/testbed/other.diff", "/testbed"),
    ]


def test_parse_splits_lists_and_pipelines_and_keeps_source_text() -> None:
    cmds = parse("cd /w && python -m pytest 'tests/a b.py' -x 2>&1 | tail -5 || echo failed")
    assert [c.program for c in cmds] == ["cd", "python", "tail", "echo"]
    assert cmds[1].words == ["python", "-m", "pytest", "tests/a b.py", "-x"]
    assert cmds[1].text == "python -m pytest 'tests/a b.py' -x 2>&1"
    assert [c.cwd for c in cmds] == ["", "/w", "/w", "/w"]


def test_command_substitution_and_env_prefixes_stay_inside_words() -> None:
    cmds = parse('FOO=1 sudo cp "$(npm root -g)/x/dark.json" out/ && echo `date` > stamp')
    assert cmds[0].program == "cp"
    assert cmds[0].words[3] == "$(npm root -g)/x/dark.json"
    assert analyse('FOO=1 sudo cp "$(npm root -g)/x/dark.json" out/').written == ["out/"]


def test_diff_and_script_helpers() -> None:
    diff = "*** Begin Patch\n*** Update File: a.py\n*** Add File: b/c.py\n*** End Patch"
    assert diff_files(diff) == ["a.py", "b/c.py"]
    assert diff_files("--- a/x\n+++ /dev/null\n") == []
    code = "with open(f'{d}/x', 'w') as f: pass\nopen('r.txt').read()\nopen(\"w.txt\", mode='a')"
    assert script_writes(code) == ["w.txt"]  # formatted names are unknown; reads are no writes
