"""Which rules act on which messages, and why: the decision, apart from the acting (apps.worker.rules, through the
gate) and from the reading (apps.rules.selectors), so test_rule, apply_rule and new mail decide alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apps.rules.conditions import AboutCondition, Facts, RuleBody, decide, loaded
from apps.rules.models import Rule


@dataclass(frozen=True)
class Loaded:
    """A rule with its body validated."""

    rule: Rule
    body: RuleBody

    @property
    def stops(self) -> bool:
        return any(a.action == "stop" for a in self.body.actions)

    @property
    def about(self) -> bool:
        return any(isinstance(c, AboutCondition) for c in self.body.conditions)

    def covers(self, facts: Facts) -> bool:
        rule = self.rule
        if rule.account_id is not None:
            return bool(rule.account_id == facts.account_id)
        return bool(rule.workspace_id == facts.workspace_id)


def load(rules: Iterable[Rule]) -> list[Loaded]:
    return [Loaded(rule, loaded(rule.match, rule.conditions, rule.actions)) for rule in rules]


@dataclass(frozen=True)
class Decision:
    rule: Loaded
    facts: Facts
    matched: list[str]


def decisions(
    rules: Sequence[Loaded],
    facts: Sequence[Facts],
    now: datetime,
    *,
    only: Mapping[Any, Any] | None = None,
    done: set[tuple[Any, Any]] = frozenset(),  # type: ignore[assignment]
) -> list[Decision]:
    """For each message, the rules (in their order) that act on it: those covering its mailbox whose conditions hold,
    until one that says stop. `only`: message id -> the one rule id it waits for (None: every rule); `done`: (rule
    id, message id) already acted on at the rule's version, skipped."""
    found: list[Decision] = []
    for fact in facts:
        wanted = only.get(fact.id) if only is not None else None
        for entry in rules:
            if wanted is not None and entry.rule.pk != wanted:
                continue
            if not entry.covers(fact):
                continue
            if (entry.rule.pk, fact.id) in done:
                # acted on already at this version (so it matched): a stop it said still ends the rules after it
                if entry.stops:
                    break
                continue
            why = decide(entry.body, fact, now)
            if why is None:
                continue
            found.append(Decision(entry, fact, why))
            if entry.stops:
                break
    return found
