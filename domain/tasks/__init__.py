"""Task-level state: the task board of a gated session (see ``board``)."""
