"""Connecting to Temporal with phasegate's settings and data converter."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig

from domain.settings import Settings

__all__ = ["REPO_ROOT", "SHIPPED_LIBRARY", "connect", "load_settings"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED_LIBRARY = str(REPO_ROOT / "library")


def load_settings() -> Settings:
    """Settings from this process's environment (see ``domain.settings.Settings``)."""
    return Settings.from_env(os.environ, default_library=SHIPPED_LIBRARY, pathsep=os.pathsep)


async def connect(settings: Settings | None = None) -> Client:
    """Connect with the standard Temporal env config (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
    TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE / config file) and the pydantic converter.
    """
    settings = settings or load_settings()
    config = ClientConfig.load_client_connect_config()
    # Settings already reflect TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE and CLI flags win over them.
    config["target_host"] = settings.temporal_address
    config["namespace"] = settings.namespace
    return await Client.connect(**config, data_converter=pydantic_data_converter)
