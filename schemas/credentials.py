"""The one rule of what looks like a credential, for every place that refuses or redacts one.

The spec's check refuses a literal credential in an environment table or a command line (it would be
copied to the shared filesystem as spec.json and run-file.toml); the writers of artifacts redact what
the check let through. Both ask the functions below, so a rule added here holds everywhere.

A command line names a credential by reference instead: ``${runtime:NAME}`` is NAME of the job's
environment, substituted by the agent only in the exec of its child (``references``, ``substitute``).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "CREDENTIAL_VALUE",
    "CREDENTIAL_WORDS",
    "REDACTED",
    "REFERENCE",
    "argv_credentials",
    "hold",
    "looks_like_credential",
    "redact",
    "redact_argv",
    "redact_bytes",
    "redact_text",
    "references",
    "shell_form",
    "substitute",
]

# A name with one of these words (split on anything not a letter or digit), or a value with a known token prefix.
CREDENTIAL_WORDS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH", "PAT"}
)
_PREFIXES = r"sk-|sk_|hf_|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abpr]-|AKIA[0-9A-Z]{12}|AIza|ya29\.|eyJ[\w-]+\.eyJ"
_PEM = r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
CREDENTIAL_VALUE = re.compile(rf"^({_PREFIXES})|{_PEM}")
# The one spelling of a reference in a command line: the whole argument or a part of it.
REFERENCE = re.compile(r"\$\{runtime:([A-Za-z_][A-Za-z0-9_]*)\}")
REDACTED = "<redacted>"

_FLAG_VALUE = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)


def looks_like_credential(name: str, value: Any) -> bool:
    """A name that says it holds a credential, or a value that is one by its prefix."""
    words = set(re.split(r"[^A-Z0-9]+", name.upper()))
    if words & CREDENTIAL_WORDS:
        return True
    return isinstance(value, str) and bool(CREDENTIAL_VALUE.search(value))


# A value that only names a variable (`--secret HF_TOKEN`, SkyPilot's own flag) holds no credential.
_VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def _literal(value: str) -> bool:
    """A value that is not only references or a variable's name (an empty value holds nothing either)."""
    rest = REFERENCE.sub("", value).strip().strip("\"'")
    return bool(rest) and not _VARIABLE_NAME.fullmatch(rest)


def _kinds(argv: Sequence[str]) -> Iterable[tuple[int, str]]:
    """(index, how) of every argument that holds a credential, a reference or not:
    "flag" (--token VALUE: the value), "pair" (--password=VALUE, HF_TOKEN=VALUE), "value" (a bare token)."""
    after_flag = False
    for i, arg in enumerate(argv):
        if after_flag:
            after_flag = False
            if not arg.startswith("-"):
                yield i, "flag"
                continue
        m = _FLAG_VALUE.match(arg)
        if m and looks_like_credential(m.group(1).lstrip("-"), m.group(2)):
            if m.group(2):
                yield i, "pair"
            continue
        if CREDENTIAL_VALUE.search(arg):
            yield i, "value"
            continue
        if arg.startswith("-") and not m and looks_like_credential(arg.lstrip("-"), None):
            after_flag = True  # --token VALUE: the value is the next argument


def argv_credentials(argv: Sequence[str]) -> tuple[tuple[int, str], ...]:
    """(index, how) of every literal credential of a command line; a ``${runtime:NAME}`` reference
    in its place is the way to pass one, and is not reported."""
    out = []
    for i, how in _kinds(argv):
        value = _FLAG_VALUE.match(argv[i]).group(2) if how == "pair" else argv[i]  # type: ignore[union-attr]
        if _literal(value):
            out.append((i, how))
    return tuple(out)


# Values this process substituted for references: once in a child's command line they look like
# anything, so they are redacted by value too (a stack's command line, a cause quoting it).
_HELD: set[str] = set()
MIN_HELD = 4  # shorter values would redact ordinary words


def hold(values: Iterable[str]) -> None:
    """Redact these values wherever this process writes them from now on."""
    _HELD.update(v for v in values if len(v) >= MIN_HELD)


# Punctuation prose wraps a word in ("(--api-key VALUE)", "'sk-...',"): redact_text reads words
# without it. Never braces: they end a reference (${runtime:NAME}).
_OPENERS = "([<\"'`"
_CLOSERS = ")]>\"'`,.;:!?"

# The fast path: redaction runs on hot paths (every grade record, every line of a driver's output),
# and almost no text holds anything to redact. A text where the rule below could find nothing is
# returned as it is, without reading it word by word: the rule needs a token's prefix at a word's
# start or after '=' (or a PEM block), a credential word (a whole word) in a -flag or in the name of
# a NAME=value (a URL's query too), a URL's userinfo, or a held value. A superset of the rule, never
# a second one: it only decides whether the rule runs (tests/test_redaction.py compares both on many
# texts). Python's re is slow on patterns that start with an alternation of words: each search here
# starts with a character class or a literal.
_HEAD = re.compile(_PREFIXES)
# A word's prefix (after whitespace and openers, or after '='), or a word that starts with '-'.
_HEAD_OR_DASH = re.compile(rf"[\s=][{re.escape(_OPENERS)}]*+(-|{_PREFIXES})")
_NAME_WORDS = re.compile("|".join(sorted(CREDENTIAL_WORDS, key=len, reverse=True)))
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
# One word of ordinary characters, not starting with '-' (a name, a time, an address): only a
# token's prefix or a held value can be redacted in it. Most strings of a record or report are such.
_PLAIN = re.compile(r"[\w.:/+,-]*")


def _may_hold(text: str) -> bool:
    """Whether the rule could redact anything in ``text`` (False: it would return it unchanged)."""
    if _PLAIN.fullmatch(text) and not text.startswith("-"):
        return bool(_HEAD.match(text)) or (bool(_HELD) and any(value in text for value in _HELD))
    start = text.lstrip(_OPENERS)
    if _HEAD.match(start) or "-----BEGIN" in text or ("://" in text and "@" in text):
        return True
    named = start.startswith("-") or "=" in text
    for m in _HEAD_OR_DASH.finditer(text):
        if m.group(1) != "-":
            return True  # a token's prefix
        named = True
    if named and _named(text.upper()):  # the rule reads names upper-cased
        return True
    return bool(_HELD) and any(value in text for value in _HELD)


def _named(t: str) -> bool:
    """A credential word, as a whole word, in a -flag or in the name of a NAME=value of ``t``."""
    for m in _NAME_WORDS.finditer(t):
        i, j = m.span()
        if (i and t[i - 1] in _ALNUM) or (j < len(t) and t[j] in _ALNUM):
            continue  # part of a longer word ("passage", "keyboard")
        if _in_flag_or_name(t, i, j):
            return True
    return False


def _in_flag_or_name(t: str, i: int, j: int) -> bool:
    """Whether t[i:j] is in a word that starts with '-' (the whole text may be one argument that
    does) or before an '=' in its word."""
    if t.lstrip(_OPENERS).startswith("-"):
        return True
    start = i
    while start and not t[start - 1].isspace():
        start -= 1
    while t[start] in _OPENERS:
        start += 1
    if t[start] == "-":
        return True
    for k in range(j, len(t)):
        c = t[k]
        if c == "=":
            return True
        if c.isspace():
            return False
    return False


def _unheld(arg: str) -> str:
    for value in _HELD:
        arg = arg.replace(value, REDACTED)
    return arg


def redact_argv(argv: Iterable[str]) -> tuple[str, ...]:
    """A command line as an artifact may keep it: every credential value replaced (references stay)."""
    args = list(argv)
    if not any(_may_hold(a) for a in args):
        return tuple(args)
    if _HELD:
        args = [_unheld(a) for a in args]
    for i, how in argv_credentials(args):
        if how == "pair":
            args[i] = args[i].split("=", 1)[0] + "=" + REDACTED
        else:
            args[i] = REDACTED
    return tuple(args)


_SPACE = re.compile(r"(\s+)")


def redact_text(text: str) -> str:
    """A text as a file may keep it (a log line, a cause): its whitespace-separated words, each
    without the punctuation around it, read as a command line and redacted by the same rule
    (redact_argv); the spacing and the punctuation are kept."""
    if not text or not _may_hold(text):
        return text
    if _HELD:
        text = _unheld(text)
    parts = _SPACE.split(text)
    heads, cores, tails = [], [], []
    for word in parts[0::2]:
        core = word.lstrip(_OPENERS)
        heads.append(word[: len(word) - len(core)])
        bare = core.rstrip(_CLOSERS)
        tails.append(core[len(bare) :])
        cores.append(bare)
    words = [_in_url(w) if "://" in w or w.startswith("/") else w for w in redact_argv(cores)]
    parts[0::2] = [h + w + t for h, w, t in zip(heads, words, tails, strict=True)]
    return "".join(parts)


# A URL's query parameters (?api_key=VALUE&...) and its userinfo's password (scheme://user:VALUE@host):
# the rule's NAME=value and token prefixes, read inside a URL.
_QUERY_PAIR = re.compile(r"(?<=[?&;])([^=&;#]+)=([^&;#]*)")
_USERINFO = re.compile(r"(?<=://)([^/@:]*):([^/@]+)@")


def _in_url(word: str) -> str:
    def pair(m: re.Match[str]) -> str:
        name, value = m.group(1), m.group(2)
        hidden = looks_like_credential(name, value) and _literal(value)
        return f"{name}={REDACTED}" if hidden else m.group()

    if "?" in word:
        word = _QUERY_PAIR.sub(pair, word)
    return _USERINFO.sub(lambda m: f"{m.group(1)}:{REDACTED}@", word) if "@" in word else word


def _screened(texts: list[str]) -> list[str]:
    """Of these texts, the ones where _may_hold could be true (a superset: the rule keeps the
    others as they are), found by a few searches over the texts joined instead of a call each (an
    audit's result holds ~5,000 distinct strings). Each condition of _may_hold needs a token's
    prefix (_HEAD, anywhere), a credential word in the upper-cased text, a PEM block, a URL or a
    held value; none of these matches across the NUL between two texts, so each match is in one
    text. Upper-casing keeps the length of ASCII only: the other texts, and every text while
    values are held, are left to the rule."""
    if _HELD:
        return texts
    plain = list(filter(str.isascii, texts))
    joined = "\0".join(plain)
    upper = joined.upper()
    starts: list[int] = []
    if _PREFIX_HEADS is None:
        starts += (m.start() for m in _HEAD.finditer(joined))
    else:  # where a token's prefix could start, each asked of the pattern
        for head in _PREFIX_HEADS:
            at = joined.find(head)
            while at >= 0:
                if _HEAD.match(joined, at):
                    starts.append(at)
                at = joined.find(head, at + 1)
    for text, needles in ((upper, _WORD_NEEDLES), (joined, ("-----BEGIN", "://"))):
        for needle in needles:  # str.find: much faster than a pattern of alternatives
            at = text.find(needle)
            while at >= 0:
                starts.append(at)
                at = text.find(needle, at + 1)
    hits: list[str] = []
    if starts:
        ends = list(itertools.accumulate(map(operator.add, map(len, plain), itertools.repeat(1))))
        hits = [plain[i] for i in sorted({bisect.bisect_right(ends, at) for at in starts})]
    return hits + list(itertools.filterfalse(str.isascii, texts))


def _prefix_heads() -> tuple[str, ...] | None:
    """The first two characters of each alternative of _PREFIXES, where each is two literal
    characters (None: the screen searches by the pattern)."""
    alternatives = _PREFIXES.split("|")
    if "(" in _PREFIXES or not all(
        a[:2].replace("_", "x").replace("-", "x").isalnum() and len(a[:2]) == 2 and a[2:3] not in ("?", "*", "{")
        for a in alternatives
    ):
        return None
    return tuple(dict.fromkeys(a[:2] for a in alternatives))


_PREFIX_HEADS = _prefix_heads()
# The credential words no other one contains ("PASS" is in "PASSWORD"): a text holds a word only if
# it holds one of these.
_WORD_NEEDLES = tuple(w for w in CREDENTIAL_WORDS if not any(o != w and o in w for o in CREDENTIAL_WORDS))


def redact_bytes(data: bytes) -> bytes:
    """A log's bytes as a file may keep them (redact_text); bytes that are no UTF-8 pass through
    unchanged."""
    text = data.decode("utf-8", "surrogateescape")
    return redact_text(text).encode("utf-8", "surrogateescape")


_SCALARS = frozenset({int, float, bool, type(None)})


def redact(value: Any) -> Any:
    """JSON-like data with every string redacted (redact_text) and every list of strings read as a
    command line first (--token VALUE); mapping keys stay. What a rule of the checks missed does
    not reach disk: every artifact writer passes its document through here. A frozen dataclass
    (a report, a status) comes back as a copy of its type, its tuples still tuples (itself when
    nothing in it changed)."""
    return _Redaction().value(value)


class _Redaction:
    """One call of redact: each distinct string is read by the rule once (an audit's result of a
    thousand ranks repeats its phase names, states and hosts ~12 times each; reading every copy was
    most of the report's cost). Exact types are dispatched first, their subclasses as before."""

    __slots__ = ("_changed", "_unchanged")

    def __init__(self) -> None:
        self._unchanged: set[str] = set()
        self._changed: dict[str, str] = {}

    def text(self, text: str) -> str:
        if text in self._unchanged:
            return text
        out = self._changed.get(text)
        if out is None:
            out = redact_text(text)
            if out == text:
                self._unchanged.add(text)
                return text
            self._changed[text] = out
        return out

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind in _SCALARS:  # most values of a record: one set lookup
            return value
        if kind is str:
            return self.text(value)
        if kind in _DATACLASSES:
            return self.fields(value, kind)
        if kind is list or kind is tuple:
            return self.sequence(value)
        if kind is dict:
            return self.mapping(value)
        if isinstance(value, str):
            return redact_text(value)
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return self.sequence(value)
        if _walked_as_dataclass(value):
            return self.fields(value, kind)
        return value

    def mapping(self, value: dict[Any, Any]) -> dict[Any, Any]:
        if self.kept_flat(list(value.values())):
            return dict(value)
        return {k: v if type(v) in _SCALARS else self.value(v) for k, v in value.items()}

    def sequence(self, value: list[Any] | tuple[Any, ...]) -> list[Any]:
        if type(value) in _SEQUENCES:  # (a subclass: the full path below)
            if not value:
                return []
            if not isinstance(value[0], str):
                # A report's rows (a rank's phases, a node's GPUs, a node's dict): one type,
                # checked all at once; the full path below decides where the check cannot.
                kinds = set(map(type, value))
                if kinds <= _SCALARS:
                    return list(value)
                if kinds == _DICT:
                    rows = self.rows(value)
                    if rows is not None:
                        return rows
                elif len(kinds) == 1 and self.kept(value):
                    return list(value)
                return [self.value(v) for v in value]
        if all(isinstance(v, str) for v in value):
            return [self.text(v) if type(v) is str else redact_text(v) for v in redact_argv(value)]
        return [self.value(v) for v in value]

    def fields(self, value: Any, kind: type) -> Any:
        plan = _plan(kind)
        changes = {}
        olds: Sequence[Any]
        if self.kept_plain(plan, (value,)):  # its strings and numbers stay: only the other fields are read
            names, olds = plan.others, tuple(get(value) for get in plan.other_getters)
        else:
            names, olds = plan.names, plan.values(value)
        unchanged = self._unchanged
        for name, old in zip(names, olds, strict=True):
            k = type(old)
            if k in _SCALARS or (k is str and old in unchanged):  # most fields of a report's rows
                if old != old:  # NaN: `!=` says changed, as for any value
                    changes[name] = old
                continue
            new = self.text(old) if k is str else self.value(old)
            if isinstance(old, tuple):
                new = tuple(new)
            if new != old:
                changes[name] = new
        return dataclasses.replace(value, **changes) if changes else value

    # The checks below say only whether redaction keeps values as they are, at C speed over many
    # values at once; a False sends the values through the full path above, which alone decides
    # what changes. An annotation only groups fields (a record decoded leniently may hold anything
    # in a field): each value's type is checked.

    def kept(self, items: Sequence[Any]) -> bool:
        """Whether redaction keeps each of ``items`` (instances of one type) as it is."""
        first = items[0]
        if type(first) not in _DATACLASSES and not _walked_as_dataclass(first):
            return False
        plan = _plan(type(first))
        if not self.kept_plain(plan, items):
            return False
        return all(self.kept_field(list(map(get, items))) for get in plan.other_getters)

    def kept_plain(self, plan: _Plan, items: Sequence[Any]) -> bool:
        """Whether the fields annotated as strings hold only strings the rule keeps (or None), and
        those annotated as numbers only numbers (no NaN: the full path copies a record for one)."""
        texts: set[Any] = set()
        for get in plan.texts:
            values = list(map(get, items))
            if not _strings(values) and not _TEXTS.issuperset(map(type, values)):
                return False
            texts.update(values)
        for get in plan.numbers:
            if not _numbers(list(map(get, items))):
                return False
        texts = texts.difference(self._unchanged)
        texts.discard(None)
        return self.kept_fresh(list(texts))

    def kept_field(self, values: list[Any]) -> bool:
        """Whether one field of many instances stays in each: strings the rule keeps, numbers,
        flat dicts, records of one type that stay, sequences of numbers or of such records."""
        kinds = set(map(type, values))
        if kinds <= _FLAT:
            return (float not in kinds or all(map(operator.eq, values, values))) and self.kept_flat(values)
        if _NONE in kinds:  # an optional field: None stays
            kinds.discard(_NONE)
            values = [v for v in values if v is not None]
        if kinds == _DICT:  # a dict comes back equal, as the field's value itself (a NaN too)
            return self.kept_flat(list(itertools.chain.from_iterable(map(dict.values, values))))
        if len(kinds) == 1 and not kinds <= _SEQUENCES:
            return self.kept(values)
        if not kinds <= _SEQUENCES:
            return False
        items = list(itertools.chain.from_iterable(values))
        if not items:
            return True
        kinds = set(map(type, items))
        if kinds <= _SCALARS:  # a sequence of numbers comes back equal (a NaN is the same object)
            return True
        return len(kinds) == 1 and not isinstance(items[0], str) and self.kept(items)

    def kept_flat(self, values: Sequence[Any]) -> bool:
        """Whether values of a mapping or a sequence are each kept: numbers (a NaN too: only a
        dataclass's field is copied for one) and strings the rule keeps."""
        if not _FLAT.issuperset(map(type, values)):
            return False
        fresh = set(values).difference(self._unchanged)
        return self.kept_fresh([t for t in fresh if type(t) is str])

    def kept_fresh(self, texts: list[str]) -> bool:
        """Whether the rule keeps each of these strings, none read before: screened together
        first (_screened), each one the screen leaves read by the rule."""
        if len(texts) > 1:
            rest = _screened(texts)
            if len(rest) < len(texts):
                self._unchanged.update(set(texts).difference(rest))
                texts = rest
        return all(self.text(t) is t for t in texts)

    def rows(self, rows: Sequence[dict[Any, Any]]) -> list[dict[Any, Any]] | None:
        """Dicts of one set of keys in one order (a table's rows, each exactly a dict), copied
        column by column when each column is kept: numbers, strings the rule keeps, lists of
        numbers, such rows again. None: the caller reads them one by one."""
        keys = tuple(rows[0])
        if not all(map(keys.__eq__, map(tuple, rows))):
            return None
        fresh: set[Any] = set()
        copied: dict[Any, list[Any]] = {}  # the columns of containers: each row's copy
        for key, column in zip(keys, zip(*map(dict.values, rows), strict=True), strict=True):
            kinds = set(map(type, column))
            if kinds <= _SCALARS:  # (a NaN too: only a dataclass's field is copied for one)
                continue
            if kinds <= _FLAT:
                fresh.update(column)
            elif kinds <= _SEQUENCES and _SCALARS.issuperset(map(type, itertools.chain.from_iterable(column))):
                copied[key] = list(map(list, column))  # a sequence comes back as a list
            elif kinds == _DICT and (inner := self.rows(column)) is not None:
                copied[key] = inner
            else:
                return None
        if not self.kept_fresh([t for t in fresh.difference(self._unchanged) if type(t) is str]):
            return None
        out = list(map(dict, rows))
        for key, copies in copied.items():
            for row, copy in zip(out, copies, strict=True):
                row[key] = copy
        return out


def _strings(values: list[Any]) -> bool:
    """Strings only (str.join takes nothing else): a subclass's instance is read by the rule as
    its text, or kept by being equal to a text the rule keeps, as the full path keeps it."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _numbers(values: list[Any]) -> bool:
    """Numbers only, none a NaN."""
    kinds = set(map(type, values))
    if kinds == _FLOAT:  # the sum of floats is a NaN if one is (or inf - inf: then each is compared)
        total = sum(values)
        if total == total:
            return True
    return kinds <= _SCALARS and (float not in kinds or all(map(operator.eq, values, values)))


def _walked_as_dataclass(value: Any) -> bool:
    """Whether redact reads ``value`` field by field (no string, mapping or sequence): its type is
    remembered, the checks are skipped next time."""
    kind = type(value)
    if isinstance(value, (str, Mapping, list, tuple, type)):
        return False
    if not hasattr(kind, "__dataclass_fields__"):
        return False
    _DATACLASSES.add(kind)
    return True


_TEXTS = frozenset({str, type(None)})
_SEQUENCES = frozenset({list, tuple})
_FLAT = _SCALARS | {str}
_DICT = frozenset({dict})
_NONE = type(None)
_FLOAT = frozenset({float})
# The dataclasses found to be no string, mapping or sequence (a report's rows: one lookup each).
_DATACLASSES: set[type] = set()


class _Plan:
    """How redact reads one dataclass: the fields its constructor takes, readers of those
    annotated as strings (or None) and as numbers, and of the others. (A plain class: a
    dataclass costs its module's import the compiling of its methods.)"""

    __slots__ = ("names", "numbers", "other_getters", "others", "texts", "values")

    def __init__(self, kind: type) -> None:
        fields = [f for f in dataclasses.fields(kind) if f.init]  # dataclasses.fields is slow: once a class
        self.names = tuple(f.name for f in fields)
        texts = tuple(f.name for f in fields if _annotated(f.type, _TEXT_WORDS))
        numbers = tuple(f.name for f in fields if _annotated(f.type, _NUMBER_WORDS) and f.name not in texts)
        self.others = tuple(n for n in self.names if n not in texts and n not in numbers)
        names = self.names
        self.values: Callable[[Any], Sequence[Any]] = (
            operator.attrgetter(*names) if len(names) > 1 else (lambda v: tuple(getattr(v, n) for n in names))
        )
        self.texts = tuple(map(operator.attrgetter, texts))
        self.numbers = tuple(map(operator.attrgetter, numbers))
        self.other_getters = tuple(map(operator.attrgetter, self.others))


_PLANS: dict[type, _Plan] = {}
_TEXT_WORDS = frozenset({"str", "None"})
_NUMBER_WORDS = frozenset({"int", "float", "bool", "None"})


def _plan(kind: type) -> _Plan:
    plan = _PLANS.get(kind)
    if plan is None:
        plan = _PLANS[kind] = _Plan(kind)
    return plan


def _annotated(annotation: Any, words: frozenset[str]) -> bool:
    """Whether an annotation names only these types (a Literal of strings counts as "str")."""
    spelled = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return all(p in words or ("str" in words and _literal_strings(p)) for p in map(str.strip, spelled.split("|")))


def _literal_strings(spelled: str) -> bool:
    """Literal["a", 'b'] (an annotation only groups fields: a wrong guess costs time, not a result)."""
    head, _, rest = spelled.partition("[")
    args = [a.strip() for a in rest.removesuffix("]").split(",")]
    return head.removeprefix("typing.") == "Literal" and all(len(a) > 1 and a[0] == a[-1] in "'\"" for a in args)


def references(argv: Iterable[str]) -> tuple[str, ...]:
    """The variables a command line names by reference, in order, each once."""
    return tuple(dict.fromkeys(m.group(1) for arg in argv for m in REFERENCE.finditer(arg)))


def shell_form(command: str) -> str:
    """A shell command's references as the shell's own expansions ("${NAME}"): the shell takes the
    value from the child's environment, so it is in no command text at all."""
    return REFERENCE.sub(lambda m: "${" + m.group(1) + "}", command)


def substitute(argv: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """The command line the child is exec'd with: each reference replaced by its variable's value
    (a missing variable is the caller's error, checked before: KeyError here)."""
    return [REFERENCE.sub(lambda m: env[m.group(1)], arg) for arg in argv]
