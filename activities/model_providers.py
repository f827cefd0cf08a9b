"""The models one worker can call: what a model id names, per worker, never per process.

Model ids (only the id crosses into history, never a key):

- ``demo``: offline canned answers (:mod:`phasegate.agents.demo_models`);
- ``openai:NAME`` / ``anthropic:NAME``: keys from ``OPENAI_API_KEY`` /
  ``ANTHROPIC_API_KEY`` in the worker's environment;
- ``PROVIDER:NAME``: an OpenAI-compatible server the worker's settings name
  (``PHASEGATE_MODEL_PROVIDERS``: Ollama, vLLM), its key (if any) from the variable the
  provider names;
- ``test:KEY``: a model given to this worker (``ModelProviders(models=...)``) or
  registered in this process (:func:`register_model`, re-exported by
  ``phasegate.testing``): a scripted model for tests, never configuration;
- ``rules``: the rules planner, which the workflow runs itself (never reaches here).

A :class:`ModelProviders` is built by each worker from its settings
(:meth:`ModelProviders.from_settings`) and handed to its Temporal worker as a plugin
(:meth:`ModelProviders.plugin`). Why a plugin: the LLM agents are module-level
pydantic-ai agents (their names are in recorded history) that resolve a model id
through one ``ResolveModelId`` capability, in workflow code and again in the
model-request activity, and pydantic-ai offers no per-worker hook for that (its
``models=`` registry and ``provider_factory`` belong to the agent; ``deps`` would put
the configuration in history). Temporal's per-worker hook is the interceptor: the
plugin's interceptor makes its providers current (a context variable) at every entry
point of this worker's workflows and activities, and the resolver reads
:func:`current_providers`. Two workers in one process each see their own; code that
runs outside a worker with the plugin (an agent called directly, a ``Replayer``
without it) sees an unconfigured set: no extra providers, keys from ``os.environ``.

Provider clients are built with ``max_retries=0``: Temporal owns retries, so a 429
or a 500 shows in history as an activity retry instead of hiding inside one attempt.
A server that refuses the connection, or whose host name does not resolve
(:func:`refused`), is no failure a retry fixes: the request fails at once, and
:meth:`ModelProviders.unreachable` checks a configured server before a run relies on it.
Threat level: API keys live only in the worker's environment (level 3 holds them
away from workflow history and from every client, not from a shell on the worker).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import socket
import urllib.parse
import urllib.request
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, ClassVar

from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model
from temporalio import workflow
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from phasegate.agents.demo_models import DEMO_MODEL_ID, demo_model
from phasegate.domain.orchestration.agents import AGENTS
from phasegate.domain.settings import ProviderConfig, Settings

__all__ = [
    "RULES_MODEL_ID",
    "ModelProviders",
    "check_hint",
    "current_providers",
    "refused",
    "register_model",
    "unregister_model",
]

RULES_MODEL_ID = "rules"
LLM_ROLES = tuple(a for a in AGENTS if a != "developer")  # the developer runs a coding agent
_KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_WORKFLOW_SIDE_KEY = "not-used-in-workflow-code"  # the workflow's copy never sends a request
_NO_KEY = "no-key-needed"  # OpenAI's client insists on some key; local servers ignore it
_TEST_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONNECT_SECONDS = 3.0  # the start-up check of a provider's server

# Scripted models registered for this process's tests (phasegate.testing.register_model):
# added to and removed by key, never replaced by a worker.
_REGISTERED: dict[str, Model] = {}


def register_model(key: str, model: Model) -> str:
    """Make ``test:KEY`` resolve to ``model`` on every worker of this process; returns
    ``"test:KEY"``. For tests (re-exported as ``phasegate.testing.register_model``).

    Raises:
        ValueError: The key is not 1-64 letters, digits, ``.``, ``_`` or ``-``.
    """
    if not _TEST_KEY.fullmatch(key):
        raise ValueError(f"test model key {key!r}: use 1-64 letters, digits, . _ or -")
    _REGISTERED[key] = model
    return f"test:{key}"


def unregister_model(key: str) -> None:
    """Forget ``test:KEY`` (no error if it was not registered)."""
    _REGISTERED.pop(key, None)


def _split(model_id: str) -> tuple[str, str]:
    provider, sep, name = model_id.partition(":")
    return (provider, name) if sep else ("", model_id)


def check_hint(agent: str) -> str:
    """What to do about an unusable model of ``agent``."""
    return (
        f"set the profile's models.{agent} (or PHASEGATE_MODELS on the worker) to demo, "
        "openai:NAME, anthropic:NAME or PROVIDER:NAME from PHASEGATE_MODEL_PROVIDERS"
    )


class ModelProviders:
    """The model ids one worker can call, and how it builds their models.

    Args:
        providers: OpenAI-compatible servers by name (``settings.model_providers``).
        models: Models this worker resolves as ``test:KEY``, by key (besides those
            registered in the process with :func:`register_model`).
        environ: Where API keys are read (default: ``os.environ``, when a key is needed).
    """

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig] | None = None,
        *,
        models: Mapping[str, Model] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._providers = dict(providers or {})
        self._models = dict(models or {})
        self._environ = environ

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        models: Mapping[str, Model] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ModelProviders:
        """The providers a worker with ``settings`` calls (``settings.model_providers``)."""
        return cls(settings.model_providers, models=models, environ=environ)

    @property
    def providers(self) -> Mapping[str, ProviderConfig]:
        """The OpenAI-compatible servers, by the name model ids use."""
        return dict(self._providers)

    def plugin(self) -> SimplePlugin:
        """A Temporal worker plugin that makes these the providers of the worker it is
        given to (its workflows' and activities' model ids resolve here). Building it
        loads the provider SDKs (:func:`preload_sdks`)."""
        preload_sdks()
        return SimplePlugin("phasegate.ModelProviders", interceptors=[_Scope(self)])

    def _test_model(self, name: str) -> Model | None:
        return self._models.get(name) or _REGISTERED.get(name)

    def _env(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def _key(self, variable: str | None, model_id: str) -> str | None:
        """The API key in ``variable``: read only in activities, never in workflow code."""
        if variable is None:
            return None
        if workflow.in_workflow():
            return _WORKFLOW_SIDE_KEY
        value = self._env().get(variable)
        if not value:
            raise UserError(
                f"{variable} is not set in the worker's environment, so {model_id!r} cannot be "
                f"called: set {variable} where `phasegate worker` runs, or pick another model"
            )
        return value

    def key_variable(self, model_id: str) -> str | None:
        """The environment variable holding ``model_id``'s API key, if it needs one."""
        provider, _ = _split(model_id)
        if provider in _KEY_VARIABLES:
            return _KEY_VARIABLES[provider]
        config = self._providers.get(provider)
        return config.api_key_env if config is not None else None

    def build(self, model_id: str, agent: str) -> Model:
        """The pydantic-ai model for ``model_id`` (see the module docs), for ``agent``.

        Pure but for reading an API key from the environment in an activity; in workflow
        code it builds the same model with a placeholder key (that copy sends nothing).

        Raises:
            UserError: An unknown provider, an unregistered ``test:`` key, a missing key.
        """
        provider, name = _split(model_id)
        if model_id == DEMO_MODEL_ID:
            return demo_model(agent)
        if model_id == RULES_MODEL_ID:
            raise UserError("'rules' is the rules planner, which runs in the workflow, not a model")
        if not name:
            raise UserError(f"model id {model_id!r} names no model: write PROVIDER:NAME")
        if provider == "test":
            model = self._test_model(name)
            if model is None:
                raise UserError(
                    f"no test model is registered as {name!r} in this process: call "
                    f"phasegate.testing.register_model({name!r}, model) before the worker runs it"
                )
            return model
        if provider == "anthropic":
            return _anthropic(name, self._key(_KEY_VARIABLES["anthropic"], model_id))
        if provider == "openai":
            return _openai(name, None, self._key(_KEY_VARIABLES["openai"], model_id))
        config = self._providers.get(provider)
        if config is None:
            raise UserError(_unknown_provider(model_id, self._providers))
        key = self._key(config.api_key_env, model_id) or _NO_KEY
        return _openai(name, config.base_url, key, provider)

    def server(self, model_id: str) -> tuple[str, str] | None:
        """``(provider name, base URL)`` of the configured server ``model_id`` is sent
        to (``PHASEGATE_MODEL_PROVIDERS``); None for any other model."""
        provider, _ = _split(model_id)
        config = self._providers.get(provider)
        return (provider, config.base_url) if config is not None else None

    @staticmethod
    def unreachable(base_url: str) -> str | None:
        """Why nothing answers at ``base_url`` (a TCP connection, at most 3 s), or None.

        A server the worker reaches through a proxy (``HTTPS_PROXY``/``HTTP_PROXY``,
        not bypassed by ``NO_PROXY``) is not checked: the proxy answers for it.
        """
        parts = urllib.parse.urlsplit(base_url)
        host = parts.hostname
        if not host:
            return None
        proxy = urllib.request.getproxies().get(parts.scheme)
        if proxy and not urllib.request.proxy_bypass(host):
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((host, port), timeout=_CONNECT_SECONDS):
                return None
        except ConnectionRefusedError:
            return "connection refused: nothing listens there"
        except socket.gaierror as exc:
            return f"its host name {host} does not resolve: {exc.strerror}"
        except TimeoutError:
            return f"no answer within {_CONNECT_SECONDS:g} s"
        except OSError as exc:
            return exc.strerror or str(exc)

    def check(self, agent: str, model_id: str) -> str | None:
        """What is wrong with running ``agent`` on ``model_id`` on this worker, or None.

        Checks what can be known without a request: the agent, the provider, a
        registered ``test:`` key, the API key variable.

        Returns:
            The problem and its fix, one sentence a person can act on; None when usable.
        """
        where = f"models.{agent} = {model_id!r}"
        if agent == "developer":
            return (
                f"{where}: the developer runs a coding-agent CLI or an outside agent through a "
                "gated session, not a model: drop models.developer and set the profile's "
                "developer.mode / developer.command"
            )
        if agent not in LLM_ROLES:
            return f"{where}: unknown agent; agents are {', '.join(LLM_ROLES)}"
        if model_id == RULES_MODEL_ID:
            if agent == "planner":
                return None
            return f"{where}: rules plans only; give the {agent} a model: {check_hint(agent)}"
        if model_id == DEMO_MODEL_ID:
            return None
        provider, name = _split(model_id)
        if not provider or not name:
            return f"{where}: write PROVIDER:NAME (e.g. openai:gpt-4o) or demo; {check_hint(agent)}"
        if provider == "test":
            if self._test_model(name) is not None:
                return None
            return f"{where}: no test model is registered as {name!r} in this worker process"
        if provider not in _KEY_VARIABLES and provider not in self._providers:
            return f"{where}: {_unknown_provider(model_id, self._providers)}"
        variable = self.key_variable(model_id)
        if variable and not self._env().get(variable):
            return (
                f"{where}: {variable} is not set in the worker's environment; set it where "
                "`phasegate worker` runs (keys come from the environment only), or use demo"
            )
        return None


def refused(exc: BaseException) -> str | None:
    """How a server failed a request no retry can fix — it refused the connection, or
    its host name does not resolve — read from ``exc`` and what it was raised from;
    None for any other failure (a timeout or a reset may pass: those are retried)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "refused the connection (nothing listens there)"
        if isinstance(cause, socket.gaierror):
            return f"cannot be found (its host name does not resolve: {cause.strerror})"
        cause = cause.__cause__ or cause.__context__
    return None


def preload_sdks() -> None:
    """Import the provider SDKs now, when a worker is built: a model id resolves in
    workflow code too, and an SDK imported first inside a workflow task (anthropic alone
    takes over a second) can run past Temporal's 2 s deadlock limit, leaving the SDK
    half-imported for every later run until the worker restarts (TMPRL1101)."""
    for module in (
        "openai",
        "pydantic_ai.models.openai",
        "pydantic_ai.profiles.openai",
        "pydantic_ai.providers.openai",
        "pydantic_ai.providers.openai_compatible",
        "anthropic",
        "pydantic_ai.models.anthropic",
        "pydantic_ai.providers.anthropic",
    ):
        with contextlib.suppress(ImportError):  # an SDK not installed is never used
            importlib.import_module(module)


# The SDKs are imported by preload_sdks when the worker is built; these imports then
# only bind names (the workflow sandbox passes both through, PydanticAIPlugin).
def _openai(name: str, base_url: str | None, key: str | None, provider: str = "openai") -> Model:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    if provider == "openai":
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))
    # Another server: the profile OpenAI-compatible APIs share, and the answer's cap in
    # max_tokens, which Ollama, vLLM and llama.cpp all read (not OpenAI's newer field).
    profile = OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False)
    compatible = OpenAICompatibleProvider(provider, openai_client=client, profile=profile)
    return OpenAIChatModel(name, provider=compatible)


def _anthropic(name: str, key: str | None) -> Model:
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    client = AsyncAnthropic(api_key=key, max_retries=0)
    return AnthropicModel(name, provider=AnthropicProvider(anthropic_client=client))


def _unknown_provider(model_id: str, providers: Mapping[str, object]) -> str:
    known = ["openai", "anthropic", *sorted(providers)]
    return (
        f"unknown model provider in {model_id!r}: use demo, "
        + ", ".join(f"{p}:NAME" for p in known)
        + ", or add the provider to PHASEGATE_MODEL_PROVIDERS "
        '(e.g. {"ollama": {"base_url": "http://localhost:11434/v1"}})'
    )


# --------------------------------------------------------------------------- per worker

_CURRENT: ContextVar[ModelProviders | None] = ContextVar("phasegate_model_providers", default=None)
_UNCONFIGURED = ModelProviders()  # immutable: no providers, keys from os.environ


def current_providers() -> ModelProviders:
    """The providers of the worker running this workflow or activity (set by its
    :meth:`ModelProviders.plugin`); unconfigured ones outside such a worker."""
    return _CURRENT.get() or _UNCONFIGURED


# Each entry point below runs in a task of its own (Temporal creates one per activity,
# workflow run, signal and update), whose context dies with it: setting the variable
# there scopes it to that task and the tasks it starts, with nothing to reset.


class _Scope(Interceptor):
    """Makes ``providers`` current in the workflows and activities of one worker."""

    def __init__(self, providers: ModelProviders) -> None:
        self._providers = providers

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityScope(next, self._providers)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        # Temporal instantiates the class per workflow run: the providers ride on it.
        return type("_WorkerWorkflowScope", (_WorkflowScope,), {"providers": self._providers})


class _ActivityScope(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, providers: ModelProviders) -> None:
        super().__init__(next)
        self._providers = providers

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        _CURRENT.set(self._providers)
        return await super().execute_activity(input)


class _WorkflowScope(WorkflowInboundInterceptor):
    """Workflow side: the agents resolve model ids in workflow code too (validation,
    the request's profile, which key an error names), with the same providers."""

    providers: ClassVar[ModelProviders]

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        _CURRENT.set(self.providers)
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        _CURRENT.set(self.providers)
        await super().handle_signal(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        _CURRENT.set(self.providers)
        return await super().handle_update_handler(input)
