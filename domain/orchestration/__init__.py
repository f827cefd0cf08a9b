"""The orchestration's domain: its state machine (:mod:`.state`), messages and views,
the agents' typed outputs and profiles (:mod:`.agents`), what each agent is shown
(:mod:`.context`), the rules planner (:mod:`.planner`) and its gates. Pure: no I/O."""
