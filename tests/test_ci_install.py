"""The README's install (`.ci/install-packages`) leaves no server running or enabled, run against stub
`apt-get`, `dpkg-query` and `systemctl` (the real ones would change this machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.markdown_docs import README, REPO

SCRIPT = REPO / ".ci" / "install-packages"


def _stubs(tmp_path: Path, installed: tuple[str, ...]) -> tuple[Path, Path]:
    """Stub commands that record what they were asked in ``log``; ``apt-get install`` asks the
    policy, as Debian's maintainer scripts do before starting a service."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stubs = {
        "apt-get": f'echo "apt-get $1" >> {log}\n'
        f'if [ "$1" = install ]; then "$OTELGUARD_POLICY_RC_D" prometheus start; '
        f'echo "policy $?" >> {log}; fi\n',
        "dpkg-query": 'case "$4" in '
        + "|".join(installed or ("none",))
        + ') echo "install ok installed";; esac\n',
        "systemctl": f'echo "systemctl $*" >> {log}\n',
    }
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return bin_dir, log


def _run(tmp_path: Path, policy: Path, installed: tuple[str, ...] = ()) -> list[str]:
    bin_dir, log = _stubs(tmp_path, installed)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "OTELGUARD_POLICY_RC_D": str(policy)}
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True, timeout=60)
    return log.read_text().splitlines()


def test_servers_are_not_started_during_the_install_nor_enabled_after_it(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    log = _run(tmp_path, policy, installed=("redis-server",))
    assert log[:3] == ["apt-get update", "apt-get install", "policy 101"]  # every start refused
    disabled = [line.split()[-1] for line in log if line.startswith("systemctl disable")]
    # the servers this install added; a Redis that was there before is the machine's own business
    assert disabled == ["prometheus", "prometheus-alertmanager", "prometheus-pushgateway"]
    assert not policy.exists()  # the machine's later installs start services as usual


def test_a_policy_the_machine_has_is_left_as_it_is(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n# the machine's own\n")
    policy.chmod(0o755)
    _run(tmp_path, policy)
    assert policy.read_text().endswith("# the machine's own\n")


def test_the_readme_and_ci_install_with_the_script() -> None:
    assert ".ci/install-packages && python3 -m venv .venv" in README.read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert any(line.strip().startswith(".ci/install-packages") for line in ci.splitlines())
    assert "apt-get install" not in ci  # one install, in one place
    assert os.access(SCRIPT, os.X_OK)
