"""The docs say what the code does: the configuration reference names every key the broker knows,
with the default the code has, the README's commands run as written, and relative links lead
somewhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from logbus.config import BROKER_KEYS, TOPIC_KEYS
from logbus.testing import running_broker

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(?P<key>[a-z0-9.]+)` \| (?P<second>[^|]*) \|", re.MULTILINE)


def documented(section: str) -> dict[str, str]:
    """Key -> second column of the tables under the `## {section}` heading."""
    text = DOC.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return {m["key"]: m["second"].strip() for m in ROW.finditer(text)}


def test_every_broker_key_is_documented_with_its_default() -> None:
    rows = documented("Broker keys")
    for key in BROKER_KEYS.values():
        expected = "(none)" if key.default is None else key.default
        assert rows.get(key.name) == f"`{expected}`", f"{key.name}: docs say {rows.get(key.name)!r}"


def test_every_topic_key_is_documented_with_its_fallbacks() -> None:
    rows = documented("Topic keys")
    for topic_key in TOPIC_KEYS.values():
        fallbacks = ", ".join(f"`{name}`" for name, _ in topic_key.synonyms)
        default = topic_key.key.default
        expected = fallbacks or (f"(none; default `{default}`)" if default else "(none; default empty)")
        assert rows.get(topic_key.key.name) == expected, topic_key.key.name


README = DOC.parent.parent / "README.md"


def readme_use_it_commands() -> list[str]:
    """The shell lines of the README's "Use it" section (first sh block)."""
    section = README.read_text(encoding="utf-8").split("## Use it\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_use_it_commands_work_as_written() -> None:
    """Each line runs in bash against a real broker, `./dev logbus` being `python -m logbus` pointed
    at that broker (./dev itself is tested in test_cli.py) and kcat's address the broker's."""
    lines = readme_use_it_commands()
    assert any(line.startswith("./dev logbus consume") for line in lines)
    with running_broker() as broker:
        prelude = f'logbus_here() {{ "{sys.executable}" -m logbus "$@" --bootstrap-server {broker.bootstrap}; }}\n'
        outputs = []
        for line in lines:
            if line.startswith("kcat") and shutil.which("kcat") is None:
                continue
            command = line.replace("./dev logbus", "logbus_here").replace("127.0.0.1:9092", broker.bootstrap)
            result = subprocess.run(
                ["bash", "-o", "pipefail", "-c", prelude + command], capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, f"{line}\n{result.stderr}"
            outputs.append(result.stdout)
    assert sorted(outputs[2].splitlines()) == ['{"amount": 3}', '{"amount": 9.5}']  # two partitions: any order
    assert "my-group" in outputs[3] and "orders" in outputs[3]


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def github_anchors(markdown: Path) -> set[str]:
    """The anchors GitHub gives a file's headings (lower case, punctuation dropped, spaces to
    hyphens, repeats numbered), outside code blocks."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        in_code ^= line.startswith("```")
        if in_code or not line.startswith("#"):
            continue
        anchor = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        numbered, count = anchor, 0
        while numbered in anchors:
            count += 1
            numbered = f"{anchor}-{count}"
        anchors.add(numbered)
    return anchors


def test_relative_links_in_the_docs_resolve() -> None:
    """Every relative link of README.md and docs/*.md names a file or directory that exists and,
    with `#anchor`, a heading of that file."""
    broken = []
    for source in [README, *sorted(DOC.parent.glob("*.md"))]:
        for match in LINK.finditer(source.read_text(encoding="utf-8")):
            target = match["target"]
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (source.parent / path).resolve() if path else source
            if not resolved.exists():
                broken.append(f"{source.name}: {target}")
            elif anchor and anchor not in github_anchors(resolved):
                broken.append(f"{source.name}: {target} (no such heading)")
    assert not broken, broken
