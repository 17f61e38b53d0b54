"""README opens with the two set-up commands, and CI runs exactly the test one."""

import re

from conftest import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text)[:2]


def test_readme_opens_with_example_and_test_commands():
    example, tests = readme_commands()
    assert "diagnoser " in example and "examples/" in example and "python3 -m venv" in example
    assert "pytest" in tests and "python3 -m venv" in tests
    example_path = re.search(r"(examples/\S+)", example).group(1)
    assert (REPO / example_path).is_file()


def test_ci_runs_the_readme_test_command_verbatim():
    _, tests = readme_commands()
    ci = (REPO / ".ci" / "run").read_text()
    assert tests in ci
