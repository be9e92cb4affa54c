"""redact's checks of many values at once (issue 51 item 9): a report's rows grouped by their
fields' annotations, tables of dicts column by column, fresh strings screened together. An
annotation may lie (records are decoded leniently) and a check may only ever say "unchanged" when
the rule would change nothing: generated records with values of every wrong kind, compared with a
plain walk that reads every string by the rule."""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from schemas import credentials
from tests.test_redaction import PIECES, _by_the_rule, _texts

HELD = "heldvalue47zz"


class Word(str):
    pass


@dataclass(frozen=True)
class Cell:
    device: int
    role: Literal["trainer", "rollout", "judge"]
    label: str


@dataclass(frozen=True)
class Span:
    phase: str
    started_at: float
    ended_at: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class NamedSpan(Span):  # a subclass in a tuple of Spans: fields of its own the Span's plan does not read
    extra: str = ""


@dataclass(frozen=True)
class Node:
    index: int
    host: str | None
    source: Literal["placement", "plan"]
    cells: tuple[Cell, ...]
    spans: tuple[Span, ...] = ()
    is_head: bool = False
    notes: Any = None
    peers: tuple[int, ...] = ()
    hang: dict[str, Any] | None = None
    sender: Cell | None = None


@functools.cache
def _corpus(seed: int) -> tuple[list[str], list[str]]:
    corpus = _texts(3000, seed=seed) + [f"gpu-{i:04d}" for i in range(50)] + [f"10.0.{i}.{i}" for i in range(50)]
    clean = [t for t in corpus if credentials.redact_text(t) == t]
    dirty = [t for t in corpus if credentials.redact_text(t) != t]
    return clean, dirty


def _liar(rng: random.Random, clean: list[str], dirty: list[str]) -> Any:
    """A value no annotation of the records above allows, or one the rule changes."""
    return rng.choice(
        [
            lambda: rng.choice(dirty),  # a credential in a str field, or in a number's
            lambda: ["x", "--token", "abc47value"],  # a command line (read as one) in a str field
            lambda: ("train", "--api-key", rng.choice(clean)),
            lambda: [rng.randint(0, 9), rng.choice(dirty)],  # not a command line: each string alone
            lambda: Word(rng.choice(dirty)),  # a str subclass
            lambda: Word(rng.choice(clean)),
            lambda: float("nan"),  # a NaN field: the record is copied
            lambda: f"{rng.choice(clean)} {HELD}",  # a held value (when held)
            lambda: {"argv": ["--password", "pw47abcdef"], "n": 1},
            lambda: Span(rng.choice(dirty), 1.0),  # a record where a string was meant
            lambda: rng.choice(clean),  # a string in a number's field: kept, as the rule keeps it
            lambda: rng.choice([None, 3, 2.5, True]),
            lambda: (),
        ]
    )()


def _records(seed: int, rate: float) -> dict[str, Any]:
    """Nodes with cells and spans, and tables of dicts: each value a liar with probability ``rate``."""
    rng = random.Random(seed)
    clean, dirty = _corpus(seed)

    def v(ok: Any) -> Any:
        return _liar(rng, clean, dirty) if rng.random() < rate else ok

    def span() -> Span:
        fields = dict(phase=v(rng.choice(clean[:8])), started_at=v(rng.random()), ended_at=v(rng.choice([None, 2.0])))
        fields["detail"] = v(rng.choice(clean))
        if rng.random() < rate:
            return NamedSpan(**fields, extra=rng.choice(dirty))
        return Span(**fields)

    nodes = tuple(
        Node(
            index=v(i),
            host=v(rng.choice([None, clean[i % 40]])),
            source=v(rng.choice(["placement", "plan"])),
            cells=v(tuple(Cell(v(d), v(rng.choice(["trainer", "judge"])), v(clean[(i + d) % 30])) for d in range(8))),
            spans=v(tuple(span() for _ in range(rng.randint(0, 12)))),
            is_head=v(i == 0),
            notes=v(None),
            peers=v(tuple(range(i % 4))),
            hang=v(rng.choice([None, {"stack": v(clean[i % 20]), "threads": v(3), "at": v(1.5)}])),
            sender=v(rng.choice([None, Cell(v(1), v("judge"), v(clean[i % 10]))])),
        )
        for i in range(120)
    )
    rows = [
        {"rank": v(i), "ok": v(True), "seconds": v(0.5), "outcome": v("ok"), "detail": v(clean[i % 50])}
        for i in range(200)
    ]
    plan = [
        {"index": v(i), "devices": v([0, 1, 2, 3]), "judges": v({}), "unused": v([]), "nested": {"a": v(clean[i % 9])}}
        for i in range(200)
    ]
    return {"nodes": nodes, "rows": rows, "plan": plan, "mixed": [v(1), v(2.0), v(None)] * 20}


def _same_shape(got: Any, expected: Any, original: Any) -> None:
    """Equal, type for type, and the same records kept as they are (not copied) where the rule
    changed nothing."""
    assert got == expected
    assert repr(got) == repr(expected)
    for g, e, o in zip(got["nodes"], expected["nodes"], original["nodes"], strict=True):
        assert (g is o) == (e is o), (o, g)
        if isinstance(o.spans, tuple) and isinstance(g.spans, tuple):
            for gs, es, os in zip(g.spans, e.spans, o.spans, strict=True):
                assert (gs is os) == (es is os), (os, gs)


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("rate", [0.0, 0.002, 0.02, 0.3])
def test_redact_gives_what_reading_every_value_by_the_rule_gives(
    monkeypatch: pytest.MonkeyPatch, held: bool, rate: float
) -> None:
    if held:
        monkeypatch.setattr(credentials, "_HELD", {HELD})
    for seed in range(3):
        doc = _records(seed, rate)
        _same_shape(credentials.redact(doc), _by_the_rule(doc), doc)


def test_a_lie_in_one_record_of_many_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """One value of one record among many clean ones (read many at once): each kind of lie, in
    each field of a record and of a record in its tuple."""
    monkeypatch.setattr(credentials, "_HELD", {HELD})
    rng = random.Random(51)
    clean, dirty = _corpus(51)
    base = Node(1, clean[0], "plan", tuple(Cell(d, "trainer", clean[d]) for d in range(4)), peers=(1, 2))
    spans = tuple(Span(clean[i % 8], float(i), float(i + 1), clean[i % 30]) for i in range(6))
    lies = [("node", f) for f in ("index", "host", "source", "is_head", "notes", "peers", "hang", "sender")]
    lies += [("hang", "stack"), ("sender", "label")]
    lies += [("span", f) for f in ("phase", "started_at", "ended_at", "detail")]
    lies += [("cell", f) for f in ("device", "role", "label")] + [("subclass", "extra")]
    for where, field in lies:
        for _ in range(8):
            liar = _liar(rng, clean, dirty)
            nodes = [dataclasses.replace(base, index=i, spans=spans) for i in range(60)]
            at = rng.randrange(60)
            if where == "node":
                nodes[at] = dataclasses.replace(nodes[at], **{field: liar})
            elif where == "hang":  # a dict field of every record, one value a lie
                nodes = [dataclasses.replace(n, hang={"stack": clean[1], "n": 2}) for n in nodes]
                nodes[at] = dataclasses.replace(nodes[at], hang={"stack": liar, "n": 2})
            elif where == "sender":  # a record in an optional field
                nodes = [dataclasses.replace(n, sender=Cell(1, "judge", clean[2])) for n in nodes]
                nodes[at] = dataclasses.replace(nodes[at], sender=Cell(1, "judge", liar))
            elif where in ("span", "subclass"):
                inner = list(spans)
                if where == "subclass":  # a record of another type among the spans
                    inner[3] = NamedSpan(**dataclasses.asdict(inner[3]), extra=liar)
                else:
                    inner[3] = dataclasses.replace(inner[3], **{field: liar})
                nodes[at] = dataclasses.replace(nodes[at], spans=tuple(inner))
            else:
                cells = list(base.cells)
                cells[2] = dataclasses.replace(cells[2], **{field: liar})
                nodes[at] = dataclasses.replace(nodes[at], cells=tuple(cells))
            doc = {"nodes": tuple(nodes)}
            _same_shape(credentials.redact(doc), _by_the_rule(doc), doc)


def test_a_lie_in_one_row_of_a_table_is_found() -> None:
    rng = random.Random(47)
    clean, dirty = _corpus(47)
    for key in ("rank", "detail", "devices", "judges"):
        for _ in range(12):
            rows = [{"rank": i, "detail": clean[i % 50], "devices": [0, 1], "judges": {}} for i in range(500)]
            rows[rng.randrange(500)][key] = _liar(rng, clean, dirty)
            assert repr(credentials.redact(rows)) == repr(_by_the_rule(rows))


@pytest.mark.parametrize("by_heads", [True, False])
def test_the_screen_passes_on_every_text_the_rule_could_redact(monkeypatch: pytest.MonkeyPatch, by_heads: bool) -> None:
    """_screened may leave out only texts where _may_hold is false (the rule keeps them): texts
    of the words a fast path could get wrong, batched any way; and it does leave plain ones out.
    A token's prefix is looked for where one of its first two characters is (_PREFIX_HEADS), or
    by the pattern where the pattern cannot say so."""
    assert credentials._PREFIX_HEADS is not None  # every prefix starts with two plain characters
    # No held value (a test before this one in the same worker may have held some: the screen
    # then passes every text to the rule, as it must).
    monkeypatch.setattr(credentials, "_HELD", set())
    if not by_heads:
        monkeypatch.setattr(credentials, "_PREFIX_HEADS", None)
    rng = random.Random(9)
    texts = _texts(8000, seed=9) + [p.lower() for p in PIECES] + [p.upper() for p in PIECES]
    texts += ["x\0--api-key", "sk-\0", "a\0b=hf_x", "PA\0SS=1", "ſecret=x", "--paſs y"]
    rng.shuffle(texts)
    i = 0
    while i < len(texts):
        n = rng.randint(2, 400)
        batch = list(dict.fromkeys(texts[i : i + n]))
        i += n
        kept = set(credentials._screened(batch))
        missed = [t for t in batch if t not in kept and credentials._may_hold(t)]
        assert not missed, missed
    hosts = [f"gpu-{i:04d}" for i in range(500)] + [f"rank {i}/500 at 10.0.0.{i % 250}" for i in range(500)]
    assert credentials._screened(hosts) == []
    monkeypatch.setattr(credentials, "_HELD", {HELD})
    assert credentials._screened(hosts) == hosts  # a held value: every text to the rule
