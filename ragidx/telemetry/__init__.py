"""OpenTelemetry traces of ragidx (filled in below)."""
