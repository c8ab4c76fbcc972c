"""The raptor error hierarchy. Every error says what was wrong and what to do about it."""

from __future__ import annotations


class RaptorError(Exception):
    """Base class of every error raptor raises on purpose."""


class ConfigError(RaptorError, ValueError):
    """A configuration value is out of range or inconsistent with another one."""


class DataError(RaptorError, ValueError):
    """Input data is missing, malformed or does not match the task specification."""


class UnsupportedModelError(RaptorError, ValueError):
    """The model family, or one of its trainable parameters, is not supported by the engine."""


class PrivacyError(RaptorError):
    """Something would break the privacy guarantee; raised instead of silently continuing."""


class BudgetExceededError(PrivacyError):
    """Executing the requested releases would spend more privacy budget than planned."""


class InfeasibleTargetError(ConfigError):
    """No noise level reaches the requested (epsilon, delta) under the given plan."""


class CheckpointError(ConfigError):
    """A checkpoint is missing, truncated, corrupt or belongs to another run."""


class RaptorWarning(UserWarning):
    """Something the user should know about that does not stop the run (the CLI prints it on one line)."""


class DataWarning(RaptorWarning):
    """Input data is usable but suspicious (e.g. empty texts)."""
