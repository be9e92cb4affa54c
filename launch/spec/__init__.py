"""The pure spec model: loading, resolving and validating a run spec, its plan and SGLang argv, and the
errors that name what to change. The only part of launch/ that agent/ and audit/ import; it imports
only the standard library and schemas/."""
