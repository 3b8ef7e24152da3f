"""One exception type for mistakes a person can fix (bad params, missing data, corrupt files).

The CLI prints these without a traceback; everything else is a bug and keeps its traceback.
"""


class LeanLMError(Exception):
    """An error whose message says what was wrong, where (file, key, value) and what to do."""


class ConfigError(LeanLMError):
    """A params file is malformed, names an unknown key/variant, or combines impossible values."""


class DataError(LeanLMError):
    """Input data is missing, unreachable (hub offline) or malformed."""


class TrainingError(LeanLMError):
    """Training cannot go on (NaN/inf loss, corrupt checkpoint, ...)."""


class OutputError(LeanLMError, OSError):
    """An output cannot be written (read-only or full disk, missing permission). Also an ``OSError``, so
    code that handles failed writes as OSError still does."""

    def __str__(self) -> str:  # the message alone, even with errno/filename set (OSError would reformat)
        return str(self.args[0]) if self.args else ""
