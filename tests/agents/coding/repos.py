"""Real git repositories for the coding workflow's tests: made with the git
program, as a user would, not with the code under test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: The source repository's committed files.
COMMITTED = {
    ".gitignore": "build/\n*.log\n",
    "README.md": "# Demo\n\nHello.\n",
    "src/app.py": "def answer():\n    return 41\n",
    "src/util.py": "def twice(x):\n    return x + x\n",
}


def sh_git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` as a user would; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(
        ["git", "-c", "user.name=Tester", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        check=True,
    )
    return done.stdout.decode()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(path: Path, *, commit: bool = True) -> Path:
    """A repository at ``path`` with :data:`COMMITTED` (committed, unless not
    ``commit``: then the files are there and nothing is committed)."""
    path.mkdir(parents=True)
    sh_git(path, "init", "--quiet")
    sh_git(path, "symbolic-ref", "HEAD", "refs/heads/main")
    write(path, COMMITTED)
    if commit:
        sh_git(path, "add", "-A")
        sh_git(path, "commit", "--quiet", "-m", "init")
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but ``.git``'s, by relative path (a link as
    its target): to show that nothing changed."""
    out: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if rel == ".git":
                continue
            out[rel] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return out
