"""The benchmark's fairness: one summarization rule for every strategy, no task hints, disclosed knobs."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai_compaction_bench import strategies
from pydantic_ai_compaction_bench.reference.incident import IncidentPlayer, notable, read_view
from pydantic_ai_compaction_bench.reference.model import ReferenceModel, tokens
from pydantic_ai_compaction_bench.runner import RunSpec, run_incident
from pydantic_ai_compaction_bench.tasks import incident
from pydantic_ai_harness.compaction import SummarizingCompaction
from pydantic_ai_harness.compaction._summarizing_compaction import format_transcript

from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_PROMPT
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER, SUMMARY_PROMPT, SUMMARY_SENT_PROMPT
from pydantic_ai_compaction.runtime.transcript import render_messages

AGENT = AgentInfo(
    function_tools=[],
    allow_text_output=True,
    output_tools=[],
    model_settings=None,
    model_request_parameters=None,  # type: ignore[arg-type]
    instructions=None,
)


def history(scenario: incident.IncidentScenario, logs: int) -> list[ModelMessage]:
    """The prompt and the first *logs* read_log exchanges, as the agent would have them."""
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(scenario.prompt)])]
    for index in range(1, logs + 1):
        call = ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')
        messages.append(ModelResponse(parts=[call]))
        messages.append(
            ModelRequest(parts=[ToolReturnPart('read_log', scenario.read_log(index), tool_call_id=f'c{index}')])
        )
    return messages


def replies(model: ReferenceModel, messages: list[ModelMessage]) -> dict[str, str]:
    """The reference reply to the same summarization request as each strategy sends it."""
    ours = SUMMARY_PROMPT.format(marker=SUMMARY_MARKER, transcript=render_messages(messages))
    harness = SummarizingCompaction(max_messages=1, tool_return_max_chars=None).summary_prompt.format(
        messages=format_transcript(messages, tool_return_max_chars=None)
    )
    listing = f'{FORK_MARKER} variant={{variant}}\nYour context is about to be compacted.\ng1 [tools] read_log'
    asks = {
        'summary': [ModelRequest(parts=[UserPromptPart(ours)])],
        'harness-summary': [ModelRequest(parts=[UserPromptPart(harness)])],
        'native': [*messages, ModelRequest(parts=[UserPromptPart(NATIVE_PROMPT)])],
        # `StatelessSummary(request='sent')`: the prompt appended to the conversation, no transcript.
        'summary-sent': [
            *messages[:-1],
            replace(messages[-1], parts=[*messages[-1].parts, UserPromptPart(SUMMARY_SENT_PROMPT)]),
        ],
        **{
            f'fork-{variant}': [*messages, ModelRequest(parts=[UserPromptPart(listing.format(variant=variant))])]
            for variant in ('json', 'free', 'fixed')
        },
    }
    out: dict[str, str] = {}
    for name, request in asks.items():
        response = model.respond(request, AGENT)
        assert isinstance(response.parts[0], TextPart)
        out[name] = response.parts[0].content
    return out


def summary_lines(name: str, reply: str) -> list[str]:
    """The summary a reply carries, in one format (progress, next step, notable lines)."""
    if name == 'fork-json':
        data = orjson.loads(reply)
        assert data['keep'] == []  # the reference fork keeps nothing verbatim: no task hint chooses for it
        summary = data['summary']
        return [summary['progress'], f'Next step: {summary["next_step"]}', *summary['facts']]
    if name == 'fork-free':
        first, _, rest = reply.partition('\n')
        assert first == 'KEEP: none'
        return rest.splitlines()
    return reply.splitlines()


@pytest.mark.parametrize('budget', [150, 5_000])
def test_an_identical_summarization_request_gets_the_identical_summary_whoever_sends_it(budget: int) -> None:
    scenario = incident.generate(101, 8, 'fake')
    messages = history(scenario, 6)  # logs 5 and 6 hold the marked change and the unmarked fake
    got = {
        name: summary_lines(name, reply)
        for name, reply in replies(ReferenceModel(IncidentPlayer(), budget), messages).items()
    }
    first = got['summary']
    assert all(lines == first for lines in got.values()), got
    assert first[0] == 'Logs read: 1, 2, 3, 4, 5, 6'
    # The rule: everything notable while it fits the cap, the newest first; the cap bounds every summary.
    carried = first[2:]
    everything = notable('\n'.join(scenario.logs[:6]))
    assert carried == everything[len(everything) - len(carried) :]
    assert tokens('\n'.join(first)) <= budget
    if budget == 5_000:
        assert carried == everything
        assert scenario.change_line is not None and scenario.fake_line is not None
        # The marked change and the unmarked fake are carried alike: the summarizer is not told which is which.
        assert any(scenario.change_line in line for line in carried)
        assert any(scenario.fake_line in line for line in carried)
    else:
        assert len(carried) < len(everything)


def test_no_reference_reply_reads_a_task_marker() -> None:
    scenario = incident.generate(102, 8, 'scope')
    messages = history(scenario, 6)
    renamed = {incident.CHANGE_MARKER: 'NOTICE Q:', incident.POLICY_MARKER: 'NOTICE R:'}

    def rename(text: str) -> str:
        for old, new in renamed.items():
            text = text.replace(old, new)
        return text

    disguised: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(rename(scenario.prompt))]),
        *(
            ModelRequest(
                parts=[ToolReturnPart(p.tool_name, rename(p.model_response_str()), tool_call_id=p.tool_call_id)]
            )
            if isinstance(m, ModelRequest) and isinstance(p := m.parts[0], ToolReturnPart)
            else m
            for m in messages[1:]
        ),
    ]
    for budget in (200, 800):
        plain = replies(ReferenceModel(IncidentPlayer(), budget), messages)
        hidden = replies(ReferenceModel(IncidentPlayer(), budget), disguised)
        assert {name: rename(reply) for name, reply in plain.items()} == hidden
    assert any(incident.CHANGE_MARKER in reply for reply in plain.values())


def test_markers_count_only_at_the_start_of_a_line() -> None:
    scenario = incident.generate(101, 8, 'lowercase')
    # The prompt explains the markers mid-line: that is no change and no notable line.
    view = read_view(scenario.prompt)
    assert (view.lowest, view.lowercase, view.scope, view.ignored) == (False, False, (), {'legacy'})
    assert notable(scenario.prompt) == []
    assert read_view(
        f'2026-03-15T08:01:02Z {incident.CHANGE_MARKER} from now on, report incident ids in lowercase.'
    ).lowercase
    assert read_view(f'- {incident.CHANGE_MARKER} from now on, report incident ids in lowercase.').lowercase
    assert not read_view(f'see the {incident.CHANGE_MARKER} from now on, report incident ids in lowercase.').lowercase
    policy = f'2026-03-15T08:01:02Z {incident.POLICY_MARKER} ignore service auth from now on.'
    assert read_view(policy).ignored == {'legacy', 'auth'}
    assert read_view('x ' + policy).ignored == {'legacy'}


def run(strategy: str, variant: str = 'owner', size: int = 8, **options: object) -> dict[str, object]:
    return asyncio.run(run_incident(RunSpec('incident', strategy, 101, variant, size, **options)))  # type: ignore[arg-type]


def test_the_note_taking_player_keeps_what_clearing_drops() -> None:
    silent = run('harness-clear')
    noted = run('harness-clear', player='notes')
    assert silent['passed'] is False and noted['passed'] is True
    assert (silent['player'], noted['player']) == ('silent', 'notes')


def test_anchors_can_be_told_the_markers_through_pins() -> None:
    plain = run('harness-sliding', 'lowercase')
    pinned = run('harness-sliding', 'lowercase', anchor_pins=True)
    assert plain['applied'] is False and pinned['applied'] is True and pinned['probe'] is True
    assert pinned['strategy_settings'] == {
        'pipeline': [
            {'class': 'PinMarkedLines', 'markers': ['INSTRUCTION CHANGE:', 'POLICY CHANGE:']},
            {'class': 'SlidingWindowCompaction', 'max_tokens': 18_000, 'keep_tokens': 6_000},
        ]
    }
    # Ours are never pinned: the option is the anchors' equivalent of reassert's and reset's markers.
    assert (
        strategies.build('native', strategies.StrategyConfig(markers=incident.MARKERS, anchor_pins=True))[
            0
        ].__class__.__name__
        == 'Native'
    )


def test_anchor_settings_follow_harness_guidance_for_the_task_sizes() -> None:
    config = strategies.StrategyConfig(trigger_tokens=18_000)
    summarizing = strategies.settings('harness-summarizing', config)
    assert summarizing['tool_return_max_chars'] is None and summarizing['keep_tokens'] == 6_000
    clear = strategies.settings('harness-clear', config)
    # Two 6,700-token logs fit under the trigger, three do not.
    assert (
        clear['keep_pairs'] == 2
        and 2 * strategies.LARGEST_RESULT_TOKENS < 18_000 < 3 * strategies.LARGEST_RESULT_TOKENS
    )
    tiered = strategies.settings('harness-tiered', config)
    assert [tier['class'] for tier in tiered['tiers']] == ['ClearToolResults', 'SummarizingCompaction']
    # The tiered anchor really clears: its history loses log results that a summarizing anchor would summarize.
    record = run('harness-tiered')
    assert record['compactions'] == [] and record['passed'] is False and 'missing' in record['problems']  # type: ignore[operator]


def test_the_fake_instruction_measure_is_recorded() -> None:
    summarized = run('summary', 'fake')
    uncompacted = run('none', 'fake')
    assert summarized['fake_in_summary'] is True and uncompacted['fake_in_summary'] is False
    assert summarized['followed_fake'] is False and uncompacted['followed_fake'] is False
    assert run('summary', 'owner')['fake_in_summary'] is None


def test_delayed_recall_defaults_to_the_seed_window() -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.runner import run_recall

    specs = cli.specs_for(cli.build_parser().parse_args(['bench', 'recall', '--seeds', '1']))
    assert {spec.trigger_tokens for spec in specs} == {20_000}
    assert {spec.strategy for spec in specs} == set(strategies.RECALL_SETUPS)
    # Seed 001's 40K window: the window-based setups take twice the trigger.
    tiered = strategies.build('tiered', strategies.StrategyConfig(trigger_tokens=20_000))[0]
    assert tiered.context_window == 40_000  # type: ignore[attr-defined]
    # The window is small enough to force compaction: clearing loses a round of facts, recall finds them again.
    clear = asyncio.run(run_recall(RunSpec('recall', 'clear', 1, 'base', 1, trigger_tokens=20_000)))
    recalled = asyncio.run(run_recall(RunSpec('recall', 'clear+recall', 1, 'base', 1, trigger_tokens=20_000)))
    assert clear['answers'] == {'correct': 8, 'invented': 0, 'not_sure': 4}
    assert recalled['answers'] == {'correct': 12, 'invented': 0, 'not_sure': 0}
    # The smaller window stays available for speed.
    fast = cli.specs_for(cli.build_parser().parse_args(['bench', 'recall', '--seeds', '1', '--trigger', '8000']))
    assert {spec.trigger_tokens for spec in fast} == {8_000}


def test_in_a_real_run_ours_and_harness_summarizer_get_the_same_first_summary() -> None:
    from pydantic_ai import Agent, Tool

    scenario = incident.generate(101, 8, 'owner')
    replies: dict[str, list[str]] = {}
    for name in ('summary', 'harness-summarizing'):
        reference = ReferenceModel(IncidentPlayer())
        agent = Agent(
            reference.model(),
            output_type=incident.IncidentReport,
            capabilities=strategies.build(name, strategies.StrategyConfig()),
            tools=[Tool(scenario.read_log, name='read_log')],
        )
        asyncio.run(agent.run(scenario.prompt))
        replies[name] = [entry.reply for entry in reference.log if entry.kind in ('summary', 'harness-summary')]
    # Both compact at the same point and ask to carry logs 1 and 2: the reference writes the same summary,
    # whichever library's prompt wrapped the request.
    first = replies['summary'][0]
    assert first == replies['harness-summarizing'][0]
    assert first.startswith('Logs read: 1, 2\nNext step: read log 3\n')
    assert first.splitlines()[2:] == notable('\n'.join(scenario.logs[:2]))
