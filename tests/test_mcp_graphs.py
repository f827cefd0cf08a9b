"""Step graphs over MCP, as an agent holding only the MCP tools works one: it reads the
step it is on (never another), is refused a report for another step, ends steps, asks
a person, and cannot answer for the person (no tool can)."""

from __future__ import annotations

from test_mcp import LIBRARY, _address, _err, _ok, _server_env, _stdio
from test_step_graph import CRITIQUE

from phasegate.client.graphs import GraphClient
from phasegate.domain.graph.model import Graph


async def test_an_agent_works_a_graph_through_the_mcp_tools(env, settings_for, run_worker):
    settings = settings_for(LIBRARY)
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(CRITIQUE), params={"depth": 2})
        async with _stdio(_server_env(_address(env), settings)) as client:
            text, data = await _ok(client, "get_graph_step", {"run_id": rid})
            assert data["step"]["step_id"] == "draft" and "Depth 2; visit 1." in text
            assert "outcomes: quick, full" in text and "report_graph_step" in text
            assert "research" not in text  # no other step, no edge target

            refused = await _err(
                client, "report_graph_step", {"run_id": rid, "step_id": "answer", "outcome": "ok"}
            )
            assert "step_sequence_violation" in refused and "on step 'draft'" in refused

            text, data = await _ok(
                client, "report_graph_step", {"run_id": rid, "step_id": "draft", "outcome": "full"}
            )
            assert data["next_step"] == "research" and "get_graph_step" in text
            questions = [{"id": "scope", "text": "How deep?", "options": ["quick", "thorough"]}]
            text, data = await _ok(
                client,
                "report_graph_step",
                {"run_id": rid, "step_id": "research", "outcome": "needs_input",
                 "questions": questions},
            )  # fmt: skip
            assert data["status"] == "awaiting_input" and "no tool can" in text
            listed = await client.list_tools()
            assert not any("answer" in t.name for t in listed.tools)

        await graphs.answer(rid, {"scope": "quick"}, as_key=None, approver="lead")
        await graphs.report(rid, _report("research", "ok"))
        await graphs.report(rid, _report("answer", "ok"))
        assert (await graphs.result(rid)).status == "completed"


def _report(step: str, outcome: str):  # type: ignore[no-untyped-def]
    from phasegate.domain.graph.messages import StepReport

    return StepReport(step_id=step, outcome=outcome)
