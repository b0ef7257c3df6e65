"""Names and free text at every surface they reach (issue #17 item 5): identities are refused unless they are one
line of plain ASCII; reasons and comments are escaped for the UI's Markdown, the report's HTML and the terminal."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from pydantic import ValidationError
from rich.console import Console

from activities.adapters.secrets import remember_secret
from activities.adapters.webhooks import slack_payload
from bifrost_cli.main import cli
from bifrost_cli.render import print_status
from canary.config import JudgeConfig, MetricSamples, MetricSpec
from canary.judge import judge
from canary.report import render_html
from common import notices
from common.text import identity_problem, markdown, ratio, slack, terminal, web_url
from tests.workflows.helpers import make_request
from workflows.controls import AuditEntry, Hold
from workflows.evacuation.details import evacuation_details
from workflows.evacuation.models import AbortShift, EvacuationState
from workflows.evacuation.settings import EvacuationInput
from workflows.request import RequestError
from workflows.rollout.details import rollout_details
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Abort, Approve, Pause
from workflows.stage.details import stage_details
from workflows.stage.models import StageState

T0 = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
FORGED = "alice\n- 12-01 16:00 security-team: approve wave-1 — verified"
HEADING = "\n\n## ✅ Wave 1 APPROVED by alice@example.com"
IMG = "<img src=x onerror=alert(document.domain)>"
JS_LINK = "[open the runbook](javascript:alert(1)) ![x](https://evil.example/pixel.png)"
TERMINAL = "db migration\x1b[2J\x1b[1;31mPWNED\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\u202eevil"
NASTY = [FORGED, HEADING, IMG, JS_LINK, TERMINAL, "| a | b |", "`code` *em* _em_ ~~s~~ &amp; \\", "# h", "1. one", "> q"]

# -- identities -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "problem"), [
    (FORGED, "must be printable text on one line; it contains '\\n'"),
    ("alice\x1b[31m", "it contains '\\x1b'"),
    ("\u0430lice", "U+0430 CYRILLIC SMALL LETTER A"),  # a Cyrillic "а" that looks like "alice"
    ("alice\u202e", "it contains '\\u202e'"),
    ("ali ce  x", "without leading, trailing or double spaces"),
    ("x" * 201, "201 characters; at most 200"),
    ("   ", "must not be blank"),
])
def test_an_identity_is_one_line_of_plain_ascii(name, problem):
    assert problem in (identity_problem(name) or "")


@pytest.mark.parametrize("name", ["alice", "alice@example.com", "Alice O'Neil", "github-actions[bot]", "ci/jenkins",
                                  "bob.smith+release"])
def test_ordinary_names_are_identities(name):
    assert identity_problem(name) is None


@pytest.mark.parametrize(("model", "payload", "field"), [
    (Pause, {"by": FORGED, "reason": "x"}, "by"),
    (Abort, {"by": "\u0430lice", "reason": "x"}, "by"),
    (Approve, {"wave": 1, "approver": "alice\r\nbob"}, "approver"),
    (AbortShift, {"by": "alice\x1b[2J", "reason": "x"}, "by"),
])
def test_an_update_with_a_bad_identity_is_refused_naming_the_field(model, payload, field):
    with pytest.raises(ValidationError) as err:
        model.model_validate(payload)
    assert [e["loc"] for e in err.value.errors()] == [(field,)]


def test_the_how_to_act_placeholder_is_refused_if_sent_unedited():
    from workflows.controls.details import WHO

    with pytest.raises(ValidationError, match="approver"):
        Approve.model_validate({"wave": 1, "approver": WHO})


def test_a_request_or_evacuation_with_a_bad_identity_is_refused_naming_the_field():
    with pytest.raises(RequestError, match=r"requested_by: must be printable text on one line"):
        make_request(requested_by=FORGED)
    with pytest.raises(RequestError, match=r"approvals\.approvers\.0: contains 'а' \(U\+0430"):
        make_request(approvals={"approvers": ["\u0430lice"]})
    with pytest.raises(ValidationError) as err:
        EvacuationInput(service="payments", region="eu-west-1", requested_by="bob\nalice")
    assert [e["loc"] for e in err.value.errors()] == [("requested_by",)]


def test_the_cli_refuses_a_multi_line_identity_before_sending_anything():
    res = CliRunner().invoke(cli, ["pause", "payments/2.4.0", "--as", FORGED, "--reason", "x"],
                             env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert res.exit_code == 2, res.output
    assert "--as: must be printable text on one line" in res.output

# -- Markdown: the UI's current details -------------------------------------------------------------------------


class _Tags(HTMLParser):
    """Every element and attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(page)
    return p.tags


def rendered(md: str) -> str:
    """The HTML a CommonMark renderer with GFM tables and strikethrough makes of `md`, raw HTML allowed."""
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)


@pytest.mark.parametrize("text", NASTY)
def test_escaped_markdown_renders_as_the_text_itself(text):
    page = rendered(f"**Reason:** {markdown(text)}")
    assert [t for t, _ in tags(page)] == ["p", "strong"]
    assert markdown(text).count("\n") == 0


# What the UI 2.54 renderer (gomarkdown, SmartypantsFractions) typesets as a fraction: digits/digits (or the
# fraction slash U+2044) after a word boundary other than "/", ending at a word boundary other than "/".
_TYPESET_FRACTION = re.compile(r"(?:^|(?<=[\s!\"#$%&'()*+,\-.:;<=>?@\[\\\]^_`{|}~]))[1-9][0-9]*[/\u2044][0-9]+(?![0-9A-Za-z/])")


@pytest.mark.parametrize("text", ["rollout/pay-264854/2.0.0", "look 1/3", "3/5 regions", "(1/2)", "1⁄2 done", "10/20"])
def test_a_slash_between_digits_is_never_typeset_as_a_fraction(text):
    assert _TYPESET_FRACTION.search(text)  # the pattern catches the case as it is typed
    escaped = markdown(text)
    assert not _TYPESET_FRACTION.search(escaped), escaped
    assert rendered(escaped) == f"<p>{text}</p>\n"  # and the page shows it as typed


def test_our_own_counts_are_never_typeset_as_fractions():
    assert ratio(1, 3) == "1&#47;3" and not _TYPESET_FRACTION.search(f"look {ratio(1, 3)}")
    assert rendered(f"look {ratio(1, 3)}") == "<p>look 1/3</p>\n"
    st = StageState.of("us-east-1", "prod", 1)
    st.status, st.soak_looks, st.soak_max_looks, st.canary_steps, st.canary_step = "soaking", 1, 3, 4, 2
    page = stage_details(st, service="pay-264854", version="2.0.0")
    assert "look 1&#47;3" in page and "step 2&#47;4" in page and not _TYPESET_FRACTION.search(page), page


def _details_state() -> RolloutState:
    st = StageState.of("us-east-1", "prod", 1)
    st.status, st.reason, st.verdict, st.score = "failed", IMG + JS_LINK, "fail", 10.0
    st.report_url = "javascript:alert(1)"
    return RolloutState(
        rollout_id="rollout/payments/2.0.0", service="payments", version="2.0.0", phase="running", waves=1, stages=[st],
        reason=HEADING, holds=[Hold(reason="paused", since=T0, by=FORGED, why=HEADING + IMG, releases="resume " + JS_LINK)],
        audit=[AuditEntry(at=T0, who=FORGED, action="pause", detail=TERMINAL + HEADING),
               AuditEntry(at=T0, who="bob", action="approve", target="wave-1", detail=IMG)])


def test_the_rollout_and_stage_details_show_free_text_as_text():
    state = _details_state()
    for md in (rollout_details(state, None, soaking=[]),
               stage_details(state.stages[0], service="payments", version="2.0.0", detail=JS_LINK + HEADING)):
        page = rendered(md)
        found = tags(page)
        assert [t for t, _ in found if t in ("h1", "h3", "h4", "img", "a", "script")] == [], page
        assert [t for t, _ in found].count("h2") == 1  # the page's own heading, not "Wave 1 APPROVED"
        assert all(not k.startswith("on") for _, attrs in found for k in attrs)
        assert "javascript:" not in "".join(str(attrs) for _, attrs in found)
    md = rollout_details(state, None, soaking=[])
    lines = md.splitlines()
    assert not [ln for ln in lines if ln.startswith("- 12-01 16:00 security-team")]  # no forged audit line
    assert "\x1b" not in md and "\u202e" not in md


def test_the_evacuation_details_show_free_text_as_text():
    inp = EvacuationInput(service="payments", region="eu-west-1", requested_by="bob", reason=HEADING + IMG)
    state = EvacuationState.model_validate({
        **EvacuationState.of(inp, "traffic/payments").model_dump(), "reason": JS_LINK, "doing": IMG,
        "region": "eu-west-1\n## evil", "audit": [{"at": T0, "who": "bob", "action": "evacuate", "detail": HEADING}]})
    page = rendered(evacuation_details(state))
    found = [t for t, _ in tags(page)]
    assert found.count("h2") == 1 and "img" not in found and "a" not in found, page


def test_only_web_links_are_links():
    assert web_url("https://reports.example.com/r/a.html") == "https://reports.example.com/r/a.html"
    for bad in ("javascript:alert(1)", "data:text/html,<script>", "https://x/)[y](javascript:z", "http://a b", None):
        assert web_url(bad) is None

# -- HTML: the canary report ------------------------------------------------------------------------------------


def test_the_report_shows_titles_and_group_names_as_text():
    specs = [MetricSpec(name="latency_p99", groups=[IMG])]
    data = [MetricSamples(name="latency_p99", baseline=[1.0 + i / 100 for i in range(40)],
                          canary=[1.0 + i / 100 for i in range(40)])]
    result = judge(JudgeConfig(min_samples=10), specs, data)
    page = render_html(result, specs, data, title=f"payments 2.0.0 {IMG} <script>alert(1)</script> {JS_LINK}")
    found = tags(page)
    assert [t for t, _ in found].count("img") == 2  # the two plots, nothing else
    assert all(attrs.get("src", "").startswith("data:image/png;base64,") for t, attrs in found if t == "img")
    assert "script" not in [t for t, _ in found]
    assert all(not k.startswith("on") for _, attrs in found for k in attrs)
    assert all(not (attrs.get("href") or "").startswith("javascript:") for _, attrs in found)
    assert "&lt;img src=x onerror=alert(document.domain)&gt;" in page

# -- the terminal: `bifrost status` -----------------------------------------------------------------------------


def test_status_prints_names_and_reasons_without_escape_sequences_or_extra_lines():
    state = _details_state()
    state.audit[0] = AuditEntry(at=T0, who=FORGED, action="pause", detail=TERMINAL)
    out = io.StringIO()
    print_status(state, state.rollout_id, Console(file=out, width=300, force_terminal=False))
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "\\u202eevil" in text  # shown, escaped, so the reader sees what was sent
    assert not [ln for ln in text.splitlines() if ln.lstrip().startswith("- 12-01 16:00 security-team")]
    audit = [ln for ln in text.splitlines() if "2026-12-01 16:00:00" in ln]
    assert len(audit) == 2 and "alice\\n- 12-01 16:00 security-team" in audit[0]


def test_terminal_text_is_one_line_without_control_characters():
    for text in NASTY:
        shown = terminal(text)
        assert shown.isprintable() and "\n" not in shown


# -- chat webhooks (Slack mrkdwn) ---------------------------------------------------------------------------------

SLACK_NASTY = ["<!channel> deploy now", "<@U024BE7LH> approve", "<https://evil.example|the runbook>", "*bold* _it_ ~s~ `c`",
               "a & b", "line one\nline two", "token https://hooks.example/x?token=t0p-s3cr3t-value"]


@given(st.text(max_size=80))
def test_slack_text_forms_no_mention_link_entity_or_formatting(text):
    out = slack(text)
    assert "<" not in out and ">" not in out and "\n" not in out
    assert re.sub(r"&(amp|lt|gt);", "", out).count("&") == 0
    for m in re.finditer(r"[*_~`]", out):  # a formatting character starts no span: inside a word, or after a ZWSP
        inside = 0 < m.start() < len(out) - 1 and out[m.start() - 1].isalnum() and out[m.start() + 1].isalnum()
        assert inside or out[m.start() - 1: m.start()] == "\u200b", (text, out)


@pytest.mark.parametrize("text", SLACK_NASTY + NASTY)
def test_a_chat_notice_shows_free_text_as_text_and_no_credential(text):
    remember_secret("k3y-s3cret-webhook-path")
    n = notices.paused(rollout_id="rollout/payments/2.0.0", service="payments", version="2.0.0", by="alice",
                       reason=f"{text} k3y-s3cret-webhook-path", where="wave 2")
    payload = json.dumps(slack_payload(n, "https://temporal.example/namespaces/default/workflows/x"))
    for raw in ("<!channel>", "<@U024BE7LH>", "<https://evil.example", "k3y-s3cret", "t0p-s3cr3t", "*bold*", IMG):
        assert raw not in payload
    assert "<https://temporal.example/namespaces/default/workflows/x|Open in the Temporal Web UI>" in payload
