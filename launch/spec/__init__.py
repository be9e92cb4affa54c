"""The pure spec model: loading, resolving and validating a run spec, its plan, SGLang and vLLM argv, and the
errors that name what to change. The only part of launch/ that agent/ and audit/ import; it imports
only the standard library and schemas/ (tests/test_import_graph.py)."""

# The modules agent/, audit/ and the launcher use; the rest (fields, sections, resolve, keys, miles,
# reference, ...) are how these are built. Nothing is imported here: each user imports what it needs.
__all__ = [
    "completion",
    "config",
    "console",
    "data_check",
    "errors",
    "load",
    "plan",
    "sglang_argv",
    "validate",
    "vllm_argv",
]
