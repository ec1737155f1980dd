"""Coding-agent CLIs guarded through their hooks: one module per CLI (``claude_code``, ``codex``,
``gemini_cli``, ``copilot_cli``, ``opencode``, whose plugin is ``otelguard/data/opencode-plugin.js``)
beside what they share: the ``otelguard hook CLI`` command (``hook``, standard library only), the base
of every CLI's mapping and the checks of a payload's fields (``mapping``), the printing of settings
(``settings``), large payloads and the notice that the guard is off."""
