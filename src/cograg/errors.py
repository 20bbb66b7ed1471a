"""Exception hierarchy. Every error a user can cause derives from CogragError so the CLI and
API can turn it into one clear line instead of a traceback."""


class CogragError(Exception):
    """Base class for errors that are reported to the user as one line."""


class StoreError(CogragError):
    """The store is missing, unreadable, from an incompatible version, or misused."""


class IngestError(CogragError):
    """A whole ingest run cannot proceed (bad arguments, missing path)."""


class LoaderError(CogragError):
    """One file cannot be loaded; the run records it as skipped with this message as reason."""


class ConfigError(CogragError):
    """Invalid configuration value or file."""


class ConfigFileError(ConfigError):
    """A file the deployment is configured with (corpus policy, routing rules, fusion calibration)
    cannot be read or is invalid: the HTTP API answers it as the server's fault (500), not the
    request's (400) as it does an unknown model or mode in a request."""
