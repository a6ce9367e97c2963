"""Errors a user can cause (config, data, checkpoint, command line).

The tools catch `UserError` and print its message as one line with a non-zero exit
(the full traceback only with `--debug`), so every message must name the culprit:
the config key, the file, or the value.
"""


class UserError(Exception):
    """Base class for mistakes in the user's config, data, files or command line."""


class ConfigError(UserError):
    """A config key, value, component type or keyword is wrong."""


class DataError(UserError):
    """A data folder, image or mask is missing or malformed."""


class CheckpointError(UserError):
    """A checkpoint or pretrained file cannot be used."""


class NonFiniteError(UserError):
    """Training diverged: a loss or the weights stopped being finite (NaN or inf)."""


class EvaluationError(UserError):
    """Evaluation during training failed (a bad validation image, a killed worker); the training
    iteration itself had completed, so its checkpoint is still saved."""
