"""``Runtime``: the host's dependencies a use case runs with, given once.

Telemetry, a redactor and secrets, limits, a clock and an abort signal are the same for every
call a host makes; a ``Runtime`` carries them so a use case takes one ``runtime=`` instead of
six keywords. Every field is optional and checked when the value is built.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ragport.application._support import NOOP_TELEMETRY, SYSTEM_CLOCK, Redaction, resolve_limits
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, Limits
from ragport.ports.runtime import Abort, Clock, Redactor, Telemetry

__all__ = ["DEFAULT_RUNTIME", "Runtime", "check_runtime"]


def _secrets(value: Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("secrets must be a sequence of strings", field="secrets")
    if not all(isinstance(s, str) for s in value):
        raise ValidationError("secrets must be a sequence of strings", field="secrets")
    return tuple(value)


def _limits(value: Limits | None) -> Limits:
    return resolve_limits(value)


def _abort(value: Abort | None) -> Abort | None:
    if value is not None and not isinstance(value, Abort):
        raise ValidationError("abort must have an is_set() method", field="abort")
    return value


@attrs.frozen(kw_only=True)
class Runtime:
    """What a use case runs with, besides its own arguments.

    - ``telemetry``: spans and counters (``ragport.ports.runtime.Telemetry``); none by default.
    - ``redactor`` and ``secrets``: text is redacted before it is embedded, reranked or
      rendered (``secrets`` are literal strings replaced everywhere).
    - ``limits``: the per-call defaults and ceilings (``DEFAULT_LIMITS`` by default); a number
      a request leaves at ``None`` takes its value from here.
    - ``clock``: tells ``retrieved_at`` (``SystemClock`` by default).
    - ``abort``: a ``threading.Event``-like signal checked between steps (``AbortedError``).

    ``ValidationError`` names the field at fault when a value is of the wrong kind.
    """

    telemetry: Telemetry | None = None
    redactor: Redactor | None = None
    secrets: tuple[str, ...] | None = attrs.field(
        default=None, converter=_secrets, repr=lambda v: "None" if v is None else "<hidden>"
    )
    limits: Limits = attrs.field(default=DEFAULT_LIMITS, converter=_limits)
    clock: Clock | None = None
    abort: Abort | None = attrs.field(default=None, converter=_abort)
    _redaction: Redaction = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_redaction", Redaction(self.redactor, self.secrets))

    @property
    def effective_telemetry(self) -> Telemetry:
        """``telemetry``, or the one that records nothing."""
        return NOOP_TELEMETRY if self.telemetry is None else self.telemetry

    @property
    def effective_clock(self) -> Clock:
        """``clock``, or the system clock."""
        return SYSTEM_CLOCK if self.clock is None else self.clock

    @property
    def redaction(self) -> Redaction:
        """The redaction of ``redactor`` and ``secrets`` (inactive when both are unset)."""
        return self._redaction


DEFAULT_RUNTIME = Runtime()


def check_runtime(runtime: object) -> Runtime:
    """``runtime`` if it is a ``Runtime`` (``ValidationError(field="runtime")`` otherwise)."""
    if not isinstance(runtime, Runtime):
        raise ValidationError("runtime must be a Runtime", field="runtime")
    return runtime
