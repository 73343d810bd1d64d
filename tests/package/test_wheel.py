"""The package as a user installs it: a wheel built from the source tree, installed without `-e` into an
environment of its own, with the `moonsend` command started from it. An editable install hides every
packaging mistake (it imports from the tree), so this is the only test that sees what a wheel carries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCE = (".git", ".venv", ".chalice", "build", "outbox", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")
pytestmark = pytest.mark.package


def _packages_in(top: Path, names: tuple[str, ...]) -> set[str]:
    return {
        str(init.parent.relative_to(top)).replace(os.sep, ".")
        for name in names
        for init in (top / name).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding the wheel (and, through a path file, the dependencies this test run
    already has: the wheel's own content is what is under test, not PyPI's)."""
    work = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools builds in the tree's own build/ folder, which two test workers (and a
    # developer's build/npm cache) would otherwise share, and a fresh clone has none of the tree's clutter.
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = work.glob("moonsend-*.whl")
    env_dir = work / "env"
    subprocess.run([sys._base_executable, "-m", "venv", str(env_dir)], check=True)  # type: ignore[attr-defined]
    python = env_dir / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A plain path line: the dependencies' site-packages is added, but its own .pth files (among them the
    # editable install's finder, which would import this source tree) are not processed.
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_the_wheel_carries_every_package_of_the_source_tree(installed: Path):
    site = next((installed / "lib").glob("python3.*/site-packages"))
    assert _packages_in(site, ("chalicelib", "infra")) == _packages_in(ROOT, ("chalicelib", "infra"))


def test_the_wheel_carries_the_data_the_code_reads(installed: Path, tmp_path: Path):
    """Templates, stylesheet and registries are not Python: a wheel without them imports fine and fails on
    the first page or the first webhook address checked, so each is read through the installed code."""
    script = (
        "from chalicelib.console import pages; from chalicelib.webhooks import special_addresses as s;"
        "print(len(pages.render('error.html', base='', session=None, title='t', detail='d')) > 0,"
        " pages.static_file('console.css') is not None, s.__file__)"
    )
    done = subprocess.run(
        [str(installed / "bin" / "python"), "-c", script],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    page, css, where = done.stdout.split()
    assert (page, css) == ("True", "True")
    assert Path(where).is_relative_to(installed)


def test_the_installed_moonsend_command_starts_outside_the_source_tree(installed: Path, tmp_path: Path):
    done = subprocess.run(
        [str(installed / "bin" / "moonsend"), "--help"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "usage: moonsend" in done.stdout and "deploy" in done.stdout


def test_the_installed_modules_come_from_the_wheel_not_the_source_tree(installed: Path, tmp_path: Path):
    done = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import chalicelib.send.drainer as m, app; print(m.__file__)"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(installed)
