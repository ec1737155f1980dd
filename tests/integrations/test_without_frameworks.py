"""Importing otelguard never imports a framework; an adapter without its framework names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

FRAMEWORKS = {
    "langchain": (("langchain", "langgraph", "langchain_core"), "langchain"),
    "openai_agents": (("agents",), "openai-agents"),
    "pydantic_ai": (("pydantic_ai",), "pydantic-ai"),
}


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_import_otelguard_and_the_integrations_package_loads_no_framework() -> None:
    done = run_python(
        """
        import sys
        import otelguard, otelguard.integrations
        from otelguard import Guard, GuardConfig
        Guard(GuardConfig()).before_call("web_search", {"q": 1})
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("langchain", "langgraph", "agents", "pydantic_ai"))
        print(loaded)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("adapter", sorted(FRAMEWORKS))
def test_an_adapter_without_its_framework_raises_import_error_naming_the_extra(adapter: str) -> None:
    blocked, extra = FRAMEWORKS[adapter]
    done = run_python(
        f"""
        import sys
        for name in {blocked!r}:
            sys.modules[name] = None  # the framework is not installed
        import otelguard
        from otelguard import Guard
        Guard().before_call("read_file", {{"path": "a"}})
        try:
            import otelguard.integrations.{adapter}
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("the adapter imported without its framework")
        """
    )
    assert done.returncode == 0, done.stderr
    assert f'pip install "otelguard[{extra}]"' in done.stdout
