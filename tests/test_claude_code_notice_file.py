"""The file that remembers which sessions were told the guard is off, against names planted around it.

Each attack in the cache directory: a FIFO at the file's path (the hook must not hang), a link at a
temporary name (no file of the user's overwritten), a directory others can write into (not used), a
directory at the file's path (no temporary file left per call). The sidecar is down in each: the
path that reads and writes the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from otelguard.coding_agents.off_notice import NOTICE_FILE, notice
from tests.e2e import free_port
from tests.test_cli_hook import PRE, hook, off_notice


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hook's cache directory (``$XDG_CACHE_HOME/otelguard``), made private as the hook makes it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "otelguard"
    directory.mkdir(parents=True, mode=0o700)
    return directory


def down() -> str:
    return f"http://127.0.0.1:{free_port()}"


def told(session: str) -> bool:
    return bool(notice(json.dumps({**PRE, "session_id": session}).encode(), "sidecar down"))


def test_a_fifo_at_the_files_path_does_not_hang_the_hook(cache: Path) -> None:
    """``hook`` waits 60 s, far above the hook's ``--timeout``: a hook still running then is hung."""
    os.mkfifo(cache / NOTICE_FILE, 0o600)
    ran = hook(PRE, "--url", down(), "--timeout", "2")
    assert ran.returncode == 0 and "unreachable" in off_notice(ran.stdout)
    # the FIFO was replaced by the file, which now remembers the session
    assert stat.S_ISREG((cache / NOTICE_FILE).stat().st_mode)
    assert hook(PRE, "--url", down(), "--timeout", "2").stdout == b""


def test_a_link_planted_at_a_temporary_name_overwrites_nothing(cache: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    # the names a temporary file could take before: the file's path and this process's id
    planted = [cache / f"{NOTICE_FILE}.{os.getpid()}", cache / f".{NOTICE_FILE}.{os.getpid()}"]
    for link in planted:
        link.symlink_to(victim)
    assert told("s1") and not told("s1")
    assert victim.read_text() == "the user's own file\n"
    assert all(link.is_symlink() and link.resolve() == victim for link in planted)
    assert not (cache / NOTICE_FILE).is_symlink() and (cache / NOTICE_FILE).stat().st_mode & 0o077 == 0


def test_a_link_at_the_files_path_is_replaced_not_followed(cache: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    (cache / NOTICE_FILE).symlink_to(victim)
    assert told("s1") and not told("s1")
    assert victim.read_text() == "the user's own file\n" and not (cache / NOTICE_FILE).is_symlink()


def test_a_directory_others_can_write_into_is_not_used(cache: Path) -> None:
    cache.chmod(0o777)  # as a world-writable "private" directory was found
    assert told("s1") and told("s1")  # nothing to remember it with: told on every failing call
    ran = hook(PRE, "--url", down())
    assert ran.returncode == 0 and "unreachable" in off_notice(ran.stdout) and b"unreachable" in ran.stderr
    assert list(cache.iterdir()) == []
    cache.chmod(0o770)  # group-writable: the same
    assert told("s1") and list(cache.iterdir()) == []


def test_a_directory_of_another_user_or_a_link_to_one_is_not_used(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.rmdir()
    cache.symlink_to(elsewhere)  # the directory itself a link: not followed
    assert told("s1") and list(elsewhere.iterdir()) == []
    if os.geteuid() != 0:
        return  # only root can give a directory to another user
    cache.unlink()
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    assert told("s1") and list(cache.iterdir()) == []


def test_a_directory_at_the_files_path_leaves_no_temporary_file(cache: Path) -> None:
    (cache / NOTICE_FILE).mkdir()
    for _ in range(4):  # separate processes, as Claude Code runs the hook
        ran = hook(PRE, "--url", down())
        assert ran.returncode == 0 and "unreachable" in off_notice(ran.stdout)  # told: cannot remember
    assert [path.name for path in cache.iterdir()] == [NOTICE_FILE]
    assert list((cache / NOTICE_FILE).iterdir()) == []
