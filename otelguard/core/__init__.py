"""The guard itself: config in, decisions out; it knows no telemetry, state backend, server or framework."""
