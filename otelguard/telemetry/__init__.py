"""OpenTelemetry spans and Prometheus metrics for every guard decision (contract: docs/telemetry.md).

``Telemetry`` is what ``Guard(config, telemetry=...)`` accepts; ``bind`` gives the guard its observer.
"""

from __future__ import annotations

from otelguard.telemetry.attributes import STAGES
from otelguard.telemetry.core import GuardTelemetry, Telemetry, refusal_category

__all__ = ["STAGES", "GuardTelemetry", "Telemetry", "refusal_category"]
