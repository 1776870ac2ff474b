"""The settings file's `telemetry` section: where traces go (read by
`runtime/execution/resources.py`, which installs `common/telemetry.py`'s
tracing from it).

    telemetry:
      otlp_endpoint: http://127.0.0.1:6006/v1/traces   # a collector's OTLP/HTTP traces URL
      headers_env: {Authorization: OTLP_AUTH}        # header -> variable holding its value
      service_name: firstgate
      sample_ratio: 1.0                               # of new traces; a caller's decision wins
      capture_content: false                          # prompts, answers, node inputs/outputs
      propagate: true                                 # send traceparent to models and HTTP targets

No endpoint: no tracing (no export thread starts, nothing is encoded). An
endpoint with credentials in it (`user:password@`) is refused, as a model
route's `base_url` is: a key goes in a header read from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from firstgate.common.dsl import SettingsModel, dsl_error
from firstgate.common.redaction import has_credentials, redact_url
from firstgate.common.telemetry import TracingConfig
from pydantic import Field, field_validator


class TelemetrySettings(SettingsModel):
    otlp_endpoint: str | None = None
    headers_env: dict[str, str] = Field(default_factory=dict)
    service_name: str = Field(default="firstgate", min_length=1, max_length=200)
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    capture_content: bool = False
    propagate: bool = True

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("http://", "https://")) or not urlsplit(value).hostname:
            raise dsl_error(
                "dsl.telemetry.endpointScheme",
                "otlp_endpoint must be an http:// or https:// URL, got {value}",
                value=repr(redact_url(value, user=False)[:80]),
            )
        if has_credentials(value):
            raise dsl_error(
                "dsl.telemetry.endpointCredentials",
                "otlp_endpoint must not contain credentials (user:password@), got {value}; "
                "put the key in a header named in headers_env",
                value=repr(redact_url(value, user=False)[:80]),
            )
        return value

    def tracing(self, environ: Mapping[str, str] | None = None) -> TracingConfig | None:
        """The tracing to install, headers read from the environment now (a
        variable that is unset sends no header); None when no endpoint is set."""
        if self.otlp_endpoint is None:
            return None
        env = os.environ if environ is None else environ
        headers = {name: env[var] for name, var in self.headers_env.items() if env.get(var)}
        return TracingConfig(
            endpoint=self.otlp_endpoint,
            service_name=self.service_name,
            sample_ratio=self.sample_ratio,
            capture_content=self.capture_content,
            propagate=self.propagate,
            headers=headers,
        )
