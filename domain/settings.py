"""One settings object for worker, CLI and activities.

Pure: callers pass the environment mapping in (``Settings.from_env(os.environ,
...)``), so this module reads nothing itself. Local-first: with no variables
set, everything points at the embedded dev server on localhost and the
``.phasegate/`` folder of the current directory.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

__all__ = ["SEARCH_ATTRIBUTES", "TASK_QUEUE", "Settings"]

TASK_QUEUE = "phasegate"

SEARCH_ATTRIBUTES: dict[str, str] = {
    "PhasegateWorkflow": "Keyword",
    "PhasegatePhase": "Int",
    "PhasegateStatus": "Keyword",
}
"""Custom search attributes phasegate upserts, name -> Temporal type."""


class Settings(BaseModel):
    """Where phasegate finds Temporal, its library and its local data."""

    temporal_address: str = Field(
        "localhost:7233", description="Temporal frontend, host:port (TEMPORAL_ADDRESS)."
    )
    namespace: str = Field("default", description="Temporal namespace (TEMPORAL_NAMESPACE).")
    task_queue: str = Field(TASK_QUEUE, description="Task queue (PHASEGATE_TASK_QUEUE).")
    home: str = Field(
        ".phasegate",
        description="Local data: dev-server SQLite file, spec snapshots (PHASEGATE_HOME).",
    )
    library_paths: list[str] = Field(
        default_factory=list,
        description="Workflow library folders, searched in order (PHASEGATE_LIBRARY, "
        "os.pathsep-separated); the shipped library/ is always last.",
    )
    ui_port: int = Field(8233, description="Dev-server Web UI port (PHASEGATE_UI_PORT).")
    standards_dirs: list[str] = Field(
        default_factory=list,
        description="Folders of project standards (markdown) indexed for phase context "
        "(PHASEGATE_STANDARDS, os.pathsep-separated).",
    )
    context_tokens: int = Field(
        1200, ge=0, description="Token budget of a phase view's context (PHASEGATE_CONTEXT_TOKENS)."
    )
    context_k: int = Field(5, ge=0, description="Most chunks in a phase view's context.")
    allow_unsigned_approvals: bool = Field(
        False,
        description="Accept approvals checked by name only in sessions that name no approver "
        "keys (PHASEGATE_ALLOW_UNSIGNED_APPROVALS=1). Off: such approvals are refused, so an "
        "agent cannot approve by claiming a name. Turn on only where agents cannot reach "
        "Temporal or the CLI.",
    )
    approver_keys_file: str | None = Field(
        None,
        description="JSON list of signed approvers [{name, public_key}] that every session on "
        "this worker requires (PHASEGATE_APPROVER_KEYS). Session options cannot replace them.",
    )

    @property
    def rag_db(self) -> str:
        """The retrieval index (SQLite FTS5) under ``home``."""
        return f"{self.home.rstrip('/')}/rag.db"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, default_library: str, pathsep: str = ":"
    ) -> Settings:
        """Build settings from an environment mapping.

        Args:
            env: Usually ``os.environ``.
            default_library: The shipped library folder, appended to the search path.
            pathsep: Separator of PHASEGATE_LIBRARY entries (``os.pathsep``).
        """
        extra = [p for p in env.get("PHASEGATE_LIBRARY", "").split(pathsep) if p]
        paths = [*extra, default_library] if default_library not in extra else extra
        return cls(
            temporal_address=env.get("TEMPORAL_ADDRESS") or "localhost:7233",
            namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            task_queue=env.get("PHASEGATE_TASK_QUEUE") or TASK_QUEUE,
            home=env.get("PHASEGATE_HOME") or ".phasegate",
            library_paths=paths,
            ui_port=int(env.get("PHASEGATE_UI_PORT") or 8233),
            standards_dirs=[p for p in env.get("PHASEGATE_STANDARDS", "").split(pathsep) if p],
            context_tokens=int(env.get("PHASEGATE_CONTEXT_TOKENS") or 1200),
            approver_keys_file=env.get("PHASEGATE_APPROVER_KEYS") or None,
            allow_unsigned_approvals=env.get("PHASEGATE_ALLOW_UNSIGNED_APPROVALS", "").lower()
            in ("1", "true", "yes"),
        )
