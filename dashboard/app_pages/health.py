"""Health page: what to try next for the whole study (dashboard.advice), then for each trial what its curves say in
plain words and what to try (dashboard.health_rules)."""

from __future__ import annotations

import streamlit as st

from dashboard import session
from dashboard.charts import trial_label
from dashboard.frames import health_summary
from dashboard.health_rules import CRITICAL, SEVERITY_RANK, WARNING, Finding, worst
from dashboard.ui import PageContext, escape_markdown, run_page, show_table

SHOW_OPTIONS = ("Trials with signs", "All trials", "Selected trials")
MAX_EXPANDED_LISTING = 60  # trials listed one by one below the table; the table has them all


def _finding(finding: Finding) -> None:
    box = st.error if finding.severity == CRITICAL else st.warning if finding.severity == WARNING else st.info
    box(f"**{finding.sign}**: {finding.evidence}.\n\n**Try:** {finding.advice}")


def _what_to_try(context: PageContext) -> None:
    st.subheader("What to try next")
    advice = session.advice(context.ref.url, context.ref.name, context.token)
    if not advice:
        st.success("Nothing to act on: no trial shows a warning sign, no constraint is broken, and the best trials "
                   "crowd no bound of the search space.")
        return
    st.caption("For the whole study, in the order the tuning guidance tunes: KL control first, then the learning "
               "rate and batch size, then PPO epochs and clipping. Each item says in how many trials it was seen "
               "and which settings those trials share that the others do not.")
    st.markdown("\n".join(f"{i}. **{item.group}: {item.what}.** {item.evidence}.  \n   *Try:* {item.action}"
                          for i, item in enumerate(advice, 1)))


def render(context: PageContext) -> None:
    _what_to_try(context)
    st.subheader("Each trial")
    findings = context.health()
    view = context.view
    severities = {n: worst(findings.get(n, [])) for n in view.numbers}
    counts = st.columns(3)
    counts[0].metric("Critical", sum(s == CRITICAL for s in severities.values()))
    counts[1].metric("Warnings", sum(s == WARNING for s in severities.values()))
    counts[2].metric("No signs", sum(s == "ok" for s in severities.values()))
    show = st.radio("Show", SHOW_OPTIONS, horizontal=True, key="health_show")
    if show == SHOW_OPTIONS[0]:
        numbers = [n for n in view.numbers if findings.get(n)]
    elif show == SHOW_OPTIONS[2]:
        numbers = sorted(context.selected)
    else:
        numbers = view.numbers
    if not numbers:
        st.success("No trial shows a warning sign." if show == SHOW_OPTIONS[0] else "No trial selected.")
        return
    # Selected trials first, then the worst.
    numbers.sort(key=lambda n: (n not in context.selected, SEVERITY_RANK.get(severities[n], 3), n))
    show_table(health_summary(view, findings, numbers), hide_index=True, width="stretch")
    states, reasons = view.states(), view.trials.set_index("number")["reason"]
    for rank, n in enumerate(numbers[:MAX_EXPANDED_LISTING]):
        found = findings.get(n, [])
        title = f"{trial_label(n, states[n])}: {severities[n]}" + (f" ({len(found)} signs)" if found else "")
        # The selected trials and the three worst open by themselves.
        with st.expander(title, expanded=n in context.selected or rank < 3):
            if reasons.get(n):
                st.caption(f"Stopped: {escape_markdown(str(reasons[n]))}")
            for finding in found:
                _finding(finding)
            if not found:
                st.success("No warning signs in its curves.")
    if len(numbers) > MAX_EXPANDED_LISTING:
        st.caption(f"Listed the first {MAX_EXPANDED_LISTING} of {len(numbers)} trials; the table has them all.")


run_page("Health", render, "Warning signs in each trial's curves, with what the tuning guidance suggests.")
