"""The gated session's domain: its state machine (:mod:`.state`), messages and views
(:mod:`.messages`, :mod:`.views`), approvals and controls, and the bounds on what a
long session keeps (:mod:`.bounds`). Pure: no I/O, no clock, no Temporal."""
