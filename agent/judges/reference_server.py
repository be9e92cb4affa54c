"""A small OpenAI-compatible judge server for CPU machines, demos and tests (``backend = "reference"``).

It speaks the slice of SGLang's HTTP API the project uses: ``GET /health``, ``GET /v1/models``,
``POST /v1/chat/completions`` and ``POST /tokenize`` (alias ``/v1/tokenize``), with the same
request and response shapes. It is not a language model: it grades deterministically.

Grading. The user message carries the sections of :mod:`agent.judges._framing` (a template rubric's
message too, when the template uses those sections: the reply format and scale are then read from
the template's own words; one that asks for ``Final Decision: Yes|No`` gets one, yes from a score of
5 of 10). Both sides are
reduced to content words (lower-case alphanumeric runs minus a short stop-word list); the score
is round(10 * F1) of the candidate's content words against the reference answer's, or against
the question's when the request has no reference (relevance only). The reply follows the
rubric's output format::

    Reasoning: <how many key terms matched, precision and recall>
    SCORE: <0..10>

Tokenizer. Words, single punctuation marks and the ChatML markers are one token each; token ids
are CRC32-derived, so counts and ids are stable across processes. A chat request is rendered
with ChatML framing before counting, so ``/tokenize`` with ``messages`` counts what a chat
completion would see.

Ports. ``--port 0`` binds an ephemeral port and writes ``{"host", "port", "pid"}`` atomically to
``--port-file`` after the socket is listening, so nobody picks a port and releases it first.

Test hooks (``--fault KIND [VALUE]``, repeatable; also ``GYM_REFERENCE_JUDGE_FAULTS="k[=v],..."``):
``wrong`` scores known-bad above known-good; ``invalid`` replies without a SCORE line;
``invalid-after N`` does so from the (N+1)-th chat completion on (canaries pass, a driver's grades
then degrade);
``slow S`` sleeps S seconds in every chat completion; ``hang-health-after N`` stops answering
/health after N seconds (the connection is accepted, no reply is ever sent);
``crash-after N`` exits with status 70 after N seconds; ``loading S`` answers /health 503 for
the first S seconds (a large model loading); ``hang-after N`` accepts the (N+1)-th chat completion
and every later one and never answers them (a wedged engine whose /health still answers);
``agree-after S`` gives every answer the top score from S seconds after start on (a judge that
drifted: valid replies, no judgement), ``agree-when PATH`` once the file PATH exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.judges._framing import GradingPrompt, instructions_text, message_text, parse_messages
from agent.judges._port_file import write_port_file
from schemas.timefmt import iso_ms

CRASH_EXIT_CODE = 70
FAULTS_ENV = "GYM_REFERENCE_JUDGE_FAULTS"
DEFAULT_CONTEXT_LENGTH = 32768
SCORE_MAX = 10

_TOKEN = re.compile(r"<\|im_(?:start|end)\|>|\w+|[^\w\s]", re.UNICODE)
_CONTENT_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "when",
        "where",
        "with",
    }
)


# ---- tokenizer -------------------------------------------------------------------------------


def tokenize_text(text: str) -> list[int]:
    return [zlib.crc32(piece.encode("utf-8")) % 150_000 + 1000 for piece in _TOKEN.findall(text)]


def render_chat(messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """ChatML framing, as the judge's chat template would render the request."""
    rendered = "".join(f"<|im_start|>{m.get('role', 'user')}\n{message_text(m)}<|im_end|>\n" for m in messages)
    return rendered + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def _truncate_to_tokens(text: str, limit: int) -> str:
    pieces = list(_TOKEN.finditer(text))
    if len(pieces) <= limit:
        return text
    return text[: pieces[limit - 1].end()] if limit > 0 else ""


# ---- grading ---------------------------------------------------------------------------------


def content_words(text: str) -> set[str]:
    return {w for w in _CONTENT_WORD.findall(text.lower()) if w not in _STOPWORDS}


@dataclass(frozen=True)
class Verdict:
    score: int
    reasoning: str


def grade(prompt: GradingPrompt) -> Verdict:
    """round(10 * F1) of candidate content words against the reference (else the question)."""
    basis_name = "reference answer" if prompt.reference is not None else "question"
    basis = content_words(prompt.reference if prompt.reference is not None else prompt.question)
    candidate = content_words(prompt.candidate)
    shared = basis & candidate
    if not basis or not candidate or not shared:
        return Verdict(0, f"The candidate shares no key terms with the {basis_name}.")
    precision = len(shared) / len(candidate)
    recall = len(shared) / len(basis)
    f1 = 2 * precision * recall / (precision + recall)
    score = round(SCORE_MAX * f1)
    reasoning = (
        f"The candidate shares {len(shared)} of {len(basis)} key terms with the {basis_name} "
        f"(recall {recall:.2f}) and {len(candidate) - len(shared)} of its {len(candidate)} key "
        f"terms are not in it (precision {precision:.2f})."
    )
    return Verdict(score, reasoning)


_ASKED_SCALE = re.compile(r"an integer from (\d+) to (\d+)")


def _asked_format(messages: Sequence[Mapping[str, Any]], config: ServerConfig) -> tuple[str, tuple[int, int]]:
    """The reply format and scale to answer in: the server's fixed ones, else what the rubric asks."""
    system = instructions_text(messages)  # a template rubric has no system message
    asked = _ASKED_SCALE.search(system)
    scale = config.score_scale or ((int(asked.group(1)), int(asked.group(2))) if asked else (0, SCORE_MAX))
    wanted = "decision" if "final decision" in system.lower() else "json" if '"REASONING"' in system else "score_line"
    fmt = config.reply_format or wanted
    return fmt, scale


def _reply_text(
    messages: Sequence[Mapping[str, Any]], config: ServerConfig, chat: int, uptime: float
) -> tuple[str, int | None]:
    """The judge's reply to the ``chat``-th chat completion, in the format and scale asked, with
    the faults' changes; and its score (None: a reply the fault made invalid)."""
    parsed = parse_messages(messages)
    if parsed is None:
        verdict = Verdict(0, "The request has no <question> and <candidate_answer> sections to grade.")
    else:
        verdict = grade(parsed)
    tenths = SCORE_MAX - verdict.score if config.faults.wrong else verdict.score
    if config.faults.agreeing(uptime):
        tenths = SCORE_MAX  # a judge that drifted into agreeing with everything
    fmt, (low, high) = _asked_format(messages, config)
    score = round(low + (high - low) * tenths / SCORE_MAX)
    after = config.faults.invalid_after
    if config.faults.invalid or (after is not None and chat > after):
        return f"Reasoning: {verdict.reasoning}\nI would rather not give a number.", None
    if fmt == "json":
        return "```json\n" + json.dumps({"REASONING": verdict.reasoning, "SCORE": score}) + "\n```", score
    if fmt == "decision":
        return f"{verdict.reasoning}\nFinal Decision: {'Yes' if tenths * 2 >= SCORE_MAX else 'No'}", score
    return f"Reasoning: {verdict.reasoning}\nSCORE: {score}", score


# ---- faults ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Faults:
    wrong: bool = False
    invalid: bool = False
    invalid_after: float | None = None  # chat completions answered validly before `invalid` begins
    slow_s: float = 0.0
    hang_health_after_s: float | None = None
    crash_after_s: float | None = None
    no_tokenize: bool = False  # like an external service that serves no /tokenize
    loading_s: float = 0.0  # /health answers 503 this long after start, like a large model loading
    hang_after: float | None = None  # chat completions answered before every later one hangs
    agree_after_s: float | None = None  # from this long after start on, every answer gets the top score
    agree_when: str | None = None  # ... once this file exists

    def agreeing(self, uptime: float) -> bool:
        if self.agree_after_s is not None and uptime >= self.agree_after_s:
            return True
        return self.agree_when is not None and os.path.exists(self.agree_when)


_FAULT_KINDS = {
    "loading": True,
    "wrong": False,
    "invalid": False,
    "invalid-after": True,
    "no-tokenize": False,
    "slow": True,
    "hang-health-after": True,
    "crash-after": True,
    "hang-after": True,
    "agree-after": True,
    "agree-when": "path",
}


def parse_faults(specs: Sequence[Sequence[str]]) -> Faults:
    """Each spec is ``[KIND]`` or ``[KIND, VALUE]`` (``KIND=VALUE`` is split first)."""
    values: dict[str, Any] = {}
    for spec in specs:
        parts = list(spec)
        if len(parts) == 1 and "=" in parts[0]:
            parts = parts[0].split("=", 1)
        kind = parts[0]
        if kind not in _FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (known: {', '.join(_FAULT_KINDS)})")
        needs_value = _FAULT_KINDS[kind]
        if bool(needs_value) != (len(parts) == 2) or len(parts) > 2:
            raise ValueError(f"fault {kind!r} takes {'one value' if needs_value else 'no value'}")
        if needs_value == "path":
            values[kind] = parts[1]
        elif needs_value:
            number = float(parts[1])
            if number < 0:
                raise ValueError(f"fault {kind!r} needs a value >= 0")
            values[kind] = number
        else:
            values[kind] = True
    return Faults(
        wrong=bool(values.get("wrong", False)),
        invalid=bool(values.get("invalid", False)),
        invalid_after=values.get("invalid-after"),
        no_tokenize=bool(values.get("no-tokenize", False)),
        slow_s=float(values.get("slow", 0.0)),
        hang_health_after_s=values.get("hang-health-after"),
        crash_after_s=values.get("crash-after"),
        loading_s=float(values.get("loading", 0.0)),
        hang_after=values.get("hang-after"),
        agree_after_s=values.get("agree-after"),
        agree_when=values.get("agree-when"),
    )


def faults_from_env(value: str | None) -> list[list[str]]:
    if not value:
        return []
    return [[item.strip()] for item in value.split(",") if item.strip()]


# ---- HTTP ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerConfig:
    model: str
    context_length: int = DEFAULT_CONTEXT_LENGTH
    startup_delay_s: float = 0.0
    faults: Faults = Faults()
    # How it replies, so tests can exercise every format and scale a rubric may declare.
    # How it replies. None: as the rubric (the system message) asks, like a model that follows its
    # instructions; set: always so, for tests of a judge that does not.
    reply_format: str | None = None  # "score_line", or "json": {"REASONING": ..., "SCORE": N}
    score_scale: tuple[int, int] | None = None


class JudgeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung or slow handler must never keep the process alive at exit
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], config: ServerConfig) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.config = config
        self.started = time.monotonic()
        self.stopping = threading.Event()
        self.log_lock = threading.Lock()
        self.chats = 0  # chat completions begun (the invalid-after fault counts them)
        super().__init__(address, Handler)

    def uptime(self) -> float:
        return time.monotonic() - self.started

    def next_chat(self) -> int:
        with self.log_lock:
            self.chats += 1
            return self.chats


@dataclass(frozen=True)
class _ChatRequest:
    messages: list[dict[str, Any]]
    prompt_tokens: int
    budget: int  # output tokens the reply may use


def _completion(model: str, reply: str, finish_reason: str, prompt_tokens: int) -> dict[str, Any]:
    """A chat completion's body, as SGLang's OpenAI-compatible server shapes it."""
    completion_tokens = len(tokenize_text(reply))
    return {
        "id": f"chatcmpl-ref-{time.monotonic_ns():x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so clients' connection pools are exercised
    # Headers and body are two writes: without TCP_NODELAY the body waits for the peer's delayed ACK
    # (40 ms) on a kept-alive connection, as no real server (uvicorn sets it) makes anyone wait.
    disable_nagle_algorithm = True
    server: JudgeHTTPServer
    _status = 0

    # -- plumbing --

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per request is written by _log instead, to stdout

    def _log(self, started: float, note: str = "") -> None:
        # The access line SGLang's uvicorn prints ("METHOD PATH HTTP/1.1" STATUS): the audit counts
        # a judge's answered chat completions from its own log in this one shape (audit/_judge_replies.py).
        host, port = self.client_address[0], self.client_address[1]
        line = (
            f'{iso_ms(time.time())} INFO: {host}:{port} - "{self.command} {self.path} {self.request_version}" '
            f"{self._status} {time.monotonic() - started:.3f}s{(' ' + note) if note else ''}\n"
        )
        with self.server.log_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def _send_json(self, status: int, body: Mapping[str, Any]) -> None:
        payload = json.dumps(body).encode("utf-8")
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"object": "error", "message": message, "code": status})

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        return json.loads(raw or b"null")

    def _starting(self) -> bool:
        return self.server.uptime() < self.server.config.startup_delay_s

    # -- routes --

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        started = time.monotonic()
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            faults = self.server.config.faults
            if faults.hang_health_after_s is not None and self.server.uptime() >= faults.hang_health_after_s:
                # The connection stays open and silent: exactly what a wedged server looks like.
                self._status = 0
                self._log(started, "hang-health fault: not replying")
                self.server.stopping.wait()
                self.close_connection = True
                return
            if self._starting():
                self._send_json(503, {"status": "starting"})
            else:
                self._send_json(200, {"status": "ok"})
        elif path in ("/v1/models", "/models"):
            self._send_json(200, self._models())
        else:
            self._error(404, f"no route GET {path}")
        self._log(started)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        started = time.monotonic()
        path = self.path.split("?", 1)[0]
        note = ""
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"request body is not JSON: {exc}")
            self._log(started)
            return
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
        elif self._starting():
            self._error(503, "server is starting")
        elif path == "/v1/chat/completions":
            note = self._chat(body)
        elif path in ("/tokenize", "/v1/tokenize") and not self.server.config.faults.no_tokenize:
            self._tokenize(body)
        else:
            self._error(404, f"no route POST {path}")
        self._log(started, note)

    def _models(self) -> dict[str, Any]:
        config = self.server.config
        return {
            "object": "list",
            "data": [
                {
                    "id": config.model,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "gym-agent-reference-judge",
                    "root": config.model,
                    "max_model_len": config.context_length,
                }
            ],
        }

    def _tokenize(self, body: Mapping[str, Any]) -> None:
        messages, prompt = body.get("messages"), body.get("prompt")
        if (messages is None) == (prompt is None):
            self._error(400, "exactly one of 'prompt' or 'messages' must be provided")
            return
        if messages is not None:
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                self._error(400, "'messages' must be a list of objects")
                return
            generation = body.get("add_generation_prompt")
            tokens: Any = tokenize_text(render_chat(messages, add_generation_prompt=generation is not False))
            count: Any = len(tokens)
        elif isinstance(prompt, list):
            tokens = [tokenize_text(str(p)) for p in prompt]
            count = [len(t) for t in tokens]
        else:
            tokens = tokenize_text(str(prompt))
            count = len(tokens)
        self._send_json(200, {"tokens": tokens, "count": count, "max_model_len": self.server.config.context_length})

    def _chat(self, body: Mapping[str, Any]) -> str:
        config = self.server.config
        asked = self._chat_request(body)
        if asked is None:
            return ""
        if config.faults.slow_s > 0:
            time.sleep(config.faults.slow_s)
        chat = self.server.next_chat()
        if config.faults.hang_after is not None and chat > config.faults.hang_after:
            self._status = 0
            self.server.stopping.wait()  # accepted, never answered: the client's own timeout decides
            self.close_connection = True
            return "hang-after fault: not replying"
        reply, score = _reply_text(asked.messages, config, chat, self.server.uptime())
        finish_reason = "stop"
        if len(tokenize_text(reply)) > asked.budget:
            reply, finish_reason = _truncate_to_tokens(reply, asked.budget), "length"
        self._send_json(200, _completion(config.model, reply, finish_reason, asked.prompt_tokens))
        return f"score={score if score is not None else 'none'} finish={finish_reason}"

    def _chat_request(self, body: Mapping[str, Any]) -> _ChatRequest | None:
        """The chat completion asked for; None once a 400 said why it cannot be served."""
        config = self.server.config
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            self._error(400, "'messages' must be a non-empty list of objects")
            return None
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
            self._error(400, "'max_tokens' must be a positive integer")
            return None
        prompt_tokens = len(tokenize_text(render_chat(messages)))
        budget = max_tokens if max_tokens is not None else config.context_length - prompt_tokens
        if prompt_tokens + max(budget, 0) > config.context_length or budget <= 0:
            # Same behaviour class as SGLang: refuse rather than silently truncate the input.
            self._error(
                400,
                f"requested {prompt_tokens} prompt tokens + {budget} output tokens exceeds "
                f"the context length {config.context_length}",
            )
            return None
        return _ChatRequest(messages, prompt_tokens, budget)


# ---- CLI -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent.judges.reference_server",
        description="Deterministic OpenAI-compatible reference judge (CPU; demos and tests).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = an ephemeral port (see --port-file)")
    parser.add_argument("--port-file", help="write {host, port, pid} here atomically once listening")
    parser.add_argument("--model", required=True, help="served model name (listed by /v1/models)")
    parser.add_argument("--context-length", type=int, default=DEFAULT_CONTEXT_LENGTH)
    parser.add_argument(
        "--startup-delay",
        type=float,
        default=0.0,
        help="answer 503 for this many seconds, like a loading server",
    )
    parser.add_argument(
        "--reply-format", choices=("score_line", "json"), help="always reply so (default: as the rubric asks)"
    )
    parser.add_argument(
        "--score-scale", nargs=2, type=int, metavar=("MIN", "MAX"), help="always score so (default: as the rubric asks)"
    )
    parser.add_argument(
        "--fault",
        nargs="+",
        action="append",
        default=[],
        metavar="KIND [VALUE]",
        help="test hook: wrong | invalid | no-tokenize | slow S | hang-health-after N | crash-after N | loading S",
    )
    return parser


def _crash_later(after_s: float) -> None:
    def crash() -> None:
        sys.stdout.write(f"{iso_ms(time.time())} crash-after fault: exiting with status {CRASH_EXIT_CODE}\n")
        sys.stdout.flush()
        os._exit(CRASH_EXIT_CODE)

    timer = threading.Timer(after_s, crash)
    timer.daemon = True
    timer.start()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        faults = parse_faults([*args.fault, *faults_from_env(os.environ.get(FAULTS_ENV))])
    except ValueError as exc:
        print(f"reference_server: {exc}", file=sys.stderr)
        return 2
    config = ServerConfig(
        args.model,
        args.context_length,
        max(args.startup_delay, faults.loading_s),
        faults,
        reply_format=args.reply_format,
        score_scale=(args.score_scale[0], args.score_scale[1]) if args.score_scale else None,
    )
    server = JudgeHTTPServer((args.host, args.port), config)
    port = server.server_address[1]

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    if args.port_file:
        write_port_file(args.port_file, args.host, port)
    print(
        f"{iso_ms(time.time())} reference judge serving {args.model!r} on {args.host}:{port} "
        f"pid={os.getpid()} faults={faults}",
        flush=True,
    )
    if faults.crash_after_s is not None:
        _crash_later(faults.crash_after_s)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
