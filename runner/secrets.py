"""What a runner child is given: the settings and the environment, without the credentials
it never needs (the API keys; the password a database or broker URL may carry)."""

from __future__ import annotations

from decide.config.settings import Settings
from decide.runner.variants import Variant, environment_for

RUNNER_SECRETS = ("api_keys", "admin_keys", "api_keys_file", "database_url", "broker_url")
"""Settings that hold credentials (the API keys; the password a database or broker URL may
carry) and that a runner never reads: neither sent to it nor left in its environment."""


def runner_settings(settings: Settings) -> Settings:
    """What a runner is sent: ``settings`` with every ``RUNNER_SECRETS`` field at its default."""
    return settings.model_copy(
        update={name: Settings.model_fields[name].default for name in RUNNER_SECRETS})


def runner_environment(build: Variant) -> dict[str, str]:
    """The runner's environment for ``build``, without the ``DECIDE_*`` variables of
    ``RUNNER_SECRETS`` (read in any case, as the settings read them)."""
    secret = {f"DECIDE_{name.upper()}" for name in RUNNER_SECRETS}
    return {name: value for name, value in environment_for(build).items()
            if name.upper() not in secret}
